"""一个可配置的 GPT：经典 Mini-GPT、现代 RoPE/RMSNorm/SwiGLU、GPT-2 布局都由它构建。

契约：``idx`` [B, T] 整数 id 进，``logits`` [B, T, V] 出。记号：B 批大小，T 序列长度，
C = n_embd，H = n_head，D = C/H，V = vocab_size，S = 含缓存在内的键长度。
"""
from __future__ import annotations

import math
from collections import defaultdict

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import GPTConfig
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
    """推理用的 KV 缓存：每层保存已经算过的 K 和 V（Q 用完即弃，不缓存）。

    layers[i] = (k, v)，各为 [B, H, S, D]。``length`` 就是新词元的起始位置。
    """

    def __init__(self, n_layer: int):
        self.layers: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * n_layer

    @property
    def length(self) -> int:
        return 0 if self.layers[0] is None else self.layers[0][0].shape[2]

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        if self.layers[layer] is not None:
            pk, pv = self.layers[layer]
            k, v = torch.cat([pk, k], dim=2), torch.cat([pv, v], dim=2)   # [B, H, S, D]
        self.layers[layer] = (k, v)
        return k, v

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for kv in self.layers if kv for t in kv)


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
        self.attn_dropout, self.resid_drop = cfg.attn_dropout, nn.Dropout(cfg.resid_dropout)
        self.use_sdpa = cfg.attention == "sdpa"
        self.use_rope = cfg.pos == "rope"
        # 因果掩码：下三角为 True（可以看）。buffer 会随 .to(device) 移动、存进 state_dict，但不训练
        self.register_buffer("mask", torch.tril(torch.ones(cfg.block_size, cfg.block_size,
                                                           dtype=torch.bool)))
        self.store_attn = False                  # 为 True 时走手写路径并保存注意力权重
        self.last_attn: torch.Tensor | None = None     # softmax 之后的权重 [B, H, T, S]
        self.last_scores: torch.Tensor | None = None   # 缩放后、掩码前的分数 [B, H, T, S]

    def split_qkv(self, x: torch.Tensor):
        """x [B, T, C] → q, k, v 各 [B, T, C]。"""
        if hasattr(self, "qkv"):
            return self.qkv(x).split(x.shape[-1], dim=-1)
        return self.q(x), self.k(x), self.v(x)

    def forward(self, x, rope=None, cache: KVCache | None = None, layer: int = 0, start: int = 0):
        """x [B, T, C] → [B, T, C]。start：这批新词元在序列里的绝对起始位置（= 缓存长度）。"""
        B, T, C = x.shape
        H, D = self.n_head, self.head_dim
        q, k, v = self.split_qkv(x)                                  # 各 [B, T, C]
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))   # [B, H, T, D]
        if self.use_rope:                                            # 只旋转 Q 和 K，V 不动
            cos, sin = rope
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.append(layer, k, v)                         # [B, H, S, D]，S = start + T
        S = k.shape[2]
        mask = self.mask[start:start + T, :S]                        # [T, S]，True = 可以看
        p = self.attn_dropout if self.training else 0.0              # eval 时必须关掉 dropout
        if self.use_sdpa and not self.store_attn:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None if start == 0 else mask,
                                               dropout_p=p, is_causal=start == 0 and T > 1)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(D)           # [B, H, T, S]
            if self.store_attn:
                self.last_scores = att.detach()
            att = att.masked_fill(~mask, float("-inf"))              # 未来位置 → −∞
            att = F.softmax(att, dim=-1)                             # 对"键"那一维归一化；−∞ → 0
            if self.store_attn:
                self.last_attn = att.detach()
            att = F.dropout(att, p, self.training)
            y = att @ v                                              # [B, H, T, D]
        y = y.transpose(1, 2).contiguous().view(B, T, C)             # 合并各头 → [B, T, C]
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
        return KVCache(self.config.n_layer)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None,
                cache: KVCache | None = None):
        """idx [B, T] → (logits [B, T, V], loss 或 None)。传入 cache 时只算新位置并追加 K/V。"""
        if idx.dim() != 2 or idx.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"idx 应是 [B, T] 的整数张量，收到 {tuple(idx.shape)} {idx.dtype}")
        B, T = idx.shape
        start = cache.length if cache is not None else 0
        limit = self.config.block_size
        if start + T > limit:
            raise ValueError(f"序列长度 {start + T}（缓存 {start} + 新输入 {T}）超过模型的上下文 "
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
        logits = self.lm_head(self.norm_f(x))                        # [B, T, V]
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1),
                                   ignore_index=-1)
        return logits, loss

    @torch.no_grad()
    def attention_maps(self, idx: torch.Tensor) -> list[torch.Tensor]:
        """每层的注意力权重 [B, H, T, T]（eval 模式下临时走手写路径，不影响训练速度）。"""
        was_training = self.training
        self.eval()
        attns = [b.attn for b in self.blocks]
        for a in attns:
            a.store_attn = True
        try:
            self(idx)
            return [a.last_attn for a in attns]
        finally:
            for a in attns:
                a.store_attn, a.last_attn, a.last_scores = False, None, None
            self.train(was_training)


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
