"""采样：SamplingParams 的检查、各个过滤器在边界上的行为、极端的参数。"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gptcourse.config import preset
from gptcourse.errors import UserError
from gptcourse.generate import generate, next_token_probs
from gptcourse.model import GPT
from gptcourse.sampling import (
    GREEDY_BELOW,
    SamplingParams,
    apply_repetition_penalty,
    apply_temperature,
    check_sampling_args,
    sample_next,
    top_p_filter,
)
from gptcourse.tokenizer import CharTokenizer


# ---------------------------------------------------------------- SamplingParams：数的类型
def test_numpy_numbers_are_numbers(small_model, small_tok):
    p = SamplingParams(repetition_penalty=np.float32(1.2), top_k=np.int64(5))
    assert type(p.repetition_penalty) is float and type(p.top_k) is int
    a = generate(small_model, small_tok, "春", repetition_penalty=np.float32(1.2), seed=0,
                 max_new_tokens=8)
    b = generate(small_model, small_tok, "春", repetition_penalty=float(np.float32(1.2)), seed=0,
                 max_new_tokens=8)
    assert a == b


@pytest.mark.parametrize("value, kind", [(torch.tensor(1.2), "Tensor"), ("1.2", "str"),
                                         (True, "bool")])
def test_a_value_that_is_not_a_number_gets_a_type_message(value, kind):
    with pytest.raises(UserError,
                       match=f"repetition_penalty 必须是数（int 或 float），收到 {kind}"):
        SamplingParams(repetition_penalty=value)


def test_numpy_sampling_numbers_pass(small_model, small_tok):
    want = generate(small_model, small_tok, "春", max_new_tokens=3, seed=0, top_k=5,
                    temperature=0.8)
    assert generate(small_model, small_tok, "春", max_new_tokens=3, seed=0, top_k=np.int64(5),
                    temperature=np.float32(0.8)) == want


# ---------------------------------------------------------------- top-p 的边界
def test_top_p_boundary_is_inclusive():
    """四个相等的 logits：概率恰好是 1/4（2 的幂，任何 CPU 上都没有舍入）。

    p = 0.5：第 1、2 名前面的累计概率是 0、0.25 < 0.5，保留；第 3 名前面恰好是 0.5 ≥ p，去掉。
    把 ``before >= p`` 改成 ``>`` 会多留一个词元。
    """
    logits = torch.zeros(4)
    assert top_p_filter(logits, 0.5).isinf().tolist() == [False, False, True, True]
    assert top_p_filter(logits, 0.25).isinf().tolist() == [False, True, True, True]
    assert top_p_filter(logits, 0.75).isinf().tolist() == [False, False, False, True]
    assert top_p_filter(logits, 0.5000001).isinf().tolist() == [False, False, False, True]


def test_top_p_always_keeps_the_top_token():
    logits = torch.tensor([[0.0, 2.0, 1.0], [5.0, 5.0, 0.0]])
    for p in (1e-300, 1e-45, 1e-9):                           # 在 float32 里是 0 或几乎是 0
        assert top_p_filter(logits, p).isinf().tolist() == [[True, False, True],
                                                            [False, True, True]]


# ---------------------------------------------------------------- 极端的采样参数
@pytest.fixture(scope="module")
def char_tok() -> CharTokenizer:
    return CharTokenizer.from_text("床前明月光，疑是地上霜。\n")


@pytest.fixture(scope="module")
def model_and_tok(char_tok):
    torch.manual_seed(0)
    return GPT(preset("mini", vocab_size=char_tok.vocab_size, block_size=16, n_layer=1,
                      n_head=2, n_embd=16)), char_tok


@pytest.mark.parametrize("kw", [dict(temperature=1e-300), dict(temperature=GREEDY_BELOW / 2),
                                dict(top_p=1e-300), dict(top_p=1e-45),
                                dict(temperature=1e-300, top_p=1e-300, top_k=1)])
def test_tiny_values_act_as_greedy(model_and_tok, kw):
    """τ → 0 与 p → 0 的极限都是"只留最可能的那个"：与贪心的结果相同，不会让 multinomial 崩溃。"""
    model, tok = model_and_tok
    greedy = generate(model, tok, "明", max_new_tokens=8, temperature=0)
    assert generate(model, tok, "明", max_new_tokens=8, seed=0, **kw) == greedy
    probs = next_token_probs(model, tok, "明", **kw)
    assert torch.isfinite(probs).all() and probs.max().item() == pytest.approx(1.0)


def test_tiny_repetition_penalty_is_rejected_or_works(model_and_tok):
    model, tok = model_and_tok
    for bad in (1e-300, 0.001, 1e300, 101.0):
        with pytest.raises(ValueError, match=r"repetition_penalty 必须在 \[0.01, 100\] 之内"):
            generate(model, tok, "明", max_new_tokens=4, repetition_penalty=bad)
    for ok in (0.01, 100.0):                                   # 边界上的值能用
        assert len(generate(model, tok, "明", max_new_tokens=4, repetition_penalty=ok, seed=0))


def test_huge_temperature_is_rejected_and_the_limit_works(model_and_tok):
    model, tok = model_and_tok
    with pytest.raises(ValueError, match="temperature 最大为 100"):
        generate(model, tok, "明", temperature=1e300)
    with pytest.raises(ValueError, match="temperature 必须是 ≥ 0 的有限数"):
        check_sampling_args(temperature=float("inf"))
    assert len(generate(model, tok, "明", max_new_tokens=4, temperature=100.0, seed=0)) >= 1


def test_sampler_math_at_the_limits():
    logits = torch.tensor([1.0, 3.0, 3.0, float("-inf")])
    assert apply_temperature(logits, 1e-300).tolist() == [-math.inf, 3.0, 3.0, -math.inf]
    assert apply_temperature(logits, 0.5).tolist() == [2.0, 6.0, 6.0, -math.inf]
    g = torch.Generator().manual_seed(0)
    picks = {int(sample_next(logits, 1e-300, generator=g)) for _ in range(20)}
    assert picks == {1, 2}                                     # 并列第一的都可能被抽到
    out = apply_repetition_penalty(torch.tensor([2.0, -2.0]), [0, 1], 0.01)
    assert out.tolist() == pytest.approx([200.0, -0.02])
