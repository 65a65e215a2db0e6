"""分词器：一个共同的接口 :class:`Tokenizer`，以及字符级分词器 :class:`CharTokenizer`。

字符级分词器里一个汉字（或标点、换行）就是一个词元。
换行符 "\\n" 是"一首诗结束"的标记；没见过的字有两种明确的处理方式：
``errors="strict"`` 抛出 :class:`UnknownCharacterError` 并列出这些字，
``errors="unk"`` 把它们映射到 ``<unk>``（显示为 U+FFFD "�"）。
字节级 BPE 在 :mod:`gptcourse.bpe` 中，实现同一个接口，这里一并导出。

两种分词器的错误规则相同（都由本模块的小函数检查）：

- ``encode`` 收到的不是 str → ``TypeError``（说出收到的类型）；
- ``decode`` 收到不在 [0, vocab_size) 里的 id、或不是整数的 id（含 True/False）→ ``ValueError``；
- JSON 里的字段类型不对（例如 ``"unk": "false"``）→ ``ValueError``，不会被悄悄当成 True。
"""
from __future__ import annotations

import json
import operator
from pathlib import Path
from typing import Protocol, runtime_checkable

from . import files
from .errors import UserError

EOS = "\n"          # 诗的结束符
UNK = "\ufffd"      # <unk> 的显示字符：Unicode 的"替换字符"


class UnknownCharacterError(UserError):
    """文本里有词表之外的字。``chars`` 属性列出它们（按首次出现顺序）。"""

    def __init__(self, chars: list[str]):
        self.chars = chars
        shown = "、".join(repr(c) for c in chars[:20]) + (" ……" if len(chars) > 20 else "")
        super().__init__(f"词表里没有这些字：{shown}（共 {len(chars)} 个）。"
                         "可以改用 errors='unk' 把它们映射为 <unk>。")


@runtime_checkable
class Tokenizer(Protocol):
    """生成、评估、格式约束、网页演示与检查点只依赖这个接口。"""

    @property
    def vocab_size(self) -> int: ...          # 词元个数 V；id 取值 [0, V)
    @property
    def eos_id(self) -> int: ...              # 换行（诗的结束）的 id
    @property
    def unk_id(self) -> int | None: ...       # <unk> 的 id；没有 <unk> 时为 None

    def encode(self, text: str, errors: str = "strict") -> list[int]: ...
    def decode(self, ids) -> str: ...          # list / 元组 / 1-D 张量
    def unknown_chars(self, text: str) -> list[str]: ...   # 编码不了的字（去重，按出现顺序）
    def piece(self, i: int) -> str: ...        # 一个词元的文字（不完整的 UTF-8 显示为 "�"）
    def to_dict(self) -> dict: ...
    @classmethod
    def from_dict(cls, d: dict) -> "Tokenizer": ...
    def save(self, path: str | Path) -> None: ...
    @classmethod
    def load(cls, path: str | Path) -> "Tokenizer": ...


# ---------------------------------------------------------------- 两种分词器共用的检查
def check_text(text) -> str:
    """encode / unknown_chars 的输入必须是 str（bytes、None、列表都不行）。"""
    if not isinstance(text, str):
        raise TypeError(f"encode 需要字符串，收到 {type(text).__name__}")
    return text


def check_ids(ids, vocab_size: int) -> list[int]:
    """id 序列（list、元组或 1-D 张量/数组）→ Python 整数列表；越界或不是整数 → ValueError。"""
    if isinstance(ids, (str, bytes)):
        raise UserError(f"decode 需要 id 序列，收到 {type(ids).__name__}")
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    ids = list(ids)
    out = [_as_id(i) for i in ids]
    bad = [i for i, j in zip(ids, out) if j is None or not 0 <= j < vocab_size]
    if bad:
        raise UserError(f"id 超出词表范围 [0, {vocab_size})：{bad[:10]}")
    return out


def _as_id(i) -> int | None:
    """一个 id → Python 整数：int、NumPy 整数、0 维整数张量都可以；bool、浮点数不行（None）。"""
    if isinstance(i, bool) or "bool" in str(getattr(i, "dtype", "")):
        return None
    try:
        return operator.index(i)
    except TypeError:
        return None


def read_json(path: str | Path) -> dict:
    """读一个分词器 JSON 文件；读不了或不是 JSON 对象 → ValueError（说明是哪个文件）。"""
    path = Path(path)
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise UserError(f"{path.name} 不是可读取的分词器 JSON 文件（{type(e).__name__}）"
                         ) from None
    return check_dict(d)


