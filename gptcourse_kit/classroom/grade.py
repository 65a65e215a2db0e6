"""全班自动评分：每份作业重新判一遍——学生的代码在沙箱里的工作进程里运行，判决由沙箱外的裁判
进程得出，学生的代码碰不到检查器和判决。

流程（一份作业）：

1. 认出章节（评分单元格的 ``nbgrader.grade_id`` = ``nbXX-<练习>-check``，或文件名里的 01…05），
   找到这一章的教师版（默认 ``notebooks/0N_*.ipynb``，可用 ``reference`` 换成老师自己的版本）；
2. 拼出要执行的笔记本：教师版的学生版（演示、检查单元格都取自教师版），其中每个练习单元格换成
   作业里 ``grade_id`` 相同的单元格，学生另加（或改过）的代码单元格放在它前面最近的练习之后；
   两者都只取其中的定义（``judge.sanitize``，改绑内置函数的定义被拒绝）；作业里删掉的练习保留
   存根（计“未作答”）；一个字没写的作业不运行，每题“未作答”；
3. 在沙箱外启动裁判进程（``referee.py``，持有检查器），在沙箱（``sandbox.py``）里启动工作进程
   （``judge.py``），两者之间只有一条套接字。工作进程执行单元格；遇到检查，裁判调用检查器，检查器
   经代理调用工作进程里学生的函数，结果只以数据回来（``IN_SANDBOX`` 里的题例外：检查器在工作
   进程里运行，判决标 ``in-process``）。学生的代码累计运行超过 ``cell_timeout`` 秒就中断，
   超时的练习只计一次（它定义的函数随即停用）；整份作业超过 ``timeout`` 秒就杀掉整个沙箱，
   没判到的题计“超时”；演示单元格出错、检查中途改动了评分用的对象，都作为说明写进备注；
4. 裁判把判决写在它自己的标准输出上（沙箱碰不到），评分进程读它；套接字上出现不合协议的内容，
   整份作业记 0 分（疑似伪造）。

``grade`` 用 ``jobs`` 个线程同时评多份作业（每份一个沙箱），每评完一份就回调 ``on_result``，
所以评分中途被杀也不会丢掉已经评完的成绩。成绩表、CSV 与权重见 ``gradebook.py``。
"""
from __future__ import annotations

import ast
import importlib
import io
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from gptcourse.errors import UserError
from gptcourse.runtime import ROOT

from . import sandbox
from .judge import sanitize

GRADE_ID = re.compile(r"^(nb0[1-5])-(.+)-check$")
REFERENCE = ROOT / "notebooks"
NAME_RULE = "<学号>_<姓名>.ipynb"
# 检查器必须拿着活的对象、不能经裁判进程代理的练习：检查器在沙箱里与学生的代码同一个进程里运行，
# 判决标为 in-process（见 referee.py）。其余练习都由沙箱外的裁判进程判——包括改动模型和优化器的
# 03 train_step、accumulate_grads、titled_step：工作进程把改动后的参数、梯度、优化器状态和全局
# 随机数状态发回裁判，裁判写回它自己的对象（``referee.write_back``）。不能代理的原因：
# - 02 的 nn.Module 类（mlp、rmsnorm、attention_module、gpt_model）与 leaky_model：检查器要
#   ``isinstance(…, nn.Module)``，gpt_model 还要核对输出头与词嵌入是**同一个**张量（权重共享）；
# - 03 cross_entropy：检查器要读函数的源代码、在调用时把 F.cross_entropy 换成“探子”（不许调用它）；
# - 03 param_groups：按参数对象的 ``id`` 核对分组；estimate_loss、training_loop：在模型上挂前向
#   钩子，记下 training 模式和是否记录梯度；aux_loss：返回的损失要能反向传播到学生的模型。
IN_SANDBOX: dict[str, frozenset[str]] = {
    "nb02": frozenset({"mlp", "rmsnorm", "attention_module", "gpt_model", "leaky_model"}),
    "nb03": frozenset({"cross_entropy", "param_groups", "estimate_loss", "training_loop",
                       "aux_loss"}),
}


class GradingError(UserError):
    """评分做不下去（教师版找不到、检查单元格的格式不对、学号重复……）。"""


