"""近体诗的格律：全课唯一的一套规则——断句、诗体、平水韵的韵部与平仄、押韵与平仄检查。

约束解码（:mod:`gptcourse.constraints`）、验收（:mod:`gptcourse.acceptance`）与网页演示都用这里的规则，
所以"解码能写出来的"和"验收算合格的"永远是同一回事。

**汉字**：CJK 统一表意文字基本区 U+4E00–9FFF、扩展 A（U+3400–4DBF）、扩展 B–H（U+20000–323AF）
与兼容表意文字（U+F900–FAFF、U+2F800–2FA1F）。假名、"〇"、<unk>（U+FFFD）都不是汉字。

**断句与诗体**：一句 = 两个句末标点之间的字（句末标点 ``LINE_ENDS`` = "，。？！"；诗体、押韵、
平仄都按这同一种断句）。"；""：""、"（``PUNCT`` 里的其余标点）不断句：含有它们的一句不是汉字句，
这首诗不合诗体。四种近体诗：4 或 8 句，每句同为 5 或 7 个汉字；单数句（第 1、3…句）以"，"
结尾，双数句（一联的末尾）以"。"结尾，"。"也可以换成"？""！"（后人加的语气标点：问句、叹句
一般在一联末尾收住；语料里 ？！ 只出现在这里）。
单数句末的"？""！"不算（《唐诗三百首》319 首里有 14 首这样标点，例如《黄鹤楼》
"日暮乡关何处是？"——这样的诗要把它改回"，"才算合格）。
诗末的一个换行（结束符）可以有，别的字符都不行。

**平水韵**：106 个韵部（平声 30、上声 29、去声 30、入声 17），表在 ``data/pingshui.tsv``
（来源与许可见 ``data/SOURCES.md``）。一个字可以属于几个韵部（多音字、繁简合并）：``tone`` 是
"平"（只在平声韵部）、"仄"（只在仄声韵部）、"中"（两种都有，可平可仄）或 None（表里没有）。

**押韵**（``check_rhyme``）：双数句的末字（韵脚）同属一个平声韵部；首句可押可不押。多音字只要它的
某个平声韵部就是共同的那个就算数。表里没有的字或仄声字做韵脚 = 不押韵（无法确认就不算）。
默认严格：首句也必须同部才算入韵；``neighbours=True`` 时首句可以借 ``NEIGHBOURS`` 里的邻韵
（"首句借邻韵"），双数句永远严格。

**重韵**（``check_rhyme(...).repeated``）：同一个字在一首诗里做了两次韵脚（入韵的首句末字也算），
例如"恩……恩"。近体诗忌重韵（真实的验证集诗 1,774 首里只有 7 首，见 ``acceptance.THRESHOLDS``）。
``strict=True`` 时重韵的诗不算押韵；默认只报告，押韵率照旧只看韵部。

**平仄**（``check_tones``，只对合格的诗体）：每条规则只比较句中第 2、4、6 字（"一三五不论"）：

- 分明：一句之内第 2、4 字平仄相反，七言第 4、6 字也相反；
- 对：一联（第 1–2、3–4…句）里，下句的第 2、4、(6) 字与上句相反；
- 粘：下一联的上句第 2 字与上一联的下句第 2 字相同（第 3 句粘第 2 句，第 5 句粘第 4 句…）。

每条规则的结果是 True（成立）、False（不成立）或 None（有"中"或表外的字，无法判断）；
平仄合格率 = 成立 / 可判断。拗救（一处拗、另一处救）不单独识别：拗的那一处照样记为不成立。

**孤平与三平尾**（``check_taboos``，只对合格的诗体；只报告，不计入平仄合格率）："一三五不论"
有两个例外，都只看一句的最后五个字（七言的前两字不论）：

- 不犯孤平："平平仄仄平"型的句子（五字里第二、四、五字是 平、仄、平；七言"仄仄平平仄仄平"），
  第一、三字（七言第三、五字）不能都用仄声："仄平仄仄平"除了韵脚只剩一个平声字，叫孤平。
  第一字用了仄声，把第三字换成平声可以救："仄平平仄平"不算孤平（孤平拗救，例如许浑
  《咸阳城东楼》"山雨欲来风满楼"）。别的句型不检查孤平（"仄仄仄平平"是正格）。
- 不犯三平尾：一句的最后三个字不能都是平声（"下三平"，古体诗的声调；例如崔颢《黄鹤楼》
  "白云千载空悠悠"）。

有"中"或表外的字时，两种读法都试：结论一样就用它，不一样就是 None（无法判断）。
"""
from __future__ import annotations

