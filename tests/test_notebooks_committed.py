"""提交的笔记本必须来自一次干净的、从上到下的完整运行（检查规则见 gptcourse.notebooks）。"""
from __future__ import annotations

import nbformat
import pytest

from gptcourse.notebooks import NOTEBOOK_DIR, check_notebook, notebook_paths

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
