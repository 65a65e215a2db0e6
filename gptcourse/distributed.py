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


def any_rank(flag: bool) -> bool:
    """任一进程为 True 则所有进程都得到 True（按时间停止时各进程必须一起停）。"""
    if not dist.is_initialized():
        return flag
    t = torch.tensor([1.0 if flag else 0.0])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())
