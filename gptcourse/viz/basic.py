"""通用图：热力图 ``show_heatmap``（仿 d2l 的 show_heatmaps）与课程流程图 ``pipeline_figure``。"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import UserError

# (阶段名, 笔记本编号, 一句话内容)
PIPELINE_STAGES: tuple[tuple[str, str, str], ...] = (
    ("数据", "01", "语料 · 分词 · 批次"),
    ("模型", "02", "嵌入 · 注意力 · 掩码"),
    ("训练", "03", "损失 · 优化 · 检查点"),
    ("评估验收", "04", "困惑度 · 基线 · 格律"),
    ("推理部署", "05", "采样 · KV 缓存 · 网页"),
)


def _stage_index(highlight) -> int | None:
    if highlight is None:
        return None
    for i, (name, nb, _) in enumerate(PIPELINE_STAGES):
        if highlight in (i + 1, name, nb):
            return i
        if isinstance(highlight, str) and highlight.startswith(nb):
            return i
    names = ", ".join(f"{nb} {name}" for name, nb, _ in PIPELINE_STAGES)
    raise UserError(
        f"highlight={highlight!r} 不是课程阶段；可选：1–5、阶段名或笔记本编号（{names}）")


def pipeline_figure(highlight=None, ax=None):
    """画课程流程图 数据 → 模型 → 训练 → 评估验收 → 推理部署，并高亮当前笔记本所在阶段。

    ``highlight`` 可以是 1–5、阶段名（如 "数据"）或笔记本编号/文件名
    （如 "01"、"01_data_tokenizer"）。
    返回 matplotlib Figure。
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    hi = _stage_index(highlight)
    if ax is None:
        fig, ax = plt.subplots(figsize=(10, 2.4))
    else:
        fig = ax.figure
    n = len(PIPELINE_STAGES)
    w, h, gap = 1.6, 1.0, 0.5
    for i, (name, nb, desc) in enumerate(PIPELINE_STAGES):
        x = i * (w + gap)
        on = i == hi
        box = FancyBboxPatch((x, 0), w, h, boxstyle="round,pad=0.04,rounding_size=0.12",
                             facecolor="#f4a261" if on else "#e9ecef",
                             edgecolor="#9c4a1a" if on else "#adb5bd", linewidth=2.2 if on else 1)
        ax.add_patch(box)
        # 课程字体只有常规字重，所以用字号和颜色（而不是粗体）突出当前阶段
        ax.text(x + w / 2, 0.64, name, ha="center", va="center", fontsize=15 if on else 14,
                color="black" if on else "#495057")
        ax.text(x + w / 2, 0.28, f"笔记本 {nb}\n{desc}", ha="center", va="center", fontsize=8,
                color="black" if on else "#6c757d", linespacing=1.3)
        if i < n - 1:
            ax.add_patch(FancyArrowPatch((x + w + 0.05, h / 2), (x + w + gap - 0.05, h / 2),
                                         arrowstyle="-|>", mutation_scale=16, color="#495057"))
    if hi is not None:
        ax.text(hi * (w + gap) + w / 2, -0.22, "▲ 你在这里", ha="center", va="center",
                fontsize=10, color="#9c4a1a")
    ax.set_xlim(-0.2, n * (w + gap) - gap + 0.2)
    ax.set_ylim(-0.4, h + 0.15)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig


def show_heatmap(matrix, row_labels: Sequence[str] | None = None,
                 col_labels: Sequence[str] | None = None, title: str | None = None, ax=None,
                 cmap: str = "Reds", annotate: bool = False, fmt: str = ".2f",
                 xlabel: str | None = None, ylabel: str | None = None, colorbar: bool = True,
                 vmin: float | None = None, vmax: float | None = None):
    """画一个二维矩阵的热力图（注意力权重、掩码、角度表……各章通用），返回 Axes。

    matrix: 形状 (R, C) 的数组或张量；row_labels/col_labels: 长度 R / C 的刻度标签（可为汉字）；
    annotate=True 时在每格写上数值（按 ``fmt`` 格式化，``-inf`` 写作 −∞）。
    """
    import matplotlib.pyplot as plt

    if hasattr(matrix, "detach"):
        matrix = matrix.detach().cpu().numpy()
    m = np.asarray(matrix, dtype=float)
    if m.ndim != 2:
        raise UserError(f"show_heatmap 需要二维矩阵，收到形状 {m.shape}")
    r, c = m.shape
    if row_labels is not None and len(row_labels) != r:
        raise UserError(f"row_labels 有 {len(row_labels)} 个，但矩阵有 {r} 行")
    if col_labels is not None and len(col_labels) != c:
        raise UserError(f"col_labels 有 {len(col_labels)} 个，但矩阵有 {c} 列")
    if ax is None:
        _, ax = plt.subplots(figsize=(max(3.0, 0.5 * c + 1.5), max(2.5, 0.45 * r + 1.0)))
    finite = np.where(np.isfinite(m), m, np.nan)
    im = ax.imshow(finite, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(range(c), labels=list(col_labels) if col_labels is not None else range(c))
    ax.set_yticks(range(r), labels=list(row_labels) if row_labels is not None else range(r))
    if title:
        ax.set_title(title)
    if xlabel:
        ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    if annotate:
        lo, hi = np.nanmin(finite), np.nanmax(finite)
        mid = (lo + hi) / 2 if np.isfinite(lo) else 0.0
        for i in range(r):
            for j in range(c):
                v = m[i, j]
                text = ("−∞" if v < 0 else "∞") if np.isinf(v) else format(v, fmt)
                dark = np.isfinite(v) and v > mid and cmap in ("Reds", "Blues", "viridis_r")
                ax.text(j, i, text, ha="center", va="center", fontsize=8,
                        color="white" if dark else "black")
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return ax
