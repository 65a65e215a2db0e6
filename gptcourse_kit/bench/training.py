"""训练速度基准：同一次运行里并排测量，数字都来自这台机器。

- **参照**（写在本文件里）：一个朴素的 nanoGPT 式 fp32 循环——同一个模型、同样的批次形状，
  ``torch.optim.AdamW`` 默认实现，每步 ``loss.item()``，不评估；
- ``gc.train.train``（``python -m gptcourse train`` 用的就是它）的墙钟吞吐，**包含评估**：
  评估按发布配方的频率（每 ``EVAL_EVERY`` 步、每个划分 ``EVAL_BATCHES`` 批）摊到这段步数里；
  普通模式与 ``torch.compile`` 各一行；编译时间单独列出，不算进吞吐；
- 比值 = train / 参照；实际 GFLOP/s = 6·N·词元/秒，N = 全部参数（输出头与词嵌入共享，只算一次；
  注意力的 T² 项不算），与同一次运行里测得的 fp32 与 bf16 矩阵乘法上限相比；
- CPU 型号与 bf16 相关的指令（avx512_bf16、amx_bf16）。没有这些指令时 bf16 靠转换模拟、
  慢几十倍，所以只有 CPU 支持 bf16 时才计时 bf16 的两种做法（autocast、bf16 权重 + fp32 主权重）。

各配置分段交替运行（参照一段、train 一段……），每个取各段的中位数，机器上其他负载的起伏
对各配置影响相近；fp32 上限在开头和每段之后各测一次，取最好的一次。
"""
from __future__ import annotations

import os
import statistics
import time

import torch

from gptcourse.config import preset
from gptcourse.data import get_batch
from gptcourse.machine import CEILING_REPEATS, limits, machine_info, matmul_ceiling
from gptcourse.model import GPT
from gptcourse.optim import param_groups
from gptcourse.precision import bf16_decision
from gptcourse.train import TrainConfig, batch_generator, train

EVAL_EVERY, EVAL_BATCHES = 250, 10           # 发布配方的评估频率（见 docs/benchmarks.md）


# ---------------------------------------------------------------- 参照：朴素的 nanoGPT 式循环
def reference_loop(model: GPT, data: torch.Tensor, B: int, T: int, steps: int,
                   first_step: int = 0) -> float:
    """【参照】朴素 fp32 训练循环：每步 取批次 → 前向 → zero_grad → 反向 → 裁剪 → AdamW → .item()。

    返回这 steps 步的词元/秒。优化器在模型上第一次调用时建好并挂在模型上，之后接着用。
    """
    if not hasattr(model, "_ref_opt"):
        model._ref_opt = torch.optim.AdamW(param_groups(model, 0.1), lr=1e-3, betas=(0.9, 0.95))
    opt = model._ref_opt
    model.train()
    t0 = time.perf_counter()
    for s in range(first_step, first_step + steps):
        x, y = get_batch(data, B, T, generator=batch_generator(0, s))
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss.item()                                                # nanoGPT 每步都取回损失
    return B * T * steps / (time.perf_counter() - t0)


def _train_segment(model, data, val, cfg: TrainConfig, start: int, steps: int) -> float:
    """gc.train.train 从 start 步跑 steps 步（含最后一步的评估）的墙钟词元/秒。"""
    t0 = time.perf_counter()
    train(model, data, val, cfg, optimizer=model._opt, start_step=start,
          stop_step=start + steps)
    return cfg.batch_size * model.config.block_size * steps / (time.perf_counter() - t0)


