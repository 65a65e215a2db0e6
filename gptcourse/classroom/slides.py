"""课堂用的幻灯片与答案讲义，都从笔记本生成、离线可用。

- ``python -m gptcourse.classroom slides --out 目录``：每章一套 reveal.js 幻灯片
  （``01_data_tokenizer.html`` …）。笔记本里每个带 ``#``/``##``/``###`` 标题的说明单元格开始
  新的一页，
  代码、图和短输出跟在它后面；太长的文字输出只留前 ``MAX_OUTPUT_LINES`` 行。内容多的一页可以在页内
  上下滚动。reveal.js 5 与 KaTeX 随包分发（``gptcourse/classroom/assets/``），不连网。
  选 reveal.js 自己拼页面，而不是 nbconvert 的 slides 导出器：后者的模板从 CDN 加载 reveal.js
  与 require.js，还要求每个单元格事先标好 ``slide_type``。
- ``python -m gptcourse.classroom handout --out 目录``：``answers.html``，一页里是五章全部练习的
  题目说明、参考答案（教师版 ``### BEGIN SOLUTION`` 单元格）和检查单元格——发给助教或课后公布。
"""
from __future__ import annotations

import copy
import html
import re
import shutil
from pathlib import Path

import nbformat
from nbconvert import HTMLExporter
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from .site import ASSETS, KATEX, TITLE, _assets, _page, _short_title, _title, chapters, wide_pre

MAX_OUTPUT_LINES = 12
HEADING = re.compile(r"^#{1,3}\s", re.M)
DECK_STYLE = """
.reveal { font-family: "GPTCourse CJK Sans", sans-serif; font-size: 26px; }
.reveal h1, .reveal h2, .reveal h3 { font-family: "GPTCourse CJK Sans", sans-serif;
  text-transform: none; color: #7a1f1f; }
.reveal .slides section { text-align: left; height: 100%; overflow-y: auto; }
.reveal pre { width: 100%; box-shadow: none; font-size: .62em; margin: .3em 0; }
.reveal pre, .reveal code { font-family: "DejaVu Sans Mono", "GPTCourse CJK Sans", monospace; }
.reveal pre code { max-height: none; }
.reveal .highlight pre { background: #f4f1ea; border-left: 3px solid #c9a66b; padding: .4em .6em; }
.reveal .output_area pre { background: #fff; }
.reveal img { max-height: 60vh; }
.prompt, a.anchor-link { display: none; }
.reveal table { font-size: .7em; }
"""


def _trim_outputs(cell) -> None:
    """幻灯片上只留短输出：文字输出最多 MAX_OUTPUT_LINES 行，图照留；去掉 nbval 的标记行。"""
    if cell.cell_type == "code":
        cell.source = "\n".join(line for line in cell.source.splitlines()
                                if line.strip() != "# NBVAL_CHECK_OUTPUT")
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            lines = out["text"].splitlines()
            if len(lines) > MAX_OUTPUT_LINES:
                out["text"] = "\n".join(lines[:MAX_OUTPUT_LINES] + ["……（完整输出见笔记本）"])


def slide_groups(nb: nbformat.NotebookNode) -> list[list]:
    """单元格按页分组：带标题的说明单元格开始新的一页。"""
    groups: list[list] = []
    for cell in nb.cells:
        if not groups or (cell.cell_type == "markdown" and HEADING.search(cell.source)):
            groups.append([])
        groups[-1].append(cell)
    return groups


