"""命令行：``python -m gptcourse {train,generate,eval,serve} ...``。

每个子命令的参数和实现住在它所属的模块里（``cli_arguments(parser)`` 与 ``cli_main(args)``），
这里只负责分发，所以 ``--help`` 与真正的行为不会脱节。

错误的约定：用户输入有误（gptcourse 自己的检查抛出的 ``ValueError`` / ``FileNotFoundError``，
包括 ``CheckpointError`` 与 ``UnknownCharacterError``）→ stderr 上一行中文，退出码 2，没有堆栈。
别处（torch、标准库内部）抛出的异常是程序的问题，照常显示堆栈。``--debug`` 总是显示堆栈。
"""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

COMMANDS = {
    "train": ("gptcourse.train", "在语料上训练模型并保存检查点"),
    "generate": ("gptcourse.generate", "用检查点写诗（默认使用随课程发布的模型）"),
    "eval": ("gptcourse.evaluate", "评估检查点：损失、基线与验收表"),
    "serve": ("gptcourse.serve", "启动本地网页演示"),
}
PACKAGE_DIR = Path(__file__).resolve().parent


# ---------------------------------------------------------------- argparse 的 type= 函数
def port_number(text: str) -> int:
    """``--port``：0–65535 的整数（0 = 让系统挑一个空闲端口）。"""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"端口必须是整数，收到 {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"端口必须在 0–65535 之间，收到 {port}")
    return port


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


def is_user_error(e: BaseException) -> bool:
    """由 gptcourse 自己的检查抛出的 ValueError / FileNotFoundError（最里层的栈帧在本包里）。"""
    if not isinstance(e, (ValueError, FileNotFoundError)):
        return False
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and Path(tb.tb_frame.f_code.co_filename).resolve().is_relative_to(
        PACKAGE_DIR)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(command).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except Exception as e:
        if args.debug or not is_user_error(e):
            raise
        message = " ".join(str(e).split())            # 保证只有一行
        print(f"错误：{message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
