"""笔记本 02 的图：能画出来、刻度是汉字、数据来自真实计算、坏输入给出清楚的错误。"""
from __future__ import annotations

import warnings

import pytest
import torch

from gptcourse import viz
from gptcourse import walkthrough as w
from gptcourse.config import preset
from gptcourse.model import GPT


@pytest.fixture(autouse=True)
def _chinese_font():
    viz.configure_matplotlib()


def draw_without_missing_glyphs(fig) -> None:
    """真正渲染一次；任何"字形缺失"警告（汉字变方框）都算失败。"""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig.canvas.draw()
    missing = [str(c.message) for c in caught if "missing from font" in str(c.message)]
    assert not missing, missing[:3]


def texts(fig) -> str:
    out = []
    for ax in fig.axes:
        out += [t.get_text() for t in ax.texts]
        out += [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()]
        out += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
    if fig._suptitle is not None:
        out.append(fig._suptitle.get_text())
    return "\n".join(out)


def test_mask_table():
    assert viz.attention.mask_table("春眠不觉") == [
        ["✓", "−∞", "−∞", "−∞"], ["✓", "✓", "−∞", "−∞"],
        ["✓", "✓", "✓", "−∞"], ["✓", "✓", "✓", "✓"]]
    md = viz.attention.mask_table_markdown("春眠")
    assert md.splitlines()[0] == "| 查询 ＼ 键 | 春 | 眠 |"
    assert "| **春** | ✓ | −∞ |" in md
    with pytest.raises(ValueError):
        viz.attention.mask_table("")


def test_plot_causal_mask():
    ax = viz.attention.plot_causal_mask("春眠不觉晓")
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == list("春眠不觉晓")
    cells = [t.get_text() for t in ax.texts]
    assert cells.count("✓") == 15 and cells.count("−∞") == 10
    draw_without_missing_glyphs(ax.figure)


def test_attention_grid_from_a_real_model():
    torch.manual_seed(0)
    model = GPT(preset("teacher", vocab_size=30, n_layer=2, n_embd=64)).eval()
    maps = model.attention_maps(torch.randint(30, (1, 6)))
    fig = viz.attention.plot_attention_grid(maps, list("春眠不觉晓，"))
    assert len(fig.axes) == 2 * 4 + 1                                # 8 个头 + 1 条共用的色标
    assert "注意力权重" in fig.axes[-1].get_ylabel()
    t = texts(fig)
    assert "第 2 层 · 头 4" in t and "晓" in t
    draw_without_missing_glyphs(fig)
    fig2 = viz.attention.plot_attention_models({"未训练": maps, "另一个": maps},
                                               list("春眠不觉晓，"))
    assert len(fig2.axes) == 2 * 8 + 1 and "另一个 · 层 1 · 头 1" in texts(fig2)
    fig3 = viz.attention.plot_attention_models({"A": maps}, list("春眠不觉晓，"), layer=1)
    assert len(fig3.axes) == 4 + 1 and "A · 层 2 · 头 1" in texts(fig3)
    bare = viz.attention.plot_attention_grid(maps, list("春眠不觉晓，"), colorbar=False)
    assert len(bare.axes) == 8
    with pytest.raises(ValueError, match="tokens"):
        viz.attention.plot_attention_grid(maps, list("春眠"))
    with pytest.raises(ValueError, match="形状"):
        viz.attention.plot_attention_grid([torch.zeros(2, 3)], list("春眠"))


def test_offset_profiles_figure():
    import numpy as np

    prof = {"五言": np.random.default_rng(0).random((3, 13)), "七言": np.zeros((3, 13))}
    fig = viz.attention.plot_offset_profiles(prof, ["L1H1", "L1H2", "L2H1"], title="偏移")
    assert len(fig.axes) == 3                                        # 两个面板 + 色标
    t = texts(fig)
    assert "五言" in t and "七言" in t and "L2H1" in t and "偏移" in t
    assert "平均注意力权重" in fig.axes[-1].get_ylabel()
    draw_without_missing_glyphs(fig)
    with pytest.raises(ValueError, match="二维"):
        viz.attention.plot_offset_profiles({"x": np.zeros((2, 5))}, ["a", "b", "c"])
    with pytest.raises(ValueError, match="为空"):
        viz.attention.plot_offset_profiles({}, [])


def test_rope_figures():
    fig = viz.rope.plot_rope_clock(pairs=(0, 2), head_dim=8, n_pos=6)
    assert len(fig.axes) == 2 and "第 2 对维度" in texts(fig)
    draw_without_missing_glyphs(fig)
    with pytest.raises(ValueError):
        viz.rope.plot_rope_clock(pairs=(4,), head_dim=8)
    s = viz.rope.rope_scores_by_offset(head_dim=16, n_pos=20)
    assert s.shape == (20, 20)
    torch.testing.assert_close(torch.diagonal(s, -3), torch.diagonal(s, -3)[0].expand(17),
                               atol=1e-4, rtol=1e-4)
    fig = viz.rope.plot_rope_offset(head_dim=16, n_pos=20, query_positions=(5, 19))
    assert "相对距离" in texts(fig)
    draw_without_missing_glyphs(fig)
    fig = viz.rope.plot_rope_angles(head_dim=16, n_pos=20)
    assert "位置 m" in texts(fig)
    draw_without_missing_glyphs(fig)


def test_walkthrough_figure_shows_the_traced_values():
    trace = w.run()
    boxes = viz.walkthrough.walkthrough_boxes(trace)
    assert boxes[-1] == ("贪心解码", "下一个字：来")
    fig = viz.walkthrough.plot_walkthrough(trace)
    t = texts(fig)
    for s in ("[−0.8884, 1.9884]", "0.6964", "logits [−1, 1, 2, −2]", "春 0.0558、天 0.9442",
              "春 −1.41、天 1.41"):
        assert s in t, s
    draw_without_missing_glyphs(fig)
