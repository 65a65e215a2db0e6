"""笔记本 05（推理与部署）的练习检查器。

用法与前几章相同：``gc.check.top_p(你的函数)`` 打印"正确 ✓"或一句说明哪里不对的中文，
并返回 True / False。参考答案是本文件里的 ``solution_*`` 函数，登记在共用的 ``SOLUTIONS`` 表里，
``gc.check.show_solution("top_p")`` 会打印它的源代码。
"""
from __future__ import annotations

import math

import torch

from ..config import preset
from ..model import GPT
from .nb01 import SOLUTIONS, _call, _fail, _ok  # 共用的答案登记表与提示工具

__all__ = ["temperature_softmax", "top_p", "repetition_penalty", "cached_attention_step",
           "greedy_decode", "kv_cache_bytes"]

NB05_EXERCISES = ("temperature_softmax", "top_p", "repetition_penalty", "cached_attention_step",
                  "greedy_decode", "kv_cache_bytes")



# ---------------------------------------------------------------- 参考答案
def solution_temperature_softmax(logits: torch.Tensor, tau: float) -> torch.Tensor:
    """softmax(logits / τ)；τ = 0 是贪心（argmax 处概率 1）；τ < 0 不是温度 → ValueError。"""
    if tau < 0:
        raise ValueError(f"温度必须 ≥ 0，收到 {tau}")
    if tau == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    return torch.softmax(logits / tau, dim=-1)


def solution_top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """核采样过滤：去掉"排在它前面的概率之和已经 ≥ p"的词元（设为 −∞），logits [V]。"""
    sorted_logits, order = torch.sort(logits, descending=True)
    probs = torch.softmax(sorted_logits, dim=-1)
    before = torch.cumsum(probs, dim=-1) - probs            # 排在前面的累计概率
    before[0] = 0.0
    remove = torch.zeros_like(logits, dtype=torch.bool)
    remove[order] = before >= p
    return logits.masked_fill(remove, float("-inf"))


def solution_repetition_penalty(logits: torch.Tensor, ids: list[int], penalty: float
                                ) -> torch.Tensor:
    """出现过的词元：正 logit 除以 penalty，负 logit 乘以 penalty。返回新张量，logits [V]。"""
    out = logits.clone()
    for i in set(ids):
        out[i] = out[i] / penalty if out[i] > 0 else out[i] * penalty
    return out


def solution_cached_attention_step(q, k_new, v_new, k_cache, v_cache):
    """一个新位置的注意力。q/k_new/v_new [B, H, 1, D]，缓存 [B, H, S, D]。

    返回 (y [B, H, 1, D], k_all, v_all [B, H, S+1, D])。新位置可以看全部 S+1 个键，不需要掩码。
    """
    k_all = torch.cat([k_cache, k_new], dim=2)
    v_all = torch.cat([v_cache, v_new], dim=2)
    att = q @ k_all.transpose(-2, -1) / math.sqrt(q.shape[-1])     # [B, H, 1, S+1]
    return att.softmax(-1) @ v_all, k_all, v_all


def solution_greedy_decode(model, ids: list[int], n: int) -> list[int]:
    """贪心地续写 n 个 id（不在结束符处停），每步只取最后一个位置的 logits。"""
    ids = list(ids)
    bs = model.config.block_size
    with torch.no_grad():
        for _ in range(n):
            logits, _ = model(torch.tensor([ids[-bs:]]))               # 裁剪到上下文长度
            ids.append(int(logits[0, -1].argmax()))
    return ids[-n:] if n else []


def solution_kv_cache_bytes(n_layer: int, batch: int, seq_len: int, n_embd: int,
                            bytes_per: int = 4) -> int:
    """KV 缓存的字节数：每层 K 和 V 各 [B, T, C] → 2·L·B·T·C·bytes。"""
    return 2 * n_layer * batch * seq_len * n_embd * bytes_per


SOLUTIONS.update({
    "temperature_softmax": solution_temperature_softmax,
    "top_p": solution_top_p,
    "repetition_penalty": solution_repetition_penalty,
    "cached_attention_step": solution_cached_attention_step,
    "greedy_decode": solution_greedy_decode,
    "kv_cache_bytes": solution_kv_cache_bytes,
})


def _close(a, b) -> bool:
    return isinstance(a, torch.Tensor) and a.shape == b.shape and bool(
        torch.allclose(a.float(), b.float(), atol=1e-5, equal_nan=True)
        and torch.equal(torch.isinf(a), torch.isinf(b)))


# ---------------------------------------------------------------- 检查器
def temperature_softmax(fn) -> bool:
    """练习：``fn(logits, tau)`` → 概率；τ=0 为贪心 one-hot，τ<0 抛 ValueError。"""
    x = torch.tensor([2.0, 1.0, 0.5, 0.1])
    for tau in (1.0, 0.5, 2.0, 0.0):
        got, err = _call(fn, x, tau)
        if err:
            return _fail(f"τ={tau}：{err}")
        want = solution_temperature_softmax(x, tau)
        if not _close(got, want):
            hint = "（τ=0 应该是 argmax 处为 1 的 one-hot）" if tau == 0 else ""
            return _fail(f"τ={tau} 时应得 {[round(v, 4) for v in want.tolist()]}，收到 {got}{hint}")
    try:
        fn(x, -1.0)
    except ValueError:
        return _ok()
    except Exception as e:  # noqa: BLE001
        return _fail(f"τ<0 应抛出 ValueError，收到 {type(e).__name__}")
    return _fail("τ=-1 不是温度，应抛出 ValueError（而不是悄悄地算出点什么）")


