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
