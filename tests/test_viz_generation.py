"""笔记本 05 的图：画得出来，内容与输入一致，坏输入给出清楚的错误。"""
from __future__ import annotations

import numpy as np
import pytest

from gptcourse.viz import generation as vg
from gptcourse.viz.fonts import configure_matplotlib


@pytest.fixture(autouse=True)
def _cjk_font():
    configure_matplotlib()                    # 中文字体，与笔记本里 gc.setup() 相同


def test_frequency_bars_draws_one_group_per_sample_and_the_true_probabilities():
    freqs = {"100 次": [0.52, 0.27, 0.21], "1 万次": [0.5, 0.3, 0.2]}
    fig = vg.frequency_bars([0.5, 0.3, 0.2], freqs, labels=["甲", "乙", "丙"])
    ax = fig.axes[0]
    assert len(ax.patches) == 6                                   # 2 组 × 3 个词元
    assert [t.get_text() for t in ax.get_xticklabels()] == ["甲", "乙", "丙"]
    segs = ax.collections[0].get_segments()
    assert np.allclose([s[0][1] for s in segs], [0.5, 0.3, 0.2])


def test_frequency_bars_rejects_bad_input():
    with pytest.raises(ValueError, match="为空"):
        vg.frequency_bars([0.5, 0.5], {})
    with pytest.raises(ValueError, match="频率有 3 个"):
        vg.frequency_bars([0.5, 0.5], {"x": [0.2, 0.3, 0.5]})


def test_logit_gap_plot_uses_a_log_axis_and_keeps_zeros_visible():
    fig = vg.logit_gap_plot({"对": [0.0, 1e-6, 2e-6], "错": [0.0, 1.5, 3.0]})
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    assert len(ax.lines) == 2
    assert ax.lines[0].get_ydata()[0] == pytest.approx(1e-9)
