"""常见错误陈列馆：每个检查必须抓住错误的变体、放过正确的代码；症状必须真的测得出来。"""
from __future__ import annotations

import math

import pytest
import torch

import gptcourse as gc
from gptcourse import mistakes as M
from gptcourse.mistakes import demos

SPEC_MISTAKES = 12          # COURSE_SPEC 04 列出的错误个数


def test_gallery_covers_every_mistake_in_the_spec():
    assert len(M.GALLERY) == SPEC_MISTAKES
    assert len({m.key for m in M.GALLERY}) == SPEC_MISTAKES


@pytest.mark.parametrize("mistake", M.GALLERY, ids=[m.key for m in M.GALLERY])
def test_check_fires_on_wrong_and_passes_on_correct(mistake):
    wrong, right = mistake.detect(mistake.wrong), mistake.detect(mistake.correct)
    assert not wrong.ok, f"{mistake.title}：检查没有发现错误：{wrong.message}"
    assert right.ok, f"{mistake.title}：正确的代码被误报：{right.message}"
    assert str(wrong).startswith("发现错误") and str(right).startswith("通过")


def test_wrong_variants_are_not_reachable_from_the_normal_api():
    names = {getattr(m.wrong, "__name__", "") for m in M.GALLERY}
    for mod in (gc.model, gc.generate, gc.train, gc.data, gc.sampling):
        assert not names & set(vars(mod)), mod.__name__


def test_attention_checks_agree_with_reference():
    assert M.check_matches_reference(M.attention_core).ok
    for bad in (M.attention_no_mask, M.attention_softmax_wrong_dim,
                M.attention_scaled_by_n_embd):
        assert not M.check_matches_reference(bad).ok
    # 读出的权重矩阵：正确版本是下三角、行和为 1
    q, k = torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    w = M.attention_weights(M.attention_core, q, k)
    torch.testing.assert_close(w.sum(-1), torch.ones(1, 2, 6))
    assert (w.triu(1) == 0).all()
    assert M.implied_scale(M.attention_scaled_by_n_embd) == pytest.approx(1 / 8, rel=1e-3)


def test_real_model_attention_and_sampling_pass_the_checks():
    """包里真正的模型与采样器也经得起同样的检查。"""
    torch.manual_seed(0)
    model = gc.model.GPT(M.tiny_config(50, block_size=16))
    assert M.check_no_future_leak(model).ok
    assert M.check_parameters_registered(model).ok
    assert M.check_top_k(gc.sampling.top_k_filter).ok
    assert M.check_targets_shifted(gc.data.get_batch).ok


def test_demo_unshifted_targets_learns_to_copy():
    d = demos.demo_unshifted_targets(steps=60)
    assert d["wrong"]["train_loss"] < d["right"]["train_loss"] - 3        # 抄输入太容易
    assert d["wrong"]["val_loss"] > d["right"]["val_loss"]                # 真正的任务更差
    assert len(set(d["wrong"]["sample"][2:])) == 1                        # 复读同一个字


def test_demo_no_mask_low_loss_and_leak():
    d = demos.demo_no_mask(M.attention_no_mask, steps=100)
    assert d["wrong"]["train_loss"] < d["right"]["train_loss"] - 0.5
    assert d["wrong"]["leak"] > 0 and d["right"]["leak"] == 0


def test_demo_list_blocks_trains_nothing_inside_the_blocks():
    d = demos.demo_list_blocks(steps=5)
    assert d["wrong"]["seen"] < d["wrong"]["actual"] == d["right"]["seen"]
    assert d["wrong"]["block_change"] == 0 < d["right"]["block_change"]


def test_demo_forget_train_and_eval():
    d = demos.demo_forget_train(steps=25, eval_every=10)
    assert d["wrong"] == {"steps": 25, "eval_mode_steps": 15}
    assert d["right"] == {"steps": 25, "eval_mode_steps": 0}
    tok, _, val = M.real_data()
    torch.manual_seed(0)
    model = gc.model.GPT(M.tiny_config(tok.vocab_size, dropout=0.3, attn_dropout=0.3,
                                       resid_dropout=0.3))
    e = demos.demo_forget_eval(model, val, repeats=3)
    assert len(set(e["wrong"])) == 3 and len(set(e["right"])) == 1


def test_demo_sampling_mistakes():
    torch.manual_seed(0)
    tok, _, _ = M.real_data()
    model = gc.model.GPT(M.tiny_config(tok.vocab_size, block_size=16))
    long = demos.demo_long_input(model, tok)
    assert "block_size=16" in long["error"] and long["fails_at_length"] == 17
    t0 = demos.demo_temperature_zero(model, tok)
    assert t0["nan_probs"] == t0["V"] == tok.vocab_size and t0["error"]
    assert "out of range" in demos.demo_top_k(10)["error"]


def test_demo_tiny_corpus_memorises():
    d = demos.demo_tiny_corpus(steps=80)
    assert d["train_loss"] < 0.3 and d["val_loss"] > d["train_loss"] + 3
    assert d["sample"] == d["poem"]                                       # 原样背出来
    assert d["uniform"] == pytest.approx(math.log(M.real_data()[0].vocab_size))
