"""采样器：作用在一个 logits 向量 [V]（或一批 [B, V]）上的小纯函数。

解码循环（:mod:`gptcourse.generate`）每一步按这个顺序调用它们：
重复惩罚 → 格式掩码 → 温度 → top-k → top-p → softmax → 抽样（温度 0 时直接 argmax）。
采样参数只有一个定义：:class:`SamplingParams`（冻结、构造时检查一次）。库的 ``generate()``、
命令行、网页服务与发布设置都用它和它的默认值（温度 1 = 模型自己的分布，不截断，不惩罚）。

数值边界（极端但合法的参数不会让 ``torch.multinomial`` 崩溃）：

- ``0 < temperature < GREEDY_BELOW`` 按 τ → 0 的极限处理：只留下最大的 logit（并列的都留），
  等同于贪心；否则 logits / 1e-300 会溢出成 inf。temperature 的上限是 ``MAX_TEMPERATURE``
  （再大分布已经几乎均匀，而更大的数在 float32 里会变成 inf）。
- top-p 永远保留概率最大的那个词元，哪怕 p 小到在 float32 里变成 0。
- repetition_penalty 必须在 [``MIN_REPETITION_PENALTY``, ``MAX_REPETITION_PENALTY``] 之内：
  更极端的值会把 logit 除成 inf 或乘成 NaN。
"""
from __future__ import annotations

import numbers
from dataclasses import asdict, dataclass, fields

import torch

from .errors import UserError, is_real

NEG_INF = float("-inf")
GREEDY_BELOW = 1e-6              # 比它还小的正温度按贪心（τ → 0 的极限）处理
MAX_TEMPERATURE = 100.0
MIN_REPETITION_PENALTY, MAX_REPETITION_PENALTY = 0.01, 100.0


# ---------------------------------------------------------------- 参数检查
def check_sampling_args(temperature=1.0, top_k=None, top_p=None, repetition_penalty=1.0) -> None:
    """不合法的采样参数 → ValueError（说明哪个参数、收到了什么、应该是什么）。

    NumPy 的数（np.float32、np.int64）照常接受；不是数的值（字符串、张量……）报的是类型，
    不是范围。"""
    for name, v, integer in (("temperature", temperature, False), ("top_k", top_k, True),
                             ("top_p", top_p, False),
                             ("repetition_penalty", repetition_penalty, False)):
        kind = numbers.Integral if integer else numbers.Real
        if v is not None and (isinstance(v, bool) or not isinstance(v, kind)):
            want = "整数" if integer else "数（int 或 float）"
            raise UserError(f"{name} 必须是{want}，收到 {type(v).__name__} {v!r}")
    if not is_real(temperature) or not 0 <= temperature < float("inf"):
        raise UserError(f"temperature 必须是 ≥ 0 的有限数（0 = 贪心），收到 {temperature!r}")
    if temperature > MAX_TEMPERATURE:
        raise UserError(f"temperature 最大为 {MAX_TEMPERATURE:g}（更大时分布已几乎均匀），"
                         f"收到 {temperature!r}")
    if top_k is not None and top_k < 1:
        raise UserError(f"top_k 必须是 ≥ 1 的整数或 None，收到 {top_k!r}")
    if top_p is not None and (not is_real(top_p) or not 0 < top_p <= 1):
        raise UserError(f"top_p 必须在 (0, 1] 之内或为 None，收到 {top_p!r}")
    if not is_real(repetition_penalty) \
            or not MIN_REPETITION_PENALTY <= repetition_penalty <= MAX_REPETITION_PENALTY:
        raise UserError(f"repetition_penalty 必须在 [{MIN_REPETITION_PENALTY:g}, "
                         f"{MAX_REPETITION_PENALTY:g}] 之内（1 = 不惩罚），"
                         f"收到 {repetition_penalty!r}")