def run(quick: bool = False, vocab_size: int | None = None) -> dict:
    """测量并打印表格，返回可以写成 JSON 的字典。

    quick=True 时模型更小、步数更少、不编译（只看能不能跑，测试用）。
    """
    if vocab_size is None:
        from gptcourse.data import load_corpus
        from gptcourse.tokenizer import CharTokenizer
        vocab_size = CharTokenizer.from_text(load_corpus("tang_jinti").train).vocab_size
    cfg = preset("course", vocab_size=vocab_size, **(dict(n_layer=1, block_size=32)
                                                     if quick else {}))
    B, T = (4, cfg.block_size) if quick else (16, cfg.block_size)
    seg, rounds = (2, 2) if quick else (12, 3)
    g = torch.Generator().manual_seed(0)
    data, val = (torch.randint(vocab_size, (n,), generator=g) for n in (200_000, 20_000))
    info = machine_info()
    native_bf16 = bf16_decision("cpu")[0]
    ceilings = limits(quick)
    fp32_samples = [ceilings["fp32"]["gflops"]]
    eval_batches = max(1, round(seg * EVAL_BATCHES / EVAL_EVERY))  # 评估摊到每段里的份量
    base = dict(batch_size=B, lr=1e-3, warmup_steps=10, max_steps=10**6, eval_interval=seg,
                eval_batches=eval_batches, bf16=False, progress=False)
    cases = {"train · 普通模式": TrainConfig(**base)}
    if not quick:                                                  # 编译要一两分钟，quick 不做
        cases["train · torch.compile"] = TrainConfig(**base, compile=True)
    if native_bf16 and not quick:
        cases |= {"train · bf16 autocast": TrainConfig(**base | dict(bf16=True)),
                  "train · bf16 权重 + fp32 主权重":
                      TrainConfig(**base | dict(bf16=True), bf16_mode="weights")}
    models = {}
    for name in ["参照", *cases]:
        torch.manual_seed(0)                                       # 各配置从同一组权重开始
        models[name] = GPT(cfg)
    n_params = sum(p.numel() for p in models["参照"].parameters())
    warm: dict[str, float] = {}
    for name, c in cases.items():                                  # 预热（含编译），单独计时
        m = models[name]
        m._opt = torch.optim.AdamW(param_groups(m, c.weight_decay), lr=c.lr, betas=c.betas)
        t0 = time.perf_counter()
        _train_segment(m, data, val, c, 0, 1)
        warm[name] = time.perf_counter() - t0
    reference_loop(models["参照"], data, B, T, 1)
    rates: dict[str, list[float]] = {k: [] for k in models}
    for r in range(rounds):
        start = 1 + r * seg
        rates["参照"].append(reference_loop(models["参照"], data, B, T, seg, start))
        for name, c in cases.items():
            rates[name].append(_train_segment(models[name], data, val, c, start, seg))
        again = matmul_ceiling(ceilings["fp32"]["n"], CEILING_REPEATS)   # 各段之间重测，取最好
        fp32_samples.append(again["gflops"])
        ceilings["fp32"] = max(ceilings["fp32"], again, key=lambda d: d["gflops"])
    ref = statistics.median(rates["参照"])
    rows = []
    for name, rs in rates.items():
        tps = statistics.median(rs)
        ceiling = ceilings["bf16" if "bf16" in name else "fp32"]["gflops"]
        rows.append({"case": name, "tokens_per_s": tps, "ratio": tps / ref,
                     "gflops": 6 * n_params * tps / 1e9,
                     "of_ceiling": 6 * n_params * tps / 1e9 / ceiling,
                     "warmup_s": warm.get(name)})
    result = {"machine": info, "quick": quick,
              "model": {"preset": "course", "params": n_params, "n_layer": cfg.n_layer,
                        "batch_size": B, "block_size": T, "steps_per_segment": seg,
                        "rounds": rounds, "eval_batches_per_segment": eval_batches},
              "matmul_ceiling": {k: v for k, v in ceilings.items() if k != "memory"},
              "memory": ceilings["memory"], "fp32_samples": fp32_samples, "training": rows,
              "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}
    print_report(result)
    return result


def print_report(r: dict) -> None:
    m, mod, c = r["machine"], r["model"], r["matmul_ceiling"]
    print(f"机器：{m['cpu']}，{m['cores']} 核，PyTorch {m['torch']}（{m['torch_threads']} 线程）；"
          f"bf16 相关指令：{', '.join(m['bf16_flags']) or '无'}（{m['bf16_decision']}）；"
          f"负载 {r['load_average']:.1f}")
    print(f"模型：course 预设（{mod['n_layer']} 层），{mod['params']:,} 个参数；"
          f"批次 {mod['batch_size']}×{mod['block_size']}；每段 {mod['steps_per_segment']} 步、"
          f"{mod['rounds']} 段取中位数；train 每段末评估 {mod['eval_batches_per_segment']} 批/划分")
    print("矩阵乘法上限：" + "，".join(f"{k} {v['gflops']:.1f} GFLOP/s（{v['n']}²）"
                                   for k, v in c.items()) + "\n")
    print(f"{'配置':<26}{'词元/秒':>9}{'÷参照':>7}{'GFLOP/s':>9}{'占上限':>7}{'预热秒':>8}")
    for row in r["training"]:
        warm = "" if row["warmup_s"] is None else f"{row['warmup_s']:.1f}"
        print(f"{row['case']:<26}{row['tokens_per_s']:>9,.0f}{row['ratio']:>6.2f}×"
              f"{row['gflops']:>9.1f}{row['of_ceiling']:>7.0%}{warm:>8}")
    print("（参照 = 本文件里的朴素 nanoGPT 式 fp32 循环；GFLOP/s = 6·N·词元/秒；"
          "bf16 行对 bf16 上限，其余对 fp32 上限）")