def readable(path: Path | str) -> str:
    """路径的文字：文件名的字节按 UTF-8 解，不行再按 GB18030（中文 Windows 的压缩包解到 Linux 上
    常是 GBK 的名字），都不行才用 \\x.. 转义——成绩册、JSON 与反馈页里从不出现写不出去的字符。"""
    raw = os.fsencode(path)
    for codec in ("utf-8", "gb18030"):
        try:
            return raw.decode(codec)
        except UnicodeDecodeError:
            continue
    return raw.decode("utf-8", "backslashreplace")


def student_of(path: Path) -> tuple[str, str]:
    """文件名 ``<学号>_<姓名>[_其他].ipynb`` → (学号, 姓名)；没有下划线时整个文件名当学号。"""
    sid, _, rest = Path(readable(Path(path).name)).stem.partition("_")
    return sid.strip(), rest.split("_")[0].strip()


@dataclass
class Submission:
    path: Path
    chapter: str | None = None
    exercises: list[dict] = field(default_factory=list)
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    log: str = ""                    # 裁判进程的最后几行输出（只在出错时保存，供老师排查）

    @property
    def student(self) -> str:
        return student_of(self.path)[0]

    @property
    def name(self) -> str:
        return student_of(self.path)[1]

    @property
    def score(self) -> int:
        return sum(e["passed"] for e in self.exercises)

    def to_dict(self) -> dict:
        return {"notebook": readable(self.path), "student": self.student, "name": self.name,
                "chapter": self.chapter, "score": self.score, "total": len(self.exercises),
                "error": self.error, "notes": self.notes, "seconds": round(self.seconds, 1),
                "exercises": self.exercises, **({"judge_log": self.log} if self.log else {})}


def chapter_of(nb: nbformat.NotebookNode, path: Path) -> str | None:
    """作业属于哪一章：先看评分单元格的 grade_id，再看文件名里的 01…05。"""
    ids = [c.get("metadata", {}).get("nbgrader", {}).get("grade_id", "") for c in nb.cells]
    found = [m.group(1) for m in map(GRADE_ID.match, ids) if m]
    if found:
        return max(set(found), key=found.count)
    m = re.search(r"0([1-5])", path.name)
    return f"nb0{m.group(1)}" if m else None


def exercise_names(chapter: str) -> list[str]:
    """这一章 ``gptcourse.check.<chapter>.EXERCISES`` 的练习名（按笔记本里出现的顺序）。"""
    exercises = importlib.import_module(f"gptcourse.check.{chapter}").EXERCISES
    return [str(e) for e in exercises]


def _exercise_for(chapter: str, checker: str) -> str:
    """检查器名 → EXERCISES 里的练习名（可能写成 ``count_pairs`` 或 ``nb01.count_pairs``）。"""
    for name in exercise_names(chapter):
        if name == checker or re.split(r"[.:/]", name)[-1] == checker:
            return name
    return checker


# ---------------------------------------------------------------- 拼出要判的笔记本
def reference_path(chapter: str, reference: Path | None = None) -> Path:
    folder = Path(reference) if reference else REFERENCE
    num = chapter[2:]
    found = sorted(folder.glob(f"{num}_*.ipynb")) or sorted(folder.glob(f"{num}*.ipynb"))
    if not found:
        raise GradingError(f"在 {folder} 里找不到第 {num} 章的教师版（{num}_*.ipynb）")
    return found[0]


def _check_call(source: str, where: str) -> tuple[str, str, list[str], dict[str, str]]:
    """教师版的检查单元格 ``gc.check.nbXX.name(参数…)``
    → (nbXX, name, 参数的源代码, 关键字参数的源代码)。"""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise GradingError(f"{where}：检查单元格不是合法的 Python（{e.msg}）") from None
    call = tree.body[0].value if len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr) \
        else None
    parts = ast.unparse(call.func).split(".") if isinstance(call, ast.Call) else []
    if len(parts) < 3 or parts[-3] != "check" or not re.fullmatch(r"nb0[1-5]", parts[-2]) \
            or any(k.arg is None for k in call.keywords) \
            or any(isinstance(a, ast.Starred) for a in call.args):
        raise GradingError(f"{where}：检查单元格应当只有一行 gc.check.nbXX.<练习>(参数…)，"
                           f"收到 {source.strip()[:80]!r}")

    def text(node: ast.AST) -> str:
        return ast.get_source_segment(source, node) or ast.unparse(node)
    return parts[-2], parts[-1], [text(a) for a in call.args], \
        {k.arg: text(k.value) for k in call.keywords}


