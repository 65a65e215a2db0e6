"""验收（acceptance）：生成的诗合不合格律、是不是抄来的、够不够多样，以及一张放行表。

一首诗 = 一行不含换行符的文字。诗体、断句、押韵与平仄的规则都在 :mod:`gptcourse.verse`
（全课只有这一套）；这里用它们给一组样本打分。

新颖度用两个数衡量：逐句照抄率（生成的句子有多少在训练集里原样出现过），以及与训练文本
共有的最长子串。后者用训练文本的**后缀数组**回答"这个串在训练集里出现过吗"（二分查找，
每次只比较几十个字），150 万字的训练集建索引一次约几秒，之后每首诗只要毫秒。
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import UserError
from .verse import (
    LINE_LENGTHS,
    is_hanzi,
    is_valid_form,
    rates,
    repeated_rhyme_rate,
    split_lines,
)


# ---------------------------------------------------------------- 新颖度
class SubstringIndex:
    """训练文本的后缀数组：``contains(s)`` 判断 s 是否在文本中出现过。

    后缀按前 ``depth`` 个字排序（倍增法：每轮按"前 k 字的名次, 后 k 字的名次"排序，
    名次覆盖的长度翻倍），对长度 ≤ depth 的查询完全正确；更长的查询退回 ``in``。
    """

    def __init__(self, text: str, depth: int = 64):
        if not text:
            raise UserError("不能为空文本建索引")
        self.text, self.depth = text, depth
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)          # [n]
        n = len(codes)
        rank = np.unique(codes, return_inverse=True)[1].astype(np.int64) + 1     # 0 = 越过末尾
        sa = np.argsort(rank, kind="stable")
        k = 1
        while k < depth:
            nxt = np.zeros(n, dtype=np.int64)
            nxt[:-k] = rank[k:]                                  # 第 i+k 个后缀的名次
            sa = np.lexsort((nxt, rank))                         # 先按 rank，再按 nxt
            r, s = rank[sa], nxt[sa]
            new_group = np.ones(n, dtype=bool)
            new_group[1:] = (r[1:] != r[:-1]) | (s[1:] != s[:-1])
            rank = np.empty(n, dtype=np.int64)
            rank[sa] = np.cumsum(new_group)                      # 覆盖前 2k 个字的名次
            k *= 2
            if new_group.all():                                  # 名次已各不相同
                break
        self.sa = sa.tolist()

    def contains(self, s: str) -> bool:
        if len(s) > self.depth:
            return s in self.text
        text, sa, m = self.text, self.sa, len(s)
        lo, hi = 0, len(sa)
        while lo < hi:                                           # 第一个前缀 ≥ s 的后缀
            mid = (lo + hi) // 2
            if text[sa[mid]:sa[mid] + m] < s:
                lo = mid + 1
            else:
                hi = mid
        return lo < len(sa) and text[sa[lo]:sa[lo] + m] == s

    def longest_shared(self, s: str) -> str:
        """s 与训练文本共有的最长子串（有多个时取最靠前的）。

        对每个起点 i 只试"比目前最好的再长一个字"：出现过就继续加长，否则换下一个起点，
        所以总共只查询 len(s) + 答案长度 次。
        """
        best_i, best = 0, 0
        for i in range(len(s)):
            while i + best < len(s) and self.contains(s[i:i + best + 1]):
                best_i, best = i, best + 1
        return s[best_i:best_i + best]


_INDEX_CACHE: dict[int, SubstringIndex] = {}


def substring_index(train_text: str) -> SubstringIndex:
    """同一份训练文本只建一次索引。"""
    key = hash(train_text)
    if key not in _INDEX_CACHE or _INDEX_CACHE[key].text != train_text:
        _INDEX_CACHE.clear()
        _INDEX_CACHE[key] = SubstringIndex(train_text)
    return _INDEX_CACHE[key]


def train_lines(train_text: str) -> set[str]:
    """训练集里出现过的全部句子（标点之间的字）。"""
    return {line for poem in train_text.split("\n") for line in split_lines(poem)[0] if line}


def copied_line_rate(poems: list[str], known_lines: set[str]) -> float:
    """生成的句子（5 或 7 字）里，原样出现在训练集中的比例；没有这样的句子时为 0。"""
    lines = [ln for p in poems for ln in split_lines(p)[0] if len(ln) in LINE_LENGTHS]
    return sum(ln in known_lines for ln in lines) / len(lines) if lines else 0.0


# ---------------------------------------------------------------- 多样性与重复
def distinct_n(poems: list[str], n: int) -> float:
    """distinct-n：全部样本里不同的 n 字组数 / n 字组总数。n 字组只在一句之内取（不跨标点）。

    >>> distinct_n(["春风春风，春风春风。"], 2)      # 6 个二字组里只有 "春风""风春" 两种
    0.3333333333333333
    """
    if n < 1:
        raise UserError(f"n 必须 ≥ 1，收到 {n}")
    grams = [line[i:i + n] for p in poems for line in split_lines(p.removesuffix("\n"))[0]
             for i in range(len(line) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def repetition_rate(poem: str) -> float:
    """一首诗里"重复出现的汉字"的比例：1 − 不同汉字数 / 汉字数（标点不算）。

    >>> round(repetition_rate("青青河畔草，郁郁园中柳。"), 6)    # 10 个字里 青、郁 各多出一次
    0.2
    """
    chars = [c for c in poem if is_hanzi(c)]
    return 1 - len(set(chars)) / len(chars) if chars else 0.0


# ---------------------------------------------------------------- 放行表
@dataclass(frozen=True)
class Check:
    """一项验收：测得的值、门槛、方向（≥ 还是 ≤），以及是否通过。"""
    name: str
    value: float
    threshold: float
    higher_is_better: bool
    fmt: str = ".3f"

    @property
    def passed(self) -> bool:
        return self.value >= self.threshold if self.higher_is_better \
            else self.value <= self.threshold

    @property
    def rule(self) -> str:
        return f"{'≥' if self.higher_is_better else '≤'} {self.threshold:{self.fmt}}"


# 门槛（笔记本 04 用真实的验证集诗作为参照逐条说明理由）
THRESHOLDS = {
    "val_loss": 5.0,            # 训练 issue 定下的质量线（nats/字）
    "form_rate": 0.90,          # ≥ 90 % 的采样合乎四种形式之一
    "copied_lines": 0.10,       # 逐句照抄率
    "longest_shared": 8.0,      # 与训练集共有的最长子串，样本平均（字）
    "distinct_1": 0.20,
    "distinct_2": 0.80,
    "repetition": 0.10,         # 每首诗的字重复率，样本平均
    # 押韵与平仄：在看任何样本之前，由真实的验证集诗（tang_jinti val，1,774 首）定下：
    # 门槛 = 真实值 × 0.9，向下取到 0.01。真实值 押韵率 0.904、平仄合格率 0.938
    # （verse.rates，补全后的平水韵表；tests/test_verse.py 重新计算并核对这两个门槛）。
    "rhyme_rate": 0.81,
    "tonal_share": 0.84,
    # 重韵率（合乎诗体、押韵、却有字做了两次韵脚的诗的比例，verse.repeated_rhyme_rate）：同样由
    # 真实的验证集诗定下，方向相反：门槛 = 真实值 ÷ 0.9，向上取到 0.01。真实值 7/1774 = 0.004。
    # 押韵约束保证押韵，却不保证不重韵（约束不许重韵之前，发布设置的 40 首里有 18 首重韵）。
    "repeated_rhymes": 0.01,
}
REFERENCE_FRACTION = 0.9        # 上面三个门槛 = 真实验证集诗的值 × 这个比例（≥ 的门槛，向下取整到
#                                 0.01）或 ÷ 这个比例（≤ 的门槛，向上取整到 0.01）


def acceptance_checks(poems: list[str], train_text: str, val_loss: float | None = None,
                      thresholds: dict | None = None) -> list[Check]:
    """对一组生成的诗逐项测量，返回 Check 列表（val_loss 给出时第一项是验证损失）。"""
    if not poems:
        raise UserError("没有可以验收的诗：poems 为空")
    th = {**THRESHOLDS, **(thresholds or {})}
    unknown = set(th) - set(THRESHOLDS)
    if unknown:
        raise UserError(f"未知的门槛名 {sorted(unknown)}；可选：{', '.join(THRESHOLDS)}")
    poems = [p.removesuffix("\n") for p in poems]
    index = substring_index(train_text)
    checks = []
    if val_loss is not None:
        checks.append(Check("验证集损失 (nats/字)", val_loss, th["val_loss"], False))
    checks += [
        Check("格律合格率", sum(map(is_valid_form, poems)) / len(poems), th["form_rate"], True),
        Check("逐句照抄率", copied_line_rate(poems, train_lines(train_text)),
              th["copied_lines"], False),
        Check("与训练集最长公共子串 (字, 平均)",
              float(np.mean([len(index.longest_shared(p)) for p in poems])),
              th["longest_shared"], False, ".1f"),
        Check("distinct-1", distinct_n(poems, 1), th["distinct_1"], True),
        Check("distinct-2", distinct_n(poems, 2), th["distinct_2"], True),
        Check("字重复率 (平均)", float(np.mean([repetition_rate(p) for p in poems])),
              th["repetition"], False),
    ]
    rhyme_rate, tonal_share = rates(poems)
    checks += [Check("押韵率", rhyme_rate, th["rhyme_rate"], True),
               Check("重韵率", repeated_rhyme_rate(poems), th["repeated_rhymes"], False),
               Check("平仄合格率", tonal_share, th["tonal_share"], True)]
    return checks


def _width(s: str) -> int:
    """终端显示宽度：汉字与全角符号占两格。"""
    return sum(2 if ord(c) > 0x2E80 else 1 for c in s)


def _pad(s: str, w: int) -> str:
    return s + " " * (w - _width(s))


def acceptance_table(checks: list[Check]) -> str:
    """像发布闸门那样排成一张表：检查项 / 测得值 / 门槛 / PASS|FAIL，最后一行是总结论。"""
    head = ("检查项", "测得值", "门槛", "结果")
    rows = [(c.name, format(c.value, c.fmt), c.rule, "PASS" if c.passed else "FAIL")
            for c in checks]
    widths = [max(_width(r[i]) for r in [head, *rows]) + 2 for i in range(4)]
    line = "-" * sum(widths)
    out = ["验收 (acceptance)", line, "".join(_pad(h, w) for h, w in zip(head, widths)), line]
    out += ["".join(_pad(x, w) for x, w in zip(r, widths)) for r in rows]
    n_pass = sum(c.passed for c in checks)
    verdict = "放行 PASS" if n_pass == len(checks) else "不放行 FAIL"
    out += [line, f"结论：{verdict}（{n_pass}/{len(checks)} 项通过）"]
    return "\n".join(out)
