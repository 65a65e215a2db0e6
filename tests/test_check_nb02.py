"""笔记本 02 的练习检查器：参考答案通过，典型错误各自得到对应的中文提示。"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

import gptcourse as gc
from gptcourse.check import nb02
from gptcourse.config import preset
from gptcourse.model import GPT, count_parameters


def test_checkers_are_exported_and_solutions_registered(capsys):
    for name in ("causal_mask", "split_merge_heads", "rope_pair", "param_count",
                 "scaled_attention", "layernorm"):
        assert callable(getattr(gc.check, name))
    gc.check.show_solution("causal_mask")
    assert "torch.tril" in capsys.readouterr().out
    gc.check.show_solution("build_vocab")                            # 笔记本 01 的仍然可用
    assert "def solution_build_vocab" in capsys.readouterr().out


def test_causal_mask(passes, capsys):
    assert passes(nb02.causal_mask, nb02.solution_causal_mask)[0]
    ok, out = passes(nb02.causal_mask, lambda T: torch.triu(torch.ones(T, T)).bool())
    assert not ok and "triu" in out
    ok, out = passes(nb02.causal_mask, lambda T: ~torch.tril(torch.ones(T, T)).bool())
    assert not ok and "反了" in out
    ok, out = passes(nb02.causal_mask, lambda T: torch.tril(torch.ones(T, T)))
    assert not ok and "bool" in out
    ok, out = passes(nb02.causal_mask, lambda T: torch.tril(torch.ones(T, T), -1).bool())
    assert not ok and "对角线" in out
    ok, out = passes(nb02.causal_mask, lambda T: torch.ones(T, T).bool())
    assert not ok and "未来" in out
    ok, out = passes(nb02.causal_mask, lambda T: 1 / 0)
    assert not ok and "ZeroDivisionError" in out


def test_split_merge_heads(passes, capsys):
    assert passes(nb02.split_merge_heads, nb02.solution_split_heads,
                  nb02.solution_merge_heads)[0]

    def split_no_transpose(x, h):
        B, T, C = x.shape
        return x.view(B, h, T, C // h)

    ok, out = passes(nb02.split_merge_heads, split_no_transpose, nb02.solution_merge_heads)
    assert not ok and "transpose" in out

    def merge_no_contiguous(y):
        B, H, T, D = y.shape
        return y.transpose(1, 2).view(B, T, H * D)

    ok, out = passes(nb02.split_merge_heads, nb02.solution_split_heads, merge_no_contiguous)
    assert not ok and "contiguous" in out

    def merge_no_transpose(y):
        B, H, T, D = y.shape
        return y.reshape(B, T, H * D)

    ok, out = passes(nb02.split_merge_heads, nb02.solution_split_heads, merge_no_transpose)
    assert not ok and "transpose" in out


def test_rope_pair(passes, capsys):
    assert passes(nb02.rope_pair, nb02.solution_rope_pair)[0]

    def backwards(x1, x2, m, th):
        a = m * th
        return x1 * math.cos(a) + x2 * math.sin(a), -x1 * math.sin(a) + x2 * math.cos(a)

    ok, out = passes(nb02.rope_pair, backwards)
    assert not ok and "方向反了" in out

    def no_position(x1, x2, m, th):
        return nb02.solution_rope_pair(x1, x2, 1, th)

    ok, out = passes(nb02.rope_pair, no_position)
    assert not ok and "m·θ" in out
    ok, out = passes(nb02.rope_pair, lambda x1, x2, m, th: (x1, x2))
    assert not ok


def test_param_count(passes, capsys):
    truth = count_parameters(GPT(nb02.EXERCISE_CONFIG))["total"]
    assert nb02.solution_param_count() == truth
    assert nb02.solution_param_count(preset("mini")) == 353_664      # 公式对 mini 也成立
    assert passes(nb02.param_count, truth)[0]
    ok, out = passes(nb02.param_count, truth + 500 * 64)
    assert not ok and "输出头" in out
    ok, out = passes(nb02.param_count, truth - 2 * 64)
    assert not ok and "最终" in out
    ok, out = passes(nb02.param_count, truth + 7)
    assert not ok and "多" in out and str(truth) not in out and f"{truth:,}" not in out
    ok, out = passes(nb02.param_count, truth - 7)
    assert not ok and "少" in out
    ok, out = passes(nb02.param_count, 0)
    assert not ok and "填" in out
    ok, out = passes(nb02.param_count, "很多")
    assert not ok


def test_scaled_attention(passes, capsys):
    assert passes(nb02.scaled_attention, nb02.solution_scaled_attention)[0]
    ok, out = passes(nb02.scaled_attention,
                     lambda q, k, v: F.scaled_dot_product_attention(q, k, v))
    assert not ok and "因果掩码" in out
    ok, out = passes(nb02.scaled_attention,
                     lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                    scale=1.0))
    assert not ok and "√D" in out
    ok, out = passes(nb02.scaled_attention, lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, is_causal=True, scale=1 / math.sqrt(24)))
    assert not ok and "n_embd" in out

    def wrong_dim(q, k, v):
        T = q.shape[-2]
        att = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
        att = att.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool)), float("-inf"))
        return torch.nan_to_num(F.softmax(att, dim=-2)) @ v

    ok, out = passes(nb02.scaled_attention, wrong_dim)
    assert not ok and "dim=-1" in out


def test_layernorm(passes, capsys):
    assert passes(nb02.layernorm, nb02.solution_layernorm)[0]
    ok, out = passes(nb02.layernorm, lambda x, eps: (x - x.mean(-1, keepdim=True))
                     / torch.sqrt(x.var(-1, keepdim=True) + eps))
    assert not ok and "无偏" in out
    ok, out = passes(nb02.layernorm, lambda x, eps: x - x.mean(-1, keepdim=True))
    assert not ok
