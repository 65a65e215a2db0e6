"""近体诗的约束解码：诗体（五绝/五律/七绝/七律）、藏头、押韵与平仄。

做法是在每一步采样之前，用一个布尔掩码 [V] 规定"此刻允许哪些词元"（规则全部来自
:mod:`gptcourse.verse`，与验收用的是同一套）：

- 句中只允许汉字（不允许标点、换行和 <unk>）；
- 一句写满（5 或 7 个字）时只允许这一句可用的句末标点：单数句"，"，双数句"。"
  （或"？""！"，与 ``verse`` 的验收规则相同）；最后一句写完后只允许结束符"\\n"；
- 藏头：第 i 句的第一个字只允许 ``acrostic[i]``；
- 押韵（``rhyme=True``）：双数句的末字只允许同一个平声韵部的字。韵部由 ``rhyme_group`` 指定，
  否则由第一个双数句的末字决定（那时允许任何平声字）；多音字可能属于几个平声韵部，之后的
  韵脚只要与到目前为止的全部韵脚共有一个韵部即可，所以写完时一定有一个共同的韵部。
  不重韵：韵脚不许用首句末字或前面双数句末字里已经有的字（``verse`` 的重韵规则）。
- 平仄（``tones=True``）：第 2、4、6 字（``verse.tone_positions``）只允许表里有平仄的字，并且
  与已经写下的字满足 分明（同句前一个讲平仄的字）、对（一联上句的同一位置）、
  粘（第 3、5、7 句第 2 字与上一句第 2 字）。"中"（可平可仄）的字哪一边都允许；它之后相关的
  规则就"无法判断"，但绝不会"不成立"。

一个位置的掩码为空时（词表里没有所选韵部的字、只有一种声调的字……）按固定的顺序放宽：
先放弃平仄，再放弃"不重韵"，再放弃押韵，诗体与藏头永不放宽；放宽过的约束记在 ``fallbacks`` 里。
指定的 ``rhyme_group`` 在词表里一个字也没有时不放宽，而是一开始就抛出 ``verse.RhymeGroupError``。

只给藏头、不给诗体时：句数 = 藏头字数（4 或 8），每句 5 字还是 7 字由模型在第一句里自己决定。
诗体和藏头都不给、只要押韵或平仄时：四种诗体都可以——每句几个字由第一句决定，写完第 4 句后
模型可以结束（绝句），也可以接着写满 8 句（律诗）。

状态（第几句、这一句写了几个字、韵部候选、各字的平仄）按"当前这首诗的文本"缓存：
``allowed(poem)`` 只需在 ``poem[:-1]`` 的状态上前进一个字，所以每一步的开销与诗的长度无关。
给定的开头（比如完整的第一句"白日依山尽，"）会被检查并接着写。

词表：一个词元能填一个字的位置，当且仅当它的文字（``_pieces``）正好是一个允许的字——所以
BPE 分词器也能用（不是整字的词元在约束下一律不允许）。
"""
from __future__ import annotations

import weakref
from functools import cache
from typing import NamedTuple

import torch

from .errors import UserError
from .verse import (
    BOTH,
    COMMA,
    FORMS,
    LINE_COUNTS,
    LINE_LENGTHS,
    LONGEST_LINE,
    MOST_LINES,
    PERIOD,
    PING,
    PUNCT,
    ZE,
    RhymeGroupError,
    end_marks,
    foot_lines,
    forms_with,
    group_names,
    is_hanzi,
    ping_groups,
    require_form,
    resolve_group,
    rhyme_lines,
    tone,
    tone_pairs,
    tone_positions,
)

_OPPOSITE = {PING: ZE, ZE: PING}
RELAXED = {                    # fallbacks 里的名字 → 告诉用户的一句话（解码循环把它交给调用方）
    "平仄": "平仄约束放宽过：有的位置没有合平仄的字可选",
    "重韵": "不重韵放宽过：有的韵脚只剩用过的字可选",
    "押韵": "押韵约束放宽过：有的韵脚没有同一韵部的字可选",
}


def _pieces(tok) -> list[str]:
    """每个词元的文字：``tok.piece(i)``（分词器协议），没有时用 ``tok.decode([i])``。"""
    piece = getattr(tok, "piece", None)
    return [piece(i) if piece is not None else tok.decode([i]) for i in range(tok.vocab_size)]


class State(NamedTuple):
    line: int                        # 第几句（从 0 数）
    count: int                       # 这一句已有几个字
    L: int | None                    # 每句字数；None = 第一句还没定
    cur: tuple                       # 这一句各字的平仄
    prev: tuple                      # 上一句各字的平仄
    groups: frozenset | None         # 韵部候选；None = 还没有韵脚；空 = 押韵已放弃
    last: str = ""                   # 最近写下的汉字
    rhymed: frozenset = frozenset()  # 已经写完的首句与双数句的末字（后面的韵脚不许再用：重韵）


