"""笔记本 04（评估与验收）的练习检查器：参考是包里的 gc.verse、gc.acceptance、gc.evaluate。"""
from __future__ import annotations

import math
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

from ..acceptance import distinct_n
from ..evaluate import metrics_from_loss
from ..verse import poem_form
from ._common import _call, _compare, _fail, _got, _ok, choice, exercise, register, results  # noqa: F401

EXERCISES = ("bits_from_loss", "perplexity_from_loss", "guess_ledger", "guess_zigzag",
             "form_checker", "rhyme_check", "guess_shuffled_tones", "future_leak_test",
             "fix_attention", "distinct_ngrams", "slow_token_losses", "bootstrap_interval")
__all__ = list(EXERCISES)


# ---------------------------------------------------------------- 学生版的代替品（包里没有的）
def solution_bootstrap_interval(items, stat, reps: int = 1000, seed: int = 0
                                ) -> tuple[float, float]:
    """按条目有放回地重抽样 reps 轮（一次抽出全部下标），stat 的 95% 百分位区间 (下端, 上端)；
    stat 是均值时与 ``gc.evaluate.bootstrap_interval(items, n_boot=reps, seed=seed)`` 相同。"""
    rng = np.random.default_rng(seed)
    n = len(items)
    idx = rng.integers(0, n, (reps, n))                     # [reps, n]：每行一轮
    draws = [stat([items[j] for j in row]) for row in idx]
    lo, hi = np.quantile(draws, [0.025, 0.975])
    return float(lo), float(hi)


GUESS_LEDGER = "A"           # 不重叠的窗口：每个窗口开头的字几乎没有上文 → 损失更高
GUESS_SHUFFLED_TONES = "C"   # 字序打乱：每条规则近似掷硬币，成立的比例在一半左右
GUESS_ZIGZAG = "A"           # 第 1、3、5 字开启一个词（二字词 + 一字），第 2、4 字多半是词的后半
register("nb04", {"bootstrap_interval": solution_bootstrap_interval})


# ---------------------------------------------------------------- 检查器
@exercise
def guess_ledger(guess) -> bool:
    """先猜一猜：不重叠窗口的验证损失比 split_loss（步长 T/2）高、低还是一样？"""
    return choice(guess, GUESS_LEDGER, "ABC",
                  hints="不重叠的窗口里，每个窗口开头的几个字几乎看不到上文；"
                        "split_loss 让每个字至少看到 T/2 个字的上文。上文越少，越难猜")


@exercise
def guess_shuffled_tones(guess) -> bool:
    """先猜一猜：把真诗每首的字打乱（标点不动），平仄规则成立的比例大约是多少？"""
    return choice(guess, GUESS_SHUFFLED_TONES, "ABCD",
                  hints="打乱之后，第 2、4 字各自是平还是仄几乎互不相关："
                        "每条“相反”或“相同”的规则就像掷一枚硬币")


@exercise
def guess_zigzag(guess) -> bool:
    """先猜一猜：五言句里，第 1、3、5 字和第 2、4 字哪一组更难猜？"""
    return choice(guess, GUESS_ZIGZAG, "ABC",
                  hints="五言句的节奏多是 二 + 二 + 一（或 二 + 一 + 二）："
                        "一个二字词的第二个字常常由第一个字决定（明→月、春→风），"
                        "开启一个新词的字才难猜")


_NEAR = partial(math.isclose, rel_tol=1e-6, abs_tol=1e-9)


@exercise
def bits_from_loss(fn) -> bool:
    """练习：``fn(loss_nats) -> 每字比特数``。"""
    return _compare(fn, lambda x: metrics_from_loss(x).bits_per_char,
                    [(math.log(2),), (math.log(8),), (0.0,), (4.5,), (8.77,)], "bits_from_loss",
                    float, _NEAR)


@exercise
def perplexity_from_loss(fn) -> bool:
    """练习：``fn(loss_nats) -> 困惑度``。"""
    return _compare(fn, lambda x: metrics_from_loss(x).perplexity,
                    [(0.0,), (math.log(100),), (1.0,), (4.5,)], "perplexity_from_loss",
                    float, _NEAR)


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


@exercise
def form_checker(fn) -> bool:
    """练习：``fn(poem) -> "五绝" / "五律" / "七绝" / "七律" / None``。"""
    return _compare(fn, poem_form, [(poem,) for poem in FORM_CASES], "form_checker")


_NOT_ALL_T = ("：只检查了开头几个位置吗？泄漏可能只发生在后面的位置——改掉第 t 个位置之后的字，"
              "要比较第 0…t 个位置的全部输出，而且每个 t 都要试")


