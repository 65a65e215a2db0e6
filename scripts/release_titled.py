"""以题作诗的检查点：在**没见过的题目**上过验收表，通过才写回发布设置。

    python scripts/release_titled.py 微调后的检查点 [--ship data/checkpoints/titled.pt]

解码设置沿用基础模型（随课程发布的 course.pt）的发布设置；验收用 GATE_SEEDS（样本外）：第 i 首用
种子 50000 + i、题目是验证集里第 i 个没见过的题目（题目按出现顺序去重）。全部通过时把
``meta["release"]``（设置 + 这次的验收结果 + 题目测量）写回，``--ship`` 时另存一份（bf16 权重）。
"""
from __future__ import annotations

import sys
import time

import gptcourse as gc
from gptcourse import release


def main(path: str, ship: str | None) -> int:
    t0 = time.perf_counter()
    model, tok, meta = gc.checkpoint.load(path)
    _, _, base_meta = gc.checkpoint.load()
    setting = release.settings(base_meta)
    corpus = gc.data.load_corpus("tang_jinti")
    val_loss = gc.evaluate.split_loss(model, tok, corpus.val)
    held = [t for t in dict.fromkeys(t for t, _ in gc.titled.rows("val"))
            if not tok.unknown_chars(t)]
    start, n = release.GATE_SEEDS
    titles = [held[i % len(held)] for i in range(n)]
    poems = [gc.generate.generate(model, tok, "", title=t, seed=start + i, **setting)
             for i, t in enumerate(titles)]
    checks = gc.acceptance.acceptance_checks(poems, corpus.train, val_loss=val_loss)
    print(gc.acceptance.acceptance_table(checks))
    passed = all(c.passed for c in checks)
    print(f"没见过的题目 {len(set(titles))} 个；{release.seed_note(release.GATE_SEEDS)}；"
          f"结论：{'通过' if passed else '未通过'}（{time.perf_counter() - t0:.0f} 秒）")
    if not passed:
        return 1
    rec = {"settings": setting, "rule": "沿用 course.pt 的发布设置；在没见过的题目上过验收表",
           "confirmed": {"seeds": list(release.GATE_SEEDS), "titles": "验证集里没见过的题目",
                         "passed": True, "checks": {c.name: round(float(c.value), 4)
                                                   for c in checks},
                         "examples": [f"《{t}》{p}" for t, p in zip(titles[:3], poems[:3])]},
           "val_loss": round(val_loss, 4)}
    step = meta.pop("step", 0)
    meta.pop("config", None)
    meta = {**meta, "release": rec}
    gc.checkpoint.save(path, model, tok, step=step, meta=meta)
    if ship:
        gc.checkpoint.save(ship, model, tok, step=step, meta=meta, half=True)
        print(f"已发布：{ship}")
    return 0


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    ship = sys.argv[sys.argv.index("--ship") + 1] if "--ship" in sys.argv else None
    if ship in args:
        args.remove(ship)
    sys.exit(main(args[0], ship))
