"""笔记本 04 的图：模型与三条基线的对比柱状图、诗内逐位置的损失曲线。"""
from __future__ import annotations

import math

import numpy as np

from ..errors import UserError


def metrics_vs_baselines(rows: dict[str, dict[str, float]], ax=None, title: str | None = None):
    """柱状图：每个名字（模型、各基线）在 val / test 上的每字比特数。

    rows: {名字: {"val": 损失 nats, "test": 损失 nats}}（缺 test 时只画 val）。返回 Axes。
    """
    import matplotlib.pyplot as plt

    if not rows:
        raise UserError("rows 为空：没有可画的指标")
    names = list(rows)
    splits = [s for s in ("val", "test") if all(s in r for r in rows.values())]
    if not splits:
        raise UserError("每一行都需要 'val'（可选 'test'）损失")
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.8))
    width = 0.8 / len(splits)
    colors = {"val": "#4c72b0", "test": "#dd8452"}
    labels = {"val": "验证集", "test": "测试集"}
    x = np.arange(len(names))
    for j, s in enumerate(splits):
        bits = [rows[n][s] / math.log(2) for n in names]
        bars = ax.bar(x + (j - (len(splits) - 1) / 2) * width, bits, width,
                      color=colors[s], label=labels[s])
        ax.bar_label(bars, fmt="%.2f", fontsize=8, padding=2)
    ax.set_xticks(x, names)
    ax.set_ylabel("每字比特数 (bits/字)，越低越好")
    ax.set_title(title or "模型与基线：每个字平均需要多少比特")
    ax.legend(loc="upper right")
    ax.set_ylim(0, max(rows[n][s] for n in names for s in splits) / math.log(2) * 1.15)
    ax.grid(axis="y", alpha=0.3)
    return ax


def position_loss(pos, ax=None, title: str | None = None, ref=None, ref_label: str = "二元基线"):
    """左：五言 / 七言诗里句中各字（第1字…第7字）的平均损失，标点与换行单独画成点；
    右：诗中各句汉字的平均损失（纵轴从 0 开始）。

    pos：``gc.evaluate.loss_by_position`` 的返回值；``ref``（同样的对象，例如二元基线的逐字损失）
    给出时用虚线画在左图上作对照。返回 (左图 Axes, 右图 Axes)。
    """
    import matplotlib.pyplot as plt

    from ..evaluate import SLOTS

    if ax is None:
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 3.8),
                                      gridspec_kw={"width_ratios": [3, 2]})
    else:
        fig, ax2 = ax.figure, None
    styles = {5: ("五言", "#4c72b0", "o"), 7: ("七言", "#c44e52", "s")}
    x = np.arange(len(SLOTS))
    for w, (name, color, marker) in styles.items():
        y = np.array(pos.by_slot[w], dtype=float)
        ax.plot(x[:w], y[:w], color=color, marker=marker, label=f"{name}诗")      # 句中的字
        ax.plot(x[7:], y[7:], color=color, marker=marker, ls="none")           # 标点、换行：不连线
        if ref is not None:
            r = np.array(ref.by_slot[w], dtype=float)
            ax.plot(x[:w], r[:w], color=color, ls="--", alpha=0.6, label=f"{name}·{ref_label}")
    ax.axvline(6.5, color="gray", lw=0.8)
    ax.set_xticks(x, SLOTS)
    ax.set_ylabel("平均损失 (nats)")
    ax.set_xlabel("在一句中的位置")
    ax.set_title(title or "一句之中各位置的平均损失")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    if ax2 is not None:
        lines = np.array(pos.by_line, dtype=float)
        n = np.arange(1, len(lines) + 1)
        colors = ["#8172b2" if i <= 4 else "#ccb974" for i in n]
        bars = ax2.bar(n, lines, color=colors)
        ax2.bar_label(bars, fmt="%.2f", fontsize=7)
        ax2.set_xticks(n)
        ax2.set_xlabel("诗中第几句（第 5–8 句只有律诗）")
        ax2.set_ylabel("汉字的平均损失 (nats)")
        ax2.set_title("一首诗中各句的平均损失")
        finite = lines[np.isfinite(lines)]
        ax2.set_ylim(0, (finite.max() if finite.size else 1) * 1.15)
        ax2.grid(axis="y", alpha=0.3)
        fig.tight_layout()
    return ax, ax2


def verse_bars(table: dict[str, tuple[float, float]], ax=None,
               title: str = "押韵率与平仄合格率：真诗、对照组与模型"):
    """分组条形图：每一组诗（真诗、对照组、模型的样本……）的 (押韵率, 平仄合格率)。返回 Axes。"""
    import matplotlib.pyplot as plt

    if not table:
        raise UserError("table 为空：没有可画的组")
    names = list(table)
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.6))
    x = np.arange(len(names))
    for j, (label, color) in enumerate((("押韵率", "#c44e52"), ("平仄合格率", "#4c72b0"))):
        vals = [table[n][j] for n in names]
        bars = ax.bar(x + (j - 0.5) * 0.4, vals, 0.4, color=color, label=label)
        ax.bar_label(bars, fmt="%.2f", fontsize=8, padding=2)
    ax.set_xticks(x, names)
    ax.set_ylim(0, 1.25)
    ax.set_ylabel("比例")
    ax.set_title(title)
    ax.legend(loc="upper center", ncol=2, fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return ax
