"""同行对照：把随课程发布的模型逐个权重搬进 Hugging Face ``LlamaForCausalLM``，比较批大小 1 的
贪心解码速度（同样的权重、同样的词元，在同一个进程里交替计时）。

课程模型就是一个小 LLaMA：RMSNorm、rotate-half 的 RoPE、SwiGLU、无偏置、输出头与词嵌入共享；
只有 Q/K/V 是一个融合的矩阵（这里按行切成 q_proj / k_proj / v_proj）。搬过去之后两边的 logits
只差浮点舍入（:func:`to_llama` 检查它）。需要可选依赖 ``transformers``
（``pip install -e ".[bench]"``）；
没装时 :func:`available` 返回 False，基准跳过这一行并说明原因。
"""
from __future__ import annotations

import importlib.util
import time

import torch

from gptcourse.errors import UserError
from gptcourse.export import architecture, llama_weights
from gptcourse.generate import generate


def available() -> bool:
    return importlib.util.find_spec("transformers") is not None


def to_llama(model, tok, atol: float = 1e-4):
    """课程的 GPT（RoPE + RMSNorm + SwiGLU）→ 权重相同的 ``LlamaForCausalLM``（权重的摆法与
    ``python -m gptcourse export`` 是同一份：:func:`gptcourse.export.llama_weights`）。"""
    from transformers import LlamaConfig, LlamaForCausalLM

    c = model.config
    if architecture(c) != "llama":
        raise UserError("只有 RoPE + RMSNorm + SwiGLU 的模型能搬进 LLaMA")
    config, sd = llama_weights(model)
    ids_ = {"bos_token_id": tok.eos_id, "eos_token_id": tok.eos_id, "pad_token_id": tok.eos_id}
    hf = LlamaForCausalLM(LlamaConfig(**config, **ids_)).eval()
    missing, unexpected = hf.load_state_dict({k: v.detach().clone() for k, v in sd.items()},
                                             strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:      # 共享时 lm_head 就是词嵌入
        raise RuntimeError(f"搬进 LLaMA 的权重不对：缺 {missing}，多 {unexpected}")
    ids = torch.arange(min(c.vocab_size, c.block_size))[None] % c.vocab_size   # [1, T]
    with torch.inference_mode():
        gap = (hf(ids).logits - model(ids)[0]).abs().max().item()
    if gap > atol:
        raise RuntimeError(f"搬进 LLaMA 之后 logits 相差 {gap:.2e}（> {atol:g}）：换算有误")
    hf.logit_gap = gap
    return hf


def greedy_pair(model, tok, hf, prompts: list[str], rounds: int = 3,
                fast: dict | None = None) -> dict:
    """两边对同样的提示贪心解码到结束符（词元完全相同才计时），交替 ``rounds`` 轮。

    返回每边的词元/秒（墙钟与本进程 CPU 时间，各取各轮的中位数）与词元总数。``fast``：给了时
    再加一方"ours_fast"：``generate(..., **fast)``（例如编译的快速一步），同样要求词元相同。"""
    ids = [torch.tensor([[tok.eos_id] + tok.encode(p)]) for p in prompts]
    ours = [generate(model, tok, p, temperature=0) for p in prompts]
    with torch.inference_mode():
        theirs = [hf.generate(x, max_new_tokens=100, do_sample=False,
                              attention_mask=torch.ones_like(x))[0, x.shape[1]:].tolist()
                  for x in ids]
    n = 0
    for p, o, t in zip(prompts, ours, theirs):
        mine = tok.encode(o[len(p):]) + [tok.eos_id]
        if t[:len(mine)] != mine[:len(t)]:
            raise RuntimeError(f"两边的贪心结果不同：{o!r} vs {tok.decode(t)!r}")
        n += len(mine)

    def run_ours():
        for p in prompts:
            generate(model, tok, p, temperature=0)

    def run_fast():
        for p in prompts:
            generate(model, tok, p, temperature=0, **fast)

    if fast is not None:
        got = [generate(model, tok, p, temperature=0, **fast) for p in prompts]
        if got != ours:
            raise RuntimeError("快速一步的贪心结果与教学路径不同")

    def run_theirs():
        with torch.inference_mode():
            for x in ids:
                hf.generate(x, max_new_tokens=100, do_sample=False,
                            attention_mask=torch.ones_like(x))

    sides = [("ours", run_ours), ("transformers", run_theirs)] + \
        ([("ours_fast", run_fast)] if fast is not None else [])
    times: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in sides}
    for _ in range(rounds):
        for name, fn in sides:
            w, c = time.perf_counter(), time.process_time()
            fn()
            times[name].append((time.perf_counter() - w, time.process_time() - c))
    out = {"tokens": n, "prompts": len(prompts), "rounds": rounds,
           "logit_gap": getattr(hf, "logit_gap", None)}
    for name, ts in times.items():
        out[name] = {"tok_s": n / sorted(w for w, _ in ts)[len(ts) // 2],
                     "cpu_tok_s": n / sorted(c for _, c in ts)[len(ts) // 2]}
    out["speedup"] = out["ours"]["tok_s"] / out["transformers"]["tok_s"]
    out["cpu_speedup"] = out["ours"]["cpu_tok_s"] / out["transformers"]["cpu_tok_s"]
    if fast is not None:
        out["fast_speedup"] = out["ours_fast"]["tok_s"] / out["transformers"]["tok_s"]
    return out
