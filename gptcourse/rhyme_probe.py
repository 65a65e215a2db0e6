"""押韵的领先指标：模型在真诗的韵脚上，给"这首诗自己的韵部"留了多少概率。

自由采样的押韵率（2–7 %）是一个迟钝的指标：要采几百首、还要整首都押上才算一首。这里换成
教师强制（teacher forcing）下的一个连续量：把一首**真诗**逐字喂给模型，到第 k 个韵脚（第 2k 句的
末字）时，看模型的下一个字分布里，属于这首诗韵部（``verse.check_rhyme``）的字一共占多少概率。

- 第 1 个韵脚：前面至多只有首句的末字（首句入韵时）可以照着押，它的质量是"对照"；
- 第 2、3、4 个韵脚：前面已经有同韵的字，学会押韵的模型应当把大部分概率放在这个韵部上；
- 机会水平（``chance``）：训练集里双数句末字的字频分布放在同一个韵部上的质量——一个只知道
  "韵脚多用平声常用字"、却不看这首诗前面押了什么韵的模型，会给出的就是这个数。

只适用于一个字一个词元的分词器（字符分词器）。这个模块只读模型、不改模型。
"""
from __future__ import annotations

from collections import Counter, defaultdict

import torch

from .constraints import _pieces
from .errors import UserError
from .model import eval_mode
from .verse import PING, check_rhyme, group_names, line_ends, ping_groups, poem_form, rhyme_lines


def rhyme_feet(poem: str) -> tuple[str, list[int]] | None:
    """合乎诗体、押韵的诗 → (韵部, 双数句末字的下标)；别的诗 None。"""
    if poem_form(poem) is None:
        return None
    r = check_rhyme(poem)
    if not r.rhymes:
        return None
    return r.group, _feet(poem)


def _feet(poem: str) -> list[int]:
    """必须押韵的句（双数句）末字的下标。"""
    ends = line_ends(poem)
    return [ends[i] for i in rhyme_lines(len(ends))]


def chance_mass(train_text: str) -> dict[str, float]:
    """每个平声韵部在"训练集双数句末字"字频分布里的质量（合乎诗体的诗）。"""
    counts: Counter = Counter()
    for poem in train_text.split("\n"):
        if poem and poem_form(poem) is not None:
            counts.update(poem[i] for i in _feet(poem))
    total = sum(counts.values())
    if not total:
        raise UserError("训练文本里没有合乎诗体的诗，无法估计机会水平")
    mass: dict[str, float] = defaultdict(float)
    for ch, n in counts.items():
        for g in ping_groups(ch):
            mass[g] += n / total
    return {g: mass[g] for g in group_names(PING)}


@torch.no_grad()
def rhyme_group_mass(model, tok, poems: list[str], train_text: str,
                     batch_size: int = 64) -> dict[int, dict[str, float]]:
    """真诗第 k 个韵脚上（k = 1…4）：{k: {"mass": 模型放在本诗韵部上的平均概率,
    "chance": 同样位置的机会水平, "top1": 模型最可能的字属于本诗韵部的比例, "n": 位置数}}。

    只用合乎诗体、押韵、没有词表外的字的诗（``rhyme_feet``）；每首诗从结束符 "\\n" 开始喂
    （与训练、生成一致）。
    """
    pieces = _pieces(tok)
    masks = {g: torch.tensor([len(p) == 1 and g in ping_groups(p) for p in pieces])
             for g in group_names(PING)}                                          # 各 [V]
    chance = chance_mass(train_text)
    by_len: dict[int, list[tuple[str, str, list[int]]]] = defaultdict(list)
    for poem in poems:
        feet = rhyme_feet(poem)
        if feet is not None and not tok.unknown_chars(poem):           # 有词表外的字：跳过
            by_len[len(poem)].append((poem, *feet))
    if not by_len:
        raise UserError("poems 里没有合乎诗体且押韵的诗")
    device = next(model.parameters()).device
    sums: dict[int, Counter] = defaultdict(Counter)
    with eval_mode(model):
        for length, items in sorted(by_len.items()):
            for b in range(0, len(items), batch_size):
                chunk = items[b:b + batch_size]
                ids = [[tok.eos_id] + tok.encode(p) for p, _, _ in chunk]
                if any(len(x) != length + 1 for x in ids):
                    raise UserError("rhyme_group_mass 需要一个字一个词元的分词器（字符分词器）")
                logits, _ = model(torch.tensor(ids, device=device))              # [B, L+1, V]
                probs = torch.softmax(logits.float(), dim=-1).cpu()
                for row, (_, group, feet) in enumerate(chunk):
                    for k, i in enumerate(feet, start=1):      # 第 i 字由位置 i 预测
                        p = probs[row, i]                      # [V]
                        s = sums[k]
                        s["mass"] += float(p[masks[group]].sum())
                        s["chance"] += chance[group]
                        s["top1"] += bool(masks[group][int(p.argmax())])
                        s["n"] += 1
    return {k: {"mass": s["mass"] / s["n"], "chance": s["chance"] / s["n"],
                "top1": s["top1"] / s["n"], "n": int(s["n"])} for k, s in sorted(sums.items())}
