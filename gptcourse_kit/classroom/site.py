"""把五个笔记本（含提交的输出）渲染成一个静态网站：主页（课程地图、安装）+ 五章 + 章内目录。

渲染用 nbconvert 的 ``basic`` 模板（只出单元格的 HTML），外面套我们自己的页面：导航、上一章/下一章、
本章目录。网页打开时什么都不从网络加载：课程的中文字体、样式、代码高亮和 KaTeX（连同它的 TeX
字体，随包分发在 ``gptcourse_kit/classroom/assets/``）都复制进 ``assets/``，图是内嵌的 PNG。
直接双击 index.html 也能看。

- 公式用 KaTeX 渲染（而不是 MathJax 2：PyPI 上的 jupyter-server-mathjax 没有带 TeX 字体，
  只能退回 STIX，``fontdata.js`` 还找不到）。课程里的公式（求和、连乘、分式、根号、softmax……）
  KaTeX 都支持，页面打开时一次排好，不会跳动。
- 窄屏（手机，≤ 760 px）：本章目录收进页面顶部的“目录”按钮（纯 CSS，不用脚本），正文占满宽度。
- 输出里用空格对齐的中文表格：``<pre>`` 里每个全角字占两个半角字的宽度（等宽字体里汉字
  本来只有约 1.7 个半角宽），这样按显示宽度补齐的列在网页上也对得齐。
"""
from __future__ import annotations

import html
import re
from importlib import resources
from pathlib import Path

import nbformat
from nbconvert import HTMLExporter
from nbconvert.filters.markdown_mistune import markdown2html_mistune
from pygments.formatters import HtmlFormatter

from gptcourse import files
from gptcourse.runtime import ROOT

from .student import read_notebook

FONT = Path(str(resources.files("gptcourse") / "fonts" / "GPTCourseCJKSans-Regular.otf"))

TITLE = "从零构建一个会写唐诗的 GPT"
STYLE = """
@font-face { font-family: "GPTCourse CJK Sans"; src: url("GPTCourseCJKSans-Regular.otf"); }
body { margin: 0; font-family: "GPTCourse CJK Sans", sans-serif; color: #222; background: #fdfbf7;
       line-height: 1.7; }
header { background: #7a1f1f; color: #fff; padding: .6em 1.2em; display: flex; gap: 1.2em;
         align-items: baseline; flex-wrap: wrap; }
header a { color: #fff; text-decoration: none; } header a.current { border-bottom: 2px solid #fff; }
header .site { font-size: 1.2em; font-weight: bold; margin-right: 1em; }
.layout { display: flex; max-width: 1280px; margin: 0 auto; }
nav.toc { width: 240px; flex: none; padding: 1em; position: sticky; top: 0; align-self: flex-start;
          max-height: 100vh; overflow-y: auto; font-size: .9em; }
nav.toc a { display: block; color: #555; text-decoration: none; padding: .15em 0; }
nav.toc a.h3 { padding-left: 1em; font-size: .95em; }
main { flex: 1; min-width: 0; padding: 1em 2em 4em; }
#tocbtn, label.tocbtn { display: none; }
body .katex { font-family: KaTeX_Main, "GPTCourse CJK Sans", "Times New Roman", serif; }  /* \\text{中文}：不是豆腐块 */
body .katex .mathnormal { font-family: KaTeX_Math, "GPTCourse CJK Sans", serif; }
pre .zh2 { display: inline-block; width: 1.2em; text-align: center; }  /* 全角 = 两个半角 */
@media (max-width: 760px) {
  .layout { display: block; }
  label.tocbtn { display: inline-block; margin: .6em 1em 0; padding: .2em .8em; cursor: pointer;
                 border: 1px solid #c9a66b; border-radius: 4px; background: #fff;
                 position: sticky; top: .5em; z-index: 20; box-shadow: 0 1px 4px rgba(0,0,0,.15); }
  nav.toc { display: none; width: auto; position: static; max-height: none; }
  /* 打开的目录：按钮固定在最上面一条（不随页面头部往下错位）；目录滚动时条目藏到这一条底色下面，
     不从按钮底下穿过 */
  #tocbtn:checked + label.tocbtn { position: fixed; top: .5em; left: 0; }
  #tocbtn:checked ~ .layout::before { content: ""; position: fixed; top: 0; left: 0; right: 0;
                 height: 3.6em; background: #fdfbf7; z-index: 15; }
  #tocbtn:checked ~ .layout nav.toc { display: block; position: fixed; top: 0; left: 0; right: 0; bottom: 0;
                 padding: 4.2em 1.2em 1em; overflow-y: auto; background: #fdfbf7; z-index: 10; }
  main { padding: 1em .9em 3em; }
  header { gap: .6em; }
}
main img { max-width: 100%; height: auto; }
pre, code { font-family: "DejaVu Sans Mono", "GPTCourse CJK Sans", monospace; }
.input_area pre, .highlight pre { background: #f4f1ea; padding: .6em .8em; overflow-x: auto;
                                  border-left: 3px solid #c9a66b; margin: .4em 0; }
main pre { overflow-x: auto; max-width: 100%; }  /* 说明里的代码块也不把页面撑宽 */
.output_area pre { background: #fff; padding: .4em .8em; overflow-x: auto; margin: .2em 0; }
.prompt { display: none; } a.anchor-link { display: none; }
.output_area { overflow-x: auto; }
table { border-collapse: collapse; margin: .6em 0; } th, td { border: 1px solid #ddd; padding: .2em .6em; }
.pager { display: flex; justify-content: space-between; margin-top: 3em; }
.card { background: #fff; border: 1px solid #e5dccb; border-radius: 6px; padding: .8em 1.2em; margin: 1em 0; }
.card h2 { margin: .2em 0; } .card h2 a { color: #7a1f1f; text-decoration: none; }
"""  # noqa: E501  （样式表：一条规则一行）
KATEX = """<link rel="stylesheet" href="assets/katex/katex.min.css">
<script defer src="assets/katex/katex.min.js"></script>
<script defer src="assets/katex/contrib/auto-render.min.js"></script>
<script defer src="assets/math.js"></script>"""
# 公式的分隔符与 Jupyter 相同；throwOnError=false：KaTeX 不认识的写法原样显示，不会整页出错
MATH_JS = """document.addEventListener("DOMContentLoaded", function () {
  renderMathInElement(document.body, {delimiters: [
    {left: "$$", right: "$$", display: true}, {left: "\\\\[", right: "\\\\]", display: true},
    {left: "$", right: "$", display: false}, {left: "\\\\(", right: "\\\\)", display: false}],
    ignoredTags: ["script", "noscript", "style", "textarea", "pre", "code"], throwOnError: false});
  document.body.dataset.math = "1";
});
// 手机上：点了目录里的一节就把目录收起来（目录按钮本身是纯 CSS 的复选框）
document.addEventListener("click", function (e) {
  const box = document.getElementById("tocbtn");
  if (box && e.target.closest && e.target.closest("nav.toc a")) box.checked = false;
});"""
ASSETS = Path(__file__).resolve().parent / "assets"


