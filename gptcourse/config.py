"""GPTConfig：一个数据类描述一个模型；三种参考设计与课程默认模型都是它的"预设"。"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace

from .errors import UserError, is_real

# block_size 的上限：每层的因果掩码是 [T, T] 的 bool 缓冲区，T = 8192 时每层 64 MB
MAX_BLOCK_SIZE = 8192


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 123
    block_size: int = 64          # 上下文长度 T 的上限
    n_layer: int = 3
    n_head: int = 4
    n_embd: int = 96              # 残差流宽度 C
    dropout: float = 0.1          # 嵌入之后
    attn_dropout: float = 0.1     # 注意力权重上
    resid_dropout: float = 0.1    # 注意力输出投影与 MLP 输出上
    pos: str = "learned"          # "learned" 绝对位置嵌入 | "rope" 旋转位置编码
    norm: str = "layernorm"       # "layernorm" | "rmsnorm"
    mlp: str = "gelu"             # "gelu"（4× 扩展） | "swiglu"（≈8C/3，三个矩阵）
    gelu_approx: str = "none"     # "none" 精确 x·Φ(x) | "tanh" 近似（GPT-2 原版）
    qkv: str = "fused"            # "fused" 一个 Linear(C,3C) | "separate" 三个 Linear(C,C)
    bias: bool = True             # 线性层是否带偏置
    tie_weights: bool = True      # 输出头与词嵌入共用同一个张量
    attention: str = "sdpa"       # "sdpa" F.scaled_dot_product_attention | "manual" 手写
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    init_std: float = 0.02

    def __post_init__(self):
        choices = {"pos": ("learned", "rope"), "norm": ("layernorm", "rmsnorm"),
                   "mlp": ("gelu", "swiglu"), "gelu_approx": ("none", "tanh"),
                   "qkv": ("fused", "separate"), "attention": ("sdpa", "manual")}
        for name, ok in choices.items():
            if getattr(self, name) not in ok:
                raise UserError(f"{name}={getattr(self, name)!r} 无效；可选：{', '.join(ok)}")
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise UserError(f"{name} 必须是整数，收到 {v!r}")
            if v < 1:
                raise UserError(f"{name} 必须 ≥ 1，收到 {v}")
        if self.block_size > MAX_BLOCK_SIZE:
            raise UserError(f"block_size={self.block_size} 太大：上限 {MAX_BLOCK_SIZE}"
                             "（因果掩码要 block_size² 个元素的内存）")
        if self.n_embd % self.n_head:
            raise UserError(f"n_embd={self.n_embd} 必须能被 n_head={self.n_head} 整除")
        if self.pos == "rope" and self.head_dim % 2:
            raise UserError(f"RoPE 需要偶数的 head_dim，收到 {self.head_dim}")
        for name in ("dropout", "attn_dropout", "resid_dropout"):
            if not is_real(getattr(self, name)) or not 0.0 <= getattr(self, name) < 1.0:
                raise UserError(f"{name} 必须在 [0, 1) 内，收到 {getattr(self, name)!r}")
        for name in ("bias", "tie_weights"):
            if not isinstance(getattr(self, name), bool):
                raise UserError(f"{name} 必须是 True 或 False，收到 {getattr(self, name)!r}")
        for name, lo in (("norm_eps", 0.0), ("rope_base", 1.0), ("init_std", 0.0)):
            v = getattr(self, name)
            if not is_real(v) or not math.isfinite(v) or not v > lo:
                raise UserError(f"{name} 必须是 > {lo:g} 的有限数，收到 {v!r}")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def mlp_hidden(self) -> int:
        """GELU：4C；SwiGLU：8C/3 向上取整到 64 的倍数（C=256 → 704）。"""
        if self.mlp == "gelu":
            return 4 * self.n_embd
        return 64 * math.ceil(8 * self.n_embd / 3 / 64)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "GPTConfig":
        if not isinstance(d, dict):
            raise UserError(f"配置应是 dict，收到 {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise UserError(f"配置里有未知字段：{sorted(unknown)}")
        return cls(**d)


_DESIGNS = {
    # 经典 Mini-GPT：字符词表、学习式位置、LayerNorm、GELU、融合 qkv（带偏置）、权重共享
    "mini": dict(vocab_size=123, block_size=64, n_layer=3, n_head=4, n_embd=96,
                 dropout=0.1, attn_dropout=0.1, resid_dropout=0.1),
    # 现代小型中文 GPT：RoPE + RMSNorm + SwiGLU，无偏置，权重共享
    "teacher": dict(vocab_size=6436, block_size=128, n_layer=4, n_head=4, n_embd=256,
                    pos="rope", norm="rmsnorm", mlp="swiglu", bias=False,
                    dropout=0.1, attn_dropout=0.1, resid_dropout=0.1),
    # GPT-2 small 的形状：50,257 词表、12 层 12 头、C=768、分开的 q/k/v（只比规模与速度；
    # 课程里没有载入 OpenAI 权重的代码）
    "gpt2": dict(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768,
                 qkv="separate", gelu_approx="tanh",
                 dropout=0.1, attn_dropout=0.1, resid_dropout=0.1),
    # 课程默认模型：teacher 设计，尺寸按"2 核 CPU 训练 15 分钟"选定（见 data/checkpoints/README.md）
    "course": dict(vocab_size=6606, block_size=128, n_layer=4, n_head=4, n_embd=256,
                   pos="rope", norm="rmsnorm", mlp="swiglu", bias=False,
                   dropout=0.0, attn_dropout=0.0, resid_dropout=0.0),
}


def preset_names() -> list[str]:
    return list(_DESIGNS)


def preset(name: str, **overrides) -> GPTConfig:
    """按名字取预设配置，关键字参数覆盖其中的字段。

    >>> preset("mini").n_embd
    96
    >>> preset("teacher", vocab_size=100).mlp_hidden
    704
    """
    if name not in _DESIGNS:
        raise UserError(f"没有名为 {name!r} 的预设；可选：{', '.join(_DESIGNS)}")
    base = GPTConfig(**_DESIGNS[name])
    unknown = set(overrides) - {f.name for f in fields(GPTConfig)}
    if unknown:
        raise UserError(f"预设覆盖里有未知字段：{sorted(unknown)}")
    return replace(base, **overrides)