class _Vocab:
    """一个词表上与约束无关的表：每个词元的文字、能填字位的汉字、各声调的掩码、句末标点，
    以及按键缓存的掩码（韵部、不重韵、平仄目标……它们也只取决于词表）。

    每个分词器只算一次（:func:`_vocab`）：建表要对 V 个词元逐个查平水韵，约几十毫秒，
    放在每次 ``generate`` 里会比写一首诗本身还慢。"""

    def __init__(self, tok, device=None):
        self.device = torch.device(device or "cpu")    # 掩码放在模型的设备上：解码时不必每步拷贝
        pieces = _pieces(tok)
        self.id: dict[str, int] = {}
        for i, p in enumerate(pieces):
            self.id.setdefault(p, i)
        self.V = tok.vocab_size
        self.chars = [p if len(p) == 1 and is_hanzi(p) else None for p in pieces]
        self.hanzi = self.mask(lambda c: True)                                   # [V]
        self.tone_ok = {t: self.mask(lambda c, t=t: tone(c) in (t, BOTH)) for t in (PING, ZE)}
        self.known = self.mask(lambda c: tone(c) is not None)
        self.cache: dict = {}

    def mask(self, keep) -> torch.Tensor:
        return torch.tensor([c is not None and keep(c) for c in self.chars], dtype=torch.bool,
                            device=self.device)


_VOCABS: dict[tuple[int, str], tuple[weakref.ref, _Vocab]] = {}


def _vocab(tok, device=None) -> _Vocab:
    """这个分词器在这个设备上的 :class:`_Vocab`（按对象缓存；分词器被回收后缓存失效）。"""
    key = (id(tok), str(torch.device(device or "cpu")))
    hit = _VOCABS.get(key)
    if hit is not None and hit[0]() is tok:
        return hit[1]
    v = _Vocab(tok, device)
    _VOCABS[key] = (weakref.ref(tok), v)
    return v


@cache
def _pairs_ending_at(line_len: int, n_lines: int) -> dict[tuple[int, int], list]:
    """(句, 字) → 后写的一端是它的平仄规则；讲平仄的位置都在里面（可能是空列表）。"""
    out: dict[tuple[int, int], list] = {(k, p): [] for k in range(n_lines)
                                        for p in tone_positions(line_len)}
    for r in tone_pairs(line_len, n_lines):
        out[(r.b, r.j)].append(r)
    return out


