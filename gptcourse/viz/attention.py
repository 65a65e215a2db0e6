"""注意力相关的图：因果掩码热力图、✓/−∞ 表、按"层 × 头"排列的注意力热力图（汉字作刻度）。"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import UserError
from .basic import show_heatmap

KEEP, BLOCK = "✓", "−∞"


def _labels(phrase_or_len) -> list[str]:
    if isinstance(phrase_or_len, int):
        if phrase_or_len < 1:
            raise UserError(f"序列长度必须 ≥ 1，收到 {phrase_or_len}")
        return [str(i) for i in range(phrase_or_len)]
    labels = list(phrase_or_len)
    if not labels:
        raise UserError("短语不能为空")
    return labels


def mask_table(phrase) -> list[list[str]]:
    """因果掩码表：第 i 行（查询）第 j 列（键）在 j ≤ i 时为 ✓，否则为 −∞。

    >>> mask_table("春眠")
    [['✓', '−∞'], ['✓', '✓']]
    """
    n = len(_labels(phrase))
    return [[KEEP if j <= i else BLOCK for j in range(n)] for i in range(n)]


def mask_table_markdown(phrase) -> str:
    """把 :func:`mask_table` 写成 Markdown 表格（行 = 查询字，列 = 键字）。

    用 ``display(Markdown(...))`` 显示。
    """
    labels = _labels(phrase)
    rows = mask_table(labels)
    head = "| 查询 ＼ 键 | " + " | ".join(labels) + " |"
    sep = "|---|" + "---|" * len(labels)
    body = [f"| **{q}** | " + " | ".join(r) + " |" for q, r in zip(labels, rows)]
    return "\n".join([head, sep, *body])


def plot_causal_mask(phrase, ax=None, title: str | None = None):
    """因果掩码热力图：下三角（可以看）着色并写 ✓，上三角写 −∞。返回 Axes。"""
    import matplotlib.pyplot as plt

    labels = _labels(phrase)
    n = len(labels)
    keep = np.tril(np.ones((n, n)))
    if ax is None:
        _, ax = plt.subplots(figsize=(0.55 * n + 2.2, 0.5 * n + 1.6))
    show_heatmap(keep, labels, labels, ax=ax, cmap="Blues", colorbar=False, vmin=0, vmax=1.6,
                 title=title or "因果掩码：每个字只能看自己和前面的字",
                 xlabel="键（被看的字）", ylabel="查询（正在看的字）")
    fs = 12 if n <= 8 else 8
    for i in range(n):
        for j in range(n):
            ax.text(j, i, KEEP if j <= i else BLOCK, ha="center", va="center", fontsize=fs,
                    color="#08306b" if j <= i else "#a50f15")
    ax.xaxis.set_ticks_position("top")
    ax.xaxis.set_label_position("top")
    return ax


def _as_heads(m) -> np.ndarray:
    """一层的注意力 [B,H,T,T] / [H,T,T] / [T,T] → [H,T,T]（取第 0 个样本）。"""
    if hasattr(m, "detach"):
        m = m.detach().float().cpu().numpy()
    m = np.asarray(m, dtype=float)
    if m.ndim == 4:
        m = m[0]
    if m.ndim == 2:
        m = m[None]
    if m.ndim != 3 or m.shape[-1] != m.shape[-2]:
        raise UserError(f"注意力权重应为 [B,H,T,T]、[H,T,T] 或 [T,T]，收到形状 {m.shape}")
    return m


def plot_attention_grid(maps: Sequence, tokens: Sequence[str], title: str | None = None,
                        axes=None, fontsize: float | None = None, cmap: str = "viridis",
                        colorbar: bool = True, layers: Sequence[int] | None = None,
                        heads: Sequence[int] | None = None):
    """按"行 = 层、列 = 头"画注意力权重；刻度是输入的汉字。

    maps：每层一个 [B,H,T,T]（如 ``model.attention_maps(idx)`` 的返回值）；tokens：长度 T 的字。
    layers / heads：只画其中几层、几个头（下标从 0 起；子图标题仍写真实的层号、头号），
    ``None`` = 全部。axes：可传入已有的 L×H 个 Axes（二维数组），否则新建一张图。
    colorbar：在右侧画一条所有子图共用的色标（0–1）。返回 Figure。
    """
    import matplotlib.pyplot as plt

    every = [_as_heads(m) for m in maps]
    if not every:
        raise UserError("maps 为空：至少需要一层的注意力权重")
    rows = _pick(layers, len(every), "layers", "层")
    cols = _pick(heads, every[0].shape[0], "heads", "头")
    L, H, T = len(rows), len(cols), every[0].shape[-1]
    tokens = list(tokens)
    if len(tokens) != T:
        raise UserError(f"tokens 有 {len(tokens)} 个，但注意力矩阵是 {T}×{T}")
    if axes is None:
        fig, axes = plt.subplots(L, H, figsize=(2.3 * H + 0.6, 2.3 * L + 0.6), squeeze=False)
    else:
        axes = np.asarray(axes).reshape(L, H)
        fig = axes[0, 0].figure
    fs = fontsize or max(4.5, min(9.0, 90.0 / T))
    for i, l in enumerate(rows):
        for j, h in enumerate(cols):
            ax = axes[i, j]
            im = ax.imshow(every[l][h], cmap=cmap, vmin=0.0, vmax=1.0)
            ax.set_xticks(range(T), labels=tokens, fontsize=fs)
            ax.set_yticks(range(T), labels=tokens, fontsize=fs)
            ax.tick_params(length=0, pad=1)
            ax.set_title(f"第 {l + 1} 层 · 头 {h + 1}", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=12)
    fig.tight_layout()
    if colorbar:
        fig.colorbar(im, ax=axes, fraction=0.025, pad=0.02, label="注意力权重")
    return fig


def _pick(which: Sequence[int] | None, n: int, name: str, unit: str) -> list[int]:
    """layers / heads 参数 → 下标列表；不是 0…n−1 里的整数 → UserError。"""
    if which is None:
        return list(range(n))
    picked = list(which)
    bad = [i for i in picked if not isinstance(i, (int, np.integer)) or isinstance(i, bool)
           or not 0 <= i < n]
    if not picked or bad:
        raise UserError(f"{name} 应是 0…{n - 1} 里的整数（一共 {n} 个{unit}，下标从 0 起），"
                        f"收到 {which!r}")
    return [int(i) for i in picked]


def plot_attention_models(models: Mapping[str, Sequence], tokens: Sequence[str],
                          layer: int | None = None, title: str | None = None):
    """把几个模型的注意力放在一起比较（例如 {"未训练": maps0, "已训练": maps1}）。

    layer=None：行 = 层，列 = 各模型的各个头（模型之间左右并排）；
    layer=i：只取第 i 层（0 起），每个模型一行、每个头一列（模型之间上下对照）。返回 Figure。
    """
    import matplotlib.pyplot as plt

    names = list(models)
    if not names:
        raise UserError("models 为空")
    picked = {n: [models[n][layer]] if layer is not None else list(models[n]) for n in names}
    L = len(picked[names[0]])
    H = _as_heads(picked[names[0]][0]).shape[0]
    if any(len(picked[n]) != L for n in names):
        raise UserError("各模型的层数不同，无法并排比较")
    if layer is not None:                                            # 每个模型一行
        fig, axes = plt.subplots(len(names), H, figsize=(2.4 * H + 0.4, 2.8 * len(names) + 0.7),
                                 squeeze=False)
        blocks = [axes[i:i + 1] for i in range(len(names))]
    else:                                                            # 模型左右并排
        fig, axes = plt.subplots(L, H * len(names), figsize=(1.95 * H * len(names) + 0.4,
                                                             2.05 * L + 0.7), squeeze=False)
        blocks = [axes[:, i * H:(i + 1) * H] for i in range(len(names))]
    for n, block in zip(names, blocks):
        plot_attention_grid(picked[n], tokens, axes=block, colorbar=False)
        for l in range(L):
            lab = layer + 1 if layer is not None else l + 1
            for h in range(H):
                block[l, h].set_title(f"{n} · 层 {lab} · 头 {h + 1}", fontsize=8.5)
    if title:
        fig.suptitle(title, fontsize=12)
    fig.tight_layout(h_pad=1.6)
    fig.colorbar(axes[0, 0].images[0], ax=axes, fraction=0.025, pad=0.02, label="注意力权重")
    return fig


def plot_offset_profiles(profiles: Mapping[str, np.ndarray], head_names: Sequence[str],
                         title: str | None = None):
    """每个头的“注意力偏移”分布：行 = 头，列 = 偏移 o（看往前第 o 个词元），颜色 = 平均权重。

    profiles：{面板标题: [头数, 偏移数] 数组}，例如 {"五言": p5, "七言": p7}。返回 Figure。
    """
    import matplotlib.pyplot as plt

    if not profiles:
        raise UserError("profiles 为空")
    arrays = {k: np.asarray(v.detach().cpu() if hasattr(v, "detach") else v, dtype=float)
              for k, v in profiles.items()}
    n_heads = len(head_names)
    if any(a.ndim != 2 or a.shape[0] != n_heads for a in arrays.values()):
        raise UserError(f"每个 profile 应为 [{n_heads}, 偏移数] 的二维数组")
    size = (4.6 * len(arrays) + 1.0, 0.28 * n_heads + 1.6)
    fig, axes = plt.subplots(1, len(arrays), figsize=size, squeeze=False)
    vmax = max(float(a.max()) for a in arrays.values())
    for k, (ax, (name, a)) in enumerate(zip(axes[0], arrays.items())):
        im = ax.imshow(a, cmap="magma", vmin=0.0, vmax=vmax, aspect="auto")
        ax.set_xticks(range(a.shape[1]))
        ax.set_yticks(range(n_heads), labels=list(head_names) if k == 0 else [], fontsize=8)
        ax.set_xlabel("偏移 o（查询往前数第 o 个词元；0 = 自己）")
        ax.set_title(name)
    fig.colorbar(im, ax=axes, fraction=0.03, pad=0.02, label="平均注意力权重")
    if title:
        fig.suptitle(title, fontsize=12)
    return fig
