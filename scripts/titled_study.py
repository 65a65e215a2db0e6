"""以题作诗的测量：题目让模型多知道了多少（在题目没见过的验证集诗上）。

    python scripts/titled_study.py 检查点 [检查点 …] [--n 150] [--json 输出.json]

对每个检查点量：正文的负对数似然（自己的题目 / 别人的题目 / 不给题目，nats/字）与 ΔNLL，
10 选 1 的题目检索准确率，验证集整体损失（不带题目，与基础模型比），以及按发布设置给 100 个
没见过的题目各写一首诗时用到题目里的字的比例（对照：打乱题目）。数字带 95 % 自助法区间。
"""
from __future__ import annotations

import argparse
import json
import time

import gptcourse as gc


def study(path: str, n: int) -> dict:
    t0 = time.perf_counter()
    model, tok, meta = gc.checkpoint.load(path)
    pairs = gc.titled.rows("val")[:n]
    pairs = [(t, b) for t, b in pairs if not tok.unknown_chars(t + b)]
    info = gc.evaluate.title_information(model, tok, pairs, k=10)
    corpus = gc.data.load_corpus("tang_jinti")
    free = gc.evaluate.split_loss(model, tok, corpus.val)
    titles = list(dict.fromkeys(t for t, _ in pairs))[:100]
    reuse = gc.evaluate.title_reuse(model, tok, titles, seed=gc.release.TRIAL_SEEDS[0],
                                    **gc.release.settings(meta))
    return {"checkpoint": path, "poems": len(pairs), **info, "free_val_loss": free,
            "reuse": reuse, "seconds": round(time.perf_counter() - t0, 1),
            "train": {k: meta.get(k) for k in ("command", "wall_s", "steps", "init")}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoints", nargs="+")
    ap.add_argument("--n", type=int, default=150)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    out = []
    for path in args.checkpoints:
        r = study(path, args.n)
        out.append(r)
        print(f"{path}: 自己的题目 {r['own']:.4f} / 别人的 {r['other']:.4f} / "
              f"不给 {r['none']:.4f}；"
              f"ΔNLL {r['delta']:.4f} {tuple(round(x, 4) for x in r['delta_ci'])}；"
              f"检索 {r['retrieval']:.1%} "
              f"{tuple(round(x, 3) for x in r['retrieval_ci'])}"
              f"（机会 {r['chance']:.0%}）；验证集损失 {r['free_val_loss']:.4f}；"
              f"用到题目的字 {r['reuse']['own']:.1%} vs 打乱 {r['reuse']['shuffled']:.1%}"
              f"（{r['seconds']} 秒）", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
