"""教师指南里“每节现场演示几秒”的数从这里来：以快速模式执行笔记本，按小节汇总每个单元格的用时。

    python -m gptcourse_kit.classroom times                         # 五章教师版，快速模式
    python -m gptcourse_kit.classroom times 01_data_tokenizer --json 用时.json
    python -m gptcourse_kit.classroom times --edition student       # 学生版（现场演示用的就是它）

每个笔记本在一个新内核里从上到下执行一次（``GPTCOURSE_QUICK=1``，与指南里“现场演示用快速模式”
相同），执行结果不写回文件。打印每一节（最近的 ``##`` / ``###`` 标题）的秒数、最慢的单元格（从 0 数
的序号与它所在的小节），以及机器与负载——指南里的数要在**空闲**的机器上量，负载写在表头里。
"""
from __future__ import annotations

import json
import os
import re
import time
from datetime import datetime
from pathlib import Path

import nbformat

HEADING = re.compile(r"^#{2,3}\s+(.+)$", re.M)


def _seconds(cell) -> float | None:
    ex = cell.get("metadata", {}).get("execution", {})
    start, end = ex.get("iopub.execute_input"), ex.get("shell.execute_reply")
    if not (start and end):
        return None
    parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))  # noqa: E731
    return (parse(end) - parse(start)).total_seconds()


def time_notebook(path: Path, edition: str = "teacher", timeout: int = 600) -> dict:
    """执行一个笔记本（快速模式），返回 {"notebook", "wall", "cells": [...], "sections": [...]}。"""
    from nbclient import NotebookClient

    from .student import student_notebook

    nb = nbformat.read(path, as_version=4)
    if edition == "student":
        nb = student_notebook(nb, Path(path).name)
    old = os.environ.get("GPTCOURSE_QUICK")
    os.environ["GPTCOURSE_QUICK"] = "1"
    try:
        t0 = time.perf_counter()
        NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=True,
                       allow_errors=True,
                       resources={"metadata": {"path": str(Path(path).parent)}}).execute()
        wall = time.perf_counter() - t0
    finally:
        if old is None:
            os.environ.pop("GPTCOURSE_QUICK", None)
        else:
            os.environ["GPTCOURSE_QUICK"] = old
    section, cells, sections = "（开头）", [], {}
    for idx, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            found = HEADING.findall(cell.source)
            section = " / ".join(h.strip() for h in found) if found else section   # 一格里几个标题
            continue
        if cell.cell_type != "code":
            continue
        sec = _seconds(cell) or 0.0
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        first = next((x for x in cell.source.split("\n") if x.strip()
                      and x.strip() != "# NBVAL_CHECK_OUTPUT"), "")
        cells.append({"cell": idx, "section": section, "seconds": round(sec, 2),
                      "error": bool(errors), "first_line": first[:60]})
        s = sections.setdefault(section, {"section": section, "seconds": 0.0, "cells": []})
        s["seconds"] = round(s["seconds"] + sec, 2)
        s["cells"].append(idx)
    return {"notebook": Path(path).stem, "edition": edition, "wall": round(wall, 1),
            "cells": cells, "sections": list(sections.values())}


def report(results: list[dict], slow: float = 1.0) -> str:
    from gptcourse.machine import machine_info

    lines = [f"机器：{machine_info()}", f"负载（1/5/15 分钟）：{os.getloadavg()}" if hasattr(
        os, "getloadavg") else "负载：未知", ""]
    for r in results:
        lines.append(f"== {r['notebook']}（{r['edition']}，快速模式）：墙钟 {r['wall']} s")
        for s in r["sections"]:
            lines.append(f"  {s['seconds']:7.1f} s  「{s['section']}」 单元格 {s['cells'][0]}–"
                         f"{s['cells'][-1]}")
        for c in r["cells"]:
            if c["seconds"] >= slow or c["error"]:
                err = " 出错" if c["error"] else ""
                lines.append(f"      单元格 {c['cell']:>3}: {c['seconds']:6.1f} s{err}"
                             f"  「{c['section']}」 {c['first_line']}")
    return "\n".join(lines)


def write_json(results: list[dict], path: Path) -> None:
    from gptcourse import files
    files.write_text(path, json.dumps(results, ensure_ascii=False, indent=1))
