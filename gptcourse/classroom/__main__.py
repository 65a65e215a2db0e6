"""``python -m gptcourse.classroom {student,grade,site}``（见 gptcourse/classroom/__init__.py）。"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..runtime import ROOT

NOTEBOOKS = ROOT / "notebooks"


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"需要一个正数，收到 {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"需要一个正数，收到 {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gptcourse.classroom", description="课堂工具")
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("student", help="写出学生版笔记本（答案换成存根，输出清空）")
    s.add_argument("--out", required=True, type=Path, help="输出目录")
    s.add_argument("notebooks", nargs="*", type=Path,
                   help="教师版笔记本（默认 notebooks/ 下全部）")
    s.add_argument("--force", action="store_true", help="覆盖 --out 里已有的同名笔记本")
    g = sub.add_parser("grade", help="给一批作业自动评分")
    g.add_argument("notebooks", nargs="+", type=Path, help="学生交上来的笔记本")
    g.add_argument("--json", type=Path, help="把成绩写成 JSON")
    g.add_argument("--csv", type=Path, help="把成绩写成 CSV（每行一个学生的一道题）")
    g.add_argument("--timeout", type=_positive, default=600,
                   help="每份作业的总时限（秒，默认 600）")
    g.add_argument("--cell-timeout", type=_positive, default=120,
                   help="单个单元格的时限（秒，默认 120）：超时的单元格被中断，后面照常运行")
    w = sub.add_parser("site", help="把五个笔记本（含提交的输出）渲染成静态网站")
    w.add_argument("--out", required=True, type=Path, help="输出目录")
    w.add_argument("--edition", choices=("student", "teacher"), default="teacher",
                   help="student：练习是存根、练习与检查的输出去掉（发给学生）；teacher：含答案")
    w.add_argument("--force", action="store_true", help="覆盖 --out 里已有的网页")
    args = ap.parse_args(argv)

    try:
        if args.command == "student":
            from .student import write_student_edition
            paths = args.notebooks or sorted(NOTEBOOKS.glob("0*.ipynb"))
            missing = [str(p) for p in paths if not p.is_file()]
            if missing:
                raise FileNotFoundError(f"找不到笔记本：{', '.join(missing)}")
            for p in write_student_edition(paths, args.out, force=args.force):
                print(f"学生版：{p}")
        elif args.command == "grade":
            from .grade import grade, table, write_csv, write_json
            missing = [str(p) for p in args.notebooks if not p.is_file()]
            if missing:
                raise FileNotFoundError(f"找不到作业：{', '.join(missing)}")
            subs = grade(args.notebooks, timeout=args.timeout, cell_timeout=args.cell_timeout)
            print(table(subs))
            if args.json:
                write_json(subs, args.json)
            if args.csv:
                write_csv(subs, args.csv)
        else:
            from .site import build_site
            index = build_site(args.out, edition=args.edition, force=args.force)
            print(f"网站：{index}（用浏览器直接打开，或 python -m http.server -d {args.out}）")
    except (FileNotFoundError, NotADirectoryError, PermissionError, ValueError) as e:
        print(f"错误：{e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
