"""网页演示的端到端测试：无界面 Chromium 打开页面、输入开头、点"写诗"，看着诗一个字一个字出现。

浏览器由 chromedriver 驱动；WebDriver 协议就是 HTTP + JSON，所以只用标准库（urllib），
不需要 selenium。需要 Debian 的 ``chromium`` 和 ``chromium-driver``（``.ci/run`` 会安装）；
没有时跳过并说明原因。设置环境变量 GPTCOURSE_SCREENSHOT=路径 可以把截图保存下来。
"""
from __future__ import annotations

import base64
import os
import threading
import time

import pytest
import torch
from browser import chromium_session, needs_chromium  # tests/browser.py

from gptcourse import checkpoint
from gptcourse.config import preset
from gptcourse.data import load_corpus
from gptcourse.model import GPT
from gptcourse.serve import make_server
from gptcourse.tokenizer import CharTokenizer
from gptcourse.verse import analyze, check_form

pytestmark = needs_chromium


_MODEL: dict = {}


def demo_model():
    """网页演示用的模型（测试里算“应该写出什么”也用它）。"""
    if not _MODEL:
        if checkpoint.SHIPPED.exists():
            model, tok, _ = checkpoint.load()
        else:                                # 还没有发布的模型时，用一个随机的小模型
            tok = CharTokenizer.from_text(load_corpus("tang_5jue").train)
            torch.manual_seed(0)
            model = GPT(preset("course", vocab_size=tok.vocab_size, n_layer=2, n_head=2,
                               n_embd=32))
        _MODEL.update(model=model, tok=tok)
    return _MODEL["model"], _MODEL["tok"]


