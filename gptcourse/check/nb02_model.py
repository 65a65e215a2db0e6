"""笔记本 02 的第二组练习：你写的 Block 与 GPT、会泄漏的模型、数一个没见过的配置的参数。"""
from __future__ import annotations

import copy
import math

import torch

from ..config import preset
from ..mistakes.attention import leak_test
from ..model import GPT, Block, CausalSelfAttention, count_parameters
from ..rope import rope_angles
from ._common import Wrong, _fail, _got, _ok, exercise

# “数参数”练习的配置：笔记本里没有数过它。teacher 设计（RoPE、RMSNorm、SwiGLU、无偏置、权重共享），
# C = 160 时 SwiGLU 隐藏层 = 8C/3 ≈ 426.7 向上取整到 64 的倍数 = 448
EXERCISE_CONFIG = preset("teacher", vocab_size=3000, block_size=96, n_layer=3, n_head=5,
                         n_embd=160)
# 检查 Block / GPT 时用的两个小配置：现代设计与经典 mini 设计
_CFGS = (preset("teacher", vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=16,
                dropout=0.0, attn_dropout=0.0, resid_dropout=0.0),
         preset("mini", vocab_size=40, block_size=16, n_layer=2, n_head=2, n_embd=16,
                dropout=0.0, attn_dropout=0.0, resid_dropout=0.0))


# ---------------------------------------------------------------- 学生版的代替品（包里没有的）
def solution_block_forward(self, x, rope=None):
    """Pre-Norm：先归一化再进子层，子层的输出加回残差流。"""
    x = x + self.attn(self.norm1(x), rope)
    return x + self.mlp(self.norm2(x))


def solution_gpt_forward(self, idx):
    """嵌入（学习式位置相加；RoPE 的角度表传进每个块）→ 各块 → 最终归一化 → 输出头。"""
    T = idx.shape[1]
    x = self.tok_emb(idx)                                        # [B, T, C]
    rope = None
    if self.config.pos == "learned":
        x = x + self.pos_emb(torch.arange(T, device=idx.device))
    else:
        ang = rope_angles(self.config.head_dim, T, self.config.rope_base).to(idx.device)
        rope = ang.cos(), ang.sin()                              # 各 [T, D/2]
    for block in self.blocks:
        x = block(x, rope)
    return self.lm_head(self.norm_f(x))                          # [B, T, V]


def solution_make_leaky(model):
    """让注意力看得见未来：每个块的因果掩码全设为 True。"""
    for block in model.blocks:
        block.attn.mask.fill_(True)
    return model


def _with_forward(cls: type, forward) -> type:
    return type(cls.__name__, (cls,), {"forward": forward, "__module__": cls.__module__})


def reference_block(block_cls: type) -> type:
    """学生版用：学员的 ``Block``（``__init__`` 是给定的），``forward`` 换成参考答案。"""
    return _with_forward(block_cls, solution_block_forward)


def reference_gpt(gpt_cls: type) -> type:
    """学生版用：学员的 ``GPT``（``__init__`` 是给定的），``forward`` 换成参考答案。"""
    return _with_forward(gpt_cls, solution_gpt_forward)


def reference_attention_module() -> type:
    """学生版用（练习 11 没写完时）：包里的 ``CausalSelfAttention``，但走读 ``self.mask`` 的手写
    路径——SDPA 的 ``is_causal=True`` 不读掩码，练习 14 的泄漏演示就反了过来。"""
    def __init__(self, cfg):
        CausalSelfAttention.__init__(self, cfg)
        self.use_sdpa = False                                   # 手写路径：掩码来自 self.mask

    return type("CausalSelfAttention", (CausalSelfAttention,),
                {"__init__": __init__, "__module__": CausalSelfAttention.__module__})


# ---------------------------------------------------------------- 小工具
def _tables(D: int, T: int, base: float = 10000.0):
    ang = rope_angles(D, T, base)
    return ang.cos(), ang.sin()


def _rope(cfg, T):
    return _tables(cfg.head_dim, T, cfg.rope_base) if cfg.pos == "rope" else None


_BUFFER = ("（练习 2 后面 WithBuffer / NotSaved / WithAttribute 的对比）：写 "
           "self.register_buffer(\"mask\", …, persistent=False)")


