"""网页演示的请求参数：JSON 正文 → ``generate()`` 的关键字参数；回答的内容。

这里只管"诗"的参数：类型、范围、长度、词表外的字，任何问题都是一个 :class:`ApiError`（400），
带一句中文和一句英文。HTTP 本身（正文怎么读、谁可以访问）在 :mod:`gptcourse.serve` 和
:mod:`gptcourse.serve.http`。

参数只有一个定义：采样参数是 :class:`~gptcourse.sampling.SamplingParams` 的字段，格式参数是
:class:`~gptcourse.generate.VerseSpec` 的字段，默认值是检查点的发布设置
（:mod:`gptcourse.release`）。
这里只多一层更严的范围（``RANGES``：网页上的滑块不该给出极端值）。
"""
from __future__ import annotations

import json
import math

from ..errors import UserError
from ..generate import VerseSpec
from ..release import FALLBACK, fit_prompt, whole_poem_only
from ..sampling import SamplingParams
from ..titles import MAX_TITLE
from ..verse import FORMS, analyze
from .http import ApiError

MAX_PROMPT = 64                 # 提示最多多少个字
MAX_ACROSTIC = 8
MAX_NEW_TOKENS = 200
MAX_ATTENTION = 64              # /api/attention：最多看多少个字的注意力（回答约 L·H·T² 个数）
TOP_DEFAULT, TOP_MAX = 20, 100  # /api/next：默认列出几个字，最多几个
# 采样参数的范围。下限离 0 远一点：1e-300 这样的值虽然 > 0，却会让 logits 除出 inf、
# 让 top-p 在 float32 里变成 0，最后抽样失败。温度另外允许正好 0（贪心）。
RANGES = {"temperature": (0.01, 3.0), "top_p": (0.01, 1.0), "repetition_penalty": (0.1, 3.0)}
ZERO_OK = ("temperature",)      # 在 RANGES 之外还允许正好 0 的参数（温度 0 = 贪心）
# 请求可以带的参数 = 提示、长度、种子 + SamplingParams 的字段 + VerseSpec 的字段（指定韵部除外）
DEFAULTS = {"prompt": "", "max_new_tokens": None, "seed": None, **SamplingParams().to_dict(),
            **{k: v for k, v in VerseSpec().__dict__.items() if k != "rhyme_group"}, **FALLBACK}


def brief(v) -> str:
    """错误信息里引用客户端的值：最多 40 个字符。"""
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "…"


def _number(p: dict, key: str, lo, hi, integer: bool = False, zero_ok: bool = False):
    v = p[key]
    ok_type = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok_type or (isinstance(v, float) and not math.isfinite(v)):
        kind = "整数" if integer else "数"
        raise ApiError(400, f"{key} 必须是{kind}，收到 {brief(v)}",
                       f"{key} must be {'an integer' if integer else 'a number'}")
    if not (lo <= v <= hi or (zero_ok and v == 0)):
        rng = f"[{lo}, {hi}]"
        raise ApiError(400, f"{key} 必须在 {rng} 之内{'（或正好是 0）' if zero_ok else ''}，"
                            f"收到 {brief(v)}", f"{key} must be in {rng}, got {brief(v)}")
    return v


def _text(p: dict, key: str, cap: int, tok) -> None:
    v = p[key]
    if not isinstance(v, str):
        raise ApiError(400, f"{key} 必须是字符串", f"{key} must be a string")
    if len(v) > cap:
        raise ApiError(400, f"{key} 太长：{len(v)} 个字，最多 {cap} 个",
                       f"{key} too long: {len(v)} > {cap} characters")
    missing = tok.unknown_chars(v) if hasattr(tok, "unknown_chars") else []
    if missing:
        raise ApiError(400, f"{key} 里有词表之外的字：{'、'.join(map(repr, missing[:10]))}",
                       f"{key} contains characters outside the vocabulary")


def load_object(body: bytes) -> dict:
    """请求正文 → 一个 JSON 对象；不是合法的 JSON 对象 → :class:`ApiError`（400）。"""
    try:
        d = json.loads(body.decode("utf-8") or "{}")
    except UnicodeDecodeError:
        raise ApiError(400, "请求正文不是合法的 UTF-8 JSON", "request body is not valid JSON") \
            from None
    except json.JSONDecodeError as e:
        raise ApiError(400, f"请求正文不是合法的 JSON（第 {e.lineno} 行第 {e.colno} 列：{e.msg}）",
                       "request body is not valid JSON") from None
    except (ValueError, RecursionError):            # 超长的数字、嵌套太深
        raise ApiError(400, "请求正文不是合法的 JSON（数字太长或嵌套太深）",
                       "request body is not valid JSON") from None
    if not isinstance(d, dict):
        raise ApiError(400, "请求正文必须是一个 JSON 对象", "request body must be a JSON object")
    return d


def _no_unknown(d: dict, known) -> None:
    unknown = sorted(set(d) - set(known))
    if unknown:
        names = ", ".join(brief(k)[1:-1] for k in unknown[:10])
        raise ApiError(400, f"未知参数：{names}", f"unknown fields: {names}")


def parse_params(body: bytes, tok, defaults: dict | None = None) -> dict:
    """请求正文 → generate() 的关键字参数；任何问题都抛出 :class:`ApiError`（400）。

    没给的参数取 ``defaults``（服务器的默认解码设置，即检查点的发布设置），再退回 DEFAULTS。"""
    return check_params(load_object(body), tok, defaults)


