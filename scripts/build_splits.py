"""重新生成 data/ 里唐诗语料的 train/val/test 文件：近似重复的诗整组进同一个划分。

输入：data/tang_jinti_meta.tsv（split, author, title, body；全部近体诗，按来源顺序）。
输出：data/tang_jinti.{train,val,test}.txt、data/tang_5jue.{train,val,test}.txt，
并把 meta 文件的 split 列改成新的划分。规则只有一处：``gptcourse.data.assign_splits``。
同一输入永远得到同一输出（可以反复运行）。打印划分前后的泄漏数与“一字之差”的异体字候选。

    python scripts/build_splits.py            # 重写 data/ 下的文件
    python scripts/build_splits.py --check    # 只检查文件是否已是最新（不写）
"""
from __future__ import annotations

import argparse
import csv
import re
import sys
from collections import Counter

from gptcourse.data import SPLITS, _lines, _near_pairs, assign_splits, leak_count, split_of
from gptcourse.runtime import DATA_DIR

META = DATA_DIR / "tang_jinti_meta.tsv"
FIVE_JUE = re.compile(r"^(?:[^，。？！；]{5}，[^，。？！；]{5}。){2}$")   # 五绝子集：只用 ，。


def read_meta() -> tuple[list[str], list[list[str]]]:
    with META.open(encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return rows[0], rows[1:]


def variant_candidates(bodies: list[str], top: int = 40) -> list[tuple[str, int]]:
    """近似重复的诗之间“同长、只差一个字”的句子里，最常见的字对（异体字表的候选）。"""
    counts: Counter = Counter()
    for i, j in _near_pairs(bodies):
        for a, b in zip(_lines(bodies[i]), _lines(bodies[j])):
            diff = [(x, y) for x, y in zip(a, b) if x != y]
            if len(a) == len(b) and len(diff) == 1:
                counts["/".join(sorted(diff[0]))] += 1
    return counts.most_common(top)


def build_files() -> tuple[dict[str, str], list[str], list[str]]:
    """按新规则算出 data/ 下每个文件应有的内容；也返回每首诗的旧、新划分。"""
    header, rows = read_meta()
    bodies = [r[3] for r in rows]
    old, new = [split_of(b) for b in bodies], assign_splits(bodies)
    files: dict[str, str] = {}
    for name, keep in (("tang_jinti", lambda b: True), ("tang_5jue", FIVE_JUE.match)):
        for s in SPLITS:
            files[f"{name}.{s}.txt"] = "".join(b + "\n" for b, x in zip(bodies, new)
                                               if x == s and keep(b))
    lines = ["\t".join(header)] + ["\t".join([x] + r[1:]) for r, x in zip(rows, new)]
    files[META.name] = "\n".join(lines) + "\n"
    return files, old, new


def stale_files(files: dict[str, str]) -> list[str]:
    return [n for n, text in files.items() if (DATA_DIR / n).read_text(encoding="utf-8") != text]


def report(old: list[str], new: list[str]) -> None:
    bodies = [r[3] for r in read_meta()[1]]

    def by(splits, s):
        return [b for b, x in zip(bodies, splits) if x == s]

    for label, sl in (("旧规则（逐首哈希）", old), ("新规则（近似重复整组）", new)):
        sizes = " / ".join(f"{len(by(sl, s)):,}" for s in SPLITS)
        train = by(sl, "train")
        print(f"{label}：train/val/test = {sizes}；与训练集近似重复的 val "
              f"{leak_count(train, by(sl, 'val'))}、test {leak_count(train, by(sl, 'test'))} 首")
    print(f"换了划分的诗：{sum(a != b for a, b in zip(old, new)):,} 首")
    pairs = variant_candidates(bodies)
    print("异体字候选（字对: 次数）：", "  ".join(f"{p}:{n}" for p, n in pairs))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="只检查，不写文件；过期时退出码 1")
    args = ap.parse_args(argv)
    files, old, new = build_files()
    stale = stale_files(files)
    if args.check:
        print("已是最新" if not stale else f"过期的文件：{', '.join(stale)}")
        return 1 if stale else 0
    report(old, new)
    for n in stale:
        (DATA_DIR / n).write_text(files[n], encoding="utf-8")
    print(f"写入 {len(stale)} 个文件：{', '.join(stale) or '（无变化）'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
