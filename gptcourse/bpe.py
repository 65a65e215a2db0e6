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
"""
from __future__ import annotations

import heapq
import json
import re
from collections import Counter
from pathlib import Path

PUNCT = "，。！？；：、,.!?;:"
_P = re.escape(PUNCT)
# 一块 = 换行本身 | 若干非标点字符 + 一个标点 | 末尾不带标点的一串字符。三种情形覆盖全部文本。
CHUNK_RE = re.compile(rf"\n|[^\n{_P}]*[{_P}]|[^\n{_P}]+")


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


class BPETokenizer:
    """字节级 BPE 分词器。``merges`` 按学到的顺序记录 (id 对) → 新 id。"""

    def __init__(self, merges: dict[tuple[int, int], int] | None = None):
        self.merges: dict[tuple[int, int], int] = dict(merges or {})
        self.vocab: dict[int, bytes] = {i: bytes([i]) for i in range(256)}   # id → 字节串
        for (a, b), idx in self.merges.items():
            if idx != len(self.vocab) or a not in self.vocab or b not in self.vocab:
                raise ValueError(f"合并规则 {(a, b)} → {idx} 不合法：新 id 必须依次为 256, 257, ……"
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
            raise ValueError(f"vocab_size 至少为 256（全部单字节），收到 {vocab_size}")
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

    def _encode_chunk(self, chunk: str) -> list[int]:
        cached = self._cache.get(chunk)
        if cached is not None:
            return cached
        ids = list(chunk.encode("utf-8"))
        while len(ids) >= 2:
            # 按“学到的先后”应用规则：先合并 rank（新 id）最小的那个 id 对
            pair = min(zip(ids, ids[1:]), key=lambda p: self.merges.get(p, float("inf")))
            if pair not in self.merges:
                break
            ids = merge(ids, pair, self.merges[pair])
        if len(self._cache) < 100_000:
            self._cache[chunk] = ids
        return ids

    def encode(self, text: str, errors: str = "strict") -> list[int]:
        """字符串 → id 列表。``errors`` 只为与 CharTokenizer 接口一致：字节级 BPE 没有未知字符。"""
        if errors not in ("strict", "unk"):
            raise ValueError(f"errors 只能是 'strict' 或 'unk'，收到 {errors!r}")
        if not isinstance(text, str):
            raise TypeError(f"encode 需要字符串，收到 {type(text).__name__}")
        out: list[int] = []
        for chunk in split_chunks(text):
            out.extend(self._encode_chunk(chunk))
        return out

    def decode(self, ids) -> str:
        """id 序列（list 或 1-D 张量）→ 字符串。不完整的 UTF-8 字节显示为 “�”。"""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        try:
            data = b"".join(self.vocab[i] for i in ids)
        except (KeyError, TypeError):
            bad = [i for i in ids if i not in self.vocab]
            raise ValueError(f"id 超出词表范围 [0, {self.vocab_size})：{bad[:10]}") from None
        return data.decode("utf-8", errors="replace")

    def render_token(self, idx: int) -> str:
        """把一个词元显示成可读文字；不是完整 UTF-8 的字节写成 \\xNN。"""
        return self.vocab[idx].decode("utf-8", errors="backslashreplace")

    # ------------------------------------------------------------------ 保存 / 加载
    def to_dict(self) -> dict:
        return {"type": "bpe", "version": 1, "merges": [list(p) for p in self.merges]}

    @classmethod
    def from_dict(cls, d: dict) -> BPETokenizer:
        if d.get("type") != "bpe":
            raise ValueError(f"不是 BPE 分词器的数据（type={d.get('type')!r}）")
        return cls({(int(a), int(b)): 256 + i for i, (a, b) in enumerate(d["merges"])})

    def save(self, path: str | Path) -> None:
        """保存为 JSON：合并规则按顺序排列，第 i 条生成 id 256+i。"""
        Path(path).write_text(json.dumps(self.to_dict()), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> BPETokenizer:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

    def __eq__(self, other) -> bool:
        return isinstance(other, BPETokenizer) and list(self.merges.items()) == list(
            other.merges.items())

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)})"
