"""为什么自由采样的模型不押韵：同样的算力下比较几种做法，每种 3 个种子（第 04 章引用这里的结果）。

    python scripts/rhyme_study.py --init 起点.pt [--steps 300] [--seeds 0,1,2] \
        [--json docs/rhyme_study.json]

每个变体都从同一个起点检查点（``--init``；默认随课程发布的 course.pt）用 ``gc.train.train``
接着训练同样多的步数（同样的批次、学习率日程、按诗对齐的窗口、种子）：

- **多训练**：只用语言模型的损失（“是不是训练得还不够”）；
- **韵部**：再加 ``--aux rhyme``：韵脚前一个位置预测下一个字的平声韵部（“是不是信号太弱”）；
- **平仄**：再加 ``--aux tones``：讲平仄的位置前预测下一个字是平是仄；
- **韵部 + 平仄**：两个都加。

辅助头只在训练时用（:mod:`gptcourse.objectives`），模型的结构和词表不变。每个变体、每个种子量：
自由采样 200 首（温度 0.8，种子 70000–70199，不加任何约束）的押韵率、重韵率、诗体合格率、
平仄合格率，
验证集损失（split_loss，整个 val），以及领先指标——教师强制下模型在真诗韵脚上给“这首诗自己的韵部”
的概率（``gc.rhyme_probe.rhyme_group_mass``，验证集前 200 首合格的诗）。表里给 3 个种子的均值与
最小–最大。
"""
from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

import torch

import gptcourse as gc

SAMPLE_SEEDS = gc.release.STUDY_SEEDS              # 从不当验收块（release.fresh_gate 跳过它）
VARIANTS = {"多训练（只用语言模型损失）": [], "韵部辅助损失": ["rhyme"],
            "韵部 + 平仄辅助损失": ["rhyme", "tones"], "平仄辅助损失": ["tones"]}
METRICS = ("free_rhyme", "repeated", "form", "tonal", "val_loss", "indicator_ratio")


def measure(model, tok, corpus, val_poems) -> dict:
    poems = gc.generate.sample_poems(model, tok, SAMPLE_SEEDS[1], seed=SAMPLE_SEEDS[0],
                                     temperature=0.8)
    rhyme, tonal = gc.verse.rates(poems)
    mass = gc.rhyme_probe.rhyme_group_mass(model, tok, val_poems, corpus.train)
    lead = [v["mass"] / v["chance"] for k, v in mass.items() if int(k) >= 2]
    return {"free_rhyme": rhyme, "repeated": gc.verse.repeated_rhyme_rate(poems),
            "form": sum(map(gc.verse.is_valid_form, poems)) / len(poems), "tonal": tonal,
            "val_loss": gc.evaluate.split_loss(model, tok, corpus.val),
            "indicator_ratio": sum(lead) / len(lead), "indicator": mass}


def run(init: str, aux: list[str], steps: int, seed: int, corpus, val_poems) -> dict:
    model, tok, _ = gc.checkpoint.load(init, eval_mode=False)
    ids = torch.tensor(tok.encode(corpus.train), dtype=torch.long)
    starts = {"train": gc.data.poem_starts(ids, tok.eos_id, model.config.block_size)}
    objectives = gc.objectives.build(aux, {"train": ids}, tok, model.config.n_embd)
    cfg = gc.train.TrainConfig(batch_size=16, lr=5e-4, warmup_steps=30, max_steps=steps,
                               eval_interval=steps, eval_batches=5, seed=seed, progress=False)
    t0 = time.perf_counter()
    history = gc.train.train(model, ids, None, cfg, starts=starts, objectives=objectives)
    seconds = time.perf_counter() - t0
    model.eval()
    return {"seed": seed, "seconds": round(seconds, 1), "bf16": history.info["bf16"],
            **measure(model, tok, corpus, val_poems)}


def summary(runs: list[dict]) -> dict:
    out = {}
    for k in METRICS:
        v = [r[k] for r in runs]
        out[k] = {"mean": statistics.fmean(v), "min": min(v), "max": max(v)}
    return out


