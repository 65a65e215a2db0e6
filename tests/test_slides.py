"""幻灯片（每章一套 reveal.js）与答案讲义：离线构建，不从网络加载任何东西；
无界面 Chromium 打开一套。"""
from __future__ import annotations

import re
import time

import nbformat
import pytest
from browser import chromium_session, needs_chromium  # tests/browser.py

from gptcourse.classroom.__main__ import main
from gptcourse.classroom.site import chapters
from gptcourse.classroom.slides import exercises, slide_groups


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("slides")
    assert main(["slides", "--out", str(out)]) == 0
    assert main(["handout", "--out", str(out)]) == 0
    return out


def test_one_offline_deck_per_chapter(built):
    decks = sorted(p.name for p in built.glob("0*.html"))
    assert decks == [p.stem + ".html" for p in chapters()]
    for page in [*built.glob("0*.html"), built / "answers.html"]:
        text = page.read_text(encoding="utf-8")
        loaded = re.findall(r'<(?:script|img|link)\b[^>]*?(?:src|href)="([^"]+)"', text)
        assert not [u for u in loaded if re.match(r"(https?:)?//", u)], page.name
        for u in loaded:
            if not u.startswith("data:"):
                assert (built / u.split("#")[0]).exists(), (page.name, u)
        assert "NBVAL_CHECK_OUTPUT" not in text


def test_each_heading_starts_a_slide():
    nb = nbformat.read(chapters()[0], as_version=4)
    groups = slide_groups(nb)
    headings = sum(1 for c in nb.cells if c.cell_type == "markdown"
                   and re.search(r"^#{1,3}\s", c.source, re.M))
    assert len(groups) in (headings, headings + 1)
    assert sum(map(len, groups)) == len(nb.cells)


def test_handout_has_every_solution(built):
    text = (built / "answers.html").read_text(encoding="utf-8")
    for path in chapters():
        found = exercises(nbformat.read(path, as_version=4))
        assert len(found) >= 8                                   # 每章至少 8 个练习
        for ex in found:
            assert ex["id"] in text
            body = ex["solution"].split("### BEGIN SOLUTION", 1)[1].split("### END SOLUTION")[0]
            words = [w for w in re.findall(r"[A-Za-z_]\w{3,}", body)]
            assert all(w in text for w in words[:5]), (ex["id"], words[:5])  # 答案的代码在讲义里


def test_refuses_to_overwrite(built, capsys):
    assert main(["slides", "--out", str(built)]) == 2
    assert "--force" in capsys.readouterr().err


@needs_chromium
def test_a_deck_opens_in_chromium(built):
    with chromium_session(window="1280,800") as driver:
        driver.call("POST", "/url", {"url": (built / "03_training_loop.html").as_uri()})
        for _ in range(100):
            if driver.js("return document.body.dataset.deck") == "1":
                break
            time.sleep(0.1)
        assert driver.js("return document.body.dataset.deck") == "1"          # reveal.js 起来了
        assert driver.js("return document.querySelectorAll('.slides > section').length") >= 10
        for _ in range(50):
            if driver.js("return document.querySelectorAll('.katex').length"):
                break
            time.sleep(0.1)
        assert driver.js("return document.querySelectorAll('.katex').length") > 0
        assert driver.js("return document.querySelectorAll('.katex-error').length") == 0
