"""所有练习检查器共用的工具（课堂工具包生成的学生版与自动评分都依赖这些约定）：

- 检查器用 ``@exercise`` 装饰，返回 True/False，打印“正确 ✓”、“还不对 ✗：…”或“还没完成：…”
  （存根、``None`` / ``...``），从不抛出——严格模式（``strict()``）下没做完或做错抛 AssertionError；
- 练习名带章节（``"nb02.guess_offset"``，取自模块名 ``gptcourse.check.nb02*``），结果记在
  ``RESULTS[名字]`` = ``{"key", "chapter", "exercise", "passed", "message"}``，评分读它；
- 参考答案只有一份：教师版笔记本里的答案单元格（``show_solution`` 打印它）；学生版的代替品
  登记在 ``FALLBACKS``（``register``），学生版的单元格用 ``mine(...)`` 与 ``if ready(...)``。
"""
from __future__ import annotations

import functools
import inspect
import operator
import os
import re
import sys
from collections.abc import Callable

FALLBACKS: dict[str, Callable | tuple] = {}    # "nbXX.练习名" → 学生版的代替品（fallback 用）
RESULTS: dict[str, dict] = {}                  # "nbXX.练习名" → 最近一次检查的结果
_LAST: dict[str, str] = {}                     # 正在运行的检查器最后一句提示
_NOTED: set[str] = set()                       # 已经说过“还没完成：先用包里的”的练习
TODO = "还没完成"
STANDIN = "__gptcourse_standin__"             # mine 换上的代替品带着这个属性（值是练习标签）
_CHAPTER = re.compile(r"\bnb0[1-5]")


class NotDone(Exception):
    """学员还没写这一题（函数抛出 NotImplementedError，或答案仍是 None / ...）。"""


class Wrong(Exception):
    """检查器里的一句“还不对”（``_got`` 抛出）：``@exercise`` 把它当作 ``_fail(提示)``。"""


def chapter_of(module: str) -> str:
    """``gptcourse.check.nb02_model`` → ``nb02``。"""
    m = _CHAPTER.search(module.rsplit(".", 1)[-1])
    if m is None:
        raise ValueError(f"{module} 不是某一章的检查器模块（模块名应以 nb01…nb05 开头）")
    return m.group(0)


def register(chapter: str, fallbacks: dict[str, Callable | tuple]) -> dict[str, Callable | tuple]:
    """把一章学生版的代替品登记成 ``"nbXX.练习名"``（``fallback`` 用），返回原字典。"""
    for name, fn in fallbacks.items():
        FALLBACKS[f"{chapter}.{name}"] = fn
    return fallbacks


