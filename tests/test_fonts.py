"""中文字体：图中的汉字与负号都必须有字形，不能出现 “Glyph ... missing from font” 警告。"""
from __future__ import annotations

import warnings

import matplotlib
import matplotlib.pyplot as plt
from matplotlib import font_manager

from gptcourse.viz import configure_matplotlib, pipeline_figure, show_heatmap
from gptcourse.viz.fonts import FONT_FAMILY, FONT_FILE


def _render(fig, path) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig.savefig(path, format="png")
    return [str(w.message) for w in caught if "missing from font" in str(w.message)]


def test_registered_family_is_course_font():
    family = configure_matplotlib()
    assert family == FONT_FAMILY == "GPTCourse CJK Sans"
    assert FONT_FILE.is_file()
    names = {f.name for f in font_manager.fontManager.ttflist}
    assert FONT_FAMILY in names
    assert matplotlib.rcParams["font.family"] == ["DejaVu Sans", FONT_FAMILY]
    assert matplotlib.rcParams["font.sans-serif"][:2] == ["DejaVu Sans", FONT_FAMILY]
    # 汉字真的会落到课程字体上（而不是系统里碰巧存在的别的字体）
    found = font_manager.findfont(font_manager.FontProperties(family=FONT_FAMILY),
                                  fallback_to_default=False)
    assert found.endswith("GPTCourseCJKSans-Regular.otf")


def test_chinese_title_ticks_and_minus_render_without_missing_glyphs(tmp_path):
    configure_matplotlib()
    fig, ax = plt.subplots()
    ax.plot([-3, -1, 0, 2], [1.5, -2.5, 0.0, 3.0])
    ax.set_title("字符频率（齐夫定律）：春眠不觉晓")
    ax.set_xticks([-3, 0, 2], labels=["床前", "明月光", "−3.5"])
    ax.set_xlabel("词元（token）")
    ax.set_ylabel("对数几率 logits，负数 -1.25")
    ax.text(0, 0, "五绝 · 七律 · 鲁迅《呐喊》")
    missing = _render(fig, tmp_path / "zh.png")
    assert missing == [], missing
    assert (tmp_path / "zh.png").stat().st_size > 1000


def test_detector_would_catch_missing_glyphs(tmp_path):
    """反向检查：只用 DejaVu Sans 时确实会出现警告，说明上面的测试能失败。"""
    with matplotlib.rc_context({"font.family": ["DejaVu Sans"]}):
        fig, ax = plt.subplots()
        ax.set_title("汉字")
        missing = _render(fig, tmp_path / "bad.png")
    assert missing, "DejaVu Sans 不含汉字，应当出现 Glyph missing 警告"


def test_shared_figures_render(tmp_path):
    configure_matplotlib()
    fig = pipeline_figure(highlight="01")
    assert _render(fig, tmp_path / "pipeline.png") == []
    ax = show_heatmap([[1.0, float("-inf")], [0.25, -0.5]], ["春", "天"], ["来", "了"],
                      title="注意力热力图", annotate=True)
    assert _render(ax.figure, tmp_path / "heat.png") == []


def test_bad_inputs_are_named():
    import pytest

    with pytest.raises(ValueError, match="highlight"):
        pipeline_figure(highlight="06")
    with pytest.raises(ValueError, match="二维"):
        show_heatmap([1, 2, 3])
    with pytest.raises(ValueError, match="col_labels"):
        show_heatmap([[1, 2]], ["a"], ["x"])
