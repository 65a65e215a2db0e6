"""笔记本 05（推理与部署）的练习检查器：参考是包里的函数；包里没有的写在这里，也是代替品。"""
from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F

from .. import model as gc_model
from ..config import preset
from ..model import GPT
from ..rope import apply_rope, rope_angles
from ..sampling import apply_repetition_penalty, apply_temperature, top_p_filter
from ._common import _call, _fail, _got, _ok, choice, exercise, register, results  # noqa: F401

EXERCISES = ("decode_loop", "guess_frequency", "inverse_cdf", "temperature_softmax", "top_p",
             "repetition_penalty", "rope_cached_step", "guess_offset", "kv_cache_bytes",
             "quantize_rows", "fenming", "rhyme_mask")
__all__ = list(EXERCISES)


# ---------------------------------------------------------------- 学生版的代替品（包里没有的）
def solution_inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """按概率抽样：probs [V]（和为 1），u [N] ∈ [0, 1) → [N] 的 i，cumsum[i-1] ≤ u < cumsum[i]。"""
    edges = torch.cumsum(probs, dim=-1)                  # 每一段的右端点
    idx = (edges[None, :] <= u[:, None]).sum(-1)         # 有几段的右端点 ≤ u
    return idx.clamp(max=probs.numel() - 1)              # u 比舍入后的总和还大时落在最后一段


def solution_rope_cached_step(q, k, v, k_cache, v_cache, cos, sin, start: int):
    """带 KV 缓存与 RoPE 的一步：q/k/v 是新位置还没旋转的 [B, H, 1, D]；缓存 [B, H, S, D]（K 已
    旋转，S = start）；cos/sin [P, D/2]。返回 (y [B, H, 1, D], k_all, v_all [B, H, S+1, D])。"""
    c, s = cos[start:start + 1], sin[start:start + 1]   # 新位置的角度：第 start 行，不是第 0 行
    q, k = apply_rope(q, c, s), apply_rope(k, c, s)     # 只转 Q 和 K，V 不转
    k_all, v_all = torch.cat([k_cache, k], dim=2), torch.cat([v_cache, v], dim=2)
    att = q @ k_all.transpose(-2, -1) / math.sqrt(q.shape[-1])     # [B, H, 1, S+1]
    return att.softmax(-1) @ v_all, k_all, v_all


def solution_quantize_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """对称 int8 量化，每行一个缩放系数（最大绝对值 / 127，全零的行用 1）：
    w [out, in] → (q int8 [out, in], scale [out, 1])，q * scale ≈ w。"""
    amax = w.abs().amax(dim=1, keepdim=True)                        # [out, 1]
    scale = torch.where(amax > 0, amax / 127, torch.ones_like(amax))
    q = torch.round(w / scale).clamp(-127, 127).to(torch.int8)
    return q, scale


def solution_fenming(line: str, pos=(1, 3, 5), both_as_ping=False, same=False,
                     missing_as_ze=False) -> list[bool | None]:
    """二四六分明：第 2、4 字（七言再加第 4、6 字）平仄相反为 True，相同为 False，有“中”或表外的字
    为 None。其余参数只给检查器模仿典型错误用（看错位置、把“中”当平、把“分明”当成相同、
    把表外的字当仄）。"""
    from ..verse import tone

    ts = [tone(line[i]) for i in (pos[:2] if len(line) == 5 else pos)]    # 第 2、4、(6) 字
    ts = [("平" if t == "中" else t) if both_as_ping else t for t in ts]
    ts = [t or "仄" for t in ts] if missing_as_ze else ts
    return [(a == b) == same if {a, b} <= {"平", "仄"} else None for a, b in zip(ts, ts[1:])]


GUESS_FREQUENCY = "B"      # 频率的误差 ∝ 1/√n：样本多 100 倍，误差小约 10 倍
GUESS_OFFSET = "B"         # 忘了偏移：从第一个带缓存的步骤起就不一样了
register("nb05", {"inverse_cdf": solution_inverse_cdf, "kv_cache_bytes": gc_model.kv_cache_bytes,
                  "rope_cached_step": solution_rope_cached_step, "fenming": solution_fenming,
                  "quantize_rows": solution_quantize_rows})