@dataclass(frozen=True)
class SamplingParams:
    """解码时怎样从 logits 里选词：温度（0 = 贪心）、top-k、top-p、重复惩罚。

    默认值 = 模型自己的分布（温度 1、不截断、不惩罚）。不合法的值在构造时就报错
    （:class:`~gptcourse.errors.UserError`，说明哪个参数、收到了什么）。

    >>> SamplingParams(temperature=0.8).top_p is None
    True
    """
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float = 1.0

    def __post_init__(self):
        check_sampling_args(self.temperature, self.top_k, self.top_p, self.repetition_penalty)
        for f in fields(self):                   # NumPy 的数 → Python 的数（to_dict 可存进 JSON）
            v = getattr(self, f.name)
            if v is not None and type(v) not in (int, float):
                object.__setattr__(self, f.name, int(v) if f.name == "top_k" else float(v))

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_dict(cls, d: dict) -> "SamplingParams":
        """从字典里取出采样参数（其余键忽略）。"""
        return cls(**{k: d[k] for k in cls.names() if k in d})

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------- 采样器：logits [..., V] 进出
def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits / τ。τ < 1 让分布更尖，τ > 1 更平。

    τ = 0 是贪心，不能相除（见 :func:`sample_next`）；0 < τ < ``GREEDY_BELOW`` 时取 τ → 0 的极限：
    只保留最大的 logit（并列的都保留），其余设为 −∞。

    >>> apply_temperature(torch.tensor([1.0, 3.0, 3.0]), 1e-300).tolist()
    [-inf, 3.0, 3.0]
    """
    check_sampling_args(temperature=temperature)
    if temperature == 0:
        raise UserError("temperature=0 表示贪心解码，不能用来除 logits；请直接取 argmax")
    return _temperature(logits, temperature)


def _temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    if temperature < GREEDY_BELOW:
        return logits.masked_fill(logits < logits.amax(-1, keepdim=True), NEG_INF)
    return logits / temperature


def top_k_filter(logits: torch.Tensor, k: int | None) -> torch.Tensor:
    """只保留最大的 k 个 logits，其余设为 −∞。k 超过词表大小时按词表大小处理（并列的都保留）。

    >>> top_k_filter(torch.tensor([1.0, 3.0, 2.0]), 2).tolist()
    [-inf, 3.0, 2.0]
    """
    if k is None:
        return logits
    check_sampling_args(top_k=k)
    return _top_k(logits, k)


def _top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    k = min(k, logits.size(-1))
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]              # 第 k 大的值 [..., 1]
    return logits.masked_fill(logits < kth, NEG_INF)


def top_p_filter(logits: torch.Tensor, p: float | None) -> torch.Tensor:
    """核采样：按概率从大到小累加，保留累计概率**刚好达到或越过** p 的那个词元及它前面的全部。

    一个词元被去掉，当且仅当排在它前面的词元的概率之和已经 ≥ p；所以最可能的词元永远保留。

    >>> top_p_filter(torch.tensor([0.5, 0.3, 0.2]).log(), 0.6).isinf().tolist()
    [False, False, True]
    """
    if p is None:
        return logits
    check_sampling_args(top_p=p)
    return _top_p(logits, p)


def _top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    if p >= 1:
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True, stable=True)
    probs = sorted_logits.float().softmax(-1)                        # [..., V]，从大到小
    before = torch.cumsum(probs, -1) - probs                         # 排在前面的累计概率
    remove_sorted = before >= p
    remove_sorted[..., 0] = False                                    # 第一名永远保留（p 再小也是）
    remove = remove_sorted.scatter(-1, order, remove_sorted)         # 还原回词表顺序
    return logits.masked_fill(remove, NEG_INF)


def apply_repetition_penalty(logits: torch.Tensor, ids, penalty: float) -> torch.Tensor:
    """对出现过的词元施加惩罚（CTRL 的做法）：正的 logit 除以 penalty，负的乘以 penalty。

    penalty > 1 时两种情况都让这个词元的概率变小（负数乘以 1.2 更负；只做除法会把负数往 0 拉，
    反而**提高**了它的概率——这是一个常见的错误）。``ids``：[n] 或 [B, n]，重复无妨。

    >>> apply_repetition_penalty(torch.tensor([2.0, -2.0, 1.0]), [0, 1], 2.0).tolist()
    [1.0, -4.0, 1.0]
    """
    check_sampling_args(repetition_penalty=penalty)
    return penalize(logits, ids, penalty)


def penalize(logits: torch.Tensor, ids, penalty: float) -> torch.Tensor:
    """同 :func:`apply_repetition_penalty`，但不再检查 penalty（解码循环里已由 SamplingParams
    检查过，不必每步每行再查一遍）。"""
    ids = torch.as_tensor(ids, dtype=torch.long, device=logits.device)
    if penalty == 1 or ids.numel() == 0:
        return logits
    if ids.dim() != logits.dim():
        raise UserError(f"ids 的维数 {ids.dim()} 与 logits 的维数 {logits.dim()} 不一致")
    score = logits.gather(-1, ids)
    score = torch.where(score > 0, score / penalty, score * penalty)
    return logits.scatter(-1, ids, score)


def sample_next(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                top_p: float | None = None, generator: torch.Generator | None = None
                ) -> torch.Tensor:
    """从 logits [V] 或 [B, V] 选出下一个词元 → [] 或 [B] 的 id。

    顺序：温度 → top-k → top-p → softmax → 按概率抽样。temperature=0 时直接取 argmax（贪心）。
    """
    probs = _probs(logits, temperature, top_k, top_p)
    if probs is None:
        return logits.argmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def sample_rows(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                top_p: float | None = None,
                generators: list[torch.Generator | None] | None = None) -> torch.Tensor:
    """一批 logits [B, V]，第 i 行用 ``generators[i]`` 抽样 → [B] 的 id。

    温度、top-k、top-p、softmax 整批一次算完；只有抽样这一步逐行（每行有自己的随机数发生器）。
    第 i 行的结果与 ``sample_next(logits[i], …, generator=generators[i])`` 相同。
    """
    params = SamplingParams(temperature, top_k, top_p)
    generators = [None] * logits.shape[0] if generators is None else list(generators)
    if len(generators) != logits.shape[0]:
        raise UserError(f"generators 有 {len(generators)} 个，logits 却有 {logits.shape[0]} 行")
    _check_some_allowed(logits)
    return sample_with(logits, params, generators)


def _check_some_allowed(logits: torch.Tensor) -> None:
    if torch.isneginf(logits).all(-1).any():
        raise UserError("没有任何可选的词元（所有 logits 都被屏蔽成了 −∞）")


def _probs(logits, temperature, top_k, top_p) -> torch.Tensor | None:
    """温度 → top-k → top-p → softmax 之后的概率 [..., V]；temperature=0（贪心）时返回 None。"""
    check_sampling_args(temperature, top_k, top_p)
    _check_some_allowed(logits)
    return _filtered_probs(logits, temperature, top_k, top_p)


def _filtered_probs(logits, temperature, top_k, top_p) -> torch.Tensor | None:
    """同 :func:`_probs`，但不再检查参数与"至少有一个可选的词元"（解码循环里参数已由
    SamplingParams 检查过，每行都有可选的词元由循环保证），所以每步不必等 GPU 回话。"""
    if temperature == 0:
        return None
    logits = _temperature(logits.float(), temperature)
    if top_k is not None:
        logits = _top_k(logits, top_k)
    if top_p is not None:
        logits = _top_p(logits, top_p)
    return logits.softmax(-1)


def sample_with(logits: torch.Tensor, params: SamplingParams,
                generators: list[torch.Generator | None]) -> torch.Tensor:
    """解码循环用：logits [B, V] 按已检查过的 ``params`` 选词 → [B]；第 i 行用 generators[i]。
    贪心时直接 argmax（每行至少有一个可选词元由调用方保证，不再逐步检查）。"""
    if params.temperature == 0:
        return logits.argmax(-1)
    probs = _filtered_probs(logits, params.temperature, params.top_k, params.top_p)
    if all(g is None for g in generators):
        return torch.multinomial(probs, 1).squeeze(-1)
    return torch.cat([torch.multinomial(p, 1, generator=g)
                      for p, g in zip(probs.unbind(0), generators)])
