"""课堂工具的小事：学生版里没有过时的话、学生版网站上没有教师版的“你的……✓”、学生包能用。"""
from __future__ import annotations

import re
import subprocess
import sys
import zipfile

import nbformat

from gptcourse_kit.classroom.__main__ import main
from gptcourse_kit.classroom.site import chapters
from gptcourse_kit.classroom.student import BUNDLE, YOURS_PASSED, student_notebook


def test_student_edition_drops_the_stale_outputs_sentence():
    for path in chapters()[:2]:
        teacher = nbformat.read(path, as_version=4)
        assert "提交的输出来自一次完整模式的运行" in teacher.cells[0].source   # 教师版里有这句
        student = student_notebook(teacher, path.name)
        assert "提交的输出来自" not in student.cells[0].source
        assert "实际用时" in student.cells[0].source                      # 句子的其余部分还在
        site = student_notebook(teacher, path.name, keep_outputs=True)  # 网站保留输出：这句是对的
        assert "提交的输出来自一次完整模式的运行" in site.cells[0].source


def test_student_site_shows_no_teacher_proofs_under_stubs():
    found = 0
    for path in chapters():
        teacher = nbformat.read(path, as_version=4)
        for cell in teacher.cells:
            if cell.cell_type == "code" and ("check.ready(" in cell.source
                                             or "check.mine(" in cell.source):
                found += sum(bool(YOURS_PASSED.search(o.get("text", "")))
                             for o in cell.get("outputs", []))
        site = student_notebook(teacher, path.name, keep_outputs=True)
        for cell in site.cells:
            for out in cell.get("outputs", []):
                text = out.get("text", "") + str(out.get("data", {}).get("text/plain", ""))
                hits = [x for x in text.split("\n") if re.search(r"(你的|你写的).*✓", x)]
                assert not hits, (path.stem, hits)
    assert found >= 10                      # 教师版里确实有这些行（不是一个不会失败的测试）


def test_student_bundle_is_a_zip_with_student_notebooks_and_an_install_note(tmp_path, capsys):
    out = tmp_path / "学生版"
    assert main(["student", "--out", str(out), "--bundle"]) == 0
    assert "学生版.zip" in capsys.readouterr().out
    with zipfile.ZipFile(out / "学生版.zip") as z:
        names = z.namelist()
        nbs = sorted(n for n in names if n.startswith(f"{BUNDLE}/notebooks/"))
        assert nbs == [f"{BUNDLE}/notebooks/{p.name}" for p in chapters()]
        for n in nbs:
            text = z.read(n).decode("utf-8")
            assert "BEGIN SOLUTION" not in text and "NBVAL_CHECK_OUTPUT" not in text
            assert nbformat.reads(text, as_version=4).cells[-1].source.startswith("## 怎样提交")
        note = z.read(f"{BUNDLE}/安装说明.md").decode("utf-8")
        assert 'pip install "torch==2.13.0" -e ".[dev]"' in note
        assert "jupyter lab notebooks/" in note
        for need in ("pyproject.toml", "gptcourse/__init__.py", "data/checkpoints/course.pt"):
            assert f"{BUNDLE}/{need}" in names, need
        teacher_only = (f"{BUNDLE}/tests/", f"{BUNDLE}/docs/teaching")
        assert not [n for n in names if n.startswith(teacher_only)]
        # 解压出来就是一份能用的课程：包从解压的目录导入，ROOT 指向那里，notebooks/ 是学生版
        z.extractall(tmp_path / "x", members=[n for n in names if not n.endswith(".pt")])
    root = tmp_path / "x" / BUNDLE
    code = ("import gptcourse.runtime as r, gptcourse.data as d; print(r.ROOT); "
            "print(len(d.load_corpus('tang_5jue').train) > 1000)")
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == [str(root.resolve()), "True"], done.stdout
    assert main(["student", "--out", str(out), "--bundle"]) == 2      # 不覆盖


def test_times_reports_seconds_per_section(tmp_path, capsys):
    """``classroom times``（教师指南里演示秒数的来源）：每一节的秒数、慢的单元格、出错的单元格。"""
    from gptcourse_kit.classroom.timing import report, time_notebook

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# 标题\n## 1. 快"),
        nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_markdown_cell("### 1.1 慢"),
        nbformat.v4.new_code_cell("import os, time\ntime.sleep(1.2)\n"
                                  "assert os.environ['GPTCOURSE_QUICK'] == '1'"),
        nbformat.v4.new_code_cell("1 / 0")])
    path = tmp_path / "01_demo.ipynb"
    nbformat.write(nb, path)
    r = time_notebook(path)
    assert [s["section"] for s in r["sections"]] == ["1. 快", "1.1 慢"]
    assert [s["cells"] for s in r["sections"]] == [[1], [3, 4]]
    slow = r["sections"][1]["seconds"]
    assert 1.2 <= slow < 30 and r["sections"][0]["seconds"] < slow
    assert [c["error"] for c in r["cells"]] == [False, False, True]
    text = report([r])
    assert "「1.1 慢」" in text and "单元格   3" in text and "出错" in text
    assert nbformat.read(path, as_version=4).cells[3].outputs == []   # 不写回文件