def top_p(fn) -> bool:
    """练习：``fn(logits, p)`` → 过滤后的 logits；越过 p 的那个词元要保留，第一名永远保留。"""
    x = torch.tensor([0.2, 0.5, 0.3]).log()
    g = torch.Generator().manual_seed(0)
    cases = [(x, 0.7), (x, 0.4), (x, 0.81), (x, 1e-6), (x, 1.0),
             (torch.randn(50, generator=g) * 2, 0.9)]
    for logits, p in cases:
        got, err = _call(fn, logits.clone(), p)
        if err:
            return _fail(f"p={p}：{err}")
        want = solution_top_p(logits, p)
        if not _close(got, want):
            kept, want_kept = (~torch.isinf(got)).sum().item() if isinstance(
                got, torch.Tensor) else "?", (~torch.isinf(want)).sum().item()
            return _fail(f"p={p} 时应保留 {want_kept} 个词元，你保留了 {kept} 个。"
                         "记住：累计概率刚好越过 p 的那个词元也要保留")
    return _ok()


def repetition_penalty(fn) -> bool:
    """练习：``fn(logits, ids, penalty)``：正的除、负的乘。"""
    x = torch.tensor([2.0, -2.0, 1.0, -0.5, 0.0])
    for ids, pen in (([0, 1], 2.0), ([1, 1, 3], 1.5), ([], 1.3), ([2, 4], 1.2)):
        got, err = _call(fn, x.clone(), ids, pen)
        if err:
            return _fail(err)
        want = solution_repetition_penalty(x, ids, pen)
        if not _close(got, want):
            if isinstance(got, torch.Tensor) and got.shape == x.shape and 1 in ids \
                    and got[1] > x[1]:
                return _fail("负的 logit 被你除以了 penalty，变大了——这个词元反而更可能出现。"
                             "负 logit 应该乘以 penalty")
            return _fail(f"ids={ids}, penalty={pen}：应得 {want.tolist()}，收到 {got}")
    return _ok()


def cached_attention_step(fn) -> bool:
    """练习：``fn(q, k_new, v_new, k_cache, v_cache)`` → (y, k_all, v_all)。

    y 必须等于整段因果注意力的最后一行。
    """
    g = torch.Generator().manual_seed(1)
    B, H, S, D = 2, 3, 5, 8
    q, k, v = (torch.randn(B, H, S + 1, D, generator=g) for _ in range(3))
    got, err = _call(fn, q[:, :, -1:], k[:, :, -1:], v[:, :, -1:], k[:, :, :-1], v[:, :, :-1])
    if err:
        return _fail(err)
    if not isinstance(got, tuple) or len(got) != 3:
        return _fail("应返回 (y, k_all, v_all) 三个张量")
    y, k_all, v_all = got
    if not (_close(k_all, k) and _close(v_all, v)):
        return _fail("k_all / v_all 应该是把新的 K、V 接在缓存后面（torch.cat 在序列那一维 dim=2）")
    full = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)[:, :, -1:]
    if not _close(y, full):
        return _fail("y 与整段因果注意力的最后一个位置不一致；别忘了除以 √D")
    return _ok()


def greedy_decode(fn) -> bool:
    """练习：``fn(model, ids, n)`` → 贪心续写的 n 个 id。"""
    torch.manual_seed(0)
    model = GPT(preset("mini", vocab_size=40, block_size=16, n_layer=1, n_embd=32,
                       dropout=0.0, attn_dropout=0.0, resid_dropout=0.0)).eval()
    for ids, n in (([1, 2, 3], 5), ([7], 20)):                      # 第二组超过 block_size
        got, err = _call(fn, model, ids, n)
        if err:
            return _fail(err)
        want = solution_greedy_decode(model, ids, n)
        got = list(got) if isinstance(got, (list, tuple)) else got
        if got != want:
            extra = "（超过 block_size=16 时要裁剪上下文）" if len(ids) + n > 16 else ""
            return _fail(f"ids={ids}, n={n}：应得 {want}，收到 {got}{extra}")
    return _ok()


def kv_cache_bytes(fn) -> bool:
    """练习：``fn(n_layer, batch, seq_len, n_embd, bytes_per)`` → KV 缓存字节数。"""
    for args in ((4, 1, 128, 256, 4), (12, 1, 1024, 768, 4), (12, 8, 1024, 768, 2)):
        got, err = _call(fn, *args)
        if err:
            return _fail(err)
        want = solution_kv_cache_bytes(*args)
        if got != want:
            hint = "（K 和 V 两份，别忘了乘 2）" if got == want // 2 else ""
            return _fail(f"参数 {args}：应得 {want:,} 字节，收到 {got!r}{hint}")
    return _ok()
