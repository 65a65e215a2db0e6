"""动态 int8 量化：把 Linear 层的权重存成 int8，推理时再把激活动态量化后做整数矩阵乘法。

- 权重：每个 Linear 的 fp32 矩阵 → int8 + 一个缩放系数（文件约小 4 倍）；
- 激活：每次前向时按当前数值范围临时量化（"动态"），不需要校准数据；
- 只对 Linear 生效；嵌入、归一化、RoPE、注意力里的 softmax 都保持 fp32。

**权重共享怎么办？** 课程模型的输出头 ``lm_head`` 与词嵌入 ``tok_emb`` 是同一个张量。
嵌入是查表，不能用 int8 的 Linear 代替；如果把 ``lm_head`` 也量化，它就变成了一份独立的
int8 副本——共享被打破，文件里同时有 fp32 的嵌入和 int8 的输出头。所以默认
（``include_head=False``）只量化各个块里的 Linear，输出头继续与嵌入共用 fp32 张量；
``include_head=True`` 时连输出头一起量化（更快，但文件更大，见笔记本 05 的对比）。

实现用 PyTorch 自带的 ``torch.ao.quantization.quantize_dynamic``（CPU 上的 fbgemm/x86
整数内核）。它在 torch 2.13 中仍然可用，但已标记为弃用（今后迁移到 torchao 的
``quantize_``），这里把弃用警告静音。
"""
from __future__ import annotations

import io
import time
import warnings

import torch
import torch.nn as nn

from .errors import UserError


def quantize_dynamic_int8(model: nn.Module, include_head: bool = False) -> nn.Module:
    """返回 model 的动态 int8 量化副本（原模型不变）。只支持 CPU。"""
    if next(model.parameters()).device.type != "cpu":
        raise UserError("动态 int8 量化只支持 CPU 上的模型；请先 model.to('cpu')")
    names = {n for n, m in model.named_modules() if isinstance(m, nn.Linear)
             and (include_head or n != "lm_head")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                       # 弃用提示，见模块说明
        from torch.ao.quantization import quantize_dynamic
        q = quantize_dynamic(model.eval(), names, dtype=torch.qint8, inplace=False)
    return q.eval()


def state_dict_bytes(model: nn.Module) -> int:
    """``torch.save(model.state_dict())`` 的字节数（共享的张量只存一次）。"""
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.save(model.state_dict(), buf)
    return buf.tell()


def linear_summary(model: nn.Module) -> dict[str, int]:
    """数一数有多少个 fp32 Linear、多少个 int8 动态量化 Linear。"""
    out = {"fp32 Linear": 0, "int8 Linear": 0}
    for m in model.modules():
        if isinstance(m, nn.Linear):
            out["fp32 Linear"] += 1
        elif type(m).__module__.startswith("torch.ao.nn.quantized") \
                and type(m).__name__ == "Linear":            # 不数内部的 LinearPackedParams
            out["int8 Linear"] += 1
    return out


@torch.inference_mode()
def decode_speed(model: nn.Module, n_tokens: int = 64, prompt_len: int = 8, batch: int = 1,
                 use_cache: bool = True, repeats: int = 1, seed: int = 0) -> float:
    """贪心解码 n_tokens 个词元（不在结束符处停）的速度，词元/秒（取 repeats 次中最快的一次）。

    直接调用模型：带缓存时每步只送入 1 个新词元；不带缓存时每步把整段（最多 block_size）重算。
    """
    cfg = model.config
    if prompt_len + n_tokens > cfg.block_size:
        raise UserError(f"prompt_len + n_tokens = {prompt_len + n_tokens} 超过 "
                         f"block_size={cfg.block_size}")
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(cfg.vocab_size, (batch, prompt_len), generator=g)   # [B, P]
    best = float("inf")
    for _ in range(repeats):
        idx = start.clone()
        t0 = time.perf_counter()
        cache = model.new_cache() if use_cache else None
        logits = model(idx, cache=cache)[0][:, -1]                            # 预填充
        for _ in range(n_tokens):
            nxt = logits.argmax(-1, keepdim=True)                             # [B, 1]
            idx = torch.cat([idx, nxt], dim=1)
            logits = (model(nxt, cache=cache) if use_cache else model(idx))[0][:, -1]
        best = min(best, time.perf_counter() - t0)
    return batch * n_tokens / best


def compare(model: nn.Module, quantized: nn.Module, val_ids: torch.Tensor,
            batch_size: int = 16, n_batches: int = 10, speed_tokens: int = 64,
            repeats: int = 3) -> dict[str, dict[str, float]]:
    """fp32 与 int8 并排：文件大小（MB）、验证损失、带缓存的解码速度（词元/秒）。"""
    from .train import estimate_loss

    T = model.config.block_size
    out = {}
    for name, m in (("fp32", model), ("int8", quantized)):
        loss = estimate_loss(m, {"val": val_ids}, batch_size, T, n_batches=n_batches)["val"]
        out[name] = {"size_mb": state_dict_bytes(m) / 1e6, "val_loss": loss,
                     "tokens_per_s": decode_speed(m, speed_tokens, repeats=repeats)}
    return out
