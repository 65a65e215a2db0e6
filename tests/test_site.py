"""课程网站：渲染出来的页面不从网络加载任何东西；无界面 Chromium 打开主页和一章，中文与图都显示。

设置环境变量 GPTCOURSE_SCREENSHOT_DIR=目录 可以把两张截图保存下来。
"""
from __future__ import annotations

import base64
import os
import re
from pathlib import Path

import pytest
from browser import chromium_session, needs_chromium  # tests/browser.py

from gptcourse_kit.classroom.__main__ import main


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    assert main(["site", "--out", str(out)]) == 0
    return out


def test_site_has_home_and_five_chapters_and_loads_nothing_from_the_network(site):
    pages = sorted(p.name for p in site.glob("*.html"))
    assert pages == ["01_data_tokenizer.html", "02_attention_mask.html", "03_training_loop.html",
                     "04_evaluation.html", "05_inference.html", "index.html"]
    for page in site.glob("*.html"):
        text = page.read_text(encoding="utf-8")
        # 浏览时会被加载的东西（脚本、样式、图、字体）都必须是本地文件或内嵌数据
        loaded = re.findall(r'<(?:script|img|link|iframe|source)\b[^>]*?(?:src|href)="([^"]+)"', text)  # noqa: E501
        remote = [u for u in loaded if re.match(r"(https?:)?//", u)]
        assert remote == [], (page.name, remote[:3])
        for u in loaded:
            if not u.startswith("data:"):
                assert (site / u.split("?")[0]).exists(), (page.name, u)
    home = (site / "index.html").read_text(encoding="utf-8")
    for p in pages[:-1]:
        assert f'href="{p}"' in home                        # 主页的课程地图链到每一章
    assert "pip install" in home                            # 安装说明


def _screenshot(driver, name):
    folder = os.environ.get("GPTCOURSE_SCREENSHOT_DIR")
    if folder:
        png = base64.b64decode(driver.call("GET", "/screenshot"))
        Path(folder, name).write_bytes(png)


@needs_chromium
def test_home_and_a_chapter_render_chinese_and_figures(site):
    with chromium_session(window="1280,1400") as driver:
        driver.call("POST", "/url", {"url": (site / "index.html").as_uri()})
        assert "会写唐诗的 GPT" in driver.js("return document.title")
        assert "课程地图" in driver.js("return document.body.innerText")
        _screenshot(driver, "site_home.png")
        driver.call("POST", "/url", {"url": (site / "02_attention_mask.html").as_uri()})
        driver.js("return document.fonts.ready.then(() => true)")
        # 中文用的是随课程发布的字体（文件在 assets/ 里，且确实被加载了）
        assert driver.js("return document.fonts.check('16px \"GPTCourse CJK Sans\"', '注意力')")
        assert driver.js("return [...document.fonts].some(f => f.family.includes('GPTCourse') "
                         "&& f.status === 'loaded')")
        # 图：内嵌的 PNG 都解码出来了（宽度不为 0）
        sizes = driver.js("return [...document.images].map(i => i.naturalWidth)")
        assert len(sizes) >= 5 and all(w > 0 for w in sizes)
        assert driver.js("return document.querySelectorAll('nav.toc a').length") >= 5
        _screenshot(driver, "site_chapter.png")


def _column_and_math(driver, page):
    driver.call("POST", "/url", {"url": page.as_uri()})
    for _ in range(100):                                  # 等 KaTeX 排完（DOMContentLoaded 之后）
        if driver.js("return document.body.dataset.math") == "1":
            break
        import time
        time.sleep(0.1)
    driver.js("return document.fonts.ready.then(() => true)")
    width = driver.js("return document.querySelector('main').getBoundingClientRect().width")
    n_math = driver.js("return document.querySelectorAll('.katex').length")
    errors = driver.js("return document.querySelectorAll('.katex-error').length")
    tex_font = driver.js("const el = document.querySelector('.katex .mord');"
                         "return el ? getComputedStyle(el).fontFamily : ''")
    loaded = driver.js("return [...document.fonts].filter(f => f.family.startsWith('KaTeX') "
                       "&& f.status === 'loaded').map(f => f.family)")
    return width, n_math, errors, tex_font, loaded