def check_dict(d, kind: str | None = None) -> dict:
    """分词器数据必须是 dict；给了 kind 时 ``type`` 字段必须等于它。"""
    if not isinstance(d, dict):
        raise UserError(f"分词器数据应是 JSON 对象（dict），收到 {type(d).__name__}")
    if kind is not None and d.get("type") != kind:
        name = {"char": "字符", "bpe": " BPE "}.get(kind, kind)
        raise UserError(f"不是{name}分词器的数据（type={d.get('type')!r}）")
    return d


def field(d: dict, key: str, typ: type | tuple[type, ...]):
    """取出 d[key] 并检查类型（bool 不冒充 int）；缺少或类型不对 → ValueError。"""
    if key not in d:
        raise UserError(f"分词器数据缺少字段 {key!r}")
    v = d[key]
    types = typ if isinstance(typ, tuple) else (typ,)
    if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
        names = "/".join(t.__name__ for t in types)
        raise UserError(f"分词器字段 {key!r} 应是 {names}，收到 {v!r}")
    return v


# ---------------------------------------------------------------- 字符级分词器
class CharTokenizer:
    """字符 ↔ id 的双向查表。id 按字符排序分配，同一语料永远得到同一词表。"""

    def __init__(self, chars: list[str], unk: bool = True):
        chars = sorted(set(chars) - {UNK})
        if any(not isinstance(c, str) or len(c) != 1 for c in chars):
            raise UserError("CharTokenizer 的词表只能由单个字符组成")
        self.has_unk = unk
        self.itos: list[str] = ([UNK] if unk else []) + chars     # id → 字符
        self.stoi: dict[str, int] = {c: i for i, c in enumerate(self.itos)}  # 字符 → id

    @classmethod
    def from_text(cls, text: str, unk: bool = True) -> "CharTokenizer":
        """用训练文本中出现过的全部字符建词表（``unk=True`` 时 id 0 留给 <unk>）。"""
        if not check_text(text):
            raise UserError("不能用空文本建词表")
        return cls(list(set(text)), unk=unk)

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    @property
    def eos_id(self) -> int:
        """换行符（诗的结束）的 id。"""
        if EOS not in self.stoi:
            raise UserError("词表里没有换行符，无法标记诗的结束")
        return self.stoi[EOS]

    @property
    def unk_id(self) -> int | None:
        return 0 if self.has_unk else None

    def unknown_chars(self, text: str) -> list[str]:
        """text 中不在词表里的字（去重，按首次出现顺序）。"""
        return list(dict.fromkeys(c for c in check_text(text) if c not in self.stoi))

    def encode(self, text: str, errors: str = "strict") -> list[int]:
        """字符串 → id 列表。"""
        if errors not in ("strict", "unk"):
            raise UserError(f"errors 只能是 'strict' 或 'unk'，收到 {errors!r}")
        missing = self.unknown_chars(text)
        if missing:
            if errors == "strict":
                raise UnknownCharacterError(missing)
            if not self.has_unk:
                raise UserError("这个词表没有 <unk>，不能使用 errors='unk'")
        return [self.stoi.get(c, 0) for c in text]

    def decode(self, ids) -> str:
        """id 序列（list 或 1-D 张量）→ 字符串。"""
        return "".join(self.itos[i] for i in check_ids(ids, self.vocab_size))

    def piece(self, i: int) -> str:
        """一个词元的文字：这里就是一个字。"""
        return self.itos[check_ids([i], self.vocab_size)[0]]

    # ---- 保存 / 加载（小 JSON 文件；检查点里也嵌一份） ----
    def to_dict(self) -> dict:
        chars = self.itos[1:] if self.has_unk else self.itos
        return {"type": "char", "unk": self.has_unk, "chars": "".join(chars)}

    @classmethod
    def from_dict(cls, d: dict) -> "CharTokenizer":
        d = check_dict(d, "char")
        return cls(list(field(d, "chars", str)), unk=field(d, "unk", bool))

    def save(self, path: str | Path) -> None:
        files.write_text(path, json.dumps(self.to_dict(), ensure_ascii=False))

    @classmethod
    def load(cls, path: str | Path) -> "CharTokenizer":
        return cls.from_dict(read_json(path))

    def __eq__(self, other) -> bool:
        return isinstance(other, CharTokenizer) and self.itos == other.itos

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size}, unk={self.has_unk})"
