"""教师版 → 学生版：答案换成存根，输出清空，``show_solution`` 与测试标记去掉，末尾加“怎样提交”。

答案的标记（与 nbgrader 相同）::

    def causal_mask(T):
        # 提示：用 torch.tril
        ### BEGIN SOLUTION
        return torch.tril(torch.ones(T, T, dtype=torch.bool))
        ### END SOLUTION

- 在函数体里的答案 → ``raise NotImplementedError("还没完成：<提示>")``：函数照样定义，
  检查器调用它时打印“还没完成”；
- 顶层的答案（“先猜一猜”之类）只能是 ``name = value`` 赋值 → ``name = None``，
  检查器同样报“还没完成”；
- 用到学员函数的单元格在教师版里就写成 ``gc.check.mine(…)`` / ``gc.check.ready(…)``
  （见 ``gptcourse.check._common``），所以学生版从头跑到尾不会停下；
- 学生版里没有答案，也没有打印答案的办法：``show_solution`` 的代码行与提到它的文字行都删掉，
  删完还剩 ``show_solution`` 就报错；``# NBVAL_CHECK_OUTPUT``（教师版的测试标记）也删掉。
"""
from __future__ import annotations

import ast
import copy
import re
from pathlib import Path

import nbformat

from ..errors import UserError

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
HINT = re.compile(r"^\s*#\s*提示[:：]\s*(.*)$")
SHOW_SOLUTION = re.compile(
    r"^\s*(?:gc\.check\.|gptcourse\.check\.|check\.)?show_solution\(.*\)\s*;?\s*$")
NBVAL_MARK = "# NBVAL_CHECK_OUTPUT"
HOW_TO_SUBMIT = """## 怎样提交

1. 只在写着“在这里填写你的答案”或 `raise NotImplementedError("还没完成：…")` 的地方写代码；
   **不要删除、也不要改动检查单元格**（`gc.check.…` 那几行）：评分工具靠它们认出每一道题。
2. 交之前从头跑一遍：菜单 Kernel → Restart Kernel and Run All Cells。每个检查都应打印
   “正确 ✓”；还打印“还没完成”或“还不对”的题，评分时也不会得分。快速模式
   （环境变量 `GPTCOURSE_QUICK=1`）就够了。
3. **评分时怎样运行**：评分工具运行的是老师的笔记本（演示和检查单元格都用老师的），你的笔记本里
   只采用**你写的单元格**（练习单元格，以及你自己加的或改过的单元格）中的**定义**：`def`、
   `class`、`import`，和由常量算出的赋值（如 `SEP = re.compile("[，。]")`、`N = 3 * 64`）。
   这些单元格里直接执行的语句（`print(…)`、循环、调用函数得到的结果）评分时**不执行**，所以
   练习要用到的东西都写成定义。不要用内置函数的名字（`len`、`sorted`…）或 `torch`、`math`、
   `gc` 这些名字定义新东西：这样的定义评分时被忽略。
4. 还没写完的练习，笔记本会先用包里的版本代替（打印“练习 N 还没完成：下面先用 … 代替”），
   所以后面的单元格照样能跑；这些题不得分。
5. 交的是这个 `.ipynb` 文件本身，文件名按老师的规定（例如 `学号_姓名.ipynb`）；输出不必清空。
"""


class AuthoringError(UserError):
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


def _drop_show_solution_text(src: str, where: str) -> str:
    """文字单元格：提到 show_solution 的行整行删掉（教师版把这种说明写在单独一行）。"""
    return "\n".join(x for x in src.split("\n") if "show_solution" not in x)


def _shows_answers(cell: nbformat.NotebookNode) -> bool:
    """练习单元格（含答案）、评分单元格（nbgrader 的 grade），或输出里有检查器的“正确 ✓”
    （例如章末的汇总表）：学生版网站去掉这些单元格的输出。"""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    text = "".join(o.get("text", "") for o in cell.get("outputs", []))
    return has_solution(cell.source) or bool(meta.get("grade")) or "正确 ✓" in text


def student_notebook(nb: nbformat.NotebookNode, name: str = "笔记本",
                     keep_outputs: bool = False) -> nbformat.NotebookNode:
    """返回学生版（不改动传入的笔记本）。

    ``keep_outputs=True``（学生版网站用）：练习、检查与汇总单元格的输出照样清空，其余单元格
    保留教师版的输出，让只读的网页仍有图和结果。"""
    nb = copy.deepcopy(nb)
    cells = []
    for idx, cell in enumerate(nb.cells):
        where = f"{name} 第 {idx + 1} 个单元格"
        if cell.cell_type == "code":
            clear = not keep_outputs or _shows_answers(cell)
            src = stub_source(cell.source, where)
            kept = [x for x in src.split("\n")
                    if not SHOW_SOLUTION.match(x) and x.strip() != NBVAL_MARK]
            if any("show_solution(" in x for x in kept):
                raise AuthoringError(f"{where}：show_solution 调用必须单独占一行")
            if not any(x.strip() and not x.strip().startswith("#") for x in kept):
                if any(SHOW_SOLUTION.match(x) for x in src.split("\n")):
                    continue                                           # 只剩注释：整格删掉
            cell.source = "\n".join(kept)
            if clear:
                cell.outputs, cell.execution_count = [], None
        elif cell.cell_type == "markdown":
            cell.source = _drop_show_solution_text(cell.source, where)
        if "show_solution" in cell.source:
            raise AuthoringError(f"{where}：学生版里还提到 show_solution")
        cells.append(cell)
    cells.append(nbformat.v4.new_markdown_cell(HOW_TO_SUBMIT, id="how-to-submit"))  # 固定 id
    nb.cells = cells
    return nb


class OutputError(ValueError):
    """输出目录不合适：会覆盖教师版，或里面已经有同名的文件。"""


def check_out_dir(inputs: list[Path], out: Path, targets: list[Path], force: bool = False) -> None:
    """``--out`` 不能包含输入的笔记本（那会覆盖或混进教师版）；已有要写的文件时不覆盖，
    除非 ``force``。``student`` 与 ``site`` 两个命令共用。"""
    out = Path(out).resolve()
    inside = [str(p) for p in inputs if out in Path(p).resolve().parents]
    if inside:
        raise OutputError(f"--out {out} 包含输入的笔记本（如 {inside[0]}），写进去会覆盖或混进"
                          "教师版；请换一个不包含 notebooks/ 的新目录")
    existing = [str(t) for t in targets if Path(t).exists()]
    if existing and not force:
        raise OutputError(f"{out} 里已经有 {len(existing)} 个要写的文件（如 {existing[0]}），"
                          "不覆盖；换一个空目录，或加 --force")


def write_student_edition(notebooks: list[Path], out: Path, force: bool = False) -> list[Path]:
    """把每个教师版笔记本的学生版写到 out/ 下（同名）。"""
    targets = [Path(out) / Path(p).name for p in notebooks]
    check_out_dir(notebooks, out, targets, force)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path, target in zip(notebooks, targets):
        nb = nbformat.read(path, as_version=4)
        nbformat.write(student_notebook(nb, path.name), target)
        written.append(target)
    return written