@needs_chromium
@pytest.mark.parametrize("window, min_width", [("1400,1000", 700), ("400,900", 300)])
def test_chapter_works_on_a_desktop_and_a_phone(site, window, min_width):
    """1400 px 与 400 px：正文列至少 300 px 宽（手机上目录收进按钮里），公式用 KaTeX 的 TeX 字体排出。"""  # noqa: E501
    with chromium_session(window=window) as driver:
        width, n_math, errors, tex_font, loaded = _column_and_math(
            driver, site / "03_training_loop.html")
        assert width >= min_width, width
        assert n_math >= 3 and errors == 0, (n_math, errors)
        assert "KaTeX" in tex_font and loaded, (tex_font, loaded)
        toc_visible = driver.js("return getComputedStyle(document.querySelector('nav.toc'))"
                                ".display !== 'none'")
        assert toc_visible == window.startswith("1400")   # 手机上目录先收起来
        if window.startswith("400"):
            driver.call("POST", f"/element/{driver.element('label.tocbtn')}/click", {})
            assert driver.js("return getComputedStyle(document.querySelector('nav.toc'))"
                             ".display") == "block"
            _screenshot(driver, "site_chapter_400.png")
            # 打开的目录从按钮下面开始，滚到底也没有一个条目藏在按钮底下
            for scroll in (0, 10**6):
                overlap = driver.js(_UNDER_BUTTON, scroll)
                assert overlap == [], overlap


_UNDER_BUTTON = """
const nav = document.querySelector('nav.toc'); nav.scrollTop = arguments[0];
const b = document.querySelector('label.tocbtn').getBoundingClientRect();
return [...nav.querySelectorAll('a')].filter(a => { const r = a.getBoundingClientRect();
  const x = Math.min(Math.max(b.left + 2, r.left), r.right - 1), y = (r.top + r.bottom) / 2;
  return r.bottom > b.top && r.top < b.bottom && r.right > b.left && r.left < b.right
         && document.elementFromPoint(x, y) === a; }).map(a => a.textContent);
"""


def test_wide_characters_take_two_columns_in_pre_blocks(site):
    text = (site / "04_evaluation.html").read_text(encoding="utf-8")
    assert '<span class="zh2">' in text
    from gptcourse_kit.classroom.site import wide_pre
    assert wide_pre("<pre>字 a</pre>") == '<pre><span class="zh2">字</span> a</pre>'
    assert wide_pre('<pre><span class="k">字</span></pre>') == \
        '<pre><span class="k"><span class="zh2">字</span></span></pre>'


_TOFU = """
/* \\text{正确的字}：KaTeX 给它的字体里要有中文字形。画布上用元素的字体量这几个字的宽度，
   与直接用课程字体量的一样宽才不是豆腐块（没有字形时退回 .notdef，宽度不同）。 */
const el = [...document.querySelectorAll('.katex .mord.text, .katex .text')]
  .find(e => /[\\u4e00-\\u9fff]/.test(e.textContent));
if (!el) return null;
const inner = [...el.querySelectorAll('*')].find(e => /[\\u4e00-\\u9fff]/.test(e.textContent)
  && !e.children.length) || el;
const cs = getComputedStyle(inner), text = inner.textContent.replace(/[^\\u4e00-\\u9fff]/g, '');
const ctx = document.createElement('canvas').getContext('2d');
ctx.font = cs.fontSize + ' ' + cs.fontFamily; const a = ctx.measureText(text).width;
ctx.font = cs.fontSize + ' "GPTCourse CJK Sans"'; const b = ctx.measureText(text).width;
ctx.font = cs.fontSize + ' KaTeX_Main, serif'; const c = ctx.measureText(text).width;
return {text, family: cs.fontFamily, a, b, c};
"""


