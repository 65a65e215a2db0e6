"""笔记本 05 的练习检查器：参考答案通过，典型错误各自得到对应的中文提示。"""
from __future__ import annotations

import math

import pytest
import torch

import gptcourse as gc
from gptcourse.check import nb05

GUESSES = {"guess_frequency": nb05.GUESS_FREQUENCY, "guess_offset": nb05.GUESS_OFFSET}


@pytest.mark.parametrize("name", [n for n in nb05.EXERCISES if n not in GUESSES])
def test_the_teacher_solution_passes(passes, capsys, name, monkeypatch, teacher):
    assert passes(getattr(gc.check.nb05, name), teacher(f"nb05.{name}"))[0]
    monkeypatch.setenv("GPTCOURSE_SOLUTIONS", "1")             # 老师打开了参考答案
    gc.check.show_solution(f"nb05.{name}")
    assert "### BEGIN SOLUTION" in capsys.readouterr().out


def test_top_p_that_drops_the_crossing_token_fails(passes, capsys):
    def wrong(logits, p):                       # 用"包括自己的累计和 > p"：越过 p 的那个也被删了
        s, order = torch.sort(logits, descending=True)
        remove = torch.zeros_like(logits, dtype=torch.bool)
        remove[order] = torch.cumsum(s.softmax(-1), -1) > p
        return logits.masked_fill(remove, float("-inf"))

    ok, out = passes(gc.check.nb05.top_p, wrong)
    assert not ok and "越过 p" in out


def test_penalty_that_divides_negative_logits_fails(passes, capsys):
    def wrong(logits, ids, penalty):
        out = logits.clone()
        for i in set(ids):
            out[i] = out[i] / penalty
        return out

    ok, out = passes(gc.check.nb05.repetition_penalty, wrong)
    assert not ok and "负 logit 应该乘以 penalty" in out


def test_temperature_without_error_for_negative_tau_fails(passes, capsys):
    def no_check(logits, tau):
        if tau == 0:
            return torch.nn.functional.one_hot(logits.argmax(), logits.numel()).float()
        return torch.softmax(logits / tau, -1)

    ok, out = passes(gc.check.nb05.temperature_softmax, no_check)
    assert not ok and "ValueError" in out


def test_kv_bytes_hint_and_values(passes, capsys):
    ok, out = passes(gc.check.nb05.kv_cache_bytes, lambda L, B, T, C, b: L * B * T * C * b)
    assert not ok and "乘 2" in out
    assert gc.model.kv_cache_bytes(12, 1, 1024, 768) == 75_497_472 == 72 * 2**20
    assert math.isclose(gc.model.kv_cache_bytes(4, 1, 128, 256) / 2**20, 1.0)


def test_top_p_without_the_p_equals_one_rule_fails_on_every_cpu(passes, capsys):
    def no_rule(logits, p):                     # 正确的公式，但没有"p ≥ 1 不过滤"
        s, order = torch.sort(logits, descending=True, stable=True)
        probs = s.softmax(-1)
        remove = torch.zeros_like(logits, dtype=torch.bool)
        remove[order] = torch.cumsum(probs, -1) - probs >= p
        return logits.masked_fill(remove, float("-inf"))

    ok, out = passes(gc.check.nb05.top_p, no_rule)
    assert not ok and "p ≥ 1" in out


def test_top_p_check_ignores_ties_at_the_boundary(passes, capsys):
    # 用 float64 算累计和的正确写法：与参考答案只在离边界 < 1e-6 的词元上可能不同，必须通过
    def in_float64(logits, p):
        if p >= 1:
            return logits
        s, order = torch.sort(logits.double(), descending=True, stable=True)
        probs = s.softmax(-1)
        remove = torch.zeros_like(logits, dtype=torch.bool)
        remove[order] = torch.cumsum(probs, -1) - probs >= p
        return logits.masked_fill(remove, float("-inf"))

    assert passes(gc.check.nb05.top_p, in_float64)[0]



@pytest.mark.parametrize("name", sorted(GUESSES))
def test_guesses_accept_only_the_right_letter(passes, capsys, name):
    checker = getattr(gc.check.nb05, name)
    assert passes(checker, GUESSES[name])[0]
    assert passes(checker, GUESSES[name].lower())[0]
    wrong = next(c for c in "ABCD" if c != GUESSES[name])
    ok, out = passes(checker, wrong)
    assert not ok and "还不对" in out
    ok, out = passes(checker, "E")
    assert not ok and "请填" in out
    ok, out = passes(checker, None)
    assert not ok and "还没完成" in out


def _loop(crop=True, stop=True, ban_unk=True, with_prompt=True):
    """decode_loop 的一组典型错误（参数为 False 时把那一步漏掉）。"""
    @torch.no_grad()
    def fn(model, tok, prompt="", max_new_tokens=60, temperature=0.0, seed=None):
        bs = model.config.block_size
        ids = [tok.eos_id] + tok.encode(prompt)
        g = torch.Generator().manual_seed(seed) if seed is not None else None
        n0 = len(ids)
        for _ in range(max_new_tokens):
            logits = model(torch.tensor([ids[-bs:] if crop else ids]))[0][0, -1]
            if ban_unk:
                logits[tok.unk_id] = float("-inf")
            if temperature == 0:
                nxt = int(logits.argmax())
            else:
                probs = torch.softmax(logits / temperature, -1)
                nxt = int(torch.multinomial(probs, 1, generator=g))
            if nxt == tok.eos_id and stop:
                break
            ids.append(nxt)
        return tok.decode(ids[1:] if with_prompt else ids[n0:])
    return fn


