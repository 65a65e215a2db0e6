"""笔记本 04 的图：画得出来，内容与输入一致，坏输入给出清楚的错误。"""
from __future__ import annotations

import numpy as np
import pytest

from gptcourse.evaluate import loss_by_position
from gptcourse.viz import evaluation as ve
from gptcourse.viz.fonts import configure_matplotlib


def _pos(scale=1.0):
    text = "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。\n朝辞白帝彩云间，千里江陵一日还。\n"
    import torch
    return loss_by_position(torch.arange(len(text), dtype=torch.float32) * scale, text)


@pytest.fixture(autouse=True)
def _cjk_font():
    configure_matplotlib()                    # 中文字体，与笔记本里 gc.setup() 相同


def test_position_loss_draws_characters_as_lines_and_marks_apart_with_a_reference():
    left, right = ve.position_loss(_pos(), ref=_pos(0.5))
    # 每种句长：句中的字一条线、标点换行一组点、参照一条虚线
    assert len(left.lines) == 2 * 3 + 1                  # + 分隔字与标点的竖线
    five = left.lines[0]
    assert len(five.get_xdata()) == 5 and five.get_linestyle() == "-"
    assert left.lines[1].get_linestyle() == "None"
    assert left.lines[2].get_linestyle() == "--"
    assert right.get_ylim()[0] == 0
    assert len(right.patches) == 8                       # 第 1–8 句（这里没有律诗：后 4 句是 nan）


def test_verse_bars_draws_two_bars_per_group():
    ax = ve.verse_bars({"真诗": (0.88, 0.94), "打乱": (0.05, 0.5), "模型": (0.04, 0.93)})
    assert len(ax.patches) == 6
    assert [t.get_text() for t in ax.get_xticklabels()] == ["真诗", "打乱", "模型"]
    assert np.isclose(ax.patches[0].get_height(), 0.88)
    with pytest.raises(ValueError, match="为空"):
        ve.verse_bars({})
