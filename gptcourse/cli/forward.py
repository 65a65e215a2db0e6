"""旧命令名的转发：课堂工具、基准与笔记本运行器已从学习者的包 ``gptcourse`` 移到
教师与维护者的包 ``gptcourse_kit``。旧名字（``python -m gptcourse.classroom`` ……）再保留一个版本：
先在 stderr 上说一句新名字，再原样运行新命令（参数、退出码都不变）。

``gptcourse`` 里只有这个文件提到 ``gptcourse_kit``（``tests/test_layers.py`` 检查），而且它只
*运行*那条命令，不导入其中的任何名字：学习者的包不依赖课堂工具。
"""
from __future__ import annotations

import runpy
import sys

KIT = "gptcourse_kit"


def forward(old: str) -> None:
    """``python -m gptcourse.X`` → ``python -m gptcourse_kit.X``。"""
    new = KIT + old.removeprefix("gptcourse")
    print(f"提示：python -m {old} 已改名为 python -m {new}（旧名字只保留这一个版本）",
          file=sys.stderr)
    runpy.run_module(new, run_name="__main__", alter_sys=True)
