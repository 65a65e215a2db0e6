"""提交的笔记本必须来自一次干净的、从上到下的完整运行（检查规则见 gptcourse_kit.notebooks）。"""
from __future__ import annotations

import inspect
import re

import nbformat
import pytest

import gptcourse as gc
from gptcourse_kit.notebooks import NOTEBOOK_DIR, check_notebook, notebook_paths

NOTEBOOKS = notebook_paths()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_notebook_is_clean(path):
    problems = check_notebook(path)
    assert problems == [], f"{path.name}:\n" + "\n".join(problems)


def test_notebooks_exist():
    assert NOTEBOOK_DIR.is_dir()
    assert NOTEBOOKS, "notebooks/ 下至少应有一个课程笔记本"


def _nb(cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    return nb


def test_checker_catches_bad_notebooks(tmp_path):
    """反向检查：乱序执行、报错、绝对路径、缺字警告、缺少小结都必须被发现。"""
    md = nbformat.v4.new_markdown_cell
    code = nbformat.v4.new_code_cell
    good_first = md("# 标题\n\n## 学习目标\n\n运行时间：1 分钟")
    c1 = code("# NBVAL_CHECK_OUTPUT\nprint(1)", execution_count=2)
    c1.outputs = [nbformat.v4.new_output("stream", name="stdout", text="/work/main/data\n")]
    c2 = code("1/0", execution_count=1)
    c2.outputs = [nbformat.v4.new_output("error", ename="ZeroDivisionError", evalue="x",
                                         traceback=[])]
    c3 = code("plot()", execution_count=None)
    c3.outputs = [nbformat.v4.new_output(
        "stream", name="stderr",
        text="UserWarning: Glyph 26149 (\\N{X}) missing from font(s) DejaVu Sans.")]
    path = tmp_path / "bad.ipynb"
    nbformat.write(_nb([good_first, c1, c2, c3, md("结束")]), path)
    problems = "\n".join(check_notebook(path))
    for needle in ("没有执行", "错误输出", "绝对路径", "缺字", "小结", "练习"):
        assert needle in problems, needle

    c3.execution_count = 3
    path2 = tmp_path / "order.ipynb"
    nbformat.write(_nb([md("没有标题"), c1, c2, c3]), path2)   # 计数 2, 1, 3
    problems = "\n".join(check_notebook(path2))
    assert "执行计数" in problems and "学习目标" in problems


# ---------------------------------------------------------------- 打印出来的源码不能过期
GETSOURCE_RE = re.compile(r"getsource\(\s*([A-Za-z_][\w.]*)\s*\)")
IMPORT_LINE_RE = re.compile(r"^(from [\w.]+ import [\w, ]+|import [\w.]+(?: as \w+)?"
                            r"|\w+ = gc(?:\.\w+)+)\s*(?:#.*)?$", re.M)


def _getsource_cells(path):
    """(单元格序号, 表达式, 提交的 stdout) —— 每个调用 inspect.getsource(...) 的代码单元格。"""
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        stdout = "".join(o.get("text", "") for o in cell.get("outputs", [])
                         if o.get("output_type") == "stream" and o.get("name") == "stdout")
        for expr in GETSOURCE_RE.findall(cell.source):
            yield i, expr, stdout


def _namespace(path) -> dict:
    """笔记本里的导入语句与 ``X = gc.…`` 别名（足以找到 getsource 的对象），不运行别的代码。"""
    nb = nbformat.read(path, as_version=4)
    ns = {"gc": gc, "inspect": inspect}
    for cell in nb.cells:
        if cell.cell_type == "code":
            for line in IMPORT_LINE_RE.findall(cell.source):
                exec(line, ns)                                   # 只有导入语句与别名
    return ns


SOURCE_CELLS = [(p, *c) for p in NOTEBOOKS for c in _getsource_cells(p)]


def test_notebooks_print_package_source():
    assert len(SOURCE_CELLS) >= 5          # 解析找得到打印的源码（GUIDE：每本至多 4 处）


@pytest.mark.parametrize("path, cell, expr, stdout", SOURCE_CELLS,
                         ids=[f"{p.stem}-cell{i}-{e}" for p, i, e, _ in SOURCE_CELLS])
def test_printed_source_is_current(path, cell, expr, stdout):
    """单元格输出里的源码必须与包里现在的源码一字不差；否则改了包却没有重跑笔记本。"""
    obj = eval(expr, _namespace(path))                           # 只是属性访问：gc.x.y
    current = inspect.getsource(obj)
    assert current in stdout, (
        f"{path.name} 单元格 {cell} 打印的 {expr} 源码已过期："
        f"请运行 python -m gptcourse_kit.notebooks run {path.stem}")