@pytest.fixture(scope="module")
def demo():
    model, tok = demo_model()
    srv = make_server(model, tok, "127.0.0.1", 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def open_page(browser, url):
    """打开页面，等它从 /api/info 取回默认解码设置、填好表单。"""
    browser.call("POST", "/url", {"url": url})
    for _ in range(100):
        if browser.js("return document.body.dataset.ready") == "1":
            return
        time.sleep(0.1)
    raise AssertionError("页面没有完成初始化（/api/info）")


@pytest.fixture(scope="module")
def browser():
    with chromium_session() as driver:
        yield driver


def test_page_writes_a_poem_token_by_token(demo, browser):
    open_page(browser, demo + "/")
    assert browser.js("return document.title") == "唐诗 GPT · 网页演示"
    # 数一数诗的文字被更新了多少次：逐字出现时，每个字都是一次 DOM 变化
    browser.js("window.__updates = 0; new MutationObserver(r => { window.__updates += r.length; })"
               ".observe(document.getElementById('poem'),"
               " {childList: true, characterData: true, subtree: true});")
    poem = write(browser, "#prompt", "春", "五绝", 7)
    assert poem.startswith("春") and check_form(poem, "五绝"), poem
    assert browser.js("return document.querySelectorAll('#poem .line').length") == 2   # 每联一行
    assert browser.js("return window.__updates") >= len(poem) - 1   # 一个字一个字地出现
    assert browser.js("return document.getElementById('status').textContent").startswith("完成")
    # 脚本、样式、字体都是同源文件，在严格的 CSP 下照常加载，控制台里没有违规
    assert browser.js("return getComputedStyle(document.body).backgroundColor") \
        == "rgb(250, 248, 243)"
    assert not [m for m in browser.console() if "Content Security Policy" in m]
    browser.call("POST", "/execute/async", {"script": "document.fonts.ready.then(arguments[0])",
                                             "args": []})         # 中文字体加载完再截图
    assert browser.js("return document.fonts.check('16px \"GPTCourse CJK Sans\"', '春')")
    png = screenshot(browser)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def screenshot(browser, suffix: str = "") -> bytes:
    """截图；设置了 GPTCOURSE_SCREENSHOT 时也存下来（suffix 加在扩展名前）。"""
    png = base64.b64decode(browser.call("GET", "/screenshot"))
    if os.environ.get("GPTCOURSE_SCREENSHOT"):
        root, ext = os.path.splitext(os.environ["GPTCOURSE_SCREENSHOT"])
        with open(root + suffix + ext, "wb") as f:
            f.write(png)
    return png


def write(browser, field: str, text: str, form: str, seed: int) -> str:
    """在 field（#prompt / #title）里打字、选诗体和种子、点“写诗”，等写完，返回写出的诗。"""
    browser.call("POST", f"/element/{browser.element(field)}/value", {"text": text})
    browser.js("document.getElementById('form').value = arguments[0];", form)
    browser.js(f"document.getElementById('seed').value = '{seed}';")
    browser.call("POST", f"/element/{browser.element('#go')}/click", {})
    wait_done(browser)
    return browser.js("return document.getElementById('poem').dataset.text")


def wait_done(browser, seconds: float = 90) -> None:
    deadline = time.time() + seconds
    while browser.js("return document.getElementById('poem').dataset.done") != "1":
        status = browser.js("return document.getElementById('status').textContent")
        assert not status.startswith("出错了"), status
        assert time.time() < deadline, f"{seconds} 秒内没有写完"
        time.sleep(0.1)


def test_rhyme_toggle_highlights_the_rhyme_characters(demo, browser):
    open_page(browser, demo + "/")
    browser.js("document.getElementById('form').value = arguments[0];", "五律")
    browser.js("document.getElementById('seed').value = '3';")
    browser.call("POST", f"/element/{browser.element('#rhyme')}/click", {})    # 勾上"押韵"
    assert browser.js("return document.getElementById('rhyme').checked") is True
    browser.call("POST", f"/element/{browser.element('#go')}/click", {})
    wait_done(browser)
    poem = browser.js("return document.getElementById('poem').dataset.text")
    want = analyze(poem)                                  # 服务器用的就是 gc.verse.analyze
    assert check_form(poem, "五律") and want.rhymes, poem
    marked = browser.js("return Array.from(document.querySelectorAll('#poem ruby.rhyme'))"
                        ".map(r => r.firstChild.textContent)")
    assert len(marked) >= 4 and marked == [poem[i] for i in want.rhyme_positions]
    tones = browser.js("return Array.from(document.querySelectorAll('#poem ruby'))"
                       ".map(r => r.querySelector('rt').textContent)")
    assert tones == [t or "" for t in want.tones]          # 每个字下面是它的 平/仄/中
    assert set(tones) <= {"平", "仄", "中", ""} and "平" in tones
    bg = browser.js("return getComputedStyle(document.querySelector('#poem ruby.rhyme'))"
                    ".backgroundColor")
    assert bg not in ("rgba(0, 0, 0, 0)", "transparent")  # 韵脚真的高亮了
    assert want.rhyme_group in browser.js("return document.getElementById('verse').textContent")
    screenshot(browser, "-rhyme")


def test_title_field_writes_to_a_title(demo, browser):
    """题目一栏：页面把题目交给服务器，写出的诗与 generate(title=...) 相同（题目不在正文里）。"""
    from gptcourse.generate import generate
    open_page(browser, demo + "/")
    poem = write(browser, "#title", "送友人", "五绝", 5)
    d = {k: browser.js(f"return document.getElementById('{k}').value")
         for k in ("temperature", "top_p")}
    model, tok = demo_model()
    want = generate(model, tok, "", title="送友人", form="五绝", seed=5,
                    temperature=float(d["temperature"]), top_p=float(d["top_p"]),
                    rhyme=browser.js("return document.getElementById('rhyme').checked"),
                    tones=browser.js("return document.getElementById('tones').checked"))
    assert poem == want and check_form(poem, "五绝") and "《" not in poem, (poem, want)


def test_bad_input_shows_an_error_message(demo, browser):
    browser.call("POST", "/url", {"url": demo + "/?prompt=%E2%98%83&auto=1"})      # 提示 = ☃
    deadline = time.time() + 30
    while browser.js("return document.getElementById('poem').dataset.done") != "error":
        assert time.time() < deadline, "没有显示错误"
        time.sleep(0.1)
    status = browser.js("return document.getElementById('status').textContent")
    assert "出错了" in status and "☃" in status


def wait_version(browser, box: str, old: str | None, seconds: float = 30) -> str:
    """等 #box 重画（live.js 每画一次把 data-version 加 1），返回新的版本号。"""
    deadline = time.time() + seconds
    while True:
        v = browser.js(f"return document.getElementById('{box}').dataset.version || null")
        if v is not None and v != old:
            return v
        assert time.time() < deadline, f"{box} 在 {seconds} 秒内没有重画"
        time.sleep(0.05)


def slide(browser, slider: str, value) -> None:
    """把滑块拖到 value：改值并发出 input 事件（与用户拖动时浏览器发出的事件相同）。"""
    browser.js("const el = document.getElementById(arguments[0]); el.value = arguments[1];"
               "el.dispatchEvent(new Event('input', {bubbles: true}));", slider, str(value))


def test_class_demo_sliders_redraw_the_bars_and_the_poem(demo, browser):
    """课堂演示：拖温度滑块，条形图（抽样用的分布）与下面的诗跟着变；top-k 滑块留下 k 根红柱。"""
    open_page(browser, demo + "/")
    for _ in range(300):
        if browser.js("return document.body.dataset.liveReady") == "1":
            break
        time.sleep(0.1)
    assert browser.js("return document.getElementById('live_temperature').max") == "3"   # ranges
    after = "return Array.from(document.querySelectorAll('#bars rect.after')).map(r => r.dataset.p)"
    v = wait_version(browser, "bars", None)
    warm = [float(p) for p in browser.js(after)]
    assert len(warm) == 15 and all(p > 0 for p in warm)
    slide(browser, "live_temperature", "0.3")
    v = wait_version(browser, "bars", v)
    cold = [float(p) for p in browser.js(after)]
    assert cold[0] > warm[0] and cold != warm                        # 低温：第一名更尖
    assert browser.js("return document.getElementById('live_temperature_v').textContent") == "0.3"
    model, tok = demo_model()                                        # 与库算的一样（top_p = 1）
    from gptcourse.generate import next_token_stages
    want = next_token_stages(model, tok, "", temperature=0.3, top_p=1.0)["top_p"].softmax(-1)
    assert abs(cold[0] - float(want.max())) < 1e-5
    poem = browser.js("return document.getElementById('live_poem').dataset.text || null")
    slide(browser, "live_top_k", "3")
    wait_version(browser, "bars", v)
    kept = browser.js("return document.querySelectorAll('#bars rect.after:not(.dropped)').length")
    assert kept == 3
    deadline = time.time() + 30                                      # 诗用同一个种子重写
    while browser.js("return document.getElementById('live_poem').dataset.text || null") == poem:
        assert time.time() < deadline, "诗没有随滑块重写"
        time.sleep(0.1)
    assert not [m for m in browser.console() if "Content Security Policy" in m]
    browser.js("document.getElementById('live').scrollIntoView()")
    screenshot(browser, "-live")


def test_class_demo_attention_heatmap(demo, browser):
    """课堂演示：输入一句诗 → 热力图的格子是 (字数+1)²，两条轴上是这些字；换一个头就重画。"""
    open_page(browser, demo + "/")
    v = wait_version(browser, "heatmap", None)
    browser.js("const el = document.getElementById('attn_text'); el.value = '床前明月光';"
               "el.dispatchEvent(new Event('input', {bubbles: true}));")
    v = wait_version(browser, "heatmap", v)
    cells = "return document.querySelectorAll('#heatmap rect').length"
    assert browser.js(cells) == 6 * 6
    ticks = browser.js("return Array.from(document.querySelectorAll('#heatmap text.tick.row'))"
                       ".map(t => t.textContent)")
    assert ticks == ["↵", *"床前明月光"]
    future = browser.js("return document.querySelectorAll('#heatmap rect.future').length")
    assert future == 6 * 5 // 2                                       # 右上方：看不到的未来
    opacity = ("return Array.from(document.querySelectorAll('#heatmap rect.cell'))"
               ".map(r => r.getAttribute('fill-opacity'))")
    first = browser.js(opacity)
    heads = browser.js("return document.getElementById('attn_head').options.length")
    layers = browser.js("return document.getElementById('attn_layer').options.length")
    model, _ = demo_model()
    assert (layers, heads) == (model.config.n_layer, model.config.n_head)
    browser.js("const el = document.getElementById('attn_layer');"
               "el.value = String(el.options.length - 1); el.dispatchEvent(new Event('change'));")
    wait_version(browser, "heatmap", v)
    assert browser.js(opacity) != first
    status = browser.js("return document.getElementById('attn_status').textContent")
    assert f"第 {layers} 层" in status, status
    browser.js("document.getElementById('heatmap').scrollIntoView()")
    screenshot(browser, "-attention")
