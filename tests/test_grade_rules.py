"""评分规则里学生和老师看得到的几条（评审 M1、M3、M4、L1）：

- M3：学生自己加的单元格里的定义也算（辅助函数、模块级的 ``re.compile``），直接执行的语句不算；
- M4：用到一道超时练习的另一道题记“依赖的练习 X 超时”，不是“未作答”；
- L1：``--cell-timeout`` 只计学生的代码：老师的演示单元格再慢也不超时；演示单元格出错记进备注；
- M1：沙箱里看不到老师的当前目录（``python -m`` 时它在 sys.path[0] 上），说明里不带出绝对路径。
"""
from __future__ import annotations

import json
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell
from test_classroom import SOLVED_MERGE, SOLVED_PAIRS, teacher_nb
from test_grade_chapters import _require_sandbox

from gptcourse_kit.classroom.__main__ import main
from gptcourse_kit.classroom.student import student_notebook

CELL_TIMEOUT = 3
SECRET = "SECRET-LAST-WEEK-4711"

HELPER_CELL = '''import re
SEP = re.compile(r"\\s+")


def _pairs(ids):
    counts = {}
    for pair in zip(ids, ids[1:]):
        counts[pair] = counts.get(pair, 0) + 1
    return counts


print("试一试", _pairs([1, 2, 1, 2]))'''
NATURAL_PAIRS = '''def count_pairs(ids):
    assert SEP.split("a b") == ["a", "b"]
    return _pairs(ids)'''
ENDLESS_PAIRS = "def count_pairs(ids):\n    while True:\n        pass"
DEPENDENT_MERGE = SOLVED_MERGE.replace("    out, i = [], 0",
                                       "    count_pairs(ids)\n    out, i = [], 0")


def reference_nb():
    """教师版：两道题之后三个演示单元格——一个比 cell-timeout 慢的老师代码、一个出错的、一个调用
    学生的 merge_pair。"""
    nb = teacher_nb()
    nb.cells += [new_code_cell(f"import time\ntime.sleep({CELL_TIMEOUT + 2})"),
                 new_code_cell("1 / 0"),
                 new_code_cell("print(merge_pair([1, 2, 1, 2], (1, 2), 9))")]
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    _require_sandbox()
    teacher = tmp_path_factory.mktemp("老师的课程文件夹")
    (teacher / "上周成绩册.csv").write_text(f"学号,姓名,总分 {SECRET}\n", encoding="utf-8")
    secret = teacher / "上周成绩册.csv"
    hw = tmp_path_factory.mktemp("作业")
    ref = tmp_path_factory.mktemp("ref")
    nbformat.write(reference_nb(), ref / "01_tiny.ipynb")

    natural = student_notebook(teacher_nb())
    natural.cells[2].source = NATURAL_PAIRS
    natural.cells.insert(3, new_code_cell(HELPER_CELL))           # 自己加的单元格，在检查之前
    natural.cells[5].source = SOLVED_MERGE

    snoop = student_notebook(teacher_nb())
    snoop.cells[2].source = SOLVED_PAIRS.replace(
        "    counts = {}",
        f"    try:\n        open({str(secret)!r}).read()\n        return {{}}\n"
        "    except OSError:\n        pass\n    counts = {}")
    snoop.cells[4].source = ("def merge_pair(ids, pair, idx):\n"
                             f"    return open({str(secret)!r}).read()")

    dependent = student_notebook(teacher_nb())
    dependent.cells[2].source = ENDLESS_PAIRS
    dependent.cells[4].source = DEPENDENT_MERGE

    for name, nb in {"2024001_自然": natural, "2024002_窥探": snoop,
                     "2024003_依赖": dependent}.items():
        nbformat.write(nb, hw / f"{name}.ipynb")
    with pytest.MonkeyPatch.context() as mp:          # 老师在自己的课程文件夹里 python -m 评分
        mp.chdir(teacher)
        mp.syspath_prepend(str(teacher))
        assert str(teacher) in sys.path
        rc = main(["grade", *map(str, sorted(hw.glob("*.ipynb"))), "--reference", str(ref),
                   "--json", str(teacher / "g.json"), "--jobs", "2",
                   "--cell-timeout", str(CELL_TIMEOUT), "--timeout", "120"])
    assert rc == 0
    rows = json.loads((teacher / "g.json").read_text(encoding="utf-8"))
    return {r["name"]: r for r in rows}, teacher


