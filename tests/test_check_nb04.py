"""笔记本 04 的练习检查器：教师版的答案单元格必须通过，典型的错误答案必须被指出。"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import gptcourse as gc
from gptcourse.acceptance import distinct_n
from gptcourse.check import nb04
from gptcourse.verse import poem_form


@pytest.mark.parametrize("name", nb04.EXERCISES)
def test_the_teacher_solution_passes(name, capsys, teacher):
    assert getattr(gc.check.nb04, name)(teacher(f"nb04.{name}")) is True
    assert "正确 ✓" in capsys.readouterr().out


def _no_slash_attention(q, k, v):                 # 找错题：只删掉了掩码（比原来更糟）
    att = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return F.softmax(att, dim=-1) @ v


def _prefix_leak_test(model):                      # 只比较最后一个位置 → 永远说"没有泄漏"
    idx = torch.randint(model.config.vocab_size, (1, model.config.block_size))
    a, _ = model(idx)
    return not torch.allclose(a[:, -1], model(idx)[0][:, -1])


@torch.no_grad()
def _first_position_only(model):                   # 只看第 0 个位置：后半段才泄漏的模型漏掉了
    model.eval()
    idx = torch.randint(model.config.vocab_size, (1, model.config.block_size))
    changed = idx.clone()
    changed[0, 1:] = (changed[0, 1:] + 1) % model.config.vocab_size
    return not torch.allclose(model(idx)[0][:, 0], model(changed)[0][:, 0], atol=1e-5)


@torch.no_grad()
def _no_eval(model):                               # 忘了 eval()：dropout 让正确的模型也"泄漏"
    T, V = model.config.block_size, model.config.vocab_size
    idx = torch.randint(V, (1, T))
    changed = idx.clone()
    changed[0, T // 2:] = (changed[0, T // 2:] + 1) % V
    return not torch.allclose(model(idx)[0][:, :T // 2], model(changed)[0][:, :T // 2], atol=1e-5)


def test_leak_test_that_inspects_only_position_0_fails(capsys):
    assert gc.check.nb04.future_leak_test(_first_position_only) is False
    assert "后半段" in capsys.readouterr().out


@torch.no_grad()
def _single_t(model, t=7):                   # 只试一个 t（旧的 gc.mistakes.leak_test 就是这样）
    model.eval()
    T, V = model.config.block_size, model.config.vocab_size
    idx = torch.randint(V, (1, T), generator=torch.Generator().manual_seed(0))
    changed = idx.clone()
    changed[0, t + 1:] = (changed[0, t + 1:] + 1) % V
    return not torch.allclose(model(idx)[0][:, :t + 1], model(changed)[0][:, :t + 1], atol=1e-5)


@torch.no_grad()
def _last_token_only(model):                       # 只改最后一个字，比较其余所有位置
    model.eval()
    T, V = model.config.block_size, model.config.vocab_size
    idx = torch.randint(V, (1, T), generator=torch.Generator().manual_seed(0))
    changed = idx.clone()
    changed[0, -1] = (changed[0, -1] + 1) % V
    return not torch.allclose(model(idx)[0][:, :-1], model(changed)[0][:, :-1], atol=1e-5)


@pytest.mark.parametrize("wrong", [lambda m: _single_t(m, t=10), _last_token_only])
def test_leak_tests_that_skip_some_t_miss_the_one_pair_leak(wrong, capsys):
    """评审里被当成正确的错答案：这两个测试抓得住后半段的泄漏，却抓不住 (2, 3) 这一对。"""
    assert gc.check.nb04.future_leak_test(wrong) is False
    out = capsys.readouterr().out
    assert "一对位置" in out and "每个 t 都要试" in out


def test_the_old_single_t_leak_test_fails(capsys):
    assert gc.check.nb04.future_leak_test(_single_t) is False
    assert "每个 t 都要试" in capsys.readouterr().out


def test_the_packages_leak_test_passes_the_checker(passes):
    """gc.mistakes.leak_test 试遍每个 t，所以它本身就是这道题的一个正确答案。"""
    assert passes(gc.check.nb04.future_leak_test, lambda m: gc.mistakes.leak_test(m) > 1e-5)[0]


def test_leak_test_without_eval_fails_on_the_dropout_model(capsys):
    assert gc.check.nb04.future_leak_test(_no_eval) is False
    assert "model.eval()" in capsys.readouterr().out


WRONG = {
    "bits_from_loss": lambda loss: loss / math.log(10),
    "perplexity_from_loss": lambda loss: 2 ** loss,
    "form_checker": lambda p: "五绝" if len(p.removesuffix("\n")) == 24 else None,
    "future_leak_test": _prefix_leak_test,
    "fix_attention": _no_slash_attention,
    "guess_ledger": "B",
    "guess_zigzag": "B",
    "guess_shuffled_tones": "A",
    "rhyme_check": lambda poem: True,
    "distinct_ngrams": lambda poems, n: len({p[i:i + n] for p in poems
                                            for i in range(len(p) - n + 1)})
    / max(1, sum(len(p) - n + 1 for p in poems)),      # 跨了标点
    "slow_token_losses": lambda model, tok, text, T, stride:      # 忘了开头的结束符
    gc.evaluate.token_losses(model, tok, text, block_size=T, stride=stride)[1:],
    "bootstrap_interval": lambda items, stat, reps=1000, seed=0: (stat(items), stat(items)),
}


@pytest.mark.parametrize("name", sorted(WRONG))
def test_wrong_answers_fail(name, capsys):
    assert getattr(gc.check.nb04, name)(WRONG[name]) is False
    assert "还不对 ✗" in capsys.readouterr().out


def test_every_exercise_has_a_wrong_answer_test():
    assert set(WRONG) == set(nb04.EXERCISES)


def test_buggy_attention_really_is_buggy():
    q = k = v = torch.randn(1, 1, 4, 8)
    assert torch.isnan(gc.mistakes.buggy_attention(q, k, v)).any()
    assert gc.check.nb04.fix_attention(gc.mistakes.buggy_attention) is False


def test_the_teacher_solutions_agree_with_the_package(teacher):
    form_checker, distinct = teacher("nb04.form_checker"), teacher("nb04.distinct_ngrams")
    for poem in nb04.FORM_CASES:
        assert form_checker(poem) == poem_form(poem), poem
    val = gc.data.poems(gc.data.load_corpus("tang_5jue").val)
    assert [form_checker(p) for p in val] == [poem_form(p) for p in val]
    for n in (1, 2, 3):
        assert distinct(val, n) == pytest.approx(distinct_n(val, n))


def test_checkers_report_exceptions_and_non_callables(capsys):
    assert gc.check.nb04.bits_from_loss(42) is False
    assert "需要传入一个函数" in capsys.readouterr().out

    def boom(p):
        raise KeyError(p)

    assert gc.check.nb04.form_checker(boom) is False
    assert "KeyError" in capsys.readouterr().out


def test_show_solution(capsys, monkeypatch):
    monkeypatch.setenv("GPTCOURSE_SOLUTIONS", "1")             # 老师打开了参考答案
    gc.check.show_solution("fix_attention")
    assert "### BEGIN SOLUTION" in capsys.readouterr().out


def _rhymes_with(all_ends=False, ze=False, first_pair=False):
    """押韵检查的典型错误：连单数句一起查 / 仄声韵部也算 / 只比较第 2、4 句。"""
    from gptcourse.verse import ping_groups, rhyme_groups, split_lines

    def fn(poem):
        lines, marks = split_lines(poem.removesuffix("\n"))
        ends = [x[-1] for x, m in zip(lines, marks) if x and m]
        ends = ends if all_ends else ends[1::2]
        ends = ends[:2] if first_pair else ends
        if not ends:
            return False
        groups = rhyme_groups if ze else ping_groups
        shared = set(groups(ends[0]))
        for c in ends[1:]:
            shared &= set(groups(c))
        return bool(shared)
    return fn


@pytest.mark.parametrize("wrong, needle", [
    (dict(all_ends=True), "单数句"),
    (dict(ze=True), "平声"),
    (dict(first_pair=True), "第 2、4、6、8 句"),
])
def test_rhyme_check_typical_mistakes(capsys, wrong, needle):
    assert gc.check.nb04.rhyme_check(_rhymes_with(**wrong)) is False
    out = capsys.readouterr().out
    assert "还不对" in out and needle in out, out


def test_rhyme_solution_equals_the_package_on_real_and_shuffled_poems(teacher):
    from gptcourse.verse import check_rhyme, shuffle_chars
    val = gc.data.poems(gc.data.load_corpus("tang_jinti").val)[:500]
    for group in (val, shuffle_chars(val, seed=3)):
        want = [check_rhyme(p).rhymes for p in group]
        assert [teacher("nb04.rhyme_check")(p) for p in group] == want


# ---------------------------------------------------------------- slow_token_losses
def test_slow_token_losses_accepts_the_package_and_rejects_the_classic_bugs(passes):
    ok, out = passes(gc.check.nb04.slow_token_losses,
                     lambda m, t, text, T, s: gc.evaluate.token_losses(m, t, text, block_size=T,
                                                                       stride=s))
    assert ok, out

    def sliding(model, tok, text, T, stride):      # 每个位置都看满 T 个字：不是包里的窗口计划
        ids = [tok.eos_id] + tok.encode(text)
        out = []
        for i in range(len(ids) - 1):
            logits, _ = model(torch.tensor([ids[max(0, i - T + 1):i + 1]]))
            out.append(F.cross_entropy(logits[0, -1:], torch.tensor([ids[i + 1]])).item())
        return torch.tensor(out)

    ok, out = passes(gc.check.nb04.slow_token_losses, sliding)
    assert not ok and "滑动窗口" in out and "window_plan" in out

    def no_eos(model, tok, text, T, stride):       # 忘了开头的结束符：少一个位置
        return gc.evaluate.token_losses(model, tok, text, block_size=T, stride=stride)[1:]

    ok, out = passes(gc.check.nb04.slow_token_losses, no_eos)
    assert not ok and "eos_id" in out


# ---------------------------------------------------------------- bootstrap_interval
def _draws(items, stat, reps, rng, replace=True):
    n = len(items)
    idx = (lambda: rng.integers(n, size=n)) if replace else (lambda: rng.permutation(n))
    return [stat([items[j] for j in idx()]) for _ in range(reps)]


def test_bootstrap_interval_accepts_another_rng_and_rejects_the_classic_bugs(passes):
    import numpy as np

    def other_seed(items, stat, reps=1000, seed=0):       # 同样的方法、另一串随机数：也对
        return tuple(np.percentile(_draws(items, stat, reps, np.random.default_rng(seed + 99)),
                                   [2.5, 97.5]))

    assert passes(gc.check.nb04.bootstrap_interval, other_seed)[0]

    def without_replacement(items, stat, reps=1000, seed=0):
        return tuple(np.percentile(_draws(items, stat, reps, np.random.default_rng(seed), False),
                                   [2.5, 97.5]))

    ok, out = passes(gc.check.nb04.bootstrap_interval, without_replacement)
    assert not ok and "有放回" in out

    def normal(items, stat, reps=1000, seed=0):
        x = np.asarray(items, dtype=float)
        se = x.std(ddof=1) / math.sqrt(len(x))
        return x.mean() - 1.96 * se, x.mean() + 1.96 * se

    ok, out = passes(gc.check.nb04.bootstrap_interval, normal)
    assert not ok and "正态近似" in out

    def ninety(items, stat, reps=1000, seed=0):
        return tuple(np.percentile(_draws(items, stat, reps, np.random.default_rng(seed)), [5, 95]))

    ok, out = passes(gc.check.nb04.bootstrap_interval, ninety)
    assert not ok and "第 2.5 和第 97.5 百分位" in out


def test_bootstrap_solution_is_the_packages_interval_for_a_mean():
    """stat = 均值时，参考答案（笔记本里要求的抽法）与 gc.evaluate.bootstrap_interval 相同。"""
    import numpy as np

    package = getattr(gc.evaluate, "bootstrap_interval", None)
    if package is None:
        pytest.skip("这个版本的 gc.evaluate 还没有 bootstrap_interval")
    values = [float(i % 7 == 0) for i in range(150)]
    for seed in (0, 3):
        ours = nb04.solution_bootstrap_interval(values, lambda xs: float(np.mean(xs)), 500, seed)
        assert np.allclose(ours, package(values, n_boot=500, seed=seed), rtol=0, atol=1e-12)


# -------------------------------------------------- 审阅 2026-12-04（03–05）里漏过的错误答案
def _percentile(items, stat, reps, rng, m=None, shape=None):
    n = len(items)
    idx = rng.integers(0, n, shape or (reps, m or n))
    return tuple(np.percentile([stat([items[j] for j in row]) for row in idx], [2.5, 97.5]))


def test_bootstrap_interval_rejects_an_unseeded_rng(passes):
    """审阅 03–05 F6 第 6 条：default_rng() 不带种子，两次调用结果不同。"""
    def unseeded(items, stat, reps=1000, seed=0):
        return _percentile(items, stat, reps, np.random.default_rng())

    ok, out = passes(gc.check.nb04.bootstrap_interval, unseeded)
    assert not ok and "default_rng(seed)" in out


@pytest.mark.parametrize("kw, hint", [
    ({"m": "n-1"}, "n − 1"),                                   # 审阅 03–05 F6 第 7 条
    ({"shape": "n,reps"}, "形状反了"),                          # 审阅 03–05 F14
], ids=["one_short", "index_shape_transposed"])
def test_bootstrap_interval_names_how_many_items_each_round_draws(passes, kw, hint):
    def wrong(items, stat, reps=1000, seed=0):
        n = len(items)
        return _percentile(items, stat, reps, np.random.default_rng(seed),
                           m=n - 1 if "m" in kw else None,
                           shape=(n, reps) if "shape" in kw else None)

    ok, out = passes(gc.check.nb04.bootstrap_interval, wrong)
    assert not ok and hint in out, out


def test_bootstrap_interval_names_the_basic_interval(passes):
    """审阅 03–05 F14：反射的“基本”区间不该被说成正态近似。"""
    def basic(items, stat, reps=1000, seed=0):
        lo, hi = _percentile(items, stat, reps, np.random.default_rng(seed))
        theta = stat(items)
        return 2 * theta - hi, 2 * theta - lo

    ok, out = passes(gc.check.nb04.bootstrap_interval, basic)
    assert not ok and "基本" in out and "正态近似" not in out


def test_rhyme_check_rejects_a_foot_taken_from_the_trailing_newline(passes):
    """审阅 03–05 F6 第 8 条：按 。？！ 切开、取每段最后一个字，末尾的换行成了“韵脚”。"""
    def last_chars(poem):
        pieces = [x for x in re.split("[。？！]", poem) if x]
        feet = [x[-1] for x in pieces]
        groups = [set(gc.verse.ping_groups(c)) for c in feet]
        return bool(groups) and bool(set.intersection(*groups))

    ok, out = passes(gc.check.nb04.rhyme_check, last_chars)
    assert not ok and "末尾带换行" in out and "strip" in out
