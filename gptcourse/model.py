"""一个可配置的 GPT：经典 Mini-GPT、现代 RoPE/RMSNorm/SwiGLU、GPT-2 布局都由它构建。

契约：``idx`` [B, T] 整数 id 进，``logits`` [B, T, V] 出。记号：B 批大小，T 序列长度，
C = n_embd，H = n_head，D = C/H，V = vocab_size，S = 含缓存在内的键长度。
"""
from __future__ import annotations

import math
from collections import defaultdict
from contextlib import contextmanager

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import GPTConfig
from .errors import UserError
from .rope import apply_rope, rope_angles


class RMSNorm(nn.Module):
    """均方根归一化：x / sqrt(mean(x²) + eps) · γ。不减均值，没有 β。"""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:          # [..., C] → [..., C]
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def make_norm(cfg: GPTConfig) -> nn.Module:
    if cfg.norm == "rmsnorm":
        return RMSNorm(cfg.n_embd, cfg.norm_eps)
    return nn.LayerNorm(cfg.n_embd, eps=cfg.norm_eps, bias=cfg.bias)


class KVCache:
    """推理用的 KV 缓存：每层一块**预先分配**的 K、V 缓冲区 [B, H, S_max, D]（Q 用完即弃，不缓存）。

    新位置的 K、V 直接写进缓冲区里它们自己的那几格，不用 ``torch.cat`` 把旧缓存复制一遍
    （逐步拼接时每一步都要搬运整个缓存，总搬运量随长度平方增长）。缓冲区在第一次写入时按
    K 的批大小、头数、dtype 和设备分配；S_max = 模型的 block_size。

    ``length``：已经写入的位置数，也就是下一批新词元的起始位置。一次前向里每一层都在同一个
    ``start`` 处写入，所有层写完之后模型才调用 ``advance`` 让它前进。
    """

    def __init__(self, n_layer: int, max_len: int):
        self.n_layer, self.max_len = n_layer, max_len
        self.k: list[torch.Tensor] = []                  # 每层 [B, H, S_max, D]
        self.v: list[torch.Tensor] = []
        self._length = 0

    @property
    def length(self) -> int:
        return self._length

    def write(self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor):
        """把新位置的 k、v [B, H, T, D] 写到 start 处 → 位置 0…start+T−1 的 K、V（视图）。"""
        if layer == len(self.k):                         # 第一次前向：为这一层分配缓冲区
            B, H, _, D = k.shape
            self.k.append(k.new_empty(B, H, self.max_len, D))
            self.v.append(v.new_empty(B, H, self.max_len, D))
        kb, vb = self.k[layer], self.v[layer]
        if k.shape[0] != kb.shape[0]:
            raise UserError(f"缓存是按批大小 {kb.shape[0]} 建的，这次输入的批大小是 {k.shape[0]}；"
                             "换一批输入请用 model.new_cache() 新建缓存")
        end = start + k.shape[2]
        kb[:, :, start:end] = k
        vb[:, :, start:end] = v
        return kb[:, :, :end], vb[:, :, :end]            # [B, H, S, D]，S = start + T

    def advance(self, n: int) -> None:
        self._length += n

    @property
    def layers(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """每层已写入部分的 (K, V)，各 [B, H, length, D]（缓冲区的视图）。"""
        n = self._length
        return [(k[:, :, :n], v[:, :, :n]) for k, v in zip(self.k, self.v)]

    def nbytes(self) -> int:
        """已写入的 K、V 占的字节数（= 2·L·B·length·C·每个数的字节数）。"""
        return sum(t.numel() * t.element_size() for kv in self.layers for t in kv)


def causal_mask(T: int, device=None) -> torch.Tensor:
    """[T, T] 的因果掩码，True = 可以看（键位置 ≤ 查询位置）：下三角。"""
    return torch.tril(torch.ones(T, T, dtype=torch.bool, device=device))


def kv_cache_bytes(n_layer: int, batch: int, seq_len: int, n_embd: int,
                   bytes_per: int = 4) -> int:
    """KV 缓存的字节数：每层 K、V 各 [B, T, C] → 2·L·B·T·C·bytes_per（= ``KVCache.nbytes()``）。"""
    return 2 * n_layer * batch * seq_len * n_embd * bytes_per


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                     dropout_p: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """带因果掩码的缩放点积注意力，一个纯函数（模型的手写路径、mistakes 与检查器都用它）。

    q [B, H, T, D]，k、v [B, H, S, D]，mask [T, S]（True = 可以看）→
    (输出 [B, H, T, D], 缩放后、掩码前的分数 [B, H, T, S], softmax 之后的权重 [B, H, T, S])。
    ``dropout_p`` 只在训练时传入非 0（作用在权重上，返回的权重是 dropout 之前的）。
    """
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])     # [B, H, T, S]
    weights = scores.masked_fill(~mask, float("-inf")).softmax(-1)  # 未来 → −∞ → 0；对"键"归一化
    y = F.dropout(weights, dropout_p, dropout_p > 0) @ v            # [B, H, T, D]
    return y, scores, weights


