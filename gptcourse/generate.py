"""生成：采样器（小的纯函数）+ 一个自回归解码循环（带或不带 KV 缓存、单条或一批提示、可流式输出）。

约定：

- 上下文总是以结束符 "\\n" 开头（训练语料里每首诗都跟在一个换行后面），再接提示；
  空提示就是只有这个 "\\n"——"现在开始写一首新诗"。
- 返回值是 **提示 + 续写**，不含最后那个结束符 "\\n"。
- 每一步只用最后一个位置的 logits；生成到结束符或 ``max_new_tokens`` 为止。
- 序列超过 ``block_size`` 时只把最后 ``block_size`` 个词元送进模型。带缓存时，缓存一旦装满
  就退回到"对裁剪后的窗口整段重算"（与不带缓存的结果完全一致）：窗口滑动后，旧的 K/V 是在
  另一段上下文里算出来的，不能直接沿用。
- 温度 0 = 贪心（argmax）。``seed`` 给定时采样可复现；一批提示中第 i 行使用 ``seed + i``，
  所以 ``generate_batch(prompts, seed=s)[i] == generate(prompts[i], seed=s + i)``。
- 生成时从不采样 <unk>；``form`` / ``acrostic`` / ``rhyme`` / ``tones`` 的约束见
  :mod:`gptcourse.constraints`。
- 每一步的开销：模型只算新位置（K/V 写进预分配的缓存）；选词整批一次完成
  （:func:`~gptcourse.sampling.sample_rows`，只有重复惩罚和格式约束逐行）；约束要看的
  "当前这首诗"的文本逐字增量维护，不必每步把整行重新解码。
"""
from __future__ import annotations

import argparse

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from .constraints import FORMS, VerseConstraint
from .sampling import (NEG_INF, apply_repetition_penalty, apply_temperature,  # noqa: F401
                       check_sampling_args, sample_next, sample_rows, top_k_filter, top_p_filter)
DEFAULT_MAX_NEW_TOKENS = 100


# ---------------------------------------------------------------- 解码循环
@contextmanager
def eval_mode(model: torch.nn.Module):
    """临时切到 eval（关掉 dropout），结束后恢复原来的模式。已在 eval 时什么都不改（线程安全）。"""
    was = model.training
    if was:
        model.eval()
    try:
        yield model
    finally:
        if was:
            model.train()


def _constraint(tok, form, acrostic, rhyme=False, rhyme_group=None, tones=False):
    if form is None and not acrostic and not (rhyme or rhyme_group is not None or tones):
        return None
    return VerseConstraint(tok, form, acrostic, rhyme=rhyme, rhyme_group=rhyme_group, tones=tones)


def _current_poem(text: str) -> str:
    return text[text.rfind("\n") + 1:]


