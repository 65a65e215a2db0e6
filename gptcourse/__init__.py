"""gptcourse —— 从零构建、训练、评估与部署一个中文 GPT 的课程配套包。

用法::

    import gptcourse as gc
    gc.setup(seed=0)
    corpus = gc.data.load_corpus("tang_jinti")

子模块在第一次访问时才导入（``gc.model``、``gc.train`` ……），
这样 ``import gptcourse`` 很快，也不会把绘图库拖进训练脚本。

包的分层（``LAYERS``；下层从不导入上层，``tests/test_layers.py`` 检查这张表与 ``LAYERS`` 相同）::

    L0 runtime errors config files                 基础：种子、设备、路径、错误类型、配置、写文件
    L1 verse titles tokenizer bpe data titled      文字与数据
    L2 rope model                                  模型
    L3 precision distributed objectives optim train checkpoint   训练与存储
    L4 sampling constraints fastdecode generate evaluate acceptance quantize rhyme_probe machine
                                                   推理、评估与本机
    L5 release export                              发布设置、导出到 Hugging Face
    L6 serve/                                      网页演示
    L7 cli/ __main__                               命令行（argparse 只在这里）
    T  walkthrough viz/ mistakes/ check/           教学（可以导入 L0–L6）
    F  bench/ classroom/ notebooks                 旧命令名的转发（保留一个版本，cli/forward.py）

课堂工具、评分、幻灯片、基准与笔记本运行器不在这个包里：它们是教师与维护者的工具包
（仓库里与本包并列，见 README 的“仓库结构”）；那个包可以导入本包，本包从不导入它。

``import gptcourse``（门面）与 ``importlib.import_module`` 只在门面和 L7 里用：库和教学模块
直接导入它们要的模块，依赖才看得见。
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .runtime import DATA_DIR, QUICK_ENV, ROOT, get_device, is_quick, set_seed

__version__ = "0.1.0"

# 包的分层：层 → 这一层的顶层模块（包的说明里的表、README 的表与它相同，tests/test_layers.py 检查）
LAYERS: dict[str, tuple[str, ...]] = {
    "L0": ("runtime", "errors", "config", "files"),
    "L1": ("verse", "titles", "tokenizer", "bpe", "data", "titled"),
    "L2": ("rope", "model"),
    "L3": ("precision", "distributed", "objectives", "optim", "train", "checkpoint"),
    "L4": ("sampling", "constraints", "fastdecode", "generate", "evaluate", "acceptance",
           "quantize", "rhyme_probe", "machine"),
    "L5": ("release", "export"),
    "L6": ("serve",),
    "L7": ("cli", "__main__"),
    "T": ("walkthrough", "viz", "mistakes", "check"),
    "F": ("bench", "classroom", "notebooks"),
}
# gc.<名字> → 子模块（第一次访问时导入）：L0–L6 与教学模块。命令行 cli 与转发不在这里：
# 它们是程序，不是课程的 API（用 python -m gptcourse… 运行）。
MODULES = tuple(m for layer, names in LAYERS.items() if layer not in ("L7", "F") for m in names)

if TYPE_CHECKING:  # 让编辑器与类型检查器看得见 gc.<模块>
    from . import (
        acceptance,
        bpe,
        check,
        checkpoint,
        config,
        constraints,
        data,
        distributed,
        errors,
        evaluate,
        export,
        fastdecode,
        generate,
        machine,
        mistakes,
        model,
        objectives,
        optim,
        precision,
        quantize,
        release,
        rhyme_probe,
        rope,
        runtime,
        sampling,
        serve,
        titled,
        titles,
        tokenizer,
        train,
        verse,
        viz,
        walkthrough,
    )


@dataclass(frozen=True)
class Settings:
    seed: int
    quick: bool
    device: object
    font: str | None

    def __repr__(self) -> str:  # 笔记本里打印得短一些
        mode = "快速模式" if self.quick else "完整模式"
        return f"Settings(seed={self.seed}, {mode}, device={self.device.type}, font={self.font!r})"


def setup(seed: int = 0, quick: bool | None = None, plots: bool = True) -> Settings:
    """笔记本的第一行：设种子、选设备、注册中文字体与绘图默认值，返回当前设置。

    ``quick=None`` 时读取环境变量 GPTCOURSE_QUICK。
    """
    if quick is not None:
        os.environ[QUICK_ENV] = "1" if quick else "0"
    set_seed(seed)
    font = None
    if plots:
        from .viz.fonts import configure_matplotlib
        font = configure_matplotlib()
    return Settings(seed=seed, quick=is_quick(), device=get_device(), font=font)


__all__ = ["DATA_DIR", "ROOT", "Settings", "get_device", "is_quick", "set_seed", "setup",
           *MODULES]


def __getattr__(name: str):
    if name in MODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'gptcourse' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(MODULES))
