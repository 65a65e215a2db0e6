"""python -m gptcourse.bench [--quick] [--json docs/benchmarks.json]：运行全部基准并写出 JSON。"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
import time
from pathlib import Path

from ..runtime import ROOT
from . import BENCHMARKS


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gptcourse.bench",
                                description="测量训练与生成速度（同一次运行里并排比较）")
    p.add_argument("--quick", action="store_true", help="更小的批次、更少的轮数（只看能不能跑）")
    p.add_argument("--json", default=str(ROOT / "docs" / "benchmarks.json"),
                   help="把全部数字写成 JSON（默认 docs/benchmarks.json）")
    p.add_argument("--only", choices=BENCHMARKS, action="append",
                   help="只跑某一项（可重复）；JSON 里其他项保留上次的结果")
    args = p.parse_args(argv)
    out = Path(args.json)
    results = {}
    if args.only and out.exists():            # 只跑某几项时，保留 JSON 里其他项上次的结果
        results = json.loads(out.read_text(encoding="utf-8"))
    results |= {"date": time.strftime("%Y-%m-%d %H:%M"), "quick": args.quick}
    for name in args.only or BENCHMARKS:
        if importlib.util.find_spec(f"{__package__}.{name}") is None:
            print(f"（没有 {name} 基准，跳过）\n")
            continue
        print(f"===== {name} =====")
        results[name] = importlib.import_module(f".{name}", __package__).run(quick=args.quick)
        print()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    print(f"已写入 {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
