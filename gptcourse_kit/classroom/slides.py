"""课堂用的幻灯片与答案讲义，都从笔记本生成、离线可用。

- ``python -m gptcourse_kit.classroom slides --out 目录 [--edition student|teacher]``：每章一套
  reveal.js 幻灯片（``01_data_tokenizer.html`` …），按 1280×720 的投影排版：
  - **一页一件事**：每个标题开始新的一页；一页上是标题加几行字、一段代码（含它的短输出）或一张图。
  - **讲稿在备注里**：说明单元格的正文不上屏，放进每页的讲稿（按 S 打开讲稿窗口）；屏上只留
    标题、列表、表格、公式和每节开头的一句话。练习、“先猜一猜”的题目照原文上屏——学生要读题。
  - **代码 ≥ 20 px**：长的代码单元格拆成几页（在顶层语句之间断开），太长的只放开头并注明还有几行；
    文字输出最多 ``MAX_OUTPUT_ROWS`` 行；图独占一页，按页面放到最大。
  - 默认是**学生版**（练习是存根、练习与检查的输出去掉，与学生版笔记本相同），投影时不会露出答案；
    ``--edition teacher`` 是含参考答案的教师版。
  每页的高度在 Python 里按字数估算、装箱；浏览器里再用一小段脚本兜底（仍然放不下时把正文字号
  从 28 px 缩小，最小 ``MIN_PROSE_PX``；代码字号不变）。``tests/test_slides.py`` 在 Chromium 里以
  1280×720 打开每一套，检查没有一页溢出、字号不小于下限，并存下截图。
  reveal.js 5 与 KaTeX 随包分发（``gptcourse_kit/classroom/assets/``），不连网。
  选 reveal.js 自己拼页面，而不是 nbconvert 的 slides 导出器：后者的模板从 CDN 加载 reveal.js
  与 require.js，还要求每个单元格事先标好 ``slide_type``。
- ``python -m gptcourse_kit.classroom handout --out 目录``：``answers.html``，一页里是五章全部练习的
  题目说明、参考答案（教师版 ``### BEGIN SOLUTION`` 单元格）和检查单元格——发给助教或课后公布。
"""
from __future__ import annotations

import base64
import html
import math
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbconvert.filters.markdown_mistune import markdown2html_mistune
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from gptcourse import files

from .site import ASSETS, KATEX, TITLE, _assets, _page, _short_title, _title, chapters, wide_pre
from .student import read_notebook

# 版面（CSS 像素；reveal.js 按 1280×720 排版，投影更大时整体放大）
WIDTH, HEIGHT = 1280, 720
PAD_X, PAD_TOP, PAD_BOTTOM = 56, 24, 44
CONTENT_W = WIDTH - 2 * PAD_X
PROSE_PX, MIN_PROSE_PX, CODE_PX, HEADING_PX = 28, 22, 20, 38
PROSE_LINE, CODE_LINE = PROSE_PX * 1.45, CODE_PX * 1.35
CODE_COLS = 90                       # 一行代码的半角列数（汉字占两列），按 CONTENT_W 留了余量
PROSE_UNITS = CONTENT_W / PROSE_PX - 2   # 一行正文的全角字数
CHUNK_ROWS = 16                      # 一页代码最多几行（留出下面放短输出的地方）
SUMMARY_ROWS = 3 * CHUNK_ROWS        # 再长的代码单元格只放开头
MAX_OUTPUT_ROWS = 12
PIECE_MAX = 500                      # 一块内容（一段代码、几条列表……）最高多少像素
TASK = re.compile(r"练习|猜一猜|先猜|想一想|预测|怎样提交")

