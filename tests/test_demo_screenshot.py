"""笔记本 05 里网页演示的截图：真浏览器截的、提交在仓库里、与现在的模型和页面一致。

截图 ``docs/figures/05_web_demo.png`` 和它的说明 ``05_web_demo.json``（开头、诗体、种子、
页面写出的诗、图的宽高、机器）由这里的浏览器测试产生：它像 ``python -m gptcourse serve``
一样用课程检查点和发布设置起一个服务器，无界面 Chromium 打开页面、填开头、选诗体和种子、
点“写诗”，等诗写完再截图。

- 不需要浏览器的测试：两个文件都在，PNG 的宽高与说明一致，笔记本 05 的代码单元格显示的就是它。
- 浏览器测试：页面现在写出的诗必须与说明里的逐字相同、截图的宽高相同；模型或页面变了就失败，
  这时用 ``GPTCOURSE_SCREENSHOT_DIR=docs/figures pytest tests/test_demo_screenshot.py`` 重新截图
  （设置了这个目录时测试把新的截图和说明写进去，而不是失败）。
"""
from __future__ import annotations

import base64
import json
import os
import struct
import threading
from pathlib import Path

import nbformat
import pytest
from browser import chromium_session, needs_chromium  # tests/browser.py
from test_browser import open_page, write

from gptcourse import checkpoint, release
from gptcourse.generate import generate
from gptcourse.machine import machine_info
from gptcourse.runtime import ROOT
from gptcourse.serve import make_server
from gptcourse.verse import check_form

SHOT = ROOT / "docs" / "figures" / "05_web_demo.png"
INFO = SHOT.with_suffix(".json")
NOTEBOOK = ROOT / "notebooks" / "05_inference.ipynb"
WINDOW = "900,1000"
REQUEST = {"prompt": "江", "form": "五绝", "seed": 3}        # 与笔记本 05 第 8 节的第一个请求相同


def png_size(data: bytes) -> tuple[int, int]:
    """PNG 的（宽, 高）：文件头之后的第一个块 IHDR 里的两个 4 字节整数。"""
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "不是 PNG"
    return struct.unpack(">II", data[16:24])


def test_committed_screenshot_is_shown_by_notebook_05():
    assert SHOT.is_file() and INFO.is_file(), \
        "缺截图：GPTCOURSE_SCREENSHOT_DIR=docs/figures 跑本文件"
    data, info = SHOT.read_bytes(), json.loads(INFO.read_text(encoding="utf-8"))
    assert list(png_size(data)) == info["size"]
    assert 5_000 < len(data) < 300_000                    # 一张小图，不是空白页
    assert {k: info[k] for k in REQUEST} == REQUEST
    assert info["machine"]["cpu"], "截图里的用时要注明机器"
    assert info["poem"].startswith(REQUEST["prompt"]) and check_form(info["poem"], REQUEST["form"])
    nb = nbformat.read(NOTEBOOK, as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code" and SHOT.name in c.source]
    assert len(cells) == 1, "笔记本 05 应有一个显示截图的代码单元格"
    assert 'gc.ROOT / "docs" / "figures"' in cells[0].source and "Image(" in cells[0].source


@needs_chromium
def test_screenshot_matches_the_page_now(tmp_path):
    model, tok, meta = checkpoint.load()
    settings = release.settings(meta)
    srv = make_server(model, tok, "127.0.0.1", 0, defaults=settings)   # 与 serve 命令相同
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with chromium_session(window=WINDOW) as browser:
            open_page(browser, f"http://127.0.0.1:{srv.server_address[1]}/")
            form = browser.js("return params()")          # 页面将要发出的参数 = 发布设置
            assert form["temperature"] == settings["temperature"], form
            assert form["top_p"] == (1 if settings["top_p"] is None else settings["top_p"]), form
            assert (form["rhyme"], form["tones"]) == (settings["rhyme"], settings["tones"]), form
            poem = write(browser, "#prompt", REQUEST["prompt"], REQUEST["form"], REQUEST["seed"])
            browser.call("POST", "/execute/async",
                         {"script": "document.fonts.ready.then(arguments[0])", "args": []})
            png = base64.b64decode(browser.call("GET", "/screenshot"))
    finally:
        srv.shutdown()
        srv.server_close()
    # 页面写出的就是 generate() 用同样参数和发布设置写出的诗（笔记本里的那句话据此成立）
    assert poem == generate(model, tok, REQUEST["prompt"], form=REQUEST["form"],
                            seed=REQUEST["seed"], **settings), poem
    info = {**REQUEST, "poem": poem, "size": list(png_size(png)),
            "settings": settings, "window": WINDOW,
            "machine": {k: v for k, v in machine_info().items() if k in ("cpu", "cores")}}
    folder = os.environ.get("GPTCOURSE_SCREENSHOT_DIR")
    if folder:
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        (out / SHOT.name).write_bytes(png)
        (out / INFO.name).write_text(json.dumps(info, ensure_ascii=False, indent=1) + "\n",
                                     encoding="utf-8")
        if out.resolve() != SHOT.parent.resolve():
            pytest.skip(f"截图写到了 {out}，没有与提交的截图比较")
    committed = json.loads(INFO.read_text(encoding="utf-8"))
    assert committed["poem"] == poem, (
        "页面现在写出的诗与提交的截图不同：GPTCOURSE_SCREENSHOT_DIR=docs/figures 重新截图")
    assert committed["size"] == info["size"] and committed["settings"] == settings
