"""所有练习检查器共用的工具：提示、参考答案登记表，以及评分工具读取的结果表。

约定（``gptcourse.classroom`` 的学生版与自动评分都依赖它）：

- 每个检查器用 ``@exercise`` 装饰，返回 True/False，打印“正确 ✓”、“还不对 ✗：…”或“还没完成：…”，
  从不抛出异常；
- 学员的函数还是存根（抛出 ``NotImplementedError``），或答案还是 ``None`` / ``...`` 时，
  检查器打印“还没完成”并返回 False，笔记本继续往下运行；
- 每次检查的结果记在 ``RESULTS[练习名]``（``{"exercise", "passed", "message"}``），评分工具在
  笔记本跑完之后读取 ``results()``。
"""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

SOLUTIONS: dict[str, Callable] = {}            # 练习名 → 参考答案（各章节往里登记）
RESULTS: dict[str, dict] = {}                  # 练习名 → 最近一次检查的结果
_LAST: dict[str, str] = {}                     # 正在运行的检查器最后一句提示


class NotDone(Exception):
    """学员还没写这一题（函数抛出 NotImplementedError，或答案仍是 None / ...）。"""


def show_solution(name: str) -> None:
    """打印某个练习的参考答案源代码。"""
    if name not in SOLUTIONS:
        raise ValueError(f"没有名为 {name!r} 的练习；可选：{', '.join(SOLUTIONS)}")
    print(inspect.getsource(SOLUTIONS[name]))


def results() -> list[dict]:
    """本进程里检查过的每个练习的结果（评分工具读取）。"""
    return [dict(r) for r in RESULTS.values()]


def exercise(checker: Callable) -> Callable:
    """把一个检查器登记为练习：记录结果，把“还没写完”和意外错误都变成一句提示。"""
    name = checker.__name__

    @functools.wraps(checker)
    def run(*args, **kwargs) -> bool:
        _LAST.clear()
        for a in args:
            if a is None or a is Ellipsis:
                return _record(name, False, _todo(f"{name} 的答案还是 {a!r}"))
        try:
            passed = bool(checker(*args, **kwargs))
            message = _LAST.get("message", "")
        except NotDone as e:
            passed, message = False, _todo(str(e))
        except Exception as e:  # noqa: BLE001 - 检查器绝不能让笔记本停下
            passed, message = False, _fail(f"检查时出错 {type(e).__name__}: {e}")
        return _record(name, passed, message)

    run.is_exercise = True
    return run


def _record(name: str, passed: bool, message: str) -> bool:
    RESULTS[name] = {"exercise": name, "passed": passed, "message": message}
    return passed


def _todo(msg: str) -> str:
    text = f"还没完成：{msg}"
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
    """调用学员的函数；出错时返回 (None, 一句中文提示) 而不是让检查器崩溃。

    函数还是存根（NotImplementedError）时抛出 NotDone，由 ``@exercise`` 打印“还没完成”。
    """
    if not callable(fn):
        return None, f"需要传入一个函数，收到的是 {type(fn).__name__}"
    try:
        return fn(*args), None
    except NotImplementedError as e:
        raise NotDone(str(e) or getattr(fn, "__name__", "这个函数") + " 还是存根") from None
    except Exception as e:  # noqa: BLE001 - 学员代码里的任何错误都转成一句提示
        return None, f"调用时出错 {type(e).__name__}: {e}"


def _compare(fn: Callable, ref: Callable, cases: list[tuple], name: str,
             normalize: Callable = lambda v: v) -> bool:
    """逐个输入比较 fn 与参考答案；第一处不同就报告输入、你的输出和期望输出。"""
    if not callable(fn):
        return _fail(f"{name} 需要传入一个函数，收到的是 {type(fn).__name__}")
    for args in cases:
        shown = ", ".join(repr(a) for a in args)
        got, err = _call(fn, *args)
        if err:
            return _fail(f"{name}({shown}) {err}")
        want = ref(*args)
        try:
            same = normalize(got) == normalize(want)
        except Exception:  # noqa: BLE001
            same = False
        if not same:
            return _fail(f"{name}({shown})\n  你的结果：{got!r}\n  期望结果：{want!r}")
    return _ok()
