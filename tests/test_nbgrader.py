"""同一批教师版笔记本交给真正的 nbgrader（0.9.6）：``generate_assignment`` + ``autograde``。

nbgrader 运行笔记本时设 ``NBGRADER_EXECUTION``；这时检查器在没做完或做错时抛出
``AssertionError``（严格模式），nbgrader 才给这一格 0 分。以前检查器只打印“还没完成”，
原样的学生版在 nbgrader 里得了 9/11。

需要可选依赖 ``pip install -e ".[classroom]"``；没装时跳过，但 ``CI=true`` 时失败（.ci/run 装它）。
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gptcourse.bpe import get_stats
from gptcourse.check import _common

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01_data_tokenizer.ipynb"
STUB = 'raise NotImplementedError("还没完成：在这里写你的答案")'   # 与学生版的存根同一个开头


def test_strict_mode_raises_with_the_same_message(monkeypatch, capsys):
    """JupyterLab 里（没有 NBGRADER_EXECUTION）照常打印并返回 False；nbgrader 或
    GPTCOURSE_STRICT=1 时抛出 AssertionError，文字与打印的相同；做对了两种模式都返回 True。"""
    from gptcourse.check import nb01

    def stub(ids):
        raise NotImplementedError("还没完成：数相邻的一对")

    for var in _common.STRICT_ENV:
        monkeypatch.delenv(var, raising=False)
    assert nb01.count_pairs(stub) is False
    printed = capsys.readouterr().out.strip()
    assert printed == "还没完成：数相邻的一对"
    for var, value in (("NBGRADER_EXECUTION", "autograde"), ("GPTCOURSE_STRICT", "1")):
        with monkeypatch.context() as m:
            m.setenv(var, value)
            with pytest.raises(AssertionError) as e:
                nb01.count_pairs(stub)
            assert str(e.value) == printed
            with pytest.raises(AssertionError, match="^还不对：count_pairs"):
                nb01.count_pairs(lambda ids: {})
            assert nb01.count_pairs(get_stats) is True
    monkeypatch.setenv("GPTCOURSE_STRICT", "0")
    assert nb01.count_pairs(stub) is False


@pytest.mark.slow
def test_nbgrader_autograde_of_chapter_01(tmp_path, monkeypatch):
    """nbgrader 的老师流程：source/ → generate_assignment → release/；原样的学生版交上来 0 分，
    教师版交上来满分。两份作业各在一份课程目录的拷贝里、由两个 ``nbgrader autograde`` 进程
    同时评（nbgrader 自己一次只评一份；这样两核的机器上测试用时减半，评的内容不变）。"""
    try:
        import nbgrader  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("CI 上必须装 nbgrader（pip install -e \".[classroom]\"）")
        pytest.skip("需要 pip install -e '.[classroom]'")
    from nbgrader.api import Gradebook
    from nbgrader.apps import NbGraderAPI
    from traitlets.config import Config

    monkeypatch.setenv("GPTCOURSE_QUICK", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(NOTEBOOK.parents[1]), *filter(None, [os.environ.get("PYTHONPATH")])]))
    for var in (*_common.STRICT_ENV, _common.COMMIT_ENV):
        monkeypatch.delenv(var, raising=False)
    root = tmp_path / "course"
    (root / "source" / "ps01").mkdir(parents=True)
    shutil.copy(NOTEBOOK, root / "source" / "ps01" / "01.ipynb")
    settings = {"CourseDirectory.course_id": "gptcourse",
                "ClearSolutions.code_stub": {"python": STUB}, "Execute.timeout": 600}
    c = Config()
    c.CourseDirectory.root = str(root)
    for key, value in settings.items():
        section, name = key.split(".")
        setattr(getattr(c, section), name, value)
    made = NbGraderAPI(config=c).generate_assignment("ps01")
    assert made["success"], made["log"][-3000:]
    released = root / "release" / "ps01" / "01.ipynb"
    assert "BEGIN SOLUTION" not in released.read_text(encoding="utf-8")
    running = {}
    for sid, nb in (("blank", released), ("teacher", NOTEBOOK)):
        course = tmp_path / f"course-{sid}"
        shutil.copytree(root, course)                          # 连同 generate 写好的 gradebook.db
        (course / "submitted" / sid / "ps01").mkdir(parents=True)
        shutil.copy(nb, course / "submitted" / sid / "ps01" / "01.ipynb")
        (course / "nbgrader_config.py").write_text(
            "c = get_config()\n" + f"c.CourseDirectory.root = {str(course)!r}\n"
            + "".join(f"c.{k} = {v!r}\n" for k, v in settings.items()), encoding="utf-8")
        running[sid] = (course, subprocess.Popen(
            [sys.executable, "-m", "nbgrader", "autograde", "ps01", "--student", sid],
            cwd=course, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    scores = {}
    for sid, (course, proc) in running.items():
        log = proc.communicate(timeout=900)[0]
        assert proc.returncode == 0, log[-3000:]
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "gptcourse") as gb:
            sub = gb.find_submission("ps01", sid)
            scores[sid] = (sub.score, sub.max_score)
    assert scores == {"blank": (0, 11), "teacher": (11, 11)}
