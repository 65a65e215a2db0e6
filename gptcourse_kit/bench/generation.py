"""生成速度基准：``python -m gptcourse_kit.bench --only generation``。

一次运行里并排测量三张表，全部走公开的 ``generate`` / ``generate_batch``（不是只测模型）：

1. **随课程发布的模型，批大小 1，带 KV 缓存**：默认设置的词元/秒，以及每个"杠杆"单独换掉后的
   对比——逐步 ``torch.cat`` 的旧式缓存（写在本文件里作参照）、手写注意力代替 SDPA、动态 int8、
   2 个线程、top-p + 温度、诗体约束，还有"模型单步"（不经解码循环，``inference_mode`` 与
   ``no_grad`` 各一次）和"只做矩阵 × 向量"（把每个权重矩阵读一遍的下限），看时间花在哪里。
   各配置按轮交替计时，取各轮中位数。
2. **16 首一批**：``generate_batch`` 一次写 16 首 与 逐首写 16 首 的吞吐之比。
3. **缓存 vs 整段重算**：课程模型的设计、**随机权重**（速度只取决于形状）、上下文放宽到 640，
   贪心写 32…512 个新词元，两种方式交替计时，取最快的一次。

每个数都给两种口径：墙钟词元/秒（目标说的就是它），以及按本进程 CPU 时间算的词元/秒——机器上
还有别的程序在跑时，后者受干扰小得多（但 2 线程时它把两个线程的时间加在一起）。
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager

import torch

from gptcourse.fastdecode import CACHE_ENV, compiler_available
from gptcourse.generate import generate, generate_batch
from gptcourse.machine import cache_holding, cache_levels, machine_info, matmul_ceiling
from gptcourse.mistakes.cache import CatCache, bench_model
from gptcourse.quantize import quantize_dynamic_int8
from gptcourse.runtime import ROOT

LENGTHS = (32, 64, 128, 256, 512)
DEFAULT = "默认（fp32 · 预分配缓存 · SDPA · inference_mode · 1 线程）"
COMPILED = "编译的快速一步（fp32，torch.compile）"
COMPILED_BF16 = "编译的快速一步（bf16 权重）"
RELEASE_FAST = "发布设置（押韵约束）· 编译的快速一步"
FREE_FAST = "发布设置的采样、不加约束 · 编译的快速一步"
MATVEC = "只做矩阵 × 向量 ×100（fp32 权重各读一遍）"
MATVEC_BF16 = "只做矩阵 × 向量 ×100（bf16 权重）"
PROMPT_LEN = 8
PROMPT = "春风吹绿江南岸"                                   # 加上开头的换行正好 8 个词元


@contextmanager
def _variant(model, *, cat_cache=False, manual=False, threads=None, full_head=False):
    """临时换掉一个杠杆：旧式缓存 / 手写注意力 / 线程数 / 输出头算全部位置。结束后恢复原样。"""
    old_threads = torch.get_num_threads()
    if full_head:                               # 旧做法：每个位置都过输出头，再只取最后一个
        forward = type(model).forward
        model.forward = lambda idx, targets=None, cache=None, last_only=False: \
            forward(model, idx, targets, cache)
    if cat_cache:
        model.new_cache = lambda: CatCache(model.config.n_layer, model.config.block_size)
    for b in model.blocks if manual else ():
        b.attn.use_sdpa = False
    if threads:
        torch.set_num_threads(threads)
    try:
        yield model
    finally:
        torch.set_num_threads(old_threads)
        model.__dict__.pop("new_cache", None)
        model.__dict__.pop("forward", None)
        for b in model.blocks:
            b.attn.use_sdpa = model.config.attention == "sdpa"


def _timed(fn) -> tuple[float, float, int]:
    """运行 fn()（返回生成的词元数）→ (墙钟秒, 进程 CPU 秒, 词元数)。"""
    w, c = time.perf_counter(), time.process_time()
    n = fn()
    return time.perf_counter() - w, time.process_time() - c, n


def _n_tokens(tok, prompt: str, out: str, max_new: int) -> int:
    """生成了几个词元（续写的长度；没写满 max_new 说明以结束符收尾，结束符也算一个）。"""
    n = len(tok.encode(out[len(prompt):]))
    return n + (n < max_new)


def _poems(model, tok, n: int, **kw) -> int:
    """逐首写 n 首（种子 0…n−1），返回词元总数。"""
    return sum(_n_tokens(tok, "", generate(model, tok, "", seed=s, **kw), 100)
               for s in range(n))


def _batch(model, tok, n: int, **kw) -> int:
    outs = generate_batch(model, tok, [""] * n, seed=0, **kw)
    return sum(_n_tokens(tok, "", o, 100) for o in outs)


def _steps(model, n: int, grad_ctx) -> int:
    """只调用模型：预填充 1 个词元后再单步 n 次（不采样、不经解码循环）。"""
    x = torch.zeros(1, 1, dtype=torch.long)
    with grad_ctx():
        cache = model.new_cache()
        for _ in range(n + 1):
            model(x, cache=cache)
    return n


def _weights_only(model, n: int, dtype=torch.float32) -> int:
    """下限：每个"词元"只把模型的每个权重矩阵与一个向量相乘一次（权重各读一遍），共 n 次。"""
    mats = [w.to(dtype) for w in {id(m.weight): m.weight.detach() for m in model.modules()
                                  if isinstance(m, torch.nn.Linear)}.values()]
    xs = [torch.randn(1, w.shape[1]).to(dtype) for w in mats]
    with torch.inference_mode():
        for _ in range(n):
            for w, x in zip(mats, xs):
                torch.nn.functional.linear(x, w)
    return n


def _rates(times: list[tuple[float, float, int]]) -> dict:
    wall = statistics.median(n / w for w, _, n in times)
    cpu = statistics.median(n / c for _, c, n in times if c > 0)
    return {"tok_s": wall, "cpu_tok_s": cpu, "tokens": statistics.median(n for *_, n in times)}


def shipped_levers(model, tok, rounds: int, n_poems: int, release: dict | None = None,
                   compiled: bool = True) -> dict:
    """表 1 与表 2：随课程发布的模型，批大小 1 的各个杠杆，以及 16 首一批的吞吐。

    ``release``：检查点的发布设置；有押韵约束时比较“发布设置”与“同样的采样、不加约束”
    （教学路径与编译的快速一步各一对）。``compiled``：测编译的快速一步（第 0 轮预热时编译）。"""
    q_all = quantize_dynamic_int8(model, include_head=True)
    q_blocks = quantize_dynamic_int8(model)
    steps = 100
    def poems(m):
        return _poems(m, tok, n_poems)

    fast = dict(compile=True)
    fast16 = dict(compile=True, precision="bf16")
    cases = {
        DEFAULT: (model, {}, poems),
        **({} if not compiled else {
            COMPILED: (model, {}, lambda m: _poems(m, tok, n_poems, **fast)),
            COMPILED_BF16: (model, {}, lambda m: _poems(m, tok, n_poems, **fast16)),
        }),
        "旧式缓存（每步 torch.cat）": (model, dict(cat_cache=True), poems),
        "手写注意力（代替 SDPA）": (model, dict(manual=True), poems),
        "输出头算全部位置（旧做法）": (model, dict(full_head=True), poems),
        "2 个线程": (model, dict(threads=2), poems),
        "动态 int8（全部 Linear，含输出头）": (q_all, {}, poems),
        "动态 int8（只量化各块，输出头 fp32）": (q_blocks, {}, poems),
        "温度 0.8 + top-p 0.9": (model, {}, lambda m: _poems(m, tok, n_poems, temperature=0.8,
                                                             top_p=0.9)),
        "诗体约束（七绝）": (model, {}, lambda m: _poems(m, tok, n_poems, form="七绝")),
        **({} if not release else {
            "发布设置（含押韵/平仄约束）":
                (model, {}, lambda m: _poems(m, tok, n_poems, **release)),
            "发布设置的采样、不加约束": (model, {}, lambda m: _poems(
                m, tok, n_poems, **{**release, "rhyme": False, "tones": False})),
            **({} if not compiled else {
                RELEASE_FAST: (model, {}, lambda m: _poems(m, tok, n_poems, **release, **fast)),
                FREE_FAST: (model, {}, lambda m: _poems(
                    m, tok, n_poems, **{**release, "rhyme": False, "tones": False}, **fast)),
            }),
        }),
        "模型单步 ×100（inference_mode）":
            (model, {}, lambda m: _steps(m, steps, torch.inference_mode)),
        "模型单步 ×100（no_grad）": (model, {}, lambda m: _steps(m, steps, torch.no_grad)),
        MATVEC: (model, {}, lambda m: _weights_only(m, steps)),
        MATVEC_BF16: (model, {}, lambda m: _weights_only(m, steps, torch.bfloat16)),
    }
    batch_cases = {"逐首写 16 首": lambda: _poems(model, tok, 16),
                   "generate_batch 一次 16 首": lambda: _batch(model, tok, 16)}
    if compiled:
        batch_cases |= {"逐首写 16 首（编译）": lambda: _poems(model, tok, 16, **fast),
                        "generate_batch 一次 16 首（编译）": lambda: _batch(model, tok, 16, **fast)}
        _batch(model, tok, 16, **fast)                            # 批大小 16 的编译，不计时
    times: dict[str, list] = {k: [] for k in (*cases, *batch_cases)}
    for r in range(rounds + 1):                                   # 第 0 轮是预热，不计
        for name, (m, lever, fn) in cases.items():
            with _variant(m, **lever):
                t = _timed(lambda f=fn, x=m: f(x))
            if r:
                times[name].append(t)
        if r:                                                     # 批量这张表不需要预热
            for name, fn in batch_cases.items():
                times[name].append(_timed(fn))
    rows = [{"case": k, **_rates(times[k])} for k in cases]
    base = rows[0]
    for row in rows:
        row["vs_default"] = row["tok_s"] / base["tok_s"]
        row["cpu_vs_default"] = row["cpu_tok_s"] / base["cpu_tok_s"]
    batch = [{"case": k, **_rates(times[k])} for k in batch_cases]
    out = {"levers": rows, "batch16": batch,
           "batch16_speedup": batch[1]["tok_s"] / batch[0]["tok_s"],
           "batch16_cpu_speedup": batch[1]["cpu_tok_s"] / batch[0]["cpu_tok_s"]}
    if compiled:                               # 编译的一批 16 首 ÷ 编译的逐首写
        out["batch16_compiled_speedup"] = batch[3]["tok_s"] / batch[2]["tok_s"]
    return out


def cache_table(lengths=LENGTHS, repeats: int = 2, tok=None) -> list[dict]:
    """表 3：随机权重的课程设计（block_size ≥ 640），贪心写 n 个新词元，缓存 vs 整段重算。"""
    if tok is None:
        from gptcourse.tokenizer import CharTokenizer
        hanzi = "".join(map(chr, range(0x4E00, 0x4E00 + 6420)))  # 词表大小与课程模型相近
        tok = CharTokenizer.from_text("\n" + PROMPT + hanzi)
    model = bench_model(vocab_size=tok.vocab_size,
                        block_size=max(640, PROMPT_LEN + max(lengths)))
    rows = []
    for n in lengths:
        best = {}
        for _ in range(repeats):
            for use_cache in (False, True):
                t = _timed(lambda c=use_cache, k=n: _n_tokens(
                    tok, PROMPT, generate(model, tok, PROMPT, max_new_tokens=k, temperature=0,
                                          use_cache=c), k))
                if t[2] != n:
                    raise RuntimeError(f"随机权重的模型提前写出了结束符（{t[2]} < {n}）")
                old = best.get(use_cache)
                best[use_cache] = t if old is None else (min(old[0], t[0]), min(old[1], t[1]), n)
        (nw, nc, _), (cw, cc, _) = best[False], best[True]
        rows.append({"new_tokens": n, "no_cache_tok_s": n / nw, "cache_tok_s": n / cw,
                     "cache_speedup": nw / cw, "cpu_cache_speedup": nc / cc})
        r = rows[-1]
        print(f"{n:>6} | {r['no_cache_tok_s']:>12.1f} | {r['cache_tok_s']:>12.1f} | "
              f"{r['cache_speedup']:>6.1f}× | {r['cpu_cache_speedup']:>9.1f}×", flush=True)
    return rows


def run(quick: bool = False, lengths: tuple[int, ...] | None = None, repeats: int | None = None,
        threads: int | None = 1, demo: bool = False) -> dict:
    """测量并打印三张表，返回可以写成 JSON 的字典。

    quick=True：每个配置 1 轮、只测 32 和 64 个新词元。只给 ``lengths`` 时只测表 3（测试用）。
    """
    t_start = time.perf_counter()
    old_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    info = machine_info()
    info["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    print(f"机器：{info['cpu']}，{info['cores']} 核，PyTorch {info['torch']}"
          f"（{info['torch_threads']} 线程，内核 {info['cpu_capability']}）；"
          f"bf16 相关指令：{', '.join(info['bf16_flags']) or '无'}")
    result: dict = {"machine": info, "quick": quick}
    try:
        if lengths is None:
            from gptcourse import checkpoint, release
            model, tok, meta = checkpoint.load()
            model.eval()
            n_poems, rounds = (2, 1) if quick else (4, 3)
            print(f"\n随课程发布的模型（{sum(p.numel() for p in model.parameters()):,} 个参数），"
                  f"批大小 1，每个配置写 {n_poems} 首（种子 0…{n_poems - 1}，默认温度 1，"
                  f"最多 100 个词元），{rounds} 轮取中位数")
            compiled = compiler_available()[0]
            result |= shipped_levers(model, tok, rounds, n_poems, release.settings(meta),
                                     compiled)
            print_levers(result)
            result["limit"] = real_limit(model, result["levers"],
                                         matmul_ceiling(512 if quick else 2048,
                                                        3 if quick else 5)["gflops"])
            print_limit(result["limit"])
            if compiled:
                result["compile"] = compile_times()
                result["compile"] |= break_even(result["compile"], result["levers"])
                c = result["compile"]
                print(f"\n编译（批大小 1，新进程）：冷缓存 {c['cold_s'] or 0:.1f} 秒、热缓存 "
                      f"{c['warm_s'] or 0:.1f} 秒；划算的门槛 "
                      f"{c.get('cold_tokens') or 0:,.0f} / {c.get('warm_tokens') or 0:,.0f} 个词元")
            result["peer"] = peer_row(model, tok, quick, compiled)
            if not quick or demo:
                from .server import demo_latency
                result["demo"] = demo_latency(requests=8 if quick else 50)
        lengths = lengths or ((32, 64) if quick else LENGTHS)
        repeats = repeats or (1 if quick else 2)
        print(f"\n缓存 vs 整段重算：课程设计、随机权重、block_size ≥ 640，"
              f"提示 {PROMPT_LEN} 个词元，批大小 1，贪心，每格取 {repeats} 次中最快的一次")
        print(f"{'新词元':>6} | {'无缓存 tok/s':>12} | {'KV缓存 tok/s':>12} | {'加速':>7} | "
              f"{'加速(CPU)':>9}")
        result["rows"] = cache_table(lengths, repeats)
        result["repeats"] = repeats
    finally:
        torch.set_num_threads(old_threads)
    result["seconds"] = time.perf_counter() - t_start
    return result


def print_levers(r: dict) -> None:
    print(f"{'配置':<40}{'tok/s':>9}{'相对默认':>9}{'CPU tok/s':>11}{'相对默认':>9}")
    for row in r["levers"]:
        print(f"{row['case']:<40}{row['tok_s']:>9,.0f}{row['vs_default']:>8.2f}×"
              f"{row['cpu_tok_s']:>11,.0f}{row['cpu_vs_default']:>8.2f}×")
    parts = "、".join(f"{b['case']} {b['tok_s']:,.0f} tok/s" for b in r["batch16"])
    print(f"\n16 首：{parts}；"
          f"一批写的吞吐是逐首写的 {r['batch16_speedup']:.2f} 倍（CPU 时间口径 "
          f"{r['batch16_cpu_speedup']:.2f} 倍）")


def real_limit(model, levers: list[dict], fp32_gflops: float) -> dict:
    """批大小 1 的解码受什么限制：同一次运行里测的"只做矩阵 × 向量"（权重留在缓存里时的真实
    上限）与"按 fp32 矩阵乘法上限算的 FLOP 上限"，各解码配置占矩阵 × 向量那一行的多少，以及
    权重放得进哪一级缓存（读 /sys/devices/system/cpu/cpu0/cache/）。"""
    mats = {id(m.weight): m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)}
    macs = sum(w.numel() for w in mats.values())                   # 每个词元的乘加次数
    nbytes = sum(w.nbytes for w in mats.values())
    rate = {r["case"]: r["tok_s"] for r in levers}
    matvec, matvec16 = rate.get(MATVEC), rate.get(MATVEC_BF16)
    shares = {}
    for case, ref in ((DEFAULT, matvec), (COMPILED, matvec), (COMPILED_BF16, matvec16),
                      (COMPILED_BF16 + " ÷ fp32 矩阵 × 向量", matvec)):
        name = case.split(" ÷ ")[0]
        if name in rate and ref:
            shares[case] = rate[name] / ref
    return {"weight_mb": nbytes / 1e6, "macs_per_token": macs,
            "cache_level": cache_holding(nbytes), "cache_level_bf16": cache_holding(nbytes // 2),
            "caches": cache_levels(), "matvec_tok_s": matvec, "matvec_bf16_tok_s": matvec16,
            "flop_tok_s": fp32_gflops * 1e9 / (2 * macs), "fp32_gflops": fp32_gflops,
            "shares": shares}


def compile_times(checkpoint_path=None) -> dict:
    """编译的快速一步（批大小 1，fp32）要多久：新进程、空的 inductor 缓存（冷）与同一个缓存
    再来一次（热）。各在一个子进程里计时 warm_up（不含进程启动和加载检查点）。"""
    code = ("import sys, torch; torch.set_num_threads(1)\n"
            "from gptcourse import checkpoint\nfrom gptcourse.fastdecode import FastDecoder\n"
            "m, t, _ = checkpoint.load(sys.argv[1] if len(sys.argv) > 1 else None)\n"
            "d = FastDecoder(m.eval(), compile=True)\ns = d.warm_up(1)\n"
            "print(s if d.compiled else -1)\n")
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
        env[CACHE_ENV] = tmp
        args = [sys.executable, "-c", code, *([str(checkpoint_path)] if checkpoint_path else [])]
        for name in ("cold_s", "warm_s"):
            r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=1800,
                               cwd=str(ROOT))
            lines = r.stdout.strip().splitlines()
            out[name] = float(lines[-1]) if r.returncode == 0 and lines else None
    return out


def break_even(times: dict, levers: list[dict]) -> dict:
    """编译多花的秒数 ÷ 每个词元省下的秒数 = 写多少个词元以上编译才划算（冷缓存与热缓存）。"""
    rate = {r["case"]: r["tok_s"] for r in levers}
    if COMPILED not in rate:
        return {}
    saved = 1 / rate[DEFAULT] - 1 / rate[COMPILED]                # 每个词元省下的秒数
    return {k.replace("_s", "_tokens"): (v / saved if v and saved > 0 else None)
            for k, v in times.items()}


PEER_PROMPTS = tuple("春秋山江月花风云夜雨雪柳孤天白长明万青落")   # 20 个一字提示


def print_limit(f: dict) -> None:
    print(f"\n权重 {f['weight_mb']:.1f} MB（fp32）放在 {f['cache_level']}（bf16 时 "
          f"{f['cache_level_bf16']}）：真实上限是同一次运行里的矩阵 × 向量 "
          f"{f['matvec_tok_s']:,.0f} tok/s（bf16 {f['matvec_bf16_tok_s'] or 0:,.0f}），"
          f"FLOP 上限 {f['flop_tok_s']:,.0f} tok/s")
    for case, share in f["shares"].items():
        print(f"  {case}：矩阵 × 向量那一行的 {share:.0%}")


def peer_row(model, tok, quick: bool, compiled: bool = False) -> dict:
    """同样的权重搬进 transformers 的 LlamaForCausalLM，贪心解码同样的词元，交替计时。"""
    from . import peer
    if not peer.available():
        print("\n（没装 transformers：跳过与 Hugging Face 的对照；"
              "要这一行请 pip install -e \".[bench]\"）")
        return {"skipped": "transformers 没有安装"}
    hf = peer.to_llama(model, tok)
    prompts = list(PEER_PROMPTS[:4] if quick else PEER_PROMPTS)
    r = peer.greedy_pair(model, tok, hf, prompts, rounds=1 if quick else 3,
                         fast=dict(compile=True) if compiled else None)
    print(f"\n对照 transformers LlamaForCausalLM.generate（同样的权重，logits 差 "
          f"{r['logit_gap']:.1e}；{r['prompts']} 个提示、贪心、共 {r['tokens']} 个相同的词元，"
          f"{r['rounds']} 轮交替）：我们 {r['ours']['tok_s']:,.0f} tok/s，transformers "
          f"{r['transformers']['tok_s']:,.0f} tok/s → {r['speedup']:.2f}×"
          f"（CPU 时间口径 {r['cpu_speedup']:.2f}×）")
    return r


def _md(header: list[str], rows: list[list[str]]) -> list[str]:
    """Markdown 表格的各行：第一列左对齐，其余右对齐。"""
    return ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)] + \
        ["| " + " | ".join(r) + " |" for r in rows]


def markdown_table(result: dict) -> str:
    """把表 3（缓存 vs 整段重算）写成 Markdown 表格（docs/benchmarks.md 的生成一节用）。"""
    return "\n".join(_md(
        ["新词元", "无缓存 tok/s", "KV 缓存 tok/s", "缓存加速（墙钟）", "缓存加速（CPU 时间）"],
        [[str(r["new_tokens"]), f"{r['no_cache_tok_s']:.1f}", f"{r['cache_tok_s']:.1f}",
          f"{r['cache_speedup']:.1f}×", f"{r['cpu_cache_speedup']:.1f}×"] for r in result["rows"]]))


def markdown_levers(result: dict) -> str:
    """表 1、表 2 写成 Markdown（docs/benchmarks.md 用）。"""
    header = ["配置（随课程发布的模型，批大小 1）", "tok/s", "相对默认", "CPU tok/s", "相对默认"]
    levers = _md(header,
                 [[r["case"], f"{r['tok_s']:,.0f}", f"{r['vs_default']:.2f}×",
                   f"{r['cpu_tok_s']:,.0f}", f"{r['cpu_vs_default']:.2f}×"]
                  for r in result["levers"]])
    batch = _md(["16 首", "tok/s", "CPU tok/s"],
                [[b["case"], f"{b['tok_s']:,.0f}", f"{b['cpu_tok_s']:,.0f}"]
                 for b in result["batch16"]])
    return "\n".join(levers + [""] + batch)


if __name__ == "__main__":
    res = run()
    print("\n" + markdown_levers(res) + "\n\n" + markdown_table(res))
