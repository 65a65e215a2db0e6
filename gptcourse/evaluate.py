"""评估：整份划分上的损失、困惑度、每字比特数，三条基线，以及诗内逐位置的损失。

怎样给一份文本打分（``token_losses``）——每个位置恰好算一次：

* 文本编码成 ids（词表外的字映射为 ``<unk>``），前面补一个虚拟的换行符（诗的结束符）当作
  "上一首诗刚结束"的语境，于是文本里的**每一个**字（含每首诗末尾的换行）都有一个损失，
  ``len(text)`` 个字正好 ``len(text)`` 个损失。
* 输入序列切成长 T（= block_size）的窗口，窗口起点每次前进 ``stride``（默认 T/2）。
  第一个窗口给自己的全部 T 个位置打分；之后每个窗口只给**最后 stride 个**位置打分，前面
  T − stride 个位置只当语境——所以除开头以外，每个字至少看得见前面 T − stride 个字
  （课程模型 T=128：至少 64 个字，比最长的七律 64 字还长，即每个字都看得见本诗的全部前文）。
  最后一个窗口向左对齐到文本末尾，只给还没打过分的位置打分。
* 所有窗口一样长，按 batch_size 成批送进模型；``model.eval()`` + ``no_grad``，没有随机采样，
  同一模型同一文本永远得到同一个数。

基线（都只用训练集统计，在同一词表、同一划分上计算）：均匀分布 ln V；加 k 平滑的一元、二元模型，
k 在验证集上从 ``K_GRID`` 中选出。
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from .errors import UserError
from .model import eval_mode
from .titled import normalise, titled
from .verse import LINE_ENDS, LINE_LENGTHS, LONGEST_LINE, MOST_LINES, analyze, is_hanzi

K_GRID = (1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1.0)     # 加 k 平滑的候选 k（在验证集上挑）
LN2 = math.log(2)


def encode_text(tok, text: str) -> torch.Tensor:
    """text → [N] 的 id（词表外的字映射为 <unk>；没有 <unk> 的词表遇到生字会报错）。"""
    if not isinstance(text, str) or not text:
        raise UserError("要评估的文本必须是非空字符串")
    errors = "unk" if tok.unk_id is not None else "strict"
    return torch.tensor(tok.encode(text, errors=errors), dtype=torch.long)


def window_plan(n: int, block_size: int, stride: int) -> list[tuple[int, int]]:
    """n 个待打分位置的窗口计划：[(窗口起点, 从第几个位置开始打分)]，窗口长 min(T, n)。

    >>> window_plan(10, 4, 2)      # 窗口 [0,4) 打 0–3，[2,6) 打 4–5，[4,8) 打 6–7，[6,10) 打 8–9
    [(0, 0), (2, 4), (4, 6), (6, 8)]
    >>> window_plan(7, 4, 2)       # 最后一个窗口左移到末尾 [3,7)，只打 6
    [(0, 0), (2, 4), (3, 6)]
    """
    if not 1 <= stride <= block_size:
        raise UserError(f"stride 必须在 [1, block_size={block_size}] 内，收到 {stride}")
    T = min(block_size, n)
    plan, scored = [(0, 0)], T                        # scored：已经打过分的位置数
    while scored < n:
        start = min(scored + stride - T, n - T)
        plan.append((start, scored))
        scored = start + T
    return plan


@torch.no_grad()
def token_losses(model, tok, text: str, batch_size: int = 32, block_size: int | None = None,
                 stride: int | None = None) -> torch.Tensor:
    """text 中每个词元的损失（nats），形状 [N]，N = 词元数（字符分词器即 len(text)）。

    打分规则见模块说明；block_size 默认取模型的上下文长度，stride 默认 block_size // 2。
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UserError(f"batch_size 必须是 ≥ 1 的整数，收到 {batch_size!r}")
    T = block_size or model.config.block_size
    if T > model.config.block_size:
        raise UserError(f"block_size={T} 超过模型的上下文 {model.config.block_size}")
    stride = stride or max(1, T // 2)
    ids = encode_text(tok, text)
    seq = torch.cat([torch.tensor([tok.eos_id]), ids])                       # [N+1]
    inputs, targets = seq[:-1], seq[1:]                                      # 各 [N]
    n = len(targets)
    if n == 0:
        raise UserError("文本太短：没有可以打分的位置")
    plan = window_plan(n, T, stride)
    Tw = min(T, n)
    device = next(model.parameters()).device
    out = torch.full((n,), float("nan"))              # 每个位置恰好写一次；NaN = 没打分
    with eval_mode(model):
        for b in range(0, len(plan), batch_size):
            chunk = plan[b:b + batch_size]
            starts = torch.tensor([s for s, _ in chunk])
            cols = starts[:, None] + torch.arange(Tw)                        # [B, Tw]
            logits, _ = model(inputs[cols].to(device))                       # [B, Tw, V]
            loss = F.cross_entropy(logits.float().transpose(1, 2), targets[cols].to(device),
                                   reduction="none").cpu()                   # [B, Tw]
            for row, (s, first) in enumerate(chunk):
                out[first:s + Tw] = loss[row, first - s:]
    if not torch.isfinite(out).all():
        raise UserError(f"有 {int((~torch.isfinite(out)).sum())} 个位置的损失不是有限数"
                         "（模型输出了 NaN/inf？）")
    return out


def split_loss(model, tok, text: str, batch_size: int = 32, block_size: int | None = None,
               stride: int | None = None) -> float:
    """整段文本的平均损失（nats / 词元），每个位置恰好算一次。"""
    return float(token_losses(model, tok, text, batch_size, block_size, stride).mean())


@dataclass(frozen=True)
class SplitMetrics:
    loss: float            # nats / 词元
    perplexity: float      # e^loss：模型平均在多少个候选字之间"犹豫"
    bits_per_char: float   # 每个字平均需要多少比特来编码
    n_tokens: int
    n_chars: int

    def row(self) -> str:
        return (f"loss {self.loss:.4f} nats | 困惑度 {self.perplexity:,.1f} | "
                f"{self.bits_per_char:.3f} bits/字")


def metrics_from_loss(loss: float, n_tokens: int = 1, n_chars: int | None = None) -> SplitMetrics:
    """由平均损失换算困惑度与每字比特数（词元不是单字时按总信息量 / 字数换算）。"""
    n_chars = n_tokens if n_chars is None else n_chars
    return SplitMetrics(loss=loss, perplexity=math.exp(loss),
                        bits_per_char=loss * n_tokens / n_chars / LN2,
                        n_tokens=n_tokens, n_chars=n_chars)


def split_metrics(model, tok, text: str, **kw) -> SplitMetrics:
    """一个划分上的 loss、困惑度、bits/字。"""
    losses = token_losses(model, tok, text, **kw)
    return metrics_from_loss(float(losses.mean()), len(losses), len(text))


# ---------------------------------------------------------------- 基线
def uniform_baseline(tok) -> float:
    """什么都不学、每个字等概率：损失 = ln V。"""
    return math.log(tok.vocab_size)


class NGramCounts:
    """训练集上的一元、二元计数（二元对编码成 a·V+b 存成有序数组，查找用二分）。

    和 ``token_losses`` 一样，文本前补一个虚拟换行符，所以每首诗第一个字的"上一个字"是换行。
    """

    def __init__(self, tok, train_text: str):
        self.V = tok.vocab_size
        self.tok = tok
        ids = self._with_eos(train_text)                                     # [N+1]
        self.unigram = np.bincount(ids[1:], minlength=self.V).astype(np.float64)      # [V]
        self.context = np.bincount(ids[:-1], minlength=self.V).astype(np.float64)     # [V]
        self.pairs, self.pair_counts = np.unique(ids[:-1] * self.V + ids[1:], return_counts=True)
        self.n = len(ids) - 1

    def _with_eos(self, text: str) -> np.ndarray:
        ids = encode_text(self.tok, text).numpy()
        return np.concatenate([[self.tok.eos_id], ids])

    def loss(self, text: str, order: int, k: float) -> float:
        """加 k 平滑的 order 元模型在 text 上的平均损失（nats / 字）。"""
        if k <= 0:
            raise UserError(f"平滑参数 k 必须 > 0，收到 {k}")
        ids = self._with_eos(text)
        prev, nxt = ids[:-1], ids[1:]
        if order == 1:                        # p(b) = (c(b) + k) / (N + kV)
            p = (self.unigram[nxt] + k) / (self.n + k * self.V)
        elif order == 2:                      # p(b|a) = (c(a,b) + k) / (c(a) + kV)
            codes = prev * self.V + nxt
            pos = np.searchsorted(self.pairs, codes).clip(max=len(self.pairs) - 1)
            c = np.where(self.pairs[pos] == codes, self.pair_counts[pos], 0)
            p = (c + k) / (self.context[prev] + k * self.V)
        else:
            raise UserError(f"order 只能是 1（一元）或 2（二元），收到 {order}")
        return float(-np.log(p).mean())

    def best_k(self, val_text: str, order: int, grid=K_GRID) -> float:
        """在验证集上挑损失最小的 k（测试集从不参与挑选）。"""
        return min(grid, key=lambda k: self.loss(val_text, order, k))


def unigram_baseline(tok, train_text: str, text: str, k: float = 1.0) -> float:
    """只看字频（不看上文）的一元模型，加 k 平滑。"""
    return NGramCounts(tok, train_text).loss(text, 1, k)


def bigram_baseline(tok, train_text: str, text: str, k: float = 0.01) -> float:
    """只看上一个字的二元模型，加 k 平滑。"""
    return NGramCounts(tok, train_text).loss(text, 2, k)


def baselines(tok, train_text: str, val_text: str, test_text: str | None = None,
              grid=K_GRID) -> dict[str, dict]:
    """三条基线在 val（和 test）上的损失：{名字: {"k": k 或 None, "val": …, "test": …}}。"""
    counts = NGramCounts(tok, train_text)
    out = {"均匀 (ln V)": {"k": None, "val": uniform_baseline(tok)}}
    if test_text is not None:
        out["均匀 (ln V)"]["test"] = uniform_baseline(tok)
    for name, order in (("一元 (unigram)", 1), ("二元 (bigram)", 2)):
        k = counts.best_k(val_text, order, grid)
        out[name] = {"k": k, "val": counts.loss(val_text, order, k)}
        if test_text is not None:
            out[name]["test"] = counts.loss(test_text, order, k)
    return out


# ---------------------------------------------------------------- 诗内逐位置的损失
SLOTS = (*(f"第{i}字" for i in range(1, LONGEST_LINE + 1)), "标点", "换行")   # 句中位置的类别


@dataclass
class PositionLoss:
    """by_slot[5] / by_slot[7]：五言 / 七言诗里句中各位置（SLOTS）的平均损失（没有的为 nan）；
    by_line：诗中第 1…8 句的汉字平均损失；counts 与之对应的样本数。"""
    by_slot: dict[int, list[float]]
    by_line: list[float]
    slot_counts: dict[int, list[int]]


def loss_by_position(losses, text: str) -> PositionLoss:
    """把逐字损失（与 text 一一对应，如 ``token_losses`` 的输出）按诗中位置归类求平均。

    一句 = 两个标点之间的字；句中第 i 个字归入"第 i 字"，句末标点归入"标点"，诗末换行归入"换行"。
    诗的言数（5 或 7）取第一句的长度；别的长度的诗不计入 by_slot。
    """
    losses = torch.as_tensor(losses, dtype=torch.float64)
    if len(losses) != len(text):
        raise UserError(f"损失有 {len(losses)} 个，文本有 {len(text)} 个字，二者应一一对应")
    sums = {w: np.zeros(len(SLOTS)) for w in LINE_LENGTHS}
    cnts = {w: np.zeros(len(SLOTS), dtype=np.int64) for w in LINE_LENGTHS}
    line_sum, line_cnt = np.zeros(MOST_LINES), np.zeros(MOST_LINES, dtype=np.int64)
    lv = losses.numpy()
    i = 0
    for poem in text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"):
        width = next((j for j, c in enumerate(poem) if c in LINE_ENDS), 0)
        col, line = 0, 0
        for j, c in enumerate(poem + "\n"):
            v = lv[i + j]
            if c == "\n":
                slot = LONGEST_LINE + 1
            elif c in LINE_ENDS:
                slot, col, line = LONGEST_LINE, 0, line + 1
            else:
                slot, col = min(col, LONGEST_LINE - 1), col + 1
                if line < MOST_LINES:
                    line_sum[line] += v
                    line_cnt[line] += 1
            if width in sums:
                sums[width][slot] += v
                cnts[width][slot] += 1
        i += len(poem) + 1
    with np.errstate(invalid="ignore"):
        by_slot = {w: (sums[w] / cnts[w]).tolist() for w in LINE_LENGTHS}
        by_line = (line_sum / line_cnt).tolist()
    return PositionLoss(by_slot=by_slot, by_line=by_line,
                        slot_counts={w: cnts[w].tolist() for w in LINE_LENGTHS})


def poem_nll(model, tok, poems: list[str]) -> list[float]:
    """模型自己给每首诗的负对数似然（nats/词元，温度 1）：每首单独打分，从结束符 "\n" 开始
    （与 :func:`token_losses` 对这一首诗的打分相同），不算诗末的结束符。"""
    if any(not p for p in poems):
        raise UserError("不能给空诗打分")
    return [float(token_losses(model, tok, p).mean()) for p in poems]


def bootstrap_interval(values, n_boot: int = 2000, level: float = 0.95,
                       seed: int = 0, weights=None) -> tuple[float, float]:
    """均值的自助法（bootstrap）置信区间：有放回地重抽 ``n_boot`` 次，取均值的分位数。

    给了 ``weights`` 时是加权均值 Σwx / Σw 的区间（一起重抽）：例如平仄合格率 = 成立的规则 /
    可判断的规则，x = 每首诗的合格率、w = 每首诗可判断的规则数。"""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise UserError("bootstrap_interval 需要至少一个数")
    w = np.ones_like(x) if weights is None else np.asarray(weights, dtype=float)
    if w.shape != x.shape or (w < 0).any() or w.sum() <= 0:
        raise UserError(f"weights 要与 values 一样长（{x.size}）、非负、总和 > 0")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, (n_boot, x.size))                             # [n_boot, n]
    means = ((x * w)[idx].sum(1) / np.maximum(w[idx].sum(1), 1e-300) if weights is not None
             else x[idx].mean(1))                                               # [n_boot]
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def verse_rates(poems: list[str], seed: int = 0) -> dict[str, float | tuple[float, float]]:
    """一组诗的格律：诗体合格率、押韵率、重韵率、平仄合格率（与 ``verse.rates`` /
    ``verse.repeated_rhyme_rate`` 同样的定义），每项带 95 % 自助法区间（按诗重抽；平仄按
    可判断的规则数加权，所以仍是"成立的规则 / 可判断的规则"）。"""
    if not poems:
        raise UserError("poems 为空")
    reports = [analyze(p.removesuffix("\n")) for p in poems]
    columns = {"form": [a.valid_form for a in reports],
               "rhyme": [a.valid_form and a.rhymes for a in reports],
               "repeated": [a.valid_form and a.rhymes and bool(a.repeated_rhymes) for a in reports]}
    out: dict[str, float | tuple[float, float]] = {"n": len(reports)}
    for name, col in columns.items():
        out[name], out[f"{name}_ci"] = float(np.mean(col)), bootstrap_interval(col, seed=seed)
    held, checkable = np.array([a.held for a in reports]), np.array([a.checkable for a in reports])
    out["tonal"] = float(held.sum() / checkable.sum()) if checkable.sum() else 0.0
    out["tonal_ci"] = (bootstrap_interval(held / np.maximum(checkable, 1), seed=seed,
                                          weights=checkable) if checkable.sum() else (0.0, 0.0))
    return out


