"""笔记本 05 的图：温度如何改变分布、下一个字的概率条形图、生成速度随长度的变化。"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import UserError


def temperature_bars(logits: Sequence[float], taus: Sequence[float] = (0.5, 1.0, 2.0),
                     labels: Sequence[str] | None = None, ax=None):
    """同一组 logits 在几个温度下的 softmax 概率，分组条形图。返回 Figure。"""
    import matplotlib.pyplot as plt

    x = np.asarray(logits, dtype=float)
    labels = list(labels) if labels is not None else [f"词元{i}" for i in range(len(x))]
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.6))
    width = 0.8 / len(taus)
    pos = np.arange(len(x))
    for j, tau in enumerate(taus):
        z = x / tau
        p = np.exp(z - z.max())
        p /= p.sum()
        bars = ax.bar(pos + (j - (len(taus) - 1) / 2) * width, p, width, label=f"τ = {tau:g}")
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
    ax.set_xticks(pos, [f"{lab}\nlogit {v:g}" for lab, v in zip(labels, x)])
    ax.set_ylabel("概率")
    ax.set_title("温度：logits / τ 再做 softmax")
    ax.legend()
    return ax.figure


def token_bars(probs, tok, k: int = 15, ax=None, title: str = "下一个字的概率（前 15 名）",
               kept=None):
    """概率最高的 k 个词元的条形图；``kept``（[V] 布尔）给出时，被过滤掉的画成灰色。"""
    import matplotlib.pyplot as plt

    probs = np.asarray(probs, dtype=float)
    order = np.argsort(-probs, kind="stable")[:k]
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.2))
    pieces = [tok.piece(int(i)) for i in order]                 # 分词器协议：字和 BPE 词元都行
    names = [repr(p) if p in ("\n", " ") else p for p in pieces]
    colors = ["C0" if kept is None or bool(kept[i]) else "lightgray" for i in order]
    ax.bar(range(len(order)), probs[order], color=colors)
    ax.set_xticks(range(len(order)), names)
    ax.set_ylabel("概率")
    ax.set_title(title)
    return ax.figure


def speed_plot(lengths: Sequence[int], series: dict[str, Sequence[float]], ax=None,
               title: str = "生成速度与生成长度"):
    """每条曲线一种做法（如 带缓存 / 不带缓存），纵轴词元/秒，横轴生成的词元数（都是对数坐标）。"""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.8))
    for (name, ys), marker in zip(series.items(), "osd^v"):
        ax.plot(lengths, ys, marker=marker, label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(ScalarFormatter())
    ax.tick_params(axis="y", which="minor", labelsize=8)
    ax.set_xticks(list(lengths), [str(n) for n in lengths])
    return _finish(ax, "生成的新词元数", "词元 / 秒（对数坐标）", title)


def frequency_bars(probs: Sequence[float], freqs: dict[str, Sequence[float]],
                   labels: Sequence[str] | None = None, ax=None,
                   title: str = "抽样频率与概率"):
    """真实概率（黑色横线）与几组抽样得到的频率（条形）。``freqs``：{名字: 每个词元的频率}。"""
    import matplotlib.pyplot as plt

    p = np.asarray(probs, dtype=float)
    if not freqs:
        raise UserError("freqs 为空：至少给一组抽样频率")
    labels = list(labels) if labels is not None else [f"词元{i}" for i in range(len(p))]
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.6))
    width = 0.8 / len(freqs)
    pos = np.arange(len(p))
    for j, (name, f) in enumerate(freqs.items()):
        f = np.asarray(f, dtype=float)
        if f.shape != p.shape:
            raise UserError(f"{name} 的频率有 {f.size} 个，概率有 {p.size} 个")
        bars = ax.bar(pos + (j - (len(freqs) - 1) / 2) * width, f, width, label=name)
        ax.bar_label(bars, fmt="%.3f", fontsize=7)
    ax.hlines(p, pos - 0.45, pos + 0.45, colors="black", linewidth=2, label="真实概率")
    ax.set_xticks(pos, labels)
    ax.set_ylabel("频率 / 概率")
    ax.set_title(title)
    ax.legend()
    return ax.figure


def logit_gap_plot(gaps: dict[str, Sequence[float]], ax=None,
                   title: str = "带缓存的 logits 与整段重算之差"):
    """每条曲线：每个位置上 max |logits − 整段重算的 logits|（对数纵轴；0 画在 1e-9 处）。"""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.6))
    for name, g in gaps.items():
        g = np.maximum(np.asarray(g, dtype=float), 1e-9)
        ax.plot(np.arange(len(g)), g, label=name)
    ax.set_yscale("log")
    return _finish(ax, "位置", "最大 |logits 之差|（对数坐标）", title)


def _finish(ax, xlabel: str, ylabel: str, title: str):
    """曲线图的收尾：坐标轴名、标题、浅网格、图例 → Figure。"""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    return ax.figure
