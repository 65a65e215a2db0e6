"""教师版 → 学生版：答案换成存根，输出清空，``show_solution`` 调用去掉，其余原样保留。

答案的标记（与 nbgrader 相同）::

    def causal_mask(T):
        # 提示：用 torch.tril
        ### BEGIN SOLUTION
        return torch.tril(torch.ones(T, T, dtype=torch.bool))
        ### END SOLUTION

- 在函数体里的答案 → ``raise NotImplementedError("还没完成：<提示>")``：函数照样定义，
  检查器调用它时打印“还没完成”，笔记本继续往下跑；
- 顶层的答案（“先猜一猜”之类）只能是 ``name = value`` 赋值 → ``name = None``，
  检查器同样报“还没完成”。
"""
from __future__ import annotations

import ast
import copy
import re
from pathlib import Path

import nbformat

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
HINT = re.compile(r"^\s*#\s*提示[:：]\s*(.*)$")
SHOW_SOLUTION = re.compile(
    r"^\s*(?:gc\.check\.|gptcourse\.check\.|check\.)?show_solution\(.*\)\s*;?\s*$")


class AuthoringError(ValueError):
    """教师版笔记本的答案标记写错了（没有配对、顶层答案不是赋值……）。"""


def _assigned_names(lines: list[str], where: str) -> list[str]:
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError as e:
        raise AuthoringError(f"{where}：答案区不是合法的 Python（{e.msg}）") from None
    names = []
    for node in tree.body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            raise AuthoringError(f"{where}：顶层的答案区只能包含 name = value 赋值，"
                                 f"第 {node.lineno} 行是 {type(node).__name__}")
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            if not isinstance(t, ast.Name):
                raise AuthoringError(f"{where}：顶层答案只能给单个变量赋值")
            names.append(t.id)
    return names


def stub_source(src: str, where: str = "单元格") -> str:
    """把一段代码里的每个答案区换成存根（见模块说明）。"""
    lines, out, i = src.split("\n"), [], 0
    while i < len(lines):
        line = lines[i]
        if line.strip() != BEGIN:
            if line.strip() == END:
                raise AuthoringError(f"{where}：{END} 前面没有 {BEGIN}")
            out.append(line)
            i += 1
            continue
        try:
            j = next(k for k in range(i + 1, len(lines)) if lines[k].strip() == END)
        except StopIteration:
            raise AuthoringError(f"{where}：{BEGIN} 没有配对的 {END}") from None
        indent = line[: len(line) - len(line.lstrip())]
        hints = [m.group(1) for m in (HINT.match(x) for x in out[-3:]) if m]
        hint = hints[-1] if hints else "按上面的说明写出这一段"
        if indent:                                                     # 函数体里：抛出存根
            out.append(f"{indent}raise NotImplementedError({('还没完成：' + hint)!r})")
        else:                                                          # 顶层：答案先置为 None
            for name in _assigned_names(lines[i + 1:j], where):
                out.append(f"{name} = None  # 在这里填写你的答案")
        i = j + 1
    return "\n".join(out)


def has_solution(src: str) -> bool:
    return any(line.strip() == BEGIN for line in src.split("\n"))


def student_notebook(nb: nbformat.NotebookNode, name: str = "笔记本") -> nbformat.NotebookNode:
    """返回学生版（不改动传入的笔记本）。"""
    nb = copy.deepcopy(nb)
    cells = []
    for idx, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            where = f"{name} 第 {idx + 1} 个单元格"
            src = stub_source(cell.source, where)
            kept = [x for x in src.split("\n") if not SHOW_SOLUTION.match(x)]
            if any("show_solution(" in x for x in kept):
                raise AuthoringError(f"{where}：show_solution 调用必须单独占一行")
            if kept != src.split("\n") and not any(x.strip() and not x.strip().startswith("#")
                                                   for x in kept):
                continue                                               # 只剩注释：整格删掉
            cell.source = "\n".join(kept)
            cell.outputs, cell.execution_count = [], None
        cells.append(cell)
    nb.cells = cells
    return nb


def write_student_edition(notebooks: list[Path], out: Path) -> list[Path]:
    """把每个教师版笔记本的学生版写到 out/ 下（同名）。"""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        target = out / path.name
        nbformat.write(student_notebook(nb, path.name), target)
        written.append(target)
    return written
