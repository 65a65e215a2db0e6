"""GPTConfig：每个字段都检查，坏值给出说明；预设照常能建。"""
from __future__ import annotations

import pytest

from gptcourse.config import MAX_BLOCK_SIZE, GPTConfig, preset


@pytest.mark.parametrize("override, message", [
    (dict(norm_eps=-1.0), "norm_eps 必须是 > 0"),
    (dict(norm_eps=0.0), "norm_eps 必须是 > 0"),
    (dict(norm_eps=float("nan")), "norm_eps"),
    (dict(rope_base=0, pos="rope"), "rope_base 必须是 > 1"),
    (dict(rope_base=-5, pos="rope"), "rope_base 必须是 > 1"),
    (dict(rope_base=1.0), "rope_base 必须是 > 1"),
    (dict(rope_base=float("inf")), "rope_base"),
    (dict(init_std=-1), "init_std 必须是 > 0"),
    (dict(dropout=1.0), r"dropout 必须在 \[0, 1\) 内"),
    (dict(attn_dropout=-0.1), r"attn_dropout 必须在 \[0, 1\) 内"),
    (dict(resid_dropout=float("nan")), "resid_dropout"),
    (dict(dropout="0.1"), "dropout"),
    (dict(n_embd=0), "n_embd 必须 ≥ 1"),
    (dict(n_layer=-1), "n_layer 必须 ≥ 1"),
    (dict(vocab_size=0), "vocab_size 必须 ≥ 1"),
    (dict(n_embd=96.0), "n_embd 必须是整数"),
    (dict(n_layer=2.5), "n_layer 必须是整数"),
    (dict(n_head=True), "n_head 必须是整数"),
    (dict(vocab_size="x"), "vocab_size 必须是整数"),
    (dict(n_embd=100, n_head=3), "必须能被 n_head=3 整除"),
    (dict(block_size=MAX_BLOCK_SIZE + 1), "block_size=8193 太大"),
    (dict(bias="yes"), "bias 必须是 True 或 False"),
    (dict(colour="blue"), r"未知字段：\['colour'\]"),
])
def test_config_validation(override, message):
    with pytest.raises(ValueError, match=message):
        preset("mini", **override)


def test_config_from_dict_rejects_non_dicts_and_presets_still_build():
    with pytest.raises(ValueError, match="配置应是 dict"):
        GPTConfig.from_dict([1, 2])
    for name in ("mini", "teacher", "gpt2", "course"):
        assert GPTConfig.from_dict(preset(name).to_dict()) == preset(name)
