"""生成速度基准：带 / 不带 KV 缓存、fp32 / 动态 int8，随生成长度变化的词元/秒。

    python -m gptcourse.bench --only generation        # 或 python -m gptcourse.bench.generation

模型：课程模型的设计（RoPE、RMSNorm、SwiGLU、4 层、C=256、词表 6,436），但把上下文放宽到
block_size=640，好让生成长度一直测到 512；权重是**随机初始化**的——速度只取决于形状，
与权重的数值无关。每种组合在同一次运行里依次测量，取 ``repeats`` 次中最快的一次。
"""
from __future__ import annotations

import time

import torch

from ..config import preset
from ..model import GPT
from ..quantize import decode_speed, quantize_dynamic_int8

LENGTHS = (32, 64, 128, 256, 512)
PROMPT_LEN = 8


def bench_model(vocab_size: int = 6436, block_size: int = 640, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(preset("course", vocab_size=vocab_size, block_size=block_size)).eval()


def run(quick: bool = False, lengths: tuple[int, ...] | None = None, repeats: int | None = None,
        threads: int | None = None) -> dict:
    """测量并打印表格，返回 {"rows": [...], 说明字段}。quick=True 只测 32 和 64。"""
    lengths = lengths or ((32, 64) if quick else LENGTHS)
    repeats = repeats or (1 if quick else 2)
    if threads:
        torch.set_num_threads(threads)
    model = bench_model(block_size=max(640, PROMPT_LEN + max(lengths)))
    q8 = quantize_dynamic_int8(model, include_head=True)      # 输出头占解码计算的大头
    rows = []
    t_start = time.perf_counter()
    print(f"课程模型设计，随机权重，block_size={model.config.block_size}，"
          f"提示 {PROMPT_LEN} 个词元，批大小 1，贪心，torch 线程数 {torch.get_num_threads()}；"
          "int8 = 全部 Linear（含输出头）动态量化")
    print(f"{'新词元':>6} | {'无缓存 tok/s':>12} | {'KV缓存 tok/s':>12} | {'加速':>6} | "
          f"{'int8+缓存 tok/s':>15} | {'int8/fp32':>9}")
    for n in lengths:
        kw = dict(n_tokens=n, prompt_len=PROMPT_LEN, repeats=repeats)
        no_cache = decode_speed(model, use_cache=False, **kw)
        cached = decode_speed(model, use_cache=True, **kw)
        int8 = decode_speed(q8, use_cache=True, **kw)
        row = {"new_tokens": n, "no_cache_tok_s": no_cache, "cache_tok_s": cached,
               "cache_speedup": cached / no_cache, "int8_cache_tok_s": int8,
               "int8_speedup": int8 / cached}
        rows.append(row)
        print(f"{n:>6} | {no_cache:>12.1f} | {cached:>12.1f} | {cached / no_cache:>5.1f}× | "
              f"{int8:>15.1f} | {int8 / cached:>8.2f}×", flush=True)
    return {"model": "course design, random weights, block_size "
                     f"{model.config.block_size}, vocab {model.config.vocab_size}",
            "prompt_len": PROMPT_LEN, "batch": 1, "repeats": repeats,
            "int8": "all Linear layers incl. lm_head", "threads": torch.get_num_threads(),
            "seconds": time.perf_counter() - t_start,
            "rows": rows}


def markdown_table(result: dict) -> str:
    """把 run() 的结果写成 Markdown 表格（docs/benchmarks.md 的生成一节用）。"""
    lines = ["| 新词元 | 无缓存 tok/s | KV 缓存 tok/s | 缓存加速 | int8 + 缓存 tok/s "
             "| int8 / fp32 |",
             "|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| {r['new_tokens']} | {r['no_cache_tok_s']:.1f} | {r['cache_tok_s']:.1f} | "
                     f"{r['cache_speedup']:.1f}× | {r['int8_cache_tok_s']:.1f} | "
                     f"{r['int8_speedup']:.2f}× |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table(run()))
