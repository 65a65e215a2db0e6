"""RoPE 的三张图：表针一样转动的维度对、q·k 只取决于相对距离、角度表热力图。"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..errors import UserError
from ..rope import apply_rope, rope_angles


def plot_rope_clock(pairs: Sequence[int] = (0, 1, 2, 3), head_dim: int = 8, n_pos: int = 8,
                    base: float = 10000.0, vector=(1.0, 0.0)):
    """把第 i 对维度画成一根表针：位置 m = 0..n_pos−1 时它转过 m·θ_i。

    每个子图一个频率（pair 越靠后，θ_i = base^(−2i/D) 越小，转得越慢）。返回 Figure。
    """
    import matplotlib.pyplot as plt
    from matplotlib import colormaps

    ang = rope_angles(head_dim, n_pos, base).numpy()                 # [P, D/2]
    if max(pairs) >= head_dim // 2 or min(pairs) < 0:
        raise UserError(f"pairs 必须在 0..{head_dim // 2 - 1} 之间，收到 {list(pairs)}")
    x0, y0 = vector
    cmap = colormaps["viridis"]
    fig, axes = plt.subplots(1, len(pairs), figsize=(3.1 * len(pairs), 3.9), squeeze=False)
    circle = np.linspace(0, 2 * np.pi, 200)
    for ax, i in zip(axes[0], pairs):
        ax.plot(np.cos(circle), np.sin(circle), color="#ced4da", lw=1)
        last_label = None
        for m in range(n_pos):
            a = ang[m, i]
            x, y = x0 * np.cos(a) - y0 * np.sin(a), x0 * np.sin(a) + y0 * np.cos(a)
            c = cmap(m / max(1, n_pos - 1))
            ax.annotate("", xy=(x, y), xytext=(0, 0),
                        arrowprops=dict(arrowstyle="-|>", color=c, lw=1.6))
            if last_label is None or abs(np.angle(np.exp(1j * (a - last_label)))) > 0.18:
                ax.text(1.16 * x, 1.16 * y, str(m), ha="center", va="center", fontsize=8, color=c)
                last_label = a
        theta = 0.0 if n_pos < 2 else float(ang[1, i])
        total = float(np.degrees(ang[-1, i]))
        ax.set_title(f"第 {i} 对维度：θ = {theta:.3g} 弧度/位置\n"
                     f"到位置 {n_pos - 1} 共转 {total:.3g}°", fontsize=9.5)
        ax.set_xlim(-1.35, 1.35)
        ax.set_ylim(-1.35, 1.35)
        ax.set_aspect("equal")
        ax.axis("off")
    fig.suptitle(f"RoPE：同一个二维向量在位置 0…{n_pos - 1} 上被旋转（箭头旁的数字 = 位置）",
                 fontsize=12, y=0.99)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig


def rope_scores_by_offset(head_dim: int = 64, n_pos: int = 64, base: float = 10000.0,
                          seed: int = 0) -> torch.Tensor:
    """固定一对 q、k，把它们放在所有位置 (m, n) 上旋转后求点积，返回 [n_pos, n_pos] 的分数表。

    RoPE 的性质：分数只取决于 m − n，所以这张表沿每条对角线都是常数（Toeplitz 矩阵）。
    """
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(head_dim, generator=g), torch.randn(head_dim, generator=g)
    ang = rope_angles(head_dim, n_pos, base)                        # [P, D/2]
    cos, sin = ang.cos(), ang.sin()
    qs = apply_rope(q.expand(n_pos, head_dim), cos, sin)           # [P, D]：第 m 行是位置 m 的 q
    ks = apply_rope(k.expand(n_pos, head_dim), cos, sin)           # [P, D]
    return qs @ ks.T                                                # [P(m), P(n)]


def plot_rope_offset(head_dim: int = 64, n_pos: int = 64, base: float = 10000.0, seed: int = 0,
                     query_positions: Sequence[int] = (16, 32, 48, 63)):
    """左：q 在不同绝对位置 m 上时，分数随相对距离 m − n 的变化——曲线完全重合；
    右：整张 (m, n) 分数表，沿对角线为常数。返回 Figure。"""
    import matplotlib.pyplot as plt

    s = rope_scores_by_offset(head_dim, n_pos, base, seed).numpy()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    styles = ["-", "--", ":", "-."]
    for j, m in enumerate(query_positions):
        if not 0 <= m < n_pos:
            raise UserError(f"query_positions 必须在 0..{n_pos - 1} 内，收到 {m}")
        n = np.arange(m + 1)
        a1.plot(m - n, s[m, : m + 1], styles[j % 4], lw=2.2 - 0.4 * j, label=f"查询在位置 m = {m}")
    a1.set_xlabel("相对距离 m − n（查询位置 − 键位置）")
    a1.set_ylabel("旋转后的 q·k")
    a1.set_title("q·k 只取决于相对距离：几条曲线重合")
    a1.legend(fontsize=8)
    im = a2.imshow(s, cmap="RdBu_r")
    a2.set_xlabel("键的位置 n")
    a2.set_ylabel("查询的位置 m")
    a2.set_title("分数表 (m, n)：沿每条对角线是常数")
    fig.colorbar(im, ax=a2, fraction=0.046, pad=0.04)
    fig.tight_layout()
    return fig


def plot_rope_angles(head_dim: int = 64, n_pos: int = 128, base: float = 10000.0):
    """角度表热力图：左边是 m·θ_i 对 2π 取模后的角度，右边是 cos(m·θ_i)。返回 Figure。"""
    import matplotlib.pyplot as plt

    ang = rope_angles(head_dim, n_pos, base).numpy()                # [P, D/2]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    im1 = a1.imshow(np.mod(ang, 2 * np.pi), aspect="auto", cmap="twilight", vmin=0, vmax=2 * np.pi)
    a1.set_title("旋转角度 m·θᵢ（对 2π 取模）")
    im2 = a2.imshow(np.cos(ang), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1)
    a2.set_title("cos(m·θᵢ)：前面的维度对转得快，后面的转得慢")
    for ax in (a1, a2):
        ax.set_xlabel(f"维度对编号 i（共 {head_dim // 2} 对）")
        ax.set_ylabel("位置 m")
    fig.colorbar(im1, ax=a1, fraction=0.046, pad=0.04, label="弧度")
    fig.colorbar(im2, ax=a2, fraction=0.046, pad=0.04)
    fig.tight_layout()
    return fig
