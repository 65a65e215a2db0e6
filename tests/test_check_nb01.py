"""练习检查器：参考答案必须通过，典型的错误答案必须被指出。"""
from __future__ import annotations

import pytest

import gptcourse as gc
from gptcourse.check import nb01


@pytest.mark.parametrize("name", nb01.EXERCISES)
def test_reference_solutions_pass(name, capsys):
    assert getattr(gc.check, name)(nb01.SOLUTIONS[name]) is True
    assert "正确 ✓" in capsys.readouterr().out


def _unsorted_vocab(text):
    itos = list(dict.fromkeys(text))             # 按出现顺序，不排序
    return {c: i for i, c in enumerate(itos)}, itos


def _overlapping_merge(ids, pair, idx):
    out = list(ids)                              # 把重叠的也算进去：aaa → 错
    for i in range(len(out) - 1):
        if (out[i], out[i + 1]) == pair:
            out[i] = idx
    return [t for t in out if t != pair[1]] if pair[0] != pair[1] else out


def _split_by_position(text):
    poems = [p + "\n" for p in text.split("\n") if p]
    n = int(0.9 * len(poems))
    return {"train": "".join(poems[:n]), "val": "".join(poems[n:]), "test": ""}


WRONG = {
    "build_vocab": _unsorted_vocab,
    "count_pairs": lambda ids: {p: 1 for p in zip(ids, ids[1:])},          # 忘了累加
    "merge_pair": _overlapping_merge,
    "shift_xy": lambda ids, s, t: (ids[s:s + t], ids[s:s + t]),            # 忘了错一位
    "split_by_poem": _split_by_position,
}


@pytest.mark.parametrize("name", sorted(WRONG))
def test_wrong_answers_fail_with_the_failing_input(name, capsys):
    assert getattr(gc.check, name)(WRONG[name]) is False
    out = capsys.readouterr().out
    assert "还不对 ✗" in out and name in out


def test_exceptions_and_non_callables_are_reported(capsys):
    def boom(ids):
        raise KeyError("x")

    assert gc.check.count_pairs(boom) is False
    assert "KeyError" in capsys.readouterr().out
    assert gc.check.merge_pair(42) is False
    assert "需要传入一个函数" in capsys.readouterr().out


def test_unfinished_exercise_says_not_done_and_is_recorded(capsys):
    def stub(ids):
        raise NotImplementedError("提示：数相邻的一对")

    assert gc.check.count_pairs(stub) is False
    assert "还没完成" in capsys.readouterr().out
    assert gc.check.merge_pair(None) is False
    assert "还没完成" in capsys.readouterr().out
    from gptcourse.check import _common
    assert _common.RESULTS["count_pairs"]["passed"] is False
    assert _common.RESULTS["count_pairs"]["message"].startswith("还没完成")
    assert gc.check.count_pairs(nb01.solution_count_pairs) is True
    assert _common.RESULTS["count_pairs"] == {"exercise": "count_pairs", "passed": True,
                                              "message": "正确"}


def test_every_exercise_has_a_wrong_answer_test():
    assert set(WRONG) == set(nb01.EXERCISES)


def test_show_solution(capsys):
    gc.check.show_solution("shift_xy")
    assert "def solution_shift_xy" in capsys.readouterr().out
    with pytest.raises(ValueError, match="可选"):
        gc.check.show_solution("nope")
