"""一条规则管所有写文件的地方（``gptcourse.files``）：包里与教师工具包里的每个写文件的函数，
都不顺着符号链接写、只读（或没有写权限）时一句话的 MachineError、写到一半失败不留临时文件、
原来的文件不动。每个写文件的函数在 WRITERS 里登记一次，三条规则对每一个都测。

以 root 运行时 chmod 挡不住写，所以“只读”由 tempfile 建临时文件时抛出 EROFS 来模拟
（内核对只读挂载的目录给的正是这个错误）；“写到一半失败”是 os.replace 抛出 ENOSPC。
"""
from __future__ import annotations

import errno
import json
import os
import tempfile
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from gptcourse import checkpoint, cli, files
from gptcourse.bpe import BPETokenizer
from gptcourse.config import preset
from gptcourse.errors import MachineError, UserError
from gptcourse.model import GPT
from gptcourse.tokenizer import CharTokenizer

TEXT = "春风又绿江南岸，明月何时照我还。\n"


@pytest.fixture(scope="module")
def tiny():
    tok = CharTokenizer.from_text(TEXT)
    model = GPT(preset("mini", vocab_size=tok.vocab_size, block_size=16, n_layer=1, n_head=2,
                       n_embd=16))
    return model, tok


def _chapter(folder: Path) -> Path:
    """一份极小的“教师版”笔记本：一个标题、一道练习。"""
    meta = {"nbgrader": {"solution": True, "grade": False, "locked": False,
                         "grade_id": "nb01-x", "schema_version": 3}}
    nb = new_notebook(cells=[new_markdown_cell("# 第一章\n\n## 学习目标\n\n- 写诗"),
                             new_code_cell("def f():\n    ### BEGIN SOLUTION\n    return 1\n"
                                           "    ### END SOLUTION", metadata=meta)])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "01_x.ipynb"
    nbformat.write(nb, path)
    return path


def _submission():
    from gptcourse_kit.classroom.grade import Submission
    return Submission(Path("2024001_张三_01.ipynb"), chapter="nb01",
                      exercises=[{"exercise": "x", "status": "正确", "passed": True,
                                  "message": "ok"}])


@pytest.fixture
def kit(tmp_path, monkeypatch):
    """教师工具包的目录写手只渲染一章小笔记本（不渲染整门课），学生包只打包 README。"""
    from gptcourse_kit.classroom import site, slides, student
    chapter = _chapter(tmp_path / "in")
    monkeypatch.setattr(site, "chapters", lambda: [chapter])
    monkeypatch.setattr(slides, "chapters", lambda: [chapter])
    monkeypatch.setattr(student, "_course_files", lambda root: ["README.md"])
    return chapter


class _NoKernel:
    """代替 nbclient.NotebookClient：不启动内核（这里只测写回）。"""

    def __init__(self, nb, **kwargs):
        self.nb = nb

    def execute(self):
        self.nb.cells[0].source += "\n\n运行过了。"
        return self.nb


def _run_notebook(target, tmp, kit, tiny, monkeypatch):
    import nbclient

    from gptcourse_kit import notebooks
    monkeypatch.setattr(nbclient, "NotebookClient", _NoKernel)
    if not os.path.lexists(target):
        nbformat.write(nbformat.read(kit, as_version=4), target)
    notebooks.run_notebook(target)


def _bench(target, tmp, kit, tiny, monkeypatch):
    """``python -m gptcourse_kit.bench --out target`` 写结果的那一步（JSON 与旁边的 .md）。"""
    import gptcourse_kit.bench.__main__ as bench
    monkeypatch.setattr(bench, "markdown", lambda results: "# 基准")
    bench.write_results(target, {"quick": True})


def _dump_rank_state(target, tmp, kit, tiny, monkeypatch):
    from gptcourse.cli.train import _dump_rank_state
    from gptcourse.train import History
    _dump_rank_state(target.parent, 0, tiny[0], History())


def _gradebook(name):
    def write(target, tmp, kit, tiny, monkeypatch):
        from gptcourse_kit.classroom import gradebook
        getattr(gradebook, name)([_submission()], target, inputs=[kit])
    return write


def _export(target, tmp, kit, tiny, monkeypatch):
    pytest.importorskip("safetensors")
    pytest.importorskip("tokenizers")
    from gptcourse import export
    export.export_hf(*tiny, {}, target, force=True)


