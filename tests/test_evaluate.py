"""评估与验收：逐位置损失恰好各算一次、基线的手算值、格律检查、新颖度、多样性、放行表、命令行。"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import gptcourse as gc
from gptcourse import cli
from gptcourse.acceptance import (
    Check,
    SubstringIndex,
    acceptance_checks,
    acceptance_table,
    copied_line_rate,
    distinct_n,
    repetition_rate,
    train_lines,
)
from gptcourse.config import preset
from gptcourse.evaluate import (
    NGramCounts,
    baselines,
    loss_by_position,
    metrics_from_loss,
    poem_nll,
    split_loss,
    token_losses,
    uniform_baseline,
    window_plan,
)
from gptcourse.model import GPT
from gptcourse.release import constraint_cost
from gptcourse.tokenizer import CharTokenizer
from gptcourse.verse import is_valid_form, poem_form, split_lines

WUJUE = "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。"
WULV = ("国破山河在，城春草木深。感时花溅泪，恨别鸟惊心。"
        "烽火连三月，家书抵万金。白头搔更短，浑欲不胜簪。")
QIJUE = "朝辞白帝彩云间，千里江陵一日还。两岸猿声啼不住，轻舟已过万重山。"
QILV = ("风急天高猿啸哀，渚清沙白鸟飞回。无边落木萧萧下，不尽长江滚滚来。"
        "万里悲秋常作客，百年多病独登台。艰难苦恨繁霜鬓，潦倒新停浊酒杯。")


# ---------------------------------------------------------------- 逐位置损失
@pytest.mark.parametrize("n,T,S", [(1, 4, 2), (4, 4, 2), (5, 4, 2), (10, 4, 2), (7, 4, 2),
                                   (100, 16, 8), (100, 16, 1), (100, 16, 16), (37, 8, 3)])
def test_window_plan_scores_every_position_once(n, T, S):
    plan = window_plan(n, T, S)
    Tw = min(T, n)
    seen = []
    for start, first in plan:
        assert 0 <= start <= first < start + Tw <= n
        if first >= T:                  # 开头之后，每个被打分的位置至少有 T − S 个字的语境
            assert first - start >= T - S
        seen += range(first, start + Tw)
    assert seen == list(range(n))


def test_window_plan_rejects_bad_stride():
    with pytest.raises(ValueError, match="stride"):
        window_plan(10, 4, 5)
    with pytest.raises(ValueError, match="stride"):
        window_plan(10, 4, 0)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """一个词表来自三首诗、权重放大（logits 有起伏）的小模型。"""
    text = "\n".join([WUJUE, QIJUE, WULV]) + "\n"
    tok = gc.tokenizer.CharTokenizer.from_text(text)
    torch.manual_seed(0)
    cfg = gc.config.preset("mini", vocab_size=tok.vocab_size, block_size=16, n_layer=2,
                           n_head=2, n_embd=32, init_std=0.3)
    return gc.model.GPT(cfg).eval(), tok, text


def _reference_losses(model, tok, text, T, S):
    """慢速参照：每个位置单独跑一次模型，语境起点按文档里的公式算。"""
    ids = [tok.eos_id] + tok.encode(text, errors="unk")
    n = len(ids) - 1
    out = []
    for i in range(n):
        start = 0 if i < T else min(((i - T) // S + 1) * S, n - T)
        x = torch.tensor([ids[start:i + 1]])
        logits, _ = model(x)
        out.append(F.cross_entropy(logits[0, -1:], torch.tensor([ids[i + 1]])).item())
    return torch.tensor(out)


@pytest.mark.parametrize("T,S,B", [(16, 8, 32), (16, 5, 3), (8, 8, 1)])
def test_token_losses_match_slow_reference(tiny, T, S, B):
    model, tok, text = tiny
    got = token_losses(model, tok, text, batch_size=B, block_size=T, stride=S)
    assert got.shape == (len(text),)
    torch.testing.assert_close(got, _reference_losses(model, tok, text, T, S), atol=1e-5, rtol=1e-5)


def test_split_loss_equals_plain_cross_entropy_when_text_fits(tiny):
    model, tok, _ = tiny
    text = "白日依山尽，黄河入海流。\n"                      # 13 个字 < block_size 16
    ids = torch.tensor([[tok.eos_id] + tok.encode(text)])
    _, want = model(ids[:, :-1], ids[:, 1:])
    assert split_loss(model, tok, text) == pytest.approx(want.item(), abs=1e-6)


def test_split_loss_is_deterministic_restores_mode_and_maps_unknown(tiny):
    model, tok, _ = tiny
    model.train()
    a = split_loss(model, tok, WUJUE + "\n驴骡\n")              # 生字 → <unk>，不报错
    b = split_loss(model, tok, WUJUE + "\n驴骡\n")
    assert a == b and model.training
    model.eval()
    with pytest.raises(ValueError, match="非空"):
        split_loss(model, tok, "")
    with pytest.raises(ValueError, match="block_size"):
        split_loss(model, tok, WUJUE, block_size=64)


def test_metrics_from_loss():
    m = metrics_from_loss(math.log(8))
    assert m.perplexity == pytest.approx(8) and m.bits_per_char == pytest.approx(3)
    m2 = metrics_from_loss(2.0, n_tokens=50, n_chars=100)      # 词元比字少：每字信息量减半
    assert m2.bits_per_char == pytest.approx(1.0 / math.log(2))


# ---------------------------------------------------------------- 基线（手算）
def test_baselines_hand_computed():
    train = "aab\n"
    tok = gc.tokenizer.CharTokenizer.from_text(train)            # <unk>, \n, a, b → V = 4
    assert tok.vocab_size == 4 and uniform_baseline(tok) == pytest.approx(math.log(4))
    counts = NGramCounts(tok, train)
    # 一元，k=1：目标 a,a,b,\n → p(a)=3/8, p(b)=2/8, p(\n)=2/8
    assert counts.loss("ab\n", 1, 1.0) == pytest.approx(
        -(math.log(3 / 8) + math.log(2 / 8) + math.log(2 / 8)) / 3)
    # 二元，k=1：对 (\n,a)(a,a)(a,b)(b,\n)；上文计数 \n:1 a:2 b:1
    assert counts.loss("ab\n", 2, 1.0) == pytest.approx(
        -(math.log(2 / 5) + math.log(2 / 6) + math.log(2 / 5)) / 3)
    # 没见过的对 (b,b) 与 <unk>：只靠平滑
    assert counts.loss("bb", 2, 0.5) == pytest.approx(
        -(math.log(0.5 / 3) + math.log(0.5 / 3)) / 2)
    assert counts.loss("z", 1, 1.0) == pytest.approx(-math.log(1 / 8))
    with pytest.raises(ValueError, match="k"):
        counts.loss("ab", 1, 0)
    with pytest.raises(ValueError, match="order"):
        counts.loss("ab", 3, 1.0)


def test_best_k_is_chosen_on_val_and_reported():
    train = "春风又绿江南岸\n明月何时照我还\n" * 3
    tok = gc.tokenizer.CharTokenizer.from_text(train)
    counts = NGramCounts(tok, train)
    k = counts.best_k("春风又绿\n", 2, grid=(0.01, 1.0, 100.0))
    assert k == 0.01                                   # 见过的搭配：平滑越少越好
    out = baselines(tok, train, "春风又绿\n", "明月何时\n", grid=(0.01, 1.0))
    assert set(out) == {"均匀 (ln V)", "一元 (unigram)", "二元 (bigram)"}
    assert out["二元 (bigram)"]["k"] == 0.01
    assert out["二元 (bigram)"]["val"] < out["一元 (unigram)"]["val"] < out["均匀 (ln V)"]["val"]


# ---------------------------------------------------------------- 诗内位置
def test_loss_by_position_groups_slots_and_lines():
    text = "白日依山尽，黄河入海流。\n"
    pos = loss_by_position(torch.arange(len(text), dtype=torch.float), text)
    five = pos.by_slot[5]
    assert five[0] == 3.0                    # 第 1 字：位置 0 与 6
    assert five[4] == 7.0                    # 第 5 字：位置 4 与 10
    assert five[7] == 8.0                    # 标点：位置 5 与 11
    assert five[8] == 12.0                   # 换行
    assert math.isnan(five[5]) and pos.slot_counts[7] == [0] * 9
    assert pos.by_line[:2] == [2.0, 8.0] and math.isnan(pos.by_line[2])
    with pytest.raises(ValueError, match="一一对应"):
        loss_by_position(torch.zeros(3), text)


# ---------------------------------------------------------------- 格律
@pytest.mark.parametrize("poem,form", [(WUJUE, "五绝"), (WULV, "五律"), (QIJUE, "七绝"),
                                       (QILV, "七律"), (WUJUE + "\n", "五绝"),
                                       ("何处春风起，谁家玉笛飞？长安一片月，万户捣衣声！",
                                        "五绝")])
def test_poem_form_valid(poem, form):
    assert poem_form(poem) == form and is_valid_form(poem)


@pytest.mark.parametrize("poem", [
    "", "白日依山尽", WUJUE[:-1],                            # 空、一句、缺最后的句号
    "白日依山尽，黄河入海流。欲穷千里目，",                   # 3 句
    WUJUE + "欲穷千里目，更上一层楼。",                      # 6 句
    "白日依山尽。黄河入海流，欲穷千里目。更上一层楼，",       # 标点顺序反了
    "白日依山尽，黄河入海流，欲穷千里目，更上一层楼。",       # 全是逗号
    "白日依山，黄河入海流。欲穷千里目，更上一层楼。",         # 一句只有 4 字
    "朝辞白帝彩云间，黄河入海流。欲穷千里目，更上一层楼。",   # 五七混杂
    "白日依山尽，黄河入海流。\n欲穷千里目，更上一层楼。",     # 中间有换行：两首诗
    "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。！",     # 多出的标点
    "白日依山尽，黄河入海流？欲穷千里目？更上一层楼。",       # ？出现在逗号的位置
    "白日依山A，黄河入海流。欲穷千里目，更上一层楼。",        # 混进字母
    "白日依山\ufffd，黄河入海流。欲穷千里目，更上一层楼。",   # <unk>
    "白日依山尽，，黄河入海流。欲穷千里目，更上一层楼。",     # 空句
])
def test_poem_form_invalid(poem):
    assert poem_form(poem) is None and not is_valid_form(poem)


def test_poem_form_rejects_non_strings():
    with pytest.raises(TypeError, match="字符串"):
        poem_form(["白日依山尽"])


def test_split_lines():
    assert split_lines("春眠不觉晓，处处闻啼鸟") == (["春眠不觉晓", "处处闻啼鸟"], ["，", ""])


# ---------------------------------------------------------------- 新颖度
def _brute_longest(s, text):
    return max((j - i for i in range(len(s)) for j in range(i + 1, len(s) + 1)
                if s[i:j] in text), default=0)


@pytest.mark.parametrize("depth", [64, 2])
def test_substring_index_agrees_with_brute_force(depth):
    g = torch.Generator().manual_seed(0)
    alphabet = "春风花月夜\n"
    text = "".join(alphabet[i] for i in torch.randint(len(alphabet), (300,), generator=g))
    index = SubstringIndex(text, depth=depth)
    for n in (1, 2, 3, 5, 8):
        for start in range(0, 280, 7):
            s = text[start:start + n]
            assert index.contains(s)
            assert index.contains(s + "秋") is (s + "秋" in text)
    queries = ["".join(alphabet[i] for i in torch.randint(5, (12,), generator=g))
               for _ in range(30)]
    for q in queries:
        got = index.longest_shared(q)
        assert got in text and got in q and len(got) == _brute_longest(q, text)


def test_longest_shared_and_copied_lines_on_hand_examples():
    train = WUJUE + "\n" + QIJUE + "\n"
    index = SubstringIndex(train)
    assert index.longest_shared("欲穷千里目，更上一层楼。") == "欲穷千里目，更上一层楼。"
    assert index.longest_shared("春江潮水连海平") == "江"      # 并列最长时取最靠前的
    assert index.longest_shared("秋") == ""
    assert index.contains(WUJUE) and not index.contains(WUJUE + WUJUE)
    known = train_lines(train)
    assert len(known) == 8 and "千里江陵一日还" in known
    # 4 句里 2 句照抄（"千里江陵一日还" "黄河入海流"）；"春" 这种 1 字的句不计
    poems = ["春水碧于天，千里江陵一日还。", "春，黄河入海流。画船听雨眠。"]
    assert copied_line_rate(poems, known) == pytest.approx(2 / 4)
    assert copied_line_rate([], known) == 0.0


# ---------------------------------------------------------------- 多样性与重复
def test_distinct_n_and_repetition():
    assert distinct_n(["春风春风，春风春风。"], 1) == pytest.approx(2 / 8)
    assert distinct_n(["春风春风，春风春风。"], 2) == pytest.approx(2 / 6)
    assert distinct_n([WUJUE], 2) == 1.0
    assert distinct_n(["白日依山尽，", "白日依山尽，"], 5) == 0.5   # 两首诗的相同句子
    assert distinct_n(["春"], 2) == 0.0
    with pytest.raises(ValueError):
        distinct_n([WUJUE], 0)
    assert repetition_rate(WUJUE) == 0.0
    assert repetition_rate("青青河畔草，郁郁园中柳。") == pytest.approx(0.2)
    assert repetition_rate("，。") == 0.0


# ---------------------------------------------------------------- 放行表
def test_acceptance_checks_and_table():
    train = WUJUE + "\n" + QIJUE + "\n"
    poems = [WULV, QILV, "春风春风春，春风春风春。", WUJUE]      # 3 首合格；最后一首整首照抄
    checks = acceptance_checks(poems, train, val_loss=4.2)
    by = {c.name: c for c in checks}
    assert checks[0].name == "验证集损失 (nats/字)" and checks[0].passed
    assert by["格律合格率"].value == 0.75 and not by["格律合格率"].passed
    assert by["逐句照抄率"].value == pytest.approx(4 / 22)       # 22 句里只有五绝那 4 句
    assert by["押韵率"].value == 0.75                           # 不合诗体的那首不算押韵
    assert by["重韵率"].value == 0.0 and by["重韵率"].rule == "≤ 0.010"
    assert by["平仄合格率"].value == 1.0                      # 三首合格的诗每条可判断的规则都成立
    assert by["与训练集最长公共子串 (字, 平均)"].value == pytest.approx(
        sum(_brute_longest(p, train) for p in poems) / 4)
    table = acceptance_table(checks)
    assert table.splitlines()[0].startswith("验收")
    assert "格律合格率" in table and "≥ 0.900" in table and "FAIL" in table
    assert table.splitlines()[-1].startswith("结论：不放行 FAIL")
    relaxed = acceptance_checks(poems, train, thresholds={
        "form_rate": 0.5, "copied_lines": 0.5, "longest_shared": 30, "distinct_1": 0,
        "distinct_2": 0, "repetition": 1, "rhyme_rate": 0.5, "tonal_share": 0.5})
    assert all(c.passed for c in relaxed)
    assert acceptance_table(relaxed).endswith("结论：放行 PASS（9/9 项通过）")
    again = acceptance_checks([WUJUE.replace("流", "楼")], train)   # 流→楼：楼…楼 重韵
    assert {c.name: c.value for c in again}["重韵率"] == 1.0
    with pytest.raises(ValueError, match="未知的门槛"):
        acceptance_checks(poems, train, thresholds={"bleu": 1})
    with pytest.raises(ValueError, match="为空"):
        acceptance_checks([], train)


def test_poem_nll_and_constraint_cost(tiny):
    _, tok, _ = tiny
    torch.manual_seed(0)
    model = gc.model.GPT(gc.config.preset("mini", vocab_size=tok.vocab_size, block_size=64,
                                          n_layer=1, n_head=2, n_embd=32)).eval()
    ids = [tok.eos_id] + tok.encode(WUJUE)             # 手算：从结束符开始，逐字的 −log p
    with torch.no_grad():
        logp = model(torch.tensor([ids[:-1]]))[0][0].log_softmax(-1)             # [24, V]
    want = -float(logp[torch.arange(len(WUJUE)), torch.tensor(ids[1:])].mean())
    assert poem_nll(model, tok, [WUJUE, QIJUE])[0] == pytest.approx(want, abs=1e-5)
    table = constraint_cost(model, tok, n=3, form="五绝", seed=0)
    assert list(table) == ["自由", "诗体", "诗体+押韵", "诗体+押韵+平仄"]
    assert all(table[k]["form_rate"] == 1.0 for k in list(table)[1:])
    assert table["诗体+押韵"]["rhyme_rate"] == table["诗体+押韵+平仄"]["rhyme_rate"] == 1.0
    assert table["诗体+押韵+平仄"]["tonal_share"] == 1.0
    with pytest.raises(ValueError, match="空诗"):
        poem_nll(model, tok, [""])


def test_check_direction():
    assert Check("x", 0.5, 0.5, True).passed and Check("x", 0.5, 0.5, False).passed
    assert not Check("x", 0.4, 0.5, True).passed and not Check("x", 0.6, 0.5, False).passed
    assert Check("x", 1, 2, False, ".1f").rule == "≤ 2.0"


# ---------------------------------------------------------------- 命令行
def test_cli_eval_on_a_tiny_checkpoint(tmp_path, capsys):
    corpus = gc.data.load_corpus("tang_5jue")
    tok = gc.tokenizer.CharTokenizer.from_text(corpus.train)
    torch.manual_seed(0)
    model = gc.model.GPT(gc.config.preset("mini", vocab_size=tok.vocab_size, block_size=32,
                                          n_layer=1, n_head=2, n_embd=32))
    path = gc.checkpoint.save(tmp_path / "tiny.pt", model, tok, step=3)
    rc = cli.main(["eval", "--checkpoint", str(path), "--corpus", "tang_5jue",
                      "--samples", "4", "--seed", "1"])
    out = capsys.readouterr().out
    assert rc == 1                                           # 没训练过的模型必须不放行
    for needle in ("val loss", "二元 (bigram)", "验收", "格律合格率", "押韵率", "重韵率",
                   "平仄合格率", "结论：不放行 FAIL", "种子 1–4（4 首；", "样本内"):
        assert needle in out
    model_row = next(line for line in out.splitlines() if line.startswith("模型"))
    val = float(model_row.split()[1])
    assert val == pytest.approx(split_loss(model, tok, corpus.val), abs=1e-4)
    assert val > 0.9 * math.log(tok.vocab_size)              # 随机初始化 ≈ ln V
    assert cli.main(["eval", "--checkpoint", str(tmp_path / "nope.pt")]) == 2
    assert "找不到" in capsys.readouterr().err


def test_bootstrap_interval_weighted_is_the_interval_of_the_ratio():
    """weights=1 与不加权完全相同；加权时区间围着 Σwx / Σw，而不是各首合格率的简单平均。"""
    rng = np.random.default_rng(3)
    held = rng.integers(0, 9, 200)
    checkable = held + rng.integers(0, 4, 200) * (np.arange(200) % 2)        # 一半的诗规则多
    share = held / np.maximum(checkable, 1)
    assert gc.evaluate.bootstrap_interval(share, weights=np.ones(200)) == \
        gc.evaluate.bootstrap_interval(share)
    lo, hi = gc.evaluate.bootstrap_interval(share, weights=checkable)
    ratio = held.sum() / checkable.sum()
    assert lo < ratio < hi and hi - lo < 0.2
    with pytest.raises(gc.errors.UserError, match="weights"):
        gc.evaluate.bootstrap_interval(share, weights=checkable[:10])
    with pytest.raises(gc.errors.UserError, match="weights"):
        gc.evaluate.bootstrap_interval(share, weights=-checkable)


def test_verse_rates_match_verse_and_carry_intervals():
    """verse_rates 的点估计就是 verse.rates / repeated_rhyme_rate 的数，区间包住它。"""
    poems = gc.data.poems(gc.data.load_corpus("tang_jinti").val)[:120]
    poems += [p.replace("。", "，", 1) for p in poems[:40]]                 # 几首诗体不合的
    got = gc.evaluate.verse_rates(poems)
    rhyme, tonal = gc.verse.rates(poems)
    assert got["n"] == len(poems)
    assert got["rhyme"] == pytest.approx(rhyme) and got["tonal"] == pytest.approx(tonal)
    assert got["repeated"] == pytest.approx(gc.verse.repeated_rhyme_rate(poems))
    assert got["form"] == pytest.approx(np.mean([gc.verse.is_valid_form(p) for p in poems]))
    for k in ("form", "rhyme", "repeated", "tonal"):
        lo, hi = got[f"{k}_ci"]
        assert lo <= got[k] <= hi
    assert got["form_ci"][1] - got["form_ci"][0] > 0.05                    # 160 首：区间不是一个点


# ---------------------------------------------------------------- batch_size 与精度
# split_loss 的 batch_size 与两条精度路径。
@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_split_loss_rejects_bad_batch_sizes(small_model, small_tok, bad):
    model, tok = small_model, small_tok
    with pytest.raises(ValueError, match="batch_size 必须是 ≥ 1 的整数"):
        split_loss(model, tok, "床前明月光，\n" * 5, batch_size=bad)


def test_split_loss_does_not_depend_on_batch_size(small_model, small_tok):
    model, tok = small_model, small_tok
    text = "床前明月光，疑是地上霜。\n" * 4
    losses = [split_loss(model, tok, text, batch_size=b, block_size=8) for b in (1, 2, 100)]
    assert losses == pytest.approx([losses[0]] * 3, abs=1e-5)
    assert 0 < losses[0] < 2 * math.log(tok.vocab_size)


def tiny_model(tok) -> GPT:
    torch.manual_seed(0)
    return GPT(preset("teacher", vocab_size=tok.vocab_size, block_size=16, n_layer=1, n_head=2,
                      n_embd=16))


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16"])
def test_evaluation_under_both_precisions(tiny_corpus_text, bf16):
    """评估在 bf16 autocast 下也能跑（CPU 不支持 bf16 时只是慢），与 fp32 的差别在容差之内。"""
    tok = CharTokenizer.from_text(tiny_corpus_text)
    model = tiny_model(tok)
    ref = split_loss(model, tok, tiny_corpus_text)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = split_loss(model, tok, tiny_corpus_text)
    assert math.isfinite(loss)
    assert loss == pytest.approx(ref, abs=0.05 if bf16 else 1e-6)
    assert loss == pytest.approx(math.log(tok.vocab_size), abs=0.5)   # 未训练：约等于 ln V
