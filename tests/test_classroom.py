"""课堂工具：学生版、自动评分（满分 / 零分 / 部分）、网站。"""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from gptcourse.classroom.__main__ import main
from gptcourse.classroom.student import AuthoringError, stub_source, student_notebook


def _meta(grade_id, solution):
    return {"nbgrader": {"solution": solution, "grade": not solution, "locked": not solution,
                         "grade_id": grade_id, "schema_version": 3,
                         **({} if solution else {"points": 1})}}


SOLVED_PAIRS = '''def count_pairs(ids):
    # 提示：数相邻的一对 (ids[i], ids[i+1])
    ### BEGIN SOLUTION
    counts = {}
    for pair in zip(ids, ids[1:]):
        counts[pair] = counts.get(pair, 0) + 1
    return counts
    ### END SOLUTION'''
SOLVED_MERGE = '''def merge_pair(ids, pair, idx):
    # 提示：从左到右扫描，遇到 pair 就换成 idx 并跳过两个
    ### BEGIN SOLUTION
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
            out.append(idx)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out
    ### END SOLUTION'''


def teacher_nb():
    """一份小小的“教师版”：两道 01 章的练习，外加一个顶层的预测题和一行 show_solution。"""
    return new_notebook(cells=[
        new_markdown_cell("# 练习"),
        new_code_cell("import gptcourse as gc\nguess_vocab = None"),
        new_code_cell(SOLVED_PAIRS, metadata=_meta("nb01-count_pairs", True)),
        new_code_cell("gc.check.nb01.count_pairs(count_pairs);",
                      metadata=_meta("nb01-count_pairs-check", False)),
        new_code_cell(SOLVED_MERGE, metadata=_meta("nb01-merge_pair", True)),
        new_code_cell("gc.check.nb01.merge_pair(merge_pair);",
                      metadata=_meta("nb01-merge_pair-check", False)),
        new_code_cell("# 先猜一猜\n### BEGIN SOLUTION\nguess = 3\n### END SOLUTION"),
        new_code_cell("gc.check.show_solution(\"merge_pair\")"),
    ])


def test_stub_source_replaces_function_bodies_and_top_level_answers():
    stub = stub_source(SOLVED_PAIRS)
    assert "counts" not in stub and "BEGIN SOLUTION" not in stub
    assert "raise NotImplementedError('还没完成：数相邻的一对 (ids[i], ids[i+1])')" in stub
    assert stub_source("### BEGIN SOLUTION\na = 1\nb: int = 2\n### END SOLUTION") == \
        "a = None  # 在这里填写你的答案\nb = None  # 在这里填写你的答案"
    with pytest.raises(AuthoringError, match="配对"):
        stub_source("def f():\n    ### BEGIN SOLUTION\n    return 1")
    with pytest.raises(AuthoringError, match="赋值"):
        stub_source("### BEGIN SOLUTION\nprint(1)\n### END SOLUTION")


def test_student_edition_keeps_everything_else():
    nb = teacher_nb()
    nb.cells[3].outputs = [nbformat.v4.new_output("stream", text="正确 ✓\n")]
    nb.cells[3].execution_count = 3
    st = student_notebook(nb)
    assert len(st.cells) == len(nb.cells)             # show_solution 那格删掉，末尾加“怎样提交”
    assert st.cells[-1].source.startswith("## 怎样提交")
    assert all("show_solution" not in c.source for c in st.cells)
    assert all(not c.get("outputs") and c.get("execution_count") is None
               for c in st.cells if c.cell_type == "code")
    assert st.cells[2].metadata == nb.cells[2].metadata            # nbgrader 元数据保留
    assert st.cells[3].source == nb.cells[3].source                # 评分单元格原样
    assert nb.cells[2].source == SOLVED_PAIRS                      # 原笔记本不变


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """一个班：教师版、未动的学生版、做了一题而另一题死循环的、坏掉的文件——用命令行一次评完。"""
    d = tmp_path_factory.mktemp("class")
    partial = student_notebook(teacher_nb())
    partial.cells[2].source = SOLVED_PAIRS                                  # 第一题做对了
    partial.cells[4].source = "def merge_pair(ids, pair, idx):\n    while True:\n        pass"
    for name, nb in [("teacher", teacher_nb()), ("student", student_notebook(teacher_nb())),
                     ("partial", partial)]:
        nbformat.write(nb, d / f"{name}_01.ipynb")
    (d / "broken_01.ipynb").write_text("{ not json", encoding="utf-8")
    paths = [str(d / f"{n}_01.ipynb") for n in ("teacher", "student", "partial", "broken")]
    rc = main(["grade", *paths, "--json", str(d / "g.json"), "--csv", str(d / "g.csv"),
               "--timeout", "300", "--cell-timeout", "20"])
    assert rc == 0
    data = json.loads((d / "g.json").read_text(encoding="utf-8"))
    return {Path(r["notebook"]).stem: r for r in data}, d


def test_grading_full_zero_partial_and_crashes(graded):
    subs, d = graded
    names = [e["exercise"] for e in subs["teacher_01"]["exercises"]]
    assert names[:2] == ["build_vocab", "count_pairs"]            # 整章的练习表，没做的也算
    passed = {k: {e["exercise"]: e["passed"] for e in s["exercises"]} for k, s in subs.items()}
    assert passed["teacher_01"]["count_pairs"] and passed["teacher_01"]["merge_pair"]
    assert not any(passed["student_01"].values())
    # 死循环只让那一题得 0 分：单元格被中断，后面照常运行
    assert passed["partial_01"]["count_pairs"] and not passed["partial_01"]["merge_pair"]
    score = {k: s["score"] for k, s in subs.items()}
    assert score["teacher_01"] > score["partial_01"] > score["student_01"] == 0
    msg = {e["exercise"]: e for e in subs["student_01"]["exercises"]}
    assert msg["count_pairs"]["message"].startswith("还没完成")
    ok = {e["exercise"]: e for e in subs["teacher_01"]["exercises"]}
    assert ok["count_pairs"] == {"exercise": "count_pairs", "passed": True, "message": "正确"}
    assert score["broken_01"] == 0 and "读不了" in subs["broken_01"]["error"]
    assert (d / "g.csv").read_text(encoding="utf-8").startswith("student,notebook,chapter")


def test_cli_errors_are_one_line_exit_2(tmp_path, capsys):
    assert main(["grade", str(tmp_path / "nope.ipynb")]) == 2
    assert "找不到作业" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["grade", "x.ipynb", "--timeout", "-1"])
    assert e.value.code == 2


def test_student_command_on_the_course_notebooks(tmp_path):
    assert main(["student", "--out", str(tmp_path)]) == 0
    written = sorted(p.name for p in tmp_path.glob("*.ipynb"))
    assert written == ["01_data_tokenizer.ipynb", "02_attention_mask.ipynb",
                       "03_training_loop.ipynb", "04_evaluation.ipynb", "05_inference.ipynb"]
    for p in tmp_path.glob("*.ipynb"):
        nb = nbformat.read(p, as_version=4)
        text = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        assert "BEGIN SOLUTION" not in text and "show_solution(" not in text
