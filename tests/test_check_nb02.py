"""笔记本 02 的练习检查器：教师版的答案与包里的版本通过，典型错误各自得到对应的中文提示。"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import gptcourse as gc
from gptcourse.check import _common, nb02, nb02_model
from gptcourse.mistakes.attention import merge_heads
from gptcourse.model import GPT, count_parameters


# ---------------------------------------------------------------- 一个学员会写的模型（参考答案）
class _Attn(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, self.n_head = cfg.n_embd, cfg.n_head
        self.qkv = nn.Linear(C, 3 * C, bias=cfg.bias)
        self.proj = nn.Linear(C, C, bias=cfg.bias)
        self.register_buffer("mask", torch.tril(torch.ones(cfg.block_size, cfg.block_size,
                                                           dtype=torch.bool)), persistent=False)

    def forward(self, x, rope=None):
        B, T, C = x.shape
        q, k, v = (nb02.solution_split_heads(t, self.n_head) for t in self.qkv(x).split(C, -1))
        if rope is not None:
            q, k = gc.rope.apply_rope(q, *rope), gc.rope.apply_rope(k, *rope)
        att = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(
            ~self.mask[:T, :T], float("-inf"))
        return self.proj(merge_heads(F.softmax(att, -1) @ v))


class _MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, Hd, b = cfg.n_embd, cfg.mlp_hidden, cfg.bias
        self.swiglu = cfg.mlp == "swiglu"
        if self.swiglu:
            self.gate, self.up, self.down = (nn.Linear(C, Hd, bias=b), nn.Linear(C, Hd, bias=b),
                                             nn.Linear(Hd, C, bias=b))
        else:
            self.fc, self.proj = nn.Linear(C, Hd, bias=b), nn.Linear(Hd, C, bias=b)

    def forward(self, x):
        if self.swiglu:
            return self.down(F.silu(self.gate(x)) * self.up(x))
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.norm1, self.attn = gc.model.make_norm(cfg), _Attn(cfg)
        self.norm2, self.mlp = gc.model.make_norm(cfg), _MLP(cfg)

    forward = nb02_model.solution_block_forward


class PostNorm(Block):
    def forward(self, x, rope=None):
        x = self.norm1(x + self.attn(x, rope))
        return self.norm2(x + self.mlp(x))


class SharedNorm(Block):
    def forward(self, x, rope=None):
        x = x + self.attn(self.norm1(x), rope)
        return x + self.mlp(self.norm1(x))


class NoResidual(Block):
    def forward(self, x, rope=None):
        return self.mlp(self.norm2(self.attn(self.norm1(x), rope)))


class Renamed(Block):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.ln1 = self.norm1
        del self.norm1


class MyGPT(nn.Module):
    block = Block

    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        if cfg.pos == "learned":
            self.pos_emb = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.blocks = nn.ModuleList(self.block(cfg) for _ in range(cfg.n_layer))
        self.norm_f = gc.model.make_norm(cfg)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.tok_emb.weight

    def embed(self, idx):
        x, T = self.tok_emb(idx), idx.shape[1]
        if self.config.pos == "learned":
            return x + self.pos_emb(torch.arange(T)), None
        ang = gc.rope.rope_angles(self.config.head_dim, T)
        return x, (ang.cos(), ang.sin())

    def forward(self, idx):
        x, rope = self.embed(idx)
        for b in self.blocks:
            x = b(x, rope)
        return self.lm_head(self.norm_f(x))


class NoFinalNorm(MyGPT):
    def forward(self, idx):
        x, rope = self.embed(idx)
        for b in self.blocks:
            x = b(x, rope)
        return self.lm_head(x)


class NoPositions(MyGPT):
    def forward(self, idx):
        x = self.tok_emb(idx)
        ang = gc.rope.rope_angles(self.config.head_dim, idx.shape[1])
        rope = (ang.cos(), ang.sin()) if self.config.pos == "rope" else None
        for b in self.blocks:
            x = b(x, rope)
        return self.lm_head(self.norm_f(x))


class Untied(MyGPT):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)


class ReturnsTuple(MyGPT):
    def forward(self, idx):
        return super().forward(idx), None


def _leaky(model):
    for b in model.blocks:
        b.attn.mask.fill_(True)
    return model


def _blocked(model):
    for b in model.blocks:
        b.attn.mask.fill_(False)
    return model


@pytest.fixture(scope="module")
def learner_model():
    torch.manual_seed(0)
    ref = GPT(nb02._CFGS[0]).eval()
    mine = MyGPT(nb02._CFGS[0]).eval()
    mine.load_state_dict(ref.state_dict())
    return mine


def _scaled_attention(q, k, v, mask):
    return gc.model.causal_attention(q, k, v, mask)[0]


# 教师版的答案单元格（函数与预测题：自成一格，直接执行）或这里写的学员式的类
TEACHER_CELLS = ("scaled_attention", "causal_mask", "guess_saturation", "guess_sqrt_c",
                 "rope_pair", "layernorm", "guess_norm", "guess_init_growth", "param_count",
                 "guess_offset")
REFERENCE = {
    "split_merge_heads": lambda: (nb02.solution_split_heads, merge_heads),
    "rope_rotate": lambda: (gc.rope.apply_rope,),
    "mlp": lambda: (_MyMLP,),
    "rmsnorm": lambda: (_MyRMSNorm,),
    "attention_module": lambda: (_MyAttention,),
    "gpt_block": lambda: (Block,),
    "gpt_model": lambda: (MyGPT,),
}


def test_every_exercise_is_listed_exported_and_has_a_reference():
    assert set(REFERENCE) | set(TEACHER_CELLS) | {"leaky_model"} == set(nb02.EXERCISES)
    assert len(nb02.EXERCISES) >= 8
    for name in nb02.EXERCISES:
        assert getattr(gc.check.nb02, name).is_exercise
    assert not hasattr(gc.check, "scaled_attention")                 # 只从 gc.check.nb02 取


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_reference_solutions_pass(passes, name, capsys):
    assert passes(getattr(nb02, name), *REFERENCE[name]())[0]
    assert _common.RESULTS[f"nb02.{name}"]["passed"] is True


@pytest.mark.parametrize("name", TEACHER_CELLS)
def test_the_teacher_solution_passes(passes, name, teacher):
    assert passes(getattr(nb02, name), teacher(f"nb02.{name}"))[0]


def test_leaky_model_reference_passes(passes, learner_model):
    assert passes(nb02.leaky_model, _leaky, learner_model)[0]
    assert gc.mistakes.leak_test(learner_model, T=12) == 0.0        # 原模型没有被改动


def test_leaky_model_passes_with_the_exercise_11_standin(passes):
    """练习 11 没写完时学生版用的代替品必须读 mask buffer（手写路径）：正确的 make_leaky
    照样“正确 ✓”。包里默认的 SDPA 路径用 is_causal=True，不读 buffer——那正是 issue 33 第 1 条
    的 bug：泄漏演示反了过来，正确答案被判错。"""
    cfg = nb02._CFGS[0]
    standin = nb02.reference_attention_module()

    def with_attention(cls):
        torch.manual_seed(0)
        model = GPT(cfg).eval()
        for b in model.blocks:
            state = b.attn.state_dict()
            b.attn = cls(cfg)
            b.attn.load_state_dict(state)
        return model.eval()

    assert passes(nb02.leaky_model, nb02.solution_make_leaky, with_attention(standin))[0]
    sdpa = with_attention(gc.model.CausalSelfAttention)
    ok, out = passes(nb02.leaky_model, nb02.solution_make_leaky, sdpa)
    assert not ok and "泄漏测试还是通过了" in out              # 对照：SDPA 路径看不见改过的掩码


def test_show_solution(capsys, monkeypatch):
    monkeypatch.setenv("GPTCOURSE_SOLUTIONS", "1")             # 老师打开了参考答案
    gc.check.show_solution("causal_mask")
    assert "torch.tril" in capsys.readouterr().out
    gc.check.show_solution("build_vocab")                            # 笔记本 01 的仍然可用
    assert "def build_vocab(" in capsys.readouterr().out
    gc.check.show_solution("nb02.guess_offset")                      # 两章都有：写上章节
    assert "guess_offset = 5" in capsys.readouterr().out
    with pytest.raises(ValueError, match="nb02.guess_offset"):
        gc.check.show_solution("guess_offset")


def test_stubs_and_none_say_not_done(passes, capsys):
    def stub(*a):
        raise NotImplementedError("提示：写一写")

    for name in ("causal_mask", "scaled_attention", "rope_pair", "rope_rotate", "layernorm"):
        ok, out = passes(getattr(nb02, name), stub)
        assert not ok and "还没完成" in out
    for name in ("guess_saturation", "guess_norm", "guess_offset", "param_count"):
        ok, out = passes(getattr(nb02, name), None)
        assert not ok and "还没完成" in out


def test_causal_mask(passes, capsys):
    cases = {"triu": lambda T: torch.triu(torch.ones(T, T)).bool(),
             "反了": lambda T: ~torch.tril(torch.ones(T, T)).bool(),
             "bool": lambda T: torch.tril(torch.ones(T, T)),
             "对角线": lambda T: torch.tril(torch.ones(T, T), -1).bool(),
             "未来": lambda T: torch.ones(T, T).bool(),
             "ZeroDivisionError": lambda T: 1 / 0}
    for hint, fn in cases.items():
        ok, out = passes(nb02.causal_mask, fn)
        assert not ok and hint in out, (hint, out)


def _masked_after_softmax(q, k, v, mask):
    w = F.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return (w * mask) @ v


def _softmax_dim_minus_2(q, k, v, mask):
    att = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
    att = att.masked_fill(~mask, float("-inf"))
    return torch.nan_to_num(F.softmax(att, dim=-2)) @ v


def _own_tril(q, k, v, mask):
    """评审里的情形：不用传进来的 mask，自己造下三角（在因果掩码上恰好对）。"""
    T = q.shape[-2]
    return _scaled_attention(q, k, v, torch.tril(torch.ones(T, T)).bool())


def _inverted(q, k, v, mask):
    att = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(mask, float("-inf"))
    return F.softmax(att, dim=-1) @ v


def test_scaled_attention(passes, capsys):
    sdpa = F.scaled_dot_product_attention
    cases = {"没有用掩码": lambda q, k, v, m: sdpa(q, k, v),
             "√D": lambda q, k, v, m: sdpa(q, k, v, attn_mask=m, scale=1.0),
             "n_embd": lambda q, k, v, m: sdpa(q, k, v, attn_mask=m, scale=1 / math.sqrt(24)),
             "除以的是 D": lambda q, k, v, m: sdpa(q, k, v, attn_mask=m, scale=1 / 8),
             "dim=-1": _softmax_dim_minus_2,
             "softmax 之后": _masked_after_softmax,
             "传进来的 mask": _own_tril,
             "True/False": _inverted,
             "形状": lambda q, k, v, m: q[..., 0]}
    assert passes(nb02.scaled_attention, lambda q, k, v, m: gc.model.causal_attention(
        q, k, v, m)[0])[0]
    for hint, fn in cases.items():
        ok, out = passes(nb02.scaled_attention, fn)
        assert not ok and hint in out, (hint, out)


def test_prediction_questions(passes, capsys):
    for name, right, wrongs in (("guess_saturation", "B", "AC"), ("guess_norm", "A", "BC"),
                                ("guess_sqrt_c", "B", "AC"),
                                ("guess_init_growth", "B", "AC")):
        checker = getattr(nb02, name)
        assert passes(checker, right)[0]
        assert passes(checker, f" ({right.lower()}) ")[0]     # 大小写、括号、空格都接受
        for w in wrongs:
            ok, out = passes(checker, w)
            assert not ok and "还不对" in out
        ok, out = passes(checker, "D")
        assert not ok and "选项字母" in out
    ok, out = passes(nb02.guess_saturation, "A")
    assert "√D" in out


def test_predictions_are_judged_against_the_measured_values(passes, capsys):
    """给了这次实验量出的数，正确的选项由它定（换一组数，答案跟着变）。"""
    cases = [(nb02.guess_saturation, {"wmax": (0.63, 0.91)}, "B"),
             (nb02.guess_saturation, {"wmax": (0.9, 0.5)}, "A"),
             (nb02.guess_saturation, {"wmax": (0.6, 0.62)}, "C"),
             (nb02.guess_sqrt_c, {"entropy": {"÷√C": 0.96, "÷√D": 0.85}}, "B"),
             (nb02.guess_sqrt_c, {"entropy": {"÷√C": 0.7, "÷√D": 0.85}}, "A"),
             (nb02.guess_norm, {"val_loss": {"Pre-Norm": 3.1, "Post-Norm": 3.6}}, "A"),
             (nb02.guess_norm, {"val_loss": {"Pre-Norm": 3.6, "Post-Norm": 3.1}}, "B"),
             (nb02.guess_norm, {"val_loss": {"Pre-Norm": 3.30, "Post-Norm": 3.32}}, "C"),
             (nb02.guess_init_growth, {"stds": (0.04, 0.28)}, "B"),
             (nb02.guess_init_growth, {"stds": (0.28, 0.27)}, "A"),
             (nb02.guess_init_growth, {"stds": (0.28, 0.04)}, "C")]
    for checker, measured, right in cases:
        assert checker(right, **measured), (checker.__name__, measured)
        assert "正确 ✓" in capsys.readouterr().out
        for wrong in set("ABC") - {right}:
            assert not checker(wrong, **measured)
            assert "还不对" in capsys.readouterr().out


def test_guess_offset(passes, capsys):
    assert passes(nb02.guess_offset, 5)[0]
    for n, hint in ((6, "t+1"), (7, "t+1"), (4, "标点"), (12, "6 个词元"), ("五", "整数")):
        ok, out = passes(nb02.guess_offset, n)
        assert not ok and hint in out, (n, out)


def test_split_merge_heads(passes, capsys):
    def split_no_transpose(x, h):
        B, T, C = x.shape
        return x.view(B, h, T, C // h)

    def merge_no_contiguous(y):
        B, H, T, D = y.shape
        return y.transpose(1, 2).view(B, T, H * D)

    def merge_no_transpose(y):
        B, H, T, D = y.shape
        return y.reshape(B, T, H * D)

    ok, out = passes(nb02.split_merge_heads, split_no_transpose, merge_heads)
    assert not ok and "transpose" in out
    ok, out = passes(nb02.split_merge_heads, nb02.solution_split_heads, merge_no_contiguous)
    assert not ok and "contiguous" in out
    ok, out = passes(nb02.split_merge_heads, nb02.solution_split_heads, merge_no_transpose)
    assert not ok and "transpose" in out


def test_rope_pair(passes, capsys):
    cases = {"方向反了": lambda x1, x2, c, s: (x1 * c + x2 * s, -x1 * s + x2 * c),
             "长度": lambda x1, x2, c, s: (2 * x1, 2 * x2),
             "应得": lambda x1, x2, c, s: (x1 * s - x2 * c, x1 * c + x2 * s),
             "张量": lambda x1, x2, c, s: (x1 * math.cos(math.acos(c)) - x2 * s,
                                          x1 * s + x2 * c)}
    for hint, fn in cases.items():
        ok, out = passes(nb02.rope_pair, fn)
        assert not ok and hint in out, (hint, out)


def test_rope_rotate(passes, capsys):
    def chunks(x):
        return x.chunk(2, dim=-1)

    cases = {"interleaved": gc.rope.apply_rope_interleaved,
             "没有旋转": lambda x, c, s: x,
             "方向反了": lambda x, c, s: gc.rope.apply_rope(x, c, -s),
             "拼接的顺序": lambda x, c, s: torch.cat(gc.rope.rotate_pair(
                 *chunks(x), c, s)[::-1], dim=-1),
             "长度": lambda x, c, s: torch.cat([chunks(x)[0] * c, chunks(x)[1] * c], dim=-1),
             "形状": lambda x, c, s: x[..., :4]}
    for hint, fn in cases.items():
        ok, out = passes(nb02.rope_rotate, fn)
        assert not ok and hint in out, (hint, out)


class _MyRMSNorm(nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(C))

    def forward(self, x):
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def test_rmsnorm(passes, capsys):
    def with_forward(fn):
        return type("Wrong", (_MyRMSNorm,), {"forward": fn})

    cases = {"γ": lambda self, x: x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps),
             "LayerNorm": lambda self, x: F.layer_norm(x, x.shape[-1:], eps=self.eps)
             * self.weight,
             "开方": lambda self, x: x / (x.pow(2).mean(-1, keepdim=True).sqrt() + self.eps)
             * self.weight,
             "平方和": lambda self, x: x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + self.eps)
             * self.weight}
    for hint, fn in cases.items():
        ok, out = passes(nb02.rmsnorm, with_forward(fn))
        assert not ok and hint in out, (hint, out)

    class Renamed(_MyRMSNorm):
        def __init__(self, C, eps=1e-5):
            super().__init__(C, eps)
            self.gamma = self.weight
            del self.weight

    ok, out = passes(nb02.rmsnorm, Renamed)
    assert not ok and "对不上" in out


class _MyMLP(_MLP):
    def __init__(self, cfg):
        super().__init__(cfg)
        if not self.swiglu:
            self.act = nn.GELU(approximate=cfg.gelu_approx)

    def forward(self, x):
        if self.swiglu:
            return self.down(F.silu(self.gate(x)) * self.up(x))
        return self.proj(self.act(self.fc(x)))


def test_mlp(passes, capsys):
    def with_forward(fn):
        return type("Wrong", (_MyMLP,), {"forward": fn})

    cases = {"套在了 up 上": lambda s, x: s.down(s.gate(x) * F.silu(s.up(x))),
             "少了 silu": lambda s, x: s.down(s.gate(x) * s.up(x)),
             "up 那一路": lambda s, x: s.down(F.silu(s.gate(x))),
             "GELU": lambda s, x: s.down(F.gelu(s.gate(x)) * s.up(x))}
    for hint, fn in cases.items():
        ok, out = passes(nb02.mlp, with_forward(fn))
        assert not ok and hint in out, (hint, out)

    def relu(s, x):
        return s.down(F.silu(s.gate(x)) * s.up(x)) if s.swiglu else s.proj(F.relu(s.fc(x)))

    def tanh(s, x):
        return s.down(F.silu(s.gate(x)) * s.up(x)) if s.swiglu else s.proj(
            F.gelu(s.fc(x), approximate="tanh"))

    for hint, fn in (("ReLU", relu), ("tanh", tanh)):
        ok, out = passes(nb02.mlp, with_forward(fn))
        assert not ok and hint in out, (hint, out)


class _MyAttention(_Attn):
    def forward(self, x, rope=None):
        B, T, C = x.shape
        q, k, v = (nb02.solution_split_heads(t, self.n_head) for t in self.qkv(x).split(C, -1))
        if rope is not None:
            q, k = gc.rope.apply_rope(q, *rope), gc.rope.apply_rope(k, *rope)
        y = _scaled_attention(q, k, v, self.mask[:T, :T])
        return self.proj(merge_heads(y))


def test_attention_module(passes, capsys):
    split, merge = nb02.solution_split_heads, merge_heads

    def variant(rot_v=False, rope_on=True, proj=True, mask=True, k_too=True):
        def forward(self, x, rope=None):
            B, T, C = x.shape
            q, k, v = (split(t, self.n_head) for t in self.qkv(x).split(C, -1))
            if rope is not None and rope_on:
                q = gc.rope.apply_rope(q, *rope)
                k = gc.rope.apply_rope(k, *rope) if k_too else k
                v = gc.rope.apply_rope(v, *rope) if rot_v else v
            m = self.mask[:T, :T] if mask else torch.ones(T, T, dtype=torch.bool)
            y = merge(_scaled_attention(q, k, v, m))
            return self.proj(y) if proj else y
        return type("Wrong", (_Attn,), {"forward": forward})

    def unsliced(self, x, rope=None):
        q, k, v = (split(t, self.n_head) for t in self.qkv(x).split(x.shape[-1], -1))
        return self.proj(merge(_scaled_attention(q, k, v, self.mask)))

    cases = {"V 也转了": variant(rot_v=True), "没有用 rope": variant(rope_on=False),
             "只转了 Q": variant(k_too=False), "输出投影": variant(proj=False),
             "因果掩码": variant(mask=False),
             "self.mask[:T, :T]": type("Wrong", (_Attn,), {"forward": unsliced})}
    for hint, cls in cases.items():
        ok, out = passes(nb02.attention_module, cls)
        assert not ok and hint in out, (hint, out)


def test_layernorm(passes, capsys):
    cases = {"无偏": lambda x, eps: (x - x.mean(-1, keepdim=True))
             / torch.sqrt(x.var(-1, keepdim=True) + eps),
             "RMSNorm": lambda x, eps: x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps),
             "维度": lambda x, eps: F.layer_norm(x.transpose(-1, -2), (5,)).transpose(-1, -2),
             "不一致": lambda x, eps: x - x.mean(-1, keepdim=True)}
    for hint, fn in cases.items():
        ok, out = passes(nb02.layernorm, fn)
        assert not ok and hint in out, (hint, out)


def test_gpt_block_rejects_the_typical_mistakes(passes, capsys):
    for cls, hint in ((PostNorm, "Post-Norm"), (SharedNorm, "norm2"), (NoResidual, "残差"),
                      (Renamed, "对不上")):
        ok, out = passes(nb02.gpt_block, cls)
        assert not ok and hint in out, (cls.__name__, out)


def test_gpt_model_rejects_the_typical_mistakes(passes, capsys):
    for cls, hint in ((NoFinalNorm, "最终归一化"), (NoPositions, "位置嵌入"), (Untied, "共享"),
                      (ReturnsTuple, "元组")):
        ok, out = passes(nb02.gpt_model, cls)
        assert not ok and hint in out, (cls.__name__, out)

    class WithPostNorm(MyGPT):
        block = PostNorm

    ok, out = passes(nb02.gpt_model, WithPostNorm)
    assert not ok and "不一致" in out


def test_leaky_model_rejects_non_leaks(passes, capsys, learner_model):
    for fn, hint in ((lambda m: m, "没有随后文改变"), (_blocked, "NaN"),
                     (lambda m: None, "return"), (lambda m: 3, "nn.Module")):
        ok, out = passes(nb02.leaky_model, fn, learner_model)
        assert not ok and hint in out, out
    leaky = _leaky(MyGPT(nb02._CFGS[0]).eval())
    ok, out = passes(nb02.leaky_model, _leaky, leaky)
    assert not ok and "本身就泄漏" in out


def test_param_count(passes, capsys, teacher):
    cfg = nb02.EXERCISE_CONFIG
    truth = count_parameters(GPT(cfg))["total"]
    assert teacher("nb02.param_count") == truth                     # 教师版按公式数出的
    assert count_parameters(GPT(gc.config.preset("teacher")))["total"] == 4_861_184
    V, C, L, T, Hd = cfg.vocab_size, cfg.n_embd, cfg.n_layer, cfg.block_size, cfg.mlp_hidden
    assert Hd == 448 and 8 * C / 3 != Hd                             # 取整这一步真的会被考到
    cases = {truth + V * C: "输出头", truth + T * C: "位置表", truth + (2 * L + 1) * C: "β",
             truth - C: "最终", truth - 2 * L * C: "两个 RMSNorm",
             truth + L * 3 * C * (4 * C - Hd): "不是 4C", truth - L * C * Hd: "三个矩阵",
             truth + L * 3 * C * (426 - Hd): "向上取整", truth + L * 3 * C * (427 - Hd): "向上取整",
             truth + 7: "多", truth - 7: "少", 0: "填", 2.5: "整数", "很多": "整数"}
    for n, hint in cases.items():
        ok, out = passes(nb02.param_count, n)
        assert not ok and hint in out, (n, out)
        assert f"{truth:,}" not in out and str(truth) not in out     # 不泄露答案


class _Noisy(torch.nn.Module):
    """只在输出上加随机数的“泄漏”：没有任何未来的信息（评审里被当成正确的错答案）。"""

    def __init__(self, model):
        super().__init__()
        self.model, self.tok_emb = model, model.tok_emb

    def forward(self, idx):
        return self.model(idx) + torch.randn(1)


def test_leaky_model_that_only_adds_noise_is_rejected(passes, learner_model):
    ok, out = passes(nb02.leaky_model, _Noisy, learner_model)
    assert not ok and "随机数" in out


def test_student_edition_fallbacks_keep_the_learners_init(learner_model):
    """reference_gpt / reference_block：__init__ 是学员的（给定的），forward 是参考答案；
    装上 gc.model.GPT 的权重后 logits 相同。"""
    cfg = nb02._CFGS[0]

    class StubGPT(MyGPT):
        def forward(self, idx):
            raise NotImplementedError("还没完成：嵌入 → 各块 → norm_f → lm_head")

    assert _common.is_stub(StubGPT) and not _common.is_stub(MyGPT)
    Ref = nb02.reference_gpt(StubGPT)
    torch.manual_seed(0)
    ref = GPT(cfg).eval()
    mine = Ref(cfg).eval()
    mine.load_state_dict(ref.state_dict())
    idx = torch.randint(cfg.vocab_size, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(mine(idx), ref(idx)[0])


def test_layernorm_rejects_eps_outside_the_sqrt_and_no_eps(passes, teacher):
    """issue 33 第 4 条：eps 放在根号外、或根本不用 eps，检查器必须说“还不对”并点名。"""
    def outside(x, eps):
        mu = x.mean(-1, keepdim=True)
        return (x - mu) / (((x - mu) ** 2).mean(-1, keepdim=True).sqrt() + eps)

    def no_eps(x, eps):
        mu = x.mean(-1, keepdim=True)
        return (x - mu) / ((x - mu) ** 2).mean(-1, keepdim=True).sqrt()

    ok, out = passes(nb02.layernorm, outside)
    assert not ok and "开方之后" in out
    ok, out = passes(nb02.layernorm, no_eps)
    assert not ok and "没有用到参数 eps" in out
    assert passes(nb02.layernorm, teacher("nb02.layernorm"))[0]


def test_gpt_model_sees_the_rope_base_and_a_missing_rope(passes):
    """issue 33 第 4 条：q、k 权重很小时注意力几乎均匀，RoPE 底数写错、甚至不传 RoPE 都曾被判对。"""
    class Base1000(MyGPT):
        def embed(self, idx):
            ang = gc.rope.rope_angles(self.config.head_dim, idx.shape[1], 1000.0)
            x, rope = super().embed(idx)
            return x, (None if rope is None else (ang.cos(), ang.sin()))

    class NoRope(MyGPT):
        def embed(self, idx):
            return super().embed(idx)[0], None

    ok, out = passes(nb02.gpt_model, Base1000)
    assert not ok and "底数" in out
    ok, out = passes(nb02.gpt_model, NoRope)
    assert not ok and "角度表" in out
    assert passes(nb02.gpt_model, MyGPT)[0]


# -------------------------------------------------- 审阅 2026-12-04（01–02）里漏过的错误答案
def _and_own_tril(q, k, v, mask):
    """把传进来的 mask 和自己造的下三角相与：在因果掩码的子集上恰好对。"""
    T, S = q.shape[-2], k.shape[-2]
    return _scaled_attention(q, k, v, mask & torch.ones(T, S, dtype=torch.bool).tril())


def test_scaled_attention_rejects_an_attention_that_ands_the_mask_with_its_own_tril(passes):
    """审阅 01–02 F2 第 1 条：检查器的掩码之一看得见未来（不是因果掩码的子集）。"""
    assert not nb02.other_masks(6)[-1][0].tril().equal(nb02.other_masks(6)[-1][0])
    ok, out = passes(nb02.scaled_attention, _and_own_tril)
    assert not ok and "合在了一起" in out and "练习 14" in out


def _attention_with(attend):
    """练习 11 的模块，注意力那一步换成 ``attend(self, q, k, v, T)``。"""
    def forward(self, x, rope=None):
        B, T, C = x.shape
        q, k, v = (nb02.solution_split_heads(t, self.n_head) for t in self.qkv(x).split(C, -1))
        if rope is not None:
            q, k = gc.rope.apply_rope(q, *rope), gc.rope.apply_rope(k, *rope)
        return self.proj(merge_heads(attend(self, q, k, v, T)))
    return type("CausalSelfAttention", (_Attn,), {"forward": forward})


@pytest.mark.parametrize("attend", [
    lambda self, q, k, v, T: _scaled_attention(q, k, v, gc.model.causal_mask(T)),   # 新造的掩码
    lambda self, q, k, v, T: F.scaled_dot_product_attention(q, k, v, is_causal=True),
], ids=["fresh_causal_mask", "sdpa_is_causal"])
def test_attention_module_rejects_a_forward_that_never_reads_self_mask(passes, attend):
    """审阅 01–02 F2 第 2、3 条：数值对，但练习 14 改了 self.mask 也不会泄漏。"""
    ok, out = passes(nb02.attention_module, _attention_with(attend))
    assert not ok and "没有用 self.mask" in out and "练习 14" in out


def test_attention_module_rejects_a_mask_anded_with_another_tril(passes):
    attend = _attention_with(lambda self, q, k, v, T: _and_own_tril(q, k, v, self.mask[:T, :T]))
    ok, out = passes(nb02.attention_module, attend)
    assert not ok and "合在了一起" in out


class _SavedMask(_MyAttention):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.register_buffer("mask", self.mask.clone())             # 忘了 persistent=False


class _PlainMask(_MyAttention):
    def __init__(self, cfg):
        super().__init__(cfg)
        mask = self.mask
        del self.mask
        self.mask = mask                                             # 普通属性：不跟着 .to()


@pytest.mark.parametrize("cls, hint", [(_SavedMask, "persistent=False"),
                                       (_PlainMask, "不是普通的张量属性")])
def test_attention_module_rejects_a_mask_that_is_saved_or_not_a_buffer(passes, cls, hint):
    """审阅 01–02 F8：存进 state_dict 的掩码让 6.1 的严格加载报错；普通属性不跟着 .to(device)。"""
    ok, out = passes(nb02.attention_module, cls)
    assert not ok and hint in out and "WithAttribute" in out


def test_gpt_model_rejects_a_saved_mask(passes):
    """审阅 01–02 F8：练习 13 也是。"""
    class SavedBlock(Block):
        def __init__(self, cfg):
            super().__init__(cfg)
            self.attn = _SavedMask(cfg)

    class SavedMaskGPT(MyGPT):
        block = SavedBlock

    ok, out = passes(nb02.gpt_model, SavedMaskGPT)
    assert not ok and "persistent=False" in out


class _DetachedHead(MyGPT):
    def forward(self, idx):
        x, rope = self.embed(idx)
        for b in self.blocks:
            x = b(x, rope)
        return self.norm_f(x) @ self.tok_emb.weight.detach().T


class _BypassesHead(MyGPT):
    def forward(self, idx):
        x, rope = self.embed(idx)
        for b in self.blocks:
            x = b(x, rope)
        return self.norm_f(x) @ self.tok_emb.weight.T


@pytest.mark.parametrize("cls, hint", [(_DetachedHead, "梯度"), (_BypassesHead, "绕过了")])
def test_gpt_model_rejects_a_head_that_is_detached_or_bypasses_lm_head(passes, cls, hint):
    """审阅 01–02 F9：logits 的数值相同，但梯度不回词嵌入，或输出头换成不共享的也不变。"""
    ok, out = passes(nb02.gpt_model, cls)
    assert not ok and hint in out and "lm_head" in out


def test_rope_pair_accepts_a_list(passes, teacher):
    """审阅 01–02 F10：返回 [y1, y2] 也是对的（rotate 里 y1, y2 = rope_pair(...) 照样能用）。"""
    right = teacher("nb02.rope_pair")
    assert passes(nb02.rope_pair, lambda *a: list(right(*a)))[0]


def test_rmsnorm_names_a_hard_coded_eps(passes):
    """审阅 01–02 F15：eps 写死成 1e-5 时提示不该说“eps 要加在开方之前”。"""
    def hard_coded(self, x):
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight

    def no_eps(self, x):
        return x / x.pow(2).mean(-1, keepdim=True).sqrt() * self.weight

    for fn, hint in ((hard_coded, "没有用 self.eps"), (no_eps, "没有用 self.eps")):
        ok, out = passes(nb02.rmsnorm, type("Wrong", (_MyRMSNorm,), {"forward": fn}))
        assert not ok and hint in out and "**" not in out and "之前" not in out, out


def test_a_standin_argument_says_which_exercise_to_finish(passes):
    """审阅 01–02 F15：练习 13 没写完时，练习 14 的检查要说“先完成练习 13”。"""
    standin = gc.check.mine(None, GPT, "练习 13")(nb02._CFGS[0])
    ok, out = passes(nb02.leaky_model, _leaky, standin)
    assert not ok and "先完成练习 13" in out


class _HalfResidual(Block):
    def forward(self, x, rope=None):
        x = x + 0.5 * self.attn(self.norm1(x), rope)
        return x + self.mlp(self.norm2(x))


def _rotate_twice(x, c, s):
    return gc.rope.apply_rope(gc.rope.apply_rope(x, c, s), c, s)


@pytest.mark.parametrize("checker, wrong, answer", [
    ("gpt_block", _HalfResidual, "x = x + attn(norm1(x), rope)"),
    ("attention_module", type("Doubled", (_MyAttention,), {
        "forward": lambda self, x, rope=None: 2 * _MyAttention.forward(self, x, rope)}),
     "attention(q, k, v, self.mask[:T, :T]) → merge_heads → proj"),
    ("rope_rotate", _rotate_twice, "x1, x2 = x.chunk(2, dim=-1)"),
    ("rmsnorm", type("Off", (_MyRMSNorm,), {
        "forward": lambda self, x: 1.01 * _MyRMSNorm.forward(self, x)}), "· γ，均值沿最后一维"),
])
def test_catch_all_hints_ask_instead_of_giving_the_line(passes, checker, wrong, answer):
    """审阅 01–02 F14（检查器部分）：认不出是哪种错误时，提示问一个问题，不把答案那一行印出来。"""
    ok, out = passes(getattr(nb02, checker), wrong)
    assert not ok and "？" in out and answer not in out, out


def test_the_teacher_classes_pass_the_stricter_checkers(passes):
    """教师版答案单元格里的类（练习 8–14）按笔记本的顺序执行，在换掩码、查 buffer、反向传播、
    换输出头这些新检查下仍然“正确 ✓”。"""
    from gptcourse.check._common import solution_cells

    def rope_tables(T, D, base=10000.0):                      # 笔记本里给定的（c61）
        ang = gc.rope.rope_angles(D, T, base)
        return ang.cos(), ang.sin()

    ns = {"torch": torch, "nn": nn, "F": F, "math": math, "gc": gc,
          "make_norm": gc.model.make_norm, "rope_tables": rope_tables}
    for key, src in solution_cells().items():
        if key.startswith("nb02."):
            exec(compile(src, key, "exec"), ns)                       # noqa: S102
    for name, arg in (("mlp", "MLP"), ("rmsnorm", "RMSNorm"), ("attention_module",
                      "CausalSelfAttention"), ("gpt_block", "Block"), ("gpt_model", "GPT")):
        assert passes(getattr(nb02, name), ns[arg])[0], name
    assert passes(nb02.leaky_model, ns["make_leaky"], ns["GPT"](nb02._CFGS[0]).eval())[0]