import itertools
import random
from dataclasses import asdict, dataclass, field
from functools import cache, lru_cache
from typing import NamedTuple

from .errors import UserError

PUNCT = "，。？！；：、"                  # 诗里可能出现的标点（语料里实际只出现 ，。？！）
COMMA, PERIOD = "，", "。"
ODD_ENDS = "，"                           # 单数句（第 1、3…句）可用的句末标点
EVEN_ENDS = "。？！"                      # 双数句可用的句末标点
LINE_ENDS = ODD_ENDS + EVEN_ENDS          # 断句只看这四个（诗体、押韵、平仄同一套）
FORMS: dict[str, tuple[int, int]] = {"五绝": (5, 4), "五律": (5, 8), "七绝": (7, 4), "七律": (7, 8)}
FORM_OF: dict[tuple[int, int], str] = {v: k for k, v in FORMS.items()}    # (字数, 句数) → 名字
# 诗体的几何都从 FORMS 推出来（加一种诗体 = FORMS 加一行）；别的模块不写 5/7/4/8 这样的字面量
LINE_LENGTHS: tuple[int, ...] = tuple(sorted({L for L, _ in FORMS.values()}))   # 每句几个字：(5, 7)
LINE_COUNTS: tuple[int, ...] = tuple(sorted({n for _, n in FORMS.values()}))    # 每首几句：(4, 8)
LONGEST_LINE, MOST_LINES = LINE_LENGTHS[-1], LINE_COUNTS[-1]
PING, ZE, BOTH = "平", "仄", "中"
# 常见的邻韵（同一组里的平声韵部互为邻韵），只用于"首句借邻韵"
NEIGHBOURS = (("东", "冬"), ("江", "阳"), ("支", "微", "齐"), ("鱼", "虞"), ("佳", "灰"),
              ("真", "文", "元"), ("寒", "删", "先"), ("萧", "肴", "豪"), ("庚", "青", "蒸"),
              ("覃", "盐", "咸"))


def is_hanzi(ch: str) -> bool:
    """一个汉字（范围见模块说明）。"""
    if len(ch) != 1:
        return False
    c = ord(ch)
    return (0x4E00 <= c <= 0x9FFF or 0x3400 <= c <= 0x4DBF or 0x20000 <= c <= 0x323AF
            or 0xF900 <= c <= 0xFAFF or 0x2F800 <= c <= 0x2FA1F)


def end_marks(line: int) -> str:
    """第 line 句（从 0 数）允许的句末标点。"""
    return ODD_ENDS if line % 2 == 0 else EVEN_ENDS


# ---------------------------------------------------------------- 断句与诗体
def line_spans(poem: str) -> list[tuple[int, int, str]]:
    """每一句在 poem 里的位置：[(起, 止, 句末标点)]，poem[起:止] 是这一句的字；最后一句若没有
    标点，标点为 ""。只有 ``LINE_ENDS`` 断句（"；：、"留在句子里）。"""
    spans, start = [], 0
    for i, c in enumerate(poem):
        if c in LINE_ENDS:
            spans.append((start, i, c))
            start = i + 1
    if start < len(poem):
        spans.append((start, len(poem), ""))
    return spans


def forms_with(n_lines: int) -> tuple[str, ...]:
    """有 n_lines 句的诗体。

    >>> forms_with(4)
    ('五绝', '七绝')
    """
    return tuple(name for name, (_, n) in FORMS.items() if n == n_lines)


def line_ends(poem: str) -> list[int]:
    """每一句（有句末标点、不空）末字在 poem 里的下标。

    >>> line_ends("白日依山尽，黄河入海流。")
    [4, 10]
    """
    return [b - 1 for a, b, mark in line_spans(poem) if mark and b > a]


