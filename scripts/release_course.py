"""给一个训练好的检查点挑发布用的解码设置，并写回检查点（meta["release"]）。

    python scripts/release_course.py data/checkpoints/course.pt

规则见 gptcourse/release.py：候选设置各采样 200 首（种子 0–199，TUNE_SEEDS）过验收表，
从全部通过的设置里挑模型自己最“情愿”写的一组，再用另一组种子（50000–50199，200 首，GATE_SEEDS）
确认。权重不变，检查点原子地重写（带校验和）。
"""
from __future__ import annotations

import sys
import time

import gptcourse as gc
from gptcourse import release

# 不加押韵约束的设置在 100 首上全部没有通过“押韵率”（自由押韵率 2–7 %，门槛 78 %；
# 完整网格用 --full-grid 重跑），所以默认只比较加押韵约束的设置，省下一半时间。
RHYMING_GRID = {"temperature": (0.8, 0.9), "top_p": (None, 0.95), "rhyme": (True,)}


def main(path: str) -> int:
    t0 = time.perf_counter()
    model, tok, meta = gc.checkpoint.load(path)
    corpus = gc.data.load_corpus(meta.get("corpus", "tang_jinti"))
    val_loss = gc.evaluate.split_loss(model, tok, corpus.val)
    print(f"验证集损失 {val_loss:.4f} nats/字（split_loss，整个 val）")
    grid = release.GRID if "--full-grid" in sys.argv else RHYMING_GRID
    result = release.choose(model, tok, corpus.train, val_loss, grid=grid)
    result["val_loss"] = round(val_loss, 4)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    step = meta.pop("step", 0)
    meta.pop("config", None)                                   # load() 加进去的，不是存的
    gc.checkpoint.save(path, model, tok, step=step, meta={**meta, "release": result})
    print(f"发布设置：{result['settings']}（{result['seconds']} 秒）")
    return 0 if result["settings"] is not None else 1


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    sys.exit(main(args[0] if args else str(gc.checkpoint.SHIPPED)))
