"""学生版：没有答案、没有打印答案的办法，而且从头跑到尾没有一个错误。

- 静态的几条（快）：每个 ``### BEGIN SOLUTION`` 块、每个 ``solution_*`` 的函数体都不在学生版里；
  没有 ``show_solution``、没有 ``# NBVAL_CHECK_OUTPUT``；最后一格是“怎样提交”；
- 执行学生版（慢，标记 ``student_edition``，默认的 ``pytest`` 不跑，``.ci/run`` 单独一步跑）：
  快速模式下 0 个错误单元格，每个检查单元格恰好打印一次“还没完成”，
  “练习 N 还没完成：下面先用 … 代替”每个练习最多说一次。
"""
from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import re
import textwrap
from pathlib import Path

import nbformat
import pytest

import gptcourse as gc
from gptcourse.runtime import ROOT
from gptcourse_kit.classroom.student import BEGIN, END, HOW_TO_SUBMIT, student_notebook

NOTEBOOKS = sorted((ROOT / "notebooks").glob("0[1-5]_*.ipynb"))
CHAPTERS = sorted(m.name for m in pkgutil.iter_modules(gc.check.__path__)
                  if m.name.startswith("nb"))


def _significant(lines) -> list[str]:
    """去掉空行、注释和只有一个词的行（return x、pass），每行去掉首尾空白与行尾注释。"""
    out = []
    for line in lines:
        code = re.sub(r"\s+#.*$", "", line).strip()
        if code and not code.startswith("#") and len(code.split()) > 1:
            out.append(code)
    return out


def _code_text(nb) -> str:
    return "\n".join("\n".join(_significant(c.source.split("\n")))
                     for c in nb.cells if c.cell_type == "code")


def _solution_blocks(nb) -> list[list[str]]:
    blocks = []
    for cell in nb.cells:
        lines = cell.source.split("\n")
        starts = [i for i, x in enumerate(lines) if x.strip() == BEGIN]
        for i in starts:
            j = next(k for k in range(i, len(lines)) if lines[k].strip() == END)
            blocks.append(_significant(lines[i + 1:j]))
    return [b for b in blocks if b]


def _solution_bodies() -> dict[str, list[str]]:
    """每个 ``solution_*`` 的函数体（去掉 def 行与文档字符串）。check/ 里留下的 ``solution_*``
    只是学生版的代替品（包里没有同样的函数时）；参考答案本身只在教师版的答案单元格里。"""
    bodies = {}
    for mod in CHAPTERS:
        m = importlib.import_module(f"gptcourse.check.{mod}")
        for name, fn in vars(m).items():
            if name.startswith("solution_") and inspect.isfunction(fn) \
                    and fn.__module__ == m.__name__:
                src = textwrap.dedent(inspect.getsource(fn))
                body = re.sub(r'^def .*?:\n(\s+""".*?"""\n)?', "", src, count=1, flags=re.S)
                bodies[f"{mod}.{name}"] = _significant(body.split("\n"))
    return {k: v for k, v in bodies.items() if v}


def _contains(text: str, block: list[str]) -> bool:
    return "\n".join(block) in text


@pytest.fixture(scope="module")
def editions():
    return {p.name: (nbformat.read(p, as_version=4),
                     student_notebook(nbformat.read(p, as_version=4), p.name)) for p in NOTEBOOKS}


def test_the_comparison_finds_solutions_in_the_teacher_edition(editions):
    """对照：同样的比较在教师版里找得到每一个答案块（不然下面的测试不可能失败）。"""
    for name, (teacher, _) in editions.items():
        blocks = _solution_blocks(teacher)
        assert len(blocks) >= 8, name
        assert all(_contains(_code_text(teacher), b) for b in blocks), name
    assert len(_solution_bodies()) >= 5


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_student_edition_has_no_solution_code(path, editions):
    teacher, student = editions[path.name]
    text = _code_text(student)
    leaked = [b for b in _solution_blocks(teacher) if _contains(text, b)]
    assert not leaked, f"学生版里还有答案：{leaked[:3]}"
    leaked = [k for k, body in _solution_bodies().items()
              if len(body) >= 2 and _contains(text, body)]
    assert not leaked, f"学生版里有 solution_* 的代码：{leaked}"
    assert not any(BEGIN in c.source or END in c.source for c in student.cells)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_student_edition_mentions_no_show_solution_and_no_test_markers(path, editions):
    _, student = editions[path.name]
    for cell in student.cells:
        assert "show_solution" not in cell.source
        assert "NBVAL_CHECK_OUTPUT" not in cell.source
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
    assert student.cells[-1].cell_type == "markdown"
    assert student.cells[-1].source == HOW_TO_SUBMIT