def check_params(d: dict, tok, defaults: dict | None = None) -> dict:
    """同 :func:`parse_params`，参数已经是一个字典。"""
    _no_unknown(d, DEFAULTS)
    given = {k: v for k, v in d.items() if v is not None}
    p = whole_poem_only({**DEFAULTS, **(defaults or {})}, given, given.get("max_new_tokens"))
    _text(p, "prompt", MAX_PROMPT, tok)
    if p["acrostic"] is not None:
        _text(p, "acrostic", MAX_ACROSTIC, tok)
    p["acrostic"] = p["acrostic"] or None
    if p["title"] is not None:                      # 以题作诗：题目（空字符串 = 不给题目）
        _text(p, "title", MAX_TITLE, tok)
    p["title"] = p["title"].strip() or None if p["title"] is not None else None
    if p["form"] is not None and (not isinstance(p["form"], str)
                                  or p["form"] not in (*FORMS, "", "不限")):
        raise ApiError(400, f"form 只能是 {'、'.join(FORMS)} 之一，收到 {brief(p['form'])}",
                       f"form must be one of {list(FORMS)}")
    p["form"] = p["form"] if p["form"] in FORMS else None
    _check_ranges(p, tok)
    p["top_k"] = p["top_k"] or None                         # 0 = 不限
    if p["max_new_tokens"] is not None:
        _number(p, "max_new_tokens", 1, MAX_NEW_TOKENS, integer=True)
    if p["seed"] is not None:
        _number(p, "seed", 0, 2**31 - 1, integer=True)
    for key in ("rhyme", "tones"):                  # 押韵 / 平仄约束（需要诗体或藏头）
        if not isinstance(p[key], bool):
            raise ApiError(400, f"{key} 必须是 true 或 false，收到 {brief(p[key])}",
                           f"{key} must be a boolean")
    return fit_prompt(tok, p["prompt"], p, given)   # 发布设置写不下去的开头：不加它，说一声


def parse_next(body: bytes, tok, defaults: dict | None = None) -> tuple[dict, int]:
    """``/api/next`` 的请求正文 → (与 /api/generate 相同的参数, 要列出的字数 ``top``)。

    ``top``：按采样之前的分布从大到小列出几个字（默认 ``TOP_DEFAULT``，最多 ``TOP_MAX``）；
    其余参数与 :func:`parse_params` 完全相同（``max_new_tokens``、``seed`` 可以带，用不上）。"""
    d = load_object(body)
    top = d.pop("top", None)
    p = check_params(d, tok, defaults)
    if top is None:
        return p, TOP_DEFAULT
    return p, _number({"top": top}, "top", 1, TOP_MAX, integer=True)


def parse_attention(body: bytes, tok, block_size: int) -> str:
    """``/api/attention`` 的请求正文 ``{"text": "…"}`` → 要看注意力的那段文字。

    1 到 ``min(MAX_ATTENTION, block_size − 1)`` 个字（模型前面还要放一个开头的换行），
    只能有词表里的字；否则 :class:`ApiError`（400）。"""
    d = load_object(body)
    _no_unknown(d, ("text",))
    if "text" not in d:
        raise ApiError(400, "缺少参数 text（要看注意力的那段文字）", "missing field: text")
    _text(d, "text", attention_limit(block_size), tok)
    if not d["text"]:
        raise ApiError(400, "text 不能为空", "text must not be empty")
    return d["text"]


def attention_limit(block_size: int) -> int:
    """/api/attention 的 text 最多几个字：``MAX_ATTENTION``，且放得进模型的上下文。"""
    return max(1, min(MAX_ATTENTION, block_size - 1))


def _check_ranges(p: dict, tok) -> None:
    """采样参数在网页的范围之内（``RANGES``、``ZERO_OK``；top_k 在 [0, 词表大小]）→ 否则 ApiError。"""  # noqa: E501
    for key, (lo, hi) in RANGES.items():
        if p[key] is not None:                      # top_p 可以是 None（不截断）
            _number(p, key, lo, hi, zero_ok=key in ZERO_OK)
    if p["top_k"] is not None:
        _number(p, "top_k", 0, tok.vocab_size, integer=True)


def check_defaults(defaults: dict, tok) -> None:
    """服务器的默认解码设置（检查点的发布设置）必须在网页的范围（``RANGES``，比库更严）之内：
    否则每个没带这个字段的请求都会得到 400。启动时就拒绝 → UserError（命令行：一行，退出码 2）。"""
    p = {**DEFAULTS, **defaults}
    try:
        _check_ranges(p, tok)
    except ApiError as e:
        raise UserError(f"检查点的发布设置超出网页服务的范围：{e.zh}。网页不能用这组默认设置；"
                        "请换一个检查点，或用 generate 命令（库的范围更宽）") from None


def result(p: dict, text: str, seconds: float) -> dict:
    """一首诗的结果（/api/generate 的回答，也是 /api/stream 最后一行的内容）。

    ``analysis`` 是 :func:`gptcourse.verse.analyze` 的报告：每个字的平仄 ``tones``（与 text 等长，
    平/仄/中/None）、韵脚在 text 里的下标 ``rhyme_positions``、韵部、平仄规则与合格率。
    ``relaxed``：没用上的发布设置、解码时放宽过的约束，一句话一条（没有时 []）。
    """
    return {"text": text, "prompt": p["prompt"], "title": p.get("title"),
            "new_chars": len(text) - len(p["prompt"]),
            "seconds": round(seconds, 3), "analysis": analyze(text).to_dict(),
            "relaxed": list(dict.fromkeys(p.get("relaxed", [])))}