def _close(a, b) -> bool:
    return isinstance(a, torch.Tensor) and a.shape == b.shape and bool(
        torch.allclose(a.float(), b.float(), atol=1e-5, equal_nan=True)
        and torch.equal(torch.isinf(a), torch.isinf(b)))


# ---------------------------------------------------------------- 检查器
@exercise
def temperature_softmax(fn) -> bool:
    """练习：``fn(logits, tau)`` → 概率；τ=0 为贪心 one-hot，τ<0 抛 ValueError。"""
    x = torch.tensor([2.0, 1.0, 0.5, 0.1])
    for tau in (1.0, 0.5, 2.0, 0.0):
        got = _got(fn, x, tau, where=f"τ={tau}：")
        want = F.one_hot(x.argmax(), 4).float() if tau == 0 else \
            apply_temperature(x, tau).softmax(-1)
        if not _close(got, want):
            hint = "（τ=0 应该是 argmax 处为 1 的 one-hot）" if tau == 0 else ""
            return _fail(f"τ={tau} 时应得 {[round(v, 4) for v in want.tolist()]}，收到 {got}{hint}")
    try:
        fn(x, -1.0)
    except ValueError:
        return _ok()
    except Exception as e:  # noqa: BLE001
        return _fail(f"τ<0 应抛出 ValueError，收到 {type(e).__name__}")
    return _fail("τ=-1 不是温度，应抛出 ValueError（而不是悄悄地算出点什么）")


def _near_boundary(logits: torch.Tensor, p: float, tol: float = 1e-6) -> torch.Tensor:
    """[V] 布尔：这个词元"前面的累计概率"（float64 计算）离 p 不到 tol——它留不留取决于舍入。"""
    s, order = torch.sort(logits.double(), descending=True, stable=True)
    probs = s.softmax(-1)
    before = torch.empty_like(probs)
    before[order] = probs.cumsum(-1) - probs
    return (before - p).abs() <= tol


@exercise
def top_p(fn) -> bool:
    """练习：``fn(logits, p)`` → 过滤后的 logits；只比较离边界超过 1e-6 的词元（与舍入无关）。"""
    x = torch.tensor([0.2, 0.5, 0.3]).log()
    g = torch.Generator().manual_seed(0)
    spike = torch.zeros(6000)
    spike[0] = 30.0                       # float32 里第一名的概率就是 1.0
    cases = [(x, 0.7), (x, 0.4), (x, 0.81), (x, 1e-6), (x, 1.0),
             (torch.randn(50, generator=g) * 2, 0.9), (spike, 0.5), (spike, 1.0)]
    for logits, p in cases:
        got = _got(fn, logits.clone(), p, where=f"p={p}：")
        if not isinstance(got, torch.Tensor) or got.shape != logits.shape:
            return _fail(f"p={p}：应返回与 logits 同形状 {tuple(logits.shape)} 的张量")
        want = top_p_filter(logits, p)
        far = ~_near_boundary(logits, p) if p < 1 else torch.ones_like(logits, dtype=torch.bool)
        kept, want_kept = int((~torch.isinf(got)).sum()), int((~torch.isinf(want)).sum())
        if not torch.equal(torch.isinf(got)[far], torch.isinf(want)[far]):
            if p >= 1:
                return _fail(f"p={p} 时不应过滤任何词元（应保留 {want_kept:,} 个，"
                             f"你保留了 {kept:,} 个）：float32 的累计和在尾部可能提前到 1.0，"
                             "请对 p ≥ 1 直接返回原来的 logits")
            return _fail(f"p={p} 时应保留 {want_kept:,} 个词元，你保留了 {kept:,} 个。"
                         "记住：累计概率刚好越过 p 的那个词元也要保留")
        keep = ~torch.isinf(want)
        if not torch.allclose(got[keep].float(), logits[keep].float()):
            return _fail(f"p={p}：保留下来的词元的 logits 应保持原值不变")
    return _ok()


