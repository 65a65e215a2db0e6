"""全班自动评分：每份作业在一个全新的内核里从头跑（快速模式、限时、不联网），再读检查器的结果。

- 章节：由作业里评分单元格的 ``nbgrader.grade_id``（``nbXX-<练习>-check``）认出，练习表取
  ``gptcourse.check.nbXX.EXERCISES``——学生删掉的练习也照样计 0 分；
- 一个单元格超过 ``cell_timeout`` 秒就被中断（KeyboardInterrupt），后面的单元格照常运行，
  所以死循环只让那一题得 0 分；整份作业超过 ``timeout`` 秒就整份停下，没跑到的题计 0 分；
- 某份作业崩溃（内核死掉、笔记本文件坏了）只影响它自己，不影响同一批的其他作业。
"""
from __future__ import annotations

import csv
import importlib
import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

MARK = "<<GPTCOURSE-RESULTS>>"
GRADE_ID = re.compile(r"^(nb0[1-5])-(.+)-check$")

# 注入到作业最前面：不许连接本机以外的地址（内核自己的通道早已连上，不受影响）
NO_NETWORK = '''\
import socket as _socket
_connect = _socket.socket.connect
def _local_only(self, address, *args):
    host = address[0] if isinstance(address, tuple) else address
    if isinstance(host, str) and host not in ("127.0.0.1", "localhost", "::1"):
        raise OSError("评分时不允许联网：" + host)
    return _connect(self, address, *args)
_socket.socket.connect = _local_only
del _local_only'''
# 注入到作业最后：把检查器记下的结果打印出来
REPORT = f'''\
import json as _json
from gptcourse.check import _common as _c
print({MARK!r} + _json.dumps(_c.results(), ensure_ascii=False))'''


@dataclass
class Submission:
    path: Path
    chapter: str | None = None
    exercises: list[dict] = field(default_factory=list)
    error: str | None = None

    @property
    def student(self) -> str:
        return self.path.stem if self.path.parent.name in ("", ".") else \
            f"{self.path.parent.name}/{self.path.stem}"

    @property
    def score(self) -> int:
        return sum(e["passed"] for e in self.exercises)

    def to_dict(self) -> dict:
        return {"notebook": str(self.path), "student": self.student, "chapter": self.chapter,
                "score": self.score, "total": len(self.exercises), "error": self.error,
                "exercises": self.exercises}


def chapter_of(nb: nbformat.NotebookNode, path: Path) -> str | None:
    """作业属于哪一章：先看评分单元格的 grade_id，再看文件名里的 01…05。"""
    ids = [c.get("metadata", {}).get("nbgrader", {}).get("grade_id", "") for c in nb.cells]
    found = [m.group(1) for m in map(GRADE_ID.match, ids) if m]
    if found:
        return max(set(found), key=found.count)
    m = re.search(r"0([1-5])", path.name)
    return f"nb0{m.group(1)}" if m else None


def exercise_names(chapter: str) -> list[str]:
    return list(importlib.import_module(f"gptcourse.check.{chapter}").EXERCISES)


def _run_in_subprocess(path: Path, timeout: float,
                       cell_timeout: float) -> tuple[dict | None, str | None]:
    """在子进程里执行作业；返回 (练习名 → 结果, 出错说明)。"""
    cmd = [sys.executable, "-m", "gptcourse.classroom.grade", "--run-one", str(path),
           "--cell-timeout", str(cell_timeout)]
    env = {**os.environ, "GPTCOURSE_QUICK": "1", "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)               # 自成进程组，好整组杀掉
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None, f"整份作业超过 {timeout:g} 秒，已停止"
    for line in out.splitlines():
        if line.startswith(MARK):
            return {r["exercise"]: r for r in json.loads(line[len(MARK):])}, None
    last = (err.strip().splitlines() or ["（没有输出）"])[-1]
    return None, f"作业没能跑完：{last}"


def grade_one(path: Path, timeout: float = 600, cell_timeout: float = 120) -> Submission:
    sub = Submission(Path(path))
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as e:  # noqa: BLE001 - 坏文件只影响这一份作业
        sub.error = f"读不了这个笔记本：{type(e).__name__}"
        return sub
    sub.chapter = chapter_of(nb, sub.path)
    if sub.chapter is None:
        sub.error = "认不出是哪一章的作业（没有评分单元格，文件名里也没有 01…05）"
        return sub
    results, sub.error = _run_in_subprocess(sub.path, timeout, cell_timeout)
    results = results or {}
    for name in exercise_names(sub.chapter):
        r = results.get(name)
        if r is None:
            why = sub.error or "这一题的检查没有运行（超时、被删掉，或前面的单元格出错）"
            r = {"exercise": name, "passed": False, "message": why}
        sub.exercises.append({"exercise": name, "passed": bool(r["passed"]),
                              "message": r["message"]})
    return sub


def grade(paths: list[Path], timeout: float = 600, cell_timeout: float = 120) -> list[Submission]:
    return [grade_one(Path(p), timeout, cell_timeout) for p in paths]


def table(subs: list[Submission]) -> str:
    """学生 × 练习的成绩表（✓ / ✗），每章一张。"""
    lines = []
    for chapter in sorted({s.chapter or "?" for s in subs}):
        group = [s for s in subs if (s.chapter or "?") == chapter]
        names = exercise_names(chapter) if chapter != "?" else []
        width = max(len(s.student) for s in group)
        lines.append(f"== {chapter}：" + "、".join(f"{i + 1}={n}" for i, n in enumerate(names)))
        lines.append(f"{'学生':<{width}}  " + " ".join(f"{i + 1:>2}" for i in range(len(names)))
                     + "  得分")
        for s in group:
            marks = " ".join(f"{'✓' if e['passed'] else '✗':>2}" for e in s.exercises)
            note = f"  （{s.error}）" if s.error else ""
            lines.append(f"{s.student:<{width}}  {marks}  {s.score}/{len(names)}{note}")
    return "\n".join(lines)


def write_csv(subs: list[Submission], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["student", "notebook", "chapter", "exercise", "passed", "message"])
        for s in subs:
            for e in s.exercises:
                w.writerow([s.student, str(s.path), s.chapter, e["exercise"], int(e["passed"]),
                            e["message"]])


def write_json(subs: list[Submission], path: Path) -> None:
    Path(path).write_text(json.dumps([s.to_dict() for s in subs], ensure_ascii=False, indent=1),
                          encoding="utf-8")


def _run_one(path: str, cell_timeout: float) -> int:
    """子进程里：注入“不联网”与“报结果”两个单元格，在全新内核里执行，打印结果。"""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(NO_NETWORK))
    nb.cells.append(nbformat.v4.new_code_cell(REPORT))
    client = NotebookClient(nb, timeout=cell_timeout, interrupt_on_timeout=True, allow_errors=True,
                            kernel_name="python3",
                            resources={"metadata": {"path": str(Path(path).parent)}})
    client.execute()
    for out in nb.cells[-1].get("outputs", []):
        for line in out.get("text", "").splitlines():
            if line.startswith(MARK):
                print(line)
                return 0
    print("报结果的单元格没有输出", file=sys.stderr)
    return 1


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--run-one", required=True)
    ap.add_argument("--cell-timeout", type=float, default=120)
    a = ap.parse_args()
    sys.exit(_run_one(a.run_one, a.cell_timeout))
