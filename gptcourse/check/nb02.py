"""笔记本 02（注意力与因果掩码）的练习检查器：参考是 ``gc.model``、``gc.rope`` 里的版本。"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .. import model as gc_model
from ..mistakes.attention import (
    attention_no_mask,
    attention_scaled_by_n_embd,
    attention_softmax_wrong_dim,
    merge_heads,
)
from ..model import causal_attention
from ..rope import rotate_pair
from ._common import _fail, _got, _ok, choice, exercise, register
from .nb02_model import (  # noqa: F401  本章的检查器都从 gc.check.nb02 取
    _CFGS,
    EXERCISE_CONFIG,
    _which,
    gpt_block,
    gpt_model,
    leaky_model,
    param_count,
    reference_attention_module,
    reference_block,
    reference_gpt,
    solution_make_leaky,
)
from .nb02_parts import (  # noqa: F401
    attention_module,
    mlp,
    rmsnorm,
    rope_rotate,
)

EXERCISES = ("scaled_attention", "causal_mask", "guess_saturation", "guess_sqrt_c",
             "split_merge_heads", "rope_pair", "rope_rotate", "mlp", "layernorm", "rmsnorm",
             "attention_module", "gpt_block", "gpt_model", "leaky_model", "guess_norm",
             "guess_init_growth", "guess_offset", "param_count")
__all__ = list(EXERCISES)


# ---------------------------------------------------------------- 学生版的代替品（包里没有的）
def solution_split_heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    """[B, T, C] → [B, H, T, D]：先把 C 拆成 H×D，再把 H 换到 T 前面。"""
    B, T, C = x.shape
    return x.view(B, T, n_head, C // n_head).transpose(1, 2)


register("nb02", {
    "causal_mask": gc_model.causal_mask,
    "split_merge_heads": (solution_split_heads, merge_heads),       # 合并：gc.mistakes 里正确的版本
    "rope_pair": rotate_pair,
    "layernorm": lambda x, eps=1e-5: F.layer_norm(x, x.shape[-1:], eps=eps),
    "leaky_model": solution_make_leaky,
})


# ---------------------------------------------------------------- 检查器
@exercise
def causal_mask(fn) -> bool:
    """练习：写 ``causal_mask(T)``，返回 [T, T] 的布尔张量，True 表示“可以看”。"""
    for T in (4, 1, 7):
        m = _got(fn, T)
        if not isinstance(m, torch.Tensor):
            return _fail(f"应返回 torch.Tensor，收到 {type(m).__name__}")
        if tuple(m.shape) != (T, T):
            return _fail(f"T={T} 时形状应为 ({T}, {T})，收到 {tuple(m.shape)}")
        if m.dtype != torch.bool:
            return _fail(f"应为布尔张量（dtype=torch.bool），收到 {m.dtype}；可以用 .bool() 转换")
        ref = gc_model.causal_mask(T)
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


@exercise
def scaled_attention(fn) -> bool:
    """练习：``attention(q, k, v, mask)``：q [B,H,T,D]，k、v [B,H,S,D]，mask [T,S]（True = 看）。"""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 6, 8, generator=g) for _ in range(3))
    causal = gc_model.causal_mask(6)
    out = _got(fn, q, k, v, causal)
    if not isinstance(out, torch.Tensor) or out.shape != q.shape:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        return _fail(f"输出形状应为 {tuple(q.shape)}，收到 {shape}")
    ref = causal_attention(q, k, v, causal)[0]

    def close(t):
        return torch.allclose(out, t, atol=1e-5)

    if close(ref):
        for mask, what in other_masks(6):
            got = _got(fn, q, k, v, mask, where=f"换一个掩码（{what}）时 ")
            if not isinstance(got, torch.Tensor) or got.shape != q.shape:
                return _fail(f"换一个掩码（{what}）时输出应是形状为 {tuple(q.shape)} 的张量")
            if torch.allclose(got, causal_attention(q, k, v, mask)[0], atol=1e-5):
                continue
            return _fail(f"换一个掩码（{what}）" + _which(got, [
                (ref, "结果却没变：你自己造了下三角，没有用传进来的 mask。"),
                (causal_attention(q, k, v, mask & causal)[0],
                 "结果不对：你把传进来的 mask 和自己造的下三角合在了一起。mask 允许看的位置"
                 "（哪怕在未来）都要看。")], "结果与 gc.model.causal_attention(q, k, v, mask) "
                "不一致：哪里能看只由传进来的 mask 决定。")
                + "模型会把它的掩码 buffer 切好传给你，练习 14 正是改这个 buffer 来造泄漏")
        return _ok()
    if torch.isnan(out).any() and torch.isnan(out).all(-1).any():
        return _fail("输出里有 NaN：True/False 用反了。这里 True = 可以看，"
                     "要填 −∞ 的是 ~mask（看不见的位置）")

    def sdpa(scale):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)

    scores = q @ k.transpose(-2, -1) / math.sqrt(8)
    wrong = [(attention_no_mask(q, k, v),
              "没有用掩码：每个位置都看到了未来（把 mask 为 False 的分数填成 −∞）"),
             (sdpa(1.0), "忘了除以 √D（D = head_dim）：分数太大，softmax 会饱和"),
             (attention_scaled_by_n_embd(q, k, v),
              "除以的是 √(n_embd) = √(H·D)，应该除以 √(head_dim)"),
             (sdpa(1 / 8), "除以的是 D，应该除以 √D"),
             (attention_softmax_wrong_dim(q, k, v),
              "softmax 的维度不对：应在最后一维（键）上归一化，dim=-1"),
             (F.softmax(scores, dim=-1) * causal @ v,
              "掩码放在了 softmax 之后：被遮住的权重变成 0，但每行之和不再是 1。"
              "应先把分数填成 −∞，再做 softmax")]
    return _fail(_which(out, wrong, "数值与 gc.model.causal_attention(q, k, v, mask) 的输出不一致"))


def other_masks(T: int) -> list[tuple[torch.Tensor, str]]:
    """检查“用的是传进来的 mask”用的掩码：(掩码, 说明)；第二个看得见未来，不是因果掩码的子集。"""
    d = torch.arange(T)[:, None] - torch.arange(T)[None, :]            # 查询位置 − 键位置
    return [((d >= 0) & (d < 3), "每个字只看最近 3 个字"),
            ((d >= -1) & (d < 3), "每个字只看最近 3 个字和下一个字")]


def _trend(first: float, last: float, up: str, down: str, flat: str, tol: float) -> str:
    """由实验量出的两个数定出正确的选项：明显变大 → up，明显变小 → down，否则 flat。"""
    return up if last - first > tol else down if first - last > tol else flat


@exercise
def guess_saturation(guess, wmax: tuple[float, float] | None = None) -> bool:
    """预测题；``wmax``：这次量出的（D 最小, D 最大）时不缩放的每行最大权重，给了就按它判。"""
    right = "B" if wmax is None else _trend(*wmax, up="B", down="A", flat="C", tol=0.05)
    seen = "" if wmax is None else f"这次量到的最大权重从 {wmax[0]:.2f} 变到 {wmax[1]:.2f}。"
    return choice(guess, right, hints={
        "A": seen + "反了：q·k 是 D 项之和，标准差约为 √D。D 越大分数越大，softmax 越接近 one-hot",
        "B": seen + "看看表里不缩放那几行的最大权重",
        "C": seen + "会变：不缩放时分数的标准差随 √D 增长，softmax 会越来越“尖”"})


@exercise
def guess_sqrt_c(guess, entropy: dict | None = None) -> bool:
    """预测题；``entropy``：这次量出的 {"÷√C": 归一化熵, "÷√D": 归一化熵}（熵越大越平）。"""
    right = "B" if entropy is None else _trend(entropy["÷√D"], entropy["÷√C"], up="B", down="A",
                                               flat="C", tol=0.01)
    return choice(guess, right, hints={
        "A": "反了：C = H·D 比 D 大，除以 √C 让分数更小，softmax 更接近平均",
        "B": "看看实验里 ÷√C 与 ÷√D 的熵谁大",
        "C": "会变：除以 √C 比除以 √D 多缩小了 √H 倍"})


@exercise
def split_merge_heads(split, merge) -> bool:
    """练习：``split(x, n_head)`` [B,T,C]→[B,H,T,D] 与 ``merge(y)`` [B,H,T,D]→[B,T,C]。"""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 5, 12, generator=g)                           # B=2, T=5, C=12
    y = _got(split, x, 3)
    ref = solution_split_heads(x, 3)
    if not isinstance(y, torch.Tensor) or tuple(y.shape) != (2, 3, 5, 4):
        shape = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
        return _fail(f"split 的输出形状应为 [B, H, T, D] = (2, 3, 5, 4)，收到 {shape}")
    if torch.equal(y, x.view(2, 3, 5, 4)):
        return _fail("split 直接 view 成了 [B, H, T, D]：形状对了，但把不同位置的数混进了同一个头。"
                     "应先 view 成 [B, T, H, D]，再 transpose(1, 2)")
    if not torch.equal(y, ref):
        return _fail("split 的形状对了但数值不对：第 h 个头应取每个位置的第 h·D … (h+1)·D−1 维")
    z = _got(merge, ref.contiguous(), where="merge ",            # 与 att @ v 的输出一样是连续的
             then="（提示：transpose 之后张量不再连续，view 之前要 "
                  ".contiguous()，或者改用 reshape）")
    if not isinstance(z, torch.Tensor) or tuple(z.shape) != (2, 5, 12):
        shape = tuple(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__
        return _fail(f"merge 的输出形状应为 [B, T, C] = (2, 5, 12)，收到 {shape}")
    if torch.equal(z, ref.reshape(2, 5, 12)):
        return _fail("merge 没有先把头换回去：应先 transpose(1, 2) 得到 [B, T, H, D] 再合并")
    if not torch.equal(z, x):
        return _fail("merge(split(x)) 没有还原 x")
    return _ok()


@exercise
def rope_pair(fn) -> bool:
    """练习：``rope_pair(x1, x2, cos, sin)`` 把坐标 (x1, x2) 逆时针旋转角度 a，返回 (y1, y2)。"""
    def near(got, want):
        return all(math.isclose(y, w, abs_tol=1e-5) for y, w in zip(got, want))

    for x1, x2, a in [(1.0, 0.0, 0.5), (0.3, -1.2, 0.75), (2.0, 1.0, 3.0), (0.5, 0.5, 0.0)]:
        c, s = math.cos(a), math.sin(a)
        out = _got(fn, x1, x2, c, s)
        try:
            y1, y2 = (float(v) for v in out)
        except (TypeError, ValueError):
            return _fail(f"应返回两个数 (y1, y2)，收到 {out!r}")
        r1, r2 = rotate_pair(x1, x2, c, s)
        if near((y1, y2), (r1, r2)):
            continue
        if near((y1, y2), rotate_pair(x1, x2, c, -s)):
            return _fail("旋转方向反了（相当于转了 −a）："
                         "y1 = x1·cos − x2·sin，y2 = x1·sin + x2·cos")
        if not math.isclose(math.hypot(y1, y2), math.hypot(x1, x2), rel_tol=1e-4):
            return _fail("旋转必须保持长度不变：|(y1, y2)| 应等于 |(x1, x2)|")
        return _fail(f"(x1, x2) = {(x1, x2)}、角度 {a} 时应得 ({r1:.4f}, {r2:.4f})，"
                     f"收到 ({y1:.4f}, {y2:.4f})")
    g = torch.Generator().manual_seed(5)
    x1, x2, ang = (torch.randn(3, 4, generator=g) for _ in range(3))
    out = _got(fn, x1, x2, ang.cos(), ang.sin(), where="传入张量时 ",
               then="（rope_pair 要能逐元素处理张量：下一题的 rotate 就这样用它）")
    want = rotate_pair(x1, x2, ang.cos(), ang.sin())
    if not (isinstance(out, (tuple, list)) and len(out) == 2
            and all(isinstance(o, torch.Tensor) and torch.allclose(o, w, atol=1e-6)
                    for o, w in zip(out, want))):
        return _fail("传入张量时结果不对：只用 +、−、× 逐元素计算，返回 (y1, y2)")
    return _ok()


@exercise
def layernorm(fn) -> bool:
    """练习：``layernorm(x, eps)``（不含 γ、β）应等于 ``F.layer_norm(x, (C,), eps=eps)``。"""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 5, 16, generator=g) * 3 + 1
    out = _got(fn, x, 1e-5)
    if not isinstance(out, torch.Tensor) or out.shape != x.shape:
        return _fail(f"输出形状应与输入相同 {tuple(x.shape)}")
    if not torch.allclose(out, F.layer_norm(x, (16,), eps=1e-5), atol=1e-5):
        unbiased = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + 1e-5)
        return _fail(_which(out, [
            (unbiased, "用了无偏方差（除以 C−1）：LayerNorm 用有偏方差，写 var(unbiased=False) "
                       "或 ((x − mean)²).mean()"),
            (F.layer_norm(x.transpose(-1, -2), (5,)).transpose(-1, -2),
             "归一化的维度不对：应对最后一维（每个位置的 C 个特征）求均值和方差"),
            (x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5),
             "这是 RMSNorm（没有减均值）：LayerNorm 要先减去均值")],
            "数值与 F.layer_norm 不一致：先减均值，再除以 sqrt(方差 + eps)"))
    small = x * 0.3                                         # eps = 0.5 与方差相当：放错看得出
    out2 = _got(fn, small, 0.5, where="eps = 0.5 时")
    if torch.allclose(out2, F.layer_norm(small, (16,), eps=0.5), atol=1e-5):
        return _ok()
    mu, sd = small.mean(-1, keepdim=True), small.var(-1, unbiased=False, keepdim=True).sqrt()
    return _fail(_which(out2, [
        ((small - mu) / (sd + 0.5),
         "eps 加在了开方之后：应是 (x − mean) / sqrt(方差 + eps)，eps 在根号里面"),
        ((small - mu) / sd, "没有用到参数 eps：方差很小时要靠它防止除以 0，写 sqrt(方差 + eps)")],
        "eps = 0.5 时与 F.layer_norm 不一致：eps 应加在方差上、开方之前", atol=1e-4))


@exercise
def guess_norm(guess, val_loss: dict | None = None) -> bool:
    """预测题；``val_loss``：{"Pre-Norm": 验证损失, "Post-Norm": …}，差不到 0.05 算“差不多”。"""
    right = "A" if val_loss is None else _trend(val_loss["Pre-Norm"], val_loss["Post-Norm"],
                                                up="A", down="B", flat="C", tol=0.05)
    seen = "" if val_loss is None else (f"这次量到的验证损失：Pre-Norm {val_loss['Pre-Norm']:.2f}，"
                                        f"Post-Norm {val_loss['Post-Norm']:.2f}。")
    return choice(guess, right, hints={k: seen + "看实验里两条曲线的终点与验证损失" for k in "ABC"})


@exercise
def guess_init_growth(guess, stds: tuple[float, float] | None = None) -> bool:
    """预测题；``stds``：（最浅, 最深）模型不缩放时最后一层残差流的标准差。"""
    right = "B" if stds is None else _trend(*stds, up="B", down="C", flat="A",
                                            tol=0.1 * min(stds))
    return choice(guess, right, hints={
        "A": "每个块都往残差流上“加”一份独立的东西，方差会累加，不会保持不变",
        "B": "看表里不缩放那一列随层数怎样变",
        "C": "残差流是一路相加过来的：加的项越多，标准差越大，不会变小"})


@exercise
def guess_offset(n) -> bool:
    """推理题：五言诗里，位置 t 的字要预测 t+1；上一句里与 t+1 对应的字在 t 之前第几个词元？"""
    try:
        n = int(n)
    except (TypeError, ValueError):
        return _fail(f"应填一个整数（往前数几个词元），收到 {n!r}")
    if n == 5:
        return _ok()
    return _fail({6: "6 是位置 t 自己在上一句的对应字（5 个字 + 1 个标点）。"
                     "可位置 t 要预测的是 t+1，t+1 的对应字在 t+1−6 = t−5",
                  7: "往前 7 个是上一句里 t−1 的对应字；要找的是 t+1 的对应字：t+1−6",
                  4: "别忘了标点也是一个词元：五言一句是 5 个字 + 1 个标点 = 6 个词元"}.get(
        n, "数一数：五言一句 = 5 个字 + 1 个标点 = 6 个词元；t+1 的对应字在 t+1−6"))