def split_lines(poem: str) -> tuple[list[str], list[str]]:
    """把一首诗拆成 (句子列表, 每句后面的标点列表)；最后一句若没有标点，对应的标点为 ""。

    >>> split_lines("白日依山尽，黄河入海流。")
    (['白日依山尽', '黄河入海流'], ['，', '。'])
    """
    spans = line_spans(poem)
    return [poem[a:b] for a, b, _ in spans], [m for _, _, m in spans]


def poem_form(poem: str) -> str | None:
    """近体诗形式："五绝" / "五律" / "七绝" / "七律"，不合格式返回 None（规则见模块说明）。

    >>> poem_form("白日依山尽，黄河入海流。欲穷千里目，更上一层楼。")
    '五绝'
    >>> poem_form("白日依山尽，黄河入海流。欲穷千里目，更上一层楼")   # 缺最后的句号
    """
    if not isinstance(poem, str):
        raise TypeError(f"poem 应是字符串，收到 {type(poem).__name__}")
    lines, marks = split_lines(poem.removesuffix("\n"))
    if not lines or any(not line or not all(map(is_hanzi, line)) for line in lines):
        return None                       # 空诗、空句、混进了换行/字母/<unk> 等
    if len({len(line) for line in lines}) != 1:
        return None
    if any(m == "" or m not in end_marks(i) for i, m in enumerate(marks)):
        return None
    return FORM_OF.get((len(lines[0]), len(lines)))


def is_valid_form(poem: str) -> bool:
    """是否是四种近体诗形式之一。"""
    return poem_form(poem) is not None


def require_form(form) -> str:
    """``form`` 是 ``FORMS`` 里的诗体名时原样返回，否则抛出 UserError（列出可选的诗体）。"""
    if not isinstance(form, str) or form not in FORMS:
        raise UserError(f"未知的诗体 {form!r}；可选：{'、'.join(FORMS)}")
    return form


def check_form(poem: str, form: str | None = None, acrostic: str | None = None) -> bool:
    """一首完整的诗是否是近体诗，且（给了的话）是 form 这一体、各句首字依次是 acrostic。"""
    if form is not None:
        require_form(form)
    found = poem_form(poem)
    if found is None or (form is not None and found != form):
        return False
    lines = split_lines(poem.removesuffix("\n"))[0]
    return not acrostic or "".join(line[0] for line in lines) == acrostic


# ---------------------------------------------------------------- 平水韵
@lru_cache(maxsize=1)
def _table() -> tuple[dict[str, tuple[str, ...]], dict[str, str], dict[str, str]]:
    """读 data/pingshui.tsv → (字 → 韵部们, 韵部 → 平/仄, 韵部 → 它的字)。

    表的每一行是"韵部 TAB 平|仄 TAB 来源 TAB 字"：一个韵部可以有几行（每个来源补上的字各一行，
    见 ``data/SOURCES.md``），韵部的字是这几行的并集。"""
    from .runtime import DATA_DIR

    groups: dict[str, tuple[str, ...]] = {}
    tone_of: dict[str, str] = {}
    chars_of: dict[str, str] = {}
    for row in (DATA_DIR / "pingshui.tsv").read_text(encoding="utf-8").splitlines():
        if row.startswith("#") or not row:
            continue
        name, tone, _source, chars = row.split("\t")
        tone_of[name] = tone
        chars_of[name] = chars_of.get(name, "") + chars
        for c in chars:
            if name not in groups.get(c, ()):
                groups[c] = groups.get(c, ()) + (name,)
    return groups, tone_of, chars_of


def rhyme_groups(ch: str) -> tuple[str, ...]:
    """ch 所在的全部韵部（表中顺序），例如 rhyme_groups("东") == ("上平一东",)；不在表里为 ()。"""
    return _table()[0].get(ch, ())


def ping_groups(ch: str) -> tuple[str, ...]:
    """ch 所在的平声韵部。"""
    tone_of = _table()[1]
    return tuple(g for g in rhyme_groups(ch) if tone_of[g] == PING)


def tone(ch: str) -> str | None:
    """"平" / "仄" / "中"（可平可仄）/ None（不在表里，包括标点）。"""
    tones = {_table()[1][g] for g in rhyme_groups(ch)}
    return None if not tones else (BOTH if len(tones) == 2 else tones.pop())


def group_names(tone_: str | None = None) -> tuple[str, ...]:
    """全部韵部名（表中顺序）；tone_="平" 只要平声的 30 个。"""
    return tuple(g for g, t in _table()[1].items() if tone_ is None or t == tone_)