def _outputs(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream")


@pytest.mark.student_edition
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_student_edition_runs_to_the_end(path, editions, monkeypatch):
    """快速模式执行学生版：0 个错误；每个检查单元格恰好一次“还没完成”；代替的说明每题一次。"""
    from nbclient import NotebookClient

    monkeypatch.setenv("GPTCOURSE_QUICK", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    _, student = editions[path.name]
    NotebookClient(student, timeout=600, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    errors = [(i, o["ename"], o["evalue"][:200]) for i, c in enumerate(student.cells)
              for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert errors == [], f"学生版里出错的单元格：{errors}"
    checks = [(i, c) for i, c in enumerate(student.cells) if c.cell_type == "code"
              and c.get("metadata", {}).get("nbgrader", {}).get("grade")]      # 评分单元格
    assert len(checks) >= 8
    for i, cell in checks:
        assert _outputs(cell).count("还没完成") == 1, (i, cell.source, _outputs(cell))
    text = "".join(_outputs(c) for c in student.cells)
    assert "还没完成：还没完成" not in text
    notes = re.findall(r"^(练习\S*(?: \S+)?) 还没完成：下面先用", text, flags=re.M)
    assert len(notes) == len(set(notes)), notes


# ---------------------------------------------------------------- mine / ready：存根时先用包里的
def _stub(ids):
    raise NotImplementedError("还没完成：数相邻的一对")


def _done(ids):
    return {"mine": len(ids)}


def _calls_stub(ids):                               # 写完了，但调用了另一个还没写的练习
    return _stub(ids)


def test_mine_falls_back_once_and_ready_skips_the_proof(capsys):
    from gptcourse.check import _common

    _common._NOTED.discard("练习 甲")
    fallback = gc.bpe.get_stats
    got = gc.check.mine(_stub, fallback=fallback, label="练习 甲")
    assert got([1, 2, 1, 2]) == {(1, 2): 2, (2, 1): 1}
    assert capsys.readouterr().out == "练习 甲 还没完成：下面先用 gc.bpe.get_stats 代替\n"
    gc.check.mine(_stub, fallback=fallback, label="练习 甲")([1])
    assert capsys.readouterr().out == ""                               # 只说一次
    assert gc.check.ready("练习 甲", got) is False                    # 代替品不能拿来证明
    assert "练习 甲 还没完成：这一格的证明先跳过" in capsys.readouterr().out
    assert gc.check.mine(_done, fallback=fallback, label="练习 乙")([1, 2]) == {"mine": 2}
    assert gc.check.ready("练习 乙", _done) is True and capsys.readouterr().out == ""
    _common._NOTED.discard("练习 丙")
    dynamic = gc.check.mine(_calls_stub, fallback=fallback, label="练习 丙")
    assert dynamic([3, 3]) == {(3, 3): 1} and "练习 丙 还没完成" in capsys.readouterr().out
    assert gc.check.ready("练习 丙", dynamic) is False
    assert gc.check.ready("练习 丁", None) is False                    # 顶层答案还是 None


def test_is_stub_sees_classes_and_decorated_functions():
    import torch

    class Stubbed:
        def forward(self, x):
            raise NotImplementedError("还没完成：嵌入 → 各块")

    class Written:
        def forward(self, x):
            if x is None:
                raise NotImplementedError("别的情况")          # 不是学生版的存根
            return x

    assert gc.check.is_stub(Stubbed) and not gc.check.is_stub(Written)
    assert gc.check.is_stub(torch.no_grad()(_stub)) and not gc.check.is_stub(torch.no_grad()(_done))
    standin = gc.check.mine(Stubbed, fallback=Written, label="练习 戊")
    assert issubclass(standin, Written) and gc.check.is_stub(standin())


# ---------------------------------------------------------------- --out 不能覆盖教师版
def _digest(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.ipynb"))}


@pytest.mark.parametrize("command", ["student", "site"])
def test_out_that_contains_the_teacher_notebooks_is_refused(command, capsys):
    from gptcourse_kit.classroom.__main__ import main

    before = _digest(ROOT / "notebooks")
    for out in (ROOT / "notebooks", ROOT):
        assert main([command, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "包含输入" in err, err
    assert _digest(ROOT / "notebooks") == before
    assert not (ROOT / "index.html").exists()


def test_existing_output_files_are_not_overwritten(tmp_path, capsys):
    from gptcourse_kit.classroom.__main__ import main

    assert main(["student", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    first = _digest(tmp_path)
    (tmp_path / "01_data_tokenizer.ipynb").write_text("我改过的作业", encoding="utf-8")
    assert main(["student", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "已经有 5 个要写的文件" in err and "--force" in err
    assert (tmp_path / "01_data_tokenizer.ipynb").read_text(encoding="utf-8") == "我改过的作业"
    assert main(["student", "--out", str(tmp_path), "--force"]) == 0
    assert _digest(tmp_path) == first
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("旧的主页", encoding="utf-8")
    assert main(["site", "--out", str(site)]) == 2
    assert "已经有 1 个要写的文件" in capsys.readouterr().err
    assert (site / "index.html").read_text(encoding="utf-8") == "旧的主页"


@pytest.mark.slow
def test_student_site_has_no_solution_code_and_no_checker_results(tmp_path, editions):
    """``site --edition student``（约 20 秒）：网页上没有答案块、没有 solution_* 的代码、
    没有检查器的“正确 ✓”；给定的代码和图照样在。"""
    import html

    from gptcourse_kit.classroom.site import build_site

    build_site(tmp_path, edition="student")
    for path in NOTEBOOKS:
        page = (tmp_path / f"{path.stem}.html").read_text(encoding="utf-8")
        text = "\n".join(_significant(html.unescape(re.sub(r"<[^>]+>", "", page)).split("\n")))
        teacher, _ = editions[path.name]
        leaked = [b for b in _solution_blocks(teacher) if _contains(text, b)]
        assert not leaked, (path.name, leaked[:3])
        assert not [k for k, body in _solution_bodies().items()
                    if len(body) >= 2 and _contains(text, body)]
        assert "正确 ✓\n" not in html.unescape(re.sub(r"<[^>]+>", "", page)), path.name
        assert "show_solution" not in page and "NBVAL_CHECK_OUTPUT" not in page
        assert "raise NotImplementedError" in text and "<img" in page      # 存根在，图也在


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_student_edition_names_no_path_of_the_authors_machine(path, editions):
    """issue 48 item 6：生成的学生版（源码与留下的输出）里不出现本机路径。"""
    from gptcourse_kit.notebooks import ABS_PATH_RE
    _, student = editions[path.name]
    for i, cell in enumerate(student.cells):
        text = cell.source + "".join(_outputs(cell) for _ in [0] if cell.cell_type == "code")
        m = ABS_PATH_RE.search(text)
        assert m is None, f"{path.name} 单元格 {i}：{m.group()}"


@pytest.mark.parametrize("command, target", [("student", "01_data_tokenizer.ipynb"),
                                             ("site", "index.html"), ("handout", "answers.html")])
def test_a_link_in_out_is_never_written_through(tmp_path, capsys, command, target):
    """R3（C01、C02、C34、C37）：--out 里的符号链接——悬空的（指向 --out 之外）或指向教师版
    的，加不加 --force——都不顺着写：一行错误，链接指向的地方什么都没写。"""
    from gptcourse_kit.classroom.__main__ import main

    out, elsewhere = tmp_path / "out", tmp_path / "shared"
    out.mkdir()
    elsewhere.mkdir()
    (out / target).symlink_to(elsewhere / "leak")
    for extra in ([], ["--force"]):
        assert main([command, "--out", str(out), *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "符号链接" in err, err
    assert list(elsewhere.iterdir()) == []


def test_two_inputs_with_one_name_are_refused(tmp_path, capsys):
    """R4（C09）：两个班的同一章（同名）一起生成——后写的会悄悄吃掉先写的：拒绝。"""
    from gptcourse_kit.classroom.__main__ import main

    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "01_data_tokenizer.ipynb").write_bytes(
            (ROOT / "notebooks" / "01_data_tokenizer.ipynb").read_bytes())
    assert main(["student", "--out", str(tmp_path / "o"),
                 *(str(tmp_path / d / "01_data_tokenizer.ipynb") for d in "ab")]) == 2
    assert "重名" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("broken", [
    '{"metadata": {}, "nbformat": 4, "nbformat_minor": 5}',                       # 没有 cells
    '{"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": null}],'
    ' "metadata": {}, "nbformat": 4, "nbformat_minor": 4}',                        # 缺 source
])
def test_a_malformed_notebook_is_one_line(tmp_path, capsys, broken):
    """R9（C06、C07）：坏的笔记本交给 student——一行说出是哪个文件，不是 jsonschema 的堆栈。"""
    from gptcourse_kit.classroom.__main__ import main

    (tmp_path / "01_bad.ipynb").write_text(broken, encoding="utf-8")
    assert main(["student", "--out", str(tmp_path / "o"), str(tmp_path / "01_bad.ipynb")]) == 2
    err = capsys.readouterr().err
    assert "01_bad.ipynb 不是一个完好的笔记本" in err and err.count("\n") == 1, err