def deck(path: Path) -> str:
    """一章的幻灯片 HTML（reveal.js）。"""
    nb = nbformat.read(path, as_version=4)
    exporter = HTMLExporter(template_name="basic")
    sections = []
    for group in slide_groups(nb):
        sub = copy.deepcopy(nb)
        sub.cells = [copy.deepcopy(c) for c in group]
        for c in sub.cells:
            _trim_outputs(c)
        body, _ = exporter.from_notebook_node(sub)
        sections.append(f"<section>{wide_pre(body)}</section>")
    title = html.escape(_title(nb))
    return f"""<!DOCTYPE html>
<html lang="zh-CN"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · 幻灯片</title>
<link rel="stylesheet" href="assets/reveal/reset.css">
<link rel="stylesheet" href="assets/reveal/reveal.css">
<link rel="stylesheet" href="assets/reveal/theme/white.css">
<link rel="stylesheet" href="assets/style.css"><link rel="stylesheet" href="assets/pygments.css">
<style>{DECK_STYLE}</style>
{KATEX}
</head><body>
<div class="reveal"><div class="slides">
{''.join(sections)}
</div></div>
<script src="assets/reveal/reveal.js"></script>
<script>Reveal.initialize({{hash: true, width: 1280, height: 800, margin: 0.04, center: false,
  slideNumber: "c/t"}}).then(() => {{ document.body.dataset.deck = "1"; }});</script>
</body></html>
"""


def build_slides(out: Path, force: bool = False) -> list[Path]:
    """每章一套幻灯片写进 out，返回各文件路径。"""
    from .student import check_out_dir

    out, paths = Path(out), chapters()
    targets = [out / f"{p.stem}.html" for p in paths]
    check_out_dir(paths, out, targets, force)
    out.mkdir(parents=True, exist_ok=True)
    _assets(out)
    shutil.copytree(ASSETS / "reveal", out / "assets" / "reveal", dirs_exist_ok=True)
    for path, target in zip(paths, targets):
        target.write_text(deck(path), encoding="utf-8")
    return targets


# ---------------------------------------------------------------- 答案讲义
def exercises(nb: nbformat.NotebookNode) -> list[dict]:
    """教师版里的每个练习：{id, 说明（前面最近的说明单元格）, 答案代码, 检查代码}。"""
    found, last_md = [], ""
    checks = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "markdown":
            last_md = cell.source
        elif meta.get("solution") and "### BEGIN SOLUTION" in cell.source:
            gid = meta.get("grade_id", "")
            found.append({"id": gid, "prompt": last_md, "solution": cell.source,
                          "check": checks.get(f"{gid}-check", "")})
    return found


def handout(out: Path, force: bool = False) -> Path:
    """五章全部练习的答案讲义 → out/answers.html。"""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    from .student import check_out_dir

    out, paths = Path(out), chapters()
    target = out / "answers.html"
    check_out_dir(paths, out, [target], force)
    out.mkdir(parents=True, exist_ok=True)
    _assets(out)
    fmt = HtmlFormatter(style="default")
    parts = [f"<h1>练习答案（教师用）</h1><p>{TITLE}：五章全部练习的题目、参考答案与检查单元格，"
             "由教师版笔记本生成。<b>不要发给还在做题的学生。</b></p>"]
    toc = []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        chapter = html.escape(_short_title(path))
        toc.append(f'<a class="h2" href="#{path.stem}">{chapter}</a>')
        parts.append(f'<h2 id="{path.stem}">{html.escape(_title(nb))}</h2>')
        for i, ex in enumerate(exercises(nb), 1):
            anchor = f"{path.stem}-{i}"
            toc.append(f'<a class="h3" href="#{anchor}">练习 {i}：{html.escape(ex["id"])}</a>')
            parts.append(f'<h3 id="{anchor}">练习 {i}（{html.escape(ex["id"])}）</h3>'
                         f'<div class="card">{markdown2html_mistune(ex["prompt"])}</div>'
                         f'<p><b>参考答案</b></p>{highlight(ex["solution"], PythonLexer(), fmt)}'
                         + (f'<p><b>检查</b></p>{highlight(ex["check"], PythonLexer(), fmt)}'
                            if ex["check"] else ""))
    target.write_text(_page("练习答案", "".join(parts), None, "".join(toc)), encoding="utf-8")
    return target