def body_nll(model, tok, body: str, title: str | None = None) -> float:
    """正文每个词元的平均负对数似然（nats，不含诗末换行）；给了 ``title`` 时模型先读到《题》。"""
    head = titled(title, "") if title else ""
    losses = token_losses(model, tok, head + body)
    return float(losses[len(encode_text(tok, head)) if head else 0:].mean())


def title_information(model, tok, pairs: list[tuple[str, str]], k: int = 10,
                      seed: int = 0) -> dict:
    """题目告诉了模型多少（在题目没见过的诗上量）：

    - 正文的负对数似然：给自己的题目 / 给另一首诗的题目 / 不给题目（nats/字）；
    - ΔNLL = 别人的题目 − 自己的题目（> 0 说明模型确实在看题目）；
    - 检索准确率：自己的题目与另外 k − 1 个题目里，哪一个让正文最好猜（机会水平 1/k）。
    每项都带 95 % 自助法区间。别的题目从同一批诗里随机取（与自己的题目规范化后不同）。
    """
    if len(pairs) < k:
        raise UserError(f"至少要 {k} 首诗才能做 {k} 选 1 的检索，收到 {len(pairs)} 首")
    rng = np.random.default_rng(seed)
    norm = [normalise(t) for t, _ in pairs]
    own, other, none, hit = [], [], [], []
    for i, (title, body) in enumerate(pairs):
        pool = [j for j in range(len(pairs)) if norm[j] != norm[i]]
        picks = rng.choice(pool, size=k - 1, replace=False)
        mine = body_nll(model, tok, body, title)
        theirs = [body_nll(model, tok, body, pairs[j][0]) for j in picks]
        own.append(mine)
        other.append(theirs[0])
        none.append(body_nll(model, tok, body))
        hit.append(float(mine < min(theirs)))
    gap = np.asarray(other) - np.asarray(own)
    out = {"n": len(pairs), "k": k, "own": float(np.mean(own)), "other": float(np.mean(other)),
           "none": float(np.mean(none)), "delta": float(gap.mean()),
           "delta_ci": bootstrap_interval(gap, seed=seed), "retrieval": float(np.mean(hit)),
           "retrieval_ci": bootstrap_interval(hit, seed=seed), "chance": 1 / k}
    return out