DECK_STYLE = f"""
:root {{ --r-main-font: "GPTCourse CJK Sans", sans-serif; --r-heading-font: "GPTCourse CJK Sans", sans-serif;
  --r-main-font-size: {PROSE_PX}px; --r-heading-color: #7a1f1f; --r-heading-text-transform: none;
  --r-heading1-size: 56px; --r-heading2-size: {HEADING_PX}px; --r-block-margin: 10px; }}
.reveal .slides section {{ box-sizing: border-box; height: {HEIGHT}px; padding: {PAD_TOP}px {PAD_X}px {PAD_BOTTOM}px;
  text-align: left; overflow: hidden; line-height: 1.45; }}
.reveal .slides section.title {{ display: flex !important; flex-direction: column; justify-content: center; }}
.reveal section.title h1 {{ font-size: 56px; line-height: 1.25; margin: 0 0 .4em; }}
.reveal section.title p.subtitle {{ font-size: 40px; color: #444; }}
.reveal h2 {{ line-height: 1.25; margin: 0 0 14px; font-weight: bold; }}
.reveal h2 .cont {{ font-size: .6em; color: #999; font-weight: normal; }}
.reveal p, .reveal li {{ margin: 0 0 12px; }}
.reveal ul, .reveal ol {{ display: block; margin: 0 0 12px 1.4em; }}
.reveal li {{ margin-bottom: 6px; }}
.reveal .lead {{ color: #333; }}
.reveal pre {{ box-sizing: border-box; width: 100%; box-shadow: none; font-size: {CODE_PX}px; line-height: 1.35; margin: 0 0 12px;
  white-space: pre-wrap; word-break: break-all; overflow: hidden; }}
.reveal pre code {{ max-height: none; padding: 0; overflow: visible; white-space: inherit; font-size: inherit; }}
.reveal pre, .reveal code {{ font-family: "DejaVu Sans Mono", "GPTCourse CJK Sans", monospace; }}
.reveal .highlight pre {{ background: #f4f1ea; border-left: 3px solid #c9a66b; padding: 8px 14px; }}
.reveal pre.out {{ background: #fff; border-left: 3px solid #ddd; padding: 4px 14px; color: #222; }}
.reveal .figure {{ text-align: center; }}
.reveal .figure img {{ margin: 0 auto; display: block; background: #fff; }}
.reveal table {{ font-size: 22px; margin: 0 0 12px; border-collapse: collapse; }}
.reveal table th, .reveal table td {{ padding: 3px 10px; border: 1px solid #ddd; }}
.reveal .katex {{ font-size: 1.05em; }}
.reveal .more {{ color: #888; font-size: 22px; }}
.prompt, a.anchor-link {{ display: none; }}
"""  # noqa: E501  （样式表）
# 讲稿窗口（按 S）：reveal.js 自带的 notes 插件不在随包的文件里，这里用几行脚本代替
DECK_JS = f"""
function gptcourseFit(section) {{
  /* 兜底：这一页仍然放不下时，把正文字号一点点缩小（代码字号不变） */
  if (!section) return;
  let px = {PROSE_PX};
  section.style.fontSize = '';
  while ((section.scrollHeight > section.clientHeight + 1 || section.scrollWidth > section.clientWidth + 1)
         && px > {MIN_PROSE_PX}) {{
    px -= 1; section.style.fontSize = px + 'px';
  }}
}}
let notesWin = null;
function showNotes() {{
  if (!notesWin || notesWin.closed) return;
  const s = Reveal.getCurrentSlide(), h = s.querySelector('h1, h2'), n = s.querySelector('aside.notes');
  notesWin.document.body.innerHTML = '<h3>' + (h ? h.textContent : '') + '</h3>' +
    (n && n.innerHTML.trim() ? n.innerHTML : '<p>（这一页没有讲稿）</p>');
}}
function openNotes() {{
  notesWin = window.open('', 'gptcourse-notes', 'width=760,height=640');
  if (!notesWin) return;
  notesWin.document.title = '讲稿 · ' + document.title;
  notesWin.document.head.innerHTML = '<style>body {{ font: 20px/1.6 sans-serif; margin: 1em 1.5em; }}</style>';
  showNotes();
}}
Reveal.initialize({{hash: true, width: {WIDTH}, height: {HEIGHT}, margin: 0, center: false,
  slideNumber: "c/t", transition: "none"}}).then(() => {{
  gptcourseFit(Reveal.getCurrentSlide());
  Reveal.on('slidechanged', e => {{ gptcourseFit(e.currentSlide); showNotes(); }});
  Reveal.addKeyBinding({{keyCode: 83, key: 'S', description: '讲稿窗口'}}, openNotes);
  document.body.dataset.deck = "1";
}});
"""  # noqa: E501  （脚本）