@pytest.mark.parametrize("wrong, needle", [
    (dict(crop=False), "block_size"),
    (dict(stop=False), "结束符"),
    (dict(with_prompt=False), "提示"),
])
def test_decode_loop_typical_mistakes(passes, capsys, wrong, needle):
    ok, out = passes(gc.check.nb05.decode_loop, _loop(**wrong))
    assert not ok and needle in out, out


def test_decode_loop_reference_equals_the_package_loop(passes, capsys):
    assert passes(gc.check.nb05.decode_loop, _loop())[0]


def test_inverse_cdf_mistakes(passes, capsys):
    def strict(probs, u):                          # < 而不是 ≤：u 落在端点上时选中了概率为 0 的字
        return (torch.cumsum(probs, -1)[None, :] < u[:, None]).sum(-1)

    ok, out = passes(gc.check.nb05.inverse_cdf, strict)
    assert not ok and "≤ 而不是 <" in out
    def always_top(probs, u):
        return probs.argmax().repeat(len(u))

    ok, out = passes(gc.check.nb05.inverse_cdf, always_top)
    assert not ok and "应选第" in out
    torch.manual_seed(0)
    u = torch.rand(20000)
    probs = torch.tensor([0.5, 0.3, 0.2])
    freq = torch.bincount(nb05.solution_inverse_cdf(probs, u), minlength=3) / len(u)
    assert torch.allclose(freq, probs, atol=0.02)


def _rope_step(offset=True, rotate_v=False, rotate_k=True):
    from gptcourse.rope import apply_rope

    def fn(q, k, v, k_cache, v_cache, cos, sin, start):
        pos = start if offset else 0
        c, s = cos[pos:pos + 1], sin[pos:pos + 1]
        q = apply_rope(q, c, s)
        if rotate_k:
            k = apply_rope(k, c, s)
        if rotate_v:
            v = apply_rope(v, c, s)
        k_all, v_all = torch.cat([k_cache, k], 2), torch.cat([v_cache, v], 2)
        att = q @ k_all.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return att.softmax(-1) @ v_all, k_all, v_all
    return fn


@pytest.mark.parametrize("wrong, needle", [
    (dict(offset=False), "start"),
    (dict(rotate_v=True), "V 不做旋转"),
    (dict(rotate_k=False), "没有按真实位置旋转"),
])
def test_rope_cached_step_mistakes(passes, capsys, wrong, needle):
    ok, out = passes(gc.check.nb05.rope_cached_step, _rope_step(**wrong))
    assert not ok and needle in out, out


def test_quantize_rows_mistakes(passes, capsys):
    def per_tensor(w):
        scale = w.abs().max() / 127
        return torch.round(w / scale).clamp(-127, 127).to(torch.int8), scale

    def truncating(w):
        scale = w.abs().amax(1, keepdim=True).clamp_min(1e-12) / 127
        return (w / scale).to(torch.int8), scale

    def by_128_no_clamp(w):                        # 除以 128 又不 clamp：128 溢出成 −128
        scale = w.abs().amax(1, keepdim=True).clamp_min(1e-12) / 128
        return torch.round(w / scale).to(torch.int8), scale

    for fn, needle in ((per_tensor, "每张量一个"), (truncating, "四舍五入"),
                       (by_128_no_clamp, "clamp")):
        ok, out = passes(gc.check.nb05.quantize_rows, fn)
        assert not ok and needle in out, (fn.__name__, out)



def _fenming(**wrong):
    """二四六分明的典型错误（看错位置 / "中"当平声 / "相反"写成"相同"），用检查器里的同一份写法。"""
    return lambda line: nb05.solution_fenming(line, **wrong)


@pytest.mark.parametrize("wrong, needle", [
    (dict(pos=(0, 2, 4)), "一三五不论"),
    (dict(both_as_ping=True), "中"),
    (dict(same=True), "相反"),
])
def test_fenming_typical_mistakes(passes, capsys, wrong, needle):
    ok, out = passes(gc.check.nb05.fenming, _fenming(**wrong))
    assert not ok and needle in out, out


def test_fenming_solution_equals_the_package():
    from gptcourse.verse import check_tones, poem_form, shuffle_chars, split_lines
    real = [p for p in gc.data.poems(gc.data.load_corpus("tang_jinti").val) if poem_form(p)][:300]
    for poem in real + shuffle_chars(real, seed=5):
        rules = check_tones(poem)
        for i, line in enumerate(split_lines(poem)[0]):
            got = nb05.solution_fenming(line)
            pos = (1, 3) if len(line) == 5 else (1, 3, 5)
            assert got == [rules[f"第{i + 1}句第{a + 1}、{b + 1}字分明"]
                           for a, b in zip(pos, pos[1:])]


