"""训练的数值精度：bf16 用不用（按硬件能力决定，不靠计时），以及两种 bf16 做法。

- ``bf16_decision(device)``：CPU 看 /proc/cpuinfo 里有没有 ``avx512_bf16`` / ``amx_bf16`` 指令，
  CUDA 看 ``torch.cuda.is_bf16_supported()``。同一台机器永远得到同一个答案（和它的理由），
  所以同一条命令、同一个种子 → 同一组权重。没有这些指令的 CPU 只能靠转换模拟 bf16，
  在课程的机器上训练慢约 30 倍。
- 两种 bf16 做法（``TrainConfig.bf16_mode``）：
  ``"autocast"``：权重仍是 fp32，``torch.autocast`` 只在矩阵乘法里临时转成 bf16；
  ``"weights"``：另存一份 bf16 权重做前向与反向，fp32 的"主权重"（就是 model 自己的参数）
  接收转回 fp32 的梯度、做裁剪和 AdamW，再拷回 bf16 副本。模型、优化器、检查点都还是 fp32。
"""
from __future__ import annotations

import contextlib
import copy
import functools

import torch

BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
BF16_MODES = ("autocast", "weights")


@functools.lru_cache(maxsize=1)
def cpu_info() -> tuple[str, frozenset[str]]:
    """(CPU 型号, 指令集标志)，读 /proc/cpuinfo；读不到时型号为空、标志为空集。"""
    name, flags = "", frozenset()
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and not name:
                    name = value.strip()
                elif key.strip() in ("flags", "Features") and not flags:
                    flags = frozenset(value.split())
    return name, flags


def bf16_decision(device: torch.device | str = "cpu") -> tuple[bool, str]:
    """(是否用 bf16, 中文理由)：只看硬件能力，不计时，所以每次都一样。"""
    device = torch.device(device)
    if device.type == "cuda":
        ok = torch.cuda.is_bf16_supported()
        return ok, f"GPU {'支持' if ok else '不支持'} bf16"
    if device.type != "cpu":
        return False, f"{device.type} 设备上不用 bf16"
    have = sorted(set(BF16_CPU_FLAGS) & cpu_info()[1])
    if have:
        return True, f"CPU 有 {'/'.join(have)} 指令"
    return False, "CPU 没有 avx512_bf16 / amx_bf16 指令，bf16 只能靠转换模拟、比 fp32 慢得多"


def resolve_bf16(setting: bool | str, device: torch.device | str) -> tuple[bool, str]:
    """把 TrainConfig.bf16（True / False / "auto"）变成 (是否用 bf16, 理由)。"""
    if setting == "auto":
        return bf16_decision(device)
    return bool(setting), "手动" + ("打开" if setting else "关闭")


class Bf16Weights:
    """bf16 权重副本 + fp32 主权重。

    ``low`` 是 model 的一份 bf16 深拷贝（共享的权重在副本里仍然共享），前向与反向都在它上面做；
    ``grads_to_master()`` 把它的梯度转成 fp32 放进 model 的 ``.grad``（之后照常裁剪、step），
    ``master_to_low()`` 在 step 之后把更新过的 fp32 权重拷回 bf16 副本。
    """

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.low = copy.deepcopy(model).to(torch.bfloat16)
        self.low.train(model.training)
        self.pairs = [(p, q) for p, q in zip(model.parameters(), self.low.parameters())]

    @torch.no_grad()
    def grads_to_master(self) -> None:
        for p, q in self.pairs:
            p.grad = None if q.grad is None else q.grad.float()
            q.grad = None

    @torch.no_grad()
    def master_to_low(self) -> None:
        torch._foreach_copy_([q for _, q in self.pairs], [p for p, _ in self.pairs])
