"""把一次基准运行的结果（``docs/benchmarks.json``）写成 ``docs/benchmarks.md``：表格与要点里的
每个数都来自这次运行；机器忙时（``--allow-busy``）每一节都标明。"""
from __future__ import annotations

import statistics

from gptcourse.machine import steal_share

from .generation import _md, markdown_levers, markdown_table


def _quiet(q: dict) -> str:
    """一次运行的安静程度：fp32 上限的重测与宿主抢走的时间。"""
    fp32 = q.get("fp32_samples") or []
    steal = steal_share(q.get("before", {}).get("steal_jiffies"),
                        q.get("after", {}).get("steal_jiffies"))
    text = ""
    if len(fp32) > 1:
        drift = 1 - statistics.median(fp32) / max(fp32)
        text = (f"fp32 上限在各段之间重测 {len(fp32)} 次，{min(fp32):.1f}…{max(fp32):.1f} GFLOP/s"
                f"（中位数比最好的低 {drift:.0%}）")
    if steal is not None:
        text += f"{'；' if text else ''}宿主抢走（steal）测量期间 CPU 时间的 {steal:.1%}"
    return text


def _machine(r: dict) -> list[str]:
    m = r.get("machine", {})
    before, after = r.get("quiet", {}).get("before", {}), r.get("quiet", {}).get("after", {})

    def load(s):
        la = s.get("load_average")
        share = s.get("other_cpu_share")
        return (f"负载平均 {la[0]:.2f}" if la else "负载平均 ？") + \
            (f"，别的进程占全部核的 {share:.0%}" if share is not None else "")
    lim = r.get("limits", {})
    out = [f"- 机器：{m.get('cpu', '？')}，{m.get('cores', '？')} 核，"
           f"PyTorch {m.get('torch', '？')}，"
           f"{m.get('torch_threads', '？')} 个 torch 线程，内核 {m.get('cpu_capability', '？')}；"
           f"bf16 相关指令：{', '.join(m.get('bf16_flags') or []) or '无'}。",
           f"- 开始 {before.get('time', '？')}（{load(before)}），结束 {after.get('time', '？')}"
           f"（{load(after)}）。"]
    if lim:
        out.append(f"- 物理上限（同一次运行）：fp32 矩阵乘法 {lim['fp32']['gflops']:.1f} GFLOP/s"
                   f"（{lim['fp32']['n']}²），bf16 {lim['bf16']['gflops']:.1f} GFLOP/s"
                   f"（{lim['bf16']['n']}²），内存带宽 {lim['memory']['gb_s']:.1f} GB/s"
                   f"（{lim['memory']['megabytes']} MB 复制）。")
    if len(r.get("quiet", {}).get("fp32_samples") or []) > 1:
        out.append("- 安静程度：" + _quiet(r["quiet"]) + "。")
    runs = r.get("runs") or {}
    by_start: dict[str, list[str]] = {}
    for name, run in runs.items():
        by_start.setdefault(run["quiet"]["before"].get("time", "？"), []).append(name)
    if len(by_start) > 1:                     # --only 分几次跑的：每一节来自哪一次运行
        out.append("- 这份文件合并了几次运行（每一节的数字都来自同一次运行）：")
        for names in by_start.values():
            run = runs[names[0]]
            q, lim = run["quiet"], run["limits"]
            out.append(f"  - {'、'.join(names)}：开始 {q['before'].get('time', '？')}"
                       f"（{load(q['before'])}），结束 {q['after'].get('time', '？')}；"
                       f"fp32 上限 {lim['fp32']['gflops']:.1f} GFLOP/s，"
                       + _quiet(q) + "。")
    busy = r.get("quiet", {}).get("busy")
    if busy:
        out += ["", "> **机器忙（用 --allow-busy 写出）：下面每个数字都不可信。** 理由："
                + "；".join(busy)]
    return out


