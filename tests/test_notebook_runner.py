"""``python -m gptcourse_kit.notebooks run``：SIGTERM（``timeout``、批处理系统）与 Ctrl+C 让它连同
内核和内核的子进程一起停下，退出码 128 + 信号，正在跑的笔记本一个字节不变，后面的不再运行。"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from gptcourse.runtime import ROOT

RUNNER = """
import sys
from pathlib import Path
import gptcourse_kit.notebooks as n
n.NOTEBOOK_DIR = Path(sys.argv[1])
sys.exit(n.main(["run", *sys.argv[2:]]))
"""
SLEEPER = """import os, subprocess, time
child = subprocess.Popen(["sleep", "600"])
open("pids.tmp", "w").write(f"{os.getpid()} {child.pid}")
os.replace("pids.tmp", "pids")
time.sleep(600)"""


def _notebook(path: Path, source: str) -> None:
    nb = new_notebook(cells=[new_code_cell(source)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, path)


def _gone(pid: int) -> bool:
    """进程不在了（僵尸也算不在：它已经不运行，只等父进程收尸）。"""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def _wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


@pytest.mark.skipif(not Path("/proc").is_dir() or sys.platform != "linux", reason="需要 /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_ends_the_kernel_and_its_children_and_leaves_the_notebook(tmp_path, sig):
    _notebook(tmp_path / "01_sleep.ipynb", SLEEPER)
    _notebook(tmp_path / "02_next.ipynb", "open('ran', 'w').write('yes')")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", RUNNER, str(tmp_path), "01_sleep", "02_next"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    pids: list[int] = []
    try:
        # 等的是条件（内核真的在跑那个单元格了），不是固定的秒数：机器忙时内核启动要久一些
        assert _wait_for(lambda: (tmp_path / "pids").exists() or proc.poll() is not None, 300)
        assert proc.poll() is None, proc.communicate()
        pids = [int(x) for x in (tmp_path / "pids").read_text().split()]
        started = time.monotonic()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
        took = time.monotonic() - started
        assert proc.returncode == 128 + sig, (out, err)
        assert f"收到 {signal.Signals(sig).name}，停止：内核已结束，01_sleep.ipynb 没有改动" in err
        # 内核先收 SIGTERM，3 秒后整组 SIGKILL：停下来的时间有上限，不等单元格的 600 秒
        assert took < 60, took
        assert _wait_for(lambda: all(map(_gone, pids)), 30), pids      # 内核与它的 sleep 都不在了
        assert "运行 02_next.ipynb" not in out                           # 后面的不再运行
        left = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
        assert sorted(left) == ["01_sleep.ipynb", "02_next.ipynb", "pids"]   # 没有临时文件
        assert left["01_sleep.ipynb"] == before["01_sleep.ipynb"]            # 一个字节都没变
        assert left["02_next.ipynb"] == before["02_next.ipynb"]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in pids:
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_signal_while_waiting_for_the_kernel_raises_stopped_and_writes_nothing(
        tmp_path, monkeypatch):
    """库的层面：等内核的时候记下了停止信号 → Stopped，笔记本不写回（不启动真的内核）。"""
    import threading

    import nbclient

    from gptcourse_kit import notebooks
    release = threading.Event()

    class Hanging:
        km = None

        def __init__(self, nb, **kwargs):
            self.nb = nb

        def execute(self):
            self.nb.cells[0].outputs = [nbformat.v4.new_output("stream", text="半截")]
            release.wait(60)

    monkeypatch.setattr(nbclient, "NotebookClient", Hanging)
    monkeypatch.setattr(notebooks, "KERNEL_GRACE", 0.05)
    path = tmp_path / "01_x.ipynb"
    _notebook(path, "1 + 1")
    data = path.read_bytes()
    notebooks._stop.append(signal.SIGTERM)
    try:
        with pytest.raises(notebooks.Stopped, match="SIGTERM"):
            notebooks.run_notebook(path)
    finally:
        notebooks._stop.clear()
        release.set()
    assert path.read_bytes() == data and sorted(p.name for p in tmp_path.iterdir()) == [path.name]
