"""训练速度基准：同一次运行里并排测量，数字都来自这台机器。

- 矩阵乘法上限：几个大的 fp32 方阵乘法里最快的一次 → GFLOP/s（本机算力的"天花板"）；
- 训练吞吐（词元/秒）：fp32 与 bf16 autocast、手写注意力与 SDPA；
- 前向吞吐（eval、no_grad）：手写注意力与 SDPA；
- 实际达到的 GFLOP/s ≈ 6·N·词元/秒（训练；前向是 2·N），与天花板之比。

各配置交替计时（每轮每个配置各一步，取中位数），机器上其他负载的起伏对各配置影响相同。
"""
from __future__ import annotations

import contextlib
import os
import platform
import statistics
import time
from dataclasses import replace

import torch

from ..config import preset
from ..data import get_batch
from ..model import GPT
from ..train import make_optimizer, train_step

# 名字 → (注意力实现, 是否 bf16 autocast)
TRAIN_CASES = {"fp32 · SDPA": ("sdpa", False), "bf16 · SDPA": ("sdpa", True),
               "fp32 · 手写注意力": ("manual", False)}
FORWARD_CASES = {"SDPA": "sdpa", "手写注意力": "manual"}


def machine_info() -> dict:
    """CPU 型号、线程数、PyTorch 版本，以及与 bf16 相关的指令集标志。"""
    name, flags = platform.processor() or platform.machine(), set()
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name") and ":" in line:
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and ":" in line:
                    flags = set(line.split(":", 1)[1].split())
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"cpu": name, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "gpu": gpu,
            "bf16_flags": sorted(flags & {"avx512_bf16", "amx_bf16", "amx_tile", "avx512f"})}


def matmul_ceiling(n: int = 2048, repeats: int = 5) -> dict:
    """n×n 的 fp32 矩阵乘法（2n³ 次浮点运算），取最快的一次 → GFLOP/s。"""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    a @ b                                                          # 预热
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return {"n": n, "seconds": best, "gflops": 2 * n**3 / best / 1e9}


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _model(cfg, attention: str) -> GPT:
    torch.manual_seed(0)                                           # 各配置从同一组权重开始
    return GPT(replace(cfg, attention=attention))


def run(quick: bool = False, vocab_size: int | None = None) -> dict:
    """测量并打印表格，返回可以写成 JSON 的字典。quick=True 时批次更小、轮数更少。"""
    if vocab_size is None:
        from ..data import load_corpus
        from ..tokenizer import CharTokenizer
        vocab_size = CharTokenizer.from_text(load_corpus("tang_jinti").train).vocab_size
    cfg = preset("course", vocab_size=vocab_size)
    B, T = (8, cfg.block_size) if quick else (16, cfg.block_size)
    rounds = 2 if quick else 3
    data = torch.randint(vocab_size, (50_000,), generator=torch.Generator().manual_seed(0))
    n_params = sum(p.numel() for p in GPT(cfg).parameters())
    info = machine_info()
    ceiling = matmul_ceiling(1024 if quick else 2048, 3 if quick else 5)

    # ---- 训练一步（前向 + 反向 + 裁剪 + AdamW），各配置交替计时
    setups = {}
    for name, (attention, bf16) in TRAIN_CASES.items():
        model = _model(cfg, attention).train()
        amp = torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)
        setups[name] = (model, make_optimizer(model, 1e-3), amp)
    g = torch.Generator().manual_seed(1)
    times: dict[str, list[float]] = {k: [] for k in setups}
    losses: dict[str, float] = {}
    for r in range(rounds + 1):                                    # 第 0 轮是预热，不计
        batch = [get_batch(data, B, T, generator=g)]
        for name, (model, opt, amp) in setups.items():
            t0 = time.perf_counter()
            losses[name], _ = train_step(model, opt, batch, 1.0, amp)
            if r:
                times[name].append(time.perf_counter() - t0)
    train_rows = []
    for name, ts in times.items():
        tps = B * T / statistics.median(ts)
        train_rows.append({"case": name, "step_s": statistics.median(ts), "tokens_per_s": tps,
                           "gflops": 6 * n_params * tps / 1e9, "loss": losses[name]})

    # ---- 只做前向（生成、评估时的情形）
    fwd = {k: _model(cfg, a).eval() for k, a in FORWARD_CASES.items()}
    ftimes: dict[str, list[float]] = {k: [] for k in fwd}
    x = get_batch(data, B, T, generator=g)[0]
    with torch.no_grad():
        for r in range(rounds + 1):
            for name, model in fwd.items():
                dt = _timed(lambda m=model: m(x))
                if r:
                    ftimes[name].append(dt)
    fwd_rows = [{"case": k, "tokens_per_s": B * T / statistics.median(ts),
                 "gflops": 2 * n_params * B * T / statistics.median(ts) / 1e9}
                for k, ts in ftimes.items()]

    tps = {r["case"]: r["tokens_per_s"] for r in train_rows}
    ftps = {r["case"]: r["tokens_per_s"] for r in fwd_rows}
    ratios = {
        "bf16 / fp32（训练）": tps["bf16 · SDPA"] / tps["fp32 · SDPA"],
        "SDPA / 手写（训练）": tps["fp32 · SDPA"] / tps["fp32 · 手写注意力"],
        "SDPA / 手写（前向）": ftps["SDPA"] / ftps["手写注意力"],
        "实际 / 矩阵乘法上限（fp32 训练）": train_rows[0]["gflops"] / ceiling["gflops"],
    }
    result = {"machine": info, "quick": quick,
              "model": {"preset": "course", "params": n_params, "batch_size": B,
                        "block_size": T, "rounds": rounds},
              "matmul_ceiling": ceiling, "training": train_rows, "forward": fwd_rows,
              "ratios": ratios}
    print_report(result)
    return result


def print_report(r: dict) -> None:
    m, mod, c = r["machine"], r["model"], r["matmul_ceiling"]
    print(f"机器：{m['cpu']}，{m['cores']} 核，PyTorch {m['torch']}（{m['torch_threads']} 线程）；"
          f"bf16 相关指令：{', '.join(m['bf16_flags']) or '无'}")
    print(f"模型：course 预设，{mod['params']:,} 个参数；"
          f"批次 {mod['batch_size']}×{mod['block_size']}；每个配置 {mod['rounds']} 轮取中位数")
    print(f"矩阵乘法上限（{c['n']}×{c['n']} fp32）：{c['gflops']:.1f} GFLOP/s\n")
    print(f"{'训练一步':<16}{'秒/步':>8}{'词元/秒':>10}{'GFLOP/s':>10}{'占上限':>8}")
    for row in r["training"]:
        print(f"{row['case']:<16}{row['step_s']:>8.3f}{row['tokens_per_s']:>10,.0f}"
              f"{row['gflops']:>10.1f}{row['gflops'] / c['gflops']:>8.0%}")
    print(f"\n{'只做前向':<16}{'词元/秒':>18}{'GFLOP/s':>10}")
    for row in r["forward"]:
        print(f"{row['case']:<16}{row['tokens_per_s']:>18,.0f}{row['gflops']:>10.1f}")
    print()
    for k, v in r["ratios"].items():
        print(f"{k}：{v:.2f}×" if "上限" not in k else f"{k}：{v:.0%}")