# 名字 → (写文件的函数 (target, tmp, kit, tiny, monkeypatch)，它写的文件相对 tmp 的路径)。
# 目录写手（学生版、网站、幻灯片、讲义、反馈页）写 out/ 里的一个文件；export --hf 写整个目录。
WRITERS = {
    "checkpoint.save": (lambda t, tmp, kit, tiny, mp: checkpoint.save(t, *tiny), "m.pt"),
    "CharTokenizer.save": (lambda t, tmp, kit, tiny, mp: tiny[1].save(t), "tok.json"),
    "BPETokenizer.save": (lambda t, tmp, kit, tiny, mp:
                          BPETokenizer.train(TEXT * 4, vocab_size=260).save(t), "bpe.json"),
    "export_hf": (_export, "hf"),
    "train --dump-rank-state": (_dump_rank_state, "ranks/rank0.json"),
    "gradebook.write_csv": (_gradebook("write_csv"), "g.csv"),
    "gradebook.write_long_csv": (_gradebook("write_long_csv"), "long.csv"),
    "gradebook.write_json": (_gradebook("write_json"), "g.json"),
    "gradebook.write_feedback": (lambda t, tmp, kit, tiny, mp: __import__(
        "gptcourse_kit.classroom.gradebook", fromlist=["x"]).write_feedback(
        _submission(), t.parent, name=t.name, inputs=[kit]), "fb/2024001.html"),
    "student.write_student_edition": (lambda t, tmp, kit, tiny, mp: __import__(
        "gptcourse_kit.classroom.student", fromlist=["x"]).write_student_edition(
        [kit], t.parent, force=True), "stu/01_x.ipynb"),
    "student.write_bundle": (lambda t, tmp, kit, tiny, mp: __import__(
        "gptcourse_kit.classroom.student", fromlist=["x"]).write_bundle(
        [kit], t.parent, force=True), "stu/学生版.zip"),
    "site.build_site": (lambda t, tmp, kit, tiny, mp: __import__(
        "gptcourse_kit.classroom.site", fromlist=["x"]).build_site(t.parent, force=True),
        "site/index.html"),
    "slides.build_slides": (lambda t, tmp, kit, tiny, mp: __import__(
        "gptcourse_kit.classroom.slides", fromlist=["x"]).build_slides(t.parent, force=True),
        "slides/01_x.html"),
    "slides.handout": (lambda t, tmp, kit, tiny, mp: __import__(
        "gptcourse_kit.classroom.slides", fromlist=["x"]).handout(t.parent, force=True),
        "handout/answers.html"),
    "timing.write_json": (lambda t, tmp, kit, tiny, mp: __import__(
        "gptcourse_kit.classroom.timing", fromlist=["x"]).write_json([], t), "times.json"),
    "notebooks.run_notebook": (_run_notebook, "01_x.ipynb"),
    "bench --out": (_bench, "bench/b.json"),
}


def _hidden(tmp: Path) -> list[str]:
    """tmp 下所有以点开头的名字（临时文件 .<名>.<pid>.….tmp、临时目录、换下来的旧目录）。"""
    return sorted(str(p.relative_to(tmp)) for p in tmp.rglob(".*"))


def _snapshot(tmp: Path) -> dict[str, bytes]:
    return {str(p.relative_to(tmp)): p.read_bytes() for p in sorted(tmp.rglob("*"))
            if p.is_file() and not p.is_symlink()}


@pytest.mark.parametrize("name", WRITERS)
def test_a_symlink_target_is_refused_and_nothing_is_written_through_it(
        name, tmp_path, kit, tiny, monkeypatch):
    write, rel = WRITERS[name]
    target = tmp_path / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "kept").write_bytes(b"teacher's file")
    for points_to in (elsewhere / "kept", elsewhere / "dangling"):
        target.symlink_to(points_to)
        with pytest.raises(UserError, match="符号链接") as e:
            write(target, tmp_path, kit, tiny, monkeypatch)
        assert "\n" not in str(e.value)
        target.unlink()
    assert sorted(p.name for p in elsewhere.iterdir()) == ["kept"]
    assert (elsewhere / "kept").read_bytes() == b"teacher's file"


def _fail(exc: OSError, monkeypatch, *names, module=tempfile):
    """module 里的这些函数都抛出 exc。"""
    def fail(*a, **k):
        raise exc
    for what in names:
        monkeypatch.setattr(module, what, fail)


@pytest.mark.parametrize("name, how", [(n, h) for n in WRITERS for h in ("read-only", "rename")])
def test_a_failed_write_is_one_line_and_leaves_no_temporary_file_and_the_old_file(
        name, how, tmp_path, kit, tiny, monkeypatch):
    """只读（建临时文件时 EROFS）：一句话说出文件与“只读文件系统”。换上去的那一步失败
    （os.replace 时 ENOSPC）：一句话说“磁盘已满”。两种都不留临时文件，原来的文件不动。"""
    write, rel = WRITERS[name]
    target = tmp_path / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    if name == "notebooks.run_notebook":
        write(target, tmp_path, kit, tiny, monkeypatch)        # 先有一个能读的笔记本
    elif name != "export_hf":                                   # --hf 只覆盖以前导出的目录
        target.write_bytes(b"the old file")
    before = _snapshot(tmp_path)
    if how == "read-only":
        _fail(OSError(errno.EROFS, "Read-only file system"), monkeypatch,
              "mkstemp", "mkdtemp", "TemporaryFile")
    else:
        _fail(OSError(errno.ENOSPC, "No space left on device"), monkeypatch, "replace",
              module=os)
    with pytest.raises(MachineError) as e:
        write(target, tmp_path, kit, tiny, monkeypatch)
    message = str(e.value)
    assert "\n" not in message and ("只读文件系统" if how == "read-only" else "磁盘已满") in message
    assert str(target.parent) in message, message      # 目录写手先写 assets/：说出的是那个文件
    assert _hidden(tmp_path) == []
    after = _snapshot(tmp_path)
    assert {k: v for k, v in after.items() if k in before} == before     # 原来的文件都没动
    assert str(rel) not in after or str(rel) in before


