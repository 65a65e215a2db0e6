"""笔记本 02 里装进模型的零件（RoPE ``rotate``、RMSNorm、MLP、注意力模块）：参考是包里的版本。"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..model import MLP, CausalSelfAttention, RMSNorm, causal_mask
from ..rope import apply_rope, apply_rope_interleaved
from ._common import Wrong, _call, _fail, _got, _ok, exercise
from .nb02_model import _BUFFER, _CFGS, _build, _match, _rope, _tables, _tensor, _which


# ---------------------------------------------------------------- 小工具
def _seeded(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """给模块的每个参数换上互不相同的随机值（初始化的 γ = 1、β = 0 会掩盖错误）。"""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.3 if p.dim() > 1 else 1.0))
    return module.eval()


# ---------------------------------------------------------------- 检查器
def _rotate_variants(x, cos, sin):
    h = apply_rope(x, cos, sin)
    return [(x, "输出与输入相同：没有旋转。前一半维度是 x1、后一半是 x2，"
                "用 rope_pair 转完再拼回去"),
            (apply_rope_interleaved(x, cos, sin),
             "这是 interleaved 配对（第 2i 与 2i+1 维）：课程模型用 rotate-half，"
             "第 i 维与第 i + D/2 维是一对，x1, x2 = x.chunk(2, dim=-1)"),
            (apply_rope(x, cos, -sin),
             "旋转方向反了（转了 −m·θ）：y1 = x1·cos − x2·sin，y2 = x1·sin + x2·cos"),
            (torch.cat([h[..., 4:], h[..., :4]], dim=-1),
             "拼接的顺序反了：应是 torch.cat([y1, y2], dim=-1)")]


@exercise
def rope_rotate(fn) -> bool:
    """练习：``rotate(x, cos, sin)`` 用 rotate-half 配对，一次转完 x [B,H,T,D] 的所有维度对。"""
    x = torch.randn(2, 3, 7, 8, generator=torch.Generator().manual_seed(6))
    cos, sin = _tables(8, 7)
    out = _got(fn, x, cos, sin)
    _tensor(out, x.shape)
    _match(out, apply_rope(x, cos, sin),
           "旋转必须保持每个向量的长度不变：检查 cos、sin 有没有用对地方"
           if not torch.allclose(out.norm(dim=-1), x.norm(dim=-1), atol=1e-4) else
           "数值与 gc.rope.apply_rope 不一致：rotate-half 里第 i 维和第几维是一对？"
           "两半各自转完，按什么顺序拼回去？", _rotate_variants, x, cos, sin)
    return _ok()


def _rms_variants(x, want, w, eps):
    rms = x.pow(2).mean(-1, keepdim=True)
    return [(want / w, "忘了乘可学习的 γ（self.weight）"),
            (F.layer_norm(x, (16,), eps=eps) * w,
             "这是 LayerNorm（减了均值）：RMSNorm 不减均值，只除以均方根"),
            (x / (rms.sqrt() + eps) * w, "eps 加在了开方之后：应是 x / sqrt(mean(x²) + eps)"),
            (x / torch.sqrt(rms + 1e-5) * w,                   # 与不加 eps 分不开：一句话说两种
             "没有用 self.eps（eps 写死了，或者根本没加）：应是 x / sqrt(mean(x²) + self.eps)"),
            (x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps) * w,
             "用的是平方和：RMSNorm 除以的是均方根，mean(x²) 而不是 sum(x²)")]


@exercise
def rmsnorm(cls) -> bool:
    """练习：你的 ``RMSNorm``（``__init__`` 给定）装上 ``gc.model.RMSNorm`` 的 γ 后，输出相同。"""
    g = torch.Generator().manual_seed(7)
    for eps in (1e-5, 0.5):                                           # 大 eps：放错位置会露出来
        ref = _seeded(RMSNorm(16, eps), 8)
        mine = _build(cls, ref, 16, eps)
        x = torch.randn(3, 5, 16, generator=g) * 2 + 0.5
        with torch.no_grad():
            want, got = ref(x), _got(mine, x, where="norm(x) ")
        _match(got, want, f"eps = {eps} 时数值与 gc.model.RMSNorm 不一致：均方根沿哪一维算"
               "（keepdim 了吗）？eps 加在哪里？γ 乘上了吗？",
               _rms_variants, x, want, ref.weight.detach(), eps)
    return _ok()


def _mlp_variants(ref: MLP, x, swiglu: bool):
    if swiglu:
        gate, up, down = ref.gate(x), ref.up(x), ref.down
        return [(down(gate * F.silu(up)),
                 "silu 套在了 up 上：门是 silu(gate(x))，down(silu(gate(x)) ⊙ up(x))"),
                (down(gate * up), "少了 silu：门要先过激活函数，silu(gate(x))"),
                (down(F.silu(gate)), "少了 up 那一路：SwiGLU 是 silu(gate(x)) ⊙ up(x)"),
                (down(F.gelu(gate) * up),
                 "激活函数用的是 GELU：SwiGLU 用 silu（= x·sigmoid(x)）")]
    h = ref.fc(x)
    return [(ref.proj(F.relu(h)), "用的是 ReLU：mini 设计用 GELU"),
            (ref.proj(h), "少了激活函数：proj(gelu(fc(x)))"),
            (ref.proj(F.gelu(h, approximate="tanh")),
             "用的是 GELU 的 tanh 近似：这个设计用精确的 GELU（self.act 就是它）")]


@exercise
def mlp(cls) -> bool:
    """练习：你的 ``MLP``（``__init__`` 给定）装上 ``gc.model.MLP`` 的权重后，两种设计都相同。"""
    for cfg in _CFGS:
        ref = _seeded(MLP(cfg), 9)
        mine = _build(cls, ref, cfg)
        x = torch.randn(2, 5, cfg.n_embd, generator=torch.Generator().manual_seed(10))
        with torch.no_grad():
            want, got = ref(x), _got(mine, x, where="mlp(x) ")
            _match(got, want, f"{cfg.mlp} 设计下输出与 gc.model.MLP 不一致",
                   _mlp_variants, ref, x, cfg.mlp == "swiglu")
    return _ok()


def _attention_variants(ref: CausalSelfAttention, x, rope):
    """常见写错的注意力：(输出, 提示)。"""
    B, T, C = x.shape
    H, D = ref.n_head, C // ref.n_head
    q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in ref.qkv(x).split(C, dim=-1))

    def finish(q, k, v, mask=None, scale=None, proj=True):
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale,
                                           is_causal=mask is None)
        y = y.transpose(1, 2).reshape(B, T, C)
        return ref.proj(y) if proj else y

    out = []
    if rope is not None:
        qr, kr = apply_rope(q, *rope), apply_rope(k, *rope)
        out += [(finish(qr, kr, apply_rope(v, *rope)), "V 也转了：RoPE 只转 Q 和 K，V 不动"),
                (finish(q, k, v), "没有用 rope：rope 不是 None 时，Q、K 要先 rotate(q, *rope)"),
                (finish(qr, k, v), "只转了 Q：K 也要转，点积才只取决于相对位置")]
    else:
        qr, kr = q, k
    return out + [(finish(qr, kr, v, proj=False), "少了输出投影：合并各头之后还要过 self.proj"),
                  (finish(qr, kr, v, mask=torch.ones(T, T, dtype=torch.bool)),
                   "没有因果掩码：把 self.mask[:T, :T] 传给 attention"),
                  (finish(qr, kr, v, scale=1 / math.sqrt(C)),
                   "除以的是 √C：attention 里除以 √D（head_dim）")]


@exercise
def attention_module(cls) -> bool:
    """练习：你的 ``CausalSelfAttention``（``__init__`` 给定）装上包里的权重后输出相同；
    ``forward`` 应调用你写的 ``split_heads``、``rotate``、``attention``、``merge_heads``。"""
    for cfg in _CFGS:
        ref = _seeded(CausalSelfAttention(cfg), 11)
        mine = _build(cls, ref, cfg)
        T = 7                                                         # 比 block_size 短：要切掩码
        x = torch.randn(2, T, cfg.n_embd, generator=torch.Generator().manual_seed(12))
        rope = _rope(cfg, T)
        with torch.no_grad():
            want, (got, err) = ref(x, rope), _call(mine, x, rope)
            if err:
                hint = ("（提示：掩码 buffer 是 [block_size, block_size]，"
                        "要切成 self.mask[:T, :T]）") if "size" in err else ""
                return _fail(f"attn(x, rope) {err}{hint}")
            _match(got, want, f"{cfg.pos} 设计下输出与 gc.model.CausalSelfAttention 不一致："
                   "qkv 之后怎样拆成几个头？RoPE 转哪几个？attention 用掩码的哪一块？"
                   "各头合并之后还差哪一层？",
                   _attention_variants, ref, x, rope)
            _reads_its_mask(mine, ref, x, rope)
    return _ok()


def _reads_its_mask(mine, ref: CausalSelfAttention, x, rope) -> None:
    """掩码要是 buffer（``_load`` 已查过它不存进 state_dict），而且 forward 真的读它：把两边的
    ``mask`` 换成一个看得见下一个字的带状掩码（不是因果掩码的子集），输出仍要与包里的手写路径
    相同（抛出 ``Wrong``）。"""
    if not isinstance(dict(mine.named_buffers()).get("mask"), torch.Tensor):
        raise Wrong("self.mask 应是 register_buffer 登记的 buffer，不是普通的张量属性：普通属性不会"
                    "跟着 .to(device) 走" + _BUFFER)
    n = ref.mask.shape[0]
    d = torch.arange(n)[:, None] - torch.arange(n)[None, :]
    band = (d >= -1) & (d < 3)                       # 看最近 3 个字和下一个字
    ref.use_sdpa = False                             # 包里 SDPA 路径的 is_causal 不读 self.mask
    causal = ref(x, rope)
    ref.mask.copy_(band)
    mine.mask.copy_(band)
    want, got = ref(x, rope), _got(mine, x, rope, where="换了 self.mask 之后 ")
    _tensor(got, want.shape)
    if torch.allclose(got, want, atol=1e-5):
        return
    ref.mask.copy_(band & causal_mask(n))
    raise Wrong("把 self.mask 换成看得见下一个字的掩码后" + _which(got, [
        (causal, "输出没变：forward 没有用 self.mask（自己造了因果掩码，或用了 is_causal=True）。"),
        (ref(x, rope), "输出不对：你把 self.mask 和另一个下三角合在了一起。")],
        "输出与包里的手写路径不一致。") + "要写 attention(q, k, v, self.mask[:T, :T])："
        "练习 14 正是改这个 buffer 来造泄漏")
