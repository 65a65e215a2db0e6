"""评分的工作进程：在沙箱里按教师版的顺序执行一份作业；检查时替沙箱外的裁判进程调用学生的函数。

作业里由学生写的只有练习单元格（nbgrader ``solution``）和学生自己加的（或改过的）代码单元格，
而且只取其中的**定义**（见 ``sanitize``）：``def`` / ``class`` / ``import`` / 由常量算出的赋值。
单元格里直接执行的语句——改写 ``RESULTS``、替换检查器、注册 IPython 钩子、改课程包的源文件——
一律不执行；改绑内置函数或评分用的名字的定义（``def len``）整条拒绝，因为定义时允许调用的
``len(…)`` 会因此运行学生的代码。其余单元格（演示、检查）取自教师版，学生改不了。

判决不在这里得出。遇到检查单元格，工作进程只把“哪一题、参数是什么”发给裁判进程
（``referee.py``，评分进程在沙箱外启动它）；真正的检查器在裁判里运行，学生的函数在裁判那边是一个
代理：每次调用，参数发过来，学生的函数在这里运行，结果只以数据（张量、数、字符串、列表、字典……）
发回去，别的对象只发编号。所以学生的代码碰不到检查器、``RESULTS``、``_record`` 和判决的出口：
这个进程里只有一条通往裁判的套接字，写进去的东西不合协议，整份作业记 0 分；返回一个 ``__eq__``
永远为真的对象，到了裁判那里只是一个编号，比较时不相等；这里也没有任何签名用的密钥可找。
检查中途改动这里的 ``gptcourse.check.*``、``builtins`` 或检查器表，仍会被认出来（这一题记 0 分、
写一条说明）——这只会让分数更低：即使瞒过去，也改不了裁判的判决。

仍然做不到的（写进了 docs/teaching_guide.md）：

- ``grade.IN_SANDBOX`` 里的练习（检查器要拿着活的模型、优化器，数参数对象的 id，挂前向钩子，读
  函数的源代码）仍由这个进程调用检查器，判决标为 ``in-process``：一个存心攻击的函数体可以改动这些
  题的判决（只限它自己这一份）；
- 检查单元格的参数（``gc.check.nb01.guess_leak(guess_leak, overlap=leaky[0])`` 里的 ``leaky[0]``）
  是教师版的演示单元格在这里算出的；演示单元格调用过的学生函数能改动这些量，进而影响依赖它们的
  预测题；
- 参考答案随课程包发布：学生的函数调用包里的参考实现，和抄答案一样能得分。
"""
from __future__ import annotations

import ast
import builtins
import importlib
import json
import linecache
import os
import pickle
import signal
import sys

from .referee import _PATH, MESSAGE_CAP, PREFIXES, SCALARS, TAG, clean_message  # noqa: F401

SOLUTION_FILE = "<练习:{}>"

# 练习单元格顶层允许调用的函数（只用于由常量算答案，例如 math.ceil(8 * C / 3 / 64)）
_SAFE_CALLS = {"int", "float", "round", "len", "abs", "min", "max", "sum", "range", "tuple",
               "list", "dict", "set", "sorted", "str", "bool", "pow", "divmod"}
_SAFE_DECORATORS = {"torch.no_grad", "torch.inference_mode", "torch.enable_grad",
                    "staticmethod", "classmethod", "property", "functools.cache",
                    "functools.lru_cache", "dataclass", "dataclasses.dataclass"}
# 这些名字在练习单元格里只能按惯例导入，不许被改绑（否则 @torch.no_grad() 就不再可信）
_CONVENTIONAL = {"torch": "torch", "nn": "torch.nn", "F": "torch.nn.functional", "math": "math",
                 "functools": "functools", "dataclasses": "dataclasses", "np": "numpy",
                 "re": "re", "collections": "collections", "gc": "gptcourse"}
_FORBIDDEN_IMPORTS = ("gptcourse.check", "gptcourse_kit", "builtins", "ctypes")
# 定义时允许调用的库函数（模块名必须按惯例导入，见 _CONVENTIONAL）：只构造数据，不运行学生的代码
_SAFE_LIBRARY_CALLS = {"re.compile", "collections.Counter", "collections.OrderedDict",
                       "torch.tensor", "torch.arange", "torch.zeros", "torch.ones",
                       "frozenset"}
