"""生成：一个自回归解码循环（带或不带 KV 缓存、单条或一批提示、可流式输出）。

采样器（温度、top-k、top-p、重复惩罚）是 :mod:`gptcourse.sampling` 里的纯函数，参数是一个
:class:`~gptcourse.sampling.SamplingParams`；要写什么样的诗（诗体、藏头、押韵、平仄）是一个
:class:`VerseSpec`。两者都在进入循环之前检查一次。

约定：

- 上下文总是以结束符 "\\n" 开头（训练语料里每首诗都跟在一个换行后面），再接提示；
  空提示就是只有这个 "\\n"——"现在开始写一首新诗"。
- 返回值是 **提示 + 续写**，不含最后那个结束符 "\\n"。
- 每一步只用最后一个位置的 logits；生成到结束符或 ``max_new_tokens`` 为止。
- 序列超过 ``block_size`` 时只把最后 ``block_size`` 个词元送进模型。带缓存时，缓存一旦装满
  就退回到"对裁剪后的窗口整段重算"（与不带缓存的结果完全一致）：窗口滑动后，旧的 K/V 是在
  另一段上下文里算出来的，不能直接沿用。
- 温度 0 = 贪心（argmax）。``seed`` 给定时采样可复现；一批提示中第 i 行使用 ``seed + i``
  （每行有自己的随机数发生器，抽样这一步逐行进行），
  所以 ``generate_batch(prompts, seed=s)[i] == generate(prompts[i], seed=s + i)``。
- 生成时从不采样 <unk>；``form`` / ``acrostic`` / ``rhyme`` / ``tones`` 的约束见
  :mod:`gptcourse.constraints`。
- 每一步的开销：模型只算新位置（K/V 写进预分配的缓存），输出头只算最后一个位置；选词整批
  一次完成（只有重复惩罚、格式约束和抽样逐行）；约束要看的"当前这首诗"的文本逐字增量维护，
  不必每步把整行重新解码。
"""
from __future__ import annotations

import numbers
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields

import torch

from .constraints import RELAXED, VerseConstraint
from .errors import UserError
from .fastdecode import DTYPES, cached_decoder, decoder_for
from .model import eval_mode, kv_cache_bytes
from .sampling import (
    NEG_INF,
    SamplingParams,
    apply_temperature,
    penalize,
    sample_with,
    top_k_filter,
    top_p_filter,
)
from .titles import OPEN, check_title, format_title
from .titles import strip as strip_title
from .verse import LONGEST_LINE, MOST_LINES, require_form

DEFAULT_MAX_NEW_TOKENS = 100
MAX_NEW_TOKENS_PER_BLOCK = 64     # max_new_tokens 的上限 = 64 × block_size（course：8192）
CACHE_BUDGET = 256 * 2**20        # 一批的 KV 缓存最多这么多字节：更多的行分批生成
COMPILE_MIN_TOKENS = 20_000        # compile=None 时：写这么多词元以上才值得编译（冷缓存的估计）
MAX_SEED = 2**63                  # seed 在 [0, 2⁶³) 之内（torch.Generator 的范围）
MAX_POEMS = 10_000               # sample_poems 一次最多采样这么多首（命令行 -n、eval --samples 同）


def check_sizes(model, max_new_tokens, seed, n_rows: int = 1) -> tuple[int, int | None]:
    """分配之前检查 max_new_tokens 与 seed：不对 → UserError（说出上限）。

    NumPy 的整数（np.int64）与 int 一样接受；返回 Python int 的 (max_new_tokens, seed)。"""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, numbers.Integral) \
            or max_new_tokens < 0:
        raise UserError(f"max_new_tokens 必须是 ≥ 0 的整数，收到 {max_new_tokens!r}")
    limit = MAX_NEW_TOKENS_PER_BLOCK * model.config.block_size
    if max_new_tokens > limit:
        raise UserError(f"max_new_tokens 最多 {limit}（{MAX_NEW_TOKENS_PER_BLOCK} × block_size "
                        f"{model.config.block_size}；一首诗不到 100 个词元），"
                        f"收到 {max_new_tokens}")
    return int(max_new_tokens), check_seed(seed, n_rows)


