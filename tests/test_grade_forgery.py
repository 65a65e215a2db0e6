"""裁判进程与工作进程之间的通道（``gptcourse_kit.classroom.referee``）：从工作进程来的只能是数据。

这些测试不需要沙箱：直接在一对套接字上收发帧。真正的恶意作业（往管道写伪造的行、沿调用栈换掉
检查器、改 ``_record`` / ``RESULTS``、``__eq__`` 永远为真、找密钥）在 ``test_grade_sandbox.py``
里整班评一遍。
"""
from __future__ import annotations

import io
import os
import pickle
import socket
import struct

import pytest
import torch

from gptcourse_kit.classroom import referee
from gptcourse_kit.classroom.judge import _Refs, from_referee, to_referee
from gptcourse_kit.classroom.referee import MAGIC, TAG, Breach, Proxy, from_worker, recv, send


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def _raw(fd: int, payload: bytes) -> None:
    os.write(fd, MAGIC + struct.pack(">Q", len(payload)) + payload)


class _FakeReferee:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def compared(self, typename: str) -> None:
        self.seen.append(typename)


def test_data_crosses_unchanged(pair):
    a, b = pair
    value = {"op": "ok", "value": to_referee(
        [{(1, 2): 3}, (torch.arange(4), "春", 2.5, None, True), {1, 2}, b"x"], _Refs())}
    send(a.fileno(), value)
    got = from_worker(recv(b.fileno())["value"], _FakeReferee())
    assert got[0] == {(1, 2): 3} and got[2] == {1, 2} and got[3] == b"x"
    assert torch.equal(got[1][0], torch.arange(4)) and got[1][1:] == ("春", 2.5, None, True)


def test_results_that_are_not_data_arrive_as_numbered_proxies(pair):
    """学生的函数返回一个自己定义了 ``__eq__`` 的对象：到裁判这边是 Proxy，比较总是不相等、
    不能当真假判断，并记下一笔（裁判据此写说明）。"""
    class Equal:
        def __eq__(self, other):
            return True
    Equal.__module__ = "__main__"                  # 像学生在笔记本里定义的类

    refs, ref = _Refs(), _FakeReferee()
    got = from_worker(to_referee(Equal(), refs), ref)
    assert isinstance(got, Proxy) and ref.seen == ["Equal"]
    assert (got == [1]) is False and (got != [1]) is True and ([1] == got) is False
    with pytest.raises(TypeError):
        bool(got)
    with pytest.raises(AttributeError):
        _ = got.__array__                             # 双下划线的名字不去问学生的对象
    assert from_referee({TAG: "ref", "id": 1}, refs).__class__ is Equal


def test_dict_and_list_subclasses_become_plain_data():
    class Sneaky(dict):
        def __eq__(self, other):
            return True
    got = from_worker(to_referee(Sneaky({1: 2}), _Refs()), _FakeReferee())
    assert type(got) is dict and got == {1: 2} and (got == {3: 4}) is False


@pytest.mark.parametrize("payload", [
    b"0" * 64 + b' {"exercise": "count_pairs", "passed": true}\n',     # 以前的“签名行”
    pickle.dumps({"op": "ok", "value": os.system}),                     # 任意对象：读不出来
])
def test_anything_but_a_data_frame_is_a_breach(pair, payload):
    a, b = pair
    _raw(a.fileno(), payload)
    with pytest.raises(Breach):
        recv(b.fileno())


def test_a_line_instead_of_a_frame_is_a_breach(pair):
    a, b = pair
    os.write(a.fileno(), b'{"exercise": "count_pairs", "passed": true, "status": "\\u6b63"}\n')
    with pytest.raises(Breach):
        recv(b.fileno())


def test_a_frame_holding_a_pickled_object_is_a_breach(pair):
    """帧是合格的 torch.save，但里面藏着一个不是数据的对象：weights_only 读不出来。"""
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))
    a, b = pair
    buf = io.BytesIO()
    torch.save({"op": "ok", "value": Evil()}, buf)
    _raw(a.fileno(), buf.getvalue())
    with pytest.raises(Breach):
        recv(b.fileno())


def test_unknown_tags_and_types_are_a_breach():
    with pytest.raises(Breach):
        from_worker({TAG: "pickle", "data": pickle.dumps(1)}, _FakeReferee())  # 只有裁判能发
    with pytest.raises(Breach):
        from_worker({"plain": "dict without a tag"}, _FakeReferee())


def test_a_verdict_from_the_worker_is_refused_unless_the_exercise_is_in_sandbox(pair):
    """工作进程只能替 IN_SANDBOX 的题报判决；替由裁判判的题报“正确”= 伪造，整份作业 0 分。"""
    a, b = pair
    spec = {"order": ["count_pairs"], "in_sandbox": [],
            "cells": [{"kind": "check", "exercise": "count_pairs", "module": "nb01",
                       "checker": "count_pairs", "args": ["get_stats"], "kwargs": {}}]}
    out = io.StringIO()
    judge = referee.Referee(spec, b.fileno(), out)
    send(a.fileno(), {"op": "verdict", "exercise": "count_pairs", "passed": True,
                      "status": "正确", "message": "正确"})
    a.shutdown(socket.SHUT_WR)
    judge.run()
    assert '"forged"' in out.getvalue() and '"passed": true' not in out.getvalue()