def _system_has_cjk() -> bool:
    """系统里装了中文字体（例如 fonts-noto-cjk）时，serif 也能退到中文字形，对照就分不出豆腐块。"""
    import shutil
    import subprocess
    if not shutil.which("fc-list"):
        return False
    out = subprocess.run(["fc-list", ":lang=zh"], capture_output=True, text=True).stdout
    return bool(out.strip())


@needs_chromium
def test_cjk_inside_katex_is_not_tofu_and_the_page_is_not_wider_than_the_window(site):
    with chromium_session(window="1400,1000") as driver:
        dw = driver.js("return outerWidth - innerWidth")
        driver.call("POST", "/window/rect", {"width": 1400 + dw, "height": 1000})
        _column_and_math(driver, site / "03_training_loop.html")
        got = driver.js(_TOFU)
        assert got and got["text"], got                          # 03 §2 的 \text{正确的字}
        assert "GPTCourse CJK Sans" in got["family"], got
        assert abs(got["a"] - got["b"]) < 0.5, got            # 用的是课程字体里的字形
        if abs(got["c"] - got["b"]) <= 0.5:                    # 对照：KaTeX 自己的字体没有中文
            assert _system_has_cjk(), got                      # 只有系统装了中文字体时才会一样宽
        for page in ("02_attention_mask.html", "03_training_loop.html", "index.html"):
            driver.call("POST", "/url", {"url": (site / page).as_uri()})
            driver.js("return document.fonts.ready.then(() => true)")
            assert driver.js("return innerWidth") == 1400
            width = driver.js("return document.documentElement.scrollWidth")
            assert width <= 1400, (page, width)                   # 没有横向滚动条
        _screenshot(driver, "site_ch02_1400.png")


@needs_chromium
def test_toc_button_stays_on_screen_deep_in_a_long_chapter_on_a_phone(site):
    with chromium_session(window="400,900") as driver:
        dw = driver.js("return outerWidth - innerWidth")
        driver.call("POST", "/window/rect", {"width": 400 + dw, "height": 900})
        driver.call("POST", "/url", {"url": (site / "01_data_tokenizer.html").as_uri()})
        driver.js("return document.fonts.ready.then(() => true)")
        assert driver.js("return document.documentElement.scrollWidth") <= 400
        height = driver.js("return document.documentElement.scrollHeight")
        assert height > 10000                                     # 真是一章长页
        driver.js("window.scrollTo(0, arguments[0])", height // 2)
        top = driver.js("return document.querySelector('label.tocbtn').getBoundingClientRect().top")
        assert 0 <= top < 60, top                                 # 目录按钮跟着走（sticky）
        driver.call("POST", f"/element/{driver.element('label.tocbtn')}/click", {})
        box = driver.js("const r = document.querySelector('nav.toc').getBoundingClientRect();"
                        "return [r.top, r.height, getComputedStyle(document.querySelector("
                        "'nav.toc')).position]")
        assert box[2] == "fixed" and box[0] <= 1 and box[1] > 500, box   # 在原地打开，盖满屏幕
        _screenshot(driver, "site_ch01_400_deep_menu.png")
        link = driver.element("nav.toc a.h2:nth-of-type(3)")
        driver.call("POST", f"/element/{link}/click", {})
        assert driver.js("return document.getElementById('tocbtn').checked") is False  # 点了就收起
        _screenshot(driver, "site_ch01_400_deep.png")


def test_site_pages_name_no_path_of_the_authors_machine(site):
    """issue 48 item 6：网页里不出现本机路径（/root、/home、/work、site-packages……）。"""
    from gptcourse_kit.notebooks import ABS_PATH_RE
    for page in site.rglob("*.html"):
        m = ABS_PATH_RE.search(page.read_text(encoding="utf-8"))
        assert m is None, f"{page.name}：{m.group()}"