def _training(t: dict) -> list[str]:
    mod = t["model"]
    rows = [[x["case"], f"{x['tokens_per_s']:,.0f}", f"{x['ratio']:.2f}×", f"{x['gflops']:.1f}",
             f"{x['of_ceiling']:.0%}", "—" if x["warmup_s"] is None else f"{x['warmup_s']:.0f}"]
            for x in t["training"]]
    out = ["## 训练速度（`python -m gptcourse_kit.bench --only training`）", "",
           f"course 预设（{mod['n_layer']} 层），{mod['params']:,} 个参数；批次 "
           f"{mod['batch_size']}×{mod['block_size']}；各配置分段交替运行（每段 "
           f"{mod['steps_per_segment']} 步，{mod['rounds']} 段取中位数）。参照 = "
           "`bench/training.py` 里朴素的 nanoGPT 式 fp32 循环"
           "（默认 AdamW、每步 `.item()`、不评估）；"
           "train 的两行是墙钟吞吐，含按发布配方频率摊进来的评估。", "",
           *_md(["配置", "词元/秒", "÷ 参照", "GFLOP/s（6·N·词元/秒）", "占 fp32 上限",
                 "预热（含编译）秒"], rows)]
    comp = {x["case"]: x for x in t["training"]}
    if "train · torch.compile" in comp:
        eager, compiled = comp["train · 普通模式"], comp["train · torch.compile"]
        step_e = t["model"]["batch_size"] * t["model"]["block_size"] / eager["tokens_per_s"]
        step_c = t["model"]["batch_size"] * t["model"]["block_size"] / compiled["tokens_per_s"]
        extra = (compiled["warmup_s"] or 0) - (eager["warmup_s"] or 0)
        if step_c < step_e:
            out += ["", f"这次编译多花 {extra:.0f} 秒，每步省 {1e3 * (step_e - step_c):.0f} ms："
                        f"训练超过 {extra / (step_e - step_c):,.0f} 步时编译才划算。编译时间取决于"
                        " inductor 的磁盘缓存（缓存热时只要几秒）；"
                        "`python -m gptcourse train` 默认的门槛按冷缓存定"
                        "（`cli/train.py` 的 `COMPILE_MIN_STEPS`）。"]
        else:
            out += ["", "这次编译后并不更快：`--compile auto` 不编译。"]
    return out


def _generation(g: dict) -> list[str]:
    out = ["## 生成速度（`python -m gptcourse_kit.bench --only generation`）", "",
           "### 1. 随课程发布的模型，批大小 1，带 KV 缓存（全部走 `generate()`）", "",
           "各配置按轮交替计时，取各轮中位数；每个数给墙钟与本进程 CPU 时间两种口径。", "",
           markdown_levers(g)]
    if "limit" in g:
        f = g["limit"]
        out += ["", f"**真实上限**：fp32 权重 {f['weight_mb']:.1f} MB，放在 {f['cache_level']}"
                    f"（bf16 时 {f['cache_level_bf16']}），所以限制它的不是内存带宽，"
                    "而是同一次运行里"
                    f"“只做矩阵 × 向量”那一行（{f['matvec_tok_s']:,.0f} 词元/秒；bf16 "
                    f"{f['matvec_bf16_tok_s'] or 0:,.0f}）；按 fp32 矩阵乘法上限 "
                    f"{f['fp32_gflops']:.0f} GFLOP/s 算的 FLOP 上限是 "
                    f"{f['flop_tok_s']:,.0f} 词元/秒。"]
        out += [f"- {case}：矩阵 × 向量那一行的 **{share:.0%}**"
                for case, share in f["shares"].items()]
    c = g.get("compile") or {}
    if c:
        out += ["", f"编译的快速一步（批大小 1，新进程）：冷缓存 {c.get('cold_s') or 0:.1f} 秒，"
                    "热缓存 "
                    f"{c.get('warm_s') or 0:.1f} 秒；写 {c.get('cold_tokens') or 0:,.0f}（冷）/ "
                    f"{c.get('warm_tokens') or 0:,.0f}（热）个词元以上编译才划算。"]
    d = g.get("demo") or {}
    if d.get("rows"):
        out += ["", "### 网页演示（127.0.0.1，`/api/stream`，发布设置，编译的快速一步）", "",
                *_md(["客户端", "请求", "首字 p50 秒", "首字 p95 秒", "整首七律 p50 秒",
                       "整首七律 p95 秒"],
                     [[str(r["clients"]), str(r["ok"]), f"{r['first_p50_s']:.3f}",
                       f"{r['first_p95_s']:.3f}", f"{r['whole_p50_s']:.3f}",
                       f"{r['whole_p95_s']:.3f}"] for r in d["rows"]])]
    p = g.get("peer") or {}
    if "speedup" in p:
        out += ["", "### 对照 Hugging Face transformers", "",
                f"同样的权重搬进 `LlamaForCausalLM`（logits 最多差 {p['logit_gap']:.1e}），"
                f"{p['prompts']} 个一字提示、贪心解码，两边写出完全相同的 {p['tokens']} 个词元，"
                f"{p['rounds']} 轮交替计时：", "",
                *_md(["解码器", "tok/s", "CPU tok/s"],
                     [["gptcourse `generate()`", f"{p['ours']['tok_s']:,.0f}",
                       f"{p['ours']['cpu_tok_s']:,.0f}"],
                      ["transformers `generate()`", f"{p['transformers']['tok_s']:,.0f}",
                       f"{p['transformers']['cpu_tok_s']:,.0f}"]]),
                "", f"我们是 transformers 的 **{p['speedup']:.2f} 倍**"
                    f"（CPU 时间口径 {p['cpu_speedup']:.2f} 倍）"
                    + (f"；编译的快速一步 {p['ours_fast']['tok_s']:,.0f} tok/s，是它的 "
                       f"**{p['fast_speedup']:.2f} 倍**。" if "fast_speedup" in p else "。")]
    elif p:
        out += ["", f"（Hugging Face 对照这次跳过：{p['skipped']}。）"]
    if g.get("rows"):
        out += ["", "### 3. 缓存 vs 整段重算（课程设计、随机权重、block_size = 640、贪心）", "",
                markdown_table(g)]
    return out


