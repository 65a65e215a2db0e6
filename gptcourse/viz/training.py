"""训练的图：学习率日程、训练/验证损失曲线、梯度范数、过拟合缺口、消融实验对比、损失与计算量。

参数里的 ``history`` 可以是 ``gptcourse.train.History``，也可以是它的 ``to_dict()``
（例如检查点 ``meta["history"]``）。每个函数返回 matplotlib Figure。
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import UserError


def _rows(history) -> tuple[list[dict], list[dict]]:
    d = history.to_dict() if hasattr(history, "to_dict") else history
    if not isinstance(d, Mapping) or "steps" not in d:
        raise UserError("history 应是 History 或含 'steps'/'evals' 的字典")
    return list(d["steps"]), list(d.get("evals", []))


def _smooth(y: np.ndarray, window: int) -> np.ndarray:
    """居中的滑动平均（两端用已有的点），让每步都抖动的损失看得清趋势，又不像只看过去那样滞后。"""
    if window <= 1 or len(y) < 2:
        return y
    half = window // 2
    c = np.cumsum(np.insert(y, 0, 0.0))
    i = np.arange(len(y))
    lo, hi = np.maximum(i - half, 0), np.minimum(i + half + 1, len(y))
    return (c[hi] - c[lo]) / (hi - lo)


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
        ax.annotate("预热结束", (warmup, 0), xycoords=("data", "axes fraction"), xytext=(6, 8),
                    textcoords="offset points", color="gray")
    floor = min(lrs[warmup or 0:])
    ax.axhline(floor, color="#868e96", ls=":", lw=1)
    ax.annotate("最小学习率（下限）", (len(lrs) - 1, floor), xytext=(-4, 4),
                textcoords="offset points", ha="right", color="#868e96")
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
            raise UserError(f"{name} 的历史里没有 {split!r} 评估")
        ax.plot([r["step"] for r in evals], [r[split] for r in evals], "o-", ms=3,
                label=f"{name}（最后 {evals[-1][split]:.3f}）")
    ax.set_xlabel("训练步数")
    ax.set_ylabel("验证损失（nats/字）" if split == "val" else "训练损失（nats/字）")
    ax.set_title(title)
    ax.legend()
    return fig


def plot_train_val_gap(results: Mapping[str, object], ax=None,
                       title: str = "过拟合：训练损失与验证损失",
                       stops: Mapping[str, int] | None = None):
    """每个 history 画训练（实线）与验证（虚线）两条评估曲线，同色；看两者之间的缺口。

    验证损失最低的那次评估画成星号（早停会留下的检查点）；``stops`` = {名字: 步数} 时在那一步画竖线
    （耐心用完、早停真正停下的地方）。
    """
    fig, ax = _axes(ax, (7.2, 4.2))
    for i, (name, history) in enumerate(results.items()):
        _, evals = _rows(history)
        e = [r["step"] for r in evals]
        ax.plot(e, [r["train"] for r in evals], "-", color=f"C{i}", lw=2, label=f"{name}：训练集")
        ax.plot(e, [r["val"] for r in evals], "--", color=f"C{i}", lw=2, label=f"{name}：验证集")
        best = min(evals, key=lambda r: r["val"])
        ax.plot([best["step"]], [best["val"]], "*", color=f"C{i}", ms=14, mec="black",
                label=f"{name}：验证最低（第 {best['step']} 步，{best['val']:.2f}）")
        if stops and name in stops:
            ax.axvline(stops[name], color=f"C{i}", ls=":", lw=1.2)
    ax.set_xlabel("训练步数")
    ax.set_ylabel("损失（nats/字）")
    ax.set_title(title)
    ax.legend(fontsize="small")
    return fig


def plot_ablation_bars(results: Mapping[str, Mapping[str, Sequence[float]]], ax=None,
                       title: str = "消融实验：最后的验证损失（均值 ± 标准差）"):
    """分组柱状图：results = {变体名: {窗口方案: [每个种子的验证损失]}}。

    柱高是种子的平均，误差线是标准差（只有一个种子时不画），小圆点是每个种子自己的结果。
    """
    names = list(results)
    schemes = list(dict.fromkeys(k for v in results.values() for k in v))
    if not names or not schemes:
        raise UserError("results 应是 {变体名: {窗口方案: [验证损失, …]}}，不能为空")
    fig, ax = _axes(ax, (8.4, 4.4))
    width = 0.8 / len(schemes)
    lows = []
    for j, scheme in enumerate(schemes):
        xs, means, sds = [], [], []
        for i, name in enumerate(names):
            vals = np.asarray(results[name].get(scheme, []), dtype=float)
            if len(vals) == 0:
                continue
            x = i + (j - (len(schemes) - 1) / 2) * width
            xs.append(x)
            means.append(vals.mean())
            sds.append(vals.std(ddof=1) if len(vals) > 1 else 0.0)
            ax.plot([x] * len(vals), vals, "o", color="black", ms=3, zorder=3)
            lows.append(vals.min())
        ax.bar(xs, means, width * 0.92, yerr=sds, capsize=4, color=f"C{j}", alpha=0.8,
               label=scheme)
    top = max(max(np.max(v) for v in r.values() if len(v)) for r in results.values())
    ax.set_ylim(min(lows) - 0.15 * (top - min(lows) + 0.05), top + 0.35 * (top - min(lows) + 0.05))
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, fontsize="small")
    ax.set_ylabel("验证损失（nats/字，越低越好）")
    ax.set_title(title)
    ax.legend(loc="upper left", ncol=len(schemes))
    return fig


def plot_scaling(runs: Mapping[str, Mapping[str, Sequence[float]]], ax=None,
                 title: str = "损失与计算量：不同大小的模型"):
    """runs = {模型名: {"flops": [...], "val": [...]}}：横轴是训练用掉的浮点运算（对数坐标）。

    灰色粗线是所有模型的下包络：给定计算量时能达到的最低验证损失，以及是哪个模型达到的。
    """
    fig, ax = _axes(ax, (7.2, 4.4))
    points = []
    for i, (name, r) in enumerate(runs.items()):
        f, v = np.asarray(r["flops"], dtype=float), np.asarray(r["val"], dtype=float)
        if len(f) != len(v) or len(f) == 0:
            raise UserError(f"{name} 的 flops 与 val 应一样长且不为空")
        ax.plot(f, v, "o-", ms=3, color=f"C{i}", label=name)
        points += list(zip(f, v))
    points.sort()
    env_f, env_v, best = [], [], float("inf")
    for f, v in points:
        if v < best:
            best = v
            env_f.append(f)
            env_v.append(v)
    ax.step(env_f, env_v, where="post", color="gray", lw=5, alpha=0.3,
            label="下包络（给定计算量的最好结果）")
    ax.set_xscale("log")
    ax.set_xlabel("训练计算量（浮点运算次数，≈ 6·N·词元数，对数坐标）")
    ax.set_ylabel("验证损失（nats/字）")
    ax.set_title(title)
    ax.legend()
    return fig


PROBE_SERIES = {"form_rate": "诗体合格率", "tonal_share": "平仄合律的比例", "rhyme_rate": "押韵率",
                "group_mass": "领先指标：真诗韵脚上本韵部的概率"}


def plot_probe(probe: Sequence[Mapping[str, float]], ax=None,
               title: str = "训练中的格律探针（自由采样，不加约束）"):
    """检查点的 ``meta["probe"]``：每次一行，step 与 form_rate、tonal_share、rhyme_rate，
    以及（记了它的检查点）领先指标 group_mass——画成虚线，机会水平 group_chance 画成灰色点线。"""
    rows = [r for r in probe if "step" in r]
    if not rows:
        raise UserError("probe 是空的：检查点里没有训练探针的记录")
    fig, ax = _axes(ax, (6.4, 3.6))
    steps = [r["step"] for r in rows]
    for key, label in PROBE_SERIES.items():
        if all(r.get(key) is not None for r in rows):
            style = dict(ls="--", color="#7048e8") if key == "group_mass" else {}
            ax.plot(steps, [100 * r[key] for r in rows], marker="o", lw=2, label=label, **style)
    if all(r.get("group_chance") is not None for r in rows):
        ax.plot(steps, [100 * r["group_chance"] for r in rows], ls=":", color="gray", lw=1.5,
                label="领先指标的机会水平")
    ax.set_ylim(0, 105)
    ax.set_xlabel("训练步数")
    ax.set_ylabel("%")
    ax.set_title(title)
    ax.legend()
    return fig


def plot_magnitudes(values: Mapping[str, float], ax=None, title: str = "几个差距的大小",
                    unit: str = "nats/字"):
    """几个（正的）量并排画成条形，对数纵轴：一眼看出它们差了几个数量级。"""
    if not values or any(not np.isfinite(v) or v <= 0 for v in values.values()):
        raise UserError(f"values 应是非空的 {{名字: 正数}}，收到 {dict(values)!r}")
    fig, ax = _axes(ax, (6.4, 3.6))
    names, vals = list(values), [float(v) for v in values.values()]
    palette = ["#4c6ef5", "#868e96", "#fa5252", "#40c057"]
    bars = ax.bar(range(len(vals)), vals, color=palette[:len(vals)] if len(vals) <= 4 else None)
    for b, v in zip(bars, vals):
        ax.annotate(f"{v:.2g}", (b.get_x() + b.get_width() / 2, v), xytext=(0, 3),
                    textcoords="offset points", ha="center")
    ax.set_xticks(range(len(vals)), names)
    ax.set_yscale("log")
    ax.set_ylabel(f"{unit}（对数刻度）")
    ax.set_title(title)
    return fig


def plot_resume(full, resumed, resume_step: int, ax=None,
                title: str = "续训与不中断训练：每步的训练损失"):
    """两次训练（一口气 / 中途存盘再续训）的每步损失画在一起，竖线标出续训的位置。"""
    fig, ax = _axes(ax, (6.4, 3.6))
    runs = ((full, dict(lw=4, alpha=0.35), "一口气训练"),
            (resumed, dict(lw=1.5, ls="--", marker="."), "存盘 → 读回 → 续训"))
    for history, style, label in runs:
        steps, _ = _rows(history)
        ax.plot([r["step"] for r in steps], [r["loss"] for r in steps], label=label, **style)
    ax.axvline(resume_step, color="gray", ls=":", lw=1)
    ax.annotate("从这里续训", (resume_step, 1), xycoords=("data", "axes fraction"), xytext=(4, -14),
                textcoords="offset points", color="gray")
    ax.set_xlabel("训练步数")
    ax.set_ylabel("交叉熵损失（nats/字）")
    ax.set_title(title)
    ax.legend(loc="lower left")
    return fig
