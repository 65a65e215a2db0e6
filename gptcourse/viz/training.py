"""训练的四张图：学习率日程、训练/验证损失曲线、梯度范数、消融实验对比。

参数里的 ``history`` 可以是 ``gptcourse.train.History``，也可以是它的 ``to_dict()``
（例如检查点 ``meta["history"]``）。每个函数返回 matplotlib Figure。
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def _rows(history) -> tuple[list[dict], list[dict]]:
    d = history.to_dict() if hasattr(history, "to_dict") else history
    if not isinstance(d, Mapping) or "steps" not in d:
        raise ValueError("history 应是 History 或含 'steps'/'evals' 的字典")
    return list(d["steps"]), list(d.get("evals", []))


def _smooth(y: np.ndarray, window: int) -> np.ndarray:
    """滑动平均（前 window−1 个点用已有的点平均），让每步都抖动的损失看得清趋势。"""
    if window <= 1 or len(y) < 2:
        return y
    c = np.cumsum(np.insert(y, 0, 0.0))
    n = np.minimum(np.arange(1, len(y) + 1), window)
    return (c[1:] - c[np.arange(1, len(y) + 1) - n]) / n


def _axes(ax, figsize):
    import matplotlib.pyplot as plt
    if ax is None:
        return plt.subplots(figsize=figsize)
    return ax.figure, ax


def plot_lr_schedule(lrs: Sequence[float], warmup: int | None = None, ax=None,
                     title: str = "学习率日程：线性预热 + 余弦衰减"):
    """lrs[i] = 第 i 步的学习率；给出 warmup 时用竖线标出预热结束。"""
    fig, ax = _axes(ax, (6.4, 3.6))
    steps = np.arange(len(lrs))
    ax.plot(steps, lrs, lw=2)
    if warmup:
        ax.axvline(warmup, color="gray", ls="--", lw=1)
        ax.annotate("预热结束", (warmup, max(lrs)), xytext=(6, -14), textcoords="offset points")
    ax.axhline(min(lrs[warmup or 0:]), color="#adb5bd", ls=":", lw=1)
    ax.set_xlabel("训练步数")
    ax.set_ylabel("学习率")
    ax.set_title(title)
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    return fig


def plot_loss_curves(history, ax=None, title: str = "训练与验证损失", smooth: int = 20,
                     label: str = "", reference: Mapping[str, float] | None = None):
    """每步的训练损失（淡色为原始值，实线为滑动平均）与每次评估的训练/验证损失（圆点）。

    ``reference`` 可以画几条水平参考线，例如 {"ln V（瞎猜）": 8.77}。
    """
    fig, ax = _axes(ax, (7.2, 4.2))
    steps, evals = _rows(history)
    prefix = f"{label} " if label else ""
    if steps:
        s = np.array([r["step"] for r in steps])
        y = np.array([r["loss"] for r in steps], dtype=float)
        line, = ax.plot(s, y, alpha=0.25, lw=1)
        ax.plot(s, _smooth(y, smooth), color=line.get_color(), lw=2,
                label=f"{prefix}每步训练损失（滑动平均）")
    if evals:
        e = [r["step"] for r in evals]
        if "train" in evals[0]:
            ax.plot(e, [r["train"] for r in evals], "o-", ms=4, label=f"{prefix}训练集（评估）")
        if "val" in evals[0]:
            ax.plot(e, [r["val"] for r in evals], "s-", ms=4, label=f"{prefix}验证集（评估）")
    for name, value in (reference or {}).items():
        ax.axhline(value, color="gray", ls="--", lw=1)
        ax.annotate(name, (ax.get_xlim()[1], value), xytext=(-4, 4), textcoords="offset points",
                    ha="right", color="gray")
    ax.set_xlabel("训练步数")
    ax.set_ylabel("交叉熵损失（nats/字）")
    ax.set_title(title)
    ax.legend()
    return fig


def plot_grad_norm(history, clip: float | None = None, ax=None,
                   title: str = "梯度的全局范数（裁剪之前）"):
    """每步裁剪前的全局梯度范数；给出 clip 时画出裁剪阈值，阈值以上的步会被按比例缩小。"""
    fig, ax = _axes(ax, (6.4, 3.6))
    steps, _ = _rows(history)
    s = [r["step"] for r in steps]
    norms = [r["grad_norm"] for r in steps]
    ax.plot(s, norms, lw=1.2, label="‖g‖（裁剪前）")
    if clip:
        ax.axhline(clip, color="C3", ls="--", lw=1.2, label=f"裁剪阈值 {clip:g}")
        n_clipped = sum(v > clip for v in norms)
        ax.set_title(f"{title}：{n_clipped}/{len(norms)} 步被裁剪")
    else:
        ax.set_title(title)
    ax.set_yscale("log")
    ax.set_xlabel("训练步数")
    ax.set_ylabel("梯度范数（对数坐标）")
    ax.legend()
    return fig


def plot_ablation(results: Mapping[str, object], split: str = "val", ax=None,
                  title: str = "消融实验：验证损失"):
    """把几次短训练的评估曲线画在一张图上：results = {名字: history}。"""
    fig, ax = _axes(ax, (7.2, 4.2))
    for name, history in results.items():
        _, evals = _rows(history)
        if not evals or split not in evals[0]:
            raise ValueError(f"{name} 的历史里没有 {split!r} 评估")
        ax.plot([r["step"] for r in evals], [r[split] for r in evals], "o-", ms=3,
                label=f"{name}（最后 {evals[-1][split]:.3f}）")
    ax.set_xlabel("训练步数")
    ax.set_ylabel("验证损失（nats/字）" if split == "val" else "训练损失（nats/字）")
    ax.set_title(title)
    ax.legend()
    return fig


def plot_train_val_gap(results: Mapping[str, object], ax=None,
                       title: str = "过拟合：训练损失与验证损失"):
    """每个 history 画训练（实线）与验证（虚线）两条评估曲线，同色；看两者之间的缺口。"""
    fig, ax = _axes(ax, (7.2, 4.2))
    for i, (name, history) in enumerate(results.items()):
        _, evals = _rows(history)
        e = [r["step"] for r in evals]
        ax.plot(e, [r["train"] for r in evals], "-", color=f"C{i}", lw=2, label=f"{name}：训练集")
        ax.plot(e, [r["val"] for r in evals], "--", color=f"C{i}", lw=2, label=f"{name}：验证集")
    ax.set_xlabel("训练步数")
    ax.set_ylabel("损失（nats/字）")
    ax.set_title(title)
    ax.legend()
    return fig