def _leak_models():
    """(名字, 是否泄漏, 模型, 判错时的提示)。后两种泄漏：第 8 个位置起能看见后面所有的字；只有
    第 2 个位置能看见第 3 个——只试一个 t（或只改最后一个字）的测试抓不住它。"""
    from .. import mistakes as mk

    torch.manual_seed(0)
    cfg = mk.tiny_config(40, block_size=16)
    dropout = mk.tiny_config(40, block_size=16, dropout=0.2, attn_dropout=0.2, resid_dropout=0.2)
    gpt = partial(mk.gallery_model, cfg)
    return [("正确的 GPT", False, gpt(core=mk.attention_core), ""),
            ("训练模式下带 dropout 的正确 GPT", False, mk.gallery_model(dropout).train(),
             "：训练模式下 dropout 每次前向都不一样，先 model.eval() 再比较"),
            ("没有因果掩码的 GPT", True, gpt(core=mk.attention_no_mask), ""),
            ("softmax 维度错了的 GPT", True, gpt(core=mk.attention_softmax_wrong_dim), ""),
            ("合并多头没转置的 GPT", True, gpt(merge=mk.merge_heads_no_transpose), ""),
            ("只有后半段泄漏的 GPT（第 8 个位置起）", True,
             gpt(core=mk.attention_late_leak), _NOT_ALL_T),
            ("只在一对位置之间泄漏的 GPT（第 2 个位置能看见第 3 个）", True,
             gpt(core=mk.attention_pair_leak), _NOT_ALL_T)]


@exercise
def future_leak_test(fn) -> bool:
    """练习：``fn(model) -> bool``，模型偷看了未来（某位置的输出受后面的字影响）时返回 True。"""
    for name, leaks, model, hint in _leak_models():
        got = _got(fn, model, where=f"在{name}上 ")
        if bool(got) != leaks:
            return _fail(f"{name}：你的测试说 {'有' if got else '没有'}泄漏，实际上"
                         f"{'有' if leaks else '没有'}{hint}")
    return _ok()


@exercise
def fix_attention(fn) -> bool:
    """练习：找出 ``gc.mistakes.buggy_attention`` 的 bug，写出修好的 ``fn(q, k, v)``。"""
    g = torch.Generator().manual_seed(4)
    for shape in ((1, 1, 1, 4), (2, 4, 8, 16), (1, 2, 5, 8)):
        q, k, v = (torch.randn(*shape, generator=g) for _ in range(3))
        got = _got(fn, q, k, v, where=f"形状 {shape}：")
        want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            return _fail(f"形状 {shape}：输出应是形状 {tuple(want.shape)} 的张量")
        if torch.isnan(got).any():
            return _fail(f"形状 {shape}：输出里有 nan——看看第一行（第一个位置）能看到谁")
        if not torch.allclose(got, want, atol=1e-5):
            return _fail(f"形状 {shape}：与 F.scaled_dot_product_attention(is_causal=True) "
                         f"最多相差 {(got - want).abs().max():.3g}")
    return _ok()


@exercise
def distinct_ngrams(fn) -> bool:
    """练习：``fn(poems, n) -> distinct-n``（n 字组只在一句之内取）。"""
    poems = ["春风春风，春风春风。", FORM_CASES[0], FORM_CASES[1], "白日依山尽，黄河入海流。"]
    return _compare(fn, distinct_n, [(poems, 1), (poems, 2), (poems, 5), (poems[:1], 2),
                                     (["春"], 2), ([], 1)], "distinct_ngrams",
                    float, partial(math.isclose, abs_tol=1e-9))


def _rhyme_cases() -> dict[str, list[str]]:
    """押韵检查器的考题：真诗、韵脚互换的对照、以及几类专门的反例。"""
    from ..data import load_corpus, poems
    from ..verse import check_rhyme, group_chars, ping_groups, poem_form, swap_rhymes, tone

    real = [p for p in poems(load_corpus("tang_jinti").val) if poem_form(p)][:300]
    cases = {"真诗": real, "韵脚互换的对照组": swap_rhymes(real, seed=1)}
    lv = [p for p in real if poem_form(p) in ("五律", "七律") and check_rhyme(p).rhymes][:40]
    other = [c for c in group_chars("下平一先") if tone(c) == "平" and len(ping_groups(c)) == 1]
    broken = []
    for p in lv:                                   # 只把第 8 句的韵脚换成别的平声韵部的字
        g = check_rhyme(p).group
        c = next(c for c in other if g not in ping_groups(c)) if g != "下平一先" else "东"
        broken.append(p[:-2] + c + p[-1])
    cases["律诗第 8 句换了韵"] = broken
    ze = [c for c in "去夜月雪落日鸟树" if tone(c) == "仄"]          # 只有仄声的字
    ze_rhyme = [p[:p.index("。") - 1] + ze[0] + p[p.index("。"):] for p in real[:40]]
    cases["仄声字做韵脚"] = [p for p in ze_rhyme if not check_rhyme(p).rhymes]
    cases["末尾带换行的诗"] = [p + "\n" for p in lv[:10] + real[:10]]       # 题目允许末尾带换行
    return cases


