"""gptcourse.viz.training：四类训练图都能从 History 或它的字典画出来，标签是中文，坏输入报错。"""
from __future__ import annotations

import pytest

import gptcourse as gc
from gptcourse.optim import lr_at
from gptcourse.train import History

HIST = History(
    steps=[{"step": s, "loss": 5 - 0.1 * s, "lr": lr_at(s - 1, 1e-3, 2, 10),
            "grad_norm": 3.0 / s, "tokens_per_s": 1000.0} for s in range(1, 11)],
    evals=[{"step": s, "train": 5 - 0.1 * s, "val": 5.2 - 0.08 * s} for s in (5, 10)])


def test_lr_schedule_plot():
    lrs = [lr_at(s, 1e-3, 10, 100) for s in range(100)]
    ax = gc.viz.training.plot_lr_schedule(lrs, warmup=10).axes[0]
    assert ax.get_xlabel() == "训练步数" and "预热" in ax.get_title()
    assert list(ax.lines[0].get_ydata()) == lrs


def test_loss_and_grad_norm_plots_accept_history_or_dict():
    for h in (HIST, HIST.to_dict()):
        ax = gc.viz.training.plot_loss_curves(h, reference={"ln V": 6.0}).axes[0]
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert labels == ["每步训练损失（滑动平均）", "训练集（评估）", "验证集（评估）"]
    ax = gc.viz.training.plot_grad_norm(HIST, clip=1.0).axes[0]
    assert "2/10 步被裁剪" in ax.get_title()                      # 范数 3/s：只有 3.0 与 1.5 超过 1
    with pytest.raises(ValueError, match="history"):
        gc.viz.training.plot_loss_curves({"losses": [1, 2]})


def test_ablation_and_gap_plots():
    ax = gc.viz.training.plot_ablation({"甲": HIST, "乙": HIST.to_dict()}).axes[0]
    assert len(ax.lines) == 2 and "最后 4.400" in ax.get_legend().get_texts()[0].get_text()
    ax = gc.viz.training.plot_train_val_gap({"dropout 0": HIST}).axes[0]
    assert len(ax.lines) == 3                                           # 训练、验证、验证最低的星号
    with pytest.raises(ValueError, match="没有 'val' 评估"):
        gc.viz.training.plot_ablation({"空": History(steps=HIST.steps, evals=[])})


def test_gap_plot_marks_best_and_stop():
    ax = gc.viz.training.plot_train_val_gap({"dropout 0": HIST}, stops={"dropout 0": 10}).axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[-1] == "dropout 0：验证最低（第 10 步，4.40）"     # val = 5.2 − 0.08·s
    assert [ln.get_xdata()[0] for ln in ax.lines if ln.get_linestyle() == ":"] == [10]


def test_ablation_bars_mean_and_error():
    r = {"基线": {"按诗": [5.0, 5.2, 5.4], "随机": [6.0]}, "RoPE": {"按诗": [5.1, 5.1, 5.1]}}
    ax = gc.viz.training.plot_ablation_bars(r).axes[0]
    heights = sorted(round(p.get_height(), 3) for p in ax.patches)
    assert heights == [5.1, 5.2, 6.0]                                   # 没有的组合不画柱
    assert [t.get_text() for t in ax.get_xticklabels()] == ["基线", "RoPE"]
    with pytest.raises(ValueError, match="不能为空"):
        gc.viz.training.plot_ablation_bars({})


def test_scaling_envelope():
    runs = {"小": {"flops": [1, 10, 100], "val": [6.0, 5.5, 5.4]},
            "大": {"flops": [10, 100, 1000], "val": [6.2, 5.2, 4.8]}}
    ax = gc.viz.training.plot_scaling(runs).axes[0]
    env = ax.lines[-1]
    assert list(env.get_xdata()) == [1, 10, 100, 1000]       # 下包络：小模型先好，大模型后来居上
    assert list(env.get_ydata()) == [6.0, 5.5, 5.2, 4.8]
    assert ax.get_xscale() == "log"
    with pytest.raises(ValueError, match="一样长"):
        gc.viz.training.plot_scaling({"坏": {"flops": [1, 2], "val": [3.0]}})


def test_probe_plot_three_series_in_percent():
    probe = [{"step": 250, "form_rate": 0.9, "tonal_share": 0.85, "rhyme_rate": 0.05},
             {"step": 500, "form_rate": 0.95, "tonal_share": 0.9, "rhyme_rate": 0.02}]
    ax = gc.viz.training.plot_probe(probe).axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["诗体合格率", "平仄合律的比例", "押韵率"]
    assert list(ax.lines[0].get_ydata()) == [90.0, 95.0]
    with pytest.raises(gc.errors.UserError, match="probe 是空的"):
        gc.viz.training.plot_probe([])


def test_probe_plot_adds_the_leading_indicator_and_its_chance_level_when_recorded():
    probe = [{"step": 250, "form_rate": 0.9, "tonal_share": 0.85, "rhyme_rate": 0.05,
              "group_mass": 0.3, "group_chance": 0.06},
             {"step": 500, "form_rate": 0.95, "tonal_share": 0.9, "rhyme_rate": 0.4,
              "group_mass": 0.6, "group_chance": 0.06}]
    ax = gc.viz.training.plot_probe(probe).axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[3:] == ["领先指标：真诗韵脚上本韵部的概率", "领先指标的机会水平"]
    assert list(ax.lines[3].get_ydata()) == [30.0, 60.0]
    old = [{k: v for k, v in r.items() if not k.startswith("group")} for r in probe]
    assert len(gc.viz.training.plot_probe(old).axes[0].lines) == 3     # 旧检查点：三条线


def test_magnitudes_plot_log_scale_and_bad_values():
    ax = gc.viz.training.plot_magnitudes({"bf16 与 fp32": 2e-4, "换批次": 0.05}).axes[0]
    assert ax.get_yscale() == "log" and [t.get_text() for t in ax.get_xticklabels()] == [
        "bf16 与 fp32", "换批次"]
    assert [p.get_height() for p in ax.patches] == [2e-4, 0.05]
    with pytest.raises(gc.errors.UserError, match="正数"):
        gc.viz.training.plot_magnitudes({"零": 0.0})


def test_resume_plot_overlays_both_runs():
    resumed = History(steps=HIST.steps[5:], evals=[])
    ax = gc.viz.training.plot_resume(HIST, resumed, 5).axes[0]
    assert len(ax.lines[0].get_xdata()) == 10
    assert list(ax.lines[1].get_xdata()) == list(range(6, 11))
    assert ax.get_legend().get_texts()[1].get_text() == "存盘 → 读回 → 续训"
