"""评分的“裁判”：在沙箱里按教师版的顺序执行一份作业，由裁判自己调用检查器，把判决写进一个管道。

作业里由学生写的只有练习单元格（nbgrader ``solution``），而且只取其中的**定义**（见
``sanitize``）：``def`` / ``class`` / ``import`` / 由常量算出的赋值。单元格里直接执行的语句——
改写 ``RESULTS``、替换检查器、注册 IPython 钩子、改课程包的源文件——一律不执行；其余单元格
（演示、检查）取自教师版，学生改不了。检查器的句柄在任何学生代码运行之前就取好；每次检查前
把 ``gptcourse.check.*`` 与 ``builtins`` 的全局变量恢复原样；判决取检查器的返回值，说明文字取
检查器自己的记录，且只认“正确 / 还不对： / 还没完成：”开头、截断到 ``MESSAGE_CAP`` 个字。

仍然做不到的（写进了 docs/teaching_guide.md）：学生的函数被检查器调用时和检查器在同一个进程里，
一个**存心攻击裁判**的函数体仍可能改动它自己这份作业的判决；它碰不到别的作业、评分进程和仓库。
"""
from __future__ import annotations

import ast
import builtins
import importlib
import json
import linecache
import os
import signal
import sys
import time

MESSAGE_CAP = 300
PREFIXES = ("正确", "还不对：", "还没完成：")
SOLUTION_FILE = "<练习:{}>"

# 练习单元格顶层允许调用的函数（只用于由常量算答案，例如 math.ceil(8 * C / 3 / 64)）
_SAFE_CALLS = {"int", "float", "round", "len", "abs", "min", "max", "sum", "range", "tuple",
               "list", "dict", "set", "sorted", "str", "bool", "pow", "divmod"}
_SAFE_DECORATORS = {"torch.no_grad", "torch.inference_mode", "torch.enable_grad",
                    "staticmethod", "classmethod", "property", "functools.cache",
                    "functools.lru_cache", "dataclass", "dataclasses.dataclass"}
# 这些名字在练习单元格里只能按惯例导入，不许被改绑（否则 @torch.no_grad() 就不再可信）
_CONVENTIONAL = {"torch": "torch", "nn": "torch.nn", "F": "torch.nn.functional", "math": "math",
                 "functools": "functools", "dataclasses": "dataclasses", "np": "numpy"}
_FORBIDDEN_IMPORTS = ("gptcourse.check", "gptcourse.classroom", "builtins", "ctypes")


class CellTimeout(BaseException):
    """单元格超时（BaseException：检查器的 ``except Exception`` 接不住它）。"""


