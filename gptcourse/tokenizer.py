"""字符级分词器：一个汉字（或标点、换行）就是一个词元。

换行符 "\\n" 是"一首诗结束"的标记；没见过的字有两种明确的处理方式：
``errors="strict"`` 抛出 :class:`UnknownCharacterError` 并列出这些字，
``errors="unk"`` 把它们映射到 ``<unk>``（显示为 U+FFFD "�"）。
字节级 BPE 在 :mod:`gptcourse.bpe` 中，这里一并导出。
"""
from __future__ import annotations

import json
from pathlib import Path

EOS = "\n"          # 诗的结束符
UNK = "\ufffd"      # <unk> 的显示字符：Unicode 的"替换字符"


class UnknownCharacterError(ValueError):
    """文本里有词表之外的字。``chars`` 属性列出它们（按首次出现顺序）。"""

    def __init__(self, chars: list[str]):
        self.chars = chars
        shown = "、".join(repr(c) for c in chars[:20]) + (" ……" if len(chars) > 20 else "")
        super().__init__(f"词表里没有这些字：{shown}（共 {len(chars)} 个）。"
                         "可以改用 errors='unk' 把它们映射为 <unk>。")


class CharTokenizer:
    """字符 ↔ id 的双向查表。id 按字符排序分配，同一语料永远得到同一词表。"""

    def __init__(self, chars: list[str], unk: bool = True):
        chars = sorted(set(chars) - {UNK})
        if any(len(c) != 1 for c in chars):
            raise ValueError("CharTokenizer 的词表只能由单个字符组成")
        self.has_unk = unk
        self.itos: list[str] = ([UNK] if unk else []) + chars     # id → 字符
        self.stoi: dict[str, int] = {c: i for i, c in enumerate(self.itos)}  # 字符 → id

    @classmethod
    def from_text(cls, text: str, unk: bool = True) -> "CharTokenizer":
        """用训练文本中出现过的全部字符建词表（``unk=True`` 时 id 0 留给 <unk>）。"""
        if not text:
            raise ValueError("不能用空文本建词表")
        return cls(list(set(text)), unk=unk)

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    @property
    def eos_id(self) -> int:
        """换行符（诗的结束）的 id。"""
        if EOS not in self.stoi:
            raise ValueError("词表里没有换行符，无法标记诗的结束")
        return self.stoi[EOS]

    @property
    def unk_id(self) -> int | None:
        return 0 if self.has_unk else None

    def unknown_chars(self, text: str) -> list[str]:
        """text 中不在词表里的字（去重，按首次出现顺序）。"""
        return list(dict.fromkeys(c for c in text if c not in self.stoi))

    def encode(self, text: str, errors: str = "strict") -> list[int]:
        """字符串 → id 列表。"""
        if errors not in ("strict", "unk"):
            raise ValueError(f"errors 只能是 'strict' 或 'unk'，收到 {errors!r}")
        missing = self.unknown_chars(text)
        if missing:
            if errors == "strict":
                raise UnknownCharacterError(missing)
            if not self.has_unk:
                raise ValueError("这个词表没有 <unk>，不能使用 errors='unk'")
        return [self.stoi.get(c, 0) for c in text]

    def decode(self, ids) -> str:
        """id 序列（list 或 1-D 张量）→ 字符串。"""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        try:
            return "".join(self.itos[i] for i in ids)
        except (IndexError, TypeError):
            bad = [i for i in ids if not (isinstance(i, int) and 0 <= i < self.vocab_size)]
            raise ValueError(f"id 超出词表范围 [0, {self.vocab_size})：{bad[:10]}") from None

    # ---- 保存 / 加载（小 JSON 文件；检查点里也嵌一份） ----
    def to_dict(self) -> dict:
        chars = self.itos[1:] if self.has_unk else self.itos
        return {"type": "char", "unk": self.has_unk, "chars": "".join(chars)}

    @classmethod
    def from_dict(cls, d: dict) -> "CharTokenizer":
        if d.get("type") != "char":
            raise ValueError(f"不是字符分词器的数据（type={d.get('type')!r}）")
        return cls(list(d["chars"]), unk=bool(d["unk"]))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> "CharTokenizer":
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

    def __eq__(self, other) -> bool:
        return isinstance(other, CharTokenizer) and self.itos == other.itos

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size}, unk={self.has_unk})"


def tokenizer_from_dict(d: dict):
    """按 ``type`` 字段还原任意一种分词器（检查点用）。"""
    if d.get("type") == "char":
        return CharTokenizer.from_dict(d)
    if d.get("type") == "bpe":
        from .bpe import BPETokenizer
        return BPETokenizer.from_dict(d)
    raise ValueError(f"未知的分词器类型 {d.get('type')!r}")


def __getattr__(name: str):
    # BPETokenizer 住在 bpe.py（一个模块一个概念），这里按需转出，避免循环导入
    if name == "BPETokenizer":
        from .bpe import BPETokenizer
        return BPETokenizer
    raise AttributeError(name)