# ---------------------------------------------------------------- 估算高度
_FULL = re.compile(r"[\u1100-\u115f\u2e80-\u303e\u3041-\u33ff\u3400-\u4dbf\u4e00-\u9fff"
                   r"\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff00-\uff60\uffe0-\uffe6"
                   r"\U00020000-\U0003fffd]")


def _units(text: str) -> float:
    """正文里一段文字的宽度（全角字 = 1）；去掉 Markdown 的记号再算。"""
    text = re.sub(r"\*\*|`|\$|\\[a-zA-Z]+|[{}]", "", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return sum(1.0 if _FULL.match(ch) else 0.3 if ch == " " else 0.56 for ch in text)


def _prose_rows(text: str, width_units: float = PROSE_UNITS) -> int:
    return sum(max(1, math.ceil(_units(line) / width_units)) for line in text.split("\n")
               if line.strip()) or 1


def _code_rows(line: str) -> int:
    cols = sum(2 if _FULL.match(ch) else 1 for ch in line.expandtabs(4))
    return max(1, math.ceil(cols / CODE_COLS))


def _heading_h(title: str) -> float:
    rows = max(1, math.ceil(_units(title) * HEADING_PX / (CONTENT_W - 40)))
    return rows * HEADING_PX * 1.25 + 14


BODY_H = HEIGHT - PAD_TOP - PAD_BOTTOM


# ---------------------------------------------------------------- 页与内容块
@dataclass
class Item:
    kind: str                 # text / code / out / figure / table / math
    html: str
    h: float                  # 估算的高度（像素）
    own: bool = False         # 独占一页（图）
    fig: tuple | None = None  # 图：(base64 PNG, 宽, 高)；尺寸等知道了这一页的标题再定


@dataclass
class Slide:
    title: str
    kind: str = "text"        # title / text / code / figure / exercise
    items: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    cont: bool = False
    cell: int | None = None   # 第一块内容来自第几个单元格（从 0 数）

    @property
    def used(self) -> float:
        return sum(i.h for i in self.items)

    @property
    def budget(self) -> float:
        return BODY_H - _heading_h(self.title)


def _md(text: str) -> str:
    return markdown2html_mistune(text)


def md_blocks(src: str) -> list[tuple[str, str]]:
    """把一个说明单元格切成块：(heading1/heading2/…, 文字)、("para"|"list"|"table"|"math"|"fence"
    |"quote"|"html", 源文本)。"""
    lines, blocks, i = src.split("\n"), [], 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        m = re.match(r"^(#{1,6})\s+(.*)$", line)
        if m:
            blocks.append((f"heading{len(m.group(1))}", m.group(2).strip()))
            i += 1
            continue
        if line.lstrip().startswith(("```", "~~~")):
            fence, j = line.lstrip()[:3], i + 1
            while j < len(lines) and not lines[j].lstrip().startswith(fence):
                j += 1
            blocks.append(("fence", "\n".join(lines[i:j + 1])))
            i = j + 1
            continue
        if line.strip().startswith("$$"):
            j = i
            while j < len(lines) and not (lines[j].rstrip().endswith("$$")
                                          and (j > i or len(lines[j].strip()) > 2)):
                j += 1
            blocks.append(("math", "\n".join(lines[i:j + 1])))
            i = j + 1
            continue
        kind = ("table" if line.lstrip().startswith("|") else
                "list" if re.match(r"^\s*([-*+]|\d+[.)])\s", line) else
                "quote" if line.lstrip().startswith(">") else
                "html" if line.lstrip().startswith("<") else "para")
        j = i + 1
        while j < len(lines) and lines[j].strip() and not re.match(r"^#{1,6}\s", lines[j]) \
                and not lines[j].strip().startswith(("$$", "```")):
            if kind == "para" and (lines[j].lstrip().startswith("|")
                                   or re.match(r"^\s*([-*+]|\d+[.)])\s", lines[j])):
                break
            j += 1
        blocks.append((kind, "\n".join(lines[i:j])))
        i = j
    return blocks


def _list_items(src: str) -> tuple[bool, int, list[str]]:
    """列表块 → (有序?, 起始编号, 每一项的源文本)。"""
    items, ordered, start = [], False, 1
    for line in src.split("\n"):
        m = re.match(r"^([-*+]|(\d+)[.)])\s+(.*)$", line)
        if m:
            if not items and m.group(2):
                ordered, start = True, int(m.group(2))
            items.append(m.group(3))
        elif items:
            items[-1] += "\n" + line.strip()
    return ordered, start, items


def _list_pieces(src: str) -> list[Item]:
    ordered, start, items = _list_items(src)
    pieces, chunk, h, n = [], [], 0.0, start
    for k, item in enumerate(items):
        ih = _prose_rows(item, PROSE_UNITS - 2) * PROSE_LINE + 6
        if chunk and h + ih > PIECE_MAX:
            pieces.append(_list_item_piece(ordered, n, chunk, h))
            n, chunk, h = start + k, [], 0.0
        chunk.append(item)
        h += ih
    if chunk:
        pieces.append(_list_item_piece(ordered, n, chunk, h))
    return pieces


def _list_item_piece(ordered: bool, start: int, items: list[str], h: float) -> Item:
    src = "\n".join((f"{start + k}. " if ordered else "- ") + it.replace("\n", " ")
                    for k, it in enumerate(items))
    return Item("text", _md(src), h + 12)


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[。！？；])", text.replace("\n", "")) if s.strip()]