def _decode(model, tok, prompts: list[str], *, max_new_tokens: int | None, temperature: float,
            top_k: int | None, top_p: float | None, repetition_penalty: float, seed: int | None,
            use_cache: bool, form: str | None, acrostic: str | None, rhyme: bool = False,
            rhyme_group: str | None = None, tones: bool = False) -> Iterator[list[int | None]]:
    """逐步产出每一行新生成的 id（这一行还在"喂提示"或已经结束时为 None）。

    不同长度的提示怎样成批？所有行从最短提示的长度开始同步前进；较长的提示在它自己的提示
    用完之前，下一个词元直接取提示里的字（"强制"），不采样。于是每一行都处在同一个位置，
    不需要填充和额外的掩码，每一行的结果与单独生成时相同。
    """
    check_sampling_args(temperature, top_k, top_p, repetition_penalty)
    if not prompts:
        raise ValueError("prompts 不能为空")
    if any(not isinstance(p, str) for p in prompts):
        raise ValueError("提示必须是字符串")
    cons = _constraint(tok, form, acrostic, rhyme, rhyme_group, tones)
    if max_new_tokens is None:
        max_new_tokens = DEFAULT_MAX_NEW_TOKENS
        if cons is not None:       # 正好够写完一整首（每句按 7 字 + 标点算）再加结束符
            max_new_tokens = (cons.n_lines or 8) * ((cons.line_len or 7) + 1) + 1
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) \
            or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens 必须是 ≥ 0 的整数，收到 {max_new_tokens!r}")
    bs, eos = model.config.block_size, tok.eos_id
    rows = [[eos] + tok.encode(p) for p in prompts]                # 每行完整的 id 序列
    n_prompt = [len(r) for r in rows]
    for p, n in zip(prompts, n_prompt):
        if n > bs:
            raise ValueError(f"提示太长：{n - 1} 个词元（加上开头的换行 {n} 个），"
                             f"超过模型的上下文 block_size={bs}")
        if cons is not None:
            poem = _current_poem(p)
            line, count, L = cons.state(poem)                     # 提示不合格式 → ValueError
            need = (cons.n_lines or 8) * ((L or 7) + 1) + 1 - len(poem)
            if max_new_tokens < need:
                raise ValueError(f"max_new_tokens={max_new_tokens} 不够写完这首诗"
                                 f"（还需要 {need} 个词元）")
    device = next(model.parameters()).device
    gens = [None] * len(rows)
    if seed is not None:
        gens = [torch.Generator(device=device).manual_seed(int(seed) + i) for i in range(len(rows))]
    unk = getattr(tok, "unk_id", None)
    banned = torch.tensor([] if unk is None else [unk], dtype=torch.long, device=device)  # 从不生成
    poems = [_current_poem(p) for p in prompts] if cons is not None else None   # 每行当前这首诗
    B, L0 = len(rows), min(n_prompt)
    seq = torch.tensor([r[:L0] for r in rows], dtype=torch.long, device=device)   # [B, L0]
    cache = model.new_cache() if use_cache else None
    produced, done = [0] * B, [False] * B
    with eval_mode(model):
        while True:
            t = seq.shape[1]
            for i in range(B):
                if t >= n_prompt[i] and (produced[i] >= max_new_tokens
                                         or (produced[i] > 0 and rows[i][-1] == eos)):
                    done[i] = True
            if all(done):
                return
            live = [i for i in range(B) if not done[i] and t >= n_prompt[i]]   # 这一步要抽样的行
            with torch.inference_mode():      # 只包住这一步：yield 出去之后调用方不受影响
                if cache is not None and t <= bs:                 # 只把新位置送进模型
                    logits = model(seq[:, cache.length:], cache=cache)[0][:, -1]     # [B, V]
                else:                                              # 无缓存，或上下文已满：整段重算
                    logits = model(seq[:, -bs:])[0][:, -1]                           # [B, V]
                picked = _choose(logits, live, rows, poems, bs, eos, cons, banned, temperature,
                                 top_k, top_p, repetition_penalty, gens) if live else []
            step, out = [eos] * B, [None] * B    # 已结束的行送结束符占位，保持批次是矩形
            for i in range(B):
                if not done[i] and t < n_prompt[i]:
                    step[i] = rows[i][t]                           # 还在喂提示（强制）
            for i, nxt in zip(live, picked):
                rows[i].append(nxt)
                produced[i] += 1
                step[i] = out[i] = nxt
                if poems is not None:                              # 增量维护，不必每步重新解码整行
                    poems[i] = _current_poem(poems[i] + tok.decode([nxt]))
            seq = torch.cat([seq, torch.tensor(step, device=device)[:, None]], dim=1)  # [B, t+1]
            yield out


def _choose(logits, live, rows, poems, bs, eos, cons, banned, temperature, top_k, top_p, penalty,
            gens) -> list[int]:
    """这一步所有要抽样的行（``live``）一起选词：重复惩罚 → 格式/禁用掩码 → 采样。

    logits [B, V]；rows[i] 是第 i 行到目前为止的全部 id，poems[i] 是它当前这首诗的文本。
    只有重复惩罚和格式约束逐行处理；其余（禁用 <unk>、温度、top-k、top-p、softmax）整批一次算完。
    """
    logits = logits[live].float() if len(live) < logits.shape[0] else logits.float()   # [b, V]
    if penalty != 1:                                               # 只惩罚模型看得见的窗口里的字
        for j, i in enumerate(live):
            seen = sorted(set(rows[i][-bs:]) - {eos})                 # 结束符是结构，不惩罚
            logits[j] = apply_repetition_penalty(logits[j], seen, penalty)
    logits = logits.index_fill(-1, banned, NEG_INF)               # 从不生成 <unk>
    if cons is not None:
        allowed = torch.stack([cons.allowed(poems[i]) for i in live]).to(logits.device)  # [b, V]
        allowed[:, banned] = False
        if not allowed.any(-1).all():
            raise ValueError("格式约束与禁用词元叠加后没有任何可选的词元")
        logits = logits.masked_fill(~allowed, NEG_INF)
    return sample_rows(logits, temperature, top_k, top_p, [gens[i] for i in live]).tolist()


