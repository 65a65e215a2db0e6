"""以题作诗的数据（模型读到题目，再写正文），以及训练用的数据（:func:`training_splits`）。

格式只有一个定义（:mod:`gptcourse.titles`）：一首带题目的诗写成 ``《题》正文``，和别的诗一样前面有
换行符、后面以换行符结束::

    \\n《春晓》春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。\\n

- **只在正文上算损失**：题目（连同书名号）是给模型的条件，不是要它写的东西。训练目标里题目那几个
  位置记为 −1（``F.cross_entropy(ignore_index=-1)`` 跳过它们），见 :func:`encode`。
- **没见过的题目**：验证集、测试集里只留题目在训练集里从没出现过的诗，否则“看题写诗”考的是
  背诵。比较之前先把题目规范化（:func:`normalise`）：异体字换成通行字，去掉“其二”“二首”“之一”
  以及末尾的序号，于是《秋兴八首 其一》和《秋兴八首 其三》算同一个题目。
- 训练用的数据（:func:`training_splits`，带不带题目都从这里来）：语料 → 训练与验证的 id 序列，
  以题作诗时还有目标序列，按诗对齐时还有窗口起点（:class:`TrainingData`）。
- 生成时题目放在提示前面（:func:`gptcourse.generate.generate` 的 ``title=``），返回的文字不含题目；
  诗体、押韵等约束只看正文（:func:`gptcourse.titles.strip`）。
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from .data import VARIANTS, Corpus, load_meta, poem_starts
from .errors import UserError
from .titles import CLOSE, MAX_TITLE, OPEN, check_title, format_title

_VARIANTS = str.maketrans(VARIANTS)
_NUM = "一二三四五六七八九十百两"
_SUFFIX = re.compile(rf"(其[{_NUM}]+|[{_NUM}]+首|之[{_NUM}]+|第[{_NUM}]+首?|[{_NUM}]+)$")


def titled(title: str, body: str) -> str:
    """一首训练诗的文字：``《题》正文``（格式在 :func:`gptcourse.titles.format_title`）。"""
    return format_title(title, body)


def normalise(title: str) -> str:
    """比较题目用的规范形式：去空白、异体字换成通行字、去掉末尾的“其二”“二首”“之一”和序号。

    >>> normalise("秋兴八首 其一"), normalise("帝京篇十首 三"), normalise("闻鴈")
    ('秋兴', '帝京篇', '闻雁')
    """
    t = "".join(title.split()).translate(_VARIANTS)
    while True:
        shorter = _SUFFIX.sub("", t)
        if shorter == t or not shorter:
            return t
        t = shorter


def rows(split: str, meta: list[dict] | None = None) -> list[tuple[str, str]]:
    """某个划分里带题目的诗 [(题目, 正文)]。val / test 只留题目没在训练集里出现过的诗。"""
    if split not in ("train", "val", "test"):
        raise UserError(f"split 只能是 train / val / test，收到 {split!r}")
    meta = load_meta() if meta is None else meta
    ok = [(r["title"].strip(), r["body"]) for r in meta
          if r["split"] == split and r["title"].strip() and len(r["title"].strip()) <= MAX_TITLE
          and not any(c in r["title"] for c in OPEN + CLOSE)]
    if split == "train":
        return ok
    seen = {normalise(r["title"]) for r in meta if r["split"] == "train"}
    return [(t, b) for t, b in ok if normalise(t) not in seen]


def encode(pairs: list[tuple[str, str]], tok, errors: str = "strict",
           untitled_every: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """[(题目, 正文)] → (ids [N], targets [N])。

    ids 是 ``\\n《题》正文\\n《题》正文\\n…`` 的词元；targets 与 ids 相同，只是题目（含书名号）那些
    位置换成 −1：作为 ``gc.data.get_batch(..., targets=)`` 的目标，损失只算在正文和诗末的换行上。
    ``errors="unk"``：词表外的字记为 <unk>（验证集、测试集里可能有训练集没见过的字）。
    ``untitled_every=k``：每 k 首里有一首不带题目（照常在全部位置算损失），让微调后的模型不给
    题目时也照样会写——只学带题目的诗，它会以为每首诗都以“《”开头。
    """
    eos, ids, targets = tok.eos_id, [tok.eos_id], [-1]
    for i, (title, body) in enumerate(pairs):
        if untitled_every and i % untitled_every == 0:
            tail = tok.encode(body, errors=errors) + [eos]
            ids += tail
            targets += tail
            continue
        head = tok.encode(OPEN + check_title(title) + CLOSE, errors=errors)
        tail = tok.encode(body, errors=errors) + [eos]
        ids += head + tail
        targets += [-1] * len(head) + tail
    return torch.tensor(ids, dtype=torch.long), torch.tensor(targets, dtype=torch.long)


# ---------------------------------------------------------------- 训练用的数据
WINDOWS = ("poem", "random")      # 训练窗口的起点：每首诗前的换行符（默认），或任意位置
UNTITLED_EVERY = 2                # 以题作诗时每几首里有一首不带题目（0 = 全带题目）


@dataclass(frozen=True)
class TrainingData:
    """:func:`gptcourse.train.train` 要的数据：``ids`` {划分: id 序列}；``targets`` 以题作诗时的
    目标序列（题目的位置是 −1），否则 None；``starts`` 按诗对齐时每个划分的窗口起点，否则 None
    （任意位置）。"""
    ids: dict[str, torch.Tensor]
    targets: dict[str, torch.Tensor] | None = None
    starts: dict[str, torch.Tensor] | None = None


def check_titled(corpus: str, titled: bool, untitled_every: int = UNTITLED_EVERY) -> None:
    """以题作诗只用于 tang_jinti（题目来自 data/tang_jinti_meta.tsv），untitled_every ≥ 0。"""
    if titled and corpus != "tang_jinti":
        raise UserError("--titled 只用于 tang_jinti（题目来自 data/tang_jinti_meta.tsv）")
    if titled and untitled_every < 0:
        raise UserError(f"--untitled-every 必须 ≥ 0，收到 {untitled_every}")


def training_splits(corpus: Corpus, tok, block_size: int, windows: str = WINDOWS[0],
                    titled: bool = False, untitled_every: int = UNTITLED_EVERY) -> TrainingData:
    """语料 → 训练与验证的数据（命令行 ``train`` 用的就是这一处）。

    训练集严格编码（词表就是从它来的）；验证集里词表外的字记为 <unk>。``titled=True``：以题作诗，
    训练集是 ``《题》正文``（每 ``untitled_every`` 首有一首不带题目，见 :func:`encode`），
    验证集只用训练集里没有的题目。``windows="poem"``：窗口只从每首诗前的换行符开始（与生成时
    一致，见 :func:`gptcourse.data.poem_starts`）；``"random"``：任意位置。"""
    if windows not in WINDOWS:
        raise UserError(f"windows 只能是 {' 或 '.join(WINDOWS)}，收到 {windows!r}")
    check_titled(corpus.name, titled, untitled_every)
    targets = None
    if titled:                                  # 《题》正文，题目那几个位置不算损失
        train_ids, train_y = encode(rows("train"), tok, untitled_every=untitled_every)
        val_ids, val_y = encode(rows("val"), tok, errors="unk")
        targets = {"train": train_y, "val": val_y}
    else:
        train_ids = torch.tensor(tok.encode(corpus.train), dtype=torch.long)
        val_ids = torch.tensor(tok.encode(corpus.val, errors="unk"), dtype=torch.long)
    ids = {"train": train_ids, "val": val_ids}
    starts = None if windows == "random" else \
        {name: poem_starts(v, tok.eos_id, block_size) for name, v in ids.items()}
    return TrainingData(ids, targets, starts)
