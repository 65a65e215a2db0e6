"""``python -m gptcourse_kit.classroom {student,grade,site,…}``（见 ``classroom/__init__.py``）。"""
from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

from gptcourse import files
from gptcourse.errors import MachineError, UserError
from gptcourse.runtime import ROOT

from .grade import readable

NOTEBOOKS = ROOT / "notebooks"


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"需要一个正数，收到 {text!r}") from None
    if not 0 < value < math.inf:                         # inf 也不行：之后要换成整数秒、字节
        raise argparse.ArgumentTypeError(f"需要一个有限的正数，收到 {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"需要一个正整数，收到 {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"需要一个正整数，收到 {text!r}")
    return value


def grade_command(args) -> None:
    """``python -m gptcourse_kit.classroom grade`` 的主体。"""
    from . import gradebook, sandbox
    from .grade import Options, Submission, check_names, grade

    missing = [str(p) for p in args.notebooks if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"找不到作业：{', '.join(missing)}")
    weights = gradebook.load_weights(args.weights) if args.weights else None
    if args.reference is not None and not args.reference.is_dir():
        raise NotADirectoryError(f"--reference 不是目录：{args.reference}")
    check_names(args.notebooks)
    for out in (args.json, args.csv, args.long_csv):      # 评分之前就确认写得了，不是评完才发现
        if out:                                           # 一个笔误就毁掉学生唯一的一份作业：
            files.check_file(out, inputs=args.notebooks, probe=True)      # 输入不会被覆盖
    if args.feedback is not None:
        files.check_folder(args.feedback, [], flag="--feedback")
    if args.no_sandbox:
        print(sandbox.UNSEALED.format(why="用了 --no-sandbox"), file=sys.stderr)
    limits = sandbox.Limits(memory=int(args.memory * (1 << 30)),
                            cpu=int(args.timeout) + 30)
    opts = Options(timeout=args.timeout, cell_timeout=args.cell_timeout,
                   reference=args.reference, limits=limits, sealed=not args.no_sandbox)
    done: list[Submission] = []
    failed: dict[str, str] = {}                          # 写不出去的输出 → 原因（别的照写）
    writers = ((args.json, gradebook.write_json), (args.csv, gradebook.write_csv),
               (args.long_csv, gradebook.write_long_csv))

    def write_all(subs: list[Submission]) -> None:
        for path, write in writers:
            if path:
                _attempt(failed, str(path), write, subs, path, weights, inputs=args.notebooks)

    def save(sub: Submission) -> None:
        done.append(sub)
        print(f"评完 {len(done)}/{len(args.notebooks)}：{sub.student} {sub.name} "
              f"{sub.chapter or '?'}（{sub.seconds:.0f} 秒）", file=sys.stderr, flush=True)
        write_all(done)

    subs = grade(args.notebooks, opts, jobs=args.jobs, on_result=save)
    print(gradebook.table(subs, weights))
    write_all(subs)                                      # 最后按输入顺序再写一遍
    if args.feedback:                                    # 名字撞车的加后缀，谁的反馈页都不丢
        names = gradebook.feedback_names(subs)
        for sub in subs:
            _attempt(failed, f"{args.feedback}/{names[sub.path]}", gradebook.write_feedback,
                     sub, args.feedback, weights, names[sub.path], inputs=args.notebooks)
    if failed:
        raise MachineError("有的输出没写成（其余都写好了）：" + "；".join(failed.values()))


def _attempt(failed: dict[str, str], what: str, write, *args, **kwargs) -> None:
    """``write(*args, **kwargs)`` 写一个输出；失败时记下原因，不中断（一份写不出去，别的照写）。"""
    try:
        write(*args, **kwargs)
        failed.pop(what, None)
    except (MachineError, UserError) as e:               # gptcourse.files：已经说出了文件与原因
        failed[what] = str(e)
    except (OSError, UnicodeError) as e:
        failed[what] = f"{what}：{getattr(e, 'strerror', None) or e}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gptcourse_kit.classroom", description="课堂工具")
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("student", help="写出学生版笔记本（答案换成存根，输出清空）")
    s.add_argument("--out", required=True, type=Path, help="输出目录")
    s.add_argument("notebooks", nargs="*", type=Path,
                   help="教师版笔记本（默认 notebooks/ 下全部）")
    s.add_argument("--force", action="store_true", help="覆盖 --out 里已有的同名笔记本")
    s.add_argument("--bundle", action="store_true",
                   help="再把学生版笔记本和一份安装说明打包成 --out 下的 学生版.zip（发给学生）")
    g = sub.add_parser("grade",
                       help="给一批作业自动评分（每份作业在沙箱里判，见 docs/teaching_guide.md）")
    g.add_argument("notebooks", nargs="+", type=Path,
                   help="学生交上来的笔记本，文件名 <学号>_<姓名>.ipynb")
    g.add_argument("--json", type=Path, help="把成绩写成 JSON（每评完一份就更新）")
    g.add_argument("--csv", type=Path,
                   help="成绩册 CSV（带 BOM 的 UTF-8，Excel 直接打开；"
                        "每个学生一行，含总分与百分比）")
    g.add_argument("--long-csv", type=Path, help="长表 CSV：每个学生的每道题一行，含结果与说明")
    g.add_argument("--weights", type=Path, help="分值文件（.toml 或 .json），覆盖默认分值")
    g.add_argument("--feedback", type=Path, metavar="DIR",
                   help="给每个学生写一页 HTML 反馈（每道题的结果、得分与说明）到 DIR")
    g.add_argument("--jobs", type=_positive_int, default=os.cpu_count() or 1,
                   help="同时评几份作业（默认：CPU 核数）")
    g.add_argument("--timeout", type=_positive, default=600,
                   help="每份作业的总时限（秒，默认 600）：到时整个沙箱被杀掉")
    g.add_argument("--cell-timeout", type=_positive, default=120,
                   help="单个单元格的时限（秒，默认 120）：超时的练习记“超时”，只计一次")
    g.add_argument("--memory", type=_positive, default=4,
                   help="每份作业的内存上限（GiB，地址空间，默认 4）")
    g.add_argument("--reference", type=Path,
                   help="教师版笔记本所在目录（默认仓库的 notebooks/）")
    g.add_argument("--no-sandbox", action="store_true",
                   help="不用沙箱（只给信得过的作业用；没有 bubblewrap 时自动如此）")
    w = sub.add_parser("site", help="把五个笔记本（含提交的输出）渲染成静态网站")
    w.add_argument("--out", required=True, type=Path, help="输出目录")
    w.add_argument("--edition", choices=("student", "teacher"), default="teacher",
                   help="student：练习是存根、练习与检查的输出去掉（发给学生）；teacher：含答案")
    w.add_argument("--force", action="store_true", help="覆盖 --out 里已有的网页")
    d = sub.add_parser("slides", help="每章一套幻灯片（reveal.js，离线可用）")
    d.add_argument("--out", required=True, type=Path, help="输出目录")
    d.add_argument("--edition", choices=("student", "teacher"), default="student",
                   help="student（默认）：练习页是题目和存根，投影时不露答案；teacher：含参考答案")
    d.add_argument("--force", action="store_true", help="覆盖 --out 里已有的文件")
    h = sub.add_parser("handout", help="答案讲义：五章全部练习的题目、参考答案与检查（教师用）")
    h.add_argument("--out", required=True, type=Path, help="输出目录（写 answers.html）")
    h.add_argument("--force", action="store_true", help="覆盖 --out 里已有的文件")
    t = sub.add_parser("times",
                       help="以快速模式执行笔记本，按小节打印用时（教师指南里演示秒数的来源）")
    t.add_argument("notebooks", nargs="*", help="笔记本名（如 01_data_tokenizer；默认五章）")
    t.add_argument("--edition", choices=("student", "teacher"), default="teacher",
                   help="执行哪一版（默认 teacher；student：学生版，存根走包里的代替）")
    t.add_argument("--json", type=Path, help="把每个单元格与每一节的用时写成 JSON")
    t.add_argument("--slow", type=_positive, default=1.0, help="列出用时不少于这么多秒的单元格")
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
            if args.bundle:
                from .student import write_bundle
                print(f"学生包：{write_bundle(paths, args.out, force=args.force)}（发给学生）")
        elif args.command == "grade":
            grade_command(args)
        elif args.command == "slides":
            from .slides import build_slides
            for p in build_slides(args.out, force=args.force, edition=args.edition):
                print(f"幻灯片：{p}")
        elif args.command == "times":
            from ..notebooks import notebook_paths
            from .timing import report, time_notebook, write_json
            results = [time_notebook(p, args.edition) for p in notebook_paths(args.notebooks)]
            print(report(results, args.slow))
            if args.json:
                write_json(results, args.json)
        elif args.command == "handout":
            from .slides import handout
            print(f"答案讲义：{handout(args.out, force=args.force)}（只发给老师和助教）")
        else:
            from .site import build_site
            index = build_site(args.out, edition=args.edition, force=args.force)
            print(f"网站：{index}（用浏览器直接打开，或 python -m http.server -d {args.out}）")
    except MachineError as e:                            # 磁盘已满、只读、没有写权限……：退出码 1
        print(f"错误：{_one_line(e)}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as e:                   # 用户给的东西不对：退出码 2
        print(f"错误：{_one_line(e)}", file=sys.stderr)
        return 2
    return 0


def _one_line(e: BaseException) -> str:
    """系统错误说出原因与文件名（``[Errno 30] Read-only file system: 'x'`` → 一句话）。"""
    if isinstance(e, OSError) and e.strerror and e.filename:
        return f"{e.strerror}：{readable(e.filename)}"
    return " ".join(str(e).split())


if __name__ == "__main__":
    sys.exit(main())