def check_args(args) -> tuple[list[int], list[str]]:
    """--seeds、--variants、--steps、--json 在开始计算之前检查 → (种子, 变体)；不对 → UserError。
    （控制组的测量就要几分钟：参数错误不该等到那之后才报出，更不该在写 --json 时丢掉结果。）"""
    UserError = gc.errors.UserError
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        raise UserError(f"--seeds 应是逗号分开的整数（例如 0,1,2），收到 {args.seeds!r}") from None
    if len(set(seeds)) != len(seeds) or any(not 0 <= s < 2**32 for s in seeds):
        raise UserError(f"--seeds 里的种子要在 [0, 2³²) 之内、不重复，收到 {args.seeds!r}")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if not variants or unknown or len(set(variants)) != len(variants):
        raise UserError(f"--variants 只能是 {'、'.join(VARIANTS)} 中的若干个（逗号分开、不重复），"
                        f"收到 {args.variants!r}")
    if args.steps < 1:
        raise UserError(f"--steps 必须 ≥ 1，收到 {args.steps}")
    if args.json:
        gc.checkpoint.check_writable(args.json)
        if not Path(args.json).parent.is_dir():
            raise UserError(f"--json {args.json} 的目录不存在")
    return seeds, variants


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--init", default=str(gc.checkpoint.SHIPPED))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help="只跑其中几个（逗号分开的变体名）")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    try:                                        # 参数错误在开始计算之前报出：一行，退出码 2
        seeds, variants = check_args(args)
        base, tok, _ = gc.checkpoint.load(args.init)
    except gc.errors.UserError as e:
        print(f"错误：{e}", file=sys.stderr)
        sys.exit(2)
    corpus = gc.data.load_corpus("tang_jinti")
    val_poems = [p for p in corpus.val.split("\n") if p and gc.verse.is_valid_form(p)][:200]
    control = {"seed": None, "seconds": 0.0, **measure(base, tok, corpus, val_poems)}
    rows = [{"variant": "对照：起点检查点（不再训练）", "aux": [], "steps": 0, "runs": [control],
             **summary([control])}]
    print(json.dumps({k: rows[0][k] for k in ("variant", "free_rhyme")}, ensure_ascii=False))

    def save() -> None:                         # 每个变体跑完就写一次：中途停下也留得住已有的结果
        if not args.json:
            return
        Path(args.json).write_text(json.dumps(
            {"command": f"python scripts/rhyme_study.py --init {Path(args.init).name} "
                        f"--steps {args.steps} --seeds {args.seeds}",
             "init_sha256": hashlib.sha256(Path(args.init).read_bytes()).hexdigest()[:16],
             "machine": gc.machine.machine_info(),
             "date": time.strftime("%Y-%m-%d %H:%M"), "sample_seeds": SAMPLE_SEEDS,
             "batch": [16, base.config.block_size], "lr": 5e-4, "lambda": 1.0, "seeds": seeds,
             "rows": rows}, ensure_ascii=False, indent=1, default=float), encoding="utf-8")
    save()
    for name in variants:
        runs = [run(args.init, VARIANTS[name], args.steps, s, corpus, val_poems) for s in seeds]
        rows.append({"variant": name, "aux": VARIANTS[name], "steps": args.steps, "runs": runs,
                     **summary(runs)})
        r = rows[-1]
        print(f"{name}：自由押韵率 {r['free_rhyme']['mean']:.1%}"
              f"（{r['free_rhyme']['min']:.1%}–{r['free_rhyme']['max']:.1%}），"
              f"诗体 {r['form']['mean']:.1%}，平仄 {r['tonal']['mean']:.1%}，"
              f"验证集损失 {r['val_loss']['mean']:.4f}，"
              f"领先指标 {r['indicator_ratio']['mean']:.1f}×",
              flush=True)
        save()


if __name__ == "__main__":
    main()
