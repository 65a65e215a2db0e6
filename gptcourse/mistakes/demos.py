"""每个错误的"症状"——在真实语料（五绝）或真实模型（课程检查点）上测出来的数字。

训练类演示用 ``tiny_config`` 的小模型训练几十到几百步（CPU 上几秒）；注意力类演示把错误
直接装进一个训练好的模型，看验证损失变成多少。所有函数都返回 dict，笔记本把它打印出来。
"""
from __future__ import annotations

import copy
import math

import torch

from ..model import GPT
from ..train import estimate_loss
from .attention import GalleryAttention, attention_core, leak_test, merge_heads
from .common import greedy, real_data, shifted_batch, tiny_config, train_tiny
from .sampling import generate_without_crop, sample_naive, top_k_naive
from .training import (
    ListBlocksGPT,
    ModeRecorder,
    estimate_loss_correctly,
    estimate_loss_forgetting_eval,
    generalisation_gap,
    repeated_corpus,
    train_correctly,
    train_forgetting_train,
    unshifted_batch,
)


def _val_loss(model, val_ids) -> float:
    return estimate_loss(model, {"val": val_ids}, 16, model.config.block_size, 10)["val"]


def demo_unshifted_targets(steps: int = 150, seed: int = 0) -> dict:
    """同样训练 steps 步：错位与不错位的训练损失、（按正确方式算的）验证损失与贪心续写。"""
    tok, train, val = real_data()
    out = {}
    for name, batch_fn in (("wrong", unshifted_batch), ("right", shifted_batch)):
        torch.manual_seed(seed)
        model = GPT(tiny_config(tok.vocab_size))
        losses = train_tiny(model, train, steps, batch_fn, seed=seed)
        out[name] = {"train_loss": sum(losses[-10:]) / 10, "val_loss": _val_loss(model, val),
                     "sample": greedy(model, tok, "春风", 22)}
    return out


def demo_no_mask(core, steps: int = 150, seed: int = 0) -> dict:
    """用给定的注意力核心从头训练小模型：训练损失、正确算出的验证损失、泄漏量、续写。"""
    from .attention import gallery_model
    tok, train, val = real_data()
    out = {}
    for name, c in (("wrong", core), ("right", attention_core)):
        torch.manual_seed(seed)
        model = gallery_model(tiny_config(tok.vocab_size), core=c)
        losses = train_tiny(model, train, steps, seed=seed)
        out[name] = {"train_loss": sum(losses[-10:]) / 10, "val_loss": _val_loss(model, val),
                     "leak": leak_test(model), "sample": greedy(model, tok, "春风", 22)}
    return out


def plug_into(model: GPT, core=attention_core, merge=merge_heads) -> GPT:
    """一个训练好的模型的副本，把每层注意力换成给定的 core / merge（权重不变）。"""
    bad = copy.deepcopy(model)
    for block in bad.blocks:
        block.attn = GalleryAttention(block.attn, core, merge)
    return bad.eval()


def demo_attention_bug(model: GPT, tok, text: str, core=attention_core,
                       merge=merge_heads) -> dict:
    """把错误装进训练好的模型：同一段文本上的损失与泄漏量，和原模型对比。"""
    from ..evaluate import split_loss
    bad = plug_into(model, core, merge)
    return {"loss_right": split_loss(model, tok, text), "loss_wrong": split_loss(bad, tok, text),
            "leak_right": leak_test(model), "leak_wrong": leak_test(bad)}


def demo_list_blocks(steps: int = 30, seed: int = 0) -> dict:
    """Python list 装 Block：优化器看到的参数数、训练后 Block 权重的变化、训练损失。"""
    tok, train, _ = real_data()
    out = {}
    for name, cls in (("wrong", ListBlocksGPT), ("right", GPT)):
        torch.manual_seed(seed)
        model = cls(tiny_config(tok.vocab_size))
        before = [p.detach().clone() for b in model.blocks for p in b.parameters()]
        losses = train_tiny(model, train, steps, seed=seed)
        after = [p.detach() for b in model.blocks for p in b.parameters()]
        out[name] = {"seen": sum(p.numel() for p in model.parameters()),
                     "actual": sum(p.numel() for p in model.parameters())
                     + (sum(p.numel() for b in model.blocks for p in b.parameters())
                        if cls is ListBlocksGPT else 0),
                     "block_change": max(float((a - b).abs().max()) for a, b in zip(after, before)),
                     "train_loss": sum(losses[-10:]) / 10}
    return out


