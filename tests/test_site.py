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

from gptcourse.classroom.__main__ import main


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


def test_wide_characters_take_two_columns_in_pre_blocks(site):
    text = (site / "04_evaluation.html").read_text(encoding="utf-8")
    assert '<span class="zh2">' in text
    from gptcourse.classroom.site import wide_pre
    assert wide_pre("<pre>字 a</pre>") == '<pre><span class="zh2">字</span> a</pre>'
    assert wide_pre('<pre><span class="k">字</span></pre>') == \
        '<pre><span class="k"><span class="zh2">字</span></span></pre>'