def _rhyme_hint(poem: str, got: bool) -> str:
    """从这首诗本身看出最可能的错误。"""
    from ..verse import ping_groups, rhyme_groups, split_lines

    lines, marks = split_lines(poem.removesuffix("\n"))
    ends = [x[-1] for x, m in zip(lines, marks) if x and m]
    even = ends[1::2]

    def share(chars, groups):
        return bool(chars) and bool(set.intersection(*(set(groups(c)) for c in chars)))
    if not got:
        return ("单数句（第 1、3、5、7 句）的末字不用押韵，只看第 2、4、6、8 句；"
                "多音字只要有一个共同的平声韵部就算")
    if share(even, rhyme_groups) and not share(even, ping_groups):
        return "近体诗押平声韵：只看 gc.verse.ping_groups（平声韵部），仄声韵部不算"
    if share(even[:2], ping_groups):
        return "每个韵脚都要检查：律诗有 4 个韵脚（第 2、4、6、8 句的末字），要同属一个平声韵部"
    return "韵脚的平声韵部要取交集：每个韵脚都在同一个韵部里才算"


@exercise
def rhyme_check(fn) -> bool:
    """练习：``fn(poem) -> bool``，在真诗、韵脚互换的对照组和几类反例上与 check_rhyme 一致。"""
    from ..verse import check_rhyme

    for name, group in _rhyme_cases().items():
        for poem in group:
            got = _got(fn, poem, where=f"rhyme_check({poem!r}) ")
            want = check_rhyme(poem).rhymes
            if not isinstance(got, bool):
                return _fail(f"rhyme_check({poem!r}) 应返回 True 或 False，收到 {got!r}")
            if got != want and poem.endswith("\n") and _call(fn, poem[:-1])[0] == want:
                return _fail(f"{name}：{poem.strip()}（末尾带换行）你的结果 {got}，应为 {want}；"
                             "去掉换行就对了。先去掉末尾的换行（poem.strip()），再切句、取韵脚")
            if got != want:
                return _fail(f"{name}里的这首：{poem}\n  你的结果 {got}，应为 {want}。"
                             + _rhyme_hint(poem, got))
    return _ok()


# ---------------------------------------------------------------- 第 2 节：逐位置的参照实现
_SLOW_TEXT = "白日依山尽，黄河入海流。\n春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。\n"


@exercise
def slow_token_losses(fn) -> bool:
    """练习：``fn(model, tok, text, T, stride) -> [n]``，与 gc.evaluate.token_losses 逐位置一致。"""
    from ..evaluate import token_losses, window_plan
    from ..mistakes import gallery_model, tiny_config
    from ..tokenizer import CharTokenizer

    tok = CharTokenizer.from_text(_SLOW_TEXT)
    torch.manual_seed(0)
    model = gallery_model(tiny_config(tok.vocab_size, block_size=16)).eval()
    for T, stride in ((8, 4), (8, 8), (6, 3), (16, 8)):
        got = _got(fn, model, tok, _SLOW_TEXT, T, stride,
                   where=f"slow_token_losses(T={T}, stride={stride}) ")
        want = token_losses(model, tok, _SLOW_TEXT, block_size=T, stride=stride)
        try:
            got = torch.as_tensor(got, dtype=torch.float32).flatten()
        except (TypeError, ValueError, RuntimeError):
            return _fail(f"应返回 {len(want)} 个损失组成的张量，收到 {type(got).__name__}")
        if got.shape != want.shape:
            return _fail(f"应有 {len(want)} 个损失（每个词元一个），收到 {got.numel()} 个"
                         + ("：开头要先接上结束符 tok.eos_id（一首诗跟在换行后面），"
                            "第 0 个位置预测的是第一个字" if got.numel() == len(want) - 1 else ""))
        bad = torch.nonzero((got - want).abs() > 1e-4).flatten()
        if len(bad):
            i = int(bad[0])
            start = [s for s, first in window_plan(len(want), T, stride) if first <= i][-1]
            slide = ("你可能让每个位置都看满 T 个字的上文（滑动窗口）；"
                     if max(0, i - T + 1) < start else "")
            return _fail(f"T={T}、stride={stride}：第 {i} 个位置的损失是 {float(got[i]):.4f}，"
                         f"应为 {float(want[i]):.4f}。给它打分的窗口从第 {start} 个词元开始，"
                         f"语境是 ids[{start}:{i + 1}]。{slide}"
                         "窗口计划见 gc.evaluate.window_plan：first ≤ i 的最后一个窗口")
    return _ok()


