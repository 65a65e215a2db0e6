"""评分的“裁判”进程：在沙箱**外**持有检查器、得出判决；学生的代码只在沙箱里的工作进程里运行。

一份作业用两个进程：

- **工作进程**（``judge.py``，在沙箱里）：按教师版的顺序执行演示单元格和学生的定义；遇到检查单元格，
  只把“要检查哪一题、参数是什么”发给裁判，然后等着替裁判调用学生的函数；
- **裁判进程**（本模块，评分进程在沙箱外启动）：调用真正的检查器。检查器拿到的学生函数是一个
  ``Proxy``：调用它，裁判把参数发给工作进程，由工作进程运行学生的函数，把结果发回来。

两边之间只有一条 Unix 套接字，每一帧是 ``MAGIC`` + 长度 + ``torch.save`` 的字节，双方都用
``torch.load(weights_only=True)`` 读：从工作进程来的只能是张量、数、字符串、列表、元组、字典，
读不出任意对象；学生的函数、模块、生成器……这些不是数据的东西只以编号（``ref``）出现，在裁判里是
``Proxy``，它的 ``__eq__`` 不运行学生的代码（总是“不相等”，并写一条说明），``bool()`` 直接报错。
所以学生的函数只能**返回**结果，不能替检查器**判断**结果。判决由裁判写在它自己的标准输出上，
工作进程碰不到；帧不合协议（伪造的行、长度不对、读不出来），整份作业记 0 分。

裁判交给学生函数的配置、包里的模型、优化器用 pickle 复制过去（工作进程信得过裁判）。学生的函数
改动了其中的模型或优化器（训练一步、累积梯度），工作进程把改动过的参数、梯度、优化器状态发回来
（都是数据），连同全局随机数状态，裁判写回它自己的对象（``write_back``）：检查器看到的，就像学生的
函数在它自己的进程里改动了它们一样。

少数练习的检查器必须拿着活的对象（数参数对象的 ``id``、挂前向钩子、读函数的源代码、
``isinstance(…, nn.Module)``、要能反向传播的损失……），见 ``grade.IN_SANDBOX``：这些题仍由工作进程
在沙箱里调用检查器，判决在 JSON / CSV 里标为 ``in-process``（同进程），不具备上面的保证。
"""
from __future__ import annotations

import importlib
import io
import json
import os
import pickle
import re
import struct
import sys
import warnings

MAGIC = b"GCF1"
FRAME_CAP = 256 << 20                     # 一帧最多这么多字节（一个小模型的 state_dict 远小于它）
TAG = "\x00"                              # 特殊值的标记：{TAG: "ref" | "dict" | "set" | ...}
SCALARS = (bool, int, float, complex, str, bytes, type(None))
MESSAGE_CAP = 300
_PATH = re.compile(r"(?<![\w.])/(?:[^\s/'\"：，。）)]+/)*[^\s/'\"：，。）)]+")
PREFIXES = ("正确", "还不对：", "还没完成：")
STATUSES = ("正确", "答案不对", "未作答", "出错", "超时")
# 不当作学生对象的属性去问工作进程的双下划线名字（检查器常用的几个除外）
_FORWARDED_DUNDER = {"__gptcourse_standin__", "__name__", "__qualname__", "__module__",
                     "__doc__"}


class Breach(Exception):
    """通道里出现了不合协议的内容（疑似伪造成绩）。"""


class Gone(BaseException):
    """工作进程没了（被杀、超时、自己退出）：检查器的 ``except Exception`` 接不住它。"""


class StudentTimeout(BaseException):
    """学生的代码运行超时（工作进程把它中断了）。"""