# ---------------------------------------------------------------- rhyme_mask
@pytest.mark.parametrize("kind, words", [("no repeat", "重韵"), ("first line", "首句末字"),
                                         ("tone", "ping_groups"), ("first group", "交集"),
                                         ("last group", "交集")])
def test_rhyme_mask_rejects_the_classic_bugs(passes, kind, words):
    def wrong(tok, feet, first=""):
        return nb05._rhyme_variant(tok, feet, first, kind)

    ok, out = passes(gc.check.nb05.rhyme_mask, wrong)
    assert not ok and words in out, out


def test_rhyme_mask_rejects_punctuation_and_wrong_shapes(passes):
    def with_comma(tok, feet, first=""):
        m = nb05._rhyme_variant(tok, feet, first, "right").clone()
        m[tok.encode("，")[0]] = True
        return m

    ok, out = passes(gc.check.nb05.rhyme_mask, with_comma)
    assert not ok and "不该允许 '，'" in out
    ok, out = passes(gc.check.nb05.rhyme_mask, lambda tok, feet, first="": [True] * tok.vocab_size)
    assert not ok and "布尔张量" in out


def test_rhyme_mask_solution_is_the_constraints_mask_on_real_poems():
    """参考答案 = VerseConstraint(rhyme=True) 在真诗每个韵脚位置上的掩码（笔记本里的证明）。"""
    from gptcourse.constraints import VerseConstraint

    corpus = gc.data.load_corpus("tang_jinti")
    tok = gc.tokenizer.CharTokenizer.from_text(corpus.train)
    n = 0
    for poem in gc.data.poems(corpus.val)[:12]:
        form = gc.verse.poem_form(poem)
        if form is None or not gc.verse.check_rhyme(poem).rhymes:
            continue
        vc = VerseConstraint(tok, form, rhyme=True)
        lines, feet, first, pos = gc.verse.split_lines(poem)[0], "", "", 0
        for i, line in enumerate(lines):
            if i % 2 == 1:
                prefix = poem[:pos + len(line) - 1]
                want = nb05._rhyme_variant(tok, feet, first, "right")
                assert torch.equal(want, vc.allowed(prefix))
                feet += line[-1]
                n += 1
            first = first or line[-1]
            pos += len(line) + 1
    assert n >= 20 and not vc.fallbacks


@pytest.mark.parametrize("wrong, words", [
    (lambda L, B, T, C, b: L * B * T * C * b, "乘 2"),
    (lambda L, B, T, C, b: 2 * B * T * C * b, "n_layer"),
    (lambda L, B, T, C, b: 2 * L * T * C * b, "batch"),
    (lambda L, B, T, C, b: 2 * L * B * T * C * b * 8, "字节"),
])
def test_kv_cache_bytes_names_the_missing_factor(passes, wrong, words):
    ok, out = passes(gc.check.nb05.kv_cache_bytes, wrong)
    assert not ok and words in out, out


def _decode_tau_after_softmax(model, tok, prompt, max_new_tokens, temperature, seed):
    """常见的错：先 softmax 再除以 τ——multinomial 重新归一化，温度不起作用。"""
    bs = model.config.block_size
    ids = [tok.eos_id] + tok.encode(prompt)
    g = torch.Generator().manual_seed(seed) if seed is not None else None
    for _ in range(max_new_tokens):
        logits = model(torch.tensor([ids[-bs:]]))[0][0, -1]
        logits[tok.unk_id] = float("-inf")
        if temperature == 0:
            nxt = int(logits.argmax())
        else:
            nxt = int(torch.multinomial(torch.softmax(logits, -1) / temperature, 1, generator=g))
        if nxt == tok.eos_id:
            break
        ids.append(nxt)
    return tok.decode(ids[1:])


def test_decode_loop_rejects_the_temperature_after_softmax(passes, teacher):
    """issue 33 第 4 条：小模型的分布几乎均匀时看不出温度放错；检查器用一个分布很尖的模型。"""
    ok, out = passes(gc.check.nb05.decode_loop, _decode_tau_after_softmax)
    assert not ok and "softmax 之前" in out
    assert passes(gc.check.nb05.decode_loop, teacher("nb05.decode_loop"))[0]


# -------------------------------------------------- 审阅 2026-12-04（03–05）F14：提示说出真正的错误
def test_rhyme_mask_names_a_union_of_groups(passes):
    def union(tok, feet, first=""):
        return nb05._rhyme_variant(tok, feet, first, "union")

    ok, out = passes(gc.check.nb05.rhyme_mask, union)
    assert not ok and "并集" in out and "第一个韵脚" not in out, out


@pytest.mark.parametrize("wrong, needle, not_said", [
    (dict(missing_as_ze=True), "不要当成仄声", "只看第 2、4、6 字"),
    (dict(same=True), "相反", "位置不对"),
])
def test_fenming_names_the_mistake_seen_on_every_line(passes, wrong, needle, not_said):
    ok, out = passes(gc.check.nb05.fenming, _fenming(**wrong))
    assert not ok and needle in out and not_said not in out, out