def check_seed(seed, n_rows: int = 1) -> int | None:
    """seed 是 None，或 [0, 2**63 - n_rows] 之内的整数（第 i 行用 seed + i）→ Python int 或 None；
    1.7、'7'、True 不悄悄换成整数，而是 UserError。"""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)
                             or not 0 <= seed <= MAX_SEED - n_rows):
        raise UserError(f"seed 必须是 [0, 2**63 - {n_rows}] 之内的整数或 None"
                        "（第 i 首用 seed + i），"
                        f"收到 {seed!r}")
    return None if seed is None else int(seed)


def rows_per_batch(model) -> int:
    """一批最多几行：KV 缓存按批分配，每行 n_layer × 2 × block_size × n_embd 个数，一批不超过
    ``CACHE_BUDGET`` 字节（course：每行 1 MiB → 256 行一批）。"""
    c = model.config
    per_row = kv_cache_bytes(c.n_layer, 1, c.block_size, c.n_embd,
                             next(model.parameters()).element_size())
    return max(1, CACHE_BUDGET // per_row)


# ---------------------------------------------------------------- 要写什么样的诗
@dataclass(frozen=True)
class VerseSpec:
    """写什么样的诗：诗体 ``form``（五绝/五律/七绝/七律或 None）、藏头 ``acrostic``、押韵 ``rhyme``
    （``rhyme_group`` 指定韵部，给了它就等于 ``rhyme=True``）、平仄 ``tones``，以及题目 ``title``
    （以题作诗：题目写在提示前面，``《题》``，见 :mod:`gptcourse.titled`；它是条件，不是约束）。
    约束的规则见 :mod:`gptcourse.constraints`。默认什么都不约束、没有题目。"""
    form: str | None = None
    acrostic: str | None = None
    rhyme: bool = False
    rhyme_group: str | None = None
    tones: bool = False
    title: str | None = None

    def __post_init__(self):
        if self.title is not None:
            object.__setattr__(self, "title", check_title(self.title))
        if self.form is not None:
            require_form(self.form)
        for name in ("acrostic", "rhyme_group"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, str):
                raise UserError(f"{name} 必须是字符串或 None，收到 {v!r}")
        for name in ("rhyme", "tones"):
            if not isinstance(getattr(self, name), bool):
                raise UserError(f"{name} 必须是 True 或 False，收到 {getattr(self, name)!r}")
        if self.rhyme_group is not None:
            object.__setattr__(self, "rhyme", True)
        object.__setattr__(self, "acrostic", self.acrostic or None)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @property
    def active(self) -> bool:
        return self.form is not None or self.acrostic is not None or self.rhyme or self.tones

    def constraint(self, tok, device=None) -> VerseConstraint | None:
        """这组约束在这个词表上的掩码规则（掩码放在 ``device`` 上）；什么都不约束时 None。"""
        if not self.active:
            return None
        return VerseConstraint(tok, self.form, self.acrostic, rhyme=self.rhyme,
                               rhyme_group=self.rhyme_group, tones=self.tones, device=device)

    def check_prompt(self, tok, prompt: str) -> None:
        """这组约束能不能接着 ``prompt`` 写下去；不能（字数、标点、藏头、韵脚不对）→ UserError。"""
        cons = self.constraint(tok)
        if cons is not None:
            poem_tokens(cons, _current_poem(prompt))


def poem_tokens(cons: VerseConstraint, poem: str = "") -> int:
    """在约束 ``cons`` 下，从 ``poem``（当前这首诗已有的文本）写完整首诗最多还要几个词元：
    每句按 7 字 + 标点算（诗体已定时按它），再加结束符。"""
    line_len = cons.state(poem)[2] or cons.line_len or LONGEST_LINE   # 不合格式 → UserError
    return (cons.n_lines or MOST_LINES) * (line_len + 1) + 1 - len(poem)


# ---------------------------------------------------------------- 解码循环
def _current_poem(text: str) -> str:
    """最后一个换行之后、去掉开头《题》的文字：约束只看正文。"""
    return strip_title(text[text.rfind("\n") + 1:])


def _context_ids(tok, prompt: str, spec: VerseSpec, block_size: int) -> list[int]:
    """解码开始时模型看到的 id：结束符 + 《题》（给了 title 时）+ 提示；太长 → UserError。"""
    head = format_title(spec.title) if spec.title is not None else ""   # 以题作诗
    if head and prompt.lstrip().startswith(OPEN):
        raise UserError(f"给了 title 时提示不能以“{OPEN}”开头：提示里的《…》会成为第二个题目；"
                        f"题目只写在 title 里，收到提示 {prompt[:20]!r}")
    ids = [tok.eos_id] + tok.encode(head + prompt)
    if len(ids) > block_size:
        raise UserError(f"提示太长：{len(ids) - 1} 个词元（加上开头的换行 {len(ids)} 个），"
                        f"超过模型的上下文 block_size={block_size}")
    return ids


@dataclass(eq=False)
class Row:
    """解码循环里一行的全部状态。按身份比较（两行内容相同也是两行）：循环用下标找行。"""
    ids: list[int]                            # 到目前为止的全部 id（以结束符开头）
    n_prompt: int                             # 其中提示占几个（含开头的结束符）
    generator: torch.Generator | None         # 这一行自己的随机数发生器（seed + i）
    poem: str | None                          # 当前这首诗的文本（有格式约束时才维护）
    produced: int = 0                         # 已生成几个词元
    done: bool = False


@dataclass(frozen=True)
class _Rules:
    """选词时一整批共用的东西：采样参数、格式约束、从不生成的词元、惩罚窗口。"""
    params: SamplingParams
    cons: VerseConstraint | None
    banned: torch.Tensor                      # [n]，例如 <unk>
    eos: int
    window: int                               # 重复惩罚只看模型看得见的最后 window 个词元


def _decode(model, tok, prompts: list[str], params: SamplingParams, spec: VerseSpec,
            max_new_tokens: int | None = None, seed: int | None = None,
            use_cache: bool = True, relaxed: list[str] | None = None,
            compile: bool | None = False, precision: str = "fp32"
            ) -> Iterator[list[int | None]]:
    """逐步产出每一行新生成的 id（这一行还在"喂提示"或已经结束时为 None）。写完时把约束
    放宽过的地方（``VerseConstraint.fallbacks``，一句话一条）追加到 ``relaxed`` 里。

    不同长度的提示怎样成批？所有行从最短提示的长度开始同步前进；较长的提示在它自己的提示
    用完之前，下一个词元直接取提示里的字（"强制"），不采样。于是每一行都处在同一个位置，
    不需要填充和额外的掩码，每一行的结果与单独生成时相同。
    """
    if not prompts:
        raise UserError("prompts 不能为空")
    if any(not isinstance(p, str) for p in prompts):
        raise UserError("提示必须是字符串")
    device = next(model.parameters()).device
    cons = spec.constraint(tok, device)
    if max_new_tokens is None:                 # 有约束时：正好够写完一整首
        max_new_tokens = DEFAULT_MAX_NEW_TOKENS if cons is None else poem_tokens(cons)
    max_new_tokens, seed = check_sizes(model, max_new_tokens, seed, len(prompts))
    bs, eos = model.config.block_size, tok.eos_id
    rows = []
    for i, p in enumerate(prompts):
        ids = _context_ids(tok, p, spec, bs)
        poem = None
        if cons is not None:
            poem = _current_poem(p)
            need = poem_tokens(cons, poem)                         # 提示不合格式 → UserError
            if max_new_tokens < need:
                raise UserError(f"max_new_tokens={max_new_tokens} 不够写完这首诗"
                                f"（还需要 {need} 个词元）")
        gen = None if seed is None else torch.Generator(device=device).manual_seed(int(seed) + i)
        rows.append(Row(ids, len(ids), gen, poem))
    unk = getattr(tok, "unk_id", None)
    rules = _Rules(params, cons, torch.tensor([] if unk is None else [unk], dtype=torch.long,
                                              device=device), eos, bs)
    L0 = min(r.n_prompt for r in rows)
    total = max(r.n_prompt for r in rows) + max_new_tokens        # 最长可能的序列
    buf = torch.empty(len(rows), total, dtype=torch.long, device=device)   # 预先分配 [B, 最长]
    buf[:, :L0] = torch.tensor([r.ids[:L0] for r in rows], dtype=torch.long)
    fast = _fast_decoder(model, use_cache, compile, precision, len(rows) * max_new_tokens)
    cache = None if not use_cache else model.new_cache() if fast is None \
        else fast.new_cache(len(rows))
    fed = 0                                    # 快速一步：已经送进模型的列数
    t = L0
    with eval_mode(model):
        while True:
            seq = buf[:, :t]                                                      # [B, t]
            for r in rows:
                if t >= r.n_prompt and (r.produced >= max_new_tokens
                                        or (r.produced > 0 and r.ids[-1] == eos)):
                    r.done = True
            if all(r.done for r in rows):
                if relaxed is not None and cons is not None:
                    relaxed += [RELAXED[name] for name in sorted(cons.fallbacks)]
                return
            live = [i for i, r in enumerate(rows) if not r.done and t >= r.n_prompt]  # 要抽样的行
            with torch.inference_mode():      # 只包住这一步：yield 出去之后调用方不受影响
                if fast is not None and t <= bs:                  # 快速一步：一次一列
                    while fed < t:
                        logits = fast(cache, buf[:, fed], fed)[:, None]        # [B, 1, V]
                        fed += 1
                elif cache is not None and t <= bs:               # 只把新位置送进模型
                    logits = model(seq[:, cache.length:], cache=cache, last_only=True)[0]
                else:                                              # 无缓存，或上下文已满：整段重算
                    logits = model(seq[:, -bs:], last_only=True)[0]
                logits = logits[:, -1]                                            # [B, V]
                picked = _choose(logits[live] if len(live) < len(rows) else logits,
                                 [rows[i] for i in live], rules, tok) if live else []
            step, out = [eos] * len(rows), [None] * len(rows)  # 已结束的行送结束符占位
            for i, r in enumerate(rows):
                if not r.done and t < r.n_prompt:
                    step[i] = r.ids[t]                             # 还在喂提示（强制）
            for i, nxt in zip(live, picked):
                r = rows[i]
                r.ids.append(nxt)
                r.produced += 1
                step[i] = out[i] = nxt
            buf[:, t] = torch.tensor(step)                                        # 第 t 列
            t += 1
            yield out


def _fast_decoder(model, use_cache: bool, compile: bool | None, precision: str, tokens: int):
    """这次解码用不用快速一步（:mod:`gptcourse.fastdecode`）→ 解码器或 None（教学路径）。

    ``compile=False`` 且 fp32：教学路径（``model(…, cache=…)``，与不带缓存完全一致）；
    ``precision="bf16"``：快速一步、bf16 权重（``compile=False`` 时不编译）；``compile=True``：
    编译好的快速一步；``compile=None``（自动）：这个模型已经有编译好的一步就用它，否则写的词元
    至少 ``COMPILE_MIN_TOKENS`` 个时才编译（编译一次几十秒，见 docs/benchmarks.md）。"""
    if not isinstance(precision, str) or precision not in DTYPES:
        raise UserError(f"precision 只能是 {' / '.join(DTYPES)}，收到 {precision!r}")
    if compile not in (True, False, None):
        raise UserError(f"compile 必须是 True、False 或 None（自动），收到 {compile!r}")
    if not use_cache:
        if compile or precision != "fp32":
            raise UserError("compile / precision=\"bf16\" 走快速一步，它需要 use_cache=True")
        return None
    if _quantized(model):                       # int8 的层只有教学路径认得
        if compile or precision != "fp32":
            raise UserError("量化过的（int8）模型不能用 compile=True 或 precision=\"bf16\"："
                            "它走普通的带缓存解码")
        return None
    dtype = DTYPES[precision]
    if compile is None:
        if cached_decoder(model, dtype) is not None:
            return cached_decoder(model, dtype)
        compile = tokens >= COMPILE_MIN_TOKENS
    if not compile and precision == "fp32":
        return None
    return decoder_for(model, dtype, compile)


def _quantized(model) -> bool:
    """模型里有 ``torch.ao`` 的量化层吗（``quantize_dynamic_int8`` 的结果）。"""
    return any(type(m).__module__.startswith("torch.ao.nn.quantized") for m in model.modules())


def _choose(logits: torch.Tensor, live: list[Row], rules: _Rules, tok) -> list[int]:
    """这一步所有要抽样的行一起选词：重复惩罚 → 格式/禁用掩码 → 采样。logits [b, V]。

    只有重复惩罚、格式约束和抽样逐行；禁用 <unk>、温度、top-k、top-p、softmax 整批一次算完。
    选中的词元也在这里接进每行"当前这首诗"的文本（增量维护，不必每步重新解码整行）。
    """
    logits = _apply_rules(logits, live, rules)        # 重复惩罚 → 禁用 <unk> → 格式掩码
    picked = sample_with(logits, rules.params, [r.generator for r in live]).tolist()
    if rules.cons is not None:
        for r, nxt in zip(live, picked):
            r.poem = _current_poem(r.poem + tok.decode([nxt]))
    return picked


def _apply_rules(logits: torch.Tensor, live: list[Row], rules: _Rules) -> torch.Tensor:
    """采样之前的规则：重复惩罚 → 禁用 <unk> → 格式掩码。logits [b, V] → 新的 float logits
    （不改动传入的 logits）。解码（:func:`_choose`）与课堂演示的 ``next_token_stages`` 都用它。"""
    logits = logits.float()
    penalty = rules.params.repetition_penalty
    if penalty != 1:                                               # 只惩罚模型看得见的窗口里的字
        logits = logits.clone()
        for j, r in enumerate(live):
            seen = sorted(set(r.ids[-rules.window:]) - {rules.eos})   # 结束符是结构，不惩罚
            logits[j] = penalize(logits[j], seen, penalty)
    logits = logits.index_fill(-1, rules.banned, NEG_INF)         # 从不生成 <unk>
    if rules.cons is not None:              # 掩码已在 logits 的设备上，而且每行都有可选的字
        allowed = torch.stack([rules.cons.allowed(r.poem) for r in live])         # [b, V]
        logits = logits.masked_fill(~allowed, NEG_INF)
    return logits


def _typed(params: SamplingParams | None, spec: VerseSpec | None,
           kw: dict) -> tuple[SamplingParams, VerseSpec]:
    """(采样参数, 格式)：命令行与发布设置传来的是已经建好、检查过的 ``params`` / ``spec``，原样用；
    学习者写的扁平关键字参数（``temperature=0.8, form="五绝"``）在这里建成它们，各检查一次。
    两样都给、或有不认识的名字 → TypeError。"""
    sampling = {k: kw.pop(k) for k in SamplingParams.names() if k in kw}
    verse = {k: kw.pop(k) for k in VerseSpec.names() if k in kw}
    if kw:
        raise TypeError(f"未知的参数：{', '.join(kw)}")
    for given, typed, what in ((sampling, params, "params"), (verse, spec, "spec")):
        if given and typed is not None:
            raise TypeError(f"给了 {what}= 就不要再单独给 {', '.join(given)}")
    return (params if params is not None else SamplingParams(**sampling),
            spec if spec is not None else VerseSpec(**verse))


# ---------------------------------------------------------------- 公开接口
def generate_batch(model, tok, prompts: list[str], max_new_tokens: int | None = None,
                   seed: int | None = None, use_cache: bool = True,
                   relaxed: list[str] | None = None, compile: bool | None = False,
                   precision: str = "fp32", *, params: SamplingParams | None = None,
                   spec: VerseSpec | None = None, **kw) -> list[str]:
    """一次生成一批提示（长度可以不同）→ 每行 提示 + 续写。第 i 行的种子是 ``seed + i``。

    怎样选词是 ``params``（:class:`~gptcourse.sampling.SamplingParams`），写什么样的诗是
    ``spec``（:class:`VerseSpec`）；也可以像 :func:`generate` 那样把它们的字段当关键字参数给
    （``temperature``、``top_k``、``top_p``、``repetition_penalty``；``form``、``acrostic``、
    ``rhyme``、``rhyme_group``、``tones``、``title``），但同一样不能两种方式都给。
    ``relaxed``：可选的列表，约束在哪里放宽过（``RELAXED`` 里的句子）就追加在里面。
    ``compile`` / ``precision``：用不用编译好的快速一步、权重用 fp32 还是 bf16（默认：教学路径，
    fp32，与不带缓存完全一致；见 :mod:`gptcourse.fastdecode`）。"""
    if isinstance(prompts, str):
        raise TypeError("prompts 应是提示的列表，收到一个字符串；只写一首请用 generate()，"
                        f"或写成 [{prompts!r}]")
    prompts = list(prompts)
    params, spec = _typed(params, spec, kw)
    new: list[list[int]] = [[] for _ in prompts]
    if prompts:                                 # 先整体检查，免得写完几批之后才报错
        _, seed = check_sizes(model, DEFAULT_MAX_NEW_TOKENS if max_new_tokens is None
                              else max_new_tokens, seed, len(prompts))
    per = rows_per_batch(model)                 # KV 缓存按批分配，而不是为所有行一次分配
    for lo in range(0, max(len(prompts), 1), per):
        s = None if seed is None else seed + lo
        for step in _decode(model, tok, prompts[lo:lo + per], params, spec, max_new_tokens, s,
                            use_cache, relaxed, compile, precision):
            for i, t in enumerate(step):
                if t is not None:
                    new[lo + i].append(t)
    eos = tok.eos_id
    return [p + tok.decode(ids[:-1] if ids and ids[-1] == eos else ids)
            for p, ids in zip(prompts, new)]


def stream_tokens(model, tok, prompt: str = "", max_new_tokens: int | None = None,
                  seed: int | None = None, use_cache: bool = True,
                  relaxed: list[str] | None = None, compile: bool | None = False,
                  precision: str = "fp32", *, params: SamplingParams | None = None,
                  spec: VerseSpec | None = None, **kw) -> Iterator[str]:
    """逐个产出新生成的文字片段（不含提示与最后的结束符）。拼起来 == generate() 的续写部分。
    ``params`` / ``spec`` / ``relaxed`` 同 :func:`generate_batch`（``relaxed`` 写完时填好）。

    字节级 BPE 的一个词元可能只是一个汉字的前一两个字节：这时先攒着，等字节凑齐了再一起产出。
    """
    params, spec = _typed(params, spec, kw)
    pending: list[int] = []                                       # 还没凑成完整文字的词元
    for (t,) in _decode(model, tok, [prompt], params, spec, max_new_tokens, seed, use_cache,
                        relaxed, compile, precision):
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
             rhyme_group: str | None = None, tones: bool = False, title: str | None = None,
             stream: Callable[[str], object] | None = None, compile: bool | None = False,
             precision: str = "fp32") -> str:
    """写一首诗 → 提示 + 续写（不含结束符）。

    ``max_new_tokens=None``：不加约束时 100；给了 ``form``/``acrostic``/``rhyme``/``tones`` 时
    正好够写完一首。采样参数见 :class:`~gptcourse.sampling.SamplingParams`（默认 = 模型自己的
    分布），格式约束与题目见 :class:`VerseSpec`（``title="春晓"``：以题作诗，返回值不含题目）。
    ``stream``：可选的回调，每生成一个字就调用一次 ``stream(片段)``。``compile`` / ``precision``
    同 :func:`generate_batch`（默认走教学路径）。

    采样参数与格式参数的名字和默认值就是 ``SamplingParams`` 与 ``VerseSpec`` 的字段
    （``tests/test_generate.py`` 用 ``inspect.signature`` 检查两边一致）：这里把它们建成这两个
    对象（各检查一次），之后原样交给 :func:`generate_batch`。
    """
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p,
                            repetition_penalty=repetition_penalty)
    spec = VerseSpec(form=form, acrostic=acrostic, rhyme=rhyme, rhyme_group=rhyme_group,
                     tones=tones, title=title)
    kw = dict(max_new_tokens=max_new_tokens, seed=seed, use_cache=use_cache, compile=compile,
              precision=precision, params=params, spec=spec)
    if stream is None:
        return generate_batch(model, tok, [prompt], **kw)[0]
    pieces = []
    for piece in stream_tokens(model, tok, prompt, **kw):
        stream(piece)
        pieces.append(piece)
    return prompt + "".join(pieces)


