"""笔记本 04 的练习检查器：参考答案必须通过，典型的错误答案必须被指出。"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import gptcourse as gc
from gptcourse.acceptance import distinct_n, poem_form
from gptcourse.check import nb04


@pytest.mark.parametrize("name", nb04.EXERCISES_04)
def test_reference_solutions_pass(name, capsys):
    assert getattr(gc.check, name)(nb04.SOLUTIONS[name]) is True
    assert "正确 ✓" in capsys.readouterr().out


def _no_slash_attention(q, k, v):                 # 找错题：只删掉了掩码（比原来更糟）
    att = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return F.softmax(att, dim=-1) @ v


def _prefix_leak_test(model):                      # 只比较最后一个位置 → 永远说"没有泄漏"
    idx = torch.randint(model.config.vocab_size, (1, model.config.block_size))
    a, _ = model(idx)
    return not torch.allclose(a[:, -1], model(idx)[0][:, -1])


WRONG = {
    "bits_from_loss": lambda loss: loss / math.log(10),
    "perplexity_from_loss": lambda loss: 2 ** loss,
    "form_checker": lambda p: "五绝" if len(p.removesuffix("\n")) == 24 else None,
    "future_leak_test": _prefix_leak_test,
    "fix_attention": _no_slash_attention,
    "distinct_ngrams": lambda poems, n: len({p[i:i + n] for p in poems
                                            for i in range(len(p) - n + 1)})
    / max(1, sum(len(p) - n + 1 for p in poems)),      # 跨了标点
}


@pytest.mark.parametrize("name", sorted(WRONG))
def test_wrong_answers_fail(name, capsys):
    assert getattr(gc.check, name)(WRONG[name]) is False
    assert "还不对 ✗" in capsys.readouterr().out


def test_every_exercise_has_a_wrong_answer_test():
    assert set(WRONG) == set(nb04.EXERCISES_04)


def test_buggy_attention_really_is_buggy():
    q = k = v = torch.randn(1, 1, 4, 8)
    assert torch.isnan(nb04.buggy_attention(q, k, v)).any()
    assert gc.check.fix_attention(nb04.buggy_attention) is False


def test_solutions_agree_with_the_package():
    for poem in nb04.FORM_CASES:
        assert nb04.solution_form_checker(poem) == poem_form(poem), poem
    val = gc.data.poems(gc.data.load_corpus("tang_5jue").val)
    assert [nb04.solution_form_checker(p) for p in val] == [poem_form(p) for p in val]
    for n in (1, 2, 3):
        assert nb04.solution_distinct_ngrams(val, n) == pytest.approx(distinct_n(val, n))


def test_checkers_report_exceptions_and_non_callables(capsys):
    assert gc.check.bits_from_loss(None) is False
    assert "需要传入一个函数" in capsys.readouterr().out

    def boom(p):
        raise KeyError(p)

    assert gc.check.form_checker(boom) is False
    assert "KeyError" in capsys.readouterr().out


def test_show_solution(capsys):
    gc.check.show_solution("fix_attention")
    assert "def solution_fix_attention" in capsys.readouterr().out
