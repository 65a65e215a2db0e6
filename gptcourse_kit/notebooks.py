"""重新执行课程笔记本（完整模式）并检查提交的输出。

    python -m gptcourse_kit.notebooks run                     # 依次重跑 notebooks/ 下全部笔记本
    python -m gptcourse_kit.notebooks run 01_data_tokenizer   # 只跑指定的（可省略 .ipynb）
    python -m gptcourse_kit.notebooks check                   # 检查提交的输出是否干净

``run`` 在 notebooks/ 目录里启动 python3 内核，设置 GPTCOURSE_QUICK=0，
从上到下执行并把输出写回文件（原子地：先写旁边的临时文件再换上，见 :mod:`gptcourse.files`）。
收到 SIGTERM（``timeout``、批处理系统）、SIGINT（Ctrl+C）或 SIGHUP：结束内核和它的子进程，
正在运行的笔记本不改动，剩下的不再运行，退出码 128 + 信号编号（SIGTERM：143）。
``check`` 与 tests/test_notebooks_committed.py 做完全相同的检查。
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

from gptcourse import files
from gptcourse.runtime import ROOT

NOTEBOOK_DIR = ROOT / "notebooks"
# 作者机器上的绝对路径不应出现在提交的输出里
ABS_PATH_RE = re.compile(r"(?<![\w.])(/root|/home|/work|/tmp|/Users|[A-Za-z]:\\\\?Users)\b"
                         r"|site-packages")
GLYPH_RE = re.compile(r"Glyph \d+ .*missing from font")


def notebook_paths(names: list[str] | None = None) -> list[Path]:
    """按名字找到笔记本（名字可带或不带 .ipynb）；不给名字时返回全部，按文件名排序。"""
    every = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
    if not names:
        return every
    out = []
    for name in names:
        stem = Path(name).name.removesuffix(".ipynb")
        path = NOTEBOOK_DIR / f"{stem}.ipynb"
        if not path.is_file():
            known = ", ".join(p.stem for p in every) or "（无）"
            raise FileNotFoundError(f"找不到笔记本 {stem!r}；现有：{known}")
        out.append(path)
    return out


def _output_text(output: dict) -> str:
    parts = []
    if "text" in output:
        parts.append(output["text"] if isinstance(output["text"], str) else "".join(output["text"]))
    for key, value in output.get("data", {}).items():
        if key.startswith("text/"):
            parts.append(value if isinstance(value, str) else "".join(value))
    if output.get("output_type") == "error":
        parts.append("\n".join(output.get("traceback", [])))
    return "\n".join(parts)


def check_notebook(path: Path) -> list[str]:
    """返回提交的笔记本存在的问题（空列表表示全部通过）。"""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    problems: list[str] = []
    try:
        nbformat.validate(nb)
    except nbformat.ValidationError as e:
        problems.append(f"不符合 nbformat 规范：{_one_line(e)}")
    cells = nb.cells
    code = [c for c in cells if c.cell_type == "code"]
    counts = [c.execution_count for c in code]
    if any(n is None for n in counts):
        missing = [i for i, c in enumerate(cells)
                   if c.cell_type == "code" and c.execution_count is None]
        problems.append(f"有代码单元格没有执行（单元格序号 {missing[:10]}）")
    elif counts != list(range(1, len(code) + 1)):
        problems.append(f"执行计数不是 1…{len(code)} 连续递增：{counts}")
    for i, cell in enumerate(cells):
        m = ABS_PATH_RE.search(cell.source)                 # 源码与正文里也不行（issue 48 item 6）
        if m:
            snippet = cell.source[max(0, m.start() - 20):m.end() + 30]
            problems.append(f"单元格 {i} 的源码含有本机路径：{snippet!r}")
        if cell.cell_type != "code":
            continue
        for out in cell.get("outputs", []):
            text = _output_text(out)
            if out.get("output_type") == "error":
                problems.append(f"单元格 {i} 有错误输出：{out.get('ename')}: {out.get('evalue')}")
            if out.get("name") == "stderr" and "Traceback" in text:
                problems.append(f"单元格 {i} 的 stderr 里有 Traceback")
            m = ABS_PATH_RE.search(text)
            if m:
                snippet = text[max(0, m.start() - 20):m.end() + 30]
                problems.append(f"单元格 {i} 的输出含有本机绝对路径：{snippet!r}")
            if GLYPH_RE.search(text):
                problems.append(f"单元格 {i} 的输出含有缺字警告（Glyph … missing from font）")
    if not any(c.source.lstrip().startswith("# NBVAL_CHECK_OUTPUT") for c in code):
        problems.append("没有任何带 # NBVAL_CHECK_OUTPUT 的单元格")
    first = cells[0] if cells else None
    if first is None or first.cell_type != "markdown":
        problems.append("第一个单元格应是 Markdown（标题、学习目标、运行时间）")
    else:
        src = first.source
        for need, what in (("# ", "标题"), ("学习目标", "学习目标"), ("运行时间", "运行时间")):
            if need not in src:
                problems.append(f"第一个单元格缺少{what}（找不到 {need!r}）")
    tail = "\n".join(c.source for c in cells[-12:] if c.cell_type == "markdown")
    for need in ("小结", "练习"):
        if need not in tail:
            problems.append(f"笔记本末尾缺少“{need}”")
    return problems


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_stop: list[int] = []                  # 收到的停止信号（main 装的处理函数只记下，不在半路抛出）
KERNEL_GRACE = 3.0                     # 给内核 SIGTERM 之后等它这么多秒，再 SIGKILL 整个进程组


class Stopped(Exception):
    """收到了停止信号：内核已经结束，笔记本没有改动。"""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def stop_on_signals():
    """这段时间里 SIGTERM / SIGINT / SIGHUP 只记下来（由 :func:`run_notebook` 结束内核、由
    :func:`main` 退出）：写到一半的文件总能写完或不写，不会在半路被打断。只在主线程有效。"""
    _stop.clear()
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, lambda signum, frame: _stop.append(signum))
           for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _end_kernel(client, worker: threading.Thread) -> None:
    """结束 client 的内核连同它的子进程（内核自成一个进程组）：先 SIGTERM，等 KERNEL_GRACE 秒
    （执行线程看到内核死了会自己收尾），再 SIGKILL 整个组。"""
    provisioner = getattr(getattr(client, "km", None), "provisioner", None)
    group = getattr(provisioner, "pgid", None) or getattr(provisioner, "pid", None)
    for sig, wait in ((signal.SIGTERM, KERNEL_GRACE), (signal.SIGKILL, KERNEL_GRACE)):
        if group:
            with contextlib.suppress(OSError):
                os.killpg(group, sig)
        worker.join(wait)


def run_notebook(path: Path, timeout: int = 1800) -> float:
    """在完整模式下从上到下执行一个笔记本并原子地写回，返回耗时（秒）。

    内核由另一个线程驱动，这个线程只等它：等的时候收到停止信号（见 :func:`stop_on_signals`）
    或 KeyboardInterrupt → 结束内核和它的子进程，抛出 :class:`Stopped`（或原来的异常），文件不动。
    """
    import nbformat
    from nbclient import NotebookClient

    from .classroom.student import notebook_text

    files.check_file(path)                      # 写回之前的规则，在花时间执行之前就查
    nb = nbformat.read(path, as_version=4)
    old = os.environ.get("GPTCOURSE_QUICK")
    os.environ["GPTCOURSE_QUICK"] = "0"
    start = time.perf_counter()
    failed: list[BaseException] = []
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(NOTEBOOK_DIR)}})

    def execute() -> None:
        try:
            client.execute()
        except BaseException as e:      # 交给等它的线程去抛
            failed.append(e)

    worker = threading.Thread(target=execute, name=f"notebook {path.name}", daemon=True)
    try:
        worker.start()
        while worker.is_alive():
            worker.join(0.2)
            if _stop:
                raise Stopped(_stop[0])
    except BaseException:
        _end_kernel(client, worker)
        raise
    finally:
        if old is None:
            os.environ.pop("GPTCOURSE_QUICK", None)
        else:
            os.environ["GPTCOURSE_QUICK"] = old
    if failed:
        raise failed[0]
    elapsed = time.perf_counter() - start
    files.write_text(path, notebook_text(nb))
    return elapsed


ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")


def _one_line(e: BaseException) -> str:
    """异常 → 一行说明：单元格报错时是它的 ename: evalue，否则是异常类型与第一行消息。"""
    if getattr(e, "ename", None):
        text = f"{e.ename}: {getattr(e, 'evalue', '')}"
    else:
        first = next((line for line in str(e).splitlines() if line.strip()), "")
        text = f"{type(e).__name__}: {first}"
    return ANSI_RE.sub("", text).strip()[:200]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gptcourse_kit.notebooks",
                                     description="重新执行课程笔记本（完整模式）或检查提交的输出")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_run = sub.add_parser("run", help="完整模式下从头执行笔记本并保存输出")
    p_run.add_argument("names", nargs="*", help="笔记本名，如 01_data_tokenizer；省略则全部")
    p_run.add_argument("--timeout", type=int, default=1800, help="单个单元格的超时（秒）")
    p_check = sub.add_parser("check", help="检查提交的笔记本输出")
    p_check.add_argument("names", nargs="*")
    args = parser.parse_args(argv)

    try:
        paths = notebook_paths(args.names)
    except FileNotFoundError as e:                      # 名字打错：一行，退出码 2
        print(f"错误：{e}", file=sys.stderr)
        return 2
    if not paths:
        print("notebooks/ 下没有笔记本")
        return 1
    with stop_on_signals():
        return _run_or_check(args.cmd, paths, args.timeout if args.cmd == "run" else None)


def _run_or_check(cmd: str, paths: list[Path], timeout: int | None) -> int:
    failed = 0
    for path in paths:                  # 一个笔记本坏了只报一行，接着处理其余的
        if _stop:
            return _stopped(_stop[0], "剩下的笔记本没有运行")
        if cmd == "run":
            print(f"运行 {path.name} ……", flush=True)
            try:
                elapsed = run_notebook(path, timeout=timeout)
            except Stopped as e:
                return _stopped(e.signum, f"内核已结束，{path.name} 没有改动")
            except Exception as e:      # 读不了的文件、单元格报错、内核超时……（文件保持原样）
                print(f"  失败（文件未改动）：{_one_line(e)}", flush=True)
                failed += 1
                continue
            print(f"  完成，用时 {elapsed:.1f} 秒", flush=True)
        try:
            problems = check_notebook(path)
        except Exception as e:          # 不是 JSON、不是 UTF-8、不合 nbformat 规范……
            print(f"检查 {path.name}：无法读取：{_one_line(e)}")
            failed += 1
            continue
        status = "通过" if not problems else f"{len(problems)} 个问题"
        print(f"检查 {path.name}：{status}")
        for p in problems:
            print(f"  - {p}")
        failed += bool(problems)
    if _stop:
        return _stopped(_stop[0], "已经做完的都写好了")
    return 1 if failed else 0


def _stopped(signum: int, what: str) -> int:
    """收到停止信号：一行说明，退出码 128 + 信号编号（SIGTERM 143，Ctrl+C 130）。"""
    print(f"收到 {signal.Signals(signum).name}，停止：{what}", file=sys.stderr, flush=True)
    return 128 + signum


if __name__ == "__main__":
    sys.exit(main())