@contextmanager
def eval_mode(model: nn.Module):
    """``with eval_mode(model):`` 临时切到 eval（关掉 dropout），结束后恢复原来的模式。
    已在 eval 时什么都不改（所以并发的只读请求之间线程安全）。"""
    was = model.training
    if was:
        model.eval()
    try:
        yield model
    finally:
        if was:
            model.train()


@contextmanager
def record_attention(model: nn.Module):
    """``with record_attention(model) as rec: model(idx)`` → ``rec[i]`` 是第 i 个注意力层的
    ``{"scores": [B, H, T, S], "weights": [B, H, T, S]}``（最近一次前向）。

    记录期间注意力走手写路径（:func:`causal_attention`）；离开 with 后模型恢复原样。
    """
    layers = [m for m in model.modules() if isinstance(m, CausalSelfAttention)]
    rec: list[dict] = [{} for _ in layers]
    for layer, slot in zip(layers, rec):
        layer._record = slot
    try:
        yield rec
    finally:
        for layer in layers:
            layer._record = None


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        C, self.n_head, self.head_dim = cfg.n_embd, cfg.n_head, cfg.head_dim
        if cfg.qkv == "fused":
            self.qkv = nn.Linear(C, 3 * C, bias=cfg.bias)     # 一次矩阵乘法算出 Q、K、V
        else:
            self.q = nn.Linear(C, C, bias=cfg.bias)
            self.k = nn.Linear(C, C, bias=cfg.bias)
            self.v = nn.Linear(C, C, bias=cfg.bias)
        self.proj = nn.Linear(C, C, bias=cfg.bias)
        self.proj.is_residual_proj = True
        self.attn_p, self.resid_drop = cfg.attn_dropout, nn.Dropout(cfg.resid_dropout)
        self.use_sdpa = cfg.attention == "sdpa"
        self.use_rope = cfg.pos == "rope"
        # 因果掩码：下三角为 True（可以看）。buffer 随 .to(device) 移动、不训练；persistent=False：
        # 它完全由 block_size 决定，不存进 state_dict（检查点里也就没有一份可以被改坏的掩码）
        self.register_buffer("mask", causal_mask(cfg.block_size), persistent=False)
        self._record: dict | None = None         # record_attention() 期间：在这里留下分数与权重

    def split_qkv(self, x: torch.Tensor):
        """x [B, T, C] → q, k, v 各 [B, T, C]。"""
        if hasattr(self, "qkv"):
            return self.qkv(x).split(x.shape[-1], dim=-1)
        return self.q(x), self.k(x), self.v(x)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, T, C] → Q、K、V 拆成多头后叠在一起 [3, B, H, T, D]（融合 qkv 时不复制数据）。"""
        B, T, C = x.shape
        if hasattr(self, "qkv"):
            qkv = self.qkv(x).view(B, T, 3, self.n_head, self.head_dim)   # [B, T, 3, H, D]
        else:
            qkv = torch.stack(self.split_qkv(x), dim=2).view(B, T, 3, self.n_head, self.head_dim)
        return qkv.permute(2, 0, 3, 1, 4)                            # [3, B, H, T, D]

    def forward(self, x, rope=None, cache: KVCache | None = None, layer: int = 0, start: int = 0):
        """x [B, T, C] → [B, T, C]。start：这批新词元在序列里的绝对起始位置（= 缓存长度）。"""
        B, T, C = x.shape
        qkv = self.split_heads(x)                                    # [3, B, H, T, D]
        if self.use_rope:                                            # 只旋转 Q 和 K，V 不动
            cos, sin = rope
            q, k = apply_rope(qkv[:2], cos, sin).unbind(0)           # Q、K 一起转：各 [B, H, T, D]
        else:
            q, k = qkv[0], qkv[1]
        v = qkv[2]
        if cache is not None:
            k, v = cache.write(layer, start, k, v)                   # [B, H, S, D]，S = start + T
        S = k.shape[2]
        p = self.attn_p if self.training else 0.0                    # eval 时必须关掉 dropout
        if self.use_sdpa and self._record is None:
            # 三种情形：从位置 0 开始 → 标准因果掩码（is_causal）；缓存之后只有 1 个新位置 →
            # 它可以看全部 S 个键，不需要掩码；缓存之后多个新位置 → 取掩码的 [start:start+T] 行
            mask = None if start == 0 or T == 1 else self.mask[start:start + T, :S]
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p,
                                               is_causal=start == 0 and T > 1)
        else:                                                        # 手写路径：同一个纯函数
            y, scores, weights = causal_attention(q, k, v, self.mask[start:start + T, :S], p)
            if self._record is not None:
                self._record.update(scores=scores.detach(), weights=weights.detach())
        y = y.transpose(1, 2).reshape(B, T, C)                       # 合并各头 → [B, T, C]
        return self.resid_drop(self.proj(y))


class MLP(nn.Module):
    """GELU：C → 4C → C；SwiGLU：down(silu(gate(x)) · up(x))，隐藏层 ≈ 8C/3。"""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        C, Hd = cfg.n_embd, cfg.mlp_hidden
        self.swiglu = cfg.mlp == "swiglu"
        if self.swiglu:
            self.gate = nn.Linear(C, Hd, bias=cfg.bias)
            self.up = nn.Linear(C, Hd, bias=cfg.bias)
            self.down = nn.Linear(Hd, C, bias=cfg.bias)
            self.down.is_residual_proj = True
        else:
            self.fc = nn.Linear(C, Hd, bias=cfg.bias)
            self.act = nn.GELU(approximate=cfg.gelu_approx)
            self.proj = nn.Linear(Hd, C, bias=cfg.bias)
            self.proj.is_residual_proj = True
        self.drop = nn.Dropout(cfg.resid_dropout)

    def forward(self, x):                                            # [B, T, C] → [B, T, C]
        if self.swiglu:
            return self.drop(self.down(F.silu(self.gate(x)) * self.up(x)))
        return self.drop(self.proj(self.act(self.fc(x))))


class Block(nn.Module):
    """Pre-Norm 残差块：x + attn(norm(x))，再 x + mlp(norm(x))。"""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.norm1, self.attn = make_norm(cfg), CausalSelfAttention(cfg)
        self.norm2, self.mlp = make_norm(cfg), MLP(cfg)

    def forward(self, x, rope=None, cache=None, layer=0, start=0):
        x = x + self.attn(self.norm1(x), rope, cache, layer, start)
        return x + self.mlp(self.norm2(x))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """语言模型的损失：logits [B, T, V] 与 targets [B, T] 的交叉熵，−1 的位置不算。"""
    return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1),
                           ignore_index=-1)


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.config = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)      # 查表：id → C 维向量
        if cfg.pos == "learned":
            self.pos_emb = nn.Embedding(cfg.block_size, cfg.n_embd)
        else:
            angles = rope_angles(cfg.head_dim, cfg.block_size, cfg.rope_base)  # [T_max, D/2]
            self.register_buffer("rope_cos", angles.cos(), persistent=False)
            self.register_buffer("rope_sin", angles.sin(), persistent=False)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))  # 不能用 Python list
        self.norm_f = make_norm(cfg)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.apply(self._init_weights)
        if cfg.tie_weights:
            self.lm_head.weight = self.tok_emb.weight                # 同一个张量对象

    def _init_weights(self, m: nn.Module):
        std = self.config.init_std
        if isinstance(m, nn.Linear):
            if getattr(m, "is_residual_proj", False):                # 残差投影按 1/√(2L) 缩小
                std = std / math.sqrt(2 * self.config.n_layer)
            nn.init.normal_(m.weight, 0.0, std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, std)

    def new_cache(self) -> KVCache:
        return KVCache(self.config.n_layer, self.config.block_size)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None,
                cache: KVCache | None = None, last_only: bool = False):
        """idx [B, T] → (logits [B, T, V], loss 或 None)。传入 cache 时只算新位置并追加 K/V。

        ``last_only=True``（生成时）：输出头只算最后一个位置 → logits [B, 1, V]；输出头约占每个
        位置三分之一的计算，整段重算时其余位置的 logits 用不上。"""
        if last_only and targets is not None:
            raise UserError("last_only=True 只用于生成，不能同时计算损失（targets）")
        h = self.hidden(idx, cache, last_only)                       # [B, T, C]（或 [B, 1, C]）
        logits = self.lm_head(h)                                     # [B, T, V]（或 [B, 1, V]）
        loss = lm_loss(logits, targets) if targets is not None else None
        return logits, loss

    def hidden(self, idx: torch.Tensor, cache: KVCache | None = None,
               last_only: bool = False) -> torch.Tensor:
        """idx [B, T] → 最后一层归一化之后的隐藏状态 [B, T, C]，即输出头的输入
        （last_only → [B, 1, C]）。

        训练时的辅助目标（:mod:`gptcourse.objectives`）在它上面接自己的小头。"""
        if idx.dim() != 2 or idx.dtype not in (torch.int64, torch.int32):
            raise UserError(f"idx 应是 [B, T] 的整数张量，收到 {tuple(idx.shape)} {idx.dtype}")
        B, T = idx.shape
        start = cache.length if cache is not None else 0
        limit = self.config.block_size
        if start + T > limit:
            raise UserError(f"序列长度 {start + T}（缓存 {start} + 新输入 {T}）超过模型的上下文 "
                             f"block_size={limit}；请把输入裁剪到最后 {limit} 个词元")
        x = self.tok_emb(idx)                                        # [B, T, C]
        rope = None
        if self.config.pos == "learned":
            x = x + self.pos_emb(torch.arange(start, start + T, device=idx.device))
        else:
            rope = (self.rope_cos[start:start + T], self.rope_sin[start:start + T])  # 真实位置
        x = self.drop(x)
        for i, block in enumerate(self.blocks):
            x = block(x, rope, cache, i, start)
        if cache is not None:
            cache.advance(T)                                         # 所有层都写完了，缓存前进
        if last_only:
            x = x[:, -1:]                                            # [B, 1, C]
        return self.norm_f(x)                                        # [B, T, C]

    @torch.no_grad()
    def attention_maps(self, idx: torch.Tensor) -> list[torch.Tensor]:
        """每层的注意力权重 [B, H, T, T]（eval 模式下临时走手写路径，不影响训练速度）。"""
        with eval_mode(self), record_attention(self) as rec:
            self(idx)
        return [r["weights"] for r in rec]


def count_parameters(model: GPT) -> dict[str, int]:
    """参数按部件分类计数。共享的张量只算一次；"block.*" 是单个块内各部件的数量。"""
    counts: dict[str, int] = {"tok_emb": model.tok_emb.weight.numel(),
                              "pos_emb": model.pos_emb.weight.numel()
                              if hasattr(model, "pos_emb") else 0}
    per_part: dict[str, int] = defaultdict(int)
    for name, p in model.blocks[0].named_parameters():
        per_part["block." + name.rsplit(".", 1)[0]] += p.numel()   # 如 block.attn.qkv
    counts.update(per_part)
    counts["per_block"] = sum(p.numel() for p in model.blocks[0].parameters())
    counts["blocks"] = sum(p.numel() for p in model.blocks.parameters())
    counts["final_norm"] = sum(p.numel() for p in model.norm_f.parameters())
    tied = model.lm_head.weight is model.tok_emb.weight
    counts["lm_head"] = 0 if tied else model.lm_head.weight.numel()
    counts["total"] = sum(p.numel() for p in model.parameters())   # parameters() 自动去重
    return counts