def test_the_worker_spec_carries_no_key():
    """以前 spec 文件里有签名用的密钥（工作进程读得到）；现在判决不经工作进程，没有密钥。"""
    import nbformat
    from test_classroom import teacher_nb

    from gptcourse_kit.classroom.grade import build_spec
    nb = nbformat.from_dict(teacher_nb())
    spec, _ = build_spec(nb, nb, "nb01", 10)
    assert "key" not in spec


# ---------------------------------------------------------------- 会改动模型与优化器的练习
_MISTAKES = {          # 名字 → (练习单元格的 grade_id, 原文, 改成, 应得的判决与提示里的一句)
    "zero_grad_after": ("nb03-train_step",
                        "    optimizer.zero_grad(set_to_none=True)\n    loss.backward()\n",
                        "    loss.backward()\n    optimizer.zero_grad(set_to_none=True)\n",
                        ("train_step", "zero_grad 放在了 backward 之后")),
    "no_clip": ("nb03-train_step",
                "    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)\n", "",
                ("train_step", "没有被裁剪")),
    "no_zero_grad": ("nb03-train_step", "    optimizer.zero_grad(set_to_none=True)\n", "",
                     ("train_step", "梯度在步与步之间累加了")),
    "no_division": ("nb03-accumulate_grads", "(loss / n).backward()", "loss.backward()",
                    ("accumulate_grads", "要除以 2")),
    "no_targets": ("nb03-titled_step",
                   "generator=gen,\n" + " " * 29 + "targets=targets)", "generator=gen)",
                   ("titled_step", "算进了题目的位置")),
    "no_lr": ("nb03-titled_step", '        group["lr"] = lr\n', "        pass\n",
              ("titled_step", "学习率要按日程")),
}


@pytest.mark.slow
def test_exercises_that_change_a_model_are_judged_by_the_referee(tmp_path):
    """03 的 train_step、accumulate_grads、titled_step 改动检查器交给它们的模型与优化器：工作进程把
    改动后的参数、梯度、优化器状态和全局随机数状态发回裁判，裁判写回自己的对象再比较。
    正确的答案得分，典型的错误（清梯度的位置、忘了裁剪、忘了清梯度、不除以 n、不传 targets、
    不按日程设学习率）都被认出，提示与在同一个进程里检查时一样；判决都标 referee。"""
    import copy

    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook
    from test_grade_chapters import _require_sandbox

    from gptcourse_kit.classroom.grade import REFERENCE, Options, grade
    _require_sandbox()
    source = nbformat.read(next(REFERENCE.glob("03_*.ipynb")), as_version=4)
    wanted = {"nb03-lr_schedule", "nb03-train_step", "nb03-accumulate_grads", "nb03-titled_step"}

    def gid(c) -> str:
        return c.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
    cells = [new_code_cell("import math\nimport torch\nimport gptcourse as gc")]
    cells += [copy.deepcopy(c) for c in source.cells if gid(c).removesuffix("-check") in wanted]
    ref_nb = new_notebook(cells=cells)
    (tmp_path / "ref").mkdir()
    (tmp_path / "hw").mkdir()
    nbformat.write(ref_nb, tmp_path / "ref" / "03_tiny.ipynb")
    nbformat.write(ref_nb, tmp_path / "hw" / "1000_right.ipynb")
    for i, (name, (cell_id, old, new, _)) in enumerate(_MISTAKES.items()):
        nb = copy.deepcopy(ref_nb)
        cell = next(c for c in nb.cells if gid(c) == cell_id)
        assert old in cell.source, name
        cell.source = cell.source.replace(old, new)
        nbformat.write(nb, tmp_path / "hw" / f"10{i + 1:02d}_{name}.ipynb")
    subs = grade(sorted((tmp_path / "hw").glob("*.ipynb")),
                 Options(reference=tmp_path / "ref", timeout=300, cell_timeout=60), jobs=2)
    by = {s.path.stem.split("_", 1)[1]: {e["exercise"]: e for e in s.exercises} for s in subs}
    assert {e["judged"] for s in by.values() for e in s.values()} == {"referee"}
    assert all(e["passed"] for e in by["right"].values()), by["right"]
    for name, (_, _, _, (exercise, hint)) in _MISTAKES.items():
        got = by[name]
        assert got[exercise]["status"] == "答案不对" and hint in got[exercise]["message"], \
            (name, got[exercise])
        assert all(e["passed"] for ex, e in got.items() if ex != exercise), (name, got)