def _gid(cell) -> str:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")


def _is_solution(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.get("cell_type") == "code" and bool(meta.get("solution")) and bool(_gid(cell))


def _is_check(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.get("cell_type") == "code" and bool(meta.get("grade")) \
        and not meta.get("solution") and bool(GRADE_ID.match(_gid(cell)))


def validate_reference(reference: nbformat.NotebookNode, where: str = "教师版") -> None:
    """教师版的答案与检查一一对应，否则 GradingError：带 ``### BEGIN SOLUTION`` 的代码单元格
    必须有 nbgrader ``solution`` 元数据（否则评分时用的是存根，这道题谁也得不了分），每个检查
    单元格 ``nbXX-<名字>-check`` 必须有 grade_id 为 ``nbXX-<名字>`` 的答案单元格。"""
    solutions = set()
    for i, c in enumerate(reference.cells):
        if c.get("cell_type") != "code":
            continue
        if _is_solution(c):
            solutions.add(_gid(c))
        elif "### BEGIN SOLUTION" in c.get("source", "") and not _is_check(c):
            raise GradingError(f"{where}第 {i} 格有 ### BEGIN SOLUTION 但没有 nbgrader 的 "
                               "solution 元数据：这道题评分时只会拿到存根")
    for i, c in enumerate(reference.cells):
        if _is_check(c) and _gid(c).removesuffix("-check") not in solutions:
            raise GradingError(f"{where}第 {i} 格（{_gid(c)}）找不到它的答案单元格 "
                               f"{_gid(c).removesuffix('-check')}")


def _known_sources(*notebooks: nbformat.NotebookNode) -> set[str]:
    return {c.get("source", "") for nb in notebooks for c in nb.cells
            if c.get("cell_type") == "code"}


def _student_cells(submission: nbformat.NotebookNode, base: nbformat.NotebookNode,
                   reference: nbformat.NotebookNode) -> list[tuple[str | None, str]]:
    """作业里学生自己写的（新加的或改过的）非练习代码单元格
    → [(它前面最近的练习 grade_id, 源代码)]。
    与学生版或教师版里某一格一字不差的单元格不算学生写的。"""
    known = _known_sources(base, reference)
    found, last = [], None
    for c in submission.cells:
        if c.get("cell_type") != "code":
            continue
        if _is_solution(c):
            last = _gid(c)
        elif not _is_check(c) and c.get("source", "").strip() and c.get("source") not in known:
            found.append((last, c.get("source", "")))
    return found


def is_blank(submission: nbformat.NotebookNode, reference: nbformat.NotebookNode) -> bool:
    """作业里的每个代码单元格都与学生版一字不差（一个字也没写）。"""
    from .student import student_notebook
    known = {c.source for c in student_notebook(reference).cells if c.cell_type == "code"}
    return all(c.get("source", "") in known for c in submission.cells
               if c.get("cell_type") == "code")


COMMITTED = re.compile(r"第一次作答：([A-Z])")        # gc.check.choice 在学员的内核里打印的那一句


def _committed(submission: nbformat.NotebookNode) -> dict[str, str]:
    """作业的检查单元格输出里记下的“第一次作答”字母 → {答案单元格的 grade_id: 字母}。"""
    found = {}
    for c in submission.cells:
        if not _is_check(c):
            continue
        text = "".join(str(o.get("text", "")) for o in c.get("outputs", [])
                       if o.get("output_type") == "stream")
        m = COMMITTED.search(text)
        if m:
            found[_gid(c).removesuffix("-check")] = m.group(1)
    return found


def _first_answer(source: str, letter: str) -> tuple[str, str] | None:
    """预测题的答案单元格（``guess_x = "B"``）后来改了字母
    → (按第一次作答改回的源代码, 后来的字母)；不是这种单元格，或字母没改，返回 None。"""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    body = [n for n in tree.body if not (isinstance(n, ast.Expr)
                                         and isinstance(n.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Assign) or len(body[0].targets) != 1 \
            or not isinstance(body[0].targets[0], ast.Name) \
            or not isinstance(body[0].value, ast.Constant) \
            or not isinstance(body[0].value.value, str):
        return None
    now = body[0].value.value.strip().strip("()（）.。").upper()
    if now == letter:
        return None
    return f"{body[0].targets[0].id} = {letter!r}", now or repr(body[0].value.value)


def build_spec(reference: nbformat.NotebookNode, submission: nbformat.NotebookNode,
               chapter: str, cell_timeout: float, where: str = "教师版") -> tuple[dict, list[str]]:
    """教师版 + 作业 → 裁判要执行的单元格表，以及作业中被忽略的语句的说明。

    练习单元格换成作业里 grade_id 相同的那一格；学生自己加的（或改过的）代码单元格也算学生写的，
    其中的定义放在它前面最近的那道练习之后（没有就放在第一道练习之前）。两种单元格都只取定义
    （``judge.sanitize``）。"""
    from .student import student_notebook

    validate_reference(reference, where)
    committed = _committed(submission)
    base = student_notebook(reference)
    stubs = {_gid(c): c.source for c in base.cells if _is_solution(c)}
    answers, notes = _answers(submission, stubs)
    extra: dict[str | None, list[str]] = {}
    for after, source in _student_cells(submission, base, reference):
        extra.setdefault(after if after in answers else None, []).append(source)
    _adopt_unlabelled(answers, stubs, extra, notes)
    checks = {GRADE_ID.match(_gid(c)).group(2): c for c in base.cells if _is_check(c)}
    cells, dropped_extra = [], 0

    def add_extra(key) -> None:
        nonlocal dropped_extra
        for source in extra.pop(key, []):
            text, names, dropped, error, refused = sanitize(source)
            dropped_extra += dropped
            notes.extend(f"你加的单元格：不能用 {n} 这个名字（它是内置函数或评分用的名字），已忽略"
                         for n in refused)
            if error is None and text:
                cells.append({"kind": "student", "source": text, "names": names})

    for i, c in enumerate(base.cells):
        if c.cell_type != "code":
            continue
        g = _gid(c)
        if _is_check(c):
            module, checker, args, kwargs = _check_call(c.source, f"{where}第 {i} 格（{g}）")
            ex = _exercise_for(chapter, checker)
            if all(x.get("exercise") != ex or x["kind"] != "check" for x in cells):
                cells.append({"kind": "check", "exercise": ex, "module": module,
                              "checker": checker, "args": args, "kwargs": kwargs})  # 每题只判一次
        elif _is_solution(c):
            if None in extra:
                add_extra(None)
            short = g.split("-", 1)[-1]
            ex = (_exercise_for(chapter, _check_call(checks[short].source, g)[1])
                  if short in checks else g)
            answer = answers.get(g, c.source)
            first = _first_answer(answer, committed[g]) if g in committed else None
            if first is not None:                  # 先猜后看：评分按第一次作答的字母
                answer = first[0]
                notes.append(f"练习 {ex}：按第一次作答 {committed[g]} 评分"
                             f"（后来改成了 {first[1]}）")
            source, names, dropped, error, refused = sanitize(answer)
            notes.extend(f"练习 {ex}：疑似直接用了包里的参考实现（{what}），请老师看一眼"
                         for what in reference_uses(answer))
            if dropped:
                notes.append(f"练习 {ex}：忽略了 {dropped} 条直接执行的语句（评分只采用定义）")
            notes.extend(f"练习 {ex}：不能用 {n} 这个名字（它是内置函数或评分用的名字），已忽略"
                         for n in refused)
            cells.append({"kind": "solution", "exercise": ex, "source": source, "names": names,
                          "error": error})
            add_extra(g)
        else:
            cells.append({"kind": "code", "source": c.source})
    if dropped_extra:
        notes.append(f"你加的单元格：忽略了 {dropped_extra} 条直接执行的语句（评分只采用定义）")
    order = exercise_names(chapter)
    checked = [c["exercise"] for c in cells if c["kind"] == "check"]
    exercises = sorted(dict.fromkeys(checked), key=lambda e: (
        order.index(e) if e in order else len(order), checked.index(e)))
    return {"chapter": chapter, "cell_timeout": cell_timeout, "cells": cells,
            "exercises": exercises, "order": checked}, notes


PACKAGE_ROOTS = ("gc", "gptcourse")


def _dotted(node: ast.AST) -> str | None:
    """``gc.model.MLP`` 这样以包名开头的属性链 → 它的文字；不是 → None。"""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in PACKAGE_ROOTS and parts:
        return ".".join([node.id, *reversed(parts)])
    return None


def reference_uses(source: str) -> list[str]:
    """答案里直接拿包的参考实现充数的地方（grading review F2）：把 ``gc.…`` 直接绑到练习的名字上、
    继承 ``gc.…`` 的类却什么都没写、函数只有一句 ``return gc.…(…)``、调用检查器或 ``solution_*``。
    只是提示老师看一眼，不扣分：用包里的工具函数写答案本身是允许的。"""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None \
                and (name := _dotted(node.value)):
            found.append(f"= {name}")
        elif isinstance(node, ast.ClassDef):
            bases = [b for b in map(_dotted, node.bases) if b]
            empty = all(isinstance(x, ast.Pass) or (isinstance(x, ast.Expr) and isinstance(
                x.value, ast.Constant)) for x in node.body)
            if bases and empty:
                found.append(f"class {node.name}({bases[0]}) 里什么都没写")
        elif isinstance(node, ast.FunctionDef):
            body = [x for x in node.body
                    if not (isinstance(x, ast.Expr) and isinstance(x.value, ast.Constant))]
            call = body[0].value if len(body) == 1 and isinstance(body[0], ast.Return) else None
            if isinstance(call, ast.Call) and (name := _dotted(call.func)):
                found.append(f"{node.name} 只是 return {name}(…)")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _dotted(node.func) or getattr(node.func, "id", None) or ""
            if name.startswith(("gc.check.", "gptcourse.check.")) or \
                    name.rsplit(".", 1)[-1].startswith("solution_"):
                found.append(f"调用了 {name}")
    return list(dict.fromkeys(found))


def _answers(submission: nbformat.NotebookNode,
             stubs: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """每道题的答案单元格 → ({grade_id: 源代码}, 说明)。复制出来的同名单元格（Jupyter 复制粘贴
    会连 grade_id 一起复制）：像 Restart & Run All 那样，评最后一个改过的（没改过就是最后一个）。"""
    copies: dict[str, list[str]] = {}
    for c in submission.cells:
        if _is_solution(c):
            copies.setdefault(_gid(c), []).append(c.get("source", ""))
    answers, notes = {}, []
    for g, sources in copies.items():
        written = [k for k, src in enumerate(sources) if src != stubs.get(g)]
        k = written[-1] if written else len(sources) - 1
        answers[g] = sources[k]
        if len(sources) > 1:
            notes.append(f"练习 {g.split('-', 1)[-1]}：作业里有 {len(sources)} 个同名的答案单元格，"
                         f"评的是第 {k + 1} 个（最后一个写过的）")
    return answers, notes


def _adopt_unlabelled(answers: dict[str, str], stubs: dict[str, str],
                      extra: dict[str | None, list[str]], notes: list[str]) -> None:
    """答案单元格的 nbgrader 信息丢了（有的编辑器会删掉不认识的元数据）：作业里没有这道题的
    答案单元格，而学生自己的某个单元格定义了存根里的全部名字 → 按那个单元格评分，并说明。"""
    for g, stub in stubs.items():
        wanted = set(sanitize(stub)[1])
        if g in answers or not wanted:
            continue
        for sources in extra.values():
            match = [src for src in sources if wanted <= set(sanitize(src)[1])]
            if match:
                answers[g] = match[-1]
                sources.remove(match[-1])
                notes.append(f"练习 {g.split('-', 1)[-1]}：答案单元格的评分信息丢了，按你写的 "
                             f"{'、'.join(sorted(wanted))} 评分")
                break


# ---------------------------------------------------------------- 在沙箱里判
@dataclass
class Options:
    timeout: float = 600
    cell_timeout: float = 120
    reference: Path | None = None
    limits: sandbox.Limits = field(default_factory=sandbox.Limits)
    sealed: bool = True
    hide: tuple[Path, ...] = ()


def _env(scratch: Path) -> dict:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(scratch),
            "LANG": "C.UTF-8", "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1", "GPTCOURSE_QUICK": "1", "MPLBACKEND": "Agg",
            "MPLCONFIGDIR": str(scratch / ".mpl"), "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1", "TMPDIR": "/tmp"}


def _read_lines(f, sink: list[str]) -> None:
    with f:
        for line in f:
            if len(sink) < 1000:
                sink.append(line.rstrip("\n"))


def _collect(lines: list[str], expected: list[str]
             ) -> tuple[dict[str, dict], bool, str | None, list[str]]:
    """读裁判进程写来的行（它在沙箱外，学生的代码碰不到它的输出）
    → (练习 → 判决, 是否写完, 伪造的说明或 None, 说明)。"""
    verdicts: dict[str, dict] = {}
    notes: list[str] = []
    done, forged = False, None
    for line in lines:
        try:
            v = json.loads(line)
        except ValueError:
            continue
        if not isinstance(v, dict):
            continue
        if "note" in v:
            if len(notes) < 20:
                notes.append(str(v["note"])[:300])
        elif "forged" in v:
            forged = str(v["forged"])
        elif v.get("done") is True:
            done = True
        elif v.get("exercise") in expected and v["exercise"] not in verdicts:
            verdicts[v["exercise"]] = {"passed": v["passed"] is True, "status": v["status"],
                                       "message": str(v["message"])[:400],
                                       "judged": v.get("judged", "referee")}
    return verdicts, done, forged, notes


FORGED = "评分通道里出现了不是协议的内容（疑似伪造成绩）：整份作业记 0 分"


def _judge(spec: dict, opts: Options) -> tuple[dict[str, dict], str | None, list[str]]:
    """一份作业：裁判进程（沙箱外，持有检查器）+ 工作进程（沙箱里，运行学生的代码），
    两者之间只有一条套接字。"""
    scratch = Path(tempfile.mkdtemp(prefix="gptcourse-grade-"))
    private = Path(tempfile.mkdtemp(prefix="gptcourse-referee-"))   # 只有裁判进程用，沙箱里看不到
    full = {**spec, "in_sandbox": sorted(IN_SANDBOX.get(spec["chapter"], ()))}
    log = scratch.parent / f"{scratch.name}.log"
    referee = None
    try:
        text = json.dumps(full, ensure_ascii=False)
        (scratch / "spec.json").write_text(text, encoding="utf-8")
        os.chmod(scratch / "spec.json", 0o644)
        (private / "spec.json").write_text(text, encoding="utf-8")
        mine, theirs = socket.socketpair()
        lines: list[str] = []
        # 裁判的环境里没有一个路径是沙箱能写的（HOME、matplotlib 的配置目录都在 private 里），
        # -s：不读用户目录里的 site-packages
        env = {**_env(private), "PYTHONPATH": str(ROOT)}
        with open(private / "log.txt", "wb") as err:
            referee = subprocess.Popen(
                [sys.executable, "-s", "-m", "gptcourse_kit.classroom.referee",
                 str(private / "spec.json"), str(mine.fileno())],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, env=env,
                pass_fds=(mine.fileno(),), cwd=ROOT, preexec_fn=_referee_limits(opts.limits))
        mine.close()
        reader = threading.Thread(target=_read_lines,
                                  args=(io.TextIOWrapper(referee.stdout, encoding="utf-8",
                                                         errors="replace"), lines), daemon=True)
        reader.start()
        argv = [sys.executable, "-m", "gptcourse_kit.classroom.judge", str(scratch / "spec.json"),
                str(theirs.fileno())]
        try:
            out = sandbox.run(argv, scratch=scratch, timeout=opts.timeout, limits=opts.limits,
                              env=_env(scratch), pass_fds=(theirs.fileno(),),
                              hide=list(opts.hide), sealed=opts.sealed, log=log)
        finally:
            theirs.close()
        try:
            referee.wait(timeout=60)
        except subprocess.TimeoutExpired:
            referee.kill()
            referee.wait()
        reader.join(timeout=10)
        log.unlink(missing_ok=True)
        spec["log"] = out.log_tail + (private / "log.txt").read_bytes()[-2000:].decode(
            "utf-8", "replace")
    finally:
        if referee is not None and referee.poll() is None:
            referee.kill()
            referee.wait()
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(private, ignore_errors=True)
    verdicts, done, forged, notes = _collect(lines, spec["order"])
    if forged is not None:
        return {}, FORGED, notes
    if out.returncode is None:
        return verdicts, f"整份作业超过 {opts.timeout:g} 秒，已停止", notes
    if not done:
        return verdicts, f"作业的进程意外退出（返回码 {out.returncode}），没判到的题记 0 分", notes
    return verdicts, None, notes


def _referee_limits(limits: sandbox.Limits):
    """裁判进程的限额：只有内存和 CPU（它只运行老师的检查器，读的都是数据）。"""
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory, limits.memory))
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu, limits.cpu))
    return apply