def title_reuse(model, tok, titles: list[str], seed: int = 0, **decoding) -> dict:
    """给每个题目写一首诗（第 i 首用种子 seed + i），数有多少首的正文用到了题目里的字；
    对照：同样这些诗配上打乱了的题目（每首配一个规范化后不同的题目）。
    ``decoding`` 交给 ``generate_batch``。"""
    from .generate import generate_batch
    if len({normalise(t) for t in titles}) < 2:
        raise UserError("title_reuse 至少要两个（规范化后）不同的题目，才能做打乱的对照")
    poems = [generate_batch(model, tok, [""], seed=seed + i, title=t, **decoding)[0]
             for i, t in enumerate(titles)]

    def uses(poem: str, title: str) -> float:
        return float(any(c in poem for c in title if is_hanzi(c)))

    rng = np.random.default_rng(seed)
    shift = []
    for t in titles:                                                         # 打乱的对照
        while titles[j := int(rng.integers(len(titles)))] == t or \
                normalise(titles[j]) == normalise(t):
            pass
        shift.append(titles[j])
    own = [uses(p, t) for p, t in zip(poems, titles)]
    ctrl = [uses(p, t) for p, t in zip(poems, shift)]
    return {"n": len(titles), "own": float(np.mean(own)), "own_ci": bootstrap_interval(own),
            "shuffled": float(np.mean(ctrl)), "shuffled_ci": bootstrap_interval(ctrl),
            "examples": list(zip(titles[:3], poems[:3]))}