def _text_pieces(text: str) -> list[Item]:
    """一段要上屏的文字（题目）：太长时在句末断开，分成几块。"""
    pieces, chunk = [], ""
    for s in _sentences(text) or [text]:
        if chunk and _prose_rows(chunk + s) * PROSE_LINE + 12 > PIECE_MAX:
            pieces.append(Item("text", _md(chunk), _prose_rows(chunk) * PROSE_LINE + 12))
            chunk = ""
        chunk += s
    if chunk:
        pieces.append(Item("text", _md(chunk), _prose_rows(chunk) * PROSE_LINE + 12))
    return pieces


def _lead(para: str) -> str | None:
    """一段说明上屏的部分：开头的粗体小标题（“**跑对了吗？**”）连同它后面的第一句，或者
    第一句本身；太长（超过两行半）就不上屏。"""
    flat = para.replace("\n", "")
    m = re.match(r"^(\*\*[^*]{1,30}\*\*)\s*(.*)$", flat)
    head, rest = (m.group(1), m.group(2)) if m else ("", flat)
    first = re.match(r"^(.+?[。！？：])", rest)
    sentence = first.group(1) if first else rest
    text = (head + " " + sentence).strip() if head else sentence
    return text if _units(text) <= 2.5 * PROSE_UNITS else (head or None)


def _table_pieces(src: str) -> list[Item]:
    rows = [r for r in src.strip().split("\n") if r.strip()]
    if len(rows) < 2:
        return [Item("text", _md(src), _prose_rows(src) * PROSE_LINE)]
    head, sep, body = rows[0], rows[1], rows[2:]
    ncols = max(1, head.count("|") - 1)

    def row_h(r):
        cells = [c for c in r.strip().strip("|").split("|")]
        widest = max((_units(c) for c in cells), default=1)
        per_col = CONTENT_W / ncols / 22
        return max(1, math.ceil(widest / max(per_col, 1))) * 22 * 1.4 + 8

    pieces, chunk, h = [], [], row_h(head)
    for r in body:
        if chunk and h + row_h(r) > PIECE_MAX:
            pieces.append(Item("table", _md("\n".join([head, sep, *chunk])), h + 12))
            chunk, h = [], row_h(head)
        chunk.append(r)
        h += row_h(r)
    pieces.append(Item("table", _md("\n".join([head, sep, *chunk])), h + 12))
    return pieces


_FMT = HtmlFormatter(style="default")


def clean_code(src: str) -> str:
    lines = [re.sub(r"\s*#\s*noqa\b.*$", "", x).rstrip() for x in src.split("\n")
             if x.strip() != "# NBVAL_CHECK_OUTPUT"]
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines)


