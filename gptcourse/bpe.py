"""字节级 BPE（Byte Pair Encoding），从零实现，思路同 minbpe。

任何文本先编码成 UTF-8 字节（0–255，一个汉字 3 个字节），初始词表就是这 256 个字节，
所以**永远不会有未知字符**。训练时反复找出最常见的相邻 id 对，把它合并成一个新 id
（256, 257, ……），直到词表达到 ``vocab_size``。

两个纯函数是全部的核心：

- :func:`get_stats` 数相邻 id 对出现的次数；
- :func:`merge` 把序列里的某个 id 对替换成新 id。

**预切分（chunk）。** 训练与编码前先把文本切成小块，合并永远不跨块：换行单独成块（诗与诗之间
绝不合并），其余文本在标点之后断开，于是一块大致是一句诗加它的标点，例如 “床前明月光，”。
这样做有两个好处：(1) 学到的词元不会横跨两首诗或两句诗；(2) 相同的块只需数一次——训练时
用 “块 → 出现次数” 的字典，按次数加权。

**增量训练。** 朴素做法每合并一次就把全部语料的 id 对重新数一遍。这里维护三样东西：
全局计数 ``stats``（id 对 → 加权次数）、倒排索引 ``where``（id 对 → 含有它的块编号）和一个
按次数排序的堆。每次合并只改动含有这个 id 对的那些块，并只更新这些块里 id 对计数的增减。
相同次数时选数值最小的 id 对，所以合并顺序完全确定、可复现。

**编码**（:func:`encode_bytes`）按学到的先后应用规则：总是先合并 rank（新 id）最小的 id 对，
同一规则从左到右。朴素写法每应用一条规则就把整块扫一遍（块长 × 规则数）；这里用一个堆按
(新 id, 位置) 取下一个要合并的 id 对，再用双向链表把相邻的词元连起来，一次合并只改动它左右
两个 id 对，所以没有标点的超长文本也很快，结果与朴素写法完全相同。

**与字符分词器同一个接口**（:class:`gptcourse.tokenizer.Tokenizer`）：结束符就是换行的字节 10；
没有 <unk>（``unk_id is None``）；唯一编码不了的是孤立的代理码位（如 "\\ud800"，UTF-8 里不存在），
``errors="strict"`` 时报 :class:`~gptcourse.tokenizer.UnknownCharacterError`，``errors="unk"`` 时
按 U+FFFD 的字节编码。
"""
from __future__ import annotations

import heapq
import json
import re
from collections import Counter
from pathlib import Path

from . import files
from .errors import UserError
from .tokenizer import (
    EOS,
    UNK,
    UnknownCharacterError,
    check_dict,
    check_ids,
    check_text,
    field,
    read_json,
)

PUNCT = "，。！？；：、,.!?;:"
_P = re.escape(PUNCT)
# 一块 = 换行本身 | 若干非标点字符 + 一个标点 | 末尾不带标点的一串字符。三种情形覆盖全部文本。
CHUNK_RE = re.compile(rf"\n|[^\n{_P}]*[{_P}]|[^\n{_P}]+")
SURROGATE_RE = re.compile("[\ud800-\udfff]")      # 孤立的代理码位：UTF-8 编码不了


def split_chunks(text: str) -> list[str]:
    """把文本切成互不跨越的小块；``"".join(split_chunks(t)) == t``。

    >>> split_chunks("床前明月光，疑是地上霜。\\n春眠")
    ['床前明月光，', '疑是地上霜。', '\\n', '春眠']
    """
    return CHUNK_RE.findall(text)


def get_stats(ids: list[int], counts: dict | None = None, weight: int = 1) -> dict:
    """数相邻 id 对出现的次数（每次计 ``weight``），累加到 ``counts`` 并返回。

    >>> get_stats([1, 2, 3, 1, 2])
    {(1, 2): 2, (2, 3): 1, (3, 1): 1}
    >>> get_stats([1, 2], {(1, 2): 5}, weight=10)
    {(1, 2): 15}
    """
    counts = {} if counts is None else counts
    for pair in zip(ids, ids[1:]):
        counts[pair] = counts.get(pair, 0) + weight
    return counts


