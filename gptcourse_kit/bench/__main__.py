"""python -m gptcourse_kit.bench [--quick] [--only 项] [--allow-busy]：运行基准，写出
docs/benchmarks.json 与 docs/benchmarks.md（机器不安静时拒绝写出，见 gptcourse/machine.py）。"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
import time
from pathlib import Path

from gptcourse import files
from gptcourse.errors import MachineError, UserError
from gptcourse.machine import (
    CEILING_REPEATS,
    busy_reasons,
    limits,
    machine_info,
    matmul_ceiling,
    snapshot,
)
from gptcourse.runtime import ROOT

from . import BENCHMARKS, OPTIONAL
from .report import markdown


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gptcourse_kit.bench",
                                description="测量训练与生成速度（同一次运行里并排比较）")
    p.add_argument("--quick", action="store_true", help="更小的批次、更少的轮数（只看能不能跑）")
    p.add_argument("--out", default=None,
                   help="JSON 的路径（默认 docs/benchmarks.json；--quick 时默认写到临时目录，"
                        "除非加 --write；Markdown 写在它旁边，同名 .md）")
    p.add_argument("--write", action="store_true",
                   help="--quick 时也写进 docs/benchmarks.*（默认不覆盖提交的结果）")
    p.add_argument("--only", choices=(*BENCHMARKS, *OPTIONAL), action="append",
                   help="只跑某一项（可重复）；JSON 里其他项保留上次的结果")
    p.add_argument("--allow-busy", action="store_true",
                   help="机器忙也写出结果（每个数字都标上“机器忙”）")
    args = p.parse_args(argv)
    if args.out is not None:
        out = Path(args.out)
    elif args.quick and not args.write:          # 快速模式不覆盖提交的 docs/benchmarks.json
        out = Path(tempfile.gettempdir()) / "gptcourse-bench" / "benchmarks.json"
    else:
        out = ROOT / "docs" / "benchmarks.json"
    try:                                         # 测之前就确认：上次的结果读得出、能写
        previous = _previous(out) if args.only else {}
        for path in (out, out.with_suffix(".md")):
            files.check_file(path, probe=True)
    except (ValueError, MachineError) as e:
        print(f"错误：{e}", file=sys.stderr)
        return 1 if isinstance(e, MachineError) else 2
    before = snapshot()
    first = busy_reasons([before], [])
    if first and not args.allow_busy:
        print("机器不安静，不测了：" + "；".join(first)
              + "。先停掉别的重任务（或加 --allow-busy，结果会标上“机器忙”）。", file=sys.stderr)
        return 3
    results = previous                        # 只跑某几项时，保留 JSON 里其他项上次的结果
    run = {"date": time.strftime("%Y-%m-%d %H:%M"), "quick": args.quick,
           "machine": machine_info(), "limits": limits(args.quick)}
    results |= run
    fp32 = [results["limits"]["fp32"]["gflops"]]
    for name in args.only or BENCHMARKS:
        print(f"===== {name} =====")
        results[name] = importlib.import_module(f".{name}", __package__).run(quick=args.quick)
        fp32 += results[name].get("fp32_samples", [])
        again = matmul_ceiling(results["limits"]["fp32"]["n"], CEILING_REPEATS)   # 各项之间重测
        fp32.append(again["gflops"])
        print()
    after = snapshot()
    busy = busy_reasons([before, after], fp32)
    results["quiet"] = {"before": before, "after": after, "fp32_samples": fp32, "busy": busy}
    for name in args.only or BENCHMARKS:      # 每一项记下它来自哪一次运行（--only 时各不相同）
        results.setdefault("runs", {})[name] = run | {"quiet": results["quiet"]}
    if busy and not args.allow_busy:
        print("测量期间机器不安静，结果没有写出：" + "；".join(busy), file=sys.stderr)
        return 3
    try:
        write_results(out, results)
    except (UserError, MachineError) as e:
        print(f"错误：{e}", file=sys.stderr)
        return 1 if isinstance(e, MachineError) else 2
    print(f"已写入 {out} 与 {out.with_suffix('.md')}" + ("（标明：机器忙）" if busy else ""))
    return 0


def write_results(out: Path, results: dict) -> None:
    """结果写成 out（JSON）与它旁边的同名 .md（每个都按 :mod:`gptcourse.files` 的规则原子地写）。"""
    files.write_text(out, json.dumps(results, ensure_ascii=False, indent=2) + "\n")
    files.write_text(out.with_suffix(".md"), markdown(results) + "\n")


def _previous(out: Path) -> dict:
    """--only 时要并进去的上次结果（没有就是空的）；读不出、不是一个 JSON 对象、--out 或它旁边的
    .md 是目录 → ValueError，一句话，在测量之前。"""
    for path in (out, out.with_suffix(".md")):
        if path.is_dir():
            raise ValueError(f"--out {path} 是目录：请给一个 .json 文件名")
    if not out.exists():
        return {}
    try:
        data = json.loads(out.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"上次的结果 {out} 读不出来（{e}），没法并进去：换一个 --out，"
                         "或先把它移走") from None
    if not isinstance(data, dict):
        raise ValueError(f"上次的结果 {out} 不是一个 JSON 对象（是 {type(data).__name__}），"
                         "没法并进去")
    return data


if __name__ == "__main__":
    sys.exit(main())
