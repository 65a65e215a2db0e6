"""账本：笔记本正文里每一句带数字或说模型行为的话，要么由代码单元格算出来，要么登记在
``docs/claims/<笔记本>.toml`` 里，由默认的 ``pytest``（``tests/test_claims.py``）对着**现在的**来源
重新算一遍。重训 ``course.pt``、重跑基准、重跑笔记本之后，过时的一句话让 CI 变红。

一条登记（TOML 的 ``[[claim]]``）::

    [[claim]]
    cell = "1b2c3d4e"          # 笔记本里那个 markdown 单元格的 id
    quote = "83 %"             # 那个单元格里原样出现的几个字（盖住句中的数字或说法）
    kind = "figure"            # figure | behaviour | fact
    value = "meta['release']['free']['rhyme'] * 100"   # figure：对来源求值
    expect = 83                # figure：句子里写的数；|value - expect| ≤ tol
    tol = 1
    # 或者 check = "……"       # figure / behaviour：一个必须为真的表达式
    # fact：ref = "出处或理由"（定义、教科书事实、课程的写法，不随模型变）

表达式里能用的名字见 :class:`Sources`：``meta``（课程检查点的 meta）、``config``、``bench``
（docs/benchmarks.json）、``trials``（docs/recipe_trials.json）、``rhyme``（docs/rhyme_study.json）、
``out(id)``（同一笔记本里某个代码单元格提交的输出文字）、``code(id)``（它的源码）、
``num(id, 正则)``（输出里的一个数）、``runtime()``（提交的完整模式运行用了多少秒）、
``exercises``（本章练习的 grade id）、``src(对象或模块名)``（包里的源码：句子说代码怎么写）、
``gc``、``math``、``re``、``torch``、``inspect``。

命令行：``python -m gptcourse_kit.claims [笔记本…]`` 列出没登记的句子与不成立的登记；
``--todo`` 把没登记的句子写成待填的 TOML 草稿。
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import json
import math
import re
import sys
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import tomllib
import torch

from gptcourse.runtime import ROOT

NOTEBOOKS = ROOT / "notebooks"
LEDGER = ROOT / "docs" / "claims"
KINDS = ("figure", "behaviour", "fact")

# ---------------------------------------------------------------- 哪些句子要登记
UNITS = (r"%|％|×|倍|秒|分钟|小时|毫秒|ms\b|s\b|MB|GB|KB|MiB|GiB|KiB|万|亿|个|首|步|次|行|"
         r"字|条|维|层|"
         r"头|词元|token|tok/s|篇|句|轮|组|位|种|张|份|处|道|年|天|周|遍|节课|分\b|倍速")
_NUM = r"(?<![\w.§\-+−])\d+(?:[.,]\d+)*"
FIGURE = re.compile(rf"{_NUM}\s*(?:{UNITS})|{_NUM}\s*/\s*\d+|{_NUM}\s*[–~\-]\s*\d+"
                    r"|(?<![\w.])\d+\.\d+")
NOT_A_FIGURE = re.compile(r"\s*(?:节|章|小节)|\.\s")       # “3.5 节”“第 2 章”是位置，不是结论
ORDINAL_BEFORE = re.compile(r"(?:练习|第|§|图|表|步骤|题)\s*(?:\d+\s*[、,，和与或]\s*)*$")
BEHAVIOUR = re.compile(r"押韵|不押|重韵|不会|学会了|学不会|更快|更慢|快了|慢了|样本外|"
                       r"从没用过|没用过|"
                       r"从未见过|没见过|做不到|总是|从不|一次也没")
_MASKS = [re.compile(p, re.S) for p in (
    r"```.*?```", r"`[^`\n]*`", r"\$\$.*?\$\$", r"\$[^$\n]*\$", r"<[^>\n]*>", r"\]\([^)\n]*\)",
    r"https?://\S+")]


def masked(text: str) -> str:
    """代码、公式、HTML 标签与链接地址换成同样长度的空白：位置不变，里面的数字不算结论。"""
    for pattern in _MASKS:
        text = pattern.sub(lambda m: re.sub(r"\S", " ", m.group()), text)
    return text


@dataclass
class Sentence:
    """markdown 单元格里要登记的一句话：在单元格源码里的位置、其中的数字、是否说了模型行为。"""
    cell: str
    start: int
    end: int
    text: str
    figures: list[tuple[int, int]]          # 单元格源码里的 [start, end)
    behaviour: bool


def sentences(cell_id: str, source: str) -> list[Sentence]:
    """一个 markdown 单元格里要登记的句子（标题行不算：里面的数字是节号）。"""
    hidden, out, pos = masked(source), [], 0
    for line in source.split("\n"):
        begin, pos = pos, pos + len(line) + 1
        if line.lstrip().startswith("#"):
            continue
        start = begin
        for piece in re.split(r"(?<=[。！？；])", hidden[begin:begin + len(line)]):
            end = start + len(piece)
            figures = [(start + m.start(), start + m.end()) for m in FIGURE.finditer(piece)
                       if not NOT_A_FIGURE.match(piece, m.end())
                       and not ORDINAL_BEFORE.search(piece[:m.start()])]
            figures = [f for f in figures if not _enumerator(source, f)]
            said = bool(BEHAVIOUR.search(piece))
            if figures or said:
                out.append(Sentence(cell_id, start, end, source[start:end].strip(), figures, said))
            start = end
    return out


def _enumerator(source: str, span: tuple[int, int]) -> bool:
    """行首的 “1. ” 是列表的编号。"""
    line_start = source.rfind("\n", 0, span[0]) + 1
    return not source[line_start:span[0]].strip() and source[span[1]:span[1] + 1] == "."


# ---------------------------------------------------------------- 登记
@dataclass
class Claim:
    notebook: str
    cell: str
    quote: str
    kind: str
    value: str | None = None
    expect: float | None = None
    tol: float = 0.0
    check: str | None = None
    ref: str | None = None
    source: str = field(default="", repr=False)     # 出错时指明是哪个文件

    @property
    def label(self) -> str:
        return f"{self.notebook} {self.cell} 「{self.quote}」"


def ledger_path(notebook: str) -> Path:
    return LEDGER / f"{notebook}.toml"


class LedgerError(ValueError):
    """账本文件写错了（TOML 语法、字段、类型）或读不了：一句话说出哪个文件、第几条。"""


_TYPES = {"cell": str, "quote": str, "kind": str, "value": str, "check": str, "ref": str,
          "expect": (int, float), "tol": (int, float)}


def load_ledger(notebook: str, path: Path | None = None) -> list[Claim]:
    """读一个笔记本的登记；文件读不了、TOML 写错、字段写错时 :class:`LedgerError`（ValueError）
    说明是哪个文件、哪一条。"""
    path = path or ledger_path(notebook)
    if not path.exists():
        return []
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        why = getattr(e, "strerror", None) or " ".join(str(e).split())[:160]
        raise LedgerError(f"{path.name} 读不了或不是合法的 TOML：{why}") from None
    items = data.get("claim", [])
    if not isinstance(items, list):
        raise LedgerError(f"{path.name}：登记要写成 [[claim]]（表的数组），"
                          f"这里是 {type(items).__name__}")
    out = []
    for i, item in enumerate(items, 1):
        if not isinstance(item, dict):
            raise LedgerError(f"{path.name} 第 {i} 条登记写错了：{item!r}")
        unknown = set(item) - set(_TYPES)
        typed = all(isinstance(v, _TYPES[k]) and not isinstance(v, bool)
                    for k, v in item.items() if k in _TYPES)
        if unknown or not typed or not {"cell", "quote", "kind"} <= set(item) \
                or item["kind"] not in KINDS:
            raise LedgerError(f"{path.name} 第 {i} 条登记写错了（字段只能是 {'、'.join(_TYPES)}；"
                              f"cell、quote、kind 必填；kind 是 {' | '.join(KINDS)}；"
                              f"expect、tol 是数，其余是字符串）：{item}")
        claim = Claim(notebook, source=path.name, **item)
        shape = {"figure": (claim.value is not None and claim.expect is not None)
                 or claim.check is not None,
                 "behaviour": claim.check is not None,
                 "fact": bool(claim.ref)}[claim.kind]
        if not shape:
            raise LedgerError(f"{path.name} 第 {i} 条（{claim.label}）：figure 要 value+expect 或 "
                              f"check，behaviour 要 check，fact 要 ref")
        out.append(claim)
    return out


# ---------------------------------------------------------------- 来源
class Sources:
    """表达式里能用的来源；都是用到时才读，读的是仓库里现在的文件。"""

    def __init__(self, notebook: str, root: Path = ROOT, overrides: dict | None = None):
        self.notebook, self.root = notebook, Path(root)
        self.overrides = overrides or {}

    @cached_property
    def nb(self) -> dict:
        return json.loads((self.root / "notebooks" / f"{self.notebook}.ipynb").read_text("utf-8"))

    @cached_property
    def cells(self) -> dict[str, dict]:
        return {c.get("id"): c for c in self.nb["cells"]}

    def _json(self, name: str) -> dict:
        return json.loads((self.root / "docs" / name).read_text(encoding="utf-8"))

    @cached_property
    def checkpoint(self) -> dict:
        from gptcourse import checkpoint
        return checkpoint.load_raw(self.root / "data" / "checkpoints" / "course.pt")

    def out(self, cell_id: str) -> str:
        """代码单元格提交的输出文字（stdout、stderr，显示的 text/markdown 或 text/plain）。"""
        cell = self.cells.get(cell_id)
        if cell is None or cell["cell_type"] != "code":
            raise KeyError(f"{self.notebook} 里没有 id 为 {cell_id} 的代码单元格")
        parts = []
        for o in cell.get("outputs", []):
            if o["output_type"] == "stream":
                parts.append("".join(o["text"]))
            elif "data" in o:                      # display(Markdown(...)) 打印的句子也算
                for kind in ("text/markdown", "text/plain"):
                    if kind in o["data"]:
                        parts.append("".join(o["data"][kind]))
                        break
        return "".join(parts)

    def code(self, cell_id: str) -> str:
        """代码单元格的源码（句子说“训练 300 词元的 BPE”，就查代码里确实是 300）。"""
        cell = self.cells.get(cell_id)
        if cell is None or cell["cell_type"] != "code":
            raise KeyError(f"{self.notebook} 里没有 id 为 {cell_id} 的代码单元格")
        return "".join(cell["source"])

    def num(self, cell_id: str, pattern: str, group: int = 1) -> float:
        """输出里第一个匹配 ``pattern`` 的数（第 ``group`` 组，去掉千分位逗号）。"""
        m = re.search(pattern, self.out(cell_id))
        if m is None:
            raise LookupError(f"{self.notebook} 单元格 {cell_id} 的输出里找不到 {pattern!r}")
        return float(m.group(group).replace(",", ""))

    def runtime(self) -> float:
        """提交的那次完整运行从第一个单元格开始到最后一个结束的秒数（单元格的执行时间戳）。"""
        from datetime import datetime
        stamps = [c["metadata"]["execution"] for c in self.nb["cells"]
                  if c["cell_type"] == "code" and "execution" in c.get("metadata", {})]
        if not stamps:
            raise LookupError(f"{self.notebook} 没有记下执行时间戳；用 num() 读它打印的用时")
        first = datetime.fromisoformat(stamps[0]["iopub.execute_input"].replace("Z", "+00:00"))
        last = datetime.fromisoformat(stamps[-1]["shell.execute_reply"].replace("Z", "+00:00"))
        return (last - first).total_seconds()

    @cached_property
    def exercises(self) -> list[str]:
        return [c["metadata"]["nbgrader"]["grade_id"] for c in self.nb["cells"]
                if c.get("metadata", {}).get("nbgrader", {}).get("solution")]

    def namespace(self) -> dict:
        import gptcourse as gc
        lazy = {"meta": lambda: self.checkpoint["meta"],
                "config": lambda: self.checkpoint["config"],
                "bench": lambda: self._json("benchmarks.json"),
                "trials": lambda: self._json("recipe_trials.json"),
                "rhyme": lambda: self._json("rhyme_study.json")}
        ns = {"out": self.out, "code": self.code, "num": self.num, "runtime": self.runtime,
              "src": source_of, "gc": gc, "math": math, "re": re, "torch": torch,
              "inspect": inspect, "exercises": self.exercises}
        return _Lazy(ns, lazy, self.overrides)


def source_of(obj) -> str:
    """对象（或 ``"gptcourse.cli.train"`` 这样的模块名）的源码。"""
    if isinstance(obj, str):
        obj = importlib.import_module(obj)
    return inspect.getsource(obj)


class _Lazy(dict):
    """名字第一次用到时才读来源（不用 meta 的登记不读检查点）。"""

    def __init__(self, ready: dict, lazy: dict, overrides: dict):
        super().__init__(ready)
        self.lazy = lazy
        self.update(overrides)

    def __missing__(self, key):
        if key in self.lazy:
            self[key] = self.lazy[key]()
            return self[key]
        raise KeyError(key)


_CACHE: dict[tuple, dict] = {}


def _namespace(sources: Sources) -> dict:
    key = (sources.notebook, str(sources.root), id(sources.overrides) if sources.overrides else 0)
    if key not in _CACHE:
        _CACHE[key] = sources.namespace()
    return _CACHE[key]


def evaluate(claim: Claim, sources: Sources) -> str | None:
    """一条登记成立时返回 None，否则返回一句说明（过时了：现在的来源算出多少）。"""
    cell = sources.cells.get(claim.cell)
    if cell is None:
        return f"{claim.label}：笔记本里没有这个单元格了"
    if claim.quote not in "".join(cell["source"]):
        return f"{claim.label}：单元格里已经没有这几个字了（正文改了，登记没跟上）"
    if claim.kind == "fact":
        return None
    ns = _namespace(sources)
    expr = claim.check if claim.check is not None else claim.value
    try:
        for name in set(re.findall(r"[A-Za-z_]\w*", expr)) & set(ns.lazy):
            ns[name]                                                # 用到的来源先读进来
        scope = {**ns, "__builtins__": __builtins__}                # 推导式里也看得见这些名字
        got = eval(expr, scope)                                     # noqa: S307 登记是仓库里的文件
        holds = bool(got) if claim.check is not None else None      # 多个元素的张量：说清楚
        got = float(got) if claim.check is None else got            # 字符串、None：说清楚
    except Exception as e:                                          # noqa: BLE001 来源变了也要说清楚
        return f"{claim.label}：{expr} 算不出来（{type(e).__name__}: {e}）"
    if claim.check is not None:
        return None if holds else f"{claim.label}：{expr} 现在不成立"
    if not abs(got - float(claim.expect)) <= claim.tol:
        return (f"{claim.label}：句子写的是 {claim.expect:g}，{expr} 现在是 {float(got):.6g}"
                f"（容差 {claim.tol:g}）")
    return None


def uncovered(notebook: str, claims: list[Claim], nb: dict | None = None) -> list[str]:
    """没有登记盖住的句子：数字要落在某条登记引的字里；说行为的句子要有一条登记引的字在句中。"""
    nb = nb or Sources(notebook).nb
    by_cell: dict[str, list[Claim]] = {}
    for c in claims:
        by_cell.setdefault(c.cell, []).append(c)
    missing = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        source = "".join(cell["source"])
        spans = [(m.start(), m.start() + len(c.quote)) for c in by_cell.get(cell.get("id"), [])
                 for m in re.finditer(re.escape(c.quote), source)]
        for s in sentences(cell.get("id"), source):
            bare = [f for f in s.figures if not any(a <= f[0] and f[1] <= b for a, b in spans)]
            said = s.behaviour and not any(a < s.end and s.start < b for a, b in spans)
            if bare or said:
                what = "、".join(source[a:b] for a, b in bare) or "行为"
                missing.append(f"{notebook} {s.cell}（{what}）：{s.text}")
    return missing


def notebooks() -> list[str]:
    return sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def _todo(notebook: str, claims: list[Claim]) -> str:
    nb = Sources(notebook).nb
    lines = []
    for text in uncovered(notebook, claims, nb):
        cell = text.split(" ")[1].split("（")[0]
        lines += ["[[claim]]", f'cell = "{cell}"', f"# {text}", 'quote = ""', 'kind = ""', ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gptcourse_kit.claims",
                                     description="核对笔记本正文里的结论与账本 docs/claims/")
    parser.add_argument("names", nargs="*", help="笔记本名（默认全部）")
    parser.add_argument("--todo", action="store_true", help="把没登记的句子写成 TOML 草稿")
    args = parser.parse_args(argv)
    names = args.names or notebooks()
    bad = 0
    for name in names:
        if name not in notebooks():
            print(f"错误：没有笔记本 {name!r}；现有：{', '.join(notebooks())}", file=sys.stderr)
            return 2
        try:
            claims = load_ledger(name)
        except LedgerError as e:
            print(f"错误：{' '.join(str(e).split())}", file=sys.stderr)
            return 2
        if args.todo:
            print(_todo(name, claims))
            continue
        sources = Sources(name)
        failures = [m for c in claims if (m := evaluate(c, sources))]
        missing = uncovered(name, claims, sources.nb)
        print(f"{name}：登记 {len(claims)} 条，不成立 {len(failures)} 条，"
              f"没登记的句子 {len(missing)} 句")
        for line in failures + missing:
            print("  " + line)
        bad += len(failures) + len(missing)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