def group_chars(name: str) -> str:
    """一个韵部的全部字。"""
    return _table()[2][resolve_group(name)]


class RhymeGroupError(UserError):
    """要求的韵部用不了：名字不是平声韵部（包括空字符串），或词表里没有这个韵部的字。"""


def resolve_group(name: str) -> str:
    """平声韵部的全名，或它的韵目字（"阳" → "下平七阳"）→ 全名；别的名字（包括 ""）抛出
    RhymeGroupError（ValueError 的子类）。"""
    for g in group_names(PING):
        if isinstance(name, str) and name in (g, g[-1]):
            return g
    raise RhymeGroupError(f"未知的平声韵部 {name!r}；可写全名或韵目字："
                          f"{'、'.join(group_names(PING))}")


def _neighbours(group: str) -> set[str]:
    for n in NEIGHBOURS:
        if group[-1] in n:
            return {g for g in group_names(PING) if g[-1] in n}
    return {group}


# ---------------------------------------------------------------- 押韵
def rhyme_lines(n_lines: int) -> tuple[int, ...]:
    """必须押韵的句（从 0 数）：双数句，即第 2、4…句。首句（0）可押可不押，见 :func:`check_rhyme`。

    >>> rhyme_lines(4)
    (1, 3)
    """
    return tuple(range(1, n_lines, 2))


def foot_lines(n_lines: int) -> tuple[int, ...]:
    """可能做韵脚的句：首句与双数句（重韵只看它们的末字）。

    >>> foot_lines(4)
    (0, 1, 3)
    """
    return (0, *rhyme_lines(n_lines))


@dataclass(frozen=True)
class RhymeCheck:
    rhymes: bool                 # 双数句的韵脚同属一个平声韵部（strict 时还要求没有重韵）
    group: str | None            # 那个韵部
    positions: list[int]         # 入韵的字在 poem 里的下标（首句入韵时包括首句末字）
    first_line: bool             # 首句是否入韵
    repeated: list[str] = field(default_factory=list)   # 重韵：做了不止一次韵脚的字（按出现顺序）


def check_rhyme(poem: str, neighbours: bool = False, strict: bool = False) -> RhymeCheck:
    """押韵与重韵检查（规则见模块说明）。少于两句（有句末标点的）时不押韵。

    >>> check_rhyme("红烛浓花发，朱衣落挂空。庭花香寂浩，门唤唱歌空。").repeated
    ['空']
    """
    if not isinstance(poem, str):
        raise TypeError(f"poem 应是字符串，收到 {type(poem).__name__}")
    ends = line_ends(poem)                              # 每句末字的下标
    even = [ends[i] for i in rhyme_lines(len(ends))]
    if not even:
        return RhymeCheck(False, None, [], False)
    shared = set(ping_groups(poem[even[0]]))
    for i in even[1:]:
        shared &= set(ping_groups(poem[i]))
    if not shared:
        return RhymeCheck(False, None, [], False)
    first = set(ping_groups(poem[ends[0]]))
    order = [g for g in group_names(PING) if g in shared]
    group = next((g for g in order if g in first), order[0])
    ok_first = group in first or (neighbours and bool(first & _neighbours(group)))
    positions = ([ends[0]] if ok_first else []) + even
    feet = [poem[i] for i in positions]
    repeated = [c for c in dict.fromkeys(feet) if feet.count(c) > 1]
    return RhymeCheck(not (strict and repeated), group, positions, ok_first, repeated)


# ---------------------------------------------------------------- 平仄
def tone_positions(line_len: int) -> tuple[int, ...]:
    """一句里要讲平仄的位置（从 0 数）：双数字，最后一个字（韵脚）之前。五言第 2、4 字，
    七言第 2、4、6 字。

    >>> tone_positions(5), tone_positions(7)
    ((1, 3), (1, 3, 5))
    """
    return tuple(range(1, line_len - 1, 2))


class TonePair(NamedTuple):
    """一条平仄规则：第 a 句第 i 字与第 b 句第 j 字（都从 0 数）相反（differ）或相同。
    后写的一端是 (b, j)；a 总是 b 或 b - 1（同一句，或上一句）。"""
    name: str
    a: int
    i: int
    b: int
    j: int
    differ: bool