@torch.no_grad()
def text_attention(model, tok, text: str) -> tuple[list[str], list[torch.Tensor]]:
    """一段文字在模型里的注意力 → (T 个词元的文字, 每层一个 [H, T, T] 的权重)。

    文字前面补一个换行（上一首诗刚结束，与写诗时的语境相同），所以 T = 1 + 词元数，第 0 行
    只能看它自己。行 = 查询位置，列 = 键位置。网页演示的 ``/api/attention`` 与
    :func:`gptcourse.viz.live.attention` 都用它。文字为空、有词表外的字、放不进上下文
    （T > block_size）→ UserError。记录注意力时要在各层挂记录槽（见 ``model.record_attention``），
    别的线程同时用这个模型时，传一份副本进来（网页服务就是这样做的）。
    """
    if not isinstance(text, str) or not text:
        raise UserError(f"要看注意力的文字必须是非空字符串，收到 {text!r}"[:120])
    ids = [tok.eos_id] + tok.encode(text)                  # 词表外的字 → UserError（说出是哪些字）
    limit = model.config.block_size
    if len(ids) > limit:
        raise UserError(f"text 太长：{len(ids) - 1} 个词元，模型的上下文只有 {limit - 1} 个"
                        "（开头还有一个换行）")
    device = next(model.parameters()).device
    maps = model.attention_maps(torch.tensor([ids], device=device))     # L 个 [1, H, T, T]
    return [tok.piece(i) for i in ids], [m[0].float().cpu() for m in maps]
