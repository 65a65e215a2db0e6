"""训练时的辅助目标：在最后一层的隐藏状态上接一个小线性头，让模型多学一个它自己归纳不出来的信号。

语言模型的损失只说“下一个字是什么”。押韵要求双数句的末字与 10–16 个字之前的韵脚同属一个平声韵部，
30 个韵部要从几千个字里自己归纳——三百万个词元里学不出来（``data/checkpoints/README.md``）。
辅助目标把这个信号直接告诉模型：

- **韵部（rhyme）**：在韵脚的**前一个**位置（下一个字就是韵脚），预测韵脚的平声韵部（30 类）；
- **平仄（tones）**：在格律固定平仄的位置（每句第 2、4、6 字）的前一个位置，预测下一个字是平还是仄；
- **不重韵（norepeat）**：没有头，直接作用在语言模型的输出上：在第 2 个及以后的韵脚的前一个位置，
  压低这首诗**已经用过的韵脚字**的概率（“反似然”损失 −log(1 − Σ p(用过的字))，Welleck 等 2019）。
  韵部头让模型知道该押哪个韵部，却也让它最省事地把上一个韵脚字再抄一遍（重韵）；这一项专门管这个。
- **可用的韵脚（rhymeset）**：也没有头：在第 2 个及以后的韵脚的前一个位置，抬高语言模型
  放在“本诗韵部里、还没做过韵脚的字”上的总概率（−log Σ p(可用的字)）。“不重韵”只把用过的字
  压下去，压下去的概率可能流到韵外的字上；这一项告诉它该流到哪里。
- **首句加权（firstline）**：也没有头：带《题》的诗，正文第一句的字再算一遍语言模型的交叉熵。
  第一句离题目最近、最该由题目决定；加权让“读题”在损失里更重。

标签与 id 序列等长，记在“那个字”的位置上（不是它前一个位置）；取批次时像目标 y 一样错一位取出
（:func:`gptcourse.train.train` 用同一个随机数生成器取两次），于是第 t 个位置的头预测第 t + 1 个字的
标签。−1 = 这个位置不算。

这些头只在训练时存在：它们的参数不在模型里，检查点的结构和词表不变，笔记本和网页照旧加载。
总损失 = 语言模型损失 + Σ weight × 辅助损失；梯度裁剪包括头的参数。
"""
from __future__ import annotations

import math
import numbers

import torch
import torch.nn.functional as F
from torch import nn

from . import verse
from .errors import UserError
from .model import GPT, lm_loss
from .titles import CLOSE
from .titles import strip as strip_title

PING_GROUPS = verse.group_names(verse.PING)        # 30 个平声韵部（表中顺序）
TONE_CLASSES = (verse.PING, verse.ZE)
MAX_WEIGHT = 10_000.0             # 辅助目标的权重上限：再大，总损失在 fp32/bf16 里溢出成 inf/NaN


def check_weight(name: str, weight) -> float:
    """辅助目标的权重：(0, MAX_WEIGHT] 之内的有限实数 → float；否则 UserError。

    上限挡住 1e300 这样的值：它们是有限数，却让“语言模型损失 + 权重 × 辅助损失”第一步就变成
    inf/NaN，训练报“发散”、劝人调低学习率——错的不是学习率。"""
    if isinstance(weight, bool) or not isinstance(weight, numbers.Real) or \
            not (math.isfinite(weight) and 0 < weight <= MAX_WEIGHT):
        raise UserError(f"辅助目标 {name} 的权重必须是 (0, {MAX_WEIGHT:g}] 之内的数，"
                        f"收到 {weight!r}")
    return float(weight)


def masked_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """logits [B, T, K]，targets [B, T]（−1 = 不算）→ 要算的位置上的平均交叉熵。

    一个要算的位置都没有时是 0 而不是 NaN：一个窗口里没有韵脚很常见，
    ``F.cross_entropy`` 的默认平均在那时是 0 / 0。"""
    total = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=-1,
                            reduction="sum")
    return total / (targets >= 0).sum().clamp(min=1)


