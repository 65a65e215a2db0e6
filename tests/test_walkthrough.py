"""手算例子 春天 → 来：真实模型上截下的每个中间值都等于 COURSE_SPEC 里的手算结果（4 位小数）。"""
from __future__ import annotations

import math

import pytest
import torch

from gptcourse import walkthrough as w
from gptcourse.model import GPT


@pytest.fixture(scope="module")
def trace():
    return w.run()


def near(actual, expected, tol=1e-4):
    torch.testing.assert_close(torch.as_tensor(actual, dtype=torch.float32),
                               torch.tensor(expected, dtype=torch.float32), atol=tol, rtol=0)


def test_model_is_the_real_gpt_with_the_spec_config():
    m = w.build_model()
    cfg = m.config
    assert type(m) is GPT and not m.training
    assert (cfg.vocab_size, cfg.n_embd, cfg.n_head, cfg.n_layer, cfg.mlp_hidden) == (4, 2, 1, 1, 8)
    assert cfg.pos == "learned" and cfg.norm == "layernorm" and cfg.mlp == "gelu"
    assert cfg.gelu_approx == "none" and cfg.qkv == "fused" and cfg.bias and cfg.tie_weights
    assert cfg.block_size >= 3
    assert m.lm_head.weight is m.tok_emb.weight
    for name, p in m.named_parameters():
        if name.endswith("bias"):
            assert torch.count_nonzero(p) == 0, name


def test_every_intermediate_value(trace):
    t = trace
    near(t["X"], [[1.1, 0], [0, 1.1]])
    near(t["LN1"], [[1, -1], [-1, 1]])
    for name in ("Q", "K", "V"):
        near(t[name], [[1, -1], [-1, 1]])
    near(t["scores"], [[1.4142, -1.4142], [-1.4142, 1.4142]])
    assert t["masked_scores"][0, 1].item() == float("-inf")
    near(t["masked_scores"][1], [-1.4142, 1.4142])
    near(t["attn_weights"], [[1, 0], [0.0558, 0.9442]])
    near(t["attn_out"][1], [-0.8884, 0.8884])
    near(t["resid1"][1], [-0.8884, 1.9884])
    near(t["LN2"][1], [-1, 1])
    near(t["hidden_pre"][1], [-1, 1, 0, 0, 0, 0, 0, 0])
    near(t["hidden_post"][1][:2], [-0.1587, 0.8413])
    near(t["mlp_out"][1], [-0.1587, 0.8413])
    # 精确值 −1.04704；COURSE_SPEC 的 −1.0471 是先把两项四舍五入再相加，差 6e-5 < 1e-4
    near(t["resid2"][1], [-1.0471, 2.8297])
    near(t["LNf"][1], [-1, 1])
    near(t["logits"], [-1, 1, 2, -2])
    near(t["probs"], [0.0347, 0.2562, 0.6964, 0.0128])


def test_decoding_and_training_numbers(trace):
    t = trace
    assert t["greedy_id"] == 2 and t["greedy_char"] == "来"
    assert t["top2_ids"] == [2, 1]
    near(t["top2_probs"], [0.7311, 0.2689])
    assert t["next_ids"] == [0, 1, 2] and t["next_text"] == "春天来"
    assert round(t["loss"], 4) == 0.3618
    assert math.isclose(t["loss"], -math.log(t["probs"][2].item()), rel_tol=1e-6)
    near(t["grad"], [0.0347, 0.2562, -0.3036, 0.0128])
    # autograd 的梯度 = p − onehot
    torch.testing.assert_close(t["grad"], t["grad_formula"], atol=1e-6, rtol=0)


def test_trace_comes_from_the_model_weights():
    """换掉一个权重，截下的值必须跟着变（说明 trace 不是写死的数字）。"""
    m = w.build_model()
    with torch.no_grad():
        m.pos_emb.weight[1, 1] = 0.5
    t = w.run(m)
    near(t["X"][1], [0, 1.5])
    assert abs(t["probs"][2].item() - 0.6964) < 1e-3   # 归一化后几乎不变：LayerNorm 抹掉了尺度
    with torch.no_grad():
        m.tok_emb.weight[2] = torch.tensor([1.0, 1.0])
    assert w.run(m)["greedy_id"] != 2


def test_step_table(trace):
    rows = w.step_table(trace)
    assert len(rows) >= 15 and all(len(r) == 3 for r in rows)
    text = "\n".join(" ".join(r) for r in rows)
    for s in ("0.0558, 0.9442", "−0.8884, 1.9884", "−1, 1, 2, −2", "0.0347, 0.2562, 0.6964, 0.0128",
              "来 0.7311", "天 0.2689", "春天来", "0.3618", "−0.3036", "−∞"):
        assert s in text, s


def test_run_leaves_model_clean():
    m = w.build_model()
    w.run(m)
    attn = m.blocks[0].attn
    assert attn._record is None
    assert all(p.grad is None for p in m.parameters())
    assert not m.blocks[0].norm1._forward_hooks
