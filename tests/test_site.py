"""课程网站：渲染出来的页面不从网络加载任何东西；无界面 Chromium 打开主页和一章，中文与图都显示。

设置环境变量 GPTCOURSE_SCREENSHOT_DIR=目录 可以把两张截图保存下来。
"""
from __future__ import annotations

import base64
import os
import re
from pathlib import Path

import pytest

from gptcourse.classroom.__main__ import main

from browser import chromium_session, needs_chromium  # tests/browser.py


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
        loaded = re.findall(r'<(?:script|img|link|iframe|source)\b[^>]*?(?:src|href)="([^"]+)"', text)
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
