"""JupyterLab 实时演示的回调（issue 53 第 3 项）：``gc.viz.live.sampling`` 与 ``.attention``。

这里不开浏览器：直接改控件的值（与前端拖动滑块后内核收到的一样，traitlets 同步调用回调），
看重算的一帧与重画的图。每一帧都与库函数直接算的结果比较（:func:`next_token_stages`、
:func:`generate`、``model.attention_maps``）。在真的 JupyterLab 里拖滑块的测试见
``tests/test_live_jupyterlab.py``。

ipywidgets 是课程的 ``live`` 附加依赖：没装时这些测试跳过，但 CI=true（``.ci/run`` 装了它）时
缺了就是失败。
"""
from __future__ import annotations

import base64
import os
import statistics
import subprocess
import sys

import pytest
import torch

import gptcourse as gc
from gptcourse.errors import UserError
from gptcourse.evaluate import text_attention
from gptcourse.generate import generate, next_token_stages
from gptcourse.runtime import ROOT
from gptcourse.viz import live

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module", autouse=True)
def widgets():
    try:
        import ipywidgets
    except ImportError:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail('ipywidgets 没有安装（.[live]）；CI 里实时演示的测试不能跳过')
        pytest.skip('可选依赖 ipywidgets（pip install -e ".[live]"）没有安装')
    return ipywidgets


@pytest.fixture(scope="module")
def shipped():
    gc.setup(seed=0)
    model, tok, _ = gc.checkpoint.load()
    return model, tok


@pytest.fixture(scope="module")
def demo(shipped):
    return live.sampling(*shipped, prompt="春风", temperature=0.8, top_k=0, top_p=0.9, seed=3)


# ---------------------------------------------------------------- 采样
def test_temperature_slider_redraws_the_bars(demo, shipped):
    model, tok = shipped
    demo.controls["temperature"].value = 0.8
    warm, warm_png = demo.frame["shown"].clone(), demo.image.value
    demo.controls["temperature"].value = 0.3
    cold = demo.frame["shown"]
    want = next_token_stages(model, tok, "春风", temperature=0.3, top_p=0.9)["temperature"]
    torch.testing.assert_close(cold, want.softmax(-1))                  # 条形的高度 = 库算的分布
    assert cold.max() > warm.max() and cold.argmax() == warm.argmax()   # 低温：第一名更尖，排序不变
    assert demo.image.value != warm_png and bytes(demo.image.value).startswith(PNG)
    title = demo._fig.axes[0].get_title()
    assert title.startswith("「春风」之后：τ = 0.3，top-k = 不限，top-p = 0.9"), title
    assert "抽样时最可能的字" in demo.readout.value
    demo.controls["temperature"].value = 0.0                             # 贪心：只剩一个字
    assert int(demo.frame["kept"].sum()) == 1 and float(demo.frame["sample"].max()) == 1.0
    demo.controls["temperature"].value = 0.8


def test_top_k_slider_keeps_exactly_k_characters(demo, shipped):
    demo.controls["top_p"].value = 1.0                                   # 不截断：只看 top-k
    demo.controls["top_k"].value = 3
    assert int(demo.frame["kept"].sum()) == 3
    kept = demo.frame["kept"].nonzero().flatten().tolist()
    assert kept == sorted(demo.frame["shown"].topk(3).indices.tolist())  # 留下的正是前 3 名
    assert abs(float(demo.frame["sample"].sum()) - 1.0) < 1e-5           # 截断后重新归一
    demo.controls["top_k"].value = 0
    assert int(demo.frame["kept"].sum()) == shipped[1].vocab_size - 1    # 不限：只有 <unk> 被禁用
    demo.controls["top_p"].value = 0.9


def test_poem_is_reproducible_for_a_fixed_seed(demo, shipped):
    model, tok = shipped
    demo.controls["seed"].value = 3
    poem = demo.frame["poem"]
    assert poem == generate(model, tok, "春风", temperature=0.8, top_p=0.9, seed=3)
    assert poem.startswith("春风") and poem in demo.readout.value
    demo.controls["seed"].value = 4
    assert demo.frame["poem"] != poem
    demo.controls["seed"].value = 3
    assert demo.frame["poem"] == poem                                    # 同一个种子，同一首诗
    again = live.sampling(model, tok, prompt="春风", temperature=0.8, top_p=0.9, seed=3)
    assert again.frame["poem"] == poem and again.image.value == demo.image.value