def code_chunks(src: str) -> tuple[list[str], int]:
    """代码 → 每页一段（在顶层语句之间断开，每段最多 CHUNK_ROWS 行）；超过 SUMMARY_ROWS 行的单元格
    只留开头几段。返回 (各段, 没放上去的行数)。"""
    lines = src.split("\n")
    chunks, cur, rows = [], [], 0
    for line in lines:
        r = _code_rows(line)
        top = bool(line) and not line[0].isspace() and not line.startswith((")", "]", "}"))
        if cur and (rows + r > CHUNK_ROWS or (top and rows >= CHUNK_ROWS * 0.6
                                              and not cur[-1].rstrip().endswith((",", "(", "\\")))):
            chunks.append(cur)
            cur, rows = [], 0
        cur.append(line)
        rows += r
    if cur:
        chunks.append(cur)
    total = sum(_code_rows(x) for x in lines)
    if total <= SUMMARY_ROWS:
        return ["\n".join(c) for c in chunks], 0
    kept, shown = [], 0
    for c in chunks:
        if shown + len(c) > CHUNK_ROWS * 2:
            break
        kept.append("\n".join(c))
        shown += len(c)
    return kept or ["\n".join(chunks[0])], len(lines) - shown


def _code_item(src: str) -> Item:
    body = wide_pre(highlight(src, PythonLexer(), _FMT))
    rows = sum(_code_rows(x) for x in src.split("\n"))
    return Item("code", body, rows * CODE_LINE + 16 + 12)


def _out_item(text: str) -> Item | None:
    lines = [x.rstrip() for x in text.rstrip("\n").split("\n")]
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        return None
    kept, rows = [], 0
    for line in lines:
        r = _code_rows(line)
        if rows + r > MAX_OUTPUT_ROWS:
            kept.append("……（完整输出见笔记本）")
            rows += 1
            break
        kept.append(line)
        rows += r
    body = wide_pre(f'<pre class="out">{html.escape(chr(10).join(kept))}</pre>')
    return Item("out", body, rows * CODE_LINE + 8 + 12)


def _png_size(b64: str) -> tuple[int, int]:
    head = base64.b64decode(b64[:64])
    return struct.unpack(">II", head[16:24])


def _figure_item(b64: str) -> Item:
    w, h = _png_size(b64)
    return Item("figure", "", BODY_H / 2, own=True, fig=(b64, w, h))


def _figure_html(item: Item, budget: float) -> str:
    b64, w, h = item.fig
    scale = min(CONTENT_W / w, (budget - 8) / h, 1.8)   # 放到最大，小图最多放大 1.8 倍
    W, H = int(w * scale), int(h * scale)
    img = f'<img src="data:image/png;base64,{b64}" width="{W}" height="{H}" alt="图">'
    return f'<div class="figure">{img}</div>'


def _markdown_output_pieces(text: str) -> list[Item]:
    pieces = []
    for kind, src in md_blocks(text):
        if kind == "table":
            pieces += _table_pieces(src)
        elif kind == "list":
            pieces += _list_pieces(src)
        elif kind.startswith("heading"):
            pieces.append(Item("text", f"<p><b>{html.escape(src)}</b></p>", PROSE_LINE + 12))
        elif kind == "math":
            pieces.append(Item("math", _md(src), 80))
        else:
            pieces += _text_pieces(src)
    return pieces


def _output_items(cell) -> list[Item]:
    items: list[Item] = []
    stream = ""
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            stream += out.get("text", "")
            continue
        if stream:
            items += [i for i in [_out_item(stream)] if i]
            stream = ""
        data = out.get("data", {})
        if "image/png" in data:
            items.append(_figure_item(data["image/png"]))
        elif "text/markdown" in data:
            items += _markdown_output_pieces(data["text/markdown"])
        elif "application/vnd.jupyter.widget-view+json" in data:
            items.append(Item("text", "<p class='more'>（交互面板：在笔记本里运行）</p>", 40))
        elif "text/plain" in data and out.get("output_type") == "execute_result":
            items += [i for i in [_out_item(data["text/plain"])] if i]
    if stream:
        items += [i for i in [_out_item(stream)] if i]
    return items