# 这两个方法会在定义时被调用（``A[0]``、``class B(A)``），类里不许定义
_DEFINITION_TIME_HOOKS = {"__class_getitem__", "__init_subclass__"}
# 这些名字不许被学生的 def / class / import / 赋值改绑：内置函数（定义时能调用的那些尤其危险：
# ``def len(x): …`` 加上 ``_ = len(0)`` 就会在定义时运行学生的代码）、按惯例导入的模块、评分用的名字
_RESERVED = (set(dir(builtins)) | _SAFE_CALLS | set(_CONVENTIONAL) | {"re", "collections", "gc"}
             ) - {"__doc__", "__name__"}


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
        ok = name in _SAFE_CALLS or name in _SAFE_LIBRARY_CALLS or (name or "").startswith("math.")
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
        if a.name == "*" or (bound in _RESERVED and bound not in _CONVENTIONAL):
            return False
        if bound in _CONVENTIONAL and full != _CONVENTIONAL[bound] and \
                not (isinstance(node, ast.Import) and a.asname is None
                     and a.name.split(".")[0] == _CONVENTIONAL[bound].split(".")[0]):
            return False
    return True


def _definition(node: ast.stmt, in_class: bool = False) -> bool:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if in_class and node.name in _DEFINITION_TIME_HOOKS:
            return False
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


def _bound_names(n: ast.stmt) -> list[str]:
    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [n.name]
    if isinstance(n, ast.Assign):
        return [t.id for t in n.targets if isinstance(t, ast.Name)]
    if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
        return [n.target.id]
    if isinstance(n, (ast.Import, ast.ImportFrom)):
        return [a.asname or a.name.split(".")[0] for a in n.names]
    return []


def _shadows(n: ast.stmt) -> list[str]:
    """这条定义改绑了哪些保留的名字（按惯例的 import 除外，那由 _import_ok 管）。"""
    if isinstance(n, (ast.Import, ast.ImportFrom)):
        return [b for b in _bound_names(n) if b in _RESERVED and b not in _CONVENTIONAL]
    return [b for b in _bound_names(n) if b in _RESERVED]


def sanitize(source: str) -> tuple[str, list[str], int, str | None, list[str]]:
    """练习单元格 → (只含定义的源代码, 定义的名字, 丢掉的语句数, 语法错误说明或 None,
    被拒绝的名字)。改绑内置函数、按惯例导入的模块或评分用的名字（``def len``、``class math``、
    ``sorted = …``）的定义整条拒绝，另外报告出来。"""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return "", [], 0, f"第 {e.lineno} 行语法错误：{e.msg}", []
    refused = [b for n in tree.body for b in _shadows(n)]
    kept = [n for n in tree.body if not _shadows(n) and _definition(n)]
    names = [b for n in kept for b in _bound_names(n)]
    # 从语法树重新生成源代码：与原文语义完全相同（连同装饰器），而同一行里分号后面被丢掉的语句
    # 不会跟着混进来；注释没有了，不影响评分
    text = "\n\n".join(ast.unparse(n) for n in kept)
    shadowing = sum(1 for n in tree.body if _shadows(n))
    return text, names, len(tree.body) - len(kept) - shadowing, None, list(dict.fromkeys(refused))


# ---------------------------------------------------------------- 裁判进程
STUDENT_FILE = "<学生单元格:{}>"
TICK = 0.25                                   # 采样间隔：每隔这么久看一眼是不是在运行学生的代码


class Disabled(NotImplementedError):
    """超时之后停用的练习函数被调用（``mine`` 照样换成包里的版本，检查时记“依赖的练习 X 超时”）。"""


def _student_frame(frame) -> bool:
    prefixes = (SOLUTION_FILE.format("")[:-1], STUDENT_FILE.format("")[:-1])
    while frame is not None:
        if frame.f_code.co_filename.startswith(prefixes):
            return True
        frame = frame.f_back
    return False


class _Refs:
    """工作进程里交给裁判的对象：编号 → 对象（同一个对象同一个编号）。"""

    def __init__(self) -> None:
        self.objects: dict[int, object] = {}
        self.ids: dict[int, int] = {}

    def ref(self, obj) -> dict:
        n = self.ids.get(id(obj))
        if n is None:
            n = self.ids[id(obj)] = len(self.objects) + 1
            self.objects[n] = obj
        # eq：学生自己写的类定义了 __eq__（裁判不会调用它，只写一条说明）
        cls = type(obj)
        return {TAG: "ref", "id": n, "type": cls.__name__,
                "eq": cls.__module__ == "__main__" and "__eq__" in vars(cls)}


