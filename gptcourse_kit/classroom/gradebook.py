"""成绩册：练习的分值、终端里的成绩表、Excel 能直接打开的 CSV、JSON。

分值：每道练习的“种类”取自章节模块（``EXERCISE_KINDS`` 或写成 {名字: 种类} 的 ``EXERCISES``）；
章节没写种类时按名字推断——``guess_*`` / ``predict_*`` 是“先猜一猜”的预测题，其余是自己写代码的
编程题。分值按种类查 ``KIND_WEIGHTS``（预测题 1 分、编程题 2 分），老师可以用一个 TOML 或
JSON 文件改（``load_weights``）::

    [kinds]            # 按种类改
    predict = 0.5
    [nb01]             # 按练习改（练习名见 python -m gptcourse_kit.classroom grade 打印的表头）
    bpe_train = 4

CSV 用带 BOM 的 UTF-8（中文 Windows 上的 Excel 双击就能正确显示），宽表每个学生一行。没用
openpyxl 写 .xlsx：带 BOM 的 CSV 在 Excel、WPS、LibreOffice 里都能直接打开，再加一个运行时依赖
换不来更多东西。
"""
from __future__ import annotations

import csv
import importlib
import json
import math
import re
import unicodedata
from collections.abc import Mapping
from pathlib import Path

from gptcourse import files

from .grade import Submission, readable

KIND_WEIGHTS = {"predict": 1.0, "build": 2.0}
KIND_NAMES = {"predict": "预测题", "build": "编程题"}
# 判决是怎样得出的：referee = 沙箱外的裁判进程调用检查器（学生的函数经代理调用）；
# in-process = 检查器在沙箱里与学生的代码同一个进程（grade.IN_SANDBOX 的题）；
# not-run = 一个字没写，没有运行
JUDGED = {"referee": "裁判进程", "in-process": "同进程", "not-run": "未运行"}
MARKS = {"正确": "✓", "答案不对": "✗", "未作答": "·", "出错": "!", "超时": "T"}
Weights = dict[str, dict[str, float]]


# ---------------------------------------------------------------- 分值
def exercise_kind(chapter: str, name: str) -> str:
    """练习的种类：章节模块写了就用它的，否则按名字推断（见模块说明）。"""
    mod = importlib.import_module(f"gptcourse.check.{chapter}")
    kinds = getattr(mod, "EXERCISE_KINDS", None)
    if kinds is None and isinstance(mod.EXERCISES, Mapping):
        kinds = mod.EXERCISES
    kind = kinds.get(name) if isinstance(kinds, Mapping) else None
    if kind in KIND_WEIGHTS:
        return kind
    short = re.split(r"[.:/]", name)[-1]
    return "predict" if short.startswith(("guess_", "predict_")) else "build"


MAX_POINTS = 1000            # 一道题最多这么多分（每个都有限、加起来却是 inf 的分值也就不可能了）