# ---------------------------------------------------------------- 只取定义
def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _pure(node: ast.AST) -> bool:
    """表达式在定义时求值也不会运行任何学生代码：常量、名字、运算、少数内置/ math 函数。"""
    if isinstance(node, ast.Call):
        name = _dotted(node.func)
        ok = name in _SAFE_CALLS or (name or "").startswith("math.")
        return ok and all(_pure(a) for a in node.args) and \
            all(_pure(k.value) for k in node.keywords)
    if isinstance(node, ast.Lambda):
        return _pure_args(node.args)
    if isinstance(node, (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom, ast.ListComp,
                         ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        return False
    return all(_pure(c) for c in ast.iter_child_nodes(node))


def _pure_args(args: ast.arguments) -> bool:
    return all(_pure(d) for d in [*args.defaults, *args.kw_defaults] if d is not None) and \
        all(a.annotation is None or _pure(a.annotation)
            for a in [*args.posonlyargs, *args.args, *args.kwonlyargs])


def _decorator_ok(node: ast.AST) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    if _dotted(target) not in _SAFE_DECORATORS:
        return False
    return not isinstance(node, ast.Call) or (all(_pure(a) for a in node.args)
                                              and all(_pure(k.value) for k in node.keywords))


def _import_ok(node: ast.Import | ast.ImportFrom) -> bool:
    mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
    if isinstance(node, ast.ImportFrom) and node.level:
        return False
    if any(m == f or m.startswith(f + ".") for m in mods for f in _FORBIDDEN_IMPORTS):
        return False
    for a in node.names:
        bound = a.asname or a.name.split(".")[0]
        full = a.name if isinstance(node, ast.Import) else f"{node.module}.{a.name}"
        if a.name == "*" or bound in _SAFE_CALLS:
            return False
        if bound in _CONVENTIONAL and full != _CONVENTIONAL[bound] and \
                not (isinstance(node, ast.Import) and a.asname is None):
            return False
    return True


def _definition(node: ast.stmt, in_class: bool = False) -> bool:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return all(map(_decorator_ok, node.decorator_list)) and _pure_args(node.args) and \
            (node.returns is None or _pure(node.returns))
    if isinstance(node, ast.ClassDef):
        return not node.keywords and all(map(_decorator_ok, node.decorator_list)) and \
            all(_pure(b) for b in node.bases) and \
            all(_definition(s, in_class=True) for s in node.body)
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return not in_class and _import_ok(node)
    if isinstance(node, ast.Assign):
        return all(isinstance(t, ast.Name) and t.id not in _CONVENTIONAL for t in node.targets) \
            and _pure(node.value)
    if isinstance(node, ast.AnnAssign):
        return isinstance(node.target, ast.Name) and node.target.id not in _CONVENTIONAL and \
            (node.value is None or _pure(node.value)) and _pure(node.annotation)
    if isinstance(node, ast.Expr):                                      # 文档字符串
        return isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    return isinstance(node, ast.Pass)


def sanitize(source: str) -> tuple[str, list[str], int, str | None]:
    """练习单元格 → (只含定义的源代码, 定义的名字, 丢掉的语句数, 语法错误说明或 None)。"""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return "", [], 0, f"第 {e.lineno} 行语法错误：{e.msg}"
    kept = [n for n in tree.body if _definition(n)]
    names = []
    for n in kept:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(n.name)
        elif isinstance(n, ast.Assign):
            names += [t.id for t in n.targets]
        elif isinstance(n, ast.AnnAssign):
            names.append(n.target.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names += [a.asname or a.name.split(".")[0] for a in n.names]
    # 从语法树重新生成源代码：与原文语义完全相同（连同装饰器），而同一行里分号后面被丢掉的语句
    # 不会跟着混进来；注释没有了，不影响评分
    text = "\n\n".join(ast.unparse(n) for n in kept)
    return text, names, len(tree.body) - len(kept), None


# ---------------------------------------------------------------- 裁判进程
def clean_message(passed: bool, message: object) -> str:
    """只保留检查器格式的说明（“正确 / 还不对：… / 还没完成：…”），截断；其余换成固定文字。"""
    text = message if isinstance(message, str) else ""
    if passed:
        return "正确"
    if not text.startswith(PREFIXES[1:]):
        return "还不对"
    return text if len(text) <= MESSAGE_CAP else text[:MESSAGE_CAP] + "…"


class _Judge:
    def __init__(self, spec: dict, channel) -> None:
        self.spec, self.channel = spec, channel
        self.cell_timeout = float(spec["cell_timeout"])
        # 检查器与被保护的模块：在任何学生代码运行之前取好
        self.checkers = {c["exercise"]: getattr(importlib.import_module(
            f"gptcourse.check.{c['module']}"), c["checker"])
            for c in spec["cells"] if c["kind"] == "check"}
        from gptcourse.check import _common
        self.common = _common
        guarded = [m for n, m in sorted(sys.modules.items())
                   if n == "gptcourse.check" or n.startswith("gptcourse.check.")] + [builtins]
        self.snapshot = [(m, dict(vars(m))) for m in guarded]
        self.import_state = (list(sys.path), list(sys.meta_path), list(sys.path_hooks))
        self.ns: dict = {"__name__": "__main__", "__builtins__": builtins}
        self.defined: dict[str, list[str]] = {}                          # 练习 → 它定义的名字
        self.stuck: dict[str, str] = {}                                  # 练习 → 超时说明
        self.broken: dict[str, str] = {}                                 # 练习 → 定义时出错

    def restore(self) -> None:
        """把检查器模块、builtins 与导入机制恢复成学生代码运行之前的样子。"""
        for module, saved in self.snapshot:
            d = vars(module)
            for key in [k for k in d if k not in saved]:
                del d[key]
            d.update(saved)
        path, meta, hooks = self.import_state
        sys.path[:], sys.meta_path[:], sys.path_hooks[:] = path, meta, hooks
        sys.path_importer_cache.clear()

    def emit(self, exercise: str, passed: bool, status: str, message: str) -> None:
        self.channel.write(json.dumps({"exercise": exercise, "passed": passed, "status": status,
                                       "message": message}, ensure_ascii=False) + "\n")
        self.channel.flush()

    def timed(self, fn, *args):
        """在 cell_timeout 秒内运行 fn；超时抛 CellTimeout（之后每秒再抛一次，吞掉也没用）。"""
        def alarm(signum, frame):
            raise CellTimeout
        signal.signal(signal.SIGALRM, alarm)
        signal.setitimer(signal.ITIMER_REAL, self.cell_timeout, 1.0)
        try:
            return fn(*args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def stop(self, exercise: str, seconds: float) -> None:
        """一道题超时：记下，并把它定义的函数换成立刻报错的存根，后面调用它的单元格不再等。"""
        why = f"超时：运行超过 {seconds:g} 秒被中断（后面用到它的单元格不再运行它）"
        self.stuck.setdefault(exercise, why)

        def disabled(*args, **kwargs):
            raise NotImplementedError(f"练习 {exercise} 超时，已停用")
        for name in self.defined.get(exercise, []):
            if callable(self.ns.get(name)):
                self.ns[name] = disabled

    def culprit(self, exc: BaseException) -> str | None:
        """超时发生在哪道练习的代码里（看调用栈里最深的一层学生代码）。"""
        tb, found = exc.__traceback__, None
        prefix = SOLUTION_FILE.format("")[:-1]
        while tb is not None:
            name = tb.tb_frame.f_code.co_filename
            if name.startswith(prefix):
                found = name[len(prefix):-1]
            tb = tb.tb_next
        return found

    def run_code(self, source: str, filename: str) -> None:
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        code = compile(source, filename, "exec")
        start = time.monotonic()
        try:
            self.timed(exec, code, self.ns)
        except CellTimeout as e:
            ex = self.culprit(e)
            if ex is not None:
                self.stop(ex, round(time.monotonic() - start))
        except BaseException as e:  # noqa: BLE001 - 演示单元格出错不影响后面（与 allow_errors 相同）
            print(f"[{filename}] {type(e).__name__}: {e}", file=sys.stderr)

    def solution(self, cell: dict) -> None:
        ex = cell["exercise"]
        if cell.get("error"):
            self.broken[ex] = f"出错：练习单元格{cell['error']}"
            return
        self.restore()
        filename = SOLUTION_FILE.format(ex)
        self.defined[ex] = cell["names"]
        linecache.cache[filename] = (len(cell["source"]), None,
                                     cell["source"].splitlines(True), filename)
        try:
            self.timed(exec, compile(cell["source"], filename, "exec"), self.ns)
        except CellTimeout:
            self.stop(ex, self.cell_timeout)
        except BaseException as e:  # noqa: BLE001
            self.broken[ex] = f"出错：练习单元格运行时出错 {type(e).__name__}: {e}"[:MESSAGE_CAP]

    def check(self, cell: dict) -> None:
        ex = cell["exercise"]
        if ex in self.stuck:
            return self.emit(ex, False, "超时", self.stuck[ex])
        if ex in self.broken:
            return self.emit(ex, False, "出错", self.broken[ex])
        self.restore()
        self.common.RESULTS.pop(cell["checker"], None)
        start = time.monotonic()
        try:
            args = [eval(compile(a, "<检查参数>", "eval"), self.ns) for a in cell["args"]]
            passed = self.timed(self.checkers[ex], *args) is True
        except CellTimeout as e:
            self.stop(self.culprit(e) or ex, round(time.monotonic() - start))
            return self.emit(ex, False, "超时", self.stuck.get(ex, "超时"))
        except NameError as e:
            return self.emit(ex, False, "出错", f"出错：检查要用的名字不存在（{e}）"[:MESSAGE_CAP])
        except BaseException as e:  # noqa: BLE001
            return self.emit(ex, False, "出错", f"出错：{type(e).__name__}: {e}"[:MESSAGE_CAP])
        self.restore()
        results = self.common.RESULTS
        record = results.get(cell["checker"]) or next(
            (r for k, r in results.items() if str(k).endswith(cell["checker"])), {})
        message = clean_message(passed, record.get("message"))
        status = "正确" if passed else ("未作答" if message.startswith("还没完成") else
                                      "出错" if "出错" in message else "答案不对")
        self.emit(ex, passed, status, message)

    def run(self) -> None:
        for i, cell in enumerate(self.spec["cells"]):
            if cell["kind"] == "solution":
                self.solution(cell)
            elif cell["kind"] == "check":
                self.check(cell)
            else:
                self.restore()
                self.run_code(cell["source"], f"<单元格 {i}>")
        self.channel.write("DONE\n")
        self.channel.flush()


def main(argv: list[str]) -> int:
    spec_path, fd = argv[0], int(argv[1])
    channel = os.fdopen(fd, "w", encoding="utf-8")
    sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]   # 作业目录不在导入路径上
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    os.remove(spec_path)
    import matplotlib
    matplotlib.use("Agg")
    _Judge(spec, channel).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