def chapters() -> list[Path]:
    return sorted((ROOT / "notebooks").glob("0[1-5]_*.ipynb"))


def _page(title: str, body: str, current: str | None, toc: str = "") -> str:
    links = "".join(f'<a href="{p.stem}.html"{" class=current" if p.stem == current else ""}>'
                    f'{html.escape(_short_title(p))}</a>' for p in chapters())
    return f"""<!DOCTYPE html>
<html lang="zh-CN"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)} · {TITLE}</title>
<link rel="stylesheet" href="assets/style.css"><link rel="stylesheet" href="assets/pygments.css">
{KATEX}
</head><body>
<header><a class="site" href="index.html">{TITLE}</a>{links}</header>
{'<input type="checkbox" id="tocbtn"><label class="tocbtn" for="tocbtn">目录</label>' if toc else ''}
<div class="layout">{f'<nav class="toc">{toc}</nav>' if toc else ''}<main>{wide_pre(body)}</main></div>
</body></html>
"""  # noqa: E501  （HTML 模板）


def _title(nb: nbformat.NotebookNode) -> str:
    for cell in nb.cells:
        m = re.search(r"^#\s+(.+)$", cell.source, flags=re.M) if cell.cell_type == "markdown" else None  # noqa: E501
        if m:
            return m.group(1).strip()
    return "未命名"


def _short_title(path: Path) -> str:
    title = _title(read_notebook(path))
    return title.split("：")[0]                              # “01 · 数据与分词”


def _toc(body: str) -> str:
    items = re.findall(r'<h([23]) id="([^"]+)"[^>]*>(.*?)</h\1>', body, flags=re.S)
    out = []
    for level, anchor, inner in items:
        text = re.sub(r"<[^>]+>", "", inner).replace("¶", "").strip()
        out.append(f'<a class="h{level}" href="#{anchor}">{html.escape(html.unescape(text))}</a>')
    return "".join(out)


