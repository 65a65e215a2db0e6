"""注意力里的四个经典错误：没有因果掩码、softmax 维度错、按 √n_embd 缩放、合并多头前没转置回来；
还有笔记本 04 的练习用到的三个：要学员改正的 ``buggy_attention``，只在后半段、只在一对位置之间
泄漏的注意力。

每个错误都是一个独立的函数（正确版本在旁边），可以装进一个真实的 GPT（``gallery_model``），
再由下面的检查函数抓出来（``leak_test`` 试遍每个 t）。它们只住在 ``gptcourse.mistakes`` 里，
正常的 API 永远用不到。
形状记号：q, k, v, y 为 [B, H, T, D]；合并后 [B, T, C]，C = H·D。
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..errors import UserError
from ..model import GPT, CausalSelfAttention, causal_attention, causal_mask, eval_mode
from ..rope import apply_rope
from .common import Diagnosis


# ---------------------------------------------------------------- 正确版本（参照）
def _causal(q) -> torch.Tensor:
    return causal_mask(q.shape[-2], q.device)                                 # [T, T]


def attention_core(q, k, v):
    """正确：就是模型用的 :func:`gptcourse.model.causal_attention`。[B,H,T,D] → [B,H,T,D]。"""
    return causal_attention(q, k, v, _causal(q))[0]


def merge_heads(y):
    """正确：[B, H, T, D] → 转置成 [B, T, H, D] → [B, T, C]。"""
    B, H, T, D = y.shape
    return y.transpose(1, 2).contiguous().view(B, T, H * D)


# ---------------------------------------------------------------- 错误版本
def attention_no_mask(q, k, v):
    """错误：忘了因果掩码——每个位置都看得见后面的字。"""
    att = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return F.softmax(att, dim=-1) @ v


def attention_softmax_wrong_dim(q, k, v):
    """错误：沿"查询"维（dim=-2）做 softmax——每一列而不是每一行加起来等于 1。"""
    att = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    att = att.masked_fill(~_causal(q), float("-inf"))
    return F.softmax(att, dim=-2) @ v


def attention_scaled_by_n_embd(q, k, v):
    """错误：除以 √C（= √(H·D)）而不是 √D——分数被多压小了 √H 倍，注意力变得过于平均。"""
    H, D = q.shape[1], q.shape[-1]
    att = q @ k.transpose(-2, -1) / math.sqrt(H * D)
    att = att.masked_fill(~_causal(q), float("-inf"))
    return F.softmax(att, dim=-1) @ v


def merge_heads_no_transpose(y):
    """错误：直接 reshape 成 [B, T, C]——形状对了，内容却把不同位置、不同头的数搅在一起。"""
    B, H, T, D = y.shape
    return y.reshape(B, T, H * D)


def buggy_attention(q, k, v):
    """[B, H, T, D] → [B, H, T, D] 的因果注意力——但有一个 bug，你能找到吗？"""
    T, D = q.shape[-2], q.shape[-1]
    att = q @ k.transpose(-2, -1) / math.sqrt(D)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-1)
    att = att.masked_fill(~mask, float("-inf"))
    return F.softmax(att, dim=-1) @ v


def _leaky(q, k, v, open_up):
    """[B, H, T, D] → [B, H, T, D]：因果掩码被 ``open_up(mask)`` 打开了几处的注意力。"""
    mask = _causal(q)                                                         # [T, T]
    open_up(mask)
    return causal_attention(q, k, v, mask)[0]


# 模块级的具名函数（不是闭包）：判分时模型要按名字送进裁判进程
def attention_late_leak(q, k, v):
    """错误：掩码只管住了前 8 个位置，第 8 个位置起能看见后面所有的字。"""
    return _leaky(q, k, v, lambda m: m[8:].fill_(True))


def attention_pair_leak(q, k, v):
    """错误：只有一处漏洞——第 2 个位置能看见第 3 个位置。"""
    return _leaky(q, k, v, lambda m: m[2, 3].fill_(True))


# ---------------------------------------------------------------- 装进真实模型
class GalleryAttention(nn.Module):
    """借用一个 CausalSelfAttention 的权重，但注意力核心与合并多头换成给定的函数。"""

    def __init__(self, base: CausalSelfAttention, core=attention_core, merge=merge_heads):
        super().__init__()
        self.base, self.core, self.merge = base, core, merge

    def forward(self, x, rope=None, cache=None, layer=0, start=0):
        if cache is not None:
            raise UserError("陈列馆里的模型不支持 KV 缓存")
        B, T, C = x.shape
        a = self.base
        q, k, v = (t.view(B, T, a.n_head, a.head_dim).transpose(1, 2) for t in a.split_qkv(x))
        if a.use_rope:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        y = self.merge(self.core(q, k, v))                               # [B, T, C]
        return a.resid_drop(a.proj(y))


def gallery_model(cfg, core=attention_core, merge=merge_heads) -> GPT:
    """一个真实的 GPT，但每层注意力用指定的 core / merge（参数与普通 GPT 完全相同）。"""
    model = GPT(cfg)
    for block in model.blocks:
        block.attn = GalleryAttention(block.attn, core, merge)
    return model


# ---------------------------------------------------------------- 检查
def _logits(out) -> torch.Tensor:
    return out[0] if isinstance(out, tuple) else out      # GPT：(logits, loss)；学员的：logits


@torch.no_grad()
def leak_test(model, seed: int = 0, T: int | None = None) -> float:
    """泄漏测试：对每个 t，改掉位置 t 之后的所有字，看位置 0…t 的 logits 最多变了多少；
    返回所有 t 里的最大变化（正确的模型 = 0；输出里有 NaN 时是 NaN）。每个 t 都要试：泄漏可能
    只发生在某一对位置之间。``T`` 默认是 ``model.config.block_size``。"""
    g = torch.Generator().manual_seed(seed)
    V, T = model.tok_emb.num_embeddings, T or model.config.block_size
    idx = torch.randint(V, (2, T), generator=g)                              # [2, T]
    diffs = []
    with eval_mode(model):                                  # dropout 会让两次前向本来就不同
        a = _logits(model(idx))
        for t in range(T - 1):
            changed = idx.clone()
            changed[:, t + 1:] = (idx[:, t + 1:] + 1 + torch.randint(
                V - 1, (2, T - t - 1), generator=g)) % V                       # 每个都变
            diffs.append((a[:, :t + 1] - _logits(model(changed))[:, :t + 1]).abs().max())
    return float(torch.stack(diffs).max()) if diffs else 0.0                 # max 保留 NaN


def check_no_future_leak(model, tol: float = 1e-5) -> Diagnosis:
    """改动"未来"的字，过去位置的输出必须一动不动。"""
    diff = leak_test(model)
    if not diff <= tol:                                     # NaN 也算没通过
        return Diagnosis(False, f"改动后面的字，前面位置的 logits 最多变了 {diff:.3g}："
                                "模型偷看了未来")
    return Diagnosis(True, f"前面位置的 logits 完全不受后面的字影响（最大变化 {diff:.1g}）")


def attention_weights(core, q, k) -> torch.Tensor:
    """从一个只返回输出的注意力函数里"读出"权重矩阵：令 v 的第 j 行是第 j 个单位向量，
    则输出的第 i 行正好是权重的第 i 行。需要 D ≥ T。返回 [B, H, T, T]。"""
    B, H, T, D = q.shape
    if D < T:
        raise UserError(f"读出权重需要 head_dim ≥ T，收到 D={D}, T={T}")
    v = torch.eye(T, D).expand(B, H, T, D)
    return core(q, k, v)[..., :T]


def _random_qk(seed=0, B=1, H=4, T=8, D=16):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, H, T, D, generator=g), torch.randn(B, H, T, D, generator=g)


def check_softmax_rows(core) -> Diagnosis:
    """每个查询的权重（每一行）必须非负、加起来等于 1，而且对角线右上方全是 0。"""
    q, k = _random_qk()
    w = attention_weights(core, q, k)                                    # [B, H, T, T]
    rows = w.sum(-1)
    future = w.triu(1).abs().max().item()
    if not torch.allclose(rows, torch.ones_like(rows), atol=1e-5):
        return Diagnosis(False, f"权重的行和在 {rows.min():.3f}…{rows.max():.3f} 之间，应处处为 1："
                                "softmax 沿错了维度")
    if future > 1e-6:
        return Diagnosis(False, f"未来位置的权重最大 {future:.3f}，应为 0：没有因果掩码")
    return Diagnosis(True, "每行权重和为 1，未来位置的权重为 0")


def implied_scale(core, seed: int = 0) -> float:
    """从权重反推分数乘了多少：log w_ij − log w_i0 = s·(q_i·k_j − q_i·k_0)，最小二乘求 s。"""
    q, k = _random_qk(seed)
    w = attention_weights(core, q, k).double()
    s = (q @ k.transpose(-2, -1)).double()                               # 未缩放的分数
    i, j = torch.tril_indices(8, 8, offset=-1)                           # j < i（都看得见）
    dy = (w.log()[..., i, j] - w.log()[..., i, 0]).flatten()
    dx = (s[..., i, j] - s[..., i, 0]).flatten()
    return float((dx * dy).sum() / (dx * dx).sum())


def check_attention_scale(core, head_dim: int = 16) -> Diagnosis:
    """分数应乘以 1/√D（D = 每个头的维度）。"""
    s = implied_scale(core)
    want = 1 / math.sqrt(head_dim)
    if not math.isfinite(s) or abs(s / want - 1) > 0.01:
        return Diagnosis(False, f"分数实际乘了 {s:.4f} ≈ 1/√{1 / s**2:.0f}，应乘 1/√D = "
                                f"1/√{head_dim} = {want:.4f}")
    return Diagnosis(True, f"分数乘了 1/√{head_dim}")


def check_merge_heads(merge) -> Diagnosis:
    """合并多头：输出第 t 个位置必须只含第 t 个位置的数（按 头0 的 D 维、头1 的 D 维…排列）。"""
    B, H, T, D = 1, 4, 6, 3
    t = torch.arange(T).view(1, 1, T, 1)
    c = (torch.arange(H).view(1, H, 1, 1) * D + torch.arange(D).view(1, 1, 1, D))
    y = (t * 100 + c).float().expand(B, H, T, D)                       # 值 = 位置·100 + 通道
    want = (torch.arange(T)[:, None] * 100 + torch.arange(H * D)).float()
    got = merge(y)
    if got.shape != (B, T, H * D):
        return Diagnosis(False, f"输出形状 {tuple(got.shape)}，应为 {(B, T, H * D)}")
    bad = (got[0] != want).any(-1).nonzero().flatten().tolist()
    if bad:
        pos = sorted({int(x) // 100 for x in got[0, bad[0]].tolist()})
        return Diagnosis(False, f"输出的第 {bad[0]} 个位置混进了位置 {pos} 的数："
                                "合并前没把 H 转置回去")
    return Diagnosis(True, "每个位置只含自己的数，各头按顺序拼接")


def check_matches_reference(core) -> Diagnosis:
    """与 PyTorch 的 F.scaled_dot_product_attention(is_causal=True) 逐元素比较。"""
    q, k = _random_qk(1)
    v = torch.randn_like(q)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    diff = (core(q, k, v) - ref).abs().max().item()
    if diff > 1e-5:
        return Diagnosis(False, f"与 PyTorch 参照实现相差 {diff:.3g}")
    return Diagnosis(True, "与 F.scaled_dot_product_attention 一致")
