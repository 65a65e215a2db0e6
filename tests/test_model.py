"""gptcourse.model：因果性、两条注意力路径、KV 缓存、参数计数、权重共享、dropout 与初始化。"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from gptcourse.config import preset
from gptcourse.model import GPT, RMSNorm, causal_mask, count_parameters, kv_cache_bytes

# 三种参考设计（teacher / gpt2 缩小了词表或层数，好在 CPU 上几秒内跑完；开关与原设计一致）
DESIGNS = {
    "mini": lambda **kw: preset("mini", **kw),
    "teacher": lambda **kw: preset("teacher", vocab_size=97, **kw),
    "gpt2": lambda **kw: preset("gpt2", vocab_size=101, n_layer=2, n_head=4, n_embd=64,
                                block_size=64, **kw),
}
PATHS = ("sdpa", "manual")


def build(design: str, seed: int = 0, **kw) -> GPT:
    torch.manual_seed(seed)
    return GPT(DESIGNS[design](**kw)).eval()


def leak(model: GPT, k: int, T: int = 40, seed: int = 1) -> tuple[float, float]:
    """把位置 ≥ k 的词元全部换掉，返回 (位置 < k 的 logits 最大变化, 位置 ≥ k 的最大变化)。"""
    V = model.config.vocab_size
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(V, (2, T), generator=g)                      # [B, T]
    idx2 = idx.clone()
    idx2[:, k:] = (idx[:, k:] + 1 + torch.randint(V - 1, (2, T - k), generator=g)) % V
    assert (idx2[:, k:] != idx[:, k:]).all()
    with torch.no_grad():
        a, _ = model(idx)
        b, _ = model(idx2)
    return (a[:, :k] - b[:, :k]).abs().max().item(), (a[:, k:] - b[:, k:]).abs().max().item()


def remove_causal_mask(model: GPT, monkeypatch) -> None:
    """故意去掉因果掩码：手写路径把掩码 buffer 全设为 True；SDPA 路径忽略 is_causal / attn_mask。"""
    for blk in model.blocks:
        blk.attn.mask.fill_(True)
    sdpa = F.scaled_dot_product_attention

    def unmasked(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kw):
        return sdpa(q, k, v, dropout_p=dropout_p, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", unmasked)


# ------------------------------------------------------------------ 因果性（泄漏测试）
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("design", list(DESIGNS))
def test_no_future_leak(design, path):
    model = build(design, attention=path)
    for k in (1, 17, 39):
        before, after = leak(model, k)
        assert before == 0.0, f"位置 < {k} 的 logits 变了 {before}：未来信息泄漏"
        assert after > 1e-4, "改动的位置本身应该受影响（否则这个测试什么也没测）"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("design", list(DESIGNS))
def test_leak_test_catches_missing_mask(design, path, monkeypatch):
    model = build(design, attention=path)
    remove_causal_mask(model, monkeypatch)
    before, _ = leak(model, 17)
    assert before > 1e-4, "去掉掩码后泄漏测试必须失败"


# ------------------------------------------------------------------ 两条注意力路径、qkv 写法
@pytest.mark.parametrize("design", list(DESIGNS))
def test_manual_attention_equals_sdpa(design):
    sdpa = build(design, attention="sdpa")
    manual = GPT(DESIGNS[design](attention="manual")).eval()
    manual.load_state_dict(sdpa.state_dict())
    idx = torch.randint(sdpa.config.vocab_size, (3, 33))
    with torch.no_grad():
        a, _ = sdpa(idx)
        b, _ = manual(idx)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert not torch.equal(a[:, 0], a[:, 1])                         # 输出不是平凡的常数


@pytest.mark.parametrize("design", list(DESIGNS))
def test_manual_attention_equals_sdpa_with_cache(design):
    sdpa = build(design, attention="sdpa")
    manual = GPT(DESIGNS[design](attention="manual")).eval()
    manual.load_state_dict(sdpa.state_dict())
    idx = torch.randint(sdpa.config.vocab_size, (2, 24))
    with torch.no_grad():
        caches = sdpa.new_cache(), manual.new_cache()
        for chunk in (idx[:, :9], idx[:, 9:10], idx[:, 10:17], idx[:, 17:18], idx[:, 18:]):
            a, _ = sdpa(chunk, cache=caches[0])
            b, _ = manual(chunk, cache=caches[1])
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert caches[0].length == caches[1].length == 24


@pytest.mark.parametrize("bias", [True, False])
def test_fused_qkv_equals_separate(bias):
    fused = build("mini", bias=bias)
    sep = GPT(preset("mini", qkv="separate", bias=bias)).eval()
    state = {}
    C = fused.config.n_embd
    for name, t in fused.state_dict().items():
        if ".attn.qkv." in name:
            for i, part in enumerate("qkv"):
                state[name.replace(".qkv.", f".{part}.")] = t[i * C:(i + 1) * C]
        else:
            state[name] = t
    sep.load_state_dict(state)
    idx = torch.randint(123, (2, 30))
    with torch.no_grad():
        torch.testing.assert_close(fused(idx)[0], sep(idx)[0], atol=1e-6, rtol=1e-6)
    a, b = count_parameters(fused), count_parameters(sep)
    assert a["total"] == b["total"]
    assert a["block.attn.qkv"] == sum(b[f"block.attn.{p}"] for p in "qkv")


# ------------------------------------------------------------------ 归一化
def test_handwritten_layernorm_equals_nn_layernorm(teacher):
    torch.manual_seed(0)
    x = torch.randn(4, 7, 96) * 2 + 0.5
    ln = nn.LayerNorm(96)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    ours = teacher("nb02.layernorm")(x, eps=ln.eps) * ln.weight + ln.bias   # 笔记本 02 的答案
    torch.testing.assert_close(ours, ln(x), atol=1e-5, rtol=1e-5)
    unbiased = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + ln.eps)
    assert not torch.allclose(unbiased * ln.weight + ln.bias, ln(x), atol=1e-4)


def test_rmsnorm_equals_torch_rmsnorm():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 64) * 3
    ours, ref = RMSNorm(64, eps=1e-5), nn.RMSNorm(64, eps=1e-5)
    with torch.no_grad():
        ours.weight.normal_()
        ref.weight.copy_(ours.weight)
    torch.testing.assert_close(ours(x), ref(x), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(ours(x), F.layer_norm(x, (64,)) * ours.weight, atol=1e-3)


# ------------------------------------------------------------------ KV 缓存
def cached_vs_full(model: GPT, n_new: int, prompt_len: int = 5, seed: int = 0) -> float:
    """逐个词元地贪心生成 n_new 个位置；每一步都把"用缓存的 logits"与"整段重算的 logits"比较，
    返回整个过程中的最大差值。"""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(model.config.vocab_size, (1, prompt_len), generator=g)
    cache = model.new_cache()
    worst = 0.0
    with torch.no_grad():
        logits, _ = model(idx, cache=cache)                           # 先把提示词整段放进缓存
        for _ in range(n_new):
            nxt = logits[:, -1].argmax(-1, keepdim=True)              # [1, 1]
            idx = torch.cat([idx, nxt], dim=1)
            logits, _ = model(nxt, cache=cache)                       # 只算新位置
            full, _ = model(idx)                                      # 整段重算
            worst = max(worst, (logits[:, -1] - full[:, -1]).abs().max().item())
    assert cache.layers[0][0].shape[2] == idx.shape[1] == prompt_len + n_new
    return worst


CACHE_DESIGNS = {
    "learned": lambda **kw: preset("mini", block_size=128, **kw),
    "rope": lambda **kw: preset("teacher", vocab_size=97, n_embd=64, n_layer=2, block_size=128,
                                **kw),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("pos", list(CACHE_DESIGNS))
def test_cached_decoding_equals_full_recomputation(pos, path):
    torch.manual_seed(0)
    model = GPT(CACHE_DESIGNS[pos](attention=path)).eval()
    assert cached_vs_full(model, n_new=110) < 1e-4


def test_cache_test_catches_rope_position_bug(monkeypatch):
    """经典 bug：解码时每个新词元都用位置 0 的 RoPE 角度。上面的测试必须能发现它。"""
    torch.manual_seed(0)
    model = GPT(CACHE_DESIGNS["rope"]()).eval()
    from gptcourse.model import KVCache
    monkeypatch.setattr(KVCache, "length", property(lambda self: 0))
    assert cached_vs_full(model, n_new=20) > 1e-3


def test_cache_memory_and_shapes():
    model = build("mini")
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.zeros(2, 10, dtype=torch.long), cache=cache)
    k, v = cache.layers[0]
    assert k.shape == v.shape == (2, 4, 10, 24)                       # [B, H, S, D]
    assert cache.length == 10
    assert cache.nbytes() == 2 * 3 * 2 * 10 * 96 * 4                  # 2·L·B·T·C·4 字节
    assert cache.nbytes() == kv_cache_bytes(3, 2, 10, 96)    # 公式与真实的缓存一致


def test_causal_mask_is_the_lower_triangle_and_the_attention_buffer():
    m = causal_mask(4)
    assert m.dtype == torch.bool and m.tolist() == [[j <= i for j in range(4)] for i in range(4)]
    model = build("mini")
    assert torch.equal(model.blocks[0].attn.mask, causal_mask(model.config.block_size))


def test_cache_is_preallocated_and_written_in_place():
    """缓冲区 [B, H, block_size, D] 只分配一次；之后每一步写进同一块内存，不拼接、不重新分配。"""
    model = build("mini")                                             # block_size 64
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.zeros(1, 5, dtype=torch.long), cache=cache)
        buffers = [(k.data_ptr(), v.data_ptr()) for k, v in zip(cache.k, cache.v)]
        for _ in range(20):
            model(torch.ones(1, 1, dtype=torch.long), cache=cache)
    assert [tuple(k.shape) for k in cache.k] == [(1, 4, 64, 24)] * 3
    assert [(k.data_ptr(), v.data_ptr()) for k, v in zip(cache.k, cache.v)] == buffers
    assert cache.length == 25 and cache.layers[2][1].shape == (1, 4, 25, 24)
    with pytest.raises(ValueError, match="批大小"):
        model(torch.zeros(2, 1, dtype=torch.long), cache=cache)


# ------------------------------------------------------------------ 参数计数
MINI_BREAKDOWN = {
    "tok_emb": 11_808, "pos_emb": 6_144, "block.norm1": 192, "block.attn.qkv": 27_936,
    "block.attn.proj": 9_312, "block.norm2": 192, "block.mlp.fc": 37_248,
    "block.mlp.proj": 36_960, "per_block": 111_840, "blocks": 335_520, "final_norm": 192,
    "lm_head": 0, "total": 353_664,
}


def test_mini_parameter_breakdown():
    counts = count_parameters(GPT(preset("mini")))
    assert counts == MINI_BREAKDOWN
    untied = count_parameters(GPT(preset("mini", tie_weights=False)))
    assert untied["lm_head"] == 11_808 and untied["total"] == 353_664 + 11_808


def test_teacher_and_course_counts():
    cfg = preset("teacher")
    assert cfg.mlp_hidden == 704
    c = count_parameters(GPT(cfg))
    assert c["block.mlp.gate"] == c["block.mlp.up"] == c["block.mlp.down"] == 256 * 704
    assert c["block.attn.qkv"] == 3 * 256 * 256                      # 无偏置
    assert c["block.norm1"] == 256                                    # RMSNorm 只有 γ
    assert c["pos_emb"] == 0 and c["lm_head"] == 0
    assert c["per_block"] == 803_328
    assert c["total"] == 4_861_184                                    # 6,436×256 + 4 块 + 最终 γ
    course = count_parameters(GPT(preset("course")))
    assert course["per_block"] == 803_328
    assert course["total"] == preset("course").vocab_size * 256 + 4 * 803_328 + 256


@pytest.mark.parametrize("block_size, tie, total", [
    (256, True, 123_849_984), (256, False, 162_447_360),
    (1024, True, 124_439_808), (1024, False, 163_037_184),
])
def test_gpt2_counts(block_size, tie, total):
    with torch.device("meta"):                                        # 只数参数，不分配内存
        model = GPT(preset("gpt2", block_size=block_size, tie_weights=tie))
    c = count_parameters(model)
    assert c["total"] == total
    assert c["lm_head"] == (0 if tie else 38_597_376)
    assert c["per_block"] == 7_087_872
    parts = c["tok_emb"] + c["pos_emb"] + c["blocks"] + c["final_norm"] + c["lm_head"]
    assert parts == c["total"]


def test_untied_gpt2_adds_exactly_the_embedding_matrix():
    with torch.device("meta"):
        tied = count_parameters(GPT(preset("gpt2")))["total"]
        untied = count_parameters(GPT(preset("gpt2", tie_weights=False)))["total"]
    assert untied - tied == 38_597_376 == 50_257 * 768


def test_breakdown_sums_to_total_for_every_preset():
    for name in ("mini", "teacher"):
        c = count_parameters(GPT(preset(name)))
        per_block = sum(v for k, v in c.items() if k.startswith("block."))
        assert per_block == c["per_block"]
        parts = c["tok_emb"] + c["pos_emb"] + c["blocks"] + c["final_norm"] + c["lm_head"]
        assert parts == c["total"]


# ------------------------------------------------------------------ 权重共享、掩码 buffer
def test_weight_tying_shares_one_tensor():
    model = build("mini")
    assert model.lm_head.weight is model.tok_emb.weight
    with torch.no_grad():
        model.tok_emb.weight[5, 0] = 123.0
    assert model.lm_head.weight[5, 0].item() == 123.0
    moved = model.to(torch.float64)
    assert moved.lm_head.weight is moved.tok_emb.weight
    untied = build("mini", tie_weights=False)
    assert untied.lm_head.weight is not untied.tok_emb.weight


def test_mask_is_a_buffer_not_a_parameter_and_not_saved():
    model = build("mini")
    assert "blocks.0.attn.mask" in dict(model.named_buffers())      # 随 .to(device) 移动……
    assert not any("mask" in k for k in model.state_dict())         # ……但不存：由 block_size 决定
    assert all("mask" not in n for n, _ in model.named_parameters())
    m = model.blocks[0].attn.mask
    assert m.dtype == torch.bool and torch.equal(m, torch.tril(torch.ones(64, 64)).bool())
    model.to(torch.float64)                                           # 浮点转换不影响布尔 buffer
    assert model.blocks[0].attn.mask.dtype == torch.bool


# ------------------------------------------------------------------ dropout 与模式
@pytest.mark.parametrize("path", PATHS)
def test_eval_is_deterministic_with_dropout(path):
    model = build("mini", attention=path, dropout=0.3, attn_dropout=0.5, resid_dropout=0.3)
    idx = torch.randint(123, (2, 20))
    with torch.no_grad():
        a, b = model(idx)[0], model(idx)[0]
        assert torch.equal(a, b)
        model.train()
        c, d = model(idx)[0], model(idx)[0]
    assert not torch.equal(c, d)


@pytest.mark.parametrize("path", PATHS)
def test_attention_dropout_active_only_in_training(path):
    """只有注意力 dropout > 0：train() 下两次结果不同（SDPA 的 dropout_p 真的生效），
    eval() 下相同。"""
    model = build("mini", attention=path, dropout=0.0, attn_dropout=0.5, resid_dropout=0.0)
    idx = torch.randint(123, (2, 20))
    with torch.no_grad():
        torch.testing.assert_close(model(idx)[0], model(idx)[0], atol=0, rtol=0)
        model.train()
        assert not torch.equal(model(idx)[0], model(idx)[0])


# ------------------------------------------------------------------ 初始化
def test_initialisation():
    cfg = preset("gpt2", vocab_size=500, n_layer=6, n_head=4, n_embd=256, block_size=64)
    torch.manual_seed(0)
    model = GPT(cfg)
    resid_std = 0.02 / math.sqrt(2 * cfg.n_layer)
    assert abs(model.tok_emb.weight.std().item() - 0.02) < 0.001
    assert abs(model.pos_emb.weight.std().item() - 0.02) < 0.002
    for blk in model.blocks:
        assert abs(blk.attn.q.weight.std().item() - 0.02) < 0.001
        assert abs(blk.mlp.fc.weight.std().item() - 0.02) < 0.001
        assert abs(blk.attn.proj.weight.std().item() - resid_std) < 0.05 * resid_std
        assert abs(blk.mlp.proj.weight.std().item() - resid_std) < 0.05 * resid_std
        for lin in (blk.attn.q, blk.attn.k, blk.attn.v, blk.attn.proj, blk.mlp.fc, blk.mlp.proj):
            assert torch.count_nonzero(lin.bias) == 0
        assert torch.equal(blk.norm1.weight, torch.ones(256))
        assert torch.count_nonzero(blk.norm1.bias) == 0
    swiglu = GPT(preset("teacher", vocab_size=97))
    down_std = 0.02 / math.sqrt(2 * 4)
    assert abs(swiglu.blocks[0].mlp.down.weight.std().item() - down_std) < 0.05 * down_std
    assert swiglu.blocks[0].mlp.gate.bias is None


def test_initial_loss_is_about_ln_vocab():
    model = build("mini", dropout=0.0, attn_dropout=0.0, resid_dropout=0.0)
    g = torch.Generator().manual_seed(0)
    idx, targets = torch.randint(123, (2, 8, 64), generator=g)       # 目标与输入无关
    with torch.no_grad():
        _, loss = model(idx, targets)
    assert abs(loss.item() - math.log(123)) < 0.05


# ------------------------------------------------------------------ 契约与错误
def test_contract_shapes_and_loss():
    model = build("mini")
    idx = torch.randint(123, (3, 11))                                 # [B, T]
    logits, loss = model(idx)
    assert logits.shape == (3, 11, 123) and loss is None              # [B, T, V]
    _, loss = model(idx, idx)
    assert loss.shape == () and loss.item() > 0


def test_too_long_input_is_a_clear_error():
    model = build("mini")
    with pytest.raises(ValueError, match="block_size=64"):
        model(torch.zeros(1, 65, dtype=torch.long))
    cache = model.new_cache()
    model(torch.zeros(1, 60, dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match="超过"):
        model(torch.zeros(1, 5, dtype=torch.long), cache=cache)
    model(torch.zeros(1, 64, dtype=torch.long))                       # 恰好 64 个是允许的


def test_bad_idx_is_a_clear_error():
    model = build("mini")
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        model(torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="整数"):
        model(torch.zeros(1, 5))


def test_attention_maps():
    model = build("teacher").train()
    idx = torch.randint(97, (2, 12))
    maps = model.attention_maps(idx)
    assert len(maps) == 4 and maps[0].shape == (2, 4, 12, 12)         # 每层 [B, H, T, T]
    for a in maps:
        torch.testing.assert_close(a.sum(-1), torch.ones(2, 4, 12))
        assert torch.count_nonzero(torch.triu(a, diagonal=1)) == 0
    assert model.training                                             # 恢复原来的模式
    assert all(b.attn._record is None for b in model.blocks)          # 记录结束，恢复原样