class Objective(nn.Module):
    """一个辅助目标：名字、权重、每个划分的标签序列，和一个线性头 C → 类别数。"""

    def __init__(self, name: str, n_embd: int, classes: tuple[str, ...],
                 labels: dict[str, torch.Tensor], weight: float = 1.0):
        super().__init__()
        self.name, self.classes, self.weight = name, classes, check_weight(name, weight)
        self.labels = labels                                  # {划分名: [N]}，−1 = 不算
        self.head = nn.Linear(n_embd, len(classes))

    def loss(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """hidden [B, T, C]，targets [B, T] → 标量（见 :func:`masked_cross_entropy`）。"""
        return masked_cross_entropy(self.head(hidden), targets)

    def extra_repr(self) -> str:
        return f"name={self.name!r}, weight={self.weight}"


class OnLogits(nn.Module):
    """没有头、直接读语言模型 logits 的辅助目标：名字、权重、每个划分的标签（子类写 ``loss``）。"""

    uses_logits = True
    NAME = ""

    def __init__(self, labels: dict[str, torch.Tensor], weight: float = 1.0):
        super().__init__()
        self.name, self.classes, self.labels = self.NAME, (), labels
        self.weight = check_weight(self.NAME, weight)

    def extra_repr(self) -> str:
        return f"name={self.name!r}, weight={self.weight}"


class RepeatPenalty(OnLogits):
    """不重韵：韵脚位置上这首诗已经用过的韵脚字的“反似然”损失。没有参数，读语言模型的 logits。

    标签 [N, MAX_FEET]：第 2 个及以后的韵脚字的位置上记前面各韵脚字的 id（去重、不含这个字本身），
    其余 −1。损失 = 有标签的位置上 −log(1 − Σ p(用过的字)) 的平均（没有时为 0）。"""

    NAME = "norepeat"

    def loss(self, logits: torch.Tensor, used: torch.Tensor) -> torch.Tensor:
        """logits [B, T, V]，used [B, T, K]（−1 = 空）→ 标量。"""
        logp = logits.float().log_softmax(-1)                                 # [B, T, V]
        valid = used >= 0                                                     # [B, T, K]
        p_used = (logp.gather(-1, used.clamp(min=0)).exp() * valid).sum(-1)  # [B, T]
        rows = valid.any(-1)                                                  # [B, T]
        ul = -torch.log1p(-p_used.clamp(max=1 - 1e-6))
        return (ul * rows).sum() / rows.sum().clamp(min=1)


class RhymeSet(OnLogits):
    """押得上、又没用过：第 2 个及以后的韵脚位置上，语言模型放在“这首诗的韵部里、还没做过韵脚的字”
    上的总概率 q，损失 −log q。没有参数，读语言模型的 logits。

    真字总在这个集合里（真诗几乎不重韵），所以这一项不和语言模型的损失冲突；它要的是概率铺在整个
    可用的集合上，而不是堆在上一个韵脚字上（模型最省事的“抄一遍”）。

    标签 [N, 1 + MAX_FEET]：第 0 列是韵部编号（−1 = 这个位置不算），其余列是用过的韵脚字 id
    （−1 = 空）。``members`` [韵部数, V]：词表里每个字属于哪些平声韵部（:func:`group_members`）。"""

    NAME = "rhymeset"

    def __init__(self, labels: dict[str, torch.Tensor], weight: float = 1.0,
                 members: torch.Tensor | None = None):
        super().__init__(labels, weight)
        self.register_buffer("members", members, persistent=False)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """logits [B, T, V]，labels [B, T, 1 + K] → 标量（形状不随数据变：编译时不断图）。"""
        group, used = labels[..., 0], labels[..., 1:]                          # [B, T], [B, T, K]
        rows = group >= 0                                                      # [B, T]
        logp = logits.float().log_softmax(-1)                                  # [B, T, V]
        allowed = self.members[group.clamp(min=0)]                             # [B, T, V]
        slot = used.clamp(min=0)
        allowed = allowed.scatter(-1, slot, allowed.gather(-1, slot) & (used < 0))   # 去掉用过的
        q = logp.masked_fill(~allowed, -1e4).logsumexp(-1)                     # [B, T]
        return (-q.clamp(min=-30.0) * rows).sum() / rows.sum().clamp(min=1)

class FirstLine(OnLogits):
    """首句加权：带《题》的诗正文第一句上，语言模型的交叉熵再算一遍（没有参数，读 logits）。

    标签 [N]：这些位置记这个字自己的 id（像目标 y 一样错一位取出，于是预测的正是它），其余 −1。
    总损失里它占 weight × 首句平均交叉熵：首句的每个字在损失里的分量大约是别的字的
    1 + weight × (全部要算的位置数 / 首句的位置数) 倍。"""

    NAME = "firstline"

    def loss(self, logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """logits [B, T, V]，ids [B, T]（−1 = 不算）→ 标量。"""
        return masked_cross_entropy(logits, ids)


class WithObjectives(nn.Module):
    """训练时做前向的模块：(x, y, *辅助标签) → (各项损失 [1 + n]（不求梯度）, 总损失)。"""

    def __init__(self, model: GPT, objectives: list[Objective]):
        super().__init__()
        self.model, self.objectives = model, nn.ModuleList(objectives)

    def forward(self, x: torch.Tensor, y: torch.Tensor, *aux: torch.Tensor):
        h = self.model.hidden(x)                                              # [B, T, C]
        logits = self.model.lm_head(h)                                        # [B, T, V]
        parts = [lm_loss(logits, y)]
        parts += [o.loss(logits if getattr(o, "uses_logits", False) else h, t)
                  for o, t in zip(self.objectives, aux)]
        total = parts[0] + sum(o.weight * p for o, p in zip(self.objectives, parts[1:]))
        return torch.stack(parts).detach(), total


# ---------------------------------------------------------------- 标签
def _poems(ids: torch.Tensor, tok):
    """把 id 序列按换行符切开：逐首给出 (正文在 ids 里的起点, 正文文字)；带《题》的诗去掉题目。

    一个字一个词元才能把诗里的下标对回 ids（词表外的字 <unk> 所在的诗跳过）。"""
    pieces = [tok.decode([i]) for i in range(tok.vocab_size)]
    chars = [pieces[i] for i in ids.tolist()]
    start = 0
    for end in [i for i, c in enumerate(chars) if i and c == "\n"] + [len(chars)]:
        seg = chars[start:end]
        if seg and seg[0] == "\n":
            seg, start = seg[1:], start + 1
        text = "".join(seg)
        if len(text) == len(seg):                          # 每个词元正好一个字
            body = strip_title(text)
            yield start + len(text) - len(body), body
        start = end


def rhyme_labels(ids: torch.Tensor, tok) -> torch.Tensor:
    """与 ids 等长：合乎诗体、押平声韵的诗，入韵的字（双数句末字，首句入韵时加上首句末字）的位置
    记它的平声韵部编号，其余 −1。"""
    group = {g: i for i, g in enumerate(PING_GROUPS)}
    out = torch.full((len(ids),), -1, dtype=torch.long)
    for offset, poem in _poems(ids, tok):
        a = verse.check_rhyme(poem)
        if verse.is_valid_form(poem) and a.rhymes and a.group in group:
            for i in a.positions:
                out[offset + i] = group[a.group]
    return out


def tone_labels(ids: torch.Tensor, tok) -> torch.Tensor:
    """与 ids 等长：合乎诗体的诗，每句讲平仄的位置（第 2、4、6 字）记 0 = 平、1 = 仄；
    可平可仄（“中”）、表外的字和其余位置 −1。"""
    out = torch.full((len(ids),), -1, dtype=torch.long)
    for offset, poem in _poems(ids, tok):
        if not verse.is_valid_form(poem):
            continue
        for a, b, _ in verse.line_spans(poem):
            for p in verse.tone_positions(b - a):
                t = verse.tone(poem[a + p])
                if t in TONE_CLASSES:
                    out[offset + a + p] = TONE_CLASSES.index(t)
    return out


MAX_FEET = 4                     # 一首律诗最多 5 个韵脚：第 5 个之前用过 4 个


def used_rhyme_labels(ids: torch.Tensor, tok) -> torch.Tensor:
    """[len(ids), MAX_FEET]：合乎诗体、押平声韵的诗，第 2 个及以后的韵脚字的位置上记前面各韵脚字的
    id（去重；与这个字本身相同的不记——真诗偶尔重韵，不能罚真字），其余 −1。"""
    out = torch.full((len(ids), MAX_FEET), -1, dtype=torch.long)
    for offset, poem in _poems(ids, tok):
        a = verse.check_rhyme(poem)
        if not (verse.is_valid_form(poem) and a.rhymes):
            continue
        pos = sorted(a.positions)
        for j, p in enumerate(pos[1:], 1):
            prev = [int(ids[offset + q]) for q in pos[:j]]
            here = int(ids[offset + p])
            used = [i for i in dict.fromkeys(prev) if i != here][:MAX_FEET]
            if used:
                out[offset + p, :len(used)] = torch.tensor(used)
    return out


def rhyme_set_labels(ids: torch.Tensor, tok) -> torch.Tensor:
    """[len(ids), 1 + MAX_FEET]：合乎诗体、押平声韵、没有重韵的诗，第 2 个及以后的韵脚字的位置上
    记韵部编号与前面各韵脚字的 id；其余 −1。"""
    group = {g: i for i, g in enumerate(PING_GROUPS)}
    out = torch.full((len(ids), 1 + MAX_FEET), -1, dtype=torch.long)
    for offset, poem in _poems(ids, tok):
        a = verse.check_rhyme(poem)
        if not (verse.is_valid_form(poem) and a.rhymes and a.group in group) or a.repeated:
            continue
        pos = sorted(a.positions)
        for j, p in enumerate(pos[1:], 1):
            used = list(dict.fromkeys(int(ids[offset + q]) for q in pos[:j]))[:MAX_FEET]
            out[offset + p, 0] = group[a.group]
            out[offset + p, 1:1 + len(used)] = torch.tensor(used)
    return out


def group_members(tok) -> torch.Tensor:
    """[平声韵部数, V] bool：词表里每个字（一个词元一个字）属于哪些平声韵部。"""
    out = torch.zeros(len(PING_GROUPS), tok.vocab_size, dtype=torch.bool)
    index = {g: i for i, g in enumerate(PING_GROUPS)}
    for i in range(tok.vocab_size):
        piece = tok.decode([i])
        if len(piece) == 1:
            for g in verse.ping_groups(piece):
                out[index[g], i] = True
    return out


def first_line_labels(ids: torch.Tensor, tok) -> torch.Tensor:
    """与 ids 等长：带《题》的诗，正文第一句（到第一个句末标点为止，不含标点）的位置记这个字的 id，
    其余 −1。不带题目的诗不算：它们的第一句没有可读的题目。"""
    close = tok.encode(CLOSE, errors="unk")
    out = torch.full((len(ids),), -1, dtype=torch.long)
    for offset, poem in _poems(ids, tok):
        spans = verse.line_spans(poem)
        if offset == 0 or ids[offset - 1:offset].tolist() != close or not spans:
            continue
        a, b, _ = spans[0]
        out[offset + a:offset + b] = ids[offset + a:offset + b]
    return out


# 名字 → (标签函数, 类别（有头的目标）或没有头、直接读 logits 的类, 语料里要有什么样的诗)
BUILDERS = {"rhyme": (rhyme_labels, PING_GROUPS, "合乎诗体、押平声韵的诗"),
            "tones": (tone_labels, TONE_CLASSES, "合乎诗体的诗"),
            "norepeat": (used_rhyme_labels, RepeatPenalty, "合乎诗体、押平声韵的诗"),
            "rhymeset": (rhyme_set_labels, RhymeSet, "合乎诗体、押平声韵、不重韵的诗"),
            "firstline": (first_line_labels, FirstLine, "带《题》的诗（--titled）")}


def parse(spec: str | None) -> dict[str, float | None]:
    """命令行的 ``--aux rhyme=0.3,tones`` → {"rhyme": 0.3, "tones": None}
    （None = 用 --aux-weight）；空 → {}。"""
    if spec is not None and not isinstance(spec, str):
        raise UserError(f"--aux 应是字符串（例如 'rhyme=0.3,tones'），收到 {type(spec).__name__}")
    out: dict[str, float | None] = {}
    for item in (s.strip() for s in (spec or "").split(",")):
        if not item:
            continue
        name, _, w = (part.strip() for part in item.partition("="))
        try:
            weight = float(w) if w else None
        except ValueError:
            weight = -1.0
        if name not in BUILDERS or name in out or (weight is not None and not
                                                   (math.isfinite(weight)
                                                    and 0 < weight <= MAX_WEIGHT)):
            raise UserError(f"--aux 只能是 {'、'.join(BUILDERS)} 中的若干个（逗号分开、不重复，"
                            f"可写成 名字=权重，权重 > 0 且 ≤ {MAX_WEIGHT:g}），收到 {spec!r}")
        out[name] = weight
    return out


def build(names, splits: dict[str, torch.Tensor], tok, n_embd: int,
          weight: float = 1.0) -> list[Objective | RepeatPenalty]:
    """按名字建辅助目标：每个划分（{名字: ids}）各算一份标签。``names`` 是名字的列表，或
    :func:`parse` 给出的 {名字: 权重或 None}（None 用 ``weight``）。训练集（``"train"``，没有时
    第一个划分）里一个标签也没有时 → UserError（例如散文语料、BPE 分词器：辅助损失会一直是 0）。"""
    weights = names if isinstance(names, dict) else dict.fromkeys(names)
    objectives = []
    for name, w in weights.items():
        if name not in BUILDERS:
            raise UserError(f"没有叫 {name!r} 的辅助目标；可用：{'、'.join(BUILDERS)}")
        fn, classes, needs = BUILDERS[name]
        w = check_weight(name, weight if w is None else w)          # 先查权重，再算标签
        labels = {split: fn(ids, tok) for split, ids in splits.items()}
        first = "train" if "train" in labels else next(iter(labels), None)
        if first is not None and not bool((labels[first] >= 0).any()):
            raise UserError(
                f"辅助目标 {name} 在 {first} 里一个标签也没有：需要{needs}，"
                f"而且分词器一个词元一个字（{type(tok).__name__}）。"
                "这样的辅助损失一直是 0，不起作用；换一个语料，或去掉它")
        if classes is RhymeSet:
            objectives.append(RhymeSet(labels, w, group_members(tok)))
        else:
            objectives.append(classes(labels, w) if isinstance(classes, type)
                              else Objective(name, n_embd, classes, labels, w))
    return objectives