def to_referee(x, refs: _Refs, depth: int = 0):
    """学生这边的值 → 发给裁判：张量、数、字符串、列表、元组、字典、集合照原样（子类换成基类），
    其余只发编号。"""
    import torch
    if depth > 60:
        return refs.ref(x)
    if x is None or type(x) in SCALARS:
        return x
    if x is ...:
        return {TAG: "ellipsis"}
    if isinstance(x, bool):
        return bool(x)
    if isinstance(x, (int, float, str, bytes)) and not isinstance(x, torch.Tensor):
        return (int if isinstance(x, int) else float if isinstance(x, float) else
                str if isinstance(x, str) else bytes)(x)
    if isinstance(x, torch.Tensor):
        t = x.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        return t.as_subclass(torch.Tensor).clone()
    if type(x).__module__ == "numpy" and getattr(x, "ndim", None) == 0:
        return to_referee(x.item(), refs, depth + 1)
    if isinstance(x, list):
        return [to_referee(v, refs, depth + 1) for v in list.__iter__(x)]
    if isinstance(x, tuple):
        return tuple(to_referee(v, refs, depth + 1) for v in tuple.__iter__(x))
    if isinstance(x, dict):
        return {TAG: "dict", "items": [[to_referee(k, refs, depth + 1),
                                        to_referee(v, refs, depth + 1)]
                                       for k, v in dict.items(x)]}
    if isinstance(x, (set, frozenset)):
        return {TAG: "frozenset" if isinstance(x, frozenset) else "set",
                "items": [to_referee(v, refs, depth + 1) for v in x]}
    return refs.ref(x)


class _RefereeFunction:
    """裁判交给学生函数的、留在裁判那边的函数（老师的 lambda）：调用时问裁判。"""

    def __init__(self, worker, ident: int) -> None:
        self.worker, self.ident = worker, ident

    def __call__(self, *args):
        import pickle

        from .referee import recv
        w = self.worker
        w.send({"op": "rcall", "id": self.ident, "args": to_referee(list(args), w.refs)})
        reply = recv(w.fd)
        if reply is None:
            raise SystemExit(3)
        if reply["op"] == "ok":
            objects = pickle.loads(reply["objects"]) if "objects" in reply else None
            return from_referee(reply["value"], w.refs, w, objects)
        raise RuntimeError(str(reply.get("error", {}).get("msg", "裁判那边的函数出错")))


def from_referee(x, refs: _Refs, worker=None, objects: list | None = None):
    """裁判发来的值 → 学生这边的值（裁判信得过：它用 pickle 发来的对象照样读）。"""
    t = type(x)
    if t is list:
        return [from_referee(v, refs, worker, objects) for v in x]
    if t is tuple:
        return tuple(from_referee(v, refs, worker, objects) for v in x)
    if t is dict:
        tag = x.get(TAG)
        if tag == "dict":
            return {from_referee(k, refs, worker, objects): from_referee(v, refs, worker, objects)
                    for k, v in x["items"]}
        if tag in ("set", "frozenset"):
            items = [from_referee(v, refs, worker, objects) for v in x["items"]]
            return set(items) if tag == "set" else frozenset(items)
        if tag == "ellipsis":
            return ...
        if tag == "ref":
            return refs.objects[x["id"]]
        if tag == "obj":
            return objects[x["i"]]
        if tag == "rref":
            return _RefereeFunction(worker, x["id"])
    return x


class _Watch:
    """裁判交给学生函数的模型与优化器：调用前记下参数、梯度的版本，调用后把改动过的发回裁判
    （裁判写回它自己的那个对象，见 ``referee.write_back``）。"""

    def __init__(self, objects: list) -> None:
        import torch
        self.objects, self.before = objects, []
        for o in objects:
            if isinstance(o, torch.nn.Module):
                params, buffers = list(o.parameters()), list(o.buffers())
                self.before.append(([p._version for p in params],
                                    [(p.grad, None if p.grad is None else p.grad._version)
                                     for p in params],
                                    [b._version for b in buffers]))
            else:
                self.before.append(None)

    def changes(self) -> list:
        import torch
        found = []
        for o, before in zip(self.objects, self.before):
            if isinstance(o, torch.nn.Module) and before is not None:
                versions, grads, bversions = before
                params, buffers = list(o.parameters()), list(o.buffers())
                if len(params) != len(versions) or len(buffers) != len(bversions):
                    found.append(None)               # 学生的函数换掉了模型的结构：不写回
                    continue
                found.append({
                    "kind": "module",
                    "params": {i: p for i, (p, v) in enumerate(zip(params, versions))
                               if p._version != v},
                    "grads": {i: p.grad for i, (p, (g, v)) in enumerate(zip(params, grads))
                              if p.grad is not g or (g is not None and g._version != v)},
                    "buffers": {i: b for i, (b, v) in enumerate(zip(buffers, bversions))
                                if b._version != v},
                    "training": [m.training for m in o.modules()]})
            elif isinstance(o, torch.optim.Optimizer):
                found.append({"kind": "optimizer", "state": o.state_dict()})
            else:
                found.append(None)
        return found