def _load(mine, state) -> None:
    """把包里的权重装进学员的模块；名字或形状对不上时判“还不对”（抛出 ``Wrong``）。
    学员的掩码 buffer 要是非持久的（不在 state_dict 里）：存进去的话，严格加载课程模型会报错。"""
    try:
        missing, unexpected = mine.load_state_dict(state, strict=False)
    except RuntimeError as e:
        raise Wrong(f"形状对不上：{str(e).splitlines()[-1].strip()}") from None
    saved = [k for k in missing if k in dict(mine.named_buffers())]
    if saved:
        raise Wrong(f"buffer {saved[0]} 存进了 state_dict：严格加载课程模型（load_state_dict）"
                    "时会报 Missing key。掩码完全由 block_size 决定，不该存" + _BUFFER)
    if missing or unexpected:
        raise Wrong(f"参数名与包里的模型对不上（缺少 {list(missing)[:4]}，"
                    f"多出 {list(unexpected)[:4]}）；名字要与 gc.model 的 state_dict 一致")


def _build(cls, ref: torch.nn.Module, *args) -> torch.nn.Module:
    """学员的类 → 实例，装上 ref 的权重（eval 模式）；出错时判“还不对”。"""
    mine = _got(cls, *args, where=f"{getattr(cls, '__name__', '这个类')}(…) ")
    _load(mine, ref.state_dict())        # 不查 isinstance：判分时学员的实例是裁判进程里的代理
    return mine.eval()


def _perturb_norms(model: torch.nn.Module) -> torch.nn.Module:
    """把各归一化层的 γ、β 设成互不相同的值（初始化时都是 1 / 0，会掩盖“用错了归一化”）。"""
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and "norm" in name:
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
    return model


def _tensor(out, shape) -> None:
    """学员的输出应是形状为 ``shape`` 的一个张量；否则判“还不对”（抛出 ``Wrong``）。"""
    if isinstance(out, tuple):
        raise Wrong("应只返回一个张量（logits），不要返回元组")
    if not isinstance(out, torch.Tensor):
        raise Wrong(f"应返回 torch.Tensor，收到 {type(out).__name__}")
    if tuple(out.shape) != tuple(shape):
        raise Wrong(f"输出形状应为 {tuple(shape)}，收到 {tuple(out.shape)}")


def _which(got, wrong, otherwise: str, atol: float = 1e-5) -> str:
    """``wrong`` = [(典型错误的输出, 提示)] 里第一个与 ``got`` 相同的提示，都不像时是 otherwise。"""
    return next((hint for value, hint in wrong
                 if value.shape == got.shape and torch.allclose(got, value, atol=atol)), otherwise)


def _match(got, want, otherwise: str, variants, *args, atol: float = 1e-5) -> None:
    """``got`` 应是与 ``want`` 相同的张量；否则说出 ``_which(got, variants(*args), otherwise)``
    （抛出 ``Wrong``）。"""
    _tensor(got, want.shape)
    if not torch.allclose(got, want, atol=atol):
        raise Wrong(_which(got, variants(*args), otherwise, atol))


def _block_variants(ref: Block, x, rope):
    """常见写错的 Block：(输出, 提示)。"""
    a, m, n1, n2 = ref.attn, ref.mlp, ref.norm1, ref.norm2
    post, shared, first = n1(x + a(x, rope)), x + a(n1(x), rope), a(n1(x), rope)
    return [(n2(post + m(post)), "你在残差相加之后才归一化：x = norm(x + 子层(x))，那是 Post-Norm。"
                                 "Pre-Norm 是 x = x + 子层(norm(x))"),
            (shared + m(n1(shared)),
             "第二个子层（MLP）前面用了 norm1：每个子层有自己的归一化，MLP 前面是 norm2"),
            (m(n2(first)), "没有残差连接：子层的输出要加回 x（x = x + …），而不是替换 x"),
            (first + m(n2(first)), "注意力那一步没有加回残差：应为 x = x + attn(norm1(x))")]


@exercise
def gpt_block(block_cls) -> bool:
    """练习：你的 ``Block``（Pre-Norm）与 ``gc.model.Block`` 装上同一份权重，输出必须相同。"""
    for cfg in _CFGS:
        torch.manual_seed(0)
        ref = _perturb_norms(Block(cfg).eval())
        mine = _build(block_cls, ref, cfg)
        x = torch.randn(2, 7, cfg.n_embd, generator=torch.Generator().manual_seed(1))
        rope = _rope(cfg, 7)
        with torch.no_grad():
            want, got = ref(x, rope), _got(mine, x, rope, where="block(x, rope) ")
            _match(got, want, f"{cfg.norm} / {cfg.mlp} 设计下输出与 gc.model.Block 不一致："
                   "每个子层读到的是归一化之前还是之后的 x？它的输出替换了 x，还是加回 x？"
                   "两个子层各用哪一个归一化？",
                   _block_variants, ref, x, rope)
    return _ok()


