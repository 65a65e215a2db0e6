"""训练到目标损失要多久：随课程发布的配方 vs 朴素的参照循环（同一台机器、同一次运行）。

    python -m gptcourse_kit.bench --only target        # 空闲的 2 核机器上约半小时

- **发布配方**：随课程发布的 course.pt 自己记下的训练命令（``meta["release"]["recipe"]``，
  即 ``scripts/release_course.py`` 的 RECIPE），原样交给 ``python -m gptcourse train``，只多加
  ``--snapshots``：每次评估后存一份权重，连同那一刻的训练墙钟（含配方自己的评估与探针）。
- **参照**：``bench/training.py`` 的 nanoGPT 式 fp32 循环（AdamW 默认实现、恒定学习率 1e-3、
  任意位置的窗口、不评估），同样的模型、批次 16×128，每 ``SNAP_EVERY`` 步停下存一份（不计时）。
- 两边的每份快照都在**整个验证集**上算 ``split_loss``（不计时），到达时间 = 第一份
  ``split_loss ≤ 目标``的快照的训练墙钟（不插值：评估之间的时间算给后一份）。
- 参照最多训练到发布配方所用时间的 ``CAP_RATIO`` 倍（不然它可能永远到不了）：到时还没到达，
  表里写“> 上限”，比值写“≥ CAP_RATIO×”。
"""
from __future__ import annotations

import shlex
import tempfile
import time
from pathlib import Path

import torch

from gptcourse import checkpoint
from gptcourse.config import preset
from gptcourse.data import load_corpus, vocabulary_text
from gptcourse.evaluate import split_loss
from gptcourse.model import GPT
from gptcourse.runtime import set_seed
from gptcourse.tokenizer import CharTokenizer

from .training import reference_loop

TARGETS = (4.60, 4.50)          # issue 29 的两个目标（split_loss，整个验证集）
SNAP_EVERY = 250                # 与发布配方的评估间隔相同
CAP_RATIO = 2.0                 # 参照最多训练发布配方墙钟的这么多倍
QUICK = ["--preset", "mini", "--steps", "4", "--eval-interval", "2", "--no-compile",
         "--probe-poems", "0"]  # 快速模式（测试用）：后给的参数覆盖配方里的同名参数
QUICK_VAL_CHARS = 4_000         # 快速模式只在验证集的开头这么多字上量（测的是流程，不是损失）


def recipe() -> list[str]:
    """随课程发布的模型的训练参数（``python -m gptcourse train`` 之后的部分，不含 --out）。"""
    words = shlex.split(checkpoint.load(checkpoint.SHIPPED)[2]["release"]["recipe"])
    assert words[:4] == ["python", "-m", "gptcourse", "train"], words[:4]
    return words[4:]


def arrival(rows: list[dict], target: float) -> float | None:
    """第一行 val ≤ target 的墙钟秒数；没到达时 None。rows 按时间排好：{"wall_s", "val"}。"""
    return next((r["wall_s"] for r in rows if r["val"] <= target), None)


def _val(quick: bool) -> str:
    val = load_corpus("tang_jinti").val
    return val[:QUICK_VAL_CHARS] if quick else val


def release_run(work: Path, quick: bool) -> dict:
    """照发布配方训练一次（带快照），返回 {"command", "rows", "wall_s"}。"""
    from gptcourse.cli import main as cli_main

    args = [*recipe(), *(QUICK if quick else []), "--no-progress",
            "--snapshots", str(work / "snap"), "--out", str(work / "release.pt")]
    t0 = time.perf_counter()
    if cli_main(["train", *args]) != 0:
        raise RuntimeError("发布配方的训练没有成功（见上面的输出）")
    wall = time.perf_counter() - t0
    val = _val(quick)
    rows = []
    for path in sorted((work / "snap").glob("step_*.pt")):
        model, tok, meta = checkpoint.load(path)
        rows.append({"step": meta["step"], "wall_s": meta["wall_s"],
                     "val": round(split_loss(model, tok, val), 4)})
        print(f"  发布配方 第 {rows[-1]['step']} 步 {rows[-1]['wall_s']:.0f} 秒："
              f"split_loss {rows[-1]['val']:.4f}")
    return {"command": "python -m gptcourse train " + shlex.join(args[:-4]), "rows": rows,
            "wall_s": round(wall, 1)}


def reference_run(cap_s: float, quick: bool) -> dict:
    """参照循环训练到两个目标都到达、或训练墙钟到 cap_s 为止，每 SNAP_EVERY 步量一次。"""
    corpus = load_corpus("tang_jinti")
    tok = CharTokenizer.from_text(vocabulary_text(corpus))
    data = torch.tensor(tok.encode(corpus.train), dtype=torch.long)
    set_seed(0)
    model = GPT(preset("mini" if quick else "course", vocab_size=tok.vocab_size))
    B, T, every = 16, model.config.block_size, (2 if quick else SNAP_EVERY)
    val_text = _val(quick)
    rows, trained, step = [], 0.0, 0
    while True:
        tok_s = reference_loop(model, data, B, T, every, first_step=step)
        step, trained = step + every, trained + B * T * every / tok_s
        model.eval()
        with torch.no_grad():
            val = split_loss(model, tok, val_text)
        rows.append({"step": step, "wall_s": round(trained, 1), "val": round(val, 4)})
        print(f"  参照 第 {step} 步 {trained:.0f} 秒：split_loss {val:.4f}")
        if val <= min(TARGETS) or trained >= cap_s or (quick and step >= 4):
            break
    return {"rows": rows, "cap_s": round(cap_s, 1)}


def run(quick: bool = False) -> dict:
    with tempfile.TemporaryDirectory(prefix="gptcourse-target-") as tmp:
        rel = release_run(Path(tmp), quick)
    ref = reference_run(CAP_RATIO * rel["wall_s"], quick)
    table = []
    for target in TARGETS:
        a, b = arrival(ref["rows"], target), arrival(rel["rows"], target)
        table.append({"target": target, "reference_s": a, "release_s": b,
                      "ratio": (round(a / b, 2) if a and b else None),
                      "ratio_at_least": (round(ref["cap_s"] / b, 1) if a is None and b else None)})
    result = {"release": rel, "reference": ref, "table": table, "cap_ratio": CAP_RATIO}
    print_report(result)
    return result


def print_report(r: dict) -> None:
    for row in r["table"]:
        ref = "—" if row["reference_s"] is None else f"{row['reference_s']:.0f} 秒"
        rel = "—" if row["release_s"] is None else f"{row['release_s']:.0f} 秒"
        print(f"到 {row['target']:.2f}：参照 {ref}，发布配方 {rel}，比值 {row['ratio']}")