class VerseConstraint:
    """一首诗的格式约束。``allowed(poem)`` 给出下一个词元的允许掩码 [V]（bool）。

    ``form``：``FORMS`` 里的名字或 None；``acrostic``：每句的首字；``rhyme`` / ``rhyme_group`` /
    ``tones`` 见模块说明（给了 ``rhyme_group`` 就等于 ``rhyme=True``）；``device``：掩码放在哪里
    （默认 CPU；解码循环传模型的设备）。
    """

    def __init__(self, tok, form: str | None = None, acrostic: str | None = None,
                 rhyme: bool = False, rhyme_group: str | None = None, tones: bool = False,
                 device=None):
        if form is None and not acrostic and not (rhyme or rhyme_group is not None or tones):
            raise UserError("VerseConstraint 需要诗体 form、藏头 acrostic 或押韵/平仄约束之一")
        if form is not None:
            require_form(form)
        vocab = self._vocab = _vocab(tok, device)
        self._id = vocab.id
        if COMMA not in self._id or PERIOD not in self._id:
            raise UserError("诗体约束需要词表里有单独的“，”和“。”词元")
        self.line_len: int | None = None      # None = 由模型在第一句里选 5 或 7
        self.n_lines: int | None = len(acrostic) if acrostic else None   # None = 4 或 8 句
        if form is not None:
            self.line_len, self.n_lines = FORMS[form]
        if acrostic:
            bad = [c for c in acrostic if not is_hanzi(c)]
            if bad:
                raise UserError(f"藏头字必须是汉字，收到：{'、'.join(map(repr, bad))}")
            missing = [c for c in dict.fromkeys(acrostic) if c not in self._id]
            if missing:
                raise UserError(f"藏头字不在词表里：{'、'.join(missing)}")
            if len(acrostic) != self.n_lines:
                raise UserError(f"{form}有 {self.n_lines} 句，藏头字却有 {len(acrostic)} 个")
            if self.n_lines not in LINE_COUNTS:
                want = "或 ".join(f"{n} 个（{'、'.join(forms_with(n))}）" for n in LINE_COUNTS)
                raise UserError(f"藏头字应有 {want}，收到 {len(acrostic)} 个")
        self.form, self.acrostic = form, acrostic or None
        self.rhyme_group = resolve_group(rhyme_group) if rhyme_group is not None else None
        self.rhyme, self.tones = bool(rhyme or self.rhyme_group), bool(tones)
        self.fallbacks: set[str] = set()         # 放宽过的约束："平仄" / "重韵" / "押韵"
        self.eos_id = tok.eos_id
        self._V, self._chars, self._device = vocab.V, vocab.chars, vocab.device
        self.hanzi, self._tone_ok, self._known = vocab.hanzi, vocab.tone_ok, vocab.known
        self._cache = vocab.cache                    # 掩码只取决于词表：同一个分词器的约束共用
        if len(self._cache) > 20000:                 # 缓存只是加速，太大就重来
            self._cache.clear()
        n = self.n_lines or MOST_LINES        # 没定句数时按最长的算：前 4 句的规则与绝句相同
        self._rhyme_lines, self._foot_lines = rhyme_lines(n), foot_lines(n)
        self._states: dict[str, State] = {"": State(0, 0, self.line_len, (), (), None)}
        if self.rhyme_group and not self._rhyme_mask(None).any():
            raise RhymeGroupError(f"词表里没有{self.rhyme_group}的字，无法押这个韵；"
                                  f"换一个韵部，或不指定韵部（rhyme=True）")

    # ---------------------------------------------------------------- 掩码的零件
    def _ids(self, chars: str) -> torch.Tensor:
        m = torch.zeros(self._V, dtype=torch.bool, device=self._device)
        m[[self._id[c] for c in chars if c in self._id]] = True
        return m

    def only(self, token_id: int) -> torch.Tensor:
        key = ("only", token_id)
        if key not in self._cache:
            m = torch.zeros(self._V, dtype=torch.bool, device=self._device)
            m[token_id] = True
            self._cache[key] = m
        return self._cache[key]

    def _end_mask(self, line: int) -> torch.Tensor:
        key = ("ends", end_marks(line))
        if key not in self._cache:
            self._cache[key] = self._ids(end_marks(line))
        return self._cache[key]

    def _no_repeat_mask(self, rhymed: frozenset) -> torch.Tensor:
        key = ("no repeat", rhymed)
        if key not in self._cache:
            self._cache[key] = self.hanzi & ~self._ids("".join(rhymed))
        return self._cache[key]

    def _rhyme_mask(self, groups: frozenset | None) -> torch.Tensor:
        if groups is None:                           # 还没有韵脚：指定的韵部，或任何平声韵部
            groups = frozenset({self.rhyme_group} if self.rhyme_group else group_names(PING))
        key = ("rhyme", groups)                      # 只由韵部决定：同一词表的约束可以共用
        if key not in self._cache:
            self._cache[key] = self._vocab.mask(lambda c: bool(set(ping_groups(c)) & groups))
        return self._cache[key]

    # ---------------------------------------------------------------- 解析
    def punct(self, line: int) -> str:
        """第 line 句（从 0 数）的标准句末标点："，"或"。"。"""
        return end_marks(line)[0]

    def _step(self, s: State, ch: str) -> State:
        line, count, L, cur, prev, groups, last, rhymed = s
        if line >= (self.n_lines or MOST_LINES):
            raise UserError(f"这首诗已经写完 {self.n_lines or MOST_LINES} 句，后面不能再有“{ch}”")
        if ch in PUNCT:
            if not (count == L if L is not None else count in LINE_LENGTHS):
                want = L if L else " 或 ".join(map(str, LINE_LENGTHS))
                raise UserError(f"第 {line + 1} 句有 {count} 个字，应为 {want} 个")
            if ch not in end_marks(line):
                raise UserError(f"第 {line + 1} 句应以“{'”“'.join(end_marks(line))}”之一结尾，"
                                 f"收到“{ch}”")
            if line in self._foot_lines:                       # 可能入韵的句末：记下末字
                rhymed = rhymed | {last}
            return State(line + 1, 0, count, (), cur, groups, "", rhymed)
        if not is_hanzi(ch):
            raise UserError(f"格式约束下不能出现字符 {ch!r}（只允许汉字与句末标点）")
        if count == 0 and self.acrostic and ch != self.acrostic[line]:
            raise UserError(f"藏头诗第 {line + 1} 句应以“{self.acrostic[line]}”开头，收到“{ch}”")
        if count + 1 > (L or LONGEST_LINE):
            raise UserError(f"第 {line + 1} 句超过了 {L or LONGEST_LINE} 个字")
        if self._at_foot(s):
            pool = groups if groups is not None else (
                {self.rhyme_group} if self.rhyme_group else set(group_names(PING)))
            groups = frozenset(set(ping_groups(ch)) & pool)       # 空 = 这个韵脚不押韵
        return State(line, count + 1, L, cur + (tone(ch),), prev, groups, ch, rhymed)

    def _parse(self, poem: str) -> State:
        """poem 的状态：从缓存里最长的前缀接着逐字解析（解码时每步只走一个字）。"""
        k = len(poem)
        while poem[:k] not in self._states:
            k -= 1
        s = self._states[poem[:k]]
        if len(self._states) > 20000:                      # 缓存只是加速，满了就重来
            self._states = {"": self._states[""]}
        for i in range(k, len(poem)):
            s = self._step(s, poem[i])
            self._states[poem[:i + 1]] = s
        return s

    def state(self, poem: str) -> tuple[int, int, int | None]:
        """解析当前这首诗已有的文本 → (第几句, 这一句已有几个字, 每句字数或 None)。

        文本不符合约束（字数不对、标点不对、藏头字不对、多余的字、要求押韵时韵脚不押韵）时
        抛出 ValueError。
        """
        s = self._parse(poem)
        if self.rhyme and s.groups == frozenset():
            want = f"{self.rhyme_group}的字" if self.rhyme_group else "同一平声韵部的字"
            raise UserError(f"要求押韵，但已有的双数句末字不是{want}")
        return s.line, s.count, s.L

    def _at_foot(self, s: State) -> bool:
        """下一个字是要押韵的韵脚（押韵还没放弃时）。"""
        return (self.rhyme and s.line in self._rhyme_lines and s.count + 1 == s.L
                and s.groups != frozenset())

    # ---------------------------------------------------------------- 掩码
    def _tone_target(self, s: State) -> set[str] | None:
        """下一个字该是的平仄（可能为空集 = 不限、两个 = 有冲突）；不是讲平仄的位置时 None。

        规则是 ``verse.tone_pairs``：后写的一端正好是下一个字的那几条；另一端在这一句（cur）
        或上一句（prev）。"""
        pairs = _pairs_ending_at(s.L or LONGEST_LINE, self.n_lines or MOST_LINES)
        rules = pairs.get((s.line, s.count))
        if rules is None:
            return None
        want = set()
        for r in rules:
            other = (s.cur if r.a == s.line else s.prev)[r.i]
            if other in _OPPOSITE:
                want.add(_OPPOSITE[other] if r.differ else other)
        return want

    def _hanzi_mask(self, s: State) -> torch.Tensor:
        parts = []                             # (名字, 这一部分的键)：按放宽的逆序排列
        if self._at_foot(s):
            parts += [("押韵", s.groups), ("重韵", s.rhymed)]
        target = self._tone_target(s) if self.tones else None
        if target is not None:
            parts.append(("平仄", frozenset(target)))
        key = ("hanzi", tuple(parts))          # 同样的几部分 → 同样的掩码与放宽：只在第一次
        if key not in self._cache:             # 才看掩码是不是空的（在 GPU 上这要等一次）
            self._cache[key] = self._relax(parts)
        m, relaxed = self._cache[key]
        self.fallbacks |= relaxed
        return m

    def _relax(self, parts: list) -> tuple[torch.Tensor, set[str]]:
        masks = {"押韵": self._rhyme_mask, "重韵": self._no_repeat_mask, "平仄": self._tone_mask}
        relaxed = set()
        while parts:
            m = self.hanzi
            for name, k in parts:
                m = m & masks[name](k)
            if m.any():
                return m, relaxed
            relaxed.add(parts.pop()[0])                     # 先放弃平仄，再重韵，再押韵
        return self.hanzi, relaxed

    def _tone_mask(self, target: frozenset) -> torch.Tensor:
        key = ("tone", target)
        if key not in self._cache:
            m = self._known.clone()
            for t in target:
                m &= self._tone_ok[t]
            self._cache[key] = m
        return self._cache[key]

    def allowed(self, poem: str) -> torch.Tensor:
        """下一个词元的允许掩码 [V]（True = 允许）。"""
        s = self._parse(poem)
        if s.line == (self.n_lines or MOST_LINES):
            return self.only(self.eos_id)                        # 写完了：只能结束
        if self.n_lines is None and s.line in LINE_COUNTS and s.count == 0:
            return self._hanzi_mask(s) | self.only(self.eos_id)  # 没定诗体：绝句到此可结束
        ends = self._end_mask(s.line)
        if s.count == (s.L or LONGEST_LINE):
            return ends                                          # 一句写满：只能是句末标点
        if s.count == 0 and self.acrostic:
            return self.only(self._id[self.acrostic[s.line]])    # 藏头：首字固定
        m = self._hanzi_mask(s)
        if s.L is None and s.count in LINE_LENGTHS:              # 第一句：可以在五言处收尾
            return m | ends
        return m

    def __repr__(self) -> str:
        return (f"VerseConstraint(form={self.form!r}, acrostic={self.acrostic!r}, "
                f"lines={self.n_lines}, line_len={self.line_len}, rhyme={self.rhyme}, "
                f"rhyme_group={self.rhyme_group!r}, tones={self.tones})")