@exercise
def repetition_penalty(fn) -> bool:
    """练习：``fn(logits, ids, penalty)``：正的除、负的乘。"""
    x = torch.tensor([2.0, -2.0, 1.0, -0.5, 0.0])
    for ids, pen in (([0, 1], 2.0), ([1, 1, 3], 1.5), ([], 1.3), ([2, 4], 1.2)):
        got = _got(fn, x.clone(), ids, pen)
        want = apply_repetition_penalty(x, ids, pen)
        if not _close(got, want):
            if isinstance(got, torch.Tensor) and got.shape == x.shape and 1 in ids \
                    and got[1] > x[1]:
                return _fail("负的 logit 被你除以了 penalty，变大了——这个词元反而更可能出现。"
                             "负 logit 应该乘以 penalty")
            return _fail(f"ids={ids}, penalty={pen}：应得 {want.tolist()}，收到 {got}")
    return _ok()


@exercise
def kv_cache_bytes(fn) -> bool:
    """练习：``fn(n_layer, batch, seq_len, n_embd, bytes_per)`` → KV 缓存字节数。"""
    for args in ((4, 1, 128, 256, 4), (12, 1, 1024, 768, 4), (12, 8, 1024, 768, 2),
                 (3, 5, 7, 96, 2)):
        got = _got(fn, *args)
        want = gc_model.kv_cache_bytes(*args)
        if got != want:
            hint = next((h for w, h in (
                (want // 2, "（K 和 V 两份，别忘了乘 2）"),
                (want // args[0], "（每一层都有自己的 K、V，要乘层数 n_layer）"),
                (want // args[1], "（批里每一行都有自己的缓存，要乘 batch）"),
                (want * 8, "（单位是字节：bytes_per 已是字节数，不要再乘 8）")) if got == w), "")
            return _fail(f"参数 {args}：应得 {want:,} 字节，收到 {got!r}{hint}")
    return _ok()


# ---------------------------------------------------------------- 第 1 节：自己写解码循环
_TINY_POEMS = ("床前明月光，疑是地上霜。举头望明月，低头思故乡。\n"
               "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。\n"
               "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。\n")


@exercise
def decode_loop(fn) -> bool:
    """练习：``fn(model, tok, prompt, max_new_tokens, temperature, seed)`` → 提示 + 续写，与
    gc.generate.generate(..., use_cache=False) 逐字相同。"""
    from ..generate import generate
    from ..tokenizer import CharTokenizer

    tok = CharTokenizer.from_text(_TINY_POEMS)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = GPT(preset("teacher", vocab_size=tok.vocab_size, block_size=16, n_layer=2,
                           n_head=2, n_embd=32, dropout=0.0, attn_dropout=0.0,
                           resid_dropout=0.0)).eval()
    cases = [("", 30, 0.0, None), ("春", 30, 0.0, None),
             ("床前明月光，疑是地上霜。举头", 12, 0.0, None),              # 超过 block_size
             ("白", 40, 1.0, 0), ("白", 40, 1.0, 1), ("夜来", 40, 0.7, 2)]
    for prompt, n, tau, seed in cases:
        got, err = _call(fn, model, tok, prompt, n, tau, seed)
        shown = f"prompt={prompt!r}, max_new_tokens={n}, temperature={tau}, seed={seed}"
        if err:
            hint = "：序列超过 block_size 时只把最后 block_size 个词元送进模型" \
                if "block_size" in err else ""
            return _fail(f"{shown}：{err}{hint}")
        want = generate(model, tok, prompt, max_new_tokens=n, temperature=tau, seed=seed,
                        use_cache=False)
        if got == want:
            continue
        if not isinstance(got, str):
            return _fail(f"{shown}：应返回字符串（提示 + 续写），收到 {type(got).__name__}")
        if prompt and got == want[len(prompt):]:
            return _fail(f"{shown}：返回值应包含提示（提示 + 续写），你只返回了续写")
        if prompt and not got.startswith(prompt):
            return _fail(f"{shown}：返回值应以提示 {prompt!r} 开头（提示 + 续写）")
        if got.startswith(want) and len(got) > len(want):
            return _fail(f"{shown}：写出结束符（换行）就该停下，而且换行不算进返回值")
        return _fail(f"{shown}\n  你的结果：{got!r}\n  期望结果：{want!r}\n"
                     "  检查：开头有没有加上换行（tok.eos_id）、是不是只用了最后一个位置的 logits、"
                     "有没有屏蔽 <unk>、采样时是不是用了同一个 generator")
    # 没训练过的小模型分布几乎是均匀的，温度放错也看不出来：把最终归一化的 γ 放大 20 倍，
    # logits 跟着放大 20 倍（输出头没有偏置），分布变“尖”，τ = 0.3 与 τ = 2 才真正不同
    peaked = copy.deepcopy(model)
    with torch.no_grad():
        peaked.norm_f.weight.mul_(20.0)
    for tau, seed in ((0.3, 3), (2.0, 4), (2.0, 5)):
        got, err = _call(fn, peaked, tok, "白", 30, tau, seed)
        want = generate(peaked, tok, "白", max_new_tokens=30, temperature=tau, seed=seed,
                        use_cache=False)
        if err or got != want:
            return _fail(f"分布很尖的模型，temperature={tau}, seed={seed}：与 gc.generate 不同"
                         f"（{got!r} vs {want!r}）。温度要在 softmax 之前除：softmax(logits / τ)；"
                         "先 softmax 再除以 τ，multinomial 会重新归一化，温度就不起作用了")
    return _ok()


# ---------------------------------------------------------------- 第 2 节：按概率抽样
@exercise
def guess_frequency(guess) -> bool:
    """先猜一猜：抽 100 次时频率与概率的最大偏差，大约是抽 10,000 次时的几倍？"""
    return choice(guess, GUESS_FREQUENCY, "ABCD",
                  hints="每个字的次数近似二项分布，频率的标准差是 √(p(1−p)/n)：随 1/√n 缩小，"
                        "而不是随 1/n。样本多 100 倍，误差小 √100 倍")


@exercise
def inverse_cdf(fn) -> bool:
    """练习：``fn(probs, u)`` → 每个 u 落在哪一段的下标（cumsum[i-1] ≤ u < cumsum[i]）。"""
    g = torch.Generator().manual_seed(0)
    probs = [torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.25, 0.0, 0.75]),
             torch.softmax(torch.randn(50, generator=g), -1)]
    us = [torch.tensor([0.0, 0.1, 0.5, 0.79, 0.8, 0.999]), torch.tensor([0.0, 0.25, 0.2499, 0.9]),
          torch.rand(200, generator=g)]
    for pr, u in zip(probs, us):
        got = _got(fn, pr.clone(), u.clone(), where=f"probs={pr.tolist()[:4]}…：")
        want = solution_inverse_cdf(pr, u)
        try:
            got_t = torch.as_tensor(got).long().flatten()
        except Exception:  # noqa: BLE001
            return _fail(f"应返回 {len(u)} 个下标（整数张量），收到 {type(got).__name__}")
        if got_t.shape != want.shape:
            return _fail(f"应返回 {len(u)} 个下标，收到形状 {tuple(got_t.shape)}")
        bad = (got_t != want).nonzero()
        if len(bad):
            i = int(bad[0])
            hint = ""
            if (torch.cumsum(pr, -1) - u[i]).abs().min() < 1e-7:
                hint = ("：u 正好等于某段的右端点时，它属于下一段（比较用 ≤ 而不是 <）；"
                        "否则概率为 0 的字也可能被选中")
            return _fail(f"u = {u[i].item():.4f} 时应选第 {int(want[i])} 个，"
                         f"你选了第 {int(got_t[i])} 个{hint}")
    return _ok()


# ---------------------------------------------------------------- 第 4 节：带缓存与 RoPE 的一步
@exercise
def rope_cached_step(fn) -> bool:
    """练习：``fn(q, k, v, k_cache, v_cache, cos, sin, start)`` → (y, k_all, v_all)；y 是整段按真实
    位置旋转后因果注意力的最后一行。"""
    g = torch.Generator().manual_seed(1)
    B, H, D = 1, 2, 8
    ang = rope_angles(D, 32)
    cos, sin = ang.cos(), ang.sin()
    for S in (0, 5, 20):
        q, k, v = (torch.randn(B, H, S + 1, D, generator=g) for _ in range(3))
        c, s = cos[:S + 1], sin[:S + 1]
        qr, kr = apply_rope(q, c, s), apply_rope(k, c, s)               # 整段按真实位置旋转
        full = torch.nn.functional.scaled_dot_product_attention(qr, kr, v, is_causal=True)
        got = _got(fn, q[:, :, -1:], k[:, :, -1:], v[:, :, -1:], kr[:, :, :-1], v[:, :, :-1],
                   cos, sin, S, where=f"缓存里有 {S} 个位置时：")
        if not isinstance(got, tuple) or len(got) != 3:
            return _fail("应返回 (y, k_all, v_all) 三个张量")
        y, k_all, v_all = got
        if not (_close(v_all, v)):
            if _close(v_all[:, :, :-1], v[:, :, :-1]) and isinstance(v_all, torch.Tensor):
                return _fail("V 不做旋转：RoPE 只作用在 Q 和 K 上")
            return _fail("v_all 应该是把新的 V 接在缓存后面（torch.cat，dim=2）")
        if not _close(k_all, kr):
            if S and isinstance(k_all, torch.Tensor) and k_all.shape == kr.shape \
                    and _close(k_all[:, :, -1:], k[:, :, -1:]):
                return _fail(f"新的 K 没有按真实位置旋转（按位置 0 旋转等于没转）："
                             f"缓存里已有 {S} 个位置，新词元的位置是 start = {S}，"
                             "角度要取 cos[start]、sin[start]")
            return _fail("k_all 应是 缓存（已旋转）+ 新的 K（按位置 start 旋转），在 dim=2 拼接")
        if not _close(y, full[:, :, -1:]):
            return _fail("K、V 对了，但 y 与整段注意力的最后一行不一致：Q 也要按位置 start 旋转，"
                         "分数要除以 √D")
    return _ok()


@exercise
def guess_offset(guess) -> bool:
    """先猜一猜：缓存解码时每一步都把新词元当成位置 0，会怎样？"""
    return choice(guess, GUESS_OFFSET, "ABCD",
                  hints="每一步都按位置 0 旋转：新的 Q 和写进缓存的 K 都转了 0 度——根本没转，"
                        "模型失去了位置编码。RoPE 的分数取决于 Q 与 K 的位置差，第一个带缓存的步骤"
                        "（第 2 个位置）里这个差就已经是 0 而不是 1 了")


# ---------------------------------------------------------------- 第 7 节：int8 量化
@exercise
def quantize_rows(fn) -> bool:
    """练习：``fn(w)`` → (q int8 [out, in], scale [out, 1])，对称量化，每行一个缩放系数。"""
    g = torch.Generator().manual_seed(3)
    w = torch.randn(6, 16, generator=g) * torch.tensor([0.01, 0.1, 1.0, 3.0, 0.5, 0.02])[:, None]
    w0 = w.clone()
    w0[4] = 0.0                                                     # 一整行都是 0
    for m in (w, w0):
        got = _got(fn, m.clone())
        if not isinstance(got, tuple) or len(got) != 2:
            return _fail("应返回 (q, scale) 两个张量")
        q, scale = got
        if not isinstance(q, torch.Tensor) or q.dtype != torch.int8 or q.shape != m.shape:
            return _fail(f"q 应是与 w 同形状 {tuple(m.shape)} 的 torch.int8 张量")
        scale = torch.as_tensor(scale, dtype=torch.float32)
        if scale.numel() == 1:
            return _fail("只有一个缩放系数（每张量一个）：这一题要每行一个，"
                         "scale 的形状是 [out, 1]")
        if scale.shape not in ((m.shape[0], 1), (m.shape[0],)):
            return _fail(f"scale 的形状应是 [{m.shape[0]}, 1]（每行一个），"
                         f"收到 {tuple(scale.shape)}")
        recon = q.float() * scale.reshape(-1, 1)
        if not torch.isfinite(recon).all():
            return _fail("还原出了 nan/inf：全零的行不能用 0 当缩放系数")
        if q.min() < -127:
            return _fail("出现了 −128：对称量化只用 −127…127，记得 clamp")
        q_ref, s_ref = solution_quantize_rows(m)
        err_ref = (q_ref.float() * s_ref - m).abs().max(dim=1).values
        err_got = (recon - m).abs().max(dim=1).values
        if (err_got > err_ref + 1e-6).any():
            r = int((err_got > err_ref + 1e-6).nonzero()[0])
            return _fail(f"第 {r} 行的最大误差 {err_got[r]:.3g} 比应有的 {err_ref[r]:.3g} 大："
                         "先除以缩放系数再四舍五入（torch.round），直接 .to(torch.int8) 是截断")
    return _ok()


# ---------------------------------------------------------------- 第 6 节：二四六分明
_FENMING_MISTAKES = [                      # solution_fenming 模仿的典型错误 → 提示
    (dict(pos=(0, 2, 4)), "只看第 2、4、6 字（从 0 数是下标 1、3、5）：一三五不论"),
    (dict(pos=(0, 2, 4), same=True), "看的位置不对（一三五不论，下标是 1、3、5），"
                                     "而且分明 = 平仄相反"),
    (dict(both_as_ping=True), "有“中”（可平可仄）的字时无法判断，应为 None，不要当成平声"),
    (dict(missing_as_ze=True), "表外的字（tone 返回 None）无法判断，应为 None，不要当成仄声"),
    (dict(same=True), "分明 = 平仄相反才成立")]


@exercise
def fenming(fn) -> bool:
    """练习：``fn(line) -> [True/False/None, …]``，在真诗与打乱的对照组上与 check_tones 一致。"""
    from ..data import load_corpus, poems
    from ..verse import check_tones, poem_form, shuffle_chars, split_lines, tone

    real = [p for p in poems(load_corpus("tang_jinti").val) if poem_form(p)][:200]
    for name, group in (("真诗", real), ("字序打乱的对照组", shuffle_chars(real, seed=2))):
        lines = []                                              # (这一句, 应得的结果)
        for poem in group:
            rules = check_tones(poem)
            for i, line in enumerate(split_lines(poem)[0]):
                pos = (1, 3) if len(line) == 5 else (1, 3, 5)
                lines.append((line, [rules[f"第{i + 1}句第{a + 1}、{b + 1}字分明"]
                                     for a, b in zip(pos, pos[1:])]))
        for k, (line, want) in enumerate(lines):
            got = _got(fn, line, where=f"fenming({line!r}) ")
            if isinstance(got, tuple):
                got = list(got)
            if got == want:
                continue
            tones = "".join(tone(c) or "？" for c in line)
            hint = ("五言有 1 对（第 2、4 字），七言有 2 对（第 2、4 字和第 4、6 字），"
                    f"这句应有 {len(want)} 个结果")
            if isinstance(got, list) and len(got) == len(want):
                hint = _fenming_hint(fn, [ln for ln, _ in lines[:k + 40]])
            return _fail(f"{name}：fenming({line!r})（平仄 {tones}）应为 {want}，收到 {got!r}"
                         + (f"。{hint}" if hint else ""))
    return _ok()


def _fenming_hint(fn, lines: list[str]) -> str:
    """哪一种典型错误在这些句子上都与学员的结果相同，就说出它；一句上的巧合不算（空串）。"""
    got = [_call(fn, line)[0] for line in lines]
    got = [list(g) if isinstance(g, tuple) else g for g in got]
    return next((h for kw, h in _FENMING_MISTAKES
                 if all(g == solution_fenming(ln, **kw) for ln, g in zip(lines, got))), "")


# ---------------------------------------------------------------- 第 6 节：押韵的掩码
# 检查用的小词表：一东、二冬、七阳、八庚、九青的字，"行"属于七阳和八庚两个韵部，"同中空乡"
# 可平可仄（表里标"中"）却都在平声韵部里，"月白日"只有仄声，还有标点与换行
_RHYME_TEXT = "东同中空红风冬钟阳光霜乡行明声情青春月白日，。\n"
_RHYME_CASES = [("", ""), ("光", ""), ("", "东"), ("行", "明"), ("行光", ""), ("光行", "霜"),
                ("东", "中"), ("东空", "风"), ("明", "行")]


def _rhyme_variant(tok, feet: str, first: str, kind: str) -> torch.Tensor:
    """韵脚位置上允许的词元 [V]：``kind`` 是 ``_RHYME_HINTS`` 里的一种典型错误时按那种错法算，
    否则（如 ``"right"``）是正确的掩码，即 ``gc.constraints.VerseConstraint`` 在这里的掩码。"""
    from ..verse import PING, group_names, ping_groups, tone

    groups = set(group_names(PING))
    chain = feet[:1] if kind == "first group" else feet[-1:] if kind == "last group" else feet
    for c in chain:
        groups &= set(ping_groups(c))
    if kind == "union" and feet:
        groups = set().union(*(ping_groups(c) for c in feet))
    used = {"no repeat": set(), "first line": set(feet)}.get(kind, set(feet) | set(first))
    pieces = [tok.decode([i]) for i in range(tok.vocab_size)]
    if kind == "tone":
        return torch.tensor([p not in used and tone(p) == PING for p in pieces])
    return torch.tensor([p not in used and bool(set(ping_groups(p)) & groups) for p in pieces])


_RHYME_HINTS = {
    "first line": "首句末字也算做过韵脚（首句可以入韵），它也不能再用",
    "no repeat": "已经做过韵脚的字又被允许了——这是重韵：同一个字不能押两次，要把 feet 和首句末字"
                 "都去掉",
    "tone": "不是“平声字”就行：要看字属于哪个平声韵部（gc.verse.ping_groups），“同”“空”这样"
            "可平可仄的字也在一东韵里",
    "first group": "只用了第一个韵脚的韵部：多音字（如“行”属于七阳和八庚）的韵部要和后面每一个韵脚"
                   "取交集",
    "last group": "只用了最后一个韵脚的韵部：要和前面每一个韵脚的韵部都取交集",
    "union": "各韵脚的韵部取了并集：要取交集——下一个韵脚得和前面每一个韵脚同属一个韵部",
}


@exercise
def rhyme_mask(fn) -> bool:
    """练习：``fn(tok, feet, first) -> [V] bool``，与 VerseConstraint 在韵脚位置上的掩码一致。"""
    from ..tokenizer import CharTokenizer

    tok = CharTokenizer.from_text(_RHYME_TEXT)
    runs = []                                                   # (feet, first, 你的掩码)
    for feet, first in _RHYME_CASES:
        got = _got(fn, tok, feet, first, where=f"rhyme_mask(tok, {feet!r}, {first!r}) ")
        want = _rhyme_variant(tok, feet, first, "right")
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            return _fail(f"rhyme_mask(tok, {feet!r}, {first!r}) 应返回形状 {tuple(want.shape)} 的"
                         f"布尔张量，收到 {getattr(got, 'shape', type(got).__name__)}")
        runs.append((feet, first, got.bool()))
    for feet, first, got in runs:
        want = _rhyme_variant(tok, feet, first, "right")
        if torch.equal(got, want):
            continue
        extra = "".join(tok.decode([i]) for i in torch.nonzero(got & ~want).flatten().tolist())
        missing = "".join(tok.decode([i]) for i in torch.nonzero(want & ~got).flatten().tolist())
        hint = next((h for kind, h in _RHYME_HINTS.items()         # 每个输入都对得上才点名
                     if all(torch.equal(g, _rhyme_variant(tok, f, s, kind)) for f, s, g in runs)),
                    "")
        said = [f"不该允许 {extra!r}" if extra else "", f"漏了 {missing!r}" if missing else ""]
        return _fail(f"韵脚 {feet or '（还没有）'}、首句末字 {first or '（还没有）'}："
                     + "；".join(x for x in said if x) + (f"。{hint}" if hint else ""))
    return _ok()