def grade_one(path: Path, opts: Options | None = None) -> Submission:
    opts = opts or Options()
    sub = Submission(Path(path))
    start = time.monotonic()
    try:
        nb = nbformat.read(path, as_version=4)
        if not isinstance(nb.get("cells"), list):
            raise ValueError("没有 cells")
    except Exception as e:  # noqa: BLE001 - 坏文件只影响这一份作业
        sub.error = f"读不了这个笔记本：{type(e).__name__}"
        return sub
    sub.chapter = chapter_of(nb, sub.path)
    if sub.chapter is None:
        sub.error = "认不出是哪一章的作业（没有评分单元格，文件名里也没有 01…05）"
        return sub
    ref = reference_path(sub.chapter, opts.reference)
    reference = nbformat.read(ref, as_version=4)
    spec, sub.notes = build_spec(reference, nb, sub.chapter, opts.cell_timeout,
                                 where=f"{ref.name} ")
    if is_blank(nb, reference):                   # 一个字也没写：不必运行，每题都是“未作答”
        sub.exercises = [{"exercise": name, "passed": False, "status": "未作答",
                          "message": "还没完成：练习单元格还是学生版的原样",
                          "judged": "not-run"}
                         for name in spec["exercises"]]
        sub.seconds = time.monotonic() - start
        return sub
    verdicts, sub.error, judge_notes = _judge(spec, opts)
    sub.notes += judge_notes
    if sub.error:
        sub.log = spec.get("log", "")[-2000:]
    for name in spec["exercises"]:
        v = verdicts.get(name)
        if v is None:
            timed_out = sub.error and sub.error.startswith("整份作业超过")
            v = {"passed": False, "status": "超时" if timed_out else "出错",
                 "message": ("超时：" if timed_out else "出错：") + (sub.error or "没有判到这一题")}
        # judged：referee = 裁判进程（沙箱外）调用检查器；in-process = 检查器在沙箱里、与学生的
        # 代码同一个进程（IN_SANDBOX 的题）
        v.setdefault("judged", "in-process" if name in IN_SANDBOX.get(sub.chapter, ())
                     else "referee")
        sub.exercises.append({"exercise": name, **v})
    sub.seconds = time.monotonic() - start
    return sub