# ---------------------------------------------------------------- 帧
def _read_exact(fd: int, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        b = os.read(fd, min(n - got, 1 << 20))
        if not b:
            if got == 0:
                return None
            raise Breach("帧被截断")
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def send(fd: int, obj: dict) -> None:
    import torch
    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    if len(data) > FRAME_CAP:
        raise ValueError(f"要传的数据太大（{len(data) >> 20} MiB，上限 {FRAME_CAP >> 20} MiB）")
    view = memoryview(MAGIC + struct.pack(">Q", len(data)) + data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def recv(fd: int) -> dict | None:
    """读一帧；对方关掉了通道返回 None；不合协议抛 Breach。"""
    import torch
    head = _read_exact(fd, 12)
    if head is None:
        return None
    if head[:4] != MAGIC:
        raise Breach("帧头不对")
    (n,) = struct.unpack(">Q", head[4:])
    if n > FRAME_CAP:
        raise Breach("帧太长")
    data = _read_exact(fd, n)
    if data is None:
        raise Breach("帧被截断")
    try:
        with warnings.catch_warnings():                 # 伪造的帧会让 torch 先警告再报错
            warnings.simplefilter("ignore")
            obj = torch.load(io.BytesIO(data), weights_only=True)
    except Exception as e:  # noqa: BLE001 - 读不出来的帧一律算不合协议
        raise Breach(f"帧读不出来（{type(e).__name__}）") from None
    if type(obj) is not dict or not isinstance(obj.get("op"), str):
        raise Breach("帧不是一个带 op 的字典")
    return obj


# ---------------------------------------------------------------- 裁判这边：学生的对象
class Proxy:
    """工作进程里一个学生对象的替身。能调用、取属性、取下标、迭代、转成数或字符串——每一步都由
    工作进程去做，结果只以数据回来；比较和真假判断不交给学生的代码。"""
    __slots__ = ("_ref", "_id", "_type")

    def __init__(self, ref: Referee, ident: int, typename: str) -> None:
        object.__setattr__(self, "_ref", ref)
        object.__setattr__(self, "_id", ident)
        object.__setattr__(self, "_type", typename)

    def _op(self, op: str, **kw):
        return self._ref.ask(op, self._id, **kw)

    def __call__(self, *args, **kwargs):
        return self._op("call", args=list(args), kwargs=kwargs)

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__") and name not in _FORWARDED_DUNDER:
            raise AttributeError(name)
        return self._op("getattr", name=name)

    def __setattr__(self, name: str, value) -> None:
        self._op("setattr", name=name, value=value)

    def __getitem__(self, key):
        return self._op("getitem", key=key)

    def __len__(self) -> int:
        n = self._op("len")
        if type(n) is not int:
            raise TypeError("len() 不是整数")
        return n

    def __iter__(self):
        items = self._op("list")
        if type(items) is not list:
            raise TypeError("不能迭代")
        return iter(items)

    def __float__(self) -> float:
        v = self._op("float")
        if type(v) is not float:
            raise TypeError("不能转成 float")
        return v

    def __int__(self) -> int:
        v = self._op("int")
        if type(v) is not int:
            raise TypeError("不能转成 int")
        return v

    __index__ = __int__

    def __repr__(self) -> str:
        v = self._op("repr")
        return v[:MESSAGE_CAP] if type(v) is str else f"<{self._type}>"

    def __str__(self) -> str:
        v = self._op("str")
        return v[:MESSAGE_CAP] if type(v) is str else f"<{self._type}>"

    def __eq__(self, other) -> bool:
        self._ref.compared(self._type)
        return False

    def __ne__(self, other) -> bool:
        self._ref.compared(self._type)
        return True

    def __hash__(self) -> int:
        return hash(("proxy", self._id))

    def __bool__(self) -> bool:
        raise TypeError(f"{self._type} 不是数据，不能当真假判断")


def _student_exception(info: dict) -> BaseException:
    """工作进程报来的异常 → 裁判这边的异常（内置异常用同名的内置类，别的用同名的新类）。"""
    import builtins
    name = str(info.get("type", "Exception"))[:60]
    msg = str(info.get("msg", ""))[:2000]
    if info.get("notimpl"):
        return NotImplementedError(msg)
    cls = getattr(builtins, name, None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls = type(name if name.isidentifier() else "StudentError", (Exception,), {})
    try:
        return cls(msg)
    except Exception:  # noqa: BLE001 - 构造函数参数特殊的内置异常（UnicodeError 之类）
        return type(name, (Exception,), {})(msg)


def from_worker(x, ref: Referee, depth: int = 0):
    """工作进程发来的值 → 裁判这边的值：只有数据，外加 Proxy。"""
    import torch
    if depth > 64:
        raise Breach("嵌套太深")
    t = type(x)
    if t in SCALARS:
        return x
    if isinstance(x, torch.Tensor) and t in (torch.Tensor, torch.nn.Parameter):
        return x
    if t is list:
        return [from_worker(v, ref, depth + 1) for v in x]
    if t is tuple:
        return tuple(from_worker(v, ref, depth + 1) for v in x)
    if t is dict:
        tag = x.get(TAG)
        if tag == "dict" and type(x.get("items")) is list:
            return {from_worker(k, ref, depth + 1): from_worker(v, ref, depth + 1)
                    for k, v in x["items"]}
        if tag in ("set", "frozenset") and type(x.get("items")) is list:
            items = [from_worker(v, ref, depth + 1) for v in x["items"]]
            return set(items) if tag == "set" else frozenset(items)
        if tag == "ellipsis":
            return ...
        if tag == "ref" and type(x.get("id")) is int:
            typename = str(x.get("type", "对象"))[:60]
            if x.get("eq") is True:                     # 自己定义了 __eq__ 的对象：记一笔
                ref.compared(typename)
            return Proxy(ref, x["id"], typename)
    raise Breach(f"不是数据（{t.__name__}）")


class Outgoing:
    """一条发给工作进程的消息里不是数据的对象（配置、包里的模型、优化器……）：一起 pickle 成一份，
    对象之间的引用照旧（优化器里的参数就是模型的参数）；pickle 不了的函数（老师的 lambda）留在
    裁判这边，工作进程调用时再问裁判（``rref``）。"""

    def __init__(self, exported: list) -> None:
        self.exported = exported
        self.objects: list = []
        self.markers: list[dict] = []
        self.index: dict[int, int] = {}

    def add(self, x) -> dict:
        k = self.index.get(id(x))
        if k is None:
            k = self.index[id(x)] = len(self.objects)
            self.objects.append(x)
        marker = {TAG: "obj", "i": k}
        self.markers.append(marker)
        return marker

    def blob(self) -> bytes | None:
        if not self.objects:
            return None
        try:
            return pickle.dumps(self.objects)
        except Exception:  # noqa: BLE001 - 逐个试，pickle 不了的函数改成 rref
            pass
        for k, x in enumerate(self.objects):
            try:
                pickle.dumps(x)
                continue
            except Exception as e:  # noqa: BLE001
                if not callable(x):
                    raise TypeError(f"{type(x).__name__} 不能交给工作进程（{e}）") from None
            self.exported.append(x)
            for m in self.markers:
                if m.get("i") == k and m.get(TAG) == "obj":
                    m.clear()
                    m.update({TAG: "rref", "id": len(self.exported) - 1})
            self.objects[k] = None
        return pickle.dumps(self.objects)

    def grads(self) -> list:
        """pickle 不带参数的 .grad：模型的梯度另外作为数据发过去（“忘了清梯度”才看得出来）。"""
        import torch
        return [[p.grad for p in o.parameters()] if isinstance(o, torch.nn.Module) else None
                for o in self.objects]


def to_worker(x, out: Outgoing, depth: int = 0):
    """裁判这边的值 → 发给工作进程：数据照原样，学生的对象发编号，其余（配置、包里的模型、分词器）
    交给 ``out`` 用 pickle 复制过去（工作进程信得过裁判，反过来不行）。"""
    import torch
    if depth > 64:
        raise TypeError("嵌套太深")
    t = type(x)
    if isinstance(x, Proxy):
        return {TAG: "ref", "id": object.__getattribute__(x, "_id")}
    if t in SCALARS:
        return x
    if x is ...:
        return {TAG: "ellipsis"}
    if t in (torch.Tensor, torch.nn.Parameter):
        return x if x.is_leaf else x.detach()
    if t is list:
        return [to_worker(v, out, depth + 1) for v in x]
    if t is tuple:
        return tuple(to_worker(v, out, depth + 1) for v in x)
    if t is dict:
        return {TAG: "dict", "items": [[to_worker(k, out, depth + 1), to_worker(v, out, depth + 1)]
                                       for k, v in x.items()]}
    if t in (set, frozenset):
        return {TAG: t.__name__, "items": [to_worker(v, out, depth + 1) for v in x]}
    return out.add(x)


def write_back(objects: list, states, ref: Referee) -> None:
    """学生的函数改动了裁判交给它的模型 / 优化器（训练一步、累积梯度……）：工作进程把改动后的
    状态发回来（只是数据），这里写回裁判自己的那个对象——检查器看到的就像学生的函数在本进程里
    改动了它一样。"""
    import torch
    if type(states) is not list or len(states) != len(objects):
        raise ValueError("写回的状态格式不对")
    for obj, st in zip(objects, states):
        if st is None:
            continue
        if type(st) is not dict:
            raise ValueError("写回的状态格式不对")
        if isinstance(obj, torch.nn.Module) and st.get("kind") == "module":
            params, buffers = list(obj.parameters()), list(obj.buffers())
            with torch.no_grad():
                for group, target in ((st.get("params"), params), (st.get("buffers"), buffers)):
                    for i, t in (group or {}).items():
                        if not (type(i) is int and 0 <= i < len(target)
                                and isinstance(t, torch.Tensor) and t.shape == target[i].shape):
                            raise ValueError("写回的参数形状不对")
                        target[i].copy_(t)
            for i, g in (st.get("grads") or {}).items():
                if not (type(i) is int and 0 <= i < len(params)) or not (
                        g is None or (isinstance(g, torch.Tensor) and g.shape == params[i].shape)):
                    raise ValueError("写回的梯度形状不对")
                params[i].grad = None if g is None else g.to(params[i].dtype).clone()
            flags, modules = st.get("training"), list(obj.modules())
            if type(flags) is list and len(flags) == len(modules) \
                    and all(type(f) is bool for f in flags):
                for m, f in zip(modules, flags):
                    m.training = f
        elif isinstance(obj, torch.optim.Optimizer) and st.get("kind") == "optimizer":
            obj.load_state_dict(st["state"])
        else:
            raise ValueError("写回的状态与对象对不上")


# ---------------------------------------------------------------- 裁判
class Referee:
    def __init__(self, spec: dict, fd: int, out) -> None:
        self.fd, self.out = fd, out
        self.order: list[str] = list(spec["order"])
        self.in_sandbox = set(spec.get("in_sandbox", ()))
        self.judged: set[str] = set()
        cells = {c["exercise"]: c for c in spec["cells"] if c["kind"] == "check"}
        self.cells = cells
        self.checkers = {ex: getattr(importlib.import_module(f"gptcourse.check.{c['module']}"),
                                     c["checker"]) for ex, c in cells.items()}
        from gptcourse.check import _common
        self.results = _common.RESULTS
        self.current: str | None = None
        self.tripped: str | None = None
        self.compares: list[str] = []
        self.exported: list = []                 # 交给工作进程调用的、裁判这边的函数

    # ------------------------------------------------ 写给评分进程
    def write(self, obj: dict) -> None:
        self.out.write(json.dumps(obj, ensure_ascii=False) + "\n")
        self.out.flush()

    def emit(self, exercise: str, passed: bool, status: str, message: str,
             judged: str = "referee") -> None:
        self.judged.add(exercise)
        self.write({"exercise": exercise, "passed": passed, "status": status,
                    "message": message, "judged": judged})

    def note(self, text: str) -> None:
        self.write({"note": str(text)[:MESSAGE_CAP]})

    # ------------------------------------------------ 问工作进程
    def ask(self, op: str, ident: int | None = None, **kw):
        import torch
        msg = {"op": op, **({} if ident is None else {"id": ident})}
        out = Outgoing(self.exported)
        for k, v in kw.items():
            msg[k] = to_worker(v, out) if k != "name" else str(v)
        blob = out.blob()
        if blob is not None:
            msg["objects"] = blob
            msg["grads"] = out.grads()
        if op == "call":                             # 全局随机数状态跟着调用走（dropout 之类）
            msg["rng"] = torch.get_rng_state()
        try:
            send(self.fd, msg)
        except OSError:
            raise Gone from None
        while True:
            reply = recv(self.fd)
            if reply is None:
                raise Gone
            if reply["op"] != "rcall":
                break
            self.answer(reply)               # 学生的函数调用了裁判交给它的函数
        rng = reply.get("rng")
        if op == "call" and isinstance(rng, torch.Tensor) and rng.dtype == torch.uint8 \
                and rng.shape == msg["rng"].shape:
            torch.set_rng_state(rng)
        if "state" in reply and blob is not None:
            write_back(out.objects, from_worker(reply["state"], self), self)
        if reply["op"] == "ok":
            return from_worker(reply.get("value"), self)
        if reply["op"] == "err" and type(reply.get("error")) is dict:
            info = reply["error"]
            if isinstance(info.get("disabled"), str):
                self.tripped = self.tripped or info["disabled"][:100]
            raise _student_exception(info)
        if reply["op"] == "timeout":
            raise StudentTimeout(str(reply.get("message", "超时"))[:MESSAGE_CAP])
        raise Breach(f"等回答时收到 {reply['op']!r}")

    def answer(self, msg: dict) -> None:
        """工作进程调用裁判交给它的函数（参数只能是数据或学生对象的编号）。"""
        n = msg.get("id")
        if type(n) is not int or not 0 <= n < len(self.exported):
            raise Breach("rcall 的编号不对")
        args = from_worker(msg.get("args", []), self)
        if type(args) is not list:
            raise Breach("rcall 的参数不对")
        try:
            value = self.exported[n](*args)
            out = Outgoing(self.exported)
            reply = {"op": "ok", "value": to_worker(value, out)}
            blob = out.blob()
            if blob is not None:
                reply["objects"] = blob
        except (Gone, Breach, StudentTimeout):
            raise
        except Exception as e:  # noqa: BLE001 - 老师的函数出错：照原样告诉学生的函数
            reply = {"op": "err", "error": {"type": type(e).__name__, "msg": str(e)[:500]}}
        try:
            send(self.fd, reply)
        except OSError:
            raise Gone from None

    def compared(self, typename: str) -> None:
        if typename not in self.compares:
            self.compares.append(typename)

    # ------------------------------------------------ 一道题
    def _expect(self, ex) -> str:
        if not isinstance(ex, str) or ex not in self.order or ex in self.judged:
            raise Breach(f"检查请求的练习不对：{str(ex)[:60]!r}")
        return ex

    def check(self, msg: dict) -> None:
        ex = self._expect(msg.get("exercise"))
        if ex in self.in_sandbox:
            raise Breach(f"练习 {ex} 应在工作进程里判")
        cell = self.cells[ex]
        args = from_worker(msg.get("args", []), self)
        kwargs = from_worker(msg.get("kwargs", {TAG: "dict", "items": []}), self)
        if type(args) is not list or type(kwargs) is not dict:
            raise Breach("检查参数的格式不对")
        self.results.pop(f"{self._chapter(cell)}.{cell['checker']}", None)
        self.current, self.tripped, self.compares = ex, None, []
        try:
            passed = self.checkers[ex](*args, **kwargs) is True
        except StudentTimeout as e:
            return self._finish(ex, False, "超时", str(e))
        except (Gone, Breach):
            raise
        except BaseException as e:  # noqa: BLE001 - 检查器本身出错：这一题判不了
            return self._finish(ex, False, "出错", f"出错：{type(e).__name__}")
        if not passed and self.tripped:
            return self._finish(ex, False, "超时", f"超时：依赖的练习 {self.tripped} 超时"
                                "（它被中断后停用了）")
        key = f"{self._chapter(cell)}.{cell['checker']}"
        record = self.results.get(key, {})
        message = clean_message(passed, record.get("message"))
        status = "正确" if passed else ("未作答" if message.startswith("还没完成") else
                                      "出错" if "出错" in message else "答案不对")
        self._finish(ex, passed, status, message)

    def _finish(self, ex: str, passed: bool, status: str, message: str) -> None:
        """检查完：问工作进程检查中途有没有改动评分用的对象（只可能让这一题记 0 分）。"""
        tampered = self.ask("done")
        if self.compares:
            kinds = "、".join(self.compares[:3])
            self.note(f"练习 {ex}：你的结果不是数据（{kinds}），裁判不调用它的 __eq__，"
                      "比较时按不相等处理")
        if type(tampered) is list and tampered:
            what = "、".join(str(t)[:60] for t in tampered[:3])
            self.note(f"练习 {ex}：检查时你的代码改动了评分用的对象（{what}），疑似伪造成绩，"
                      "这一题记 0 分")
            passed, status = False, "出错"
            message = "出错：检查时改动了评分用的对象（疑似伪造成绩）"
        self.emit(ex, passed, status, message)

    @staticmethod
    def _chapter(cell: dict) -> str:
        return cell["module"][:4]

    def verdict_in_sandbox(self, msg: dict) -> None:
        """IN_SANDBOX 的练习：工作进程自己调用了检查器，这里只核对格式，标上 in-process。"""
        ex = self._expect(msg.get("exercise"))
        passed, status, message = msg.get("passed"), msg.get("status"), msg.get("message")
        if ex not in self.in_sandbox or type(passed) is not bool or status not in STATUSES \
                or type(message) is not str or (status == "正确") != passed:
            raise Breach(f"练习 {ex} 的判决不该由工作进程给出")
        self.emit(ex, passed, status, message[:MESSAGE_CAP + 10], judged="in-process")

    def skip(self, msg: dict) -> None:
        """工作进程报告这一题判不了（超时停用、定义出错、参数的名字不存在）：只会是 0 分。"""
        ex = self._expect(msg.get("exercise"))
        status, message = msg.get("status"), msg.get("message")
        if status not in ("超时", "出错") or type(message) is not str:
            raise Breach("skip 的格式不对")
        self.emit(ex, False, status, message[:MESSAGE_CAP],
                  judged="in-process" if ex in self.in_sandbox else "referee")

    def run(self) -> None:
        handlers = {"check": self.check, "verdict": self.verdict_in_sandbox, "skip": self.skip,
                    "note": lambda m: self.note(str(m.get("text", "")))}
        notes = 0
        try:
            while True:
                msg = recv(self.fd)
                if msg is None:
                    return
                if msg["op"] == "finished":
                    self.write({"done": True})
                    return
                if msg["op"] == "note":
                    notes += 1
                    if notes > 20:
                        continue
                if msg["op"] not in handlers:
                    raise Breach(f"不认识的请求 {msg['op']!r}")
                handlers[msg["op"]](msg)
        except Gone:
            return
        except Breach as e:
            self.write({"forged": str(e)[:MESSAGE_CAP]})


def main(argv: list[str]) -> int:
    spec_path, fd = argv[0], int(argv[1])
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    os.remove(spec_path)
    import matplotlib
    matplotlib.use("Agg")
    out = sys.stdout
    sys.stdout = sys.stderr                   # 检查器打印的“正确 ✓”不混进判决
    Referee(spec, fd, out).run()
    return 0


def clean_message(passed: bool, message: object) -> str:
    """只保留检查器格式的说明（“正确 / 还不对：… / 还没完成：…”），截断；其余换成固定文字。"""
    text = message if isinstance(message, str) else ""
    if passed:
        return "正确"
    if not text.startswith(PREFIXES[1:]):
        return "还不对"
    text = _PATH.sub("<路径>", text)                  # 异常文字里的绝对路径不带出沙箱
    return text if len(text) <= MESSAGE_CAP else text[:MESSAGE_CAP] + "…"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