# ---------------------------------------------------------------- 公开接口
def generate_batch(model, tok, prompts: list[str], max_new_tokens: int | None = None,
                   temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                   repetition_penalty: float = 1.0, seed: int | None = None,
                   use_cache: bool = True, form: str | None = None,
                   acrostic: str | None = None, rhyme: bool = False,
                   rhyme_group: str | None = None, tones: bool = False) -> list[str]:
    """一次生成一批提示（长度可以不同）→ 每行 提示 + 续写。第 i 行的种子是 ``seed + i``。"""
    if isinstance(prompts, str):
        raise TypeError("prompts 应是提示的列表，收到一个字符串；只写一首请用 generate()，"
                        f"或写成 [{prompts!r}]")
    prompts = list(prompts)
    new: list[list[int]] = [[] for _ in prompts]
    for step in _decode(model, tok, prompts, max_new_tokens=max_new_tokens,
                        temperature=temperature, top_k=top_k, top_p=top_p,
                        repetition_penalty=repetition_penalty, seed=seed, use_cache=use_cache,
                        form=form, acrostic=acrostic, rhyme=rhyme, rhyme_group=rhyme_group,
                        tones=tones):
        for i, t in enumerate(step):
            if t is not None:
                new[i].append(t)
    eos = tok.eos_id
    return [p + tok.decode(ids[:-1] if ids and ids[-1] == eos else ids)
            for p, ids in zip(prompts, new)]


def stream_tokens(model, tok, prompt: str = "", max_new_tokens: int | None = None,
                  temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                  repetition_penalty: float = 1.0, seed: int | None = None,
                  use_cache: bool = True, form: str | None = None,
                  acrostic: str | None = None, rhyme: bool = False,
                  rhyme_group: str | None = None, tones: bool = False) -> Iterator[str]:
    """逐个产出新生成的文字片段（不含提示与最后的结束符）。拼起来 == generate() 的续写部分。

    字节级 BPE 的一个词元可能只是一个汉字的前一两个字节：这时先攒着，等字节凑齐了再一起产出。
    """
    pending: list[int] = []                                       # 还没凑成完整文字的词元
    for (t,) in _decode(model, tok, [prompt], max_new_tokens=max_new_tokens,
                        temperature=temperature, top_k=top_k, top_p=top_p,
                        repetition_penalty=repetition_penalty, seed=seed, use_cache=use_cache,
                        form=form, acrostic=acrostic, rhyme=rhyme, rhyme_group=rhyme_group,
                        tones=tones):
        if t is not None and t != tok.eos_id:
            pending.append(t)
            text = tok.decode(pending)
            if not text.endswith("\ufffd"):                       # 最后一个字是完整的
                yield text
                pending = []
    if pending:
        yield tok.decode(pending)


def generate(model, tok, prompt: str = "", max_new_tokens: int | None = None,
             temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
             repetition_penalty: float = 1.0, seed: int | None = None, use_cache: bool = True,
             form: str | None = None, acrostic: str | None = None, rhyme: bool = False,
             rhyme_group: str | None = None, tones: bool = False,
             stream: Callable[[str], object] | None = None) -> str:
    """写一首诗 → 提示 + 续写（不含结束符）。

    ``max_new_tokens=None``：不加约束时 100；给了 ``form``/``acrostic`` 时正好够写完一首。
    ``rhyme`` / ``rhyme_group`` / ``tones``：押韵与平仄约束（需要 ``form`` 或 ``acrostic``），
    见 :mod:`gptcourse.constraints`。
    ``stream``：可选的回调，每生成一个字就调用一次 ``stream(片段)``。
    """
    kw = dict(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
              repetition_penalty=repetition_penalty, seed=seed, use_cache=use_cache, form=form,
              acrostic=acrostic, rhyme=rhyme, rhyme_group=rhyme_group, tones=tones)
    if stream is None:
        return generate_batch(model, tok, [prompt], **kw)[0]
    pieces = []
    for piece in stream_tokens(model, tok, prompt, **kw):
        stream(piece)
        pieces.append(piece)
    return prompt + "".join(pieces)