def test_prompt_box_and_verse_settings(shipped):
    model, tok = shipped
    d = live.sampling(model, tok, prompt="白日", form="五绝", seed=1)
    assert d.frame["poem"] == generate(model, tok, "白日", form="五绝", temperature=0.8,
                                       top_p=0.9, seed=1)
    d.controls["prompt"].value = "明月"
    assert d.frame["prompt"] == "明月" and d.frame["poem"].startswith("明月")
    assert gc.verse.check_form(d.frame["poem"], "五绝")


def test_bad_prompt_says_why_and_keeps_the_last_picture(demo):
    before, png = demo.frame, demo.image.value
    demo.controls["prompt"].value = "春☃"
    assert "☃" in demo.readout.value and "color:#a50f15" in demo.readout.value
    assert demo.frame is before and demo.image.value == png
    demo.controls["prompt"].value = "春风"
    assert demo.frame is not before and "a50f15" not in demo.readout.value


@pytest.mark.parametrize("kw, word", [
    ({"temperature": 5.0}, "temperature"), ({"temperature": -0.1}, "temperature"),
    ({"top_k": 2.5}, "top_k"), ({"top_k": 101}, "top_k"), ({"top_p": 0.0}, "top_p"),
    ({"seed": -1}, "seed"), ({"temperature": "hot"}, "temperature"),
    ({"prompt": "☃"}, "☃"),
])
def test_bad_starting_values_are_refused_clearly(shipped, kw, word):
    with pytest.raises(UserError, match=word):
        live.sampling(*shipped, **kw)


def test_display_carries_a_static_png_for_places_without_widgets(demo):
    """单元格的输出：控件（JupyterLab 里能拖）+ 同一张图的 PNG（提交的笔记本、网站、
    幻灯片显示它）。"""
    from IPython.core.formatters import DisplayFormatter

    data, _ = DisplayFormatter().format(demo)
    assert "application/vnd.jupyter.widget-view+json" in data
    assert base64.b64decode(data["image/png"]) == bytes(demo.image.value)
    assert "JupyterLab" in data["text/plain"]


def test_updates_are_timed(demo):
    """每次更新的用时都记下来（读数里也显示）；这里只是一个宽松的健全性检查，不是性能结论。"""
    n = len(demo.timings)
    for t in (0.5, 0.6, 0.7, 0.8):
        demo.controls["temperature"].value = t
    assert len(demo.timings) == n + 4
    assert statistics.median(demo.timings[-4:]) < 5.0
    assert "毫秒" in demo.readout.value


def test_an_update_computes_on_one_thread_and_restores_the_thread_count(demo):
    compute, seen = demo._compute, []

    def spy(values):
        seen.append(torch.get_num_threads())
        return compute(values)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    demo._compute = spy
    try:
        demo.controls["seed"].value = 5
        assert seen == [1] and torch.get_num_threads() == 2
    finally:
        demo._compute = compute
        torch.set_num_threads(before)
        demo.controls["seed"].value = 3


# ---------------------------------------------------------------- 注意力
LINE = "白日依山尽，黄河入海流。"


def test_attention_grid_is_t_by_t_for_the_chosen_layer_and_head(shipped):
    model, tok = shipped
    d = live.attention(model, tok, text=LINE, layer=1, head=2)
    T = len(LINE) + 1
    assert d.frame["weights"].shape == (T, T) and d.frame["tokens"] == ["\n", *LINE]
    ids = torch.tensor([[tok.eos_id] + tok.encode(LINE)])
    want = model.attention_maps(ids)
    torch.testing.assert_close(d.frame["weights"], want[1][0, 2])
    assert (d.frame["weights"].triu(1) == 0).all()                      # 看不到未来
    first = d.image.value
    d.controls["head"].value = 0
    torch.testing.assert_close(d.frame["weights"], want[1][0, 0])
    assert d.image.value != first and "第 2 层 · 头 1" in d.readout.value
    d.controls["layer"].value = 3
    torch.testing.assert_close(d.frame["weights"], want[3][0, 0])
    d.controls["text"].value = "床前明月光"
    assert d.frame["weights"].shape == (6, 6) and d.frame["tokens"][1:] == list("床前明月光")


