"""题目的格式：一首带题目的诗写成 ``《题》正文``（以题作诗，见 :mod:`gptcourse.titled`）。

这里只有格式本身——书名号、题目的合法性、加上与去掉题目——不读语料，所以解码（:mod:`gptcourse.generate`）
和网页演示用它时不会把语料加载器一起拖进来。

>>> format_title("春晓", "春眠不觉晓，")
'《春晓》春眠不觉晓，'
>>> strip("《春晓》春眠不觉晓，")
'春眠不觉晓，'
"""
from __future__ import annotations

from .errors import UserError
from .verse import PUNCT

OPEN, CLOSE = "《", "》"
TITLE_MARKS = OPEN + CLOSE       # 标题的书名号：课程模型的词表里预留了它们
MAX_TITLE = 24                   # 题目最多多少个字（语料里 99 % 以上的题目不超过 15 个字）


def check_title(title) -> str:
    """合法的题目：非空字符串，不含书名号、换行和句读标点，不超过 ``MAX_TITLE`` 个字。"""
    if not isinstance(title, str):
        raise UserError(f"题目必须是字符串，收到 {type(title).__name__}")
    t = title.strip()
    if not t:
        raise UserError("题目不能是空的")
    bad = sorted({c for c in t if c in TITLE_MARKS + "\n" or c in PUNCT})
    if bad:
        raise UserError(f"题目里不能有这些字符：{'、'.join(map(repr, bad))}")
    if len(t) > MAX_TITLE:
        raise UserError(f"题目太长：{len(t)} 个字，最多 {MAX_TITLE} 个")
    return t


def format_title(title: str, body: str = "") -> str:
    """一首带题目的诗的文字：``《题》正文``（题目先经 :func:`check_title`）。"""
    return f"{OPEN}{check_title(title)}{CLOSE}{body}"


def strip(text: str) -> str:
    """去掉开头的 ``《题》``（没有题目时原样返回）。"""
    if text.startswith(OPEN) and CLOSE in text:
        return text[text.index(CLOSE) + 1:]
    return text