def test_every_writer_of_the_package_and_the_kit_is_registered():
    """写文件的调用（write_text、open(…, "w")、os.replace、nbformat.write、shutil.copy……）只出现在
    gptcourse/files.py 里；别处写文件都经过它。例外必须在那一行注明“不经 files：为什么”
    （锁文件、files.replacing_folder 的临时目录里）；viz/ 与 serve/ 另有负责人，不在此列；沙箱的
    cgroup 控制文件与评分的暂存目录不是输出。"""
    import re

    import gptcourse
    root = Path(gptcourse.__file__).parent.parent
    pattern = re.compile(r"(?<!files)\.write_text\(|(?<!files)\.write_bytes\(|os\.replace\(|"
                         r"\.rename\(|"
                         r"open\([^)]*['\"][wa]b?['\"]|nbformat\.write\(|shutil\.copy")
    allowed = {"gptcourse/files.py",
               "gptcourse_kit/classroom/sandbox.py",            # cgroup 的控制文件、沙箱日志
               "gptcourse_kit/classroom/grade.py"}              # 评分的暂存目录（不是输出）
    offenders = []
    for folder in ("gptcourse", "gptcourse_kit"):
        for path in sorted((root / folder).rglob("*.py")):
            rel = str(path.relative_to(root))
            if rel in allowed or rel.startswith(("gptcourse/viz/", "gptcourse/serve/")):
                continue
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                code, _, comment = line.partition("#")
                if pattern.search(code) and "window.open" not in code \
                        and "不经 files：" not in comment:
                    offenders.append(f"{rel}:{i}: {line.strip()}")
    assert offenders == [], "\n".join(offenders)


def test_cli_exit_codes_follow_the_rule(tmp_path, capsys, monkeypatch, tiny):
    """命令行：用户的错（符号链接）→ 一行、退出码 2；机器的错（只读）→ 一行、退出码 1。"""
    from gptcourse_kit.classroom.__main__ import main as classroom
    ckpt = checkpoint.save(tmp_path / "m.pt", *tiny)
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    assert cli.main(["export", "--hf", str(tmp_path / "link"), "--checkpoint", str(ckpt)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    sub = tmp_path / "2024001_张三.ipynb"
    sub.write_text(json.dumps(nbformat.v4.new_notebook()), encoding="utf-8")
    (tmp_path / "g.csv").symlink_to(tmp_path / "elsewhere.csv")
    assert classroom(["grade", str(sub), "--csv", str(tmp_path / "g.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "符号链接" in err, err

    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(tempfile, "TemporaryFile", read_only)
    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    assert classroom(["grade", str(sub), "--csv", str(tmp_path / "new.csv")]) == 1
    err = capsys.readouterr().err
    assert err == f"错误：写不出 {tmp_path / 'new.csv'}：只读文件系统\n", err
    assert cli.main(["train", "--corpus", "tang_5jue", "--preset", "mini", "--steps", "1",
                     "--out", str(tmp_path / "x.pt")]) == 1
    assert capsys.readouterr().err == f"错误：写不出 {tmp_path / 'x.pt'}：只读文件系统\n"
    assert not (tmp_path / "elsewhere").exists() and not (tmp_path / "elsewhere.csv").exists()


def test_a_long_name_gets_a_short_temporary_name(tmp_path):
    """255 字节的名字是合法的；临时文件名 .<名>.<pid>.<随机>.tmp 截短了，照样写得出。"""
    target = tmp_path / ("诗" * 85)                       # 255 字节
    assert len(os.fsencode(target.name)) == 255
    files.write_text(target, "春")
    assert target.read_text(encoding="utf-8") == "春" and _hidden(tmp_path) == []


def test_a_temp_file_left_by_a_killed_writer_is_removed_by_the_next_write(tmp_path):
    target = tmp_path / "g.csv"
    dead = 2**22 + 12345                                  # 比 pid_max 的默认值还大：一定不在
    stale = tmp_path / f".g.csv.{dead}.abcd.tmp"
    stale.write_text("一半", encoding="utf-8")
    files.write_text(target, "全")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.csv"]


def test_writing_onto_an_input_is_refused_even_through_a_hard_link(tmp_path):
    source = tmp_path / "作业.ipynb"
    source.write_text("学生的作业", encoding="utf-8")
    os.link(source, tmp_path / "twin.csv")
    for target in (source, tmp_path / "twin.csv", tmp_path / "sub" / ".." / "作业.ipynb"):
        with pytest.raises(UserError, match="要读的文件"):
            files.write_text(target, "成绩", inputs=[source])
    assert source.read_text(encoding="utf-8") == "学生的作业"


def test_within_refuses_a_folder_link_that_leads_outside(tmp_path):
    out, outside = tmp_path / "out", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    (out / "assets").symlink_to(outside)
    with pytest.raises(UserError, match="之外"):
        files.write_text(out / "assets" / "style.css", "x", within=out)
    assert list(outside.iterdir()) == []