@pytest.mark.parametrize("kw, word", [
    ({"layer": 4}, "layer 应是 0…3"), ({"layer": -1}, "layer"), ({"head": 4}, "head 应是 0…3"),
    ({"head": 1.5}, "head"), ({"text": ""}, "非空"), ({"text": "春☃"}, "☃"),
    ({"text": "春" * 200}, "太长"),
])
def test_bad_layer_head_or_text_is_refused_clearly(shipped, kw, word):
    with pytest.raises(UserError, match=word):
        live.attention(*shipped, **kw)


def test_dropdowns_only_offer_real_layers_and_heads(shipped, widgets):
    import traitlets

    d = live.attention(*shipped, text="春风")
    assert [v for _, v in d.controls["layer"].options] == [0, 1, 2, 3]
    assert [v for _, v in d.controls["head"].options] == [0, 1, 2, 3]
    with pytest.raises(traitlets.TraitError):
        d.controls["layer"].value = 9                                    # 下拉框拒绝不存在的层
    d.controls["text"].value = "春" * 200                                # 太长：读数说清楚，图不变
    assert "太长" in d.readout.value and d.frame["text"] == "春风"


def test_text_attention_is_what_the_server_and_the_widget_share(shipped):
    model, tok = shipped
    tokens, maps = text_attention(model, tok, LINE)
    T = len(LINE) + 1
    assert tokens == ["\n", *LINE] and len(maps) == model.config.n_layer
    assert all(m.shape == (model.config.n_head, T, T) for m in maps)
    torch.testing.assert_close(torch.stack(maps).sum(-1), torch.ones(4, 4, T))
    assert all(m._record is None for m in model.modules() if hasattr(m, "_record"))
    with pytest.raises(UserError, match="太长"):
        text_attention(model, tok, "春" * model.config.block_size)
    assert len(text_attention(model, tok, "春" * (model.config.block_size - 1))[0]) == 128


def test_plot_attention_grid_draws_only_the_chosen_heads(shipped):
    import matplotlib.pyplot as plt

    model, tok = shipped
    tokens, maps = text_attention(model, tok, "春风")
    fig = gc.viz.attention.plot_attention_grid([m[None] for m in maps], tokens, layers=[2],
                                               heads=[1, 3], colorbar=False)
    assert [ax.get_title() for ax in fig.axes] == ["第 3 层 · 头 2", "第 3 层 · 头 4"]
    plt.close(fig)
    with pytest.raises(UserError, match="heads 应是 0…3"):
        gc.viz.attention.plot_attention_grid(maps, tokens, heads=[4])
    with pytest.raises(UserError, match="layers"):
        gc.viz.attention.plot_attention_grid(maps, tokens, layers=[])


# ---------------------------------------------------------------- 没有 ipywidgets
def test_without_ipywidgets_the_package_still_imports():
    code = ("import sys; sys.modules['ipywidgets'] = None\n"
            "import gptcourse as gc\n"
            "assert gc.viz.live.sampling\n"
            "assert not [m for m in sys.modules if m.startswith('ipywidgets') and sys.modules[m]]\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_without_ipywidgets_the_demo_names_the_extra(monkeypatch, shipped):
    monkeypatch.setitem(sys.modules, "ipywidgets", None)                 # import ipywidgets 失败
    live._demo_class.cache_clear()
    try:
        with pytest.raises(ImportError, match=r'pip install -e "\.\[live\]"'):
            live.sampling(*shipped)
        with pytest.raises(ImportError, match="ipywidgets"):
            live.attention(*shipped)
    finally:
        live._demo_class.cache_clear()