def _status(r):
    return {e["exercise"]: e["status"] for e in r["exercises"]}


def test_definitions_from_the_students_own_cells_count(graded):
    """M3：辅助函数和 ``SEP = re.compile(…)`` 写在自己加的单元格里：满分（以前 16/20）；
    那个单元格里的 print 不执行，备注里说一声。"""
    r = graded[0]["自然"]
    assert _status(r) == {"count_pairs": "正确", "merge_pair": "正确"}, r
    assert "你加的单元格：忽略了 1 条直接执行的语句（评分只采用定义）" in r["notes"]


def test_a_slow_teacher_cell_is_not_a_timeout_and_an_erroring_one_is_a_note(graded):
    """L1：比 --cell-timeout 慢的老师代码照常跑完（不是学生的代码，不计时）；出错的演示单元格
    不影响分数，记进备注。"""
    r = graded[0]["自然"]
    errors = [n for n in r["notes"] if "出错（ZeroDivisionError）" in n]
    assert len(errors) == 1 and errors[0].startswith("教师版第"), r["notes"]
    assert not any("超过" in n for n in r["notes"]), r["notes"]


def test_an_exercise_that_depends_on_a_timed_out_one_says_so(graded):
    """M4：count_pairs 死循环；调用它的 merge_pair 记“超时：依赖的练习 count_pairs 超时”，
    不是“未作答”。"""
    r = graded[0]["依赖"]
    assert _status(r) == {"count_pairs": "超时", "merge_pair": "超时"}, r
    msg = {e["exercise"]: e["message"] for e in r["exercises"]}
    assert msg["count_pairs"].startswith(f"超时：运行超过 {CELL_TIMEOUT} 秒")
    assert msg["merge_pair"].startswith("超时：依赖的练习 count_pairs 超时"), msg


def test_the_teachers_working_directory_is_not_in_the_sandbox(graded):
    """M1：作业读不到老师当前目录里的旧成绩册（以前读得到）；说明里的绝对路径换成 <路径>。"""
    by, teacher = graded
    r = by["窥探"]
    assert _status(r) == {"count_pairs": "正确", "merge_pair": "出错"}, r
    msg = {e["exercise"]: e["message"] for e in r["exercises"]}["merge_pair"]
    assert "FileNotFoundError" in msg and "<路径>" in msg, msg
    assert SECRET not in json.dumps(by, ensure_ascii=False)
    assert str(teacher) not in msg


def test_the_grader_scores_the_first_committed_letter():
    """issue 33：学员先交了 B，看了测量改成对的 A；检查单元格的输出里记着“第一次作答：B”，
    评分按 B 判，备注里说明。没有这一句（或字母没改）时按单元格里的答案判。"""
    from gptcourse_kit.classroom.grade import REFERENCE, build_spec
    teacher = nbformat.read(sorted(REFERENCE.glob("01_*.ipynb"))[0], as_version=4)
    sub = student_notebook(teacher)
    answer = next(c for c in sub.cells
                  if c.metadata.get("nbgrader", {}).get("grade_id") == "nb01-guess_compression")
    check = next(c for c in sub.cells if c.metadata.get("nbgrader", {}).get("grade_id")
                 == "nb01-guess_compression-check")
    answer.source = 'guess_compression = "A"'

    def graded_source(spec):
        return next(c["source"] for c in spec["cells"]
                    if c["kind"] == "solution" and c["exercise"] == "guess_compression")

    spec, notes = build_spec(teacher, sub, "nb01", 60)
    assert graded_source(spec) == "guess_compression = 'A'" and notes == []
    check.outputs = [nbformat.v4.new_output("stream", text=(
        "（第一次作答：B，已记下；评分按第一次作答）\n你把答案改成了 A；…\n正确 ✓\n"))]
    spec, notes = build_spec(teacher, sub, "nb01", 60)
    assert graded_source(spec) == "guess_compression = 'B'"
    assert notes == ["练习 guess_compression：按第一次作答 B 评分（后来改成了 A）"]
    check.outputs[0].text = "（第一次作答：A，已记下；评分按第一次作答）\n正确 ✓\n"
    assert graded_source(build_spec(teacher, sub, "nb01", 60)[0]) == "guess_compression = 'A'"
