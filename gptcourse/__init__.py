"""gptcourse —— 从零构建、训练、评估与部署一个中文 GPT 的课程配套包。

用法::

    import gptcourse as gc
    gc.setup(seed=0)
    corpus = gc.data.load_corpus("tang_jinti")

子模块在第一次访问时才导入（``gc.model``、``gc.train`` ……），
这样 ``import gptcourse`` 很快，也不会把绘图库拖进训练脚本。
"""
from __future__ import annotations

import importlib

from .runtime import DATA_DIR, ROOT, Settings, get_device, is_quick, set_seed, setup

__version__ = "0.1.0"

_SUBMODULES = {
    "acceptance", "bench", "bpe", "check", "checkpoint", "classroom", "cli", "config",
    "constraints", "data", "distributed", "evaluate", "generate", "mistakes", "model", "notebooks",
    "precision", "quantize", "release", "rope", "runtime", "sampling", "serve", "tokenizer", "train",
    "train_cli", "verse", "viz", "walkthrough",
}

__all__ = ["DATA_DIR", "ROOT", "Settings", "get_device", "is_quick", "set_seed", "setup",
           *sorted(_SUBMODULES)]


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'gptcourse' has no attribute {name!r}")
