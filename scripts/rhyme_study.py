"""为什么自由采样的模型不押韵：同样的算力下比较几种做法（课程第 04 章引用这里的结果）。

    python scripts/rhyme_study.py [--steps 800] [--json docs/rhyme_study.json]

都从随课程发布的 course.pt 接着训练同样多的步数（同样的批次、学习率日程、按诗对齐的窗口）：

- **对照**：course.pt 本身（不再训练）；
- **多训练**：只用语言模型的损失再训练 ``steps`` 步（“是不是训练得还不够”）；
- **韵部辅助损失**：同样的步数，损失 = 语言模型损失 + λ × 一个小线性头在韵脚的前一个位置
  预测“下一个字的平声韵部”的交叉熵（“是不是信号太弱：30 个平声韵部要从 6,606 个字里自己归纳”）。
  这个头只在训练时用，训练完就扔掉；模型的结构和词表不变。

每个变体量：自由采样 200 首（温度 0.8，种子 70000–70199，不加任何约束）的押韵率、诗体合格率，
验证集损失（split_loss，整个 val），以及领先指标——教师强制下模型在真诗韵脚上给“这首诗自己的韵部”
的概率（``gc.rhyme_probe.rhyme_group_mass``，验证集前 400 首合格的诗）。
"""
from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

import gptcourse as gc
from gptcourse.verse import PING, analyze, group_names

SEEDS = (70_000, 200)
LAMBDA = 1.0


def rhyme_targets(text: str, tok) -> torch.Tensor:
    """与 tok.encode(text) 等长：每首合乎诗体且押平声韵的诗，双数句末字（韵脚）那个位置记韵部编号，
    其余 −1。"""
    groups = {g: i for i, g in enumerate(group_names(PING))}
    out: list[int] = []
    parts = text.split("\n")
    for j, poem in enumerate(parts):
        t = [-1] * len(tok.encode(poem))
        a = analyze(poem) if poem else None
        if a is not None and a.valid_form and a.rhymes and a.rhyme_group in groups:
            for i in a.rhyme_positions:
                t[i] = groups[a.rhyme_group]
        out += t + ([-1] if j < len(parts) - 1 else [])                   # 换行
    return torch.tensor(out, dtype=torch.long)


def train_variant(aux: bool, steps: int, ids, rhyme, starts, seed: int = 0) -> tuple:
    model, tok, meta = gc.checkpoint.load(eval_mode=False)
    T, B = model.config.block_size, 16
    head = torch.nn.Linear(model.config.n_embd, len(group_names(PING)))
    captured = {}
    model.norm_f.register_forward_hook(lambda m, i, o: captured.__setitem__("h", o))
    opt = gc.train.make_optimizer(model, 5e-4)
    opt.add_param_group({"params": list(head.parameters()), "weight_decay": 0.0})
    amp = torch.autocast("cpu", dtype=torch.bfloat16, enabled=gc.precision.bf16_decision("cpu")[0])
    offsets = torch.arange(T)
    t0 = time.perf_counter()
    model.train()
    for step in range(steps):
        lr = gc.train.lr_at(step, 5e-4, 30, steps)
        for g in opt.param_groups:
            g["lr"] = lr
        gen = gc.train.batch_generator(seed, step)
        s = starts[torch.randint(len(starts), (B,), generator=gen)]
        x, y = ids[s[:, None] + offsets], ids[s[:, None] + offsets + 1]
        with amp:
            _, loss = model(x, y)
            if aux:
                a = rhyme[s[:, None] + offsets + 1]                     # 下一个字是韵脚时的韵部
                logits = head(captured["h"].float())                     # [B, T, 组数]
                if (a >= 0).any():
                    loss = loss + LAMBDA * F.cross_entropy(logits.reshape(-1, logits.size(-1)),
                                                           a.reshape(-1), ignore_index=-1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    model.eval()
    return model, tok, time.perf_counter() - t0


def measure(model, tok, corpus, val_poems) -> dict:
    poems = gc.generate.sample_poems(model, tok, SEEDS[1], seed=SEEDS[0], temperature=0.8)
    rhyme, tonal = gc.verse.rates(poems)
    mass = gc.rhyme_probe.rhyme_group_mass(model, tok, val_poems, corpus.train)
    return {"free_rhyme": rhyme, "form": sum(map(gc.verse.is_valid_form, poems)) / len(poems),
            "tonal": tonal, "val_loss": gc.evaluate.split_loss(model, tok, corpus.val),
            "indicator": mass}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    corpus = gc.data.load_corpus("tang_jinti")
    _, tok, _ = gc.checkpoint.load()
    ids = torch.tensor(tok.encode(corpus.train), dtype=torch.long)
    rhyme = rhyme_targets(corpus.train, tok)
    assert rhyme.shape == ids.shape
    starts = gc.data.poem_starts(ids, tok.eos_id, 128)
    val_poems = [p for p in corpus.val.split("\n") if p and gc.verse.is_valid_form(p)][:400]
    rows = []
    base, tok, _ = gc.checkpoint.load()
    rows.append({"variant": "对照：course.pt", "steps": 0, "seconds": 0.0,
                 **measure(base, tok, corpus, val_poems)})
    for name, aux in (("多训练（只用语言模型损失）", False), ("韵部辅助损失（λ = 1）", True)):
        model, tok, secs = train_variant(aux, args.steps, ids, rhyme, starts)
        rows.append({"variant": name, "steps": args.steps, "seconds": round(secs, 1),
                     **measure(model, tok, corpus, val_poems)})
        print(json.dumps(rows[-1], ensure_ascii=False, default=str), flush=True)
    for r in rows:
        print(f"{r['variant']}：+{r['steps']} 步（{r['seconds']:.0f} 秒）；"
              f"自由押韵率 {r['free_rhyme']:.1%}，"
              f"诗体 {r['form']:.1%}，验证集损失 {r['val_loss']:.4f}", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"command": "python scripts/rhyme_study.py --steps "
                                  f"{args.steps} --json {args.json}",
                       "machine": gc.bench.machine.machine_info(),
                       "date": time.strftime("%Y-%m-%d %H:%M"),
                       "seeds": SEEDS, "lambda": LAMBDA, "batch": [16, 128], "rows": rows}, f,
                      ensure_ascii=False, indent=1, default=float)


if __name__ == "__main__":
    main()
