"""gptcourse.quantize 与生成速度基准：量化了哪些层、权重共享、结果接近原模型、基准表的结构。"""
from __future__ import annotations

import torch

from gptcourse.config import preset
from gptcourse.generate import generate
from gptcourse.model import GPT
from gptcourse.quantize import (
    compare,
    decode_speed,
    linear_summary,
    quantize_dynamic_int8,
    state_dict_bytes,
)
from gptcourse.tokenizer import CharTokenizer
from gptcourse_kit.bench import generation as bench_gen


def _model(vocab=300):
    torch.manual_seed(0)
    return GPT(preset("course", vocab_size=vocab, block_size=64, n_layer=2, n_embd=128,
                      n_head=4)).eval()


def test_quantize_blocks_keeps_the_tie_and_head_variant_breaks_it():
    m = _model()
    n_linear = linear_summary(m)["fp32 Linear"]
    assert n_linear == 2 * 5 + 1                  # 每块 qkv/proj/gate/up/down + 输出头
    qb, qa = quantize_dynamic_int8(m), quantize_dynamic_int8(m, include_head=True)
    assert linear_summary(qb) == {"fp32 Linear": 1, "int8 Linear": n_linear - 1}
    assert qb.lm_head.weight is qb.tok_emb.weight                 # 共享保持
    assert linear_summary(qa) == {"fp32 Linear": 0, "int8 Linear": n_linear}
    assert linear_summary(m)["fp32 Linear"] == n_linear           # 原模型没有被改动
    fp32, small, head = state_dict_bytes(m), state_dict_bytes(qb), state_dict_bytes(qa)
    assert small < 0.5 * fp32 and small < head < fp32
    idx = torch.randint(300, (2, 20))
    with torch.no_grad():
        ref, q = m(idx)[0], qa(idx)[0]
    assert (ref - q).abs().max() < 0.1 * ref.abs().max()           # 量化误差小
    assert not torch.equal(ref, q)


def test_compare_and_generation_with_quantized_model():
    text = "床前明月光，疑是地上霜。举头望明月，低头思故乡。\n" * 20
    tok = CharTokenizer.from_text(text)
    m = _model(tok.vocab_size)
    q = quantize_dynamic_int8(m, include_head=True)
    out = compare(m, q, torch.tensor(tok.encode(text)), batch_size=4, n_batches=2,
                  speed_tokens=8, repeats=1)
    assert set(out) == {"fp32", "int8"}
    assert abs(out["fp32"]["val_loss"] - out["int8"]["val_loss"]) < 0.05
    assert out["int8"]["size_mb"] < out["fp32"]["size_mb"]
    assert all(v["tokens_per_s"] > 0 for v in out.values())
    poem = generate(q, tok, "床", form="五绝", seed=0)
    assert len(poem) == 24


def test_decode_speed_checks_length_and_bench_table():
    m = _model()
    assert decode_speed(m, 8, use_cache=True) > 0 and decode_speed(m, 8, use_cache=False) > 0
    try:
        decode_speed(m, 100)
    except ValueError as e:
        assert "block_size" in str(e)
    else:
        raise AssertionError("超过 block_size 应报错")
    result = bench_gen.run(lengths=(4, 8), repeats=1)
    assert [r["new_tokens"] for r in result["rows"]] == [4, 8]
    assert all(r["cache_speedup"] > 0 for r in result["rows"])
    table = bench_gen.markdown_table(result)
    assert table.count("\n") == 3 and "KV 缓存" in table
