"""笔记本 05 的练习检查器：参考答案通过，典型错误各自得到对应的中文提示。"""
from __future__ import annotations

import math

import pytest
import torch

import gptcourse as gc
from gptcourse.check import nb05


@pytest.mark.parametrize("name", nb05.NB05_EXERCISES)
def test_solutions_pass_and_are_registered(passes, capsys, name):
    assert passes(getattr(gc.check, name), gc.check.SOLUTIONS[name])[0]
    gc.check.show_solution(name)
    assert f"def solution_{name}" in capsys.readouterr().out


def test_top_p_that_drops_the_crossing_token_fails(passes, capsys):
    def wrong(logits, p):                       # 用"包括自己的累计和 > p"：越过 p 的那个也被删了
        s, order = torch.sort(logits, descending=True)
        remove = torch.zeros_like(logits, dtype=torch.bool)
        remove[order] = torch.cumsum(s.softmax(-1), -1) > p
        return logits.masked_fill(remove, float("-inf"))

    ok, out = passes(gc.check.top_p, wrong)
    assert not ok and "越过 p" in out


def test_penalty_that_divides_negative_logits_fails(passes, capsys):
    def wrong(logits, ids, penalty):
        out = logits.clone()
        for i in set(ids):
            out[i] = out[i] / penalty
        return out

    ok, out = passes(gc.check.repetition_penalty, wrong)
    assert not ok and "负 logit 应该乘以 penalty" in out


def test_temperature_without_error_for_negative_tau_fails(passes, capsys):
    def no_check(logits, tau):
        if tau == 0:
            return torch.nn.functional.one_hot(logits.argmax(), logits.numel()).float()
        return torch.softmax(logits / tau, -1)

    ok, out = passes(gc.check.temperature_softmax, no_check)
    assert not ok and "ValueError" in out


def test_cached_attention_without_scaling_fails(passes, capsys):
    def unscaled(q, k_new, v_new, k_cache, v_cache):
        k, v = torch.cat([k_cache, k_new], 2), torch.cat([v_cache, v_new], 2)
        return (q @ k.transpose(-2, -1)).softmax(-1) @ v, k, v

    ok, out = passes(gc.check.cached_attention_step, unscaled)
    assert not ok and "√D" in out


def test_greedy_without_crop_fails_and_kv_bytes_hint(passes, capsys):
    def no_crop(model, ids, n):
        ids = list(ids)
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids]))[0][0, -1].argmax()))
        return ids[-n:]

    ok, out = passes(gc.check.greedy_decode, no_crop)
    assert not ok and "block_size" in out
    ok, out = passes(gc.check.kv_cache_bytes, lambda L, B, T, C, b: L * B * T * C * b)
    assert not ok and "乘 2" in out
    assert nb05.solution_kv_cache_bytes(12, 1, 1024, 768) == 75_497_472 == 72 * 2**20
    assert math.isclose(nb05.solution_kv_cache_bytes(4, 1, 128, 256) / 2**20, 1.0)
