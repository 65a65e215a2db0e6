"""训练好的注意力头在看什么：在验证集上（笔记本完整模式用整个验证集）量每个头的“偏移分布”、押韵位置上的注意力，
以及去掉一个头之后各诗体的损失（笔记本 02 第 10 节用；这是分析代码，不是模型的一部分）。

诗的格式（笔记本 01）：每句 n 个字 + 1 个标点，一行一首；五言一句 6 个词元，七言 8 个。
"""
from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from ..errors import UserError
from ..verse import LINE_ENDS, line_spans

PUNCT = frozenset(LINE_ENDS)             # 句末标点（与 verse 的断句相同）


def line_tokens(poem: str) -> int:
    """一句的词元数（字 + 标点）：五言 6，七言 8。"""
    return line_spans(poem)[0][1] + 1


def _by_len(poems: Sequence[str]) -> dict[int, list[str]]:
    groups: dict[int, list[str]] = defaultdict(list)
    for p in poems:
        groups[len(p)].append(p)
    return groups


def _maps(model, ids: torch.Tensor) -> torch.Tensor:
    """[L, N, H, T, T] 的注意力权重（不计算输出头）。"""
    with torch.no_grad():
        return torch.stack(model.attention_maps(ids))


def offset_profiles(model, encode: Callable[[str], list[int]], poems: Sequence[str],
                    max_off: int = 16, chunk: int = 64) -> dict:
    """每个头给“往前第 o 个词元”的平均权重，以及落在标点上的权重占比。

    返回 {"profile": [L·H, max_off+1], "punct": [L·H], "punct_uniform": 均匀注意时落在标点上的占比,
    "names": ["第 l 层 · 头 h", …]}。"""
    if not poems:
        raise UserError("poems 为空：没有可统计的诗")
    cfg = model.config
    sums, cnt = torch.zeros(cfg.n_layer, cfg.n_head, max_off + 1), torch.zeros(max_off + 1)
    p_sum, p_base, rows = torch.zeros(cfg.n_layer, cfg.n_head), 0.0, 0
    for T, group in _by_len(poems).items():
        ids = torch.tensor([encode(p) for p in group])
        is_p = torch.tensor([[c in PUNCT for c in p] for p in group]).float()     # [N, T]
        keep = torch.tril(torch.ones(T, T))
        for part, pc in zip(ids.split(chunk), is_p.split(chunk)):
            a = _maps(model, part)                                              # [L, N, H, T, T]
            for o in range(min(max_off, T - 1) + 1):
                d = a.diagonal(offset=-o, dim1=-2, dim2=-1)                     # [L, N, H, T−o]
                sums[..., o] += d.sum((1, 3))
                cnt[o] += d.shape[1] * d.shape[3]
            p_sum += (a * pc[None, :, None, None, :]).sum((1, 3, 4))
            p_base += ((keep * pc[:, None, :]).sum(-1) / keep.sum(-1)).sum().item()
            rows += part.shape[0] * T
    names = [f"第 {l + 1} 层 · 头 {h + 1}" for l in range(cfg.n_layer) for h in range(cfg.n_head)]
    return {"profile": (sums / cnt.clamp(min=1)).flatten(0, 1), "punct": (p_sum / rows).flatten(),
            "punct_uniform": p_base / rows, "names": names}


def stands_out(profile: torch.Tensor, o: int, names: Sequence[str], factor: float = 3.0):
    """偏移 o 上权重超过所有头平均值 factor 倍的头：[(名字, 权重), …]。"""
    avg = profile[:, o].mean().item()
    return [(names[i], profile[i, o].item()) for i in range(len(names))
            if profile[i, o].item() > factor * avg]


def rhyme_attention(model, encode: Callable[[str], list[int]], poems: Sequence[str]) -> dict:
    """绝句（4 句）里，预测第 4 句韵脚的位置（韵脚前一个词元）给第 2 句韵脚的权重，每个头一个数。

    第 2、4 句的末字押韵：五言里两者相距 12 个词元，查询在韵脚前一位，所以偏移是 11；七言是 15。
    返回 {"weight": [L·H], "offset": 偏移, "uniform": 均匀注意时的权重 1/(t+1), "n": 诗数}。"""
    quatrains = [p for p in poems if len(p) == 4 * line_tokens(p)]
    if not quatrains:
        raise UserError("没有四句的诗（绝句）")
    n = line_tokens(quatrains[0])
    if any(line_tokens(p) != n for p in quatrains):
        raise UserError("请只传入同一种诗体（五言或七言）的诗")
    foot2, foot4 = 2 * n - 2, 4 * n - 2                 # 第 2、4 句末字的位置（标点之前）
    t = foot4 - 1                                       # 预测第 4 句韵脚的查询位置
    ids = torch.tensor([encode(p) for p in quatrains])
    a = torch.cat([_maps(model, part)[:, :, :, t, foot2] for part in ids.split(64)], dim=1)
    return {"weight": a.mean(1).flatten(), "offset": t - foot2, "uniform": 1 / (t + 1),
            "n": len(quatrains)}


def ablate_head(model, layer: int, head: int):
    """复制一份模型，把第 layer 层第 head 个头的输出清零（把输出投影里它那 D 列设为 0）。"""
    m = copy.deepcopy(model).eval()
    D = m.config.head_dim
    with torch.no_grad():
        m.blocks[layer].attn.proj.weight[:, head * D:(head + 1) * D] = 0
    return m


def poem_loss(model, encode: Callable[[str], list[int]], poems: Sequence[str]) -> float:
    """每首诗内部的下一个词元交叉熵（平均到每个被预测的词元）。"""
    total, count = 0.0, 0
    for group in _by_len(poems).values():
        ids = torch.tensor([encode(p) for p in group])
        for part in ids.split(64):
            with torch.no_grad():
                logits = model(part[:, :-1])
            logits = logits[0] if isinstance(logits, tuple) else logits
            total += F.cross_entropy(logits.flatten(0, 1), part[:, 1:].flatten(),
                                     reduction="sum").item()
            count += part[:, 1:].numel()
    return total / count