def _intro(nb: nbformat.NotebookNode) -> str:
    """第一个单元格里的“学习目标”与“预计运行时间”（主页的课程地图用）。"""
    first = next((c.source for c in nb.cells if c.cell_type == "markdown"), "")
    goals = re.search(r"##\s*学习目标\s*\n(.*?)(?=\n\*\*|\n##|\Z)", first, flags=re.S)
    time_line = re.search(r"^\*\*预计运行时间[:：]?\*\*.*$", first, flags=re.M)
    text = (goals.group(1).strip() if goals else "") + ("\n\n" + time_line.group(0) if time_line else "")  # noqa: E501
    return markdown2html_mistune(text)


def _readme_section(heading: str) -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(rf"^## {heading}\s*\n(.*?)(?=^## )", readme, flags=re.S | re.M)
    return markdown2html_mistune(m.group(1)) if m else ""


def _assets(out: Path) -> None:
    """out/assets/ 下的样式、字体与 KaTeX（每个文件原子地写，不顺着链接写到 out 之外）。"""
    assets = out / "assets"
    files.write_text(assets / "style.css", STYLE, within=out)
    files.write_text(assets / "pygments.css",
                     HtmlFormatter(style="default").get_style_defs(".highlight"), within=out)
    files.copy_file(FONT, assets / "GPTCourseCJKSans-Regular.otf", within=out)
    files.copy_tree(ASSETS / "katex", assets / "katex", within=out)
    files.write_text(assets / "math.js", MATH_JS, within=out)


_PRE = re.compile(r"(<pre[^>]*>)(.*?)(</pre>)", re.S)
_WIDE = re.compile(r"([\u1100-\u115f\u2e80-\u303e\u3041-\u33ff\u3400-\u4dbf\u4e00-\u9fff"
                   r"\ua960-\ua97f\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff00-\uff60"
                   r"\uffe0-\uffe6\U00020000-\U0003fffd])")


def wide_pre(body: str) -> str:
    """``<pre>`` 里的每个全角字包进 ``<span class="zh2">``（宽度 = 两个半角字，见 STYLE）。"""
    def fix(m):
        parts = re.split(r"(<[^>]+>)", m.group(2))                # 只改文字，不碰标签
        text = "".join(p if p.startswith("<") else _WIDE.sub(r'<span class="zh2">\1</span>', p)
                       for p in parts)
        return m.group(1) + text + m.group(3)
    return _PRE.sub(fix, body)


def build_site(out: Path, edition: str = "teacher", force: bool = False) -> Path:
    """渲染整个网站，返回主页路径。

    ``edition="student"``：练习单元格换成存根（与学生版笔记本相同），练习与检查单元格的输出
    去掉，其余输出保留；``"teacher"``：教师版原样（含答案）。``out`` 不能包含输入的笔记本；
    里面已有要写的文件时不覆盖，除非 ``force``。"""
    from .student import student_notebook

    if edition not in ("student", "teacher"):
        raise ValueError(f"--edition 只能是 student 或 teacher，收到 {edition!r}")
    out, paths = Path(out), chapters()
    files.check_folder(out, [out / "index.html"] + [out / f"{p.stem}.html" for p in paths],
                       inputs=paths, force=force)
    files.make_folder(out)
    _assets(out)
    exporter = HTMLExporter(template_name="basic")
    cards = []
    for i, path in enumerate(paths):
        nb = read_notebook(path)
        if edition == "student":
            nb = student_notebook(nb, path.name, keep_outputs=True)
        body, _ = exporter.from_notebook_node(nb)
        prev_link, next_link = "<span></span>", "<span></span>"
        if i:
            prev = paths[i - 1]
            prev_link = f'<a href="{prev.stem}.html">← {html.escape(_short_title(prev))}</a>'
        if i + 1 < len(paths):
            nxt = paths[i + 1]
            next_link = f'<a href="{nxt.stem}.html">{html.escape(_short_title(nxt))} →</a>'
        body += f'<div class="pager">{prev_link}{next_link}</div>'
        files.write_text(out / f"{path.stem}.html", _page(_title(nb), body, path.stem, _toc(body)),
                         inputs=paths, within=out)
        cards.append(f'<div class="card"><h2><a href="{path.stem}.html">{html.escape(_title(nb))}</a>'  # noqa: E501
                     f'</h2>{_intro(nb)}</div>')
    home = (f"<h1>{TITLE}</h1><p>五个 Jupyter 笔记本，用 PyTorch 从零搭建、训练、评估并部署一个写唐诗的 GPT。"  # noqa: E501
            f"这里是带着运行结果的只读版本；想亲手运行，请按下面的说明安装。</p>"
            f"<h2>课程地图</h2>{''.join(cards)}<h2>安装与运行</h2>{_readme_section('快速开始')}")
    return files.write_text(out / "index.html", _page("主页", home, None), inputs=paths, within=out)
