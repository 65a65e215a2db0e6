"""把同一个训练循环扩展到多进程：``torchrun --nproc_per_node=2 -m gptcourse train ...``。

torchrun 为每个进程设置 RANK / WORLD_SIZE / MASTER_ADDR 等环境变量。这里：
CPU 用 gloo、GPU 用 NCCL 建进程组；模型包进 DistributedDataParallel，
反向传播时各进程的梯度自动求平均，所以每一步之后所有进程的权重完全相同。
单进程运行时，这些函数都退化为"什么也不做"。
"""
from __future__ import annotations

import contextlib
import os

import torch
import torch.distributed as dist


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def init() -> None:
    """在 torchrun 下初始化进程组（重复调用无害）。"""
    if launched_by_torchrun() and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))


def cleanup() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def wrap(model: torch.nn.Module) -> torch.nn.Module:
    """多进程时返回 DDP 包装后的模型，否则原样返回。"""
    if not dist.is_initialized():
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP
    device_ids = [model.lm_head.weight.device.index] if torch.cuda.is_available() else None
    return DDP(model, device_ids=device_ids)


def no_sync(ddp_model: torch.nn.Module, last: bool):
    """梯度累积时，只在最后一个微批次同步梯度（其余微批次跳过通信）。"""
    if hasattr(ddp_model, "no_sync") and not last:
        return ddp_model.no_sync()
    return contextlib.nullcontext()


def from_rank0(value: float) -> float:
    """返回 0 号进程上的 value（按时间计预算时各进程必须用同一个时钟，才会同步停止、
    用同一个学习率）。单进程时原样返回。"""
    if not dist.is_initialized():
        return value
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"      # NCCL 只收 GPU 张量
    t = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.broadcast(t, src=0)
    return float(t.item())