def sample_poems(model, tok, n: int, seed: int = 0, prompt: str = "", batch_size: int = 50,
                 max_new_tokens: int | None = None, **kw) -> list[str]:
    """从 ``prompt``（默认空提示）采样 n 首诗，第 i 首用种子 seed + i（与逐首 ``generate`` 相同，
    只是成批更快），每首截到第一个换行为止，只留正文：模型自己拟的开头《题》去掉
    （以题作诗的模型从空提示出发时，约一半的诗先写题目）。
    其余关键字参数同 :func:`generate_batch`（``params=`` / ``spec=`` 或它们的字段）。"""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise UserError(f"n 必须是 ≥ 1 的整数，收到 {n!r}")
    if n > MAX_POEMS:
        raise UserError(f"n 最多 {MAX_POEMS}（一次采样这么多首诗），收到 {n}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UserError(f"batch_size 必须是 ≥ 1 的整数，收到 {batch_size!r}")
    seed = check_seed(seed, n)                 # 先查完：免得写完几批之后才因种子报错
    out = []
    for b in range(0, n, batch_size):
        m = min(batch_size, n - b)
        texts = generate_batch(model, tok, [prompt] * m, seed=None if seed is None else seed + b,
                               max_new_tokens=max_new_tokens, **kw)
        out += [strip_title(t.split("\n", 1)[0]) for t in texts]
    return out


@torch.no_grad()
def next_token_probs(model, tok, prompt: str = "", temperature: float = 1.0,
                     top_k: int | None = None, top_p: float | None = None) -> torch.Tensor:
    """提示之后下一个词元的概率分布 [V]（经过温度、top-k、top-p；温度 0 时是 one-hot）。"""
    ids = [tok.eos_id] + tok.encode(prompt)
    bs = model.config.block_size
    device = next(model.parameters()).device
    with eval_mode(model):
        logits = model(torch.tensor([ids[-bs:]], device=device))[0][0, -1].float()   # [V]
    SamplingParams(temperature, top_k, top_p)                     # 参数不对 → UserError
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(), logits.numel()).float()
    logits = apply_temperature(logits, temperature)
    return top_p_filter(top_k_filter(logits, top_k), top_p).softmax(-1)


