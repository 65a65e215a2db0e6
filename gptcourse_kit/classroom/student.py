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
import subprocess
import zipfile
from pathlib import Path

import nbformat

from gptcourse import files
from gptcourse.errors import UserError

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
4. **预测题（填一个字母）先猜后看**：第一次运行检查时交的字母就记下了（检查单元格打印
   “第一次作答：…”，也记在笔记本旁边的 `.gptcourse-第一次作答.json` 里，重启内核也不变），
   评分按这个字母计分；看了实验结果再改答案不再计分。
5. 还没写完的练习，笔记本会先用包里的版本代替（打印“练习 N 还没完成：下面先用 … 代替”），
   所以后面的单元格照样能跑；这些题不得分。
6. 交的是这个 `.ipynb` 文件本身，文件名按老师的规定（例如 `学号_姓名.ipynb`）；输出不必清空。
"""


# 学生版笔记本的输出是清空的，教师版开头那句“提交的输出来自一次完整模式的运行”就不对了
STALE_OUTPUT_NOTE = re.compile(r"\s*（提交的输出来自一次完整模式的运行）")
# 学生版网站：证明单元格（``gc.check.ready`` / ``gc.check.mine``）里教师版打印的
# “你的……✓”不能留在存根下面——学生会以为那是自己的代码通过了
YOURS_PASSED = re.compile(r"(你的|你写的|手写).*(✓|True|==)")
YOURS_NOTE = "（教师版在这里证明“你的代码 == 包”；写完练习，在你自己的笔记本里运行才会看到）\n"


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


def _drop_teacher_proofs(cell: nbformat.NotebookNode) -> None:
    """学生版网站：调用学员代码的单元格，去掉输出里说“你的……✓”的行（见 YOURS_PASSED）。"""
    if "check.ready(" not in cell.source and "check.mine(" not in cell.source:
        return
    for out in cell.get("outputs", []):
        if out.get("output_type") != "stream":
            continue
        lines = out["text"].split("\n")
        kept = [x for x in lines if not YOURS_PASSED.search(x)]
        if len(kept) != len(lines):
            text = "\n".join(kept).strip("\n")
            out["text"] = (text + "\n" if text else "") + YOURS_NOTE


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
            else:
                _drop_teacher_proofs(cell)
        elif cell.cell_type == "markdown":
            cell.source = _drop_show_solution_text(cell.source, where)
            if not keep_outputs:
                cell.source = STALE_OUTPUT_NOTE.sub("", cell.source)
        if "show_solution" in cell.source:
            raise AuthoringError(f"{where}：学生版里还提到 show_solution")
        cells.append(cell)
    cells.append(nbformat.v4.new_markdown_cell(HOW_TO_SUBMIT, id="how-to-submit"))  # 固定 id
    nb.cells = cells
    return nb


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """读一个笔记本并按 nbformat 的规范检查；坏的（不是 JSON、没有 cells、代码单元格缺 source……）
    → ValueError，一句话说出是哪个文件、哪里不对（不是 jsonschema 的堆栈）。"""
    try:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
    except (nbformat.ValidationError, AttributeError, KeyError, TypeError, ValueError) as e:
        first = (str(getattr(e, "message", None) or e).strip().splitlines() or ["?"])[0][:160]
        raise ValueError(f"{Path(path).name} 不是一个完好的笔记本：{first}") from None
    return nb


def notebook_text(nb: nbformat.NotebookNode) -> str:
    """笔记本 → 写进文件的文字（与 ``nbformat.write`` 相同，以换行结尾）。"""
    text = nbformat.writes(nb)
    return text if text.endswith("\n") else text + "\n"


def write_student_edition(notebooks: list[Path], out: Path, force: bool = False) -> list[Path]:
    """把每个教师版笔记本的学生版写到 out/ 下（同名）。规则见 :mod:`gptcourse.files`：out 不
    包含输入，不重名，不顺着链接写，已有的不覆盖（除非 ``force``），每个文件原子地写。"""
    out = Path(out)
    targets = [out / Path(p).name for p in notebooks]
    files.check_folder(out, targets, inputs=notebooks, force=force)
    files.make_folder(out)
    for path, target in zip(notebooks, targets):
        nb = read_notebook(path)
        files.write_text(target, notebook_text(student_notebook(nb, path.name)),
                         inputs=notebooks, within=out)
    return targets


# ---------------------------------------------------------------- 学生包
BUNDLE = "gptcourse-学生版"
INSTALL_NOTE = """# 学生包：从零构建一个会写唐诗的 GPT

