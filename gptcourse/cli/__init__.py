"""命令行：``python -m gptcourse {train,generate,eval,serve,export} ...``。

入口层：每个子命令一个模块（``cli/train.py`` …，各有 ``cli_arguments(parser)`` 与
``cli_main(args)``），这里只负责分发。argparse 只出现在 ``cli/`` 里；库模块从不导入入口。

错误的约定按**类型**分：:class:`gptcourse.errors.UserError`（用户输入有误，包括
``CheckpointError``、``UnknownCharacterError``、配置与采样参数的错误）→ stderr 上一行中文，
退出码 2，没有堆栈。:class:`~gptcourse.errors.MachineError`（磁盘满、只读）→ 一行，退出码 1。
Ctrl+C → 一行“已中断”，退出码 130。其余任何异常都是程序的问题，照常显示堆栈。
``--debug`` 总是显示堆栈。
"""
from __future__ import annotations

import argparse
import importlib
import sys
import warnings

from ..errors import MachineError, UserError

COMMANDS = {
    "train": ("gptcourse.cli.train", "在语料上训练模型并保存检查点"),
    "generate": ("gptcourse.cli.generate", "用检查点写诗（默认使用随课程发布的模型）"),
    "eval": ("gptcourse.cli.eval", "评估检查点：损失、基线与验收表"),
    "serve": ("gptcourse.cli.serve", "启动本地网页演示"),
    "export": ("gptcourse.cli.export", "导出成 Hugging Face 的文件夹（transformers 直接加载）"),
}


# ---------------------------------------------------------------- 分发
def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """只导入被选中的那个子命令的模块（其余子命令只登记名字与说明）。"""
    parser = argparse.ArgumentParser(prog="python -m gptcourse",
                                     description="gptcourse：从零构建中文 GPT 的课程工具")
    parser.add_argument("--debug", action="store_true", help="出错时显示完整的堆栈")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            mod = importlib.import_module(module)
            mod.cli_arguments(p)
            p.set_defaults(func=mod.cli_main)
    return parser


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """命令行上的警告也只占一行：“警告：……”。"""
    print(f"警告：{' '.join(str(message).split())}", file=file or sys.stderr)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    warnings.showwarning = _one_line_warning
    command = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(command).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except MachineError as e:                          # 磁盘满、只读……：一行，退出码 1（先查：
        if args.debug:                                 # 写检查点的错误也是 CheckpointError）
            raise
        print(f"错误：{' '.join(str(e).split())}", file=sys.stderr)
        return 1
    except UserError as e:
        if args.debug:
            raise
        message = " ".join(str(e).split())            # 保证只有一行
        print(f"错误：{message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:                          # Ctrl+C：一行，不是堆栈；退出码 128 + SIGINT
        if args.debug:
            raise
        print("已中断（Ctrl+C）", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
