"""近体诗的约束解码：诗体（五绝/五律/七绝/七律）与藏头诗。

做法是在每一步采样之前，用一个布尔掩码 [V] 规定"此刻允许哪些词元"：

- 句中只允许汉字（不允许标点、换行和 <unk>）；
- 一句写满（5 或 7 个字）时只允许这一句的句末标点：单数句"，"，双数句和最后一句"。"；
- 最后一句的"。"之后只允许结束符"\\n"；
- 藏头诗：第 i 句的第一个字只允许 ``acrostic[i]``。

因为不合格式的词元在采样前就被排除了，输出**一定**符合要求的诗体——模型只负责在
"合法"的字里挑。状态（第几句、这一句写了几个字）每一步都从当前这首诗的文本重新解析，
所以给定的开头（比如完整的第一句"白日依山尽，"）会被检查并接着写。

只给藏头、不给诗体时：句数 = 藏头字数，每句 5 字还是 7 字由模型在第一句里自己决定
（第 5 个字之后允许"，"，第 7 个字之后必须"，"），之后各句都与第一句等长。
于是 4 个藏头字得到五绝或七绝，8 个得到五律或七律。
"""
from __future__ import annotations

import unicodedata

import torch

FORMS: dict[str, tuple[int, int]] = {"五绝": (5, 4), "五律": (5, 8), "七绝": (7, 4), "七律": (7, 8)}
COMMA, PERIOD = "，", "。"


def is_hanzi(ch: str) -> bool:
    """汉字（Unicode 类别 Lo：其他字母，包括全部 CJK 表意文字）。"""
    return len(ch) == 1 and unicodedata.category(ch) == "Lo"


class VerseConstraint:
    """一首诗的格式约束。``allowed(poem)`` 给出下一个词元的允许掩码 [V]（bool）。

    ``form``：``FORMS`` 里的名字或 None；``acrostic``：每句的首字（可为 None）。
    """

    def __init__(self, tok, form: str | None = None, acrostic: str | None = None):
        if form is None and not acrostic:
            raise ValueError("VerseConstraint 至少需要 form 或 acrostic 之一")
        stoi = getattr(tok, "stoi", None)
        if stoi is None or COMMA not in stoi or PERIOD not in stoi:
            raise ValueError("诗体约束需要字符分词器，且词表里要有“，”和“。”")
        if form is not None and form not in FORMS:
            raise ValueError(f"未知的诗体 {form!r}；可选：{'、'.join(FORMS)}")
        self.line_len: int | None = None      # None = 由模型在第一句里选 5 或 7
        self.n_lines = len(acrostic) if acrostic else 0
        if form is not None:
            self.line_len, self.n_lines = FORMS[form]
        if acrostic:
            bad = [c for c in acrostic if not is_hanzi(c)]
            if bad:
                raise ValueError(f"藏头字必须是汉字，收到：{'、'.join(map(repr, bad))}")
            missing = tok.unknown_chars(acrostic)
            if missing:
                raise ValueError(f"藏头字不在词表里：{'、'.join(missing)}")
            if len(acrostic) != self.n_lines:
                raise ValueError(f"{form}有 {self.n_lines} 句，藏头字却有 {len(acrostic)} 个")
        self.form, self.acrostic = form, acrostic or None
        V = tok.vocab_size
        self.eos_id = tok.eos_id
        self.hanzi = torch.tensor([is_hanzi(c) for c in tok.itos], dtype=torch.bool)   # [V]
        self._one = {}                                   # 缓存"只允许一个词元"的掩码
        self._stoi, self._V = stoi, V

    # ---------------------------------------------------------------- 解析
    def punct(self, line: int) -> str:
        """第 line 句（从 0 数）的句末标点：单数句"，"，双数句与最后一句"。"。"""
        return PERIOD if line % 2 == 1 or line == self.n_lines - 1 else COMMA

    def state(self, poem: str) -> tuple[int, int, int | None]:
        """解析当前这首诗已有的文本 → (第几句, 这一句已有几个字, 每句字数或 None)。

        文本不符合约束（字数不对、标点不对、藏头字不对、多余的字）时抛出 ValueError。
        """
        line, count, L = 0, 0, self.line_len
        for ch in poem:
            if line >= self.n_lines:
                raise ValueError(f"这首诗已经写完 {self.n_lines} 句，后面不能再有“{ch}”")
            if ch in (COMMA, PERIOD):
                ok_len = count == L if L is not None else count in (5, 7)
                if not ok_len:
                    raise ValueError(f"第 {line + 1} 句有 {count} 个字，"
                                     f"应为 {L if L else '5 或 7'} 个")
                if ch != self.punct(line):
                    raise ValueError(f"第 {line + 1} 句应以“{self.punct(line)}”结尾，收到“{ch}”")
                L, line, count = count, line + 1, 0
            elif is_hanzi(ch):
                if count == 0 and self.acrostic and ch != self.acrostic[line]:
                    raise ValueError(f"藏头诗第 {line + 1} 句应以“{self.acrostic[line]}”开头，"
                                     f"收到“{ch}”")
                count += 1
                if count > (L or 7):
                    raise ValueError(f"第 {line + 1} 句超过了 {L or 7} 个字")
            else:
                raise ValueError(f"格式约束下不能出现字符 {ch!r}（只允许汉字、“，”和“。”）")
        return line, count, L

    # ---------------------------------------------------------------- 掩码
    def only(self, token_id: int) -> torch.Tensor:
        if token_id not in self._one:
            m = torch.zeros(self._V, dtype=torch.bool)
            m[token_id] = True
            self._one[token_id] = m
        return self._one[token_id]

    def allowed(self, poem: str) -> torch.Tensor:
        """下一个词元的允许掩码 [V]（True = 允许）。"""
        line, count, L = self.state(poem)
        if line == self.n_lines:
            return self.only(self.eos_id)                        # 写完了：只能结束
        end = self._stoi[self.punct(line)]
        if L is not None and count == L:
            return self.only(end)                                # 一句写满：只能是句末标点
        if count == 0 and self.acrostic:
            return self.only(self._stoi[self.acrostic[line]])    # 藏头：首字固定
        if L is None and count == 7:
            return self.only(end)
        if L is None and count == 5:                             # 第一句：可以在 5 字处收尾
            return self.hanzi | self.only(end)
        return self.hanzi

    def __repr__(self) -> str:
        return (f"VerseConstraint(form={self.form!r}, acrostic={self.acrostic!r}, "
                f"lines={self.n_lines}, line_len={self.line_len})")


def check_form(poem: str, form: str | None = None, acrostic: str | None = None) -> bool:
    """一首完整的诗（不含换行）是否符合诗体/藏头要求。测试与笔记本用它来验收输出。"""
    lines, chars = [], ""
    for ch in poem:
        if ch in (COMMA, PERIOD):
            lines.append((chars, ch))
            chars = ""
        elif is_hanzi(ch):
            chars += ch
        else:
            return False
    if chars or not lines:                                     # 最后一句没有句末标点 / 空诗
        return False
    n = len(lines)
    if form is not None:
        L, want = FORMS[form]
        if n != want or any(len(c) != L for c, _ in lines):
            return False
    elif len({len(c) for c, _ in lines}) != 1 or len(lines[0][0]) not in (5, 7):
        return False
    if acrostic and (n != len(acrostic) or any(c[0] != a for (c, _), a in zip(lines, acrostic))):
        return False
    puncts = [p for _, p in lines]
    want_p = [PERIOD if i % 2 == 1 or i == n - 1 else COMMA for i in range(n)]
    return puncts == want_p
