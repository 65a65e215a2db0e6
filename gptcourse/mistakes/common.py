"""陈列馆共用的小工具：检查结果 ``Diagnosis``、小模型配置、真实语料、几十步的小训练循环。"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

from ..config import GPTConfig, preset


@dataclass(frozen=True)
class Diagnosis:
    """一次检查的结论：ok=True 表示没发现这个错误；message 说明测到了什么。"""
    ok: bool
    message: str

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        return ("通过 ✓ " if self.ok else "发现错误 ✗ ") + self.message


def tiny_config(vocab_size: int, **overrides) -> GPTConfig:
    """演示用的小模型：课程模型的设计（RoPE、RMSNorm、SwiGLU），缩小到 2 层、4 头、C=64、
    上下文 32，默认无 dropout。"""
    base = dict(vocab_size=vocab_size, block_size=32, n_layer=2, n_head=4, n_embd=64,
                dropout=0.0, attn_dropout=0.0, resid_dropout=0.0)
    return preset("course", **{**base, **overrides})


@lru_cache(maxsize=2)
def real_data(name: str = "tang_5jue"):
    """(分词器, 训练 ids, 验证 ids)：真实的五绝语料，词表来自训练集。"""
    from ..data import load_corpus
    from ..tokenizer import CharTokenizer

    corpus = load_corpus(name)
    tok = CharTokenizer.from_text(corpus.train)
    enc = lambda s: torch.tensor(tok.encode(s, errors="unk"), dtype=torch.long)  # noqa: E731
    return tok, enc(corpus.train), enc(corpus.val)


def shifted_batch(data: torch.Tensor, batch_size: int, block_size: int,
                  generator: torch.Generator | None = None):
    """正确的取批次：y 是 x 向右错一位（与 ``gc.data.get_batch`` 相同）。"""
    from ..data import get_batch
    return get_batch(data, batch_size, block_size, generator=generator)


def train_tiny(model, data: torch.Tensor, steps: int, batch_fn=shifted_batch,
               batch_size: int = 16, lr: float = 3e-3, seed: int = 0) -> list[float]:
    """最朴素的训练循环：AdamW（默认设置）优化 model.parameters()，不裁剪，返回每步的训练损失。
    每一步就是 ``gc.train.train_step``；只有取批次的函数 ``batch_fn`` 可以换成错误的版本。"""
    from ..train import train_step

    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    return [train_step(model, opt, [batch_fn(data, batch_size, model.config.block_size,
                                             generator=g)], grad_clip=0)[0]
            for _ in range(steps)]


@torch.no_grad()
def greedy(model, tok, prompt: str, n: int) -> str:
    """贪心续写 n 个字（上下文裁剪到 block_size），只用于演示症状。"""
    model.eval()
    idx = torch.tensor([tok.encode(prompt, errors="unk")])
    for _ in range(n):
        logits, _ = model(idx[:, -model.config.block_size:])
        idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return tok.decode(idx[0])