def merge(ids: list[int], pair: tuple[int, int], idx: int) -> list[int]:
    """从左到右把 ``ids`` 里所有（不重叠的）``pair`` 替换成新 id ``idx``。

    >>> merge([1, 2, 3, 1, 2], (1, 2), 4)
    [4, 3, 4]
    >>> merge([97, 97, 97], (97, 97), 256)   # 重叠时从左边开始合并
    [256, 97]
    """
    out, i, n = [], 0, len(ids)
    while i < n:
        if i < n - 1 and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(idx)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def encode_bytes(ids: list[int], merges: dict[tuple[int, int], int]) -> list[int]:
    """按 ``merges`` 的先后（新 id 从小到大）合并 ``ids``，同一规则从左到右，不重叠。

    结果与"反复找出 rank 最小的 id 对、用 :func:`merge` 全部替换"完全相同：合并出的新 id 只会
    参与 rank 更大的规则，所以按 (新 id, 位置) 的顺序逐个合并就是逐条规则从左到右扫描。

    >>> encode_bytes([97, 97, 97, 98], {(97, 97): 256, (256, 97): 257})   # aa → 256，256 a → 257
    [257, 98]
    >>> encode_bytes([97, 97, 97, 97], {(97, 97): 256, (256, 256): 257})
    [257]
    """
    n = len(ids)
    ids = list(ids)
    nxt = list(range(1, n + 1))                   # 链表：下一个活着的位置（n = 末尾）
    prv = list(range(-1, n - 1))
    alive = [True] * n
    heap = [(merges[p], i) for i, p in enumerate(zip(ids, ids[1:])) if p in merges]
    heapq.heapify(heap)

    def push(i: int) -> None:                     # 位置 i 与它右边的词元构成的 id 对
        j = nxt[i]
        if j < n and (idx := merges.get((ids[i], ids[j]))) is not None:
            heapq.heappush(heap, (idx, i))

    while heap:
        idx, i = heapq.heappop(heap)
        j = nxt[i] if alive[i] else n
        if j >= n or merges.get((ids[i], ids[j])) != idx:   # 过期条目：这里已经不是那一对了
            continue
        ids[i], alive[j] = idx, False             # i 变成新 id，j 被吞掉
        nxt[i] = nxt[j]
        if nxt[j] < n:
            prv[nxt[j]] = i
        push(i)
        if prv[i] >= 0:
            push(prv[i])
    return [t for t, a in zip(ids, alive) if a]