def markdown(results: dict) -> str:
    lines = ["# 速度基准", "",
             "本文件由 `python -m gptcourse_kit.bench` 自动生成，每一节的数字都来自同一次运行"
             "（原始数据 `docs/benchmarks.json`）；测试套件从不计时。机器不安静时基准拒绝写出本文件"
             "（理由见 `gptcourse/machine.py`）。", "", *_machine(results), ""]
    if "training" in results:
        lines += _training(results["training"]) + [""]
    lines += ["### 发布配方训练到目标损失的时间（`--only target`）", "",
              *_target(results.get("target")), ""]
    if "generation" in results:
        lines += _generation(results["generation"]) + [""]
    return "\n".join(lines)


def _target(t: dict | None) -> list[str]:
    """“训练到目标损失要多久”的表（gptcourse_kit/bench/target.py）；还没跑过时说怎么跑。"""
    if not t:
        return ["还没有量过：在空闲的机器上运行 `python -m gptcourse_kit.bench --only target`"
                "（约半小时）。"]

    def sec(v):
        return "没到达" if v is None else f"{v:,.0f}"
    rows = []
    for row in t["table"]:
        ratio = (f"{row['ratio']:.2f}×" if row["ratio"] is not None else
                 f"≥ {row['ratio_at_least']:.1f}×" if row.get("ratio_at_least") else "—")
        ref = sec(row["reference_s"])
        if row["reference_s"] is None:
            ref = f"> {t['reference']['cap_s']:,.0f}（上限）"
        rows.append([f"{row['target']:.2f}", ref, sec(row["release_s"]), ratio])
    last = t["release"]["rows"][-1] if t["release"]["rows"] else {}
    ref_last = t["reference"]["rows"][-1] if t["reference"]["rows"] else {}
    return ["训练墙钟（秒）第一次让整个验证集的 `split_loss` 不高于目标；每 250 步量一次，"
            "量损失的时间不算。发布配方 = 随课程发布的 course.pt 自己记下的训练命令"
            f"（`{t['release']['command']}`），它的墙钟含配方自己的评估与探针；参照 = 上面训练表里"
            "朴素的 nanoGPT 式 fp32 循环（恒定学习率 1e-3），最多训练到发布配方墙钟的 "
            f"{t['cap_ratio']:.0f} 倍。", "",
            *_md(["目标", "参照 秒", "发布配方 秒", "参照 ÷ 发布配方"], rows), "",
            f"发布配方 {last.get('step', 0):,} 步后 split_loss {last.get('val', float('nan')):.4f}"
            f"（训练 {t['release']['wall_s']:,.0f} 秒）；参照 {ref_last.get('step', 0):,} 步后 "
            f"{ref_last.get('val', float('nan')):.4f}（{ref_last.get('wall_s', 0):,.0f} 秒）。"]