STAGES = ("model", "rules", "temperature", "top_k", "top_p")   # next_token_stages 的各个阶段


@torch.no_grad()
def next_token_stages(model, tok, prompt: str = "", *, params: SamplingParams | None = None,
                      spec: VerseSpec | None = None, **kw) -> dict[str, torch.Tensor]:
    """解码循环写第一个字时的 logits，一个阶段一个 [V]（课堂演示用：看每个过滤器做了什么）。

    被过滤掉的词元是 −∞；``.softmax(-1)`` 就是那一阶段的分布，``.isfinite().sum()`` 是留下的
    词元数。关键字参数与 :func:`generate` 的采样参数、格式参数相同。阶段（``STAGES``）依次是：
    ``model`` 模型自己的 logits；``rules`` 重复惩罚、禁用 <unk>、格式掩码之后（解码循环
    ``_choose`` 的同一步，见 ``_apply_rules``）；然后用 :mod:`gptcourse.sampling` 的函数依次
    加上 ``temperature``、``top_k``、``top_p``——最后一个的 softmax 就是真正抽样用的分布。
    温度 0（贪心）时从 ``temperature`` 起只留下 argmax 那一个。参数或提示不对 → UserError
    （与 generate 相同）。也可以给建好的 ``params=`` / ``spec=``（同 :func:`generate_batch`）。
    """
    params, spec = _typed(params, spec, kw)
    device = next(model.parameters()).device
    bs = model.config.block_size
    ids = _context_ids(tok, prompt, spec, bs)
    cons = spec.constraint(tok, device)
    poem = None
    if cons is not None:
        poem = _current_poem(prompt)
        poem_tokens(cons, poem)                                   # 提示不合格式 → UserError
    unk = getattr(tok, "unk_id", None)
    rules = _Rules(params, cons, torch.tensor([] if unk is None else [unk], dtype=torch.long,
                                              device=device), tok.eos_id, bs)
    with eval_mode(model):
        logits = model(torch.tensor([ids], device=device), last_only=True)[0][0, -1].float()
    ruled = _apply_rules(logits[None], [Row(ids, len(ids), None, poem)], rules)[0]   # [V]
    out = {"model": logits, "rules": ruled}
    if params.temperature == 0:                                   # 贪心：sample_with 取 argmax
        greedy = torch.full_like(ruled, NEG_INF)
        greedy[ruled.argmax()] = 0.0
        return {**out, "temperature": greedy, "top_k": greedy, "top_p": greedy}
    out["temperature"] = apply_temperature(ruled, params.temperature)
    out["top_k"] = top_k_filter(out["temperature"], params.top_k)
    out["top_p"] = top_p_filter(out["top_k"], params.top_p)
    return out