def check_names(paths: Iterable[Path]) -> None:
    """同一章里两份作业的学号相同 → GradingError（成绩表会互相覆盖）。"""
    seen: dict[tuple[str, str | None], Path] = {}
    for p in map(Path, paths):
        try:
            chapter = chapter_of(nbformat.read(p, as_version=4), p)
        except Exception:  # noqa: BLE001 - 坏文件在评分时再报
            continue
        key = (student_of(p)[0], chapter)
        if key in seen:
            raise GradingError(f"两份作业的学号都是 {key[0]}：{seen[key]} 与 {p}"
                               f"（文件名请用 {NAME_RULE}）")
        seen[key] = p


def grade(paths: list[Path], opts: Options | None = None, jobs: int = 1,
          on_result: Callable[[Submission], None] | None = None) -> list[Submission]:
    """评一批作业（``jobs`` 份同时评）；每评完一份就调用 on_result；返回值按输入顺序。"""
    paths = [Path(p) for p in paths]
    opts = opts or Options()
    why = sandbox.probe() if opts.sealed else None
    if why is not None:
        print(sandbox.UNSEALED.format(why=why), file=sys.stderr)
        opts = Options(**{**vars(opts), "sealed": False})
    if opts.sealed and not opts.hide:                  # 沙箱里看不到同学的作业和教师版
        folders = {p.resolve().parent for p in paths}
        folders.add(Path(opts.reference or REFERENCE).resolve())
        opts = Options(**{**vars(opts), "hide": tuple(folders)})
    lock = threading.Lock()

    from .student import AuthoringError

    def one(p: Path) -> Submission:
        try:
            sub = grade_one(p, opts)
        except (GradingError, AuthoringError) as e:
            sub = Submission(p, error=str(e))
        except Exception as e:  # noqa: BLE001 - 评分工具自己的意外错误也只影响这一份
            sub = Submission(p, error=f"评分工具内部错误 {type(e).__name__}: {e}")
        if on_result is not None:
            with lock:
                on_result(sub)
        return sub

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, paths))