这个压缩包是课程的**学生版**：`notebooks/` 下是五章笔记本（练习是存根，输出已清空），
旁边是运行它们需要的 `gptcourse` 包、语料和课程检查点（`data/`）。语料、字体、检查点都在包里，
除了第 2 步安装 PyTorch 等依赖，不需要联网，也不需要 GPU。

## 安装（一次）

1. 解压，进入解压出来的 `{bundle}/` 目录。
2. 建一个虚拟环境：`python -m venv .venv`，然后 Linux/macOS 执行 `source .venv/bin/activate`，
   Windows 执行 `.venv\\Scripts\\activate`（需要 Python ≥ 3.10，推荐 3.11）。
3. 安装课程：`pip install "torch==2.13.0" -e ".[dev]"`
   （用 conda 的话：`conda env create -f environment.yml && conda activate gptcourse`）。
4. 检查：`python -m gptcourse generate --seed 0` 写出一首诗，就装好了。

## 做题

- `jupyter lab notebooks/`，从 01 开始。每个练习下面的检查单元格会当场告诉你对不对；
  还没写完的练习，后面的单元格先用包里的版本代替，所以笔记本总能从头跑到尾。
- 想跑得快一点：`GPTCOURSE_QUICK=1 jupyter lab notebooks/`（训练与采样缩短）。
- 交作业：见每章最后的“怎样提交”（文件名按老师的规定，例如 `学号_姓名.ipynb`）。

包里的 `gptcourse/` 源码就是参考实现——课程的设计是每章最后证明你写的与包里的完全一致；
计分看的是你自己写出并通过检查的代码。
"""
# 学生包里除了学生版笔记本，还有运行它们要的东西（包、语料、检查点）；不带测试、教师指南和脚本
BUNDLE_PARTS = ("gptcourse/", "data/", "pyproject.toml", "README.md", "environment.yml",
                "docs/glossary.md")


def _course_files(root: Path) -> list[str]:
    """仓库里要进学生包的文件（相对路径）：git 跟踪的文件；不是 git 仓库时按目录找。"""
    try:
        listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True,
                                check=True, timeout=60).stdout.decode("utf-8").split("\0")
    except (OSError, subprocess.SubprocessError):
        listed = [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()]
    keep = [f for f in listed if f and f.startswith(BUNDLE_PARTS) and "__pycache__" not in f
            and not f.endswith(".pyc")]
    return sorted(f for f in keep if (root / f).is_file())


def write_bundle(notebooks: list[Path], out: Path, force: bool = False) -> Path:
    """学生包 ``out/学生版.zip``：学生版笔记本（``notebooks/``）、``安装说明.md``，以及运行它们要的
    ``gptcourse`` 包、``data/``、``pyproject.toml``——解压后 ``pip install -e .`` 就能用，
    没有教师版的 ``notebooks/``。"""
    from gptcourse.runtime import ROOT

    target = Path(out) / "学生版.zip"
    files.check_folder(out, [target], inputs=notebooks, force=force)
    with files.replacing(target, "wb", inputs=notebooks, within=files.make_folder(out)) as f, \
            zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as z:
        z.writestr(f"{BUNDLE}/安装说明.md", INSTALL_NOTE.format(bundle=BUNDLE))
        for path in notebooks:
            nb = student_notebook(read_notebook(path), Path(path).name)
            z.writestr(f"{BUNDLE}/notebooks/{Path(path).name}", nbformat.writes(nb))
        for rel in _course_files(ROOT):
            binary = rel.endswith((".pt", ".otf", ".woff2", ".png", ".gz", ".zip"))
            z.write(ROOT / rel, f"{BUNDLE}/{rel}",
                    compress_type=zipfile.ZIP_STORED if binary else zipfile.ZIP_DEFLATED)
    return target