@torch.no_grad()
def next_token_probs(model, tok, prompt: str = "", temperature: float = 1.0,
                     top_k: int | None = None, top_p: float | None = None) -> torch.Tensor:
    """提示之后下一个词元的概率分布 [V]（经过温度、top-k、top-p；温度 0 时是 one-hot）。"""
    ids = [tok.eos_id] + tok.encode(prompt)
    bs = model.config.block_size
    device = next(model.parameters()).device
    with eval_mode(model):
        logits = model(torch.tensor([ids[-bs:]], device=device))[0][0, -1].float()   # [V]
    check_sampling_args(temperature, top_k, top_p)
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(), logits.numel()).float()
    logits = apply_temperature(logits, temperature)
    return top_p_filter(top_k_filter(logits, top_k), top_p).softmax(-1)


# ---------------------------------------------------------------- 命令行
def cli_arguments(p) -> None:
    p.add_argument("--checkpoint", default=None, help="检查点路径（默认：随课程发布的模型）")
    p.add_argument("--prompt", default="", help="开头（例如“春”或完整的第一句“白日依山尽，”）")
    p.add_argument("-n", "--num-samples", type=int, default=1, help="写几首（默认 1）")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help=f"最多生成多少个词元（默认 {DEFAULT_MAX_NEW_TOKENS}；"
                        "有诗体约束时正好一首）")
    p.add_argument("--temperature", type=float, default=None,
                   help="温度，0 = 贪心（默认：检查点的发布设置）")
    p.add_argument("--top-k", type=int, default=None, help="只在最可能的 k 个字里抽样")
    p.add_argument("--top-p", type=float, default=None,
                   help="核采样阈值，(0, 1]（默认：检查点的发布设置）")
    p.add_argument("--repetition-penalty", type=float, default=None,
                   help="重复惩罚，1 = 不惩罚（默认：检查点的发布设置）")
    p.add_argument("--seed", type=int, default=None, help="随机种子（第 i 首用 seed + i）")
    p.add_argument("--form", choices=list(FORMS), default=None, help="诗体：五绝/五律/七绝/七律")
    p.add_argument("--acrostic", default=None, help="藏头字，例如 春夏秋冬")
    p.add_argument("--rhyme", action=argparse.BooleanOptionalAction, default=None,
                   help="押韵：双数句末字同一平声韵部（默认：检查点的发布设置）")
    p.add_argument("--rhyme-group", default=None,
                   help="指定平声韵部（全名或韵目字，例如 下平七阳 或 阳；隐含 --rhyme）")
    p.add_argument("--tones", action=argparse.BooleanOptionalAction, default=None,
                   help="平仄：第 2、4、6 字分明、相对、相粘（默认：检查点的发布设置）")
    p.add_argument("--stream", action="store_true", help="边生成边输出")
    p.add_argument("--no-cache", action="store_true", help="不用 KV 缓存（每步整段重算，较慢）")
    p.add_argument("--device", default=None, help="cpu / cuda / mps（默认自动选择）")


def cli_main(args) -> int:
    import sys

    from . import checkpoint, release
    from .runtime import get_device

    if args.num_samples < 1:
        raise ValueError(f"-n 必须 ≥ 1，收到 {args.num_samples}")
    model, tok, meta = checkpoint.load(args.checkpoint,
                                       map_location=str(get_device(args.device)))
    given = {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p,
             "repetition_penalty": args.repetition_penalty, "rhyme": args.rhyme,
             "tones": args.tones}
    decoding = {**release.settings(meta), **{k: v for k, v in given.items() if v is not None}}
    if args.rhyme_group is not None:
        decoding["rhyme"] = True
    kw = dict(max_new_tokens=args.max_new_tokens, use_cache=not args.no_cache, form=args.form,
              acrostic=args.acrostic, rhyme_group=args.rhyme_group, **decoding)
    if args.stream:
        for i in range(args.num_samples):
            seed = None if args.seed is None else args.seed + i
            print(args.prompt, end="", flush=True)
            generate(model, tok, args.prompt, seed=seed,
                     stream=lambda s: print(s, end="", flush=True), **kw)
            print(flush=True)
        return 0
    poems = generate_batch(model, tok, [args.prompt] * args.num_samples, seed=args.seed, **kw)
    sys.stdout.write("".join(poem + "\n" for poem in poems))
    return 0
