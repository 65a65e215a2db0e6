"""评分五个真实的章节：每道练习都能得分（教师版 = 满分），学生版原样交上来 = 0 分。

评审 H1：04 ``slow_token_losses``、05 ``top_p``、05 ``kv_cache_bytes`` 的答案单元格曾经没有
nbgrader 元数据，评分时拿到的是存根，谁也得不了这几分；当时的测试只评一个两道题的小笔记本。
"""
from __future__ import annotations

import copy
import json
import os
import sys

import nbformat
import pytest

from gptcourse_kit.classroom import sandbox
from gptcourse_kit.classroom.__main__ import main
from gptcourse_kit.classroom.grade import (
    GRADE_ID,
    IN_SANDBOX,
    REFERENCE,
    GradingError,
    build_spec,
    exercise_names,
    is_blank,
    validate_reference,
)
from gptcourse_kit.classroom.student import student_notebook

CHAPTERS = {p.name[:2]: p for p in sorted(REFERENCE.glob("0[1-5]_*.ipynb"))}


def _check_ids(nb) -> list[str]:
    meta = [c.get("metadata", {}).get("nbgrader", {}) for c in nb.cells]
    return [m["grade_id"] for m in meta
            if m.get("grade") and not m.get("solution") and GRADE_ID.match(m["grade_id"])]


@pytest.mark.parametrize("num", sorted(CHAPTERS))
def test_every_check_of_the_teacher_edition_has_its_answer_cell(num):
    """教师版交给自己评：每个检查单元格都有答案单元格，拼出来的答案是老师的答案而不是存根，
    评的练习正好是这一章 EXERCISES 里的全部。"""
    nb = nbformat.read(CHAPTERS[num], as_version=4)
    chapter = f"nb{num}"
    validate_reference(nb)
    spec, notes = build_spec(nb, nb, chapter, 60)
    assert notes == []
    assert sorted(spec["exercises"]) == sorted(exercise_names(chapter))
    solutions = [c for c in spec["cells"] if c["kind"] == "solution"]
    checked = {c["exercise"] for c in spec["cells"] if c["kind"] == "check"}
    assert checked <= {c["exercise"] for c in solutions}
    stubs = [c["exercise"] for c in solutions if "还没完成" in c["source"]]
    assert stubs == []                              # 评分用的是老师写的答案
    assert len(_check_ids(nb)) == len(spec["exercises"])


@pytest.mark.parametrize("gid", ["nb04-slow-token-losses", "nb05-top-p", "nb05-kv-cache-bytes"])
def test_an_answer_cell_without_nbgrader_metadata_is_refused(gid):
    """去掉答案单元格的 nbgrader 元数据（H1 的原样）：build_spec 报 GradingError，
    不再悄悄用存根。"""
    nb = nbformat.read(CHAPTERS[gid[2:4]], as_version=4)
    broken = copy.deepcopy(nb)
    cell = next(c for c in broken.cells
                if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == gid)
    del cell.metadata["nbgrader"]
    with pytest.raises(GradingError, match="没有 nbgrader 的 solution 元数据"):
        build_spec(broken, broken, f"nb{gid[2:4]}", 60)
    cell.source = "def f():\n    pass"                  # 连答案标记也没有：检查找不到答案
    with pytest.raises(GradingError, match=f"找不到它的答案单元格 {gid}"):
        validate_reference(broken)


@pytest.mark.parametrize("num", sorted(CHAPTERS))
def test_the_untouched_student_edition_is_blank(num):
    nb = nbformat.read(CHAPTERS[num], as_version=4)
    assert is_blank(student_notebook(nb), nb)
    assert not is_blank(nb, nb)


def _require_sandbox() -> None:
    why = sandbox.probe()
    if why is None:
        return
    if os.environ.get("CI") == "true" and sys.platform.startswith("linux"):
        pytest.fail(f"CI 上必须能用沙箱（.ci/run 会安装 bubblewrap）：{why}")
    pytest.skip(f"本机没有可用的沙箱：{why}")


