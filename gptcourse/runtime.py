"""运行环境：随机种子、设备（与它还剩多少内存）、快速模式与路径（最底层：只导入 errors）。"""
from __future__ import annotations

import os
import random
from pathlib import Path

import torch

from .errors import UserError

ROOT = Path(__file__).resolve().parent.parent          # 仓库根目录（可编辑安装时）
DATA_DIR = ROOT / "data"                                # 语料、许可证、预训练检查点
QUICK_ENV = "GPTCOURSE_QUICK"                           # =1 时笔记本缩短训练与采样


def is_quick() -> bool:
    """环境变量 GPTCOURSE_QUICK=1（测试套件会设置）时返回 True。"""
    return os.environ.get(QUICK_ENV, "0").strip().lower() not in ("", "0", "false", "no")


def set_seed(seed: int) -> None:
    """同时设置 Python、NumPy（若已安装）与 PyTorch 的随机种子；seed 必须在 [0, 2³²) 之内。"""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise UserError(f"seed 必须是 [0, 2**32) 之内的整数（NumPy 的种子范围），收到 {seed!r}")
    random.seed(seed)
    try:
        import numpy as np
        np.random.seed(seed)
    except ImportError:  # pragma: no cover
        pass
    torch.manual_seed(seed)


def get_device(prefer: str | None = None) -> torch.device:
    """自动选择设备：CUDA → Apple MPS → CPU；``prefer`` 可强制指定（不认识或不可用 → ValueError）。
    """
    if prefer:
        try:
            device = torch.device(prefer)
        except (RuntimeError, TypeError):
            raise UserError(f"不认识的设备 {prefer!r}；可选：cpu、cuda、cuda:0、mps") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise UserError(f"设备 {prefer!r} 不可用：这台机器没有可用的 CUDA")
        if device.type == "mps" and not _mps_available():
            raise UserError(f"设备 {prefer!r} 不可用：这台机器没有 Apple MPS")
        if device.type not in ("cpu", "cuda", "mps"):
            raise UserError(f"不支持的设备 {prefer!r}；可选：cpu、cuda、mps")
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    if _mps_available():
        return torch.device("mps")
    return torch.device("cpu")


def _mps_available() -> bool:
    return getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()


def available_memory(device: torch.device) -> int | None:
    """这台机器（或这块 GPU）现在还能用的内存字节数；不知道时 None。"""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