def _gpt_variants(ref: GPT, idx, cfg):
    """常见写错的 GPT.forward：(logits, 提示)。"""
    T, x = idx.shape[1], ref.tok_emb(idx)

    def run(x, rope, norm=True):
        for b in ref.blocks:
            x = b(x, rope)
        return ref.lm_head(ref.norm_f(x) if norm else x)

    rope = _rope(cfg, T)
    if cfg.pos == "learned":
        out = [(run(x, None),
                "学习式位置的设计里忘了加位置嵌入：x = tok_emb(idx) + pos_emb(arange(T))")]
        x = x + ref.pos_emb(torch.arange(T))
    else:
        no_turn = (torch.ones_like(rope[0]), torch.zeros_like(rope[1]))          # 转 0 度
        out = [(run(x, no_turn),
                "RoPE 的设计里没有把角度表传给各块（rope=None）：模型就没有位置信息了"),
               (run(x, _tables(cfg.head_dim, T, 1000.0)),
                f"RoPE 的底数不对：应是 config.rope_base = {cfg.rope_base:g}，你用的像是 1000")]
    return out + [(run(x, rope, norm=False),
                   "少了最终归一化：Pre-Norm 的残差流从不被归一化，输出头之前要 norm_f(x)")]


@exercise
def gpt_model(gpt_cls) -> bool:
    """练习：你的 ``GPT`` 装上 ``gc.model.GPT`` 的权重后，logits 必须相同（两种设计都要对）。"""
    for cfg in _CFGS:
        torch.manual_seed(0)
        ref = _perturb_norms(GPT(cfg).eval())
        with torch.no_grad():                   # N(0, 0.02) 的 q、k 让分数 ≈ 0，注意力几乎均匀，
            for blk in ref.blocks:              # 位置（RoPE 的角度）就看不出来：放大到 σ ≈ 0.3
                blk.attn.qkv.weight.mul_(15.0)
        mine = _build(gpt_cls, ref, cfg)
        if getattr(mine, "lm_head", None) is None or mine.lm_head.weight is not mine.tok_emb.weight:
            return _fail("输出头没有与词嵌入共享：应写 self.lm_head.weight = self.tok_emb.weight"
                         "（同一个张量，而不只是数值相等）")
        idx = torch.randint(cfg.vocab_size, (2, 9), generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            want, got = ref(idx)[0], _got(mine, idx, where="model(idx) ")
            _match(got, want, f"{cfg.pos} / {cfg.norm} 设计下 logits 与 gc.model.GPT 不一致："
                   "检查嵌入、位置（学习式相加 / RoPE 传进每个块）、各块、最终归一化、输出头",
                   _gpt_variants, ref, idx, cfg, atol=1e-4)
        _head_is_lm_head(mine, ref, idx, got)
    return _ok()


def _head_is_lm_head(mine, ref: GPT, idx, tied) -> None:
    """logits 要由 ``self.lm_head`` 算出：反向传播时输出头的梯度流回共享的词嵌入；把输出头换成
    不共享的权重（笔记本后面的对比实验就这样做），logits 跟着变（抛出 ``Wrong``）。"""
    g = torch.Generator().manual_seed(3)
    upstream = torch.randn(tied.shape, generator=g)              # 任取一个 dL/dlogits
    for m in (ref, mine):
        m.zero_grad(set_to_none=True)
    (ref(idx)[0] * upstream).sum().backward()
    (_got(mine, idx, where="model(idx) ") * upstream).sum().backward()
    grad, want = mine.tok_emb.weight.grad, ref.tok_emb.weight.grad
    if grad is None or not torch.allclose(grad, want, rtol=1e-3, atol=1e-5):
        raise Wrong("logits 对了，但反向传播时词嵌入收到的梯度与 gc.model.GPT 不同：输出头那一路的"
                    "梯度没有流回共享的权重（用了 .detach()？）。logits 要由 self.lm_head(…) 算出")
    head = torch.randn(ref.lm_head.weight.shape, generator=g) * 0.3
    for m in (ref, mine):
        m.lm_head.weight = torch.nn.Parameter(head.clone())
    with torch.no_grad():
        want, got = ref(idx)[0], _got(mine, idx, where="换了输出头之后 model(idx) ")
    _match(got, want, "把 lm_head 换成不与词嵌入共享的权重后 logits 与 gc.model.GPT 不一致："
           "logits 要由 self.lm_head(norm_f(x)) 算出", lambda: [
               (tied, "把 lm_head 换成不与词嵌入共享的权重后 logits 没变：forward 绕过了 "
                      "self.lm_head（直接乘了 tok_emb.weight？）。要写 self.lm_head(norm_f(x))："
                      "笔记本后面把输出头换成不共享的版本做对比")], atol=1e-4)


@exercise
def leaky_model(make_leaky, model) -> bool:
    """练习：``make_leaky(model)``（拿到模型的一份副本）返回一个会偷看未来的模型。"""
    if not isinstance(model, torch.nn.Module):
        return _fail(f"第二个参数应是你的模型（nn.Module），收到 {type(model).__name__}")
    if leak_test(model, T=12) != 0.0:
        return _fail("传进来的模型本身就泄漏了：请传入一个通过泄漏测试的模型（如 mine）")
    leaky = _got(make_leaky, copy.deepcopy(model).eval())
    if not isinstance(leaky, torch.nn.Module):
        return _fail(f"make_leaky 应返回一个模型（nn.Module），收到 {type(leaky).__name__}"
                     "（忘了 return？）")
    leaky.eval()
    a = torch.randint(model.tok_emb.num_embeddings, (2, 12),
                      generator=torch.Generator().manual_seed(1))
    try:
        with torch.no_grad():
            once, again = (o[0] if isinstance(o, tuple) else o for o in (leaky(a), leaky(a)))
    except Exception as e:  # noqa: BLE001
        return _fail(f"改过的模型跑不起来：{type(e).__name__}: {e}")
    if torch.isnan(once).any():
        return _fail("输出里有 NaN：你把某些行的所有位置都遮住了（softmax 全是 −∞）。"
                     "要泄漏，是让掩码把未来也放进来，例如把掩码全设为 True")
    if not torch.equal(once, again):
        return _fail("同一个输入算两次，你的模型给出不同的 logits：它在输出上加了随机数，"
                     "而不是看见了未来。泄漏测试要抓的是“早先位置的输出随后文改变”；"
                     "让掩码把未来也放进来（例如把掩码全设为 True），输出不加噪声")
    if leak_test(leaky, T=12) == 0.0:
        return _fail("泄漏测试还是通过了：前面位置的 logits 没有随后文改变，模型仍然看不到未来")
    return _ok()


@exercise
def param_count(n, cfg=EXERCISE_CONFIG) -> bool:
    """练习：不建模型，按公式数出 ``EXERCISE_CONFIG``（teacher 设计）的参数总数。"""
    truth = count_parameters(GPT(cfg))["total"]
    if isinstance(n, bool) or not isinstance(n, (int, float)) or n != int(n):
        return _fail(f"应给出一个整数，收到 {n!r}")
    n = int(n)
    if n == truth:
        return _ok()
    V, C, L, T, Hd = cfg.vocab_size, cfg.n_embd, cfg.n_layer, cfg.block_size, cfg.mlp_hidden
    exact = 8 * C / 3
    wrong = [
        (truth + V * C, "多算了输出头：权重共享时 lm_head 与词嵌入是同一个张量，只算一次"),
        (truth + T * C, "RoPE 没有位置表：这个设计没有 pos_emb（block_size × C）"),
        (truth + (2 * L + 1) * C, "RMSNorm 只有 γ（C 个），没有 β"),
        (truth - C, "漏了最终的 RMSNorm（C 个参数）"),
        (truth - 2 * L * C, "漏了块里的两个 RMSNorm（每块 2C）"),
        (truth + L * 3 * C * (4 * C - Hd),
         f"SwiGLU 的隐藏层不是 4C：是 8C/3 向上取整到 64 的倍数 = {Hd}"),
        (truth - L * C * Hd, "SwiGLU 有三个矩阵（gate、up、down），你只数了两个"),
        (truth + L * (3 * C + C + 2 * Hd + C), "teacher 设计的线性层没有偏置"),
    ] + [(truth + L * 3 * C * (frac - Hd),
          f"隐藏层 8C/3 ≈ {exact:.1f} 要向上取整到 64 的倍数：{Hd}，不是 {frac}")
         for frac in (math.floor(exact), math.ceil(exact)) if frac != Hd]
    for value, hint in wrong:
        if n == value:
            return _fail(hint)
    if n <= 0:
        return _fail("请先把你算出的参数总数填进去")
    side = "多" if n > truth else "少"
    return _fail(f"你的答案比正确值{side}。逐项检查：词嵌入 V·C；每块 qkv 3C·C、输出投影 C·C、"
                 "SwiGLU 3·C·隐藏、两个 RMSNorm；最终 RMSNorm；RoPE 没有位置表；输出头共享不另算")