class BPETokenizer:
    """字节级 BPE 分词器。``merges`` 按学到的顺序记录 (id 对) → 新 id。"""

    def __init__(self, merges: dict[tuple[int, int], int] | None = None):
        self.merges: dict[tuple[int, int], int] = dict(merges or {})
        self.vocab: dict[int, bytes] = {i: bytes([i]) for i in range(256)}   # id → 字节串
        for (a, b), idx in self.merges.items():
            if idx != len(self.vocab) or a not in self.vocab or b not in self.vocab:
                raise UserError(f"合并规则 {(a, b)} → {idx} 不合法：新 id 必须依次为 256, 257, ……"
                                 "且只能由已有 id 组成")
            self.vocab[idx] = self.vocab[a] + self.vocab[b]
        self.merge_counts: list[int] = []       # 训练时每次合并的 id 对出现次数（画图用）
        self._cache: dict[str, list[int]] = {}

    # ------------------------------------------------------------------ 训练
    @classmethod
    def train(cls, text: str, vocab_size: int = 1024, verbose: bool = False) -> BPETokenizer:
        """在 ``text`` 上学 ``vocab_size - 256`` 条合并规则（没有 id 对可合并时提前停止）。"""
        if not isinstance(vocab_size, int) or isinstance(vocab_size, bool):
            raise TypeError(f"vocab_size 必须是整数，收到 {vocab_size!r}")
        if vocab_size < 256:
            raise UserError(f"vocab_size 至少为 256（全部单字节），收到 {vocab_size}")
        if not isinstance(text, str):
            raise TypeError(f"text 必须是字符串，收到 {type(text).__name__}")
        chunk_counts = Counter(split_chunks(text))                  # 块 → 出现次数
        chunks = [list(c.encode("utf-8")) for c in chunk_counts]    # 每块的 id 序列
        freqs = list(chunk_counts.values())
        stats: dict[tuple[int, int], int] = {}
        where: dict[tuple[int, int], set[int]] = {}
        for i, (ids, f) in enumerate(zip(chunks, freqs)):
            for pair in zip(ids, ids[1:]):
                stats[pair] = stats.get(pair, 0) + f
                where.setdefault(pair, set()).add(i)
        heap = [(-c, p) for p, c in stats.items()]    # 次数大者优先；同次数时 id 对小者优先
        heapq.heapify(heap)

        tok = cls()
        for idx in range(256, vocab_size):
            pair = None
            while heap:
                neg, p = heapq.heappop(heap)
                if stats.get(p, 0) == -neg:          # 堆里可能有过期条目：次数对不上就丢掉
                    pair, count = p, -neg
                    break
            if pair is None:
                if verbose:
                    print(f"没有可合并的 id 对了，词表停在 {idx}")
                break
            tok._add_merge(pair, idx, count)
            changed: set[tuple[int, int]] = set()
            for i in where.pop(pair):                 # 只处理含有这个 id 对的块
                old = chunks[i]
                new = merge(old, pair, idx)
                if len(new) == len(old):             # 索引是惰性的：这块里已经没有它了
                    continue
                f = freqs[i]
                for p in zip(old, old[1:]):
                    stats[p] -= f
                    changed.add(p)
                for p in zip(new, new[1:]):
                    stats[p] = stats.get(p, 0) + f
                    where.setdefault(p, set()).add(i)
                    changed.add(p)
                chunks[i] = new
            for p in changed:
                c = stats[p]
                if c > 0:
                    heapq.heappush(heap, (-c, p))
                else:
                    del stats[p]
            if verbose and (idx - 256) % 100 == 0:
                print(f"合并 {idx - 255}/{vocab_size - 256}: {pair} -> {idx} "
                      f"{tok.render_token(idx)!r}，出现 {count} 次")
        return tok

    def _add_merge(self, pair: tuple[int, int], idx: int, count: int | None = None) -> None:
        self.merges[pair] = idx
        self.vocab[idx] = self.vocab[pair[0]] + self.vocab[pair[1]]
        if count is not None:
            self.merge_counts.append(count)
        self._cache.clear()

    # ------------------------------------------------------------------ 编码 / 解码
    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @property
    def eos_id(self) -> int:
        """结束符（换行）的 id：单字节 10。换行永远单独成块，不会被合并。"""
        return EOS.encode("utf-8")[0]

    @property
    def unk_id(self) -> None:
        """字节级 BPE 没有 <unk>。"""
        return None

    def unknown_chars(self, text: str) -> list[str]:
        """编码不了的字：只有孤立的代理码位（UTF-8 里不存在）；其余任何字符都能编码。"""
        return list(dict.fromkeys(SURROGATE_RE.findall(check_text(text))))

    def _encode_chunk(self, chunk: str) -> list[int]:
        cached = self._cache.get(chunk)
        if cached is not None:
            return cached
        ids = encode_bytes(list(chunk.encode("utf-8")), self.merges)
        if len(self._cache) < 100_000:
            self._cache[chunk] = ids
        return ids

    def encode(self, text: str, errors: str = "strict") -> list[int]:
        """字符串 → id 列表。字节级 BPE 没有未知字符（孤立的代理码位除外，见模块说明）。"""
        if errors not in ("strict", "unk"):
            raise UserError(f"errors 只能是 'strict' 或 'unk'，收到 {errors!r}")
        missing = self.unknown_chars(text)
        if missing and errors == "strict":
            raise UnknownCharacterError(missing)
        if missing:                                   # errors="unk"：换成 U+FFFD 再编码
            text = SURROGATE_RE.sub(UNK, text)
        out: list[int] = []
        for chunk in split_chunks(text):
            out.extend(self._encode_chunk(chunk))
        return out

    def decode(self, ids) -> str:
        """id 序列（list 或 1-D 张量）→ 字符串。不完整的 UTF-8 字节显示为 “�”。"""
        data = b"".join(self.vocab[i] for i in check_ids(ids, self.vocab_size))
        return data.decode("utf-8", errors="replace")

    def piece(self, i: int) -> str:
        """一个词元的文字；不是完整 UTF-8 的字节（例如一个汉字的第一个字节）显示为 “�”。"""
        return self.decode([i])

    def render_token(self, idx: int) -> str:
        """把一个词元显示成可读文字；不是完整 UTF-8 的字节写成 \\xNN。"""
        return self.vocab[idx].decode("utf-8", errors="backslashreplace")

    # ------------------------------------------------------------------ 保存 / 加载
    def to_dict(self) -> dict:
        return {"type": "bpe", "version": 1, "merges": [list(p) for p in self.merges]}

    @classmethod
    def from_dict(cls, d: dict) -> BPETokenizer:
        d = check_dict(d, "bpe")
        if d.get("version", 1) != 1:
            raise UserError(f"不认识的 BPE 数据版本 {d.get('version')!r}（只支持 1）")
        merges = field(d, "merges", list)
        pairs = []
        for m in merges:
            if not (isinstance(m, list) and len(m) == 2 and all(
                    isinstance(x, int) and not isinstance(x, bool) for x in m)):
                raise UserError(f"合并规则应是两个整数 [a, b]，收到 {m!r}")
            pairs.append((m[0], m[1]))
        return cls({p: 256 + i for i, p in enumerate(pairs)})

    def save(self, path: str | Path) -> None:
        """保存为 JSON：合并规则按顺序排列，第 i 条生成 id 256+i。"""
        files.write_text(path, json.dumps(self.to_dict()))

    @classmethod
    def load(cls, path: str | Path) -> BPETokenizer:
        return cls.from_dict(read_json(path))

    def __eq__(self, other) -> bool:
        return isinstance(other, BPETokenizer) and list(self.merges.items()) == list(
            other.merges.items())

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)})"
