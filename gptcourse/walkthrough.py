"""手算例子"春天 → 来"：用真正的 :class:`gptcourse.model.GPT` 类、手工设定的权重，跟踪每一步。

这些权重是**为了讲解而手工设定的**，不是训练出来的：它们让每个中间值都能用纸笔算出来。
模型与课程里训练的模型是同一个类、同一条前向路径，只是尺寸极小：

- 词表 4 个字：春 天 来 了 = id 0 1 2 3；C = 2，一个头，一个块，MLP 隐藏层 8（= 4C）；
- 学习式位置、LayerNorm（γ=1, β=0）、精确 GELU、融合 qkv（偏置全为 0）、输出头与词嵌入共享；
- 词嵌入 春 [1,0]、天 [0,1]、来 [−1,1]、了 [1,−1]；位置 [0.1,0]、[0,0.1]（第 3 个位置 [0,0]，
  只在"下一步输入 春天来"时才会用到）；W_Q = W_K = W_V = W_O = I；
- MLP 把两个值原样复制到隐藏单元 1–2，经过 GELU 再原样复制回来。

关于 LayerNorm 的 eps：X 的第一行 [1.1, 0] 的方差是 0.3025，归一化得到
0.55 / √(0.3025 + eps)。课本上写的 1 对应 eps = 0；我们保留 PyTorch 的默认 eps = 1e-5，
结果是 0.99998…，四舍五入到 4 位小数仍然是 1.0000，其余各步也都在 4 位小数上与手算一致。

>>> t = run()
>>> round(t["loss"], 4), VOCAB[t["greedy_id"]]
(0.3618, '来')
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .config import preset
from .model import GPT, record_attention

VOCAB = ("春", "天", "来", "了")          # id 0 1 2 3
PROMPT = (0, 1)                           # 春天
TARGET = 2                                # 来
NORM_EPS = 1e-5                           # PyTorch 默认值；见模块说明

TOKEN_EMB = [[1.0, 0.0], [0.0, 1.0], [-1.0, 1.0], [1.0, -1.0]]   # 春 天 来 了
POS_EMB = [[0.1, 0.0], [0.0, 0.1], [0.0, 0.0]]                   # 位置 0 1 2


def build_model() -> GPT:
    """用 mini 设计的缩小版配置建出真正的 GPT，再手工写入权重。返回 eval 模式的模型。"""
    cfg = preset("mini", vocab_size=4, n_embd=2, n_head=1, n_layer=1, block_size=3,
                 dropout=0.0, attn_dropout=0.0, resid_dropout=0.0, norm_eps=NORM_EPS,
                 pos="learned", norm="layernorm", mlp="gelu", gelu_approx="none",
                 qkv="fused", bias=True, tie_weights=True)
    model = GPT(cfg)
    assert cfg.mlp_hidden == 8
    eye = torch.eye(2)
    with torch.no_grad():
        for p in model.parameters():                 # 先全部清零（LayerNorm 的 γ 之后再设为 1）
            p.zero_()
        model.tok_emb.weight.copy_(torch.tensor(TOKEN_EMB))        # 输出头共享同一个张量
        model.pos_emb.weight.copy_(torch.tensor(POS_EMB))
        for norm in (model.blocks[0].norm1, model.blocks[0].norm2, model.norm_f):
            norm.weight.fill_(1.0)                   # γ = 1，β = 0
        attn, mlp = model.blocks[0].attn, model.blocks[0].mlp
        attn.qkv.weight.copy_(torch.cat([eye, eye, eye]))          # [3C, C]：W_Q = W_K = W_V = I
        attn.proj.weight.copy_(eye)                                # W_O = I
        mlp.fc.weight[:2].copy_(eye)                 # 隐藏单元 1–2 = 输入的两个值，其余 6 个为 0
        mlp.proj.weight[:, :2].copy_(eye)            # 再把隐藏单元 1–2 复制回 2 维
    return model.eval()


def run(model: GPT | None = None) -> dict:
    """让"春天"走一遍真实模型，用前向钩子截下每个中间值。

    返回的字典（张量都是 batch 维去掉之后的结果，形状在注释里）：
    X [2,2]、LN1 [2,2]、Q/K/V [2,2]、scores [2,2]（已除以 √2）、masked_scores [2,2]、
    attn_weights [2,2]、attn_out [2,2]、resid1 [2,2]、LN2 [2,2]、hidden_pre/hidden_post [2,8]、
    mlp_out [2,2]、resid2 [2,2]、LNf [2,2]、logits_all [2,4]；以及最后一个位置（"天"之后）的
    logits [4]、probs [4]、greedy_id、top2_ids、top2_probs、next_ids、loss、grad（autograd 求得的
    ∂L/∂logits）与 grad_formula（p − onehot）。
    """
    model = model if model is not None else build_model()
    model.eval()
    blk = model.blocks[0]
    cap: dict[str, torch.Tensor] = {}

    def out(name):
        def hook(_module, _inputs, output):
            cap[name] = output.detach()[0]
        return hook

    def inp(name):
        def hook(_module, inputs, _output):
            cap[name] = inputs[0].detach()[0]
        return hook

    hooks = [
        (model.drop, out("X")), (blk.norm1, out("LN1")), (blk.attn.qkv, out("QKV")),
        (blk.attn, out("attn_out")), (blk.norm2, inp("resid1")), (blk.norm2, out("LN2")),
        (blk.mlp.fc, out("hidden_pre")), (blk.mlp.act, out("hidden_post")),
        (blk.mlp, out("mlp_out")), (model.norm_f, inp("resid2")), (model.norm_f, out("LNf")),
    ]
    handles = [m.register_forward_hook(h) for m, h in hooks]
    idx = torch.tensor([PROMPT])                                   # [1, 2]
    targets = torch.tensor([[-1, TARGET]])                         # 只在"天"之后的位置算损失
    try:
        with record_attention(model) as rec:
            logits, loss = model(idx, targets)                     # logits [1, 2, 4]
        logits.retain_grad()
        loss.backward()
        scores = rec[0]["scores"][0, 0]                            # [T, T]
        weights = rec[0]["weights"][0, 0]                          # [T, T]
    finally:
        for h in handles:
            h.remove()
        model.zero_grad(set_to_none=True)

    T = idx.shape[1]
    q, k, v = cap.pop("QKV").split(2, dim=-1)
    masked = scores.masked_fill(~blk.attn.mask[:T, :T], float("-inf"))
    last = logits.detach()[0, -1]                                  # [V]
    probs = F.softmax(last, dim=-1)
    top2 = torch.topk(probs, 2)
    greedy = int(last.argmax())
    onehot = F.one_hot(torch.tensor(TARGET), len(VOCAB)).float()
    return {
        **cap, "Q": q, "K": k, "V": v, "scores": scores, "masked_scores": masked,
        "attn_weights": weights, "logits_all": logits.detach()[0], "logits": last,
        "probs": probs, "greedy_id": greedy, "greedy_char": VOCAB[greedy],
        "top2_ids": top2.indices.tolist(), "top2_probs": top2.values / top2.values.sum(),
        "next_ids": [*PROMPT, greedy], "next_text": "".join(VOCAB[i] for i in (*PROMPT, greedy)),
        "loss": float(loss.detach()), "grad": logits.grad[0, -1].clone(),
        "grad_formula": probs - onehot,
    }


def fmt(x, nd: int = 4) -> str:
    """把张量 / 数字格式化成紧凑的字符串，−∞ 写作 −∞。"""
    if isinstance(x, torch.Tensor):
        x = x.detach()
        if x.dim() == 0:
            return fmt(float(x), nd)
        return "[" + ", ".join(fmt(v, nd) for v in x) + "]"
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(fmt(v, nd) for v in x) + "]"
    if isinstance(x, float):
        if math.isinf(x):
            return "−∞" if x < 0 else "∞"
        s = f"{x:.{nd}f}"
        if abs(x - round(x, 1)) < 0.5 * 10 ** -nd:            # 1.1000 → 1.1，1.0000 → 1
            s = s.rstrip("0").rstrip(".")
        return "0" if s in ("-0", "") else s.replace("-", "−")
    return str(x)


def step_table(trace: dict | None = None) -> list[tuple[str, str, str]]:
    """每一步一行 (步骤, 公式, 数值)；数值全部来自 :func:`run` 截下的真实中间值。"""
    t = trace if trace is not None else run()
    tian = 1                                                       # "天"所在的位置（第 2 行）
    top = " / ".join(f"{VOCAB[i]} {fmt(float(p))}" for i, p in zip(t["top2_ids"], t["top2_probs"]))
    return [
        ("1 嵌入相加", "X = E[春天] + P[0:2]", fmt(t["X"])),
        ("2 层归一化 1", "LN(X) = (X − 均值) / 标准差", fmt(t["LN1"])),
        ("3 Q、K、V", "Q = K = V = LN(X)·I", fmt(t["Q"])),
        ("4 缩放分数", "Q·Kᵀ / √2", fmt(t["scores"], 3)),
        ("5 因果掩码", "对角线以上填 −∞", fmt(t["masked_scores"], 3)),
        ("6 softmax", "按行（键维度）归一化", fmt(t["attn_weights"])),
        ("7 注意力输出（天）", "权重 · V，再乘 W_O = I", fmt(t["attn_out"][tian])),
        ("8 残差 1（天）", "X + 注意力输出", fmt(t["resid1"][tian])),
        ("9 层归一化 2（天）", "LN(残差 1)", fmt(t["LN2"][tian])),
        ("10 GELU（天）", "隐藏单元 1–2：x·Φ(x)", fmt(t["hidden_post"][tian][:2])),
        ("11 残差 2（天）", "残差 1 + MLP 输出", fmt(t["resid2"][tian])),
        ("12 最终归一化（天）", "LN(残差 2)", fmt(t["LNf"][tian])),
        ("13 logits", "h · Eᵀ（共享权重）", fmt(t["logits"])),
        ("14 概率", "softmax(logits)", fmt(t["probs"])),
        ("15 贪心解码", "argmax", f"id {t['greedy_id']} = {t['greedy_char']}"),
        ("16 top-k = 2", "取前两名再归一化", top),
        ("17 下一步输入", "春天 + 来", f"{t['next_text']} = ids {t['next_ids']}"),
        ("18 损失（目标 来）", "−ln p(来)", fmt(t["loss"])),
        ("19 梯度", "∂L/∂logits = p − onehot", fmt(t["grad"])),
    ]