# ---------------------------------------------------------------- 装页
class _Deck:
    def __init__(self):
        self.slides: list[Slide] = []
        self.section = ""
        self.title_cell = None            # 章首单元格（含 # 标题）的序号：紧跟它的代码另起一页

    @property
    def cur(self) -> Slide | None:
        return self.slides[-1] if self.slides else None

    def new(self, title: str, kind: str = "text", cont: bool = False, cell=None) -> Slide:
        if TASK.search(title) and kind == "text":
            kind = "exercise"
        s = Slide(title, kind, cont=cont, cell=cell)
        self.slides.append(s)
        return s

    def add(self, item: Item, cell: int, exercise: bool = False) -> None:
        cur = self.cur
        if cur is None or cur.kind == "title":
            cur = self.new(self.section or "开始之前", cell=cell)
        full = any(i.own for i in cur.items)
        if cur.items and (item.own or full or cur.used + item.h > cur.budget):
            kind = "exercise" if cur.kind == "exercise" else "text"
            cur = self.new(self.section or cur.title, kind, cont=True, cell=cell)
        if cur.cell is None:
            cur.cell = cell
        cur.items.append(item)
        if exercise:                                    # 练习单元格（答案或存根）所在的页
            cur.kind = "exercise"
        elif item.kind == "figure":
            cur.kind = "figure" if cur.kind != "exercise" else cur.kind
        elif item.kind == "code" and cur.kind == "text":
            cur.kind = "code"

    def note(self, text: str) -> None:
        if self.cur is None:
            self.new(self.section or "开始之前")
        self.cur.notes.append(text)


def build_deck(nb: nbformat.NotebookNode) -> list[Slide]:
    """一章笔记本 → 一串页（见模块说明）。"""
    d = _Deck()
    for idx, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            first_para = True
            for kind, src in md_blocks(cell.source):
                if kind == "heading1":
                    main, _, sub = src.partition("：")
                    s = d.new(src, "title", cell=idx)
                    s.items.append(Item("text", f"<h1>{html.escape(main)}</h1>"
                                        + (f'<p class="subtitle">{html.escape(sub)}</p>'
                                           if sub else ""), 0))
                    d.section, d.title_cell = "", idx
                    continue
                if kind.startswith("heading"):
                    if idx != d.title_cell:
                        d.title_cell = None
                    d.section = src.replace("**", "")
                    d.new(d.section, cell=idx)
                    first_para = True
                    continue
                task = bool(TASK.search(d.section))
                if kind == "para" and d.cur is not None and d.cur.kind == "title":
                    d.note(src)                     # 标题页只放标题；章首的引言进讲稿
                elif kind == "para":
                    if task:
                        for item in _text_pieces(src):
                            d.add(item, idx)
                    else:
                        lead = _lead(src) if (first_para or src.startswith("**")) else None
                        if lead:
                            for item in _text_pieces(lead):
                                d.add(Item("text", item.html.replace("<p>", '<p class="lead">', 1),
                                           item.h), idx)
                        d.note(src)
                    first_para = False
                elif kind == "list":
                    for item in _list_pieces(src):
                        d.add(item, idx)
                elif kind == "table":
                    for item in _table_pieces(src):
                        d.add(item, idx)
                elif kind == "math":
                    d.add(Item("math", _md(src), 90), idx)
                elif kind == "fence":
                    body = re.sub(r"^\s*(```|~~~)\w*\n?|\n?\s*(```|~~~)\s*$", "", src)
                    for chunk in code_chunks(body)[0]:
                        d.add(_code_item(chunk), idx)
                else:                                       # 引用、HTML：放进讲稿
                    d.note(src)
        elif cell.cell_type == "code":
            src = clean_code(cell.source)
            if not src and not cell.get("outputs"):
                continue
            if d.title_cell is not None:           # 章首（学习目标……）后面的设置单元格
                d.section, d.title_cell = "开始之前：设置", None
                d.new(d.section, cell=idx)
            chunks, left = code_chunks(src) if src else ([], 0)
            task = bool(cell.get("metadata", {}).get("nbgrader", {}).get("solution"))
            for k, chunk in enumerate(chunks):
                if k == len(chunks) - 1 and left:
                    chunk += f"\n# ……（这一格还有 {left} 行，见笔记本）"
                d.add(_code_item(chunk), idx, exercise=task)
            for item in _output_items(cell):
                d.add(item, idx)
    return [s for s in d.slides if s.items or s.kind == "title" or s.notes or not s.cont]


