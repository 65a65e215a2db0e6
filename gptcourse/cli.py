"""命令行：``python -m gptcourse {train,generate,eval,serve} ...``。

每个子命令的参数和实现住在它所属的模块里（``cli_arguments(parser)`` 与 ``cli_main(args)``），
这里只负责分发，所以 ``--help`` 与真正的行为不会脱节。
"""
from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = {
    "train": ("gptcourse.train", "在语料上训练模型并保存检查点"),
    "generate": ("gptcourse.generate", "用检查点写诗（默认使用随课程发布的模型）"),
    "eval": ("gptcourse.evaluate", "评估检查点：损失、基线与验收表"),
    "serve": ("gptcourse.serve", "启动本地网页演示"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """只导入被选中的那个子命令的模块（其余子命令只登记名字与说明）。"""
    parser = argparse.ArgumentParser(prog="python -m gptcourse",
                                     description="gptcourse：从零构建中文 GPT 的课程工具")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            mod = importlib.import_module(module)
            mod.cli_arguments(p)
            p.set_defaults(func=mod.cli_main)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv[0] if argv else None).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as e:      # 输入有误：给出清楚的一句话，而不是堆栈
        print(f"错误：{e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
