"""生成时的三个错误：输入超过 block_size、温度 0（除以零）、top-k 大于词表。"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..errors import UserError
from .common import Diagnosis


# ---------------------------------------------------------------- 1. 输入超过 block_size
@torch.no_grad()
def generate_without_crop(model, idx: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """错误：每一步把整段历史都喂给模型，序列一长过 block_size 就出错。"""
    for _ in range(max_new_tokens):
        logits, _ = model(idx)                                          # 没有裁剪！
        idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return idx


@torch.no_grad()
def generate_with_crop(model, idx: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """正确：只把最后 block_size 个词元喂给模型。"""
    for _ in range(max_new_tokens):
        logits, _ = model(idx[:, -model.config.block_size:])
        idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return idx


def check_long_generation(gen_fn, model) -> Diagnosis:
    """生成比 block_size 多 8 个词元：必须不报错，而且长度正确。"""
    model.eval()
    n = model.config.block_size + 8
    idx = torch.zeros(1, 1, dtype=torch.long)
    try:
        out = gen_fn(model, idx, n)
    except (ValueError, IndexError, RuntimeError) as e:
        return Diagnosis(False, f"生成到第 {model.config.block_size} 个词元之后出错："
                                f"{type(e).__name__}: {str(e).splitlines()[0][:80]}")
    if out.shape != (1, n + 1):
        return Diagnosis(False, f"输出形状 {tuple(out.shape)}，应为 (1, {n + 1})")
    T = model.config.block_size
    return Diagnosis(True, f"生成了 {n} 个词元（超过 block_size={T}）也没问题")


# ---------------------------------------------------------------- 2. 温度 0
def sample_naive(logits: torch.Tensor, temperature: float,
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """错误：直接 logits / temperature——温度为 0 时除以零，概率变成 nan。"""
    probs = F.softmax(logits / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)


def sample_safe(logits: torch.Tensor, temperature: float,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """正确：温度 0 表示"不采样、取最大"（贪心）；负温度给出清楚的错误。"""
    if temperature < 0:
        raise UserError(f"temperature 必须 ≥ 0（0 表示贪心解码），收到 {temperature}")
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    probs = F.softmax(logits / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)


def check_temperature_zero(sample_fn) -> Diagnosis:
    """温度 0：要么等于贪心（argmax），要么抛出说清原因的 ValueError；绝不能出 nan 或崩溃。"""
    logits = torch.tensor([[0.0, 2.0, -1.0, 0.5]])
    try:
        out = sample_fn(logits, 0.0)
    except ValueError as e:
        return Diagnosis(True, f"温度 0 得到清楚的错误：{e}")
    except RuntimeError as e:
        return Diagnosis(False, f"温度 0 时崩溃（{str(e).splitlines()[0][:70]}）："
                                "logits / 0 得到 ±inf 与 nan，softmax 之后全是 nan")
    if int(torch.as_tensor(out).flatten()[0]) != 1:
        return Diagnosis(False, f"温度 0 应取概率最大的词元 1，实际得到 {out.flatten().tolist()}")
    return Diagnosis(True, "温度 0 等于贪心解码（取 argmax）")


# ---------------------------------------------------------------- 3. top-k 大于词表
def top_k_naive(logits: torch.Tensor, k: int) -> torch.Tensor:
    """错误：直接 torch.topk(logits, k)——k 比词表还大时报错。"""
    kth = torch.topk(logits, k).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def top_k_safe(logits: torch.Tensor, k: int) -> torch.Tensor:
    """正确：k 先裁到词表大小（k ≥ V 时就是不过滤）；k < 1 给出清楚的错误。"""
    if k < 1:
        raise UserError(f"top_k 必须 ≥ 1，收到 {k}")
    k = min(k, logits.shape[-1])
    kth = torch.topk(logits, k).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def check_top_k(filter_fn) -> Diagnosis:
    """k = V + 5 时应原样返回 logits；k = 1 时只留最大的那个。"""
    logits = torch.tensor([[0.0, 2.0, -1.0, 0.5]])
    try:
        big = filter_fn(logits, logits.shape[-1] + 5)
    except (RuntimeError, IndexError) as e:
        return Diagnosis(False, f"k 大于词表大小 {logits.shape[-1]} 时崩溃："
                                f"{str(e).splitlines()[0][:70]}")
    if not torch.equal(big, logits):
        return Diagnosis(False, "k ≥ 词表大小时应该什么都不过滤")
    one = filter_fn(logits, 1)
    if torch.isfinite(one).sum() != 1 or one[0, 1] != 2.0:
        return Diagnosis(False, "k = 1 时应只留下最大的 logit")
    return Diagnosis(True, "k 大于词表时自动裁到词表大小")
