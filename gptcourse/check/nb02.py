"""笔记本 02（注意力与因果掩码）的练习检查器。

用法与笔记本 01 相同：``gc.check.causal_mask(你的函数)`` 打印"正确 ✓"或一句说明哪里不对的
中文，并返回 True / False。参考答案是本文件里的 ``solution_*`` 函数，它们登记在共用的
``SOLUTIONS`` 表里，所以 ``gc.check.show_solution("causal_mask")`` 会打印它的源代码。
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..config import preset
from ..model import GPT, count_parameters

from .nb01 import SOLUTIONS, _call, _fail, _ok  # 共用的答案登记表与提示工具

__all__ = ["EXERCISE_CONFIG", "causal_mask", "split_merge_heads", "rope_pair", "param_count",
           "scaled_attention", "layernorm"]

# 练习 4 要数参数的配置：mini 设计（学习式位置、LayerNorm、GELU、融合 qkv 带偏置、权重共享）
EXERCISE_CONFIG = preset("mini", vocab_size=500, block_size=32, n_layer=2, n_head=4, n_embd=64)


# ---------------------------------------------------------------- 参考答案
def solution_causal_mask(T: int) -> torch.Tensor:
    """[T, T] 的布尔掩码，True = 可以看（键位置 ≤ 查询位置）。"""
    return torch.tril(torch.ones(T, T, dtype=torch.bool))


def solution_split_heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    """[B, T, C] → [B, H, T, D]：先把 C 拆成 H×D，再把 H 换到 T 前面。"""
    B, T, C = x.shape
    return x.view(B, T, n_head, C // n_head).transpose(1, 2)


def solution_merge_heads(y: torch.Tensor) -> torch.Tensor:
    """[B, H, T, D] → [B, T, C]：先换回 [B, T, H, D]，contiguous 之后才能 view。"""
    B, H, T, D = y.shape
    return y.transpose(1, 2).contiguous().view(B, T, H * D)


def solution_rope_pair(x1: float, x2: float, m: int, theta: float) -> tuple[float, float]:
    """把一对维度 (x1, x2) 在位置 m 处按角度 m·θ 逆时针旋转。"""
    a = m * theta
    return x1 * math.cos(a) - x2 * math.sin(a), x1 * math.sin(a) + x2 * math.cos(a)


def solution_param_count(cfg=EXERCISE_CONFIG) -> int:
    """按公式数 mini 设计的参数（学习式位置、LayerNorm、GELU 4×、融合 qkv 带偏置、权重共享）。"""
    V, T, C, L = cfg.vocab_size, cfg.block_size, cfg.n_embd, cfg.n_layer
    emb = V * C + T * C                                   # 词嵌入 + 位置嵌入
    attn = (C * 3 * C + 3 * C) + (C * C + C)              # qkv + 输出投影（含偏置）
    mlp = (C * 4 * C + 4 * C) + (4 * C * C + C)           # fc + proj（含偏置）
    norms = 2 * 2 * C                                     # 块内两个 LayerNorm（γ 和 β）
    return emb + L * (attn + mlp + norms) + 2 * C         # + 最终 LayerNorm；输出头共享，不另算


def solution_scaled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """带因果掩码的缩放点积注意力。q, k, v: [B, H, T, D] → [B, H, T, D]。"""
    T, D = q.shape[-2], q.shape[-1]
    att = q @ k.transpose(-2, -1) / math.sqrt(D)                     # [B, H, T, T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=q.device))
    att = att.masked_fill(~mask, float("-inf"))
    return F.softmax(att, dim=-1) @ v


def solution_layernorm(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """手写 LayerNorm（不含 γ、β）：对最后一维减均值、除以标准差（有偏方差）。"""
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps)


SOLUTIONS.update({
    "causal_mask": solution_causal_mask,
    "split_heads": solution_split_heads,
    "merge_heads": solution_merge_heads,
    "rope_pair": solution_rope_pair,
    "param_count": solution_param_count,
    "scaled_attention": solution_scaled_attention,
    "layernorm": solution_layernorm,
})


# ---------------------------------------------------------------- 检查器
def causal_mask(fn) -> bool:
    """练习：写 ``causal_mask(T)``，返回 [T, T] 的布尔张量，True 表示"可以看"。"""
    for T in (4, 1, 7):
        m, err = _call(fn, T)
        if err:
            return _fail(err)
        if not isinstance(m, torch.Tensor):
            return _fail(f"应返回 torch.Tensor，收到 {type(m).__name__}")
        if tuple(m.shape) != (T, T):
            return _fail(f"T={T} 时形状应为 ({T}, {T})，收到 {tuple(m.shape)}")
        if m.dtype != torch.bool:
            return _fail(f"应为布尔张量（dtype=torch.bool），收到 {m.dtype}；可以用 .bool() 转换")
        ref = solution_causal_mask(T)
        if T > 1 and torch.equal(m, ref.T):
            return _fail("方向反了：你得到的是上三角（triu），那是让每个字只看未来；应该用 tril")
        if torch.equal(m, ~ref):
            return _fail("True/False 反了：这里约定 True = 可以看（SDPA 的约定），"
                         "而不是 True = 遮住（nn.MultiheadAttention 的约定）")
        if not bool(m.diagonal().all()):
            return _fail("对角线必须是 True：每个字都要能看见它自己")
        if not torch.equal(m, ref):
            i, j = (m != ref).nonzero()[0].tolist()
            what = "看到了未来的字" if j > i else "看不到本该看到的前文"
            return _fail(f"T={T} 时第 {i} 行第 {j} 列不对：查询位置 {i} {what}（键位置 {j}）")
    return _ok()


def split_merge_heads(split, merge) -> bool:
    """练习：``split(x, n_head)`` [B,T,C]→[B,H,T,D] 与 ``merge(y)`` [B,H,T,D]→[B,T,C]。"""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 5, 12, generator=g)                           # B=2, T=5, C=12
    y, err = _call(split, x, 3)
    if err:
        return _fail(err)
    ref = solution_split_heads(x, 3)
    if not isinstance(y, torch.Tensor) or tuple(y.shape) != (2, 3, 5, 4):
        shape = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
        return _fail(f"split 的输出形状应为 [B, H, T, D] = (2, 3, 5, 4)，收到 {shape}")
    if torch.equal(y, x.view(2, 3, 5, 4)):
        return _fail("split 直接 view 成了 [B, H, T, D]：形状对了，但把不同位置的数混进了同一个头。"
                     "应先 view 成 [B, T, H, D]，再 transpose(1, 2)")
    if not torch.equal(y, ref):
        return _fail("split 的形状对了但数值不对：第 h 个头应取每个位置的第 h·D … (h+1)·D−1 维")
    z, err = _call(merge, ref.contiguous())                       # 与 att @ v 的输出一样是连续的
    if err:
        return _fail("merge " + err + "（提示：transpose 之后张量不再连续，"
                     "view 之前要 .contiguous()，"
                     "或者改用 reshape）")
    if not isinstance(z, torch.Tensor) or tuple(z.shape) != (2, 5, 12):
        shape = tuple(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__
        return _fail(f"merge 的输出形状应为 [B, T, C] = (2, 5, 12)，收到 {shape}")
    if torch.equal(z, ref.reshape(2, 5, 12)):
        return _fail("merge 没有先把头换回去：应先 transpose(1, 2) 得到 [B, T, H, D] 再合并")
    if not torch.equal(z, x):
        return _fail("merge(split(x)) 没有还原 x")
    return _ok()


def rope_pair(fn) -> bool:
    """练习：``rope_pair(x1, x2, m, theta)`` 把一对维度按角度 m·θ 旋转，返回 (y1, y2)。"""
    cases = [(1.0, 0.0, 1, 0.5), (0.3, -1.2, 3, 0.25), (2.0, 1.0, 7, 0.01), (0.5, 0.5, 0, 1.0)]
    for x1, x2, m, th in cases:
        out, err = _call(fn, x1, x2, m, th)
        if err:
            return _fail(err)
        try:
            y1, y2 = (float(v) for v in out)
        except (TypeError, ValueError):
            return _fail(f"应返回两个数 (y1, y2)，收到 {out!r}")
        r1, r2 = solution_rope_pair(x1, x2, m, th)
        if math.isclose(y1, r1, abs_tol=1e-5) and math.isclose(y2, r2, abs_tol=1e-5):
            continue
        w1, w2 = solution_rope_pair(x1, x2, -m, th)
        if math.isclose(y1, w1, abs_tol=1e-5) and math.isclose(y2, w2, abs_tol=1e-5):
            return _fail("旋转方向反了（相当于转了 −m·θ）："
                         "y1 = x1·cos − x2·sin，y2 = x1·sin + x2·cos")
        if m != 1 and math.isclose(y1, solution_rope_pair(x1, x2, 1, th)[0], abs_tol=1e-5):
            return _fail("角度应为 m·θ（位置乘频率），你好像只转了 θ")
        if not math.isclose(math.hypot(y1, y2), math.hypot(x1, x2), rel_tol=1e-4):
            return _fail("旋转必须保持长度不变：|(y1, y2)| 应等于 |(x1, x2)|")
        return _fail(f"(x1, x2, m, θ) = {(x1, x2, m, th)} 时应得 ({r1:.4f}, {r2:.4f})，"
                     f"收到 ({y1:.4f}, {y2:.4f})")
    return _ok()


def param_count(n, cfg=EXERCISE_CONFIG) -> bool:
    """练习：不建模型，按公式数出 ``EXERCISE_CONFIG`` 的参数总数。"""
    truth = count_parameters(GPT(cfg))["total"]
    try:
        n = int(n)
    except (TypeError, ValueError):
        return _fail(f"应给出一个整数，收到 {n!r}")
    if n == truth:
        return _ok()
    C, V = cfg.n_embd, cfg.vocab_size
    if n == truth + V * C:
        return _fail("多算了输出头：权重共享时 lm_head 与词嵌入是同一个张量，只算一次")
    if n == truth - cfg.block_size * C:
        return _fail("漏了位置嵌入（block_size × C）")
    if n == truth - C * (2 * cfg.n_layer + 1):          # 只数了 γ
        return _fail("LayerNorm 的参数少了一半：每个 LayerNorm 有 γ 和 β 两组，各 C 个")
    if n == truth - 2 * C:
        return _fail("漏了最终的 LayerNorm（2C 个参数）")
    if n <= 0:
        return _fail("请先把你算出的参数总数填进去")
    side = "多" if n > truth else "少"
    return _fail(f"你的答案比正确值{side}。逐项检查：词嵌入、位置嵌入、"
                 "每块的 qkv / proj / fc / proj（别忘了偏置）、两个 LayerNorm（γ 和 β）、"
                 "最终 LayerNorm；输出头共享不另算")


def scaled_attention(fn) -> bool:
    """练习：``attention(q, k, v)``，q/k/v [B,H,T,D]，返回带因果掩码的缩放点积注意力。"""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 6, 8, generator=g) for _ in range(3))
    out, err = _call(fn, q, k, v)
    if err:
        return _fail(err)
    if not isinstance(out, torch.Tensor) or out.shape != q.shape:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        return _fail(f"输出形状应为 {tuple(q.shape)}，收到 {shape}")
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def close(t):
        return torch.allclose(out, t, atol=1e-5)

    if close(ref):
        return _ok()
    if close(F.scaled_dot_product_attention(q, k, v)):
        return _fail("没有因果掩码：每个位置都看到了未来（把对角线以上的分数填成 −∞）")
    if close(F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0)):
        return _fail("忘了除以 √D（D = head_dim）：分数太大，softmax 会饱和")
    if close(F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1 / math.sqrt(3 * 8))):
        return _fail("除以的是 √(n_embd)，应该除以 √(head_dim)")
    att = (q @ k.transpose(-2, -1) / math.sqrt(8)).masked_fill(
        ~solution_causal_mask(6), float("-inf"))
    if close(torch.nan_to_num(F.softmax(att, dim=-2)) @ v):
        return _fail("softmax 的维度不对：应在最后一维（键）上归一化，dim=-1")
    return _fail("数值与 F.scaled_dot_product_attention(q, k, v, is_causal=True) 不一致")


def layernorm(fn) -> bool:
    """练习：``layernorm(x, eps)``（不含 γ、β）应等于 ``F.layer_norm(x, (C,), eps=eps)``。"""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 5, 16, generator=g) * 3 + 1
    out, err = _call(fn, x, 1e-5)
    if err:
        return _fail(err)
    if not isinstance(out, torch.Tensor) or out.shape != x.shape:
        return _fail(f"输出形状应与输入相同 {tuple(x.shape)}")
    ref = F.layer_norm(x, (16,), eps=1e-5)
    if torch.allclose(out, ref, atol=1e-5):
        return _ok()
    unbiased = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + 1e-5)
    if torch.allclose(out, unbiased, atol=1e-5):
        return _fail("用了无偏方差（除以 C−1）：LayerNorm 用有偏方差，写 var(unbiased=False) "
                     "或 ((x − mean)²).mean()")
    if torch.allclose(out, F.layer_norm(x.transpose(-1, -2), (5,)).transpose(-1, -2), atol=1e-5):
        return _fail("归一化的维度不对：应对最后一维（每个位置的 C 个特征）求均值和方差")
    return _fail("数值与 F.layer_norm 不一致：先减均值，再除以 sqrt(方差 + eps)")