@functools.cache
def solution_cells() -> dict[str, str]:
    """``"nb02.causal_mask"`` → 教师版里它的答案单元格（grade_id ``nbXX-练习名``）的源码。"""
    import json

    from ..runtime import ROOT

    cells = {}
    for path in sorted((ROOT / "notebooks").glob("0[1-5]_*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            gid = meta.get("grade_id", "")
            if meta.get("solution") and _CHAPTER.match(gid):
                cells[gid[:4] + "." + gid[5:].replace("-", "_")] = "".join(cell["source"])
    return cells


def solution_key(name: str) -> str:
    """``"nb05.guess_offset"`` 原样返回；不带章节的名字只在恰好一章有它时才认得。"""
    keys = solution_cells()
    if name in keys:
        return name
    hits = [k for k in keys if k.split(".", 1)[1] == name]
    if len(hits) == 1:
        return hits[0]
    if hits:
        raise ValueError(f"有几章都有练习 {name!r}：{'、'.join(hits)}，请写上章节，如 {hits[-1]!r}")
    raise ValueError(f"没有名为 {name!r} 的练习；可选：{', '.join(keys)}")


def solution_cell(name: str) -> str:
    """练习 ``name`` 在教师版笔记本里的答案单元格的源码（``show_solution`` 打印的就是它）。"""
    return solution_cells()[solution_key(name)]


SOLUTIONS_ENV = "GPTCOURSE_SOLUTIONS"
_ENABLED: list[bool] = []                      # enable_solutions() 之后非空


def solutions_enabled() -> bool:
    """老师打开了“显示参考答案”（``enable_solutions()`` 或 ``GPTCOURSE_SOLUTIONS=1``）；默认关。"""
    return bool(_ENABLED) or os.environ.get(SOLUTIONS_ENV, "") not in ("", "0")


def enable_solutions(on: bool = True) -> None:
    """（老师）在本进程里打开 / 关上 ``show_solution``。学生版里没有这一行。"""
    _ENABLED[:] = [True] if on else []


def show_solution(name: str) -> bool:
    """（教师版）打印练习（``"nb05.guess_offset"``）的答案单元格；没打开时只说一句，返回 False。"""
    key = solution_key(name)
    if not solutions_enabled():
        print(f"参考答案只在教师版里显示（{key}）：老师先运行 gc.check.enable_solutions()，"
              f"或设环境变量 {SOLUTIONS_ENV}=1")
        return False
    print(solution_cell(key))
    return True


def fallback(key: str, which: int | None = None) -> Callable:
    """练习 ``key`` 登记的代替品，包成不带名字与源码链接的函数（``??`` 看不到答案），给
    ``mine(..., fallback=...)`` 用；一题有几个代替品时 ``which`` 选第几个。"""
    if key not in FALLBACKS:
        raise ValueError(f"练习 {key!r} 没有代替品；可选：{', '.join(FALLBACKS)}")
    ref = FALLBACKS[key]
    if isinstance(ref, tuple) != (which is not None):
        raise ValueError(f"{key}：一题几个代替品时要给 which（第几个），只有一个时不给")
    if which is not None:
        ref = ref[which]

    def standin(*args, **kwargs):
        return ref(*args, **kwargs)

    standin.__name__ = standin.__qualname__ = key.replace(".", "_")
    standin.__doc__ = f"练习 {key} 的代替品（包里的版本）。"
    return standin


def results() -> list[dict]:
    """本进程里检查过的每个练习的结果（评分工具读取）。"""
    return [dict(r) for r in RESULTS.values()]


STRICT_ENV = ("NBGRADER_EXECUTION", "GPTCOURSE_STRICT")
_OFF = ("", "0", "false", "no", "off")                  # 不分大小写、去掉空格；没设也算关


def strict() -> bool:
    """严格模式（nbgrader 运行时自己设 ``NBGRADER_EXECUTION``，或 ``GPTCOURSE_STRICT=1``）：没做完或
    做错时检查单元格抛出 AssertionError（文字不变），nbgrader 据此给 0 分。"""
    return any(os.environ.get(n, "").strip().lower() not in _OFF for n in STRICT_ENV)


def exercise(checker: Callable) -> Callable:
    """把检查器登记为练习：记录结果，把“还没写完”和意外错误都变成一句提示。``record`` 在装饰时
    绑定：学员的函数在检查中途改掉 ``_common._record`` 也改不了结果。"""
    name = checker.__name__
    chapter = chapter_of(checker.__module__)
    record, is_strict, fail = _record, strict, _fail

    def finish(passed: bool, message: str) -> bool:
        record(chapter, name, passed, message)
        if not passed and is_strict():
            raise AssertionError(message)
        return passed

    @functools.wraps(checker)
    def run(*args, **kwargs) -> bool:
        _LAST.clear()
        _CURRENT[:] = [f"{chapter}.{name}"]             # choice() 按练习记下第一次作答
        for a in args:
            if a is None or a is Ellipsis:
                return finish(False, _todo(f"{name} 的答案还是 {a!r}"))
            if getattr(a, STANDIN, None):                  # mine 换上的包里的版本：不是学员写的
                return finish(False,
                              _todo(f"{name}：这里拿到的是包里的代替品：先完成"
                                    f"{getattr(a, STANDIN)}，再运行它的单元格"))
        try:
            passed = bool(checker(*args, **kwargs))
            message = _LAST.get("message", "")
        except NotDone as e:
            passed, message = False, _todo(str(e))
        except Wrong as e:
            passed, message = fail(str(e)), _LAST["message"]
        except (Exception, SystemExit) as e:  # noqa: BLE001 - 检查器绝不能让笔记本停下
            passed, message = False, _fail(f"检查时出错 {type(e).__name__}: {e}")
        return finish(passed, message)

    run.is_exercise = True
    run.chapter, run.key = chapter, f"{chapter}.{name}"
    return run


def _record(chapter: str, name: str, passed: bool, message: str) -> bool:
    key = f"{chapter}.{name}"
    RESULTS[key] = {"key": key, "chapter": chapter, "exercise": name, "passed": passed,
                    "message": message}
    return passed


def _todo(msg: str) -> str:
    text = f"{TODO}：{msg.removeprefix(TODO + '：')}"          # 存根的提示本身已带“还没完成：”
    print(text)
    _LAST["message"] = text
    return text


def _ok() -> bool:
    print("正确 ✓")
    _LAST["message"] = "正确"
    return True


def _fail(msg: str) -> bool:
    print(f"还不对 ✗：{msg}")
    _LAST["message"] = f"还不对：{msg}"
    return False


def _call(fn, *args):
    """调用学员的函数 → (结果, None)；出错时 (None, 一句中文提示)；存根时抛出 NotDone。"""
    if not callable(fn):
        return None, f"需要传入一个函数，收到的是 {type(fn).__name__}"
    try:
        return fn(*args), None
    except NotImplementedError as e:
        raise NotDone(str(e) or getattr(fn, "__name__", "这个函数") + " 还是存根") from None
    except (Exception, SystemExit) as e:  # noqa: BLE001 - 学员代码里的任何错误都转成一句提示
        return None, f"调用时出错 {type(e).__name__}: {e}"


def _got(fn, *args, where: str = "", then: str = ""):
    """``_call`` 的结果；调用出错时以“还不对：{where}{提示}{then}”结束检查（抛出 ``Wrong``）。"""
    got, err = _call(fn, *args)
    if err:
        raise Wrong(where + err + then)
    return got


def _compare(fn: Callable, ref: Callable, cases: list[tuple], name: str,
             normalize: Callable = lambda v: v, same: Callable = operator.eq) -> bool:
    """逐个输入比较 fn 与参考答案（``same(normalize(你的), normalize(参考))``，默认 ==）；
    第一处不同就报告输入、你的输出和期望输出。"""
    if not callable(fn):
        return _fail(f"{name} 需要传入一个函数，收到的是 {type(fn).__name__}")
    for args in cases:
        shown = ", ".join(repr(a) for a in args)
        got = _got(fn, *args, where=f"{name}({shown}) ")
        want = ref(*args)
        try:
            same_ = bool(same(normalize(got), normalize(want)))
        except Exception:  # noqa: BLE001
            same_ = False
        if not same_:
            return _fail(f"{name}({shown})\n  你的结果：{got!r}\n  期望结果：{want!r}")
    return _ok()


_CURRENT: list[str] = []                       # 正在检查的练习（"nbXX.名字"），choice() 用
COMMITTED: dict[str, str] = {}                 # 练习 → 学员在这个内核里第一次交的字母
COMMIT_ENV = "GPTCOURSE_COMMIT"
COMMIT_MARK = "第一次作答："                    # 评分工具在作业的检查单元格输出里找这一句


def committing() -> bool:
    """选择题“第一次作答才算”：只在 Jupyter 内核里开；``GPTCOURSE_COMMIT=1`` / ``0`` 强制开关。"""
    env = os.environ.get(COMMIT_ENV, "")
    if env:
        return env != "0"
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and type(shell).__module__.startswith("ipykernel")


COMMIT_FILE = ".gptcourse-第一次作答.json"


def _commit(key: str, letter: str) -> str:
    """记下练习 key 的第一次作答（已经记过就不改），返回记下的字母。JupyterLab 里（内核带着
    ``JPY_SESSION_NAME``）也记在笔记本旁边的文件里，重启内核后仍算数。"""
    import json
    from pathlib import Path

    from .. import files
    from ..errors import MachineError
    session, path = os.environ.get("JPY_SESSION_NAME", ""), Path.cwd() / COMMIT_FILE
    if key not in COMMITTED and session.endswith(".ipynb"):
        try:
            data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
            saved = data.setdefault(Path(session).name, {})
            if not isinstance(saved.get(key), str):
                saved[key] = letter
                files.write_text(path, json.dumps(data, ensure_ascii=False, indent=1))
            COMMITTED[key] = saved[key]
        except (OSError, ValueError, AttributeError, TypeError, MachineError):
            pass
    return COMMITTED.setdefault(key, letter)


def choice(guess, right: str, options: str | dict[str, str] = "ABC",
           hints: str | dict[str, str] | None = None, why: str = "") -> bool:
    """选择题式的预测（“B”“ b ”“(B)”都算 B）；``options`` 是字母或 字母 → 选项内容。答错时**不说出
    正确的字母**，只打印你猜的、``why``（这次量到的数）与 ``hints``（一句话，或 字母 → 提示）。"""
    letters = "".join(options)
    g = str(guess).strip().strip("()（）.。").upper()
    if len(g) != 1 or g not in letters:
        return _fail(f"请填一个选项字母（{'、'.join(letters)}），收到 {guess!r}")

    def said(k: str) -> str:
        return f"{k}（{options[k]}）" if isinstance(options, dict) else k

    key = _CURRENT[-1] if _CURRENT else None
    if key is not None and committing():            # 先猜后看：第一次交的字母才算
        first = _commit(key, g)
        print(f"（{COMMIT_MARK}{first}，已记下；评分按第一次作答）")
        if first != g:
            print(f"你把答案改成了 {said(g)}；先猜后看，评分仍按第一次作答的 {said(first)}")
            g = first
    if g == right:
        if why:
            print(f"猜对了：{said(right)}。{why}")
        return _ok()
    hint = hints.get(g, "") if isinstance(hints, dict) else (hints or "")
    parts = [f"你猜的是 {said(g)}，和这次量出的不一样", why.rstrip("：:。"),
             hint.rstrip("。") or "对照上面实验的输出再想一想"]
    return _fail("。".join(x for x in parts if x) + "。")


# ---------------------------------------------------------------- 学生版：存根时先用包里的
def is_stub(obj) -> bool:
    """还没写的答案：None / ...、学生版的存根（或有存根方法的类）、``mine`` 换上的代替品及实例。"""
    if obj is None or obj is Ellipsis:
        return True
    if getattr(obj, STANDIN, None) or getattr(type(obj), STANDIN, None):
        return True
    if inspect.isclass(obj):
        return any(is_stub(f) for f in vars(obj).values() if inspect.isfunction(f))
    fn = getattr(obj, "__func__", obj)
    if callable(fn) and hasattr(fn, "__wrapped__"):
        fn = inspect.unwrap(fn)                                # @torch.no_grad() 之类的装饰器
    code = getattr(fn, "__code__", None)
    return code is not None and "NotImplementedError" in code.co_names and any(
        isinstance(c, str) and c.startswith(TODO) for c in code.co_consts)


def _name_of(obj) -> str:
    module = getattr(obj, "__module__", "") or ""
    name = getattr(obj, "__qualname__", None) or type(obj).__name__
    return f"gc.{module.removeprefix('gptcourse.')}.{name}" if module.startswith("gptcourse.") \
        else name


def _note(label: str, fallback_name: str) -> None:
    if label not in _NOTED:
        _NOTED.add(label)
        print(f"{label} {TODO}：下面先用 {fallback_name} 代替")


def _standin(fallback, label: str):
    """包里的版本，带上“这是代替品”的记号（不改动包里的对象本身）。"""
    if inspect.isclass(fallback):
        return type(fallback.__name__, (fallback,), {STANDIN: label,
                                                    "__module__": fallback.__module__})

    @functools.wraps(fallback)
    def standin(*args, **kwargs):
        return fallback(*args, **kwargs)

    setattr(standin, STANDIN, label)
    return standin


def mine(obj, fallback, label: str, name: str | None = None):
    """学员的函数 / 类 / 答案：写完了就用它；是存根（或调用时抛 NotImplementedError）就换成带记号的
    ``fallback``（``ready`` 认得它），并且只说一次“练习 3 还没完成：下面先用 gc.… 代替”。"""
    shown = name or _name_of(fallback)
    if is_stub(obj):
        _note(label, shown)
        return _standin(fallback, label)
    if not inspect.isfunction(obj):
        return obj

    @functools.wraps(obj)
    def call(*args, **kwargs):
        try:
            return obj(*args, **kwargs)
        except NotImplementedError:
            _note(label, shown)
            setattr(call, STANDIN, label)
            return fallback(*args, **kwargs)

    return call


def ready(label: str, *objs) -> bool:
    """证明单元格的开关（``if ready("练习 1", f): …``）：都写完了才 True，否则说一句“先跳过”。"""
    if any(is_stub(o) for o in objs):
        print(f"{label} {TODO}：这一格的证明先跳过（写完上面的练习再运行这一格）")
        return False
    return True
