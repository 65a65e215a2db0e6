"""幻灯片（每章一套 reveal.js，按 1280×720 的投影排版）与答案讲义：离线构建，不从网络加载任何东西；
无界面 Chromium 以 1280×720 打开每一套，逐页检查没有溢出、字号不小于下限，并存下截图。

截图存在 GPTCOURSE_SCREENSHOT_DIR（设置了的话），否则存在 pytest 的临时目录里（路径打印在输出里）。
"""
from __future__ import annotations

import base64
import os
import re
import time
from pathlib import Path

import nbformat
import pytest
from browser import chromium_session, needs_chromium  # tests/browser.py

from gptcourse.runtime import ROOT
from gptcourse_kit.classroom.__main__ import main
from gptcourse_kit.classroom.site import chapters
from gptcourse_kit.classroom.slides import (
    CHUNK_ROWS,
    CODE_PX,
    MIN_PROSE_PX,
    build_deck,
    code_chunks,
    edition_notebook,
    exercises,
    md_blocks,
)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("slides")
    assert main(["slides", "--out", str(out)]) == 0               # 默认：学生版
    assert main(["handout", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def decks():
    """每章两种版本的页（只在 Python 里装页，不写 HTML）。"""
    return {(p.stem, ed): build_deck(edition_notebook(p, ed))
            for p in chapters() for ed in ("student", "teacher")}


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


def test_student_deck_shows_the_task_not_the_solution(built, decks):
    """默认的学生版：练习页上是题目和存根，没有参考答案；教师版的同一页上是答案。"""
    for path in chapters():
        text = (built / f"{path.stem}.html").read_text(encoding="utf-8")
        assert 'data-edition="student"' in text and "BEGIN SOLUTION" not in text
        shown_nb = edition_notebook(path, "student")          # 存根里的提示、打印的包源码可以出现
        hints = "\n".join([c.source for c in shown_nb.cells] + [
            o.get("text", "") for c in shown_nb.cells for o in c.get("outputs", [])])
        for ex in exercises(nbformat.read(path, as_version=4)):
            body = ex["solution"].split("### BEGIN SOLUTION", 1)[1].split("### END SOLUTION")[0]
            long_lines = [x.strip() for x in body.split("\n") if len(x.strip()) >= 30
                          and not x.strip().startswith("#") and x.strip() not in hints]
            for line in long_lines[:3]:
                assert line not in text, (path.stem, ex["id"], line)   # 答案不在学生版里
        student = [s for s in decks[(path.stem, "student")] if s.kind == "exercise"]
        assert len(student) >= 8, path.stem                          # 每章至少 8 个练习页
        shown = " ".join(i.html for s in student for i in s.items)
        assert "还没完成" in shown or "在这里填写你的答案" in shown
        teacher = " ".join(i.html for s in decks[(path.stem, "teacher")]
                           if s.kind == "exercise" for i in s.items)
        assert len(teacher) > len(shown), path.stem                  # 教师版的练习页上有答案


def test_one_idea_per_slide_and_prose_in_the_notes(decks):
    for (stem, _edition), slides in decks.items():
        title = slides[0]
        assert title.kind == "title" and len(title.items) == 1, stem   # 标题页只有标题
        assert title.notes, stem                                        # 引言在讲稿里
        for s in slides:
            figures = [i for i in s.items if i.fig]
            assert len(figures) <= 1 and (not figures or len(s.items) == 1), (stem, s.title)
            assert sum(1 for i in s.items if i.kind == "code") <= 6, (stem, s.title)
        noted = sum(len(s.notes) for s in slides)
        assert noted >= 20, (stem, noted)                               # 正文放进了讲稿


def test_headings_start_slides_and_nothing_leaks_across_sections():
    nb = nbformat.read(chapters()[0], as_version=4)
    slides = build_deck(nb)
    headings = [src.replace("**", "") for c in nb.cells if c.cell_type == "markdown"
                for kind, src in md_blocks(c.source) if kind in ("heading2", "heading3")]
    starts = [s.title for s in slides if not s.cont and s.kind != "title"]
    assert [h for h in headings if h in starts] == headings
    assert md_blocks("## 1. 语料\n正文\n\n- a\n- b\n\n| x |\n|---|\n| 1 |") == [
        ("heading2", "1. 语料"), ("para", "正文"), ("list", "- a\n- b"),
        ("table", "| x |\n|---|\n| 1 |")]


def test_long_code_is_split_at_statements_or_summarised():
    body = "\n".join(f"x{i} = {i}" for i in range(30))
    chunks, left = code_chunks(body)
    assert len(chunks) >= 2 and left == 0 and "\n".join(chunks) == body
    assert all(len(c.split("\n")) <= CHUNK_ROWS for c in chunks)
    chunks, left = code_chunks("\n".join(f"y{i} = {i}" for i in range(100)))
    assert left > 0 and sum(len(c.split("\n")) for c in chunks) + left == 100


def test_guide_slide_counts_match_the_decks(decks):
    guide = (ROOT / "docs" / "teaching_guide.md").read_text(encoding="utf-8")
    m = re.search(r"01–05 依次 ([\d/]+) 页", guide)
    assert m, "教师指南里没有幻灯片页数"
    counts = [len(decks[(p.stem, "student")]) for p in chapters()]
    assert m.group(1) == "/".join(map(str, counts)), (m.group(1), counts)


def test_refuses_to_overwrite_and_an_existing_file_is_one_line(built, tmp_path, capsys):
    assert main(["slides", "--out", str(built)]) == 2
    assert "--force" in capsys.readouterr().err
    afile = tmp_path / "afile"
    afile.write_text("x")
    for cmd in (["slides"], ["handout"], ["site"], ["student"]):
        assert main([*cmd, "--out", str(afile)]) == 2, cmd
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "是一个已有的文件" in err, (cmd, err)


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


# ---------------------------------------------------------------- 浏览器：1280×720
MEASURE = """
const out = [];
[...document.querySelectorAll('.slides > section')].forEach((s, i) => {
  Reveal.slide(i); gptcourseFit(s);
  const r = s.getBoundingClientRect();
  const px = e => parseFloat(getComputedStyle(e).fontSize);
  let code = 99, prose = 99, clipped = [];
  s.querySelectorAll('pre').forEach(e => { code = Math.min(code, px(e));
    if (e.scrollWidth > e.clientWidth + 1) clipped.push('pre'); });
  s.querySelectorAll('p, li, td, th, h1, h2').forEach(e => { prose = Math.min(prose, px(e)); });
  s.querySelectorAll('p, li, pre, img, table, .katex-display, h1, h2').forEach(e => {
    if (e.closest('aside')) return;
    const q = e.getBoundingClientRect();
    if (q.width && (q.right > r.right + 1 || q.bottom > r.bottom + 1 || q.left < r.left - 1))
      clipped.push(e.tagName); });
  out.push({i, kind: s.dataset.kind, title: (s.querySelector('h1, h2') || {}).textContent,
            over: s.scrollHeight - s.clientHeight, overX: s.scrollWidth - s.clientWidth,
            clipped, code, prose});
});
Reveal.slide(0);
return out;
"""


def _wait(driver, script, tries=300):
    for _ in range(tries):
        if driver.js(script):
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope="module")
def measured(built, tmp_path_factory):
    """每套幻灯片在 1280×720 的 Chromium 里逐页量一遍；存下几页截图（标题、练习、代码、图）。"""
    shots = Path(os.environ.get("GPTCOURSE_SCREENSHOT_DIR") or tmp_path_factory.mktemp("shots"))
    print(f"幻灯片截图：{shots}")
    result = {}
    with chromium_session(window="1280,720") as driver:
        dw, dh = driver.js("return [outerWidth - innerWidth, outerHeight - innerHeight]")
        driver.call("POST", "/window/rect", {"width": 1280 + dw, "height": 720 + dh})
        for path in chapters():
            driver.call("POST", "/url", {"url": (built / f"{path.stem}.html").as_uri()})
            assert _wait(driver, "return document.body.dataset.deck === '1' "
                                 "&& document.body.dataset.math === '1'"), path.stem
            driver.js("return document.fonts.ready.then(() => true)")
            view = driver.js("return [innerWidth, innerHeight, Reveal.getScale()]")
            slides = driver.js(MEASURE)
            firsts = {}
            for s in slides:
                firsts.setdefault(s["kind"], s["i"])
            for kind, i in firsts.items():
                driver.js(f"Reveal.slide({i});")
                time.sleep(0.1)
                png = base64.b64decode(driver.call("GET", "/screenshot"))
                (shots / f"slides_{path.stem[:2]}_{kind}_{i}.png").write_bytes(png)
            result[path.stem] = {"view": view, "slides": slides, "shots": shots}
    return result


@needs_chromium
def test_every_slide_fits_1280x720_with_readable_fonts(measured):
    for stem, m in measured.items():
        assert m["view"] == [1280, 720, 1], (stem, m["view"])          # 一比一，不缩放
        bad = [s for s in m["slides"] if s["over"] > 1 or s["overX"] > 1 or s["clipped"]]
        assert not bad, (stem, bad[:5])
        assert min(s["code"] for s in m["slides"]) >= CODE_PX, stem
        assert min(s["prose"] for s in m["slides"]) >= MIN_PROSE_PX, stem
        assert {"title", "exercise", "code", "figure"} <= {s["kind"] for s in m["slides"]}
        assert len(list(m["shots"].glob(f"slides_{stem[:2]}_*.png"))) >= 4


def test_slides_and_handout_name_no_path_of_the_authors_machine(built):
    """issue 48 item 6：幻灯片与讲义里不出现本机路径。"""
    from gptcourse_kit.notebooks import ABS_PATH_RE
    for page in built.rglob("*.html"):
        m = ABS_PATH_RE.search(page.read_text(encoding="utf-8"))
        assert m is None, f"{page.name}：{m.group()}"
