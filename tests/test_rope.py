"""RoPE：保持长度、分数只取决于相对距离、V 不旋转、两种配对方式等价。"""
from __future__ import annotations

import math

import pytest
import torch

import gptcourse.model as gc_model
from gptcourse.config import preset
from gptcourse.model import GPT
from gptcourse.rope import apply_rope, apply_rope_interleaved, interleaved_to_half, rope_angles


def cos_sin(D: int, P: int):
    ang = rope_angles(D, P)                                           # [P, D/2]
    return ang.cos(), ang.sin()


def test_angle_table_values():
    ang = rope_angles(8, 5, base=10000.0)
    assert ang.shape == (5, 4)
    expected = [[m * 10000 ** (-2 * i / 8) for i in range(4)] for m in range(5)]
    torch.testing.assert_close(ang, torch.tensor(expected))
    assert ang[3, 0].item() == 3.0                                    # 第 0 对：θ = 1
    with pytest.raises(ValueError, match="偶数"):
        rope_angles(7, 4)


def test_rotation_preserves_norm():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 50, 16)                                     # [B, H, T, D]
    cos, sin = cos_sin(16, 50)
    y = apply_rope(x, cos, sin)
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1))
    assert not torch.allclose(y[..., 1:, :], x[..., 1:, :])           # 位置 ≥ 1 确实被转动了
    torch.testing.assert_close(y[..., 0, :], x[..., 0, :])            # 位置 0 转 0 度


def test_one_pair_is_a_2d_rotation():
    D, m = 8, 3
    cos, sin = cos_sin(D, m + 1)
    x = torch.zeros(D)
    x[1], x[1 + D // 2] = 1.0, 2.0                  # rotate-half：第 1 维与第 5 维成对
    y = apply_rope(x.expand(m + 1, D), cos, sin)[m]
    a = m * 10000 ** (-2 / D)
    assert math.isclose(y[1].item(), math.cos(a) - 2 * math.sin(a), abs_tol=1e-6)
    assert math.isclose(y[5].item(), math.sin(a) + 2 * math.cos(a), abs_tol=1e-6)
    assert torch.count_nonzero(y) == 2


def test_score_depends_only_on_offset():
    torch.manual_seed(1)
    D, P = 32, 80
    cos, sin = cos_sin(D, P)
    q, k = torch.randn(D), torch.randn(D)
    qs, ks = apply_rope(q.expand(P, D), cos, sin), apply_rope(k.expand(P, D), cos, sin)
    s = qs @ ks.T                                                     # s[m, n]
    for off in (0, 1, 5, 30):
        diag = torch.diagonal(s, offset=-off)                         # 所有 m − n = off 的分数
        torch.testing.assert_close(diag, diag[0].expand_as(diag), atol=1e-4, rtol=1e-4)
    assert abs(s[10, 9] - s[10, 5]) > 1e-3                             # 不同距离的分数确实不同
    plain = (q.expand(P, D) * (1 + torch.arange(P)[:, None] / P)) @ k.expand(P, D).T
    assert not torch.allclose(torch.diagonal(plain, -1), torch.diagonal(plain, -1)[0].expand(P - 1))


def test_rotate_half_and_interleaved_give_the_same_scores():
    torch.manual_seed(2)
    D, T = 16, 12
    cos, sin = cos_sin(D, T)
    qi, ki = torch.randn(T, D), torch.randn(T, D)                     # interleaved 排列下的 q、k
    si = apply_rope_interleaved(qi, cos, sin) @ apply_rope_interleaved(ki, cos, sin).T
    qh, kh = interleaved_to_half(qi), interleaved_to_half(ki)         # 固定的维度排列
    sh = apply_rope(qh, cos, sin) @ apply_rope(kh, cos, sin).T
    torch.testing.assert_close(si, sh, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(interleaved_to_half(apply_rope_interleaved(qi, cos, sin)),
                               apply_rope(qh, cos, sin), atol=1e-6, rtol=1e-6)
    # 不做排列直接混用两种写法，分数就不一样了
    mixed = apply_rope(qi, cos, sin) @ apply_rope(ki, cos, sin).T
    assert not torch.allclose(mixed, si, atol=1e-3)


def test_v_is_never_rotated():
    """在 RoPE 模型里截下 qkv 投影的 V 部分：注意力输出必须正好是 softmax 权重 × 未旋转的 V。"""
    torch.manual_seed(3)
    cfg = preset("teacher", vocab_size=50, n_embd=64, n_layer=1, block_size=32, attention="manual")
    model = GPT(cfg).eval()
    attn = model.blocks[0].attn
    seen = {}
    h1 = attn.qkv.register_forward_hook(lambda m, i, o: seen.__setitem__("qkv", o))
    h2 = attn.proj.register_forward_hook(lambda m, i, o: seen.__setitem__("y", i[0]))
    try:
        with torch.no_grad(), gc_model.record_attention(model) as rec:
            model(torch.randint(50, (2, 20)))
    finally:
        h1.remove()
        h2.remove()
    weights = rec[0]["weights"]
    B, T, C, H = 2, 20, 64, 4
    q, k, v = seen["qkv"].split(C, dim=-1)
    v = v.view(B, T, H, C // H).transpose(1, 2)                       # [B, H, T, D]，未旋转
    y = (weights @ v).transpose(1, 2).reshape(B, T, C)
    torch.testing.assert_close(y, seen["y"], atol=1e-6, rtol=1e-6)
    cos, sin = model.rope_cos[:T], model.rope_sin[:T]
    rotated = (weights @ apply_rope(v, cos, sin)).transpose(1, 2).reshape(B, T, C)
    assert not torch.allclose(rotated, seen["y"], atol=1e-4)  # 若 V 被旋转，上面的断言会失败


def test_rope_model_has_no_position_table_and_buffers_are_not_saved():
    model = GPT(preset("teacher", vocab_size=50))
    assert not hasattr(model, "pos_emb")
    assert "rope_cos" not in model.state_dict()                       # 可以随时重算，不存进检查点
    assert model.rope_cos.shape == (128, 32)                          # [block_size, head_dim/2]