# ---------------------------------------------------------------- 第 7 节：重抽样的区间
def _mean(xs):
    return float(np.mean(xs))


def _ratio(xs):                                     # 像平仄合格率：两个和之比
    return sum(h for h, _ in xs) / sum(c for _, c in xs)


_BOOT_CASES = [
    ([round(0.1 * ((7 * i) % 53) ** 1.5, 3) for i in range(60)], _mean),      # 偏斜的实数
    ([1.0] * 2 + [0.0] * 38, _mean),                                           # 接近 0 的比例
    ([((7 * i) % 5, 4 + i % 3) for i in range(70)], _ratio),                   # (成立, 可判断)
    ([0.2, 0.9, 3.1, 4.7, 12.0, 6.3], _mean),        # n 很小：每轮少抽一个时区间宽约 5%，看得出
]


def _drawn(items, stat, reps: int, seed: int, shape) -> tuple[float, float]:
    """参考答案的抽法，但下标数组的形状由 ``shape(n, reps)`` 给出（认出抽错个数的错误用）。"""
    idx = np.random.default_rng(seed).integers(0, len(items), shape(len(items), reps))
    lo, hi = np.quantile([stat([items[j] for j in row]) for row in idx], [0.025, 0.975])
    return float(lo), float(hi)


_BOOT_SHAPES = (
    (lambda n, reps: (reps, n - 1), "每一轮抽了 n − 1 个：要和原来一样抽 n 个（有放回），区间才对"),
    (lambda n, reps: (n, reps),
     "区间窄得多：下标数组的形状反了。应是 (reps, n)——每一行是一轮，抽 n 个；"
     "(n, reps) 变成了 n 轮、每轮抽 reps 个"),
)


@exercise
def bootstrap_interval(fn) -> bool:
    """练习：``fn(items, stat, reps, seed) -> (lo, hi)``，有放回重抽样的 95% 百分位区间。
    10000 轮时两端与参考答案相差不到区间宽度的 4% 就算对（别的抽法有蒙特卡洛误差）。"""
    items, stat = _BOOT_CASES[-1]                   # 先看随机数是否全由 seed 决定（便宜的一组）
    twice = [_got(fn, items, stat, 2000, 1, where="bootstrap_interval ") for _ in range(2)]
    if repr(twice[0]) != repr(twice[1]):
        return _fail("同一个 seed 算两次，区间不一样：随机数要全由参数 seed 决定，"
                     "写 np.random.default_rng(seed)（不要不带种子，也不要用全局的随机数）")
    for items, stat in _BOOT_CASES:
        got = _got(fn, items, stat, 10000, 1, where="bootstrap_interval ")
        try:
            lo, hi = map(float, got)
        except (TypeError, ValueError):
            return _fail(f"应返回 (下端, 上端) 两个数，收到 {got!r}")
        want_lo, want_hi = solution_bootstrap_interval(items, stat, 10000, 1)

        def near(a, b, w=want_hi - want_lo):
            return max(abs(a[0] - b[0]), abs(a[1] - b[1])) <= 0.04 * w

        if near((lo, hi), (want_lo, want_hi)):
            continue
        theta = stat(items)
        shape = next((h for f, h in _BOOT_SHAPES
                      if near((lo, hi), _drawn(items, stat, 10000, 1, f))), None)
        if abs(hi - lo) < 1e-9:
            hint = ("区间宽度是 0：重抽样要**有放回**（rng.integers），"
                    "不放回地重排每轮都是原来那组数")
        elif shape:
            hint = shape
        elif near((lo, hi), (2 * theta - want_hi, 2 * theta - want_lo)):
            hint = ("这是“基本”区间（2θ − 分位数，把分位数绕 θ 反射过来）：这里要的是百分位区间，"
                    "直接取重抽样结果的第 2.5 和第 97.5 百分位")
        elif lo < 0 <= want_lo and stat is _mean:
            hint = ("下端小于 0：这是“均值 ± 1.96 × 标准误”的正态近似；比例接近 0 时它会越界，"
                    "要用重抽样结果的第 2.5 和第 97.5 百分位")
        elif lo > want_lo and hi < want_hi:
            hint = "区间太窄：95% 区间取第 2.5 和第 97.5 百分位（不是第 5 和第 95）"
        else:
            hint = "每一轮从 n 个条目里有放回地抽 n 个，算一次 stat，再取 2.5% 与 97.5% 分位数"
        what = "均值" if stat is _mean else "两个和之比"
        return _fail(f"{len(items)} 个条目的{what}（{stat(items):.3f}）："
                     f"得到 [{lo:.3f}, {hi:.3f}]，应约为 [{want_lo:.3f}, {want_hi:.3f}]。{hint}")
    return _ok()