@cache
def tone_pairs(line_len: int, n_lines: int) -> tuple[TonePair, ...]:
    """全部平仄规则（顺序：分明、对、粘；规则见模块说明）。``check_tones`` 逐条检查它们，
    约束解码（:mod:`gptcourse.constraints`）在写 (b, j) 这个字时用后一端是它的那几条。

    >>> tone_pairs(5, 4)[-1]
    TonePair(name='第1、2联相粘', a=1, i=1, b=2, j=1, differ=False)
    """
    P = tone_positions(line_len)
    pairs = [TonePair(f"第{k + 1}句第{p + 1}、{q + 1}字分明", k, p, k, q, True)
             for k in range(n_lines) for p, q in zip(P, P[1:])]
    pairs += [TonePair(f"第{k + 1}联第{p + 1}字相对", 2 * k, p, 2 * k + 1, p, True)
              for k in range(n_lines // 2) for p in P]
    pairs += [TonePair(f"第{k}、{k + 1}联相粘", 2 * k - 1, 1, 2 * k, 1, False)
              for k in range(1, n_lines // 2)]
    return tuple(pairs)


def _cmp(a: str | None, b: str | None, differ: bool) -> bool | None:
    if a not in (PING, ZE) or b not in (PING, ZE):
        return None
    return (a != b) if differ else (a == b)


def check_tones(poem: str) -> dict[str, bool | None]:
    """全部平仄规则 → True / False / None（无法判断）。不合诗体的诗没有可检查的规则：{}。"""
    if poem_form(poem) is None:
        return {}
    lines = split_lines(poem.removesuffix("\n"))[0]
    t = [[tone(c) for c in line] for line in lines]
    return {r.name: _cmp(t[r.a][r.i], t[r.b][r.j], r.differ)
            for r in tone_pairs(len(lines[0]), len(lines))}


def _every_reading(tones_: list[str | None]):
    """把"中"与表外的字（None）分别当平、当仄，列出全部读法。"""
    options = [(t,) if t in (PING, ZE) else (PING, ZE) for t in tones_]
    return itertools.product(*options)


def _decide(tones_: list[str | None], rule) -> bool | None:
    """rule 对每一种读法的结论都一样就返回它，否则 None。"""
    verdicts = {rule(reading) for reading in _every_reading(tones_)}
    return verdicts.pop() if len(verdicts) == 1 else None


def _no_gu_ping(core: tuple[str, ...]) -> bool:
    """最后五个字的一种读法不犯孤平（规则见模块说明）。"""
    if (core[1], core[3], core[4]) != (PING, ZE, PING):   # 不是"平平仄仄平"型：不会孤平
        return True
    return PING in (core[0], core[2])


def _no_san_ping(tail: tuple[str, ...]) -> bool:
    """一句末三字的一种读法不犯三平尾。"""
    return tail != (PING, PING, PING)


def check_taboos(poem: str) -> dict[str, bool | None]:
    """每一句的孤平、三平尾 → True（没犯）/ False（犯了）/ None（无法判断）。不合诗体：{}。

    >>> r = check_taboos("一上高城万里愁，蒹葭杨柳似汀洲。溪云初起日沉阁，山雨欲来风满楼。")
    >>> r["第4句不犯孤平"], r["第4句不犯三平尾"]           # 欲来风满楼：孤平拗救
    (True, True)
    """
    if poem_form(poem) is None:
        return {}
    rules: dict[str, bool | None] = {}
    for i, line in enumerate(split_lines(poem.removesuffix("\n"))[0]):
        core = [tone(c) for c in line[-5:]]
        rules[f"第{i + 1}句不犯孤平"] = _decide(core, _no_gu_ping)
        rules[f"第{i + 1}句不犯三平尾"] = _decide(core[-3:], _no_san_ping)
    return rules


# ---------------------------------------------------------------- 一首诗的格律报告
@dataclass
class Analysis:
    poem: str
    form: str | None                 # 五绝 / 五律 / 七绝 / 七律 / None
    valid_form: bool
    rhymes: bool
    rhyme_group: str | None
    rhyme_positions: list[int]       # 韵脚在 poem 里的下标
    first_line_rhymes: bool
    repeated_rhymes: list[str]       # 重韵的字（做了不止一次韵脚）；[] = 没有重韵
    tones: list[str | None]          # 与 poem 等长：每个字的 平/仄/中/None
    rules: dict[str, bool | None] = field(default_factory=dict)
    held: int = 0                    # 成立的规则数
    checkable: int = 0               # 可判断的规则数
    tonal_share: float | None = None  # held / checkable；没有可判断的规则时 None
    taboos: dict[str, bool | None] = field(default_factory=dict)   # 孤平、三平尾（只报告）

    def to_dict(self) -> dict:
        """可以直接 json.dumps 的字典（网页演示返回它）。"""
        return asdict(self)


def analyze(poem: str, neighbours: bool = False, strict: bool = False) -> Analysis:
    """一首诗的格律报告：诗体、押韵（韵部、韵脚位置、重韵）、每个字的平仄、平仄规则与合格率。"""
    if not isinstance(poem, str):
        raise TypeError(f"poem 应是字符串，收到 {type(poem).__name__}")
    form = poem_form(poem)
    r = check_rhyme(poem, neighbours, strict)
    rules = check_tones(poem)
    checkable = [v for v in rules.values() if v is not None]
    return Analysis(poem=poem, form=form, valid_form=form is not None, rhymes=r.rhymes,
                    rhyme_group=r.group, rhyme_positions=r.positions,
                    first_line_rhymes=r.first_line, repeated_rhymes=r.repeated,
                    tones=[tone(c) if is_hanzi(c) else None for c in poem], rules=rules,
                    held=sum(checkable), checkable=len(checkable),
                    tonal_share=sum(checkable) / len(checkable) if checkable else None,
                    taboos=check_taboos(poem))


# ---------------------------------------------------------------- 一组诗：押韵率与平仄合格率
def rates(poems: list[str]) -> tuple[float, float]:
    """(押韵率, 平仄合格率)。押韵率 = 合乎诗体且押韵的诗 / 全部诗；平仄合格率 = 全部诗里成立的
    规则 / 可判断的规则（合起来算，不是每首的平均）。"""
    if not poems:
        raise UserError("poems 为空")
    reports = [analyze(p.removesuffix("\n")) for p in poems]
    held, checkable = sum(a.held for a in reports), sum(a.checkable for a in reports)
    return (sum(a.valid_form and a.rhymes for a in reports) / len(reports),
            held / checkable if checkable else 0.0)


def repeated_rhyme_rate(poems: list[str]) -> float:
    """重韵率 = 合乎诗体、押韵、却有重韵的诗 / 全部诗。"""
    if not poems:
        raise UserError("poems 为空")
    reports = [analyze(p.removesuffix("\n")) for p in poems]
    return sum(a.valid_form and a.rhymes and bool(a.repeated_rhymes) for a in reports) / len(poems)


def swap_rhymes(poems: list[str], seed: int = 0) -> list[str]:
    """对照组 1：把所有诗双数句的韵脚收在一起随机打乱再放回（韵脚在诗与诗之间互换）。"""
    rng = random.Random(seed)
    slots = [(k, b - 1) for k, p in enumerate(poems)
             for _, b, m in line_spans(p)[1::2] if m and b > 0]
    chars = [poems[k][i] for k, i in slots]
    rng.shuffle(chars)
    out = [list(p) for p in poems]
    for (k, i), c in zip(slots, chars):
        out[k][i] = c
    return ["".join(p) for p in out]


def shuffle_chars(poems: list[str], seed: int = 0) -> list[str]:
    """对照组 2：每首诗里的汉字随机换位（标点不动），字频不变、格律全无。"""
    rng = random.Random(seed)
    out = []
    for p in poems:
        idx = [i for i, c in enumerate(p) if is_hanzi(c)]
        chars = [p[i] for i in idx]
        rng.shuffle(chars)
        q = list(p)
        for i, c in zip(idx, chars):
            q[i] = c
        out.append("".join(q))
    return out


def calibration(poems: list[str], seed: int = 0) -> dict[str, tuple[float, float]]:
    """真实的诗与两个打乱的对照组：{名字: (押韵率, 平仄合格率)}。"""
    return {"真实": rates(poems), "韵脚互换": rates(swap_rhymes(poems, seed)),
            "字序打乱": rates(shuffle_chars(poems, seed))}