def _render(slide: Slide) -> str:
    notes = "".join(_md(n) for n in slide.notes)
    aside = f'<aside class="notes">{notes}</aside>' if notes else ""
    attrs = f' class="{slide.kind}" data-kind="{slide.kind}"' + (
        f' data-cell="{slide.cell}"' if slide.cell is not None else "")
    if slide.kind == "title":
        return f"<section{attrs}>{''.join(i.html for i in slide.items)}{aside}</section>"
    cont = '<span class="cont">（续）</span>' if slide.cont else ""
    body = "".join(_figure_html(i, slide.budget) if i.fig else i.html for i in slide.items)
    return f"<section{attrs}><h2>{_inline(slide.title)}{cont}</h2>{body}{aside}</section>"


def _inline(text: str) -> str:
    """标题里的 Markdown 只有 `代码` 和 $公式$：转义后把反引号换成 <code>（不走块级渲染，
    否则“1. 语料”会变成有序列表）。"""
    parts = re.split(r"(`[^`]+`)", text)
    return "".join(f"<code>{html.escape(p[1:-1])}</code>" if p.startswith("`") and len(p) > 1
                   else html.escape(p, quote=False) for p in parts)



def edition_notebook(path: Path, edition: str = "student") -> nbformat.NotebookNode:
    """幻灯片用的笔记本：学生版（练习是存根，练习与检查的输出去掉）或教师版原样。"""
    from .student import student_notebook

    if edition not in ("student", "teacher"):
        raise ValueError(f"--edition 只能是 student 或 teacher，收到 {edition!r}")
    nb = read_notebook(path)
    return student_notebook(nb, Path(path).name, keep_outputs=True) if edition == "student" else nb


def deck(path: Path, edition: str = "student") -> str:
    """一章的幻灯片 HTML（reveal.js）。"""
    nb = edition_notebook(path, edition)
    sections = [_render(s) for s in build_deck(nb)]
    label = "学生版" if edition == "student" else "教师版（含答案）"
    title = html.escape(_title(nb))
    return f"""<!DOCTYPE html>
<html lang="zh-CN"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · 幻灯片 · {label}</title>
<link rel="stylesheet" href="assets/reveal/reset.css">
<link rel="stylesheet" href="assets/reveal/reveal.css">
<link rel="stylesheet" href="assets/reveal/theme/white.css">
<link rel="stylesheet" href="assets/style.css"><link rel="stylesheet" href="assets/pygments.css">
<style>{DECK_STYLE}</style>
{KATEX}
</head><body data-edition="{edition}">
<div class="reveal"><div class="slides">
{''.join(sections)}
</div></div>
<script src="assets/reveal/reveal.js"></script>
<script>{DECK_JS}</script>
</body></html>
"""


def build_slides(out: Path, force: bool = False, edition: str = "student") -> list[Path]:
    """每章一套幻灯片写进 out，返回各文件路径。"""
    if edition not in ("student", "teacher"):
        raise ValueError(f"--edition 只能是 student 或 teacher，收到 {edition!r}")
    out, paths = Path(out), chapters()
    targets = [out / f"{p.stem}.html" for p in paths]
    files.check_folder(out, targets, inputs=paths, force=force)
    files.make_folder(out)
    _assets(out)
    files.copy_tree(ASSETS / "reveal", out / "assets" / "reveal", within=out)
    for path, target in zip(paths, targets):
        files.write_text(target, deck(path, edition), inputs=paths, within=out)
    return targets


def slide_counts(edition: str = "student") -> dict[str, int]:
    """每章幻灯片的页数（教师指南里的页数表由它核对）。"""
    return {p.stem: len(build_deck(edition_notebook(p, edition))) for p in chapters()}


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

    out, paths = Path(out), chapters()
    target = out / "answers.html"
    files.check_folder(out, [target], inputs=paths, force=force)
    files.make_folder(out)
    _assets(out)
    fmt = HtmlFormatter(style="default")
    parts = [f"<h1>练习答案（教师用）</h1><p>{TITLE}：五章全部练习的题目、参考答案与检查单元格，"
             "由教师版笔记本生成。<b>不要发给还在做题的学生。</b></p>"]
    toc = []
    for path in paths:
        nb = read_notebook(path)
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
    return files.write_text(target, _page("练习答案", "".join(parts), None, "".join(toc)),
                            inputs=paths, within=out)