def demo_long_input(model: GPT, tok, prompt: str = "春") -> dict:
    """不裁剪上下文的生成循环在第几步出错、错误信息是什么。"""
    idx = torch.tensor([tok.encode(prompt, errors="unk")])
    n = model.config.block_size + 5
    try:
        generate_without_crop(model.eval(), idx, n)
        return {"error": None}
    except ValueError as e:
        return {"error": str(e), "fails_at_length": model.config.block_size + 1}


def demo_forget_train(steps: int = 60, eval_every: int = 10, seed: int = 0) -> dict:
    """dropout=0.2 的小模型：忘了 train() 时有多少训练步其实在 eval 模式下跑。"""
    tok, train, _ = real_data()
    out = {}
    for name, fn in (("wrong", train_forgetting_train), ("right", train_correctly)):
        torch.manual_seed(seed)
        model = GPT(tiny_config(tok.vocab_size, dropout=0.2, attn_dropout=0.2,
                                resid_dropout=0.2))
        with ModeRecorder(model) as rec:
            fn(model, train, steps, shifted_batch, eval_every=eval_every, seed=seed)
        grad = [tr for tr, g in rec.calls if g]
        out[name] = {"steps": len(grad), "eval_mode_steps": grad.count(False)}
    return out


def demo_forget_eval(model: GPT, val_ids: torch.Tensor, repeats: int = 5) -> dict:
    """同一模型、同一批数据评估 repeats 次：忘了 eval() 时每次都不一样（dropout 在随机丢弃）。"""
    out = {}
    for name, fn in (("wrong", estimate_loss_forgetting_eval), ("right", estimate_loss_correctly)):
        vals = []
        for _ in range(repeats):
            model.train()
            vals.append(fn(model, val_ids))
        out[name] = vals
    return out


@torch.no_grad()
def demo_temperature_zero(model: GPT, tok, prompt: str = "春风") -> dict:
    """真实模型的 logits 除以 0：多少个变成 ±inf / nan，softmax 之后怎样，采样报什么错。"""
    idx = torch.tensor([tok.encode(prompt, errors="unk")])
    logits = model.eval()(idx)[0][:, -1]                               # [1, V]
    scaled = logits / 0.0
    probs = torch.softmax(scaled, dim=-1)
    try:
        sample_naive(logits, 0.0)
        err = None
    except RuntimeError as e:
        err = str(e).splitlines()[0]
    return {"inf": int(torch.isinf(scaled).sum()), "nan_logits": int(torch.isnan(scaled).sum()),
            "nan_probs": int(torch.isnan(probs).sum()), "V": logits.shape[-1], "error": err}


def demo_top_k(vocab_size: int) -> dict:
    """k = 词表大小 + 1 时 torch.topk 报的错。"""
    try:
        top_k_naive(torch.zeros(1, vocab_size), vocab_size + 1)
        return {"error": None}
    except RuntimeError as e:
        return {"error": str(e).splitlines()[0]}


def demo_tiny_corpus(steps: int = 200, seed: int = 0) -> dict:
    """一首诗重复 200 遍当语料：训练损失、真实验证集上的损失、贪心续写、与 ln V 对比。"""
    from ..data import load_corpus, poems
    tok, _, _ = real_data()
    corpus = load_corpus("tang_5jue")
    poem = poems(corpus.train)[0]
    text = repeated_corpus(poem)
    ids = torch.tensor(tok.encode(text), dtype=torch.long)
    torch.manual_seed(seed)
    model = GPT(tiny_config(tok.vocab_size))
    losses = train_tiny(model, ids, steps, seed=seed)
    tr, va = generalisation_gap(model, tok, text, corpus.val)
    return {"poem": poem, "last_batch_loss": losses[-1], "train_loss": tr, "val_loss": va,
            "uniform": math.log(tok.vocab_size),
            "sample": greedy(model, tok, poem[0], len(poem) - 1),
            "model": model, "tok": tok, "train_text": text, "val_text": corpus.val}