@pytest.mark.full_grading
def test_each_teacher_edition_scores_full_marks_and_each_student_edition_zero(tmp_path):
    """五章的教师版当作作业交上来：每道题都“正确”；原样的学生版：每道题都“未作答”、0 分。
    一个班 10 份，``--jobs 2``（学生版一个字没写，不必运行）。

    评分在沙箱里把五本教师版各重跑一遍（快速模式），而默认的 ``pytest`` 里 nbval 已经执行过它们；
    所以它标记 ``full_grading``，不在默认命令里，由 ``.ci/run`` 的第二步（与学生版同一步）跑。"""
    _require_sandbox()
    paths = []
    for num, path in CHAPTERS.items():
        nb = nbformat.read(path, as_version=4)
        nbformat.write(nb, tmp_path / f"20240{num}_教师{num}.ipynb")
        nbformat.write(student_notebook(nb), tmp_path / f"20249{num}_学生{num}.ipynb")
        paths += [tmp_path / f"20240{num}_教师{num}.ipynb",
                  tmp_path / f"20249{num}_学生{num}.ipynb"]
    assert main(["grade", *map(str, paths), "--json", str(tmp_path / "g.json"),
                 "--jobs", "2"]) == 0
    rows = {r["student"]: r for r in json.loads((tmp_path / "g.json").read_text("utf-8"))}
    for num in CHAPTERS:
        teacher, student = rows[f"20240{num}"], rows[f"20249{num}"]
        names = exercise_names(f"nb{num}")
        assert [e["exercise"] for e in teacher["exercises"]] == names
        wrong = {e["exercise"]: e["message"] for e in teacher["exercises"] if not e["passed"]}
        assert wrong == {} and teacher["error"] is None, (num, wrong, teacher.get("judge_log"))
        assert teacher["score"] == teacher["total"] == len(names)
        # 只有 IN_SANDBOX 的题在沙箱里与学生的代码同进程判，其余都由沙箱外的裁判进程判
        judged = {e["exercise"]: e["judged"] for e in teacher["exercises"]}
        assert judged == {n: "in-process" if n in IN_SANDBOX.get(f"nb{num}", ()) else "referee"
                          for n in names}, (num, judged)
        assert student["score"] == 0 and student["total"] == len(names)
        assert {e["status"] for e in student["exercises"]} == {"未作答"}


def test_in_sandbox_names_real_exercises_and_the_guide_lists_them():
    """IN_SANDBOX（判决标 in-process 的题）里每个名字都是那一章的练习；教师指南逐个列出它们。"""
    from gptcourse.runtime import ROOT
    guide = (ROOT / "docs" / "teaching_guide.md").read_text(encoding="utf-8")
    section = guide[guide.index("**伪造成绩：保证什么"):guide.index("没有 bubblewrap 的系统")]
    for chapter, names in IN_SANDBOX.items():
        known = set(exercise_names(chapter))
        assert names <= known, (chapter, names - known)
        for name in names:
            assert f"`{name}`" in section, name
    assert set(IN_SANDBOX) <= {f"nb{n}" for n in CHAPTERS}


def test_the_guides_points_table_comes_from_exercises():
    """教师指南“作业与分值”的表与五章的 EXERCISES 一致（以前 04、05 各少两三题）。"""
    from gptcourse.runtime import ROOT
    from gptcourse_kit.classroom.gradebook import points_table
    guide = (ROOT / "docs" / "teaching_guide.md").read_text(encoding="utf-8")
    table = points_table()
    assert table in guide
    assert "| 04 |" in table and "slow_token_losses" in table and "| 21 |" in table
    assert "top_p" in table and "kv_cache_bytes" in table and "| 22 |" in table


def test_the_answer_handout_has_every_exercise():
    """答案讲义（handout）每章的练习数 = 检查单元格数（以前少了同样的三道题）。"""
    from gptcourse_kit.classroom.slides import exercises
    for num, path in CHAPTERS.items():
        nb = nbformat.read(path, as_version=4)
        found = {e["id"] for e in exercises(nb)}
        checks = {g.removesuffix("-check") for g in _check_ids(nb)}
        assert checks <= found, (num, checks - found)


def test_ci_runs_every_marker_the_default_command_leaves_out():
    """默认的 ``pytest`` 排除的标记（``full_grading`` 整本评分、``student_edition``）都在
    ``.ci/run`` 的第二步里跑；只有 ``fallback_audit``（几十次整本执行）是手动跑的。"""
    import re
    import shlex

    from gptcourse.runtime import ROOT
    toml = (ROOT / "pyproject.toml").read_text("utf-8")      # Python 3.10 还没有 tomllib
    args = shlex.split(re.search(r'^addopts = "(.*)"$', toml, re.M).group(1))
    left_out = set(re.findall(r"not (\w+)", args[args.index("-m") + 1]))
    assert {"full_grading", "student_edition", "fallback_audit"} <= left_out
    run = (ROOT / ".ci" / "run").read_text("utf-8")
    steps = [shlex.split(line) for line in run.splitlines() if line.startswith("pytest -m ")]
    in_ci = {m for s in steps for m in re.findall(r"\w+", s[2]) if m not in ("or", "and", "not")}
    assert left_out - in_ci == {"fallback_audit"}, in_ci
