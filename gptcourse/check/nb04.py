"""笔记本 04（评估与验收）的练习检查器与参考答案。

用法与前几章相同：``gc.check.bits_from_loss(你的函数)`` 打印"正确 ✓"或一句说明哪里不对的
中文，并返回 True / False；``gc.check.show_solution("bits_from_loss")`` 打印参考答案。
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .nb01 import SOLUTIONS, _call, _fail, _ok  # 各笔记本共用的参考答案登记表

__all__ = ["bits_from_loss", "perplexity_from_loss", "form_checker", "future_leak_test",
           "buggy_attention", "fix_attention", "distinct_ngrams"]

EXERCISES_04 = ("bits_from_loss", "perplexity_from_loss", "form_checker", "future_leak_test",
                "fix_attention", "distinct_ngrams")


# ---------------------------------------------------------------- 练习里要找错的函数
def buggy_attention(q, k, v):
    """[B, H, T, D] → [B, H, T, D] 的因果注意力——但有一个 bug，你能找到吗？"""
    T, D = q.shape[-2], q.shape[-1]
    att = q @ k.transpose(-2, -1) / math.sqrt(D)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-1)
    att = att.masked_fill(~mask, float("-inf"))
    return F.softmax(att, dim=-1) @ v


# ---------------------------------------------------------------- 参考答案
def solution_bits_from_loss(loss_nats: float) -> float:
    """每字比特数 = 损失（nats，以 e 为底）÷ ln 2。"""
    return loss_nats / math.log(2)


def solution_perplexity_from_loss(loss_nats: float) -> float:
    """困惑度 = e^损失：相当于每一步在多少个等可能的字里挑。"""
    return math.exp(loss_nats)


def solution_form_checker(poem: str):
    """4 或 8 句、每句同为 5 或 7 个汉字、句末标点"，""。"交替（"。"位也可以是"？""！"）。"""
    poem = poem.removesuffix("\n")
    lines, marks, cur = [], [], ""
    for c in poem:
        if c in "，。？！；：、":
            lines.append(cur)
            marks.append(c)
            cur = ""
        else:
            cur += c
    if cur or not lines:                                  # 最后一句没有标点，或根本没有句子
        return None
    if any(not all("\u4e00" <= c <= "\u9fff" for c in line) or not line for line in lines):
        return None
    width = len(lines[0])
    if width not in (5, 7) or len(lines) not in (4, 8) or any(len(x) != width for x in lines):
        return None
    for i, m in enumerate(marks):
        if (i % 2 == 0 and m != "，") or (i % 2 == 1 and m not in "。？！"):
            return None
    return {(5, 4): "五绝", (5, 8): "五律", (7, 4): "七绝", (7, 8): "七律"}[(width, len(lines))]


@torch.no_grad()
def solution_future_leak_test(model) -> bool:
    """改动第 t 个位置之后的字：若第 0…t 个位置的 logits 有任何变化，就说明模型偷看了未来。"""
    model.eval()
    T, V = model.config.block_size, model.config.vocab_size
    t = T // 2
    idx = torch.randint(V, (1, T))
    changed = idx.clone()
    changed[0, t + 1:] = (changed[0, t + 1:] + 1) % V     # 后面的字全部换掉
    a, _ = model(idx)
    b, _ = model(changed)
    return not torch.allclose(a[:, :t + 1], b[:, :t + 1], atol=1e-6)


def solution_fix_attention(q, k, v):
    """bug：``diagonal=-1`` 把对角线（自己）也挡住了，第一行全是 −∞ → softmax 得到 nan。
    因果掩码应包含对角线：每个位置可以看自己和前面。"""
    T, D = q.shape[-2], q.shape[-1]
    att = q @ k.transpose(-2, -1) / math.sqrt(D)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=q.device))
    att = att.masked_fill(~mask, float("-inf"))
    return F.softmax(att, dim=-1) @ v


def solution_distinct_ngrams(poems: list[str], n: int) -> float:
    """不同的 n 字组数 ÷ n 字组总数；n 字组只在一句之内取（不跨标点）。"""
    grams = []
    for poem in poems:
        line = ""
        for c in poem + "。":
            if c in "，。？！；：、\n":
                grams += [line[i:i + n] for i in range(len(line) - n + 1)]
                line = ""
            else:
                line += c
    return len(set(grams)) / len(grams) if grams else 0.0


SOLUTIONS.update({
    "bits_from_loss": solution_bits_from_loss,
    "perplexity_from_loss": solution_perplexity_from_loss,
    "form_checker": solution_form_checker,
    "future_leak_test": solution_future_leak_test,
    "fix_attention": solution_fix_attention,
    "distinct_ngrams": solution_distinct_ngrams,
})


# ---------------------------------------------------------------- 检查器
def _numbers(fn, ref, cases, name) -> bool:
    for x in cases:
        got, err = _call(fn, x)
        if err:
            return _fail(f"{name}({x!r}) {err}")
        want = ref(x)
        try:
            good = math.isclose(float(got), want, rel_tol=1e-6, abs_tol=1e-9)
        except (TypeError, ValueError):
            good = False
        if not good:
            return _fail(f"{name}({x!r}) 得到 {got!r}，应为 {want:.6g}")
    return _ok()


def bits_from_loss(fn) -> bool:
    """练习：``fn(loss_nats) -> 每字比特数``。"""
    return _numbers(fn, solution_bits_from_loss, [math.log(2), math.log(8), 0.0, 4.5, 8.77],
                    "bits_from_loss")


def perplexity_from_loss(fn) -> bool:
    """练习：``fn(loss_nats) -> 困惑度``。"""
    return _numbers(fn, solution_perplexity_from_loss, [0.0, math.log(100), 1.0, 4.5],
                    "perplexity_from_loss")


FORM_CASES = [
    "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。",
    "朝辞白帝彩云间，千里江陵一日还。两岸猿声啼不住，轻舟已过万重山。",
    "国破山河在，城春草木深。感时花溅泪，恨别鸟惊心。烽火连三月，家书抵万金。白头搔更短，浑欲不胜簪。",
    "风急天高猿啸哀，渚清沙白鸟飞回。无边落木萧萧下，不尽长江滚滚来。"
    "万里悲秋常作客，百年多病独登台。艰难苦恨繁霜鬓，潦倒新停浊酒杯。",
    "何处春风起，谁家玉笛飞？长安一片月，万户捣衣声。",
    "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。\n",
    "", "白日依山尽", "白日依山尽，黄河入海流。欲穷千里目，更上一层楼",
    "白日依山尽，黄河入海流。欲穷千里目，",
    "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。白日依山尽，黄河入海流。",
    "白日依山尽。黄河入海流，欲穷千里目。更上一层楼，",
    "白日依山，黄河入海流。欲穷千里目，更上一层楼。",
    "朝辞白帝彩云间，黄河入海流。欲穷千里目，更上一层楼。",
    "白日依山尽，黄河入海流。\n欲穷千里目，更上一层楼。",
    "白日依山尽，黄河入海流？欲穷千里目？更上一层楼。",
    "白日依山A，黄河入海流。欲穷千里目，更上一层楼。",
    "一二三四五六，一二三四五六。一二三四五六，一二三四五六。",
]


def form_checker(fn) -> bool:
    """练习：``fn(poem) -> "五绝" / "五律" / "七绝" / "七律" / None``。"""
    for poem in FORM_CASES:
        got, err = _call(fn, poem)
        if err:
            return _fail(f"form_checker({poem!r}) {err}")
        want = solution_form_checker(poem)
        if got != want:
            return _fail(f"form_checker({poem!r}) 得到 {got!r}，应为 {want!r}")
    return _ok()


def _leak_models():
    from ..mistakes import (attention_core, attention_no_mask, attention_softmax_wrong_dim,
                            gallery_model, merge_heads_no_transpose, tiny_config)
    torch.manual_seed(0)
    cfg = tiny_config(40, block_size=16)
    return [("正确的 GPT", False, gallery_model(cfg, core=attention_core)),
            ("没有因果掩码的 GPT", True, gallery_model(cfg, core=attention_no_mask)),
            ("softmax 维度错了的 GPT", True, gallery_model(cfg, core=attention_softmax_wrong_dim)),
            ("合并多头没转置的 GPT", True, gallery_model(cfg, merge=merge_heads_no_transpose))]


def future_leak_test(fn) -> bool:
    """练习：``fn(model) -> bool``，模型偷看了未来（某位置的输出受后面的字影响）时返回 True。"""
    for name, leaks, model in _leak_models():
        got, err = _call(fn, model)
        if err:
            return _fail(f"在{name}上 {err}")
        if bool(got) != leaks:
            return _fail(f"{name}：你的测试说 {'有' if got else '没有'}泄漏，实际上"
                         f"{'有' if leaks else '没有'}")
    return _ok()


def fix_attention(fn) -> bool:
    """练习：找出 ``buggy_attention`` 的 bug，写出修好的 ``fn(q, k, v)``。"""
    g = torch.Generator().manual_seed(4)
    for shape in ((1, 1, 1, 4), (2, 4, 8, 16), (1, 2, 5, 8)):
        q, k, v = (torch.randn(*shape, generator=g) for _ in range(3))
        got, err = _call(fn, q, k, v)
        if err:
            return _fail(f"形状 {shape}：{err}")
        want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            return _fail(f"形状 {shape}：输出应是形状 {tuple(want.shape)} 的张量")
        if torch.isnan(got).any():
            return _fail(f"形状 {shape}：输出里有 nan——看看第一行（第一个位置）能看到谁")
        if not torch.allclose(got, want, atol=1e-5):
            return _fail(f"形状 {shape}：与 F.scaled_dot_product_attention(is_causal=True) "
                         f"最多相差 {(got - want).abs().max():.3g}")
    return _ok()


def distinct_ngrams(fn) -> bool:
    """练习：``fn(poems, n) -> distinct-n``（n 字组只在一句之内取）。"""
    poems = ["春风春风，春风春风。", FORM_CASES[0], FORM_CASES[1], "白日依山尽，黄河入海流。"]
    for args in ((poems, 1), (poems, 2), (poems, 5), (poems[:1], 2), (["春"], 2), ([], 1)):
        got, err = _call(fn, *args)
        if err:
            return _fail(f"distinct_ngrams{args!r} {err}")
        want = solution_distinct_ngrams(*args)
        if got is None or not math.isclose(float(got), want, abs_tol=1e-9):
            return _fail(f"distinct_ngrams{args!r} 得到 {got!r}，应为 {want:.6g}")
    return _ok()