class _Worker:
    """沙箱里的工作进程：执行单元格；检查时替裁判调用学生的函数（``IN_SANDBOX`` 的题自己判）。"""

    def __init__(self, spec: dict, fd: int) -> None:
        self.spec = spec
        self.fd = fd
        self.cell_timeout = float(spec["cell_timeout"])
        self.in_sandbox = set(spec.get("in_sandbox", ()))
        self.refs = _Refs()
        # 检查器与被保护的模块：在任何学生代码运行之前取好（只有 IN_SANDBOX 的题在这里调用检查器；
        # 其余的留着，用来认出“检查中途被换掉”）
        self.checkers = {c["exercise"]: getattr(importlib.import_module(
            f"gptcourse.check.{c['module']}"), c["checker"])
            for c in spec["cells"] if c["kind"] == "check"}
        self._checkers = tuple(sorted(self.checkers.items()))           # 检查器被换掉时认得出
        from gptcourse.check import _common
        self.common = _common
        self.results = _common.RESULTS
        guarded = [m for n, m in sorted(sys.modules.items())
                   if n == "gptcourse.check" or n.startswith("gptcourse.check.")] + [builtins]
        self.snapshot = [(m, dict(vars(m))) for m in guarded]
        self.import_state = (list(sys.path), list(sys.meta_path), list(sys.path_hooks))
        self.ns: dict = {"__name__": "__main__", "__builtins__": builtins}
        self.defined: dict[str, list[str]] = {}                          # 练习 → 它定义的名字
        self.stuck: dict[str, str] = {}                                  # 练习 → 超时说明
        self.broken: dict[str, str] = {}                                 # 练习 → 定义时出错
        self.tripped: str | None = None                                  # 这次检查碰到的停用练习
        self.current: str | None = None                                  # 正在检查的练习

    def send(self, msg: dict) -> None:
        from .referee import send
        send(self.fd, msg)

    def restore(self) -> None:
        """把检查器模块、builtins、导入机制和这里的检查器表恢复成学生代码运行之前的样子。"""
        self.checkers = dict(self._checkers)
        for module, saved in self.snapshot:
            d = vars(module)
            for key in [k for k in d if k not in saved]:
                del d[key]
            d.update(saved)
        path, meta, hooks = self.import_state
        sys.path[:], sys.meta_path[:], sys.path_hooks[:] = path, meta, hooks
        sys.path_importer_cache.clear()

    def tampered(self) -> list[str]:
        """学生代码运行时改绑了检查器模块或 builtins 里的哪些名字（新导入的子模块、warnings 的
        登记表不算），换掉了检查器，或换掉了 RESULTS。"""
        import types
        found = []
        for module, saved in self.snapshot:
            d = vars(module)
            for key, value in d.items():
                if key in saved and saved[key] is value:
                    continue
                if key not in saved and (isinstance(value, types.ModuleType)
                                         or key == "__warningregistry__"):   # warnings 自己加的
                    continue
                found.append(f"{module.__name__}.{key}")
            found += [f"{module.__name__}.{k}" for k in saved if k not in d]
        if tuple(sorted(self.checkers.items())) != self._checkers:
            found.append("裁判的检查器")
        if self.common.RESULTS is not self.results:
            found.append("gptcourse.check._common.RESULTS")
        return found

    def verdict(self, exercise: str, passed: bool, status: str, message: str) -> None:
        """IN_SANDBOX 的练习：这里得出的判决（裁判标为 in-process）。"""
        self.send({"op": "verdict", "exercise": exercise, "passed": passed, "status": status,
                   "message": message})

    def skip(self, exercise: str, status: str, message: str) -> None:
        self.send({"op": "skip", "exercise": exercise, "status": status, "message": message})

    def note(self, text: str) -> None:
        """不影响分数的说明（演示单元格出错、超时……），评分进程写进备注。"""
        self.send({"op": "note", "text": text[:MESSAGE_CAP]})

    def timed(self, fn, *args):
        """运行 fn；学生的代码累计运行超过 cell_timeout 秒就抛 CellTimeout（之后每个采样点再抛
        一次，吞掉也没用）。只在调用栈里有学生代码时计时：老师的演示代码再慢也不算超时。"""
        used = [0.0]

        def tick(signum, frame):
            if _student_frame(frame):
                used[0] += TICK
                if used[0] >= self.cell_timeout:
                    raise CellTimeout
        signal.signal(signal.SIGALRM, tick)
        signal.setitimer(signal.ITIMER_REAL, TICK, TICK)
        try:
            return fn(*args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def stop(self, exercise: str, seconds: float) -> None:
        """一道题超时：记下，并把它定义的函数换成立刻报错的存根，后面调用它的单元格不再等。"""
        why = f"超时：运行超过 {seconds:g} 秒被中断（后面用到它的单元格不再运行它）"
        self.stuck.setdefault(exercise, why)
        worker = self

        def disabled(*args, **kwargs):
            worker.tripped = worker.tripped or exercise
            raise Disabled(f"练习 {exercise} 超时，已停用")
        disabled.exercise = exercise
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

    def run_code(self, source: str, filename: str, label: str) -> None:
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        code = compile(source, filename, "exec")
        try:
            self.timed(exec, code, self.ns)
        except CellTimeout as e:
            ex = self.culprit(e)
            if ex is not None:
                self.stop(ex, self.cell_timeout)
            self.note(f"{label}：调用你写的代码超过 {self.cell_timeout:g} 秒，被中断"
                      + (f"（练习 {ex}）" if ex else ""))
        except BaseException as e:  # noqa: BLE001 - 演示单元格出错不影响后面（与 allow_errors 相同）
            print(f"[{filename}] {type(e).__name__}: {e}", file=sys.stderr)
            if not isinstance(e, NotImplementedError):
                self.note(f"{label}出错（{type(e).__name__}），后面的单元格照常运行")

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
            self.broken[ex] = f"出错：练习单元格运行时出错 {type(e).__name__}"

    def _args(self, cell: dict) -> tuple[list, dict]:
        args = [eval(compile(a, "<检查参数>", "eval"), self.ns) for a in cell["args"]]
        kwargs = {k: eval(compile(a, "<检查参数>", "eval"), self.ns)
                  for k, a in cell.get("kwargs", {}).items()}
        return args, kwargs

    def check(self, cell: dict) -> None:
        ex = cell["exercise"]
        if ex in self.stuck:
            return self.skip(ex, "超时", self.stuck[ex])
        if ex in self.broken:
            return self.skip(ex, "出错", self.broken[ex])
        self.restore()
        try:
            args, kwargs = self.timed(self._args, cell)
        except CellTimeout as e:
            self.stop(self.culprit(e) or ex, self.cell_timeout)
            return self.skip(ex, "超时", self.stuck.get(ex, "超时"))
        except NameError as e:
            return self.skip(ex, "出错", f"出错：检查要用的名字 {e.name} 不存在")
        except BaseException as e:  # noqa: BLE001
            return self.skip(ex, "出错", f"出错：{type(e).__name__}")
        if ex in self.in_sandbox:
            return self.check_here(cell, args, kwargs)
        self.current = ex
        self.send({"op": "check", "exercise": ex,
                   "args": to_referee(args, self.refs), "kwargs": to_referee(kwargs, self.refs)})
        self.serve()

    # ------------------------------------------------ 替裁判调用学生的代码
    def serve(self) -> None:
        """回答裁判的请求（调用、取属性……），直到它说这一题判完了（``done``）。"""
        import torch

        from .referee import recv
        ops = {"call": lambda o, m: o(*m["args"], **m["kwargs"]),
               "getattr": lambda o, m: getattr(o, m["name"]),
               "setattr": lambda o, m: setattr(o, m["name"], m["value"]),
               "getitem": lambda o, m: o[m["key"]],
               "len": lambda o, m: len(o), "list": lambda o, m: list(o),
               "float": lambda o, m: float(o), "int": lambda o, m: int(o),
               "repr": lambda o, m: repr(o), "str": lambda o, m: str(o)}
        self.tripped = None
        while True:
            msg = recv(self.fd)
            if msg is None:
                raise SystemExit(3)
            if msg["op"] == "done":
                changed = self.tampered()
                self.restore()
                self.send({"op": "ok", "value": changed})
                return
            watch = None
            try:
                obj = self.refs.objects[msg["id"]]
                objects = pickle.loads(msg["objects"]) if "objects" in msg else None
                for o, grads in zip(objects or [], msg.get("grads") or []):
                    if grads is not None:                  # pickle 不带 .grad：另外发来
                        for param, g in zip(o.parameters(), grads):
                            param.grad = g
                decoded = {k: from_referee(v, self.refs, self, objects) for k, v in msg.items()
                           if k in ("args", "kwargs", "key", "value")}
                watch = _Watch(objects) if objects else None
                if "rng" in msg:
                    torch.set_rng_state(msg["rng"])
                value = self.timed(ops[msg["op"]], obj, {**msg, **decoded})
                reply = {"op": "ok", "value": to_referee(value, self.refs)}
            except CellTimeout as e:
                ex = self.culprit(e) or self.current
                if ex is not None:
                    self.stop(ex, self.cell_timeout)
                reply = {"op": "timeout", "message": self.stuck.get(ex, "超时")}
            except BaseException as e:  # noqa: BLE001 - 学生代码里的任何错误都交给检查器处理
                reply = self._error(e)
            if "rng" in msg:
                reply["rng"] = torch.get_rng_state()
            if watch is not None:
                reply["state"] = to_referee(watch.changes(), self.refs)
            try:
                self.send(reply)
            except ValueError as e:                    # 结果太大：告诉检查器这是一个错误
                self.send(self._error(e))

    def _error(self, e: BaseException) -> dict:
        try:
            text = str(e)[:2000]
        except BaseException:  # noqa: BLE001 - 学生的异常连 str() 都出错
            text = ""
        return {"op": "err", "error": {
            "type": type(e).__name__, "msg": text, "notimpl": isinstance(e, NotImplementedError),
            "disabled": self.tripped if isinstance(e, Disabled) else None}}

    def check_here(self, cell: dict, args: list, kwargs: dict) -> None:
        """IN_SANDBOX 的练习：检查器在这个进程里调用学生的函数（判决标为 in-process）。"""
        ex = cell["exercise"]
        self.results.pop(cell["checker"], None)
        self.tripped = None
        try:
            passed = self.timed(lambda: self.checkers[ex](*args, **kwargs)) is True
        except CellTimeout as e:
            self.stop(self.culprit(e) or ex, self.cell_timeout)
            return self.skip(ex, "超时", self.stuck.get(ex, "超时"))
        except BaseException as e:  # noqa: BLE001
            return self.skip(ex, "出错", f"出错：{type(e).__name__}")
        changed = self.tampered()
        self.restore()
        if changed:
            what = "、".join(changed[:3])
            self.note(f"练习 {ex}：检查时你的代码改动了评分用的对象（{what}），疑似伪造成绩，"
                      "这一题记 0 分")
            return self.skip(ex, "出错", "出错：检查时改动了评分用的对象（疑似伪造成绩）")
        if not passed and self.tripped:
            return self.skip(ex, "超时", f"超时：依赖的练习 {self.tripped} 超时"
                             "（它被中断后停用了）")
        results = self.results
        record = results.get(cell["checker"]) or next(
            (r for k, r in results.items() if str(k).endswith(cell["checker"])), {})
        message = clean_message(passed, record.get("message"))
        status = "正确" if passed else ("未作答" if message.startswith("还没完成") else
                                      "出错" if "出错" in message else "答案不对")
        self.verdict(ex, passed, status, message)

    def run(self) -> None:
        for i, cell in enumerate(self.spec["cells"]):
            if cell["kind"] == "solution":
                self.solution(cell)
            elif cell["kind"] == "check":
                self.check(cell)
            elif cell["kind"] == "student":
                self.restore()
                self.run_code(cell["source"], STUDENT_FILE.format(i), "你加的单元格")
            else:
                self.restore()
                self.run_code(cell["source"], f"<单元格 {i}>", f"教师版第 {i} 个代码单元格")
        self.send({"op": "finished"})


def main(argv: list[str]) -> int:
    spec_path, fd = argv[0], int(argv[1])
    sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]   # 作业目录不在导入路径上
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    os.remove(spec_path)
    import matplotlib
    matplotlib.use("Agg")
    _Worker(spec, fd).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