def load_weights(path: Path) -> Weights:
    """读老师的分值文件（.toml 或 .json）；写错的地方给出一句说明（ValueError）。"""
    path = Path(path)
    if not path.is_file():                                      # FIFO、目录：读了会卡住或报错
        raise ValueError(f"分值文件 {path} 不是一个普通文件")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"读不了分值文件 {path}：{e}") from None
    if path.suffix.lower() == ".toml":
        try:
            import tomllib
        except ImportError:                                             # Python 3.10
            raise ValueError(f"这个 Python 读不了 TOML（需要 3.11+）：把 {path} 改写成 JSON") \
                from None
        parse, errors = tomllib.loads, (tomllib.TOMLDecodeError,)
    else:
        parse, errors = json.loads, (json.JSONDecodeError,)
    try:
        data = parse(text)
    except errors as e:
        raise ValueError(f"分值文件 {path} 的格式不对：{e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"分值文件 {path} 应当是一张表（[kinds] 与 [nb01] 之类）")
    out: Weights = {}
    for section, table in data.items():
        if section != "kinds" and not re.fullmatch(r"nb0[1-5]", section):
            raise ValueError(f"分值文件 {path}：不认识 [{section}]，"
                             "只能是 [kinds] 或 [nb01]…[nb05]")
        if not isinstance(table, dict):
            raise ValueError(f"分值文件 {path}：[{section}] 应当是 名字 = 分值 的表")
        known = list(KIND_WEIGHTS) if section == "kinds" else _names(section)
        short = {re.split(r"[.:/]", k)[-1]: k for k in known}         # 也认不带章节前缀的名字
        fixed = {}
        for key, value in table.items():
            key = key if key in known else short.get(key, key)
            fixed[key] = value
            if key not in known:
                raise ValueError(f"分值文件 {path}：[{section}] 里没有 {key!r}；"
                                 f"可选：{', '.join(known)}")
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not math.isfinite(value) or not 0 <= value <= MAX_POINTS:
                raise ValueError(f"分值文件 {path}：[{section}] {key} 的分值应当是 0 到 "
                                 f"{MAX_POINTS:g} 之间的数，收到 {value!r}")
        out[section] = {k: float(v) for k, v in fixed.items()}
    return out


def _names(chapter: str) -> list[str]:
    from .grade import exercise_names
    return exercise_names(chapter)


def weight(chapter: str, name: str, weights: Weights | None = None) -> float:
    weights = weights or {}
    if name in weights.get(chapter, {}):
        return weights[chapter][name]
    kind = exercise_kind(chapter, name)
    return weights.get("kinds", {}).get(kind, KIND_WEIGHTS[kind])


def points_table() -> str:
    """教师指南里“作业与分值”的表：五章 ``EXERCISES`` 按种类分列，满分按默认分值算。"""
    from .grade import exercise_names
    rows = ["| 章 | 编程题（2 分） | 预测题（1 分） | 满分 |", "|---|---|---|---:|"]
    for num in range(1, 6):
        chapter = f"nb0{num}"
        names = exercise_names(chapter)
        build = [n for n in names if exercise_kind(chapter, n) == "build"]
        predict = [n for n in names if exercise_kind(chapter, n) != "build"]
        total = sum(weight(chapter, n) for n in names)
        rows.append(f"| 0{num} | {'、'.join(build)} | {'、'.join(predict)} | {total:g} |")
    return "\n".join(rows)


def scored(sub: Submission, weights: Weights | None = None) -> list[dict]:
    """作业的每道题加上分值 weight 与得分 points。"""
    return [{**e, "weight": (w := weight(sub.chapter, e["exercise"], weights)),
             "points": w if e["passed"] else 0.0} for e in sub.exercises]


def totals(sub: Submission, weights: Weights | None = None) -> tuple[float, float]:
    rows = scored(sub, weights)
    return sum(r["points"] for r in rows), sum(r["weight"] for r in rows)


# ---------------------------------------------------------------- 终端里的表
def display_width(text: str) -> int:
    """终端里占几列：东亚宽字符（汉字、全角标点）占 2 列，组合字符占 0 列。"""
    return sum(0 if unicodedata.combining(ch) else
               2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def pad(text: str, width: int, right: bool = False) -> str:
    fill = " " * max(0, width - display_width(text))
    return fill + text if right else text + fill


def _fmt(x: float) -> str:
    return f"{x:g}"


def table(subs: list[Submission], weights: Weights | None = None) -> str:
    """每章一张 学号 × 练习 的表，按显示宽度对齐；表头下面是练习编号与分值的图例。"""
    lines = []
    legend = "  ".join(f"{m} {s}" for s, m in MARKS.items())
    for chapter in sorted({s.chapter or "?" for s in subs}):
        group = [s for s in subs if (s.chapter or "?") == chapter]
        names = next((([e["exercise"] for e in s.exercises]) for s in group if s.exercises), [])
        lines.append(f"== {chapter}（{legend}）")
        items = [f"{i + 1}={n}（{_fmt(weight(chapter, n, weights))}分）"
                 for i, n in enumerate(names)]
        lines += ["   " + "  ".join(items[k:k + 4]) for k in range(0, len(items), 4)]
        head = ["学号", "姓名"]
        wid = [max(display_width(x) for x in [h, *(getattr(s, a) for s in group)])
               for h, a in zip(head, ("student", "name"))]
        cols = [pad(str(i + 1), 2, right=True) for i in range(len(names))]
        lines.append(f"{pad(head[0], wid[0])}  {pad(head[1], wid[1])}  {' '.join(cols)}  得分")
        notes = []
        for s in group:
            marks = " ".join(pad(MARKS[e["status"]], 2, right=True) for e in s.exercises)
            got, full = totals(s, weights) if s.chapter else (0.0, 0.0)
            pct = f"  {100 * got / full:.0f}%" if full else ""
            lines.append(f"{pad(s.student, wid[0])}  {pad(s.name, wid[1])}  "
                         f"{pad(marks, 3 * len(names) - 1)}  {_fmt(got)}/{_fmt(full)}{pct}")
            if s.error:
                notes.append(f"  {s.student}：{s.error}")
        lines += notes
    return "\n".join(lines)


# ---------------------------------------------------------------- 文件
def _atomic_write(path: Path, write, encoding: str = "utf-8-sig", newline: str | None = "",
                  **rules) -> None:
    """``write(f)`` 按 :mod:`gptcourse.files` 的规则写 path（旁边的临时文件 + ``os.replace``，
    不顺着链接写，不写到 ``rules["inputs"]`` 上，失败时删掉临时文件、一句话的错误）。"""
    with files.replacing(path, "w", encoding=encoding, newline=newline, **rules) as f:
        write(f)


def _columns(subs: list[Submission]) -> list[tuple[str, str]]:
    cols: list[tuple[str, str]] = []
    for s in subs:
        cols += [(s.chapter, e["exercise"]) for e in s.exercises
                 if (s.chapter, e["exercise"]) not in cols]
    return sorted(cols, key=lambda c: (c[0], cols.index(c)))


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


class _CsvWriter:
    """csv.writer，但以 = + - @、制表符或回车开头的文字前面加一个 '（OWASP 的做法）：Excel、WPS、
    LibreOffice 打开成绩册时不会把学生起的名字或代码发来的说明当公式执行。"""

    def __init__(self, f):
        self._w = csv.writer(f)

    def writerow(self, row) -> None:
        self._w.writerow([f"'{v}" if isinstance(v, str) and v.startswith(FORMULA_START) else v
                          for v in row])


def write_csv(subs: list[Submission], path: Path, weights: Weights | None = None,
              **rules) -> None:
    """成绩册：每个学生一行（学号、姓名、每道题的得分、总分、满分、百分比、备注）。"""
    cols = _columns(subs)
    chapters = {c for c, _ in cols}
    full = sum(weight(c, n, weights) for c, n in cols)
    rows: dict[str, dict] = {}
    for s in subs:
        row = rows.setdefault(s.student, {"name": s.name, "points": {}, "notes": []})
        row["points"].update({(s.chapter, r["exercise"]): r["points"] for r in scored(s, weights)}
                             if s.chapter else {})
        if s.error:
            row["notes"].append(s.error)
        row["notes"] += s.notes                      # 忽略的语句、演示单元格出错、疑似伪造……

    def write(f) -> None:
        w = _CsvWriter(f)
        head = [f"{n}（{_fmt(weight(c, n, weights))}分）" if len(chapters) == 1 else
                f"{c}.{n}（{_fmt(weight(c, n, weights))}分）" for c, n in cols]
        w.writerow(["学号", "姓名", *head, "总分", "满分", "百分比", "备注"])
        for sid, row in rows.items():
            got = sum(row["points"].values())
            w.writerow([sid, row["name"], *(_fmt(row["points"][c]) if c in row["points"] else ""
                                            for c in cols),
                        _fmt(got), _fmt(full), f"{100 * got / full:.1f}" if full else "",
                        "；".join(row["notes"])])
    _atomic_write(path, write, **rules)


def write_long_csv(subs: list[Submission], path: Path, weights: Weights | None = None,
                   **rules) -> None:
    """长表：每个学生的每道题一行（说明里的换行换成空格）。"""
    def write(f) -> None:
        w = _CsvWriter(f)
        w.writerow(["学号", "姓名", "笔记本", "章节", "练习", "结果", "得分", "分值", "说明",
                    "判决"])
        for s in subs:
            for r in (scored(s, weights) if s.chapter else []):
                w.writerow([s.student, s.name, readable(s.path), s.chapter, r["exercise"],
                            r["status"], _fmt(r["points"]), _fmt(r["weight"]),
                            " ".join(r["message"].split()),
                            JUDGED.get(r.get("judged", ""), "")])
            if not s.exercises:
                w.writerow([s.student, s.name, readable(s.path), s.chapter or "", "", "出错", 0, 0,
                            s.error or ""])
    _atomic_write(path, write, **rules)


def write_json(subs: list[Submission], path: Path, weights: Weights | None = None,
               **rules) -> None:
    data = []
    for s in subs:
        d = s.to_dict()
        if s.chapter:
            d["exercises"] = scored(s, weights)
            d["points"], d["max_points"] = totals(s, weights)
        data.append(d)
    text = json.dumps(data, ensure_ascii=False, indent=1)
    files.write_text(path, text, **rules)


FEEDBACK_CSS = """body{font-family:"Noto Sans CJK SC","PingFang SC","Microsoft YaHei",sans-serif;
max-width:860px;margin:2em auto;padding:0 1em;color:#222;line-height:1.6}
table{border-collapse:collapse;width:100%}th,td{border:1px solid #ccc;padding:.4em .6em;
vertical-align:top;text-align:left}th{background:#f4f0ec}pre{margin:0;white-space:pre-wrap;
font-family:inherit}.正确{color:#186a3b}.答案不对,.出错,.超时{color:#a93226}.未作答{color:#777}"""


def feedback_name(sub: Submission) -> str:
    """一份作业的反馈页文件名：``<学号>_<姓名>_<章节>.html``。"""
    safe = re.sub(r"[^\w.-]+", "_", f"{sub.student}_{sub.name}_{sub.chapter or '未知'}")
    return f"{safe}.html"


def feedback_page(sub: Submission, weights: Weights | None = None) -> str:
    """给学生看的反馈页（像 nbgrader 的 generate_feedback）：每道题的结果、得分与检查器的说明，
    再加备注；不含裁判的日志（那只给老师排查）。"""
    from html import escape
    rows = []
    for r in (scored(sub, weights) if sub.chapter else []):
        rows.append(f'<tr><td>{escape(r["exercise"])}</td>'
                    f'<td class="{escape(r["status"])}">{MARKS.get(r["status"], "")} '
                    f'{escape(r["status"])}</td><td>{_fmt(r["points"])} / {_fmt(r["weight"])}</td>'
                    f'<td><pre>{escape(r["message"])}</pre></td></tr>')
    got, full = totals(sub, weights) if sub.chapter else (0.0, 0.0)
    notes = [sub.error] if sub.error else []
    notes += sub.notes
    title = f"{sub.student} {sub.name} · {sub.chapter or '？'} 评分反馈"
    return ("<!DOCTYPE html><html lang=\"zh-CN\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{escape(title)}</title><style>{FEEDBACK_CSS}</style></head><body>"
            f"<h1>{escape(title)}</h1><p>作业：{escape(readable(sub.path.name))}；"
            f"得分 <b>{_fmt(got)} / {_fmt(full)}</b></p>"
            "<table><tr><th>练习</th><th>结果</th><th>得分</th><th>说明</th></tr>"
            + "".join(rows) + "</table>"
            + ("<h2>备注</h2><ul>" + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>"
               if notes else "")
            + "<p>说明来自课程的检查器：在你自己的笔记本里运行同一个检查单元格，"
            "会看到同样的提示。</p>"
            "</body></html>\n")


def write_feedback(sub: Submission, folder: Path, weights: Weights | None = None,
                   name: str | None = None, **rules) -> Path:
    """``folder/name``（默认 :func:`feedback_name`）写一页反馈（不顺着链接写到 folder 之外）。"""
    folder = files.make_folder(folder)
    return files.write_text(folder / (name or feedback_name(sub)), feedback_page(sub, weights),
                            within=folder, **rules)


def feedback_names(subs: list[Submission]) -> dict[Path, str]:
    """每份作业的反馈页文件名；两份作业的名字清洗后撞车（``1@_x`` 与 ``1#_x`` 都成了 ``1__x``）
    时，后来的加上 ``-2``、``-3``……，谁的反馈页都不丢。"""
    out, taken = {}, set()
    for s in subs:
        base = feedback_name(s).removesuffix(".html")
        name, k = f"{base}.html", 1
        while name.lower() in taken:
            k += 1
            name = f"{base}-{k}.html"
        taken.add(name.lower())
        out[s.path] = name
    return out
