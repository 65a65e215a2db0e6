"""押韵约束：不重韵（用随课程发布的 course.pt 实测）、要求的韵部用不了时报错（R4、R17）。"""
from __future__ import annotations

import pytest
import torch

import gptcourse as gc
from gptcourse import cli
from gptcourse.constraints import VerseConstraint
from gptcourse.generate import generate, sample_poems
from gptcourse.tokenizer import CharTokenizer
from gptcourse.verse import FORMS, RhymeGroupError, analyze, check_form, group_chars


@pytest.fixture(scope="module")
def shipped():
    model, tok, _ = gc.checkpoint.load()
    return model, tok


@pytest.mark.parametrize("form", list(FORMS))
def test_constrained_rhymes_never_repeat_a_rhyme_character(shipped, form):
    model, tok = shipped                                  # 20 个种子 × 4 种诗体，约 1 秒一种
    poems = sample_poems(model, tok, 20, seed=0, temperature=0.9, form=form, rhyme=True)
    reports = [analyze(p) for p in poems]
    assert all(check_form(p, form) for p in poems)
    assert all(a.rhymes and a.repeated_rhymes == [] for a in reports), \
        [p for p, a in zip(poems, reports) if a.repeated_rhymes]


def _tok(text):
    return CharTokenizer.from_text(text + "，。\n")


def test_rhyme_mask_leaves_out_earlier_rhyme_characters():
    tok = _tok("白日依山尽黄河入海流欲穷千里目更上一层楼秋头")
    c = VerseConstraint(tok, "五律", rhyme=True)
    allowed = lambda poem: {tok.decode([i]) for i in c.allowed(poem).nonzero().flatten().tolist()}  # noqa: E731
    first = allowed("白日依山尽，黄河入海")              # 第一个韵脚：任何平声字
    assert {"流", "楼", "秋", "头"} <= first
    assert "流" not in allowed("白日依山尽，黄河入海流。欲穷千里目，更上一层")    # 流 已用过
    assert allowed("白日依山头，黄河入海流。欲穷千里目，更上一层") & {"头", "流"} == set()
    assert {"楼", "秋"} <= allowed("白日依山头，黄河入海流。欲穷千里目，更上一层")  # 首句末字也算
    assert not c.fallbacks


def test_repeat_is_relaxed_before_the_rhyme_when_the_group_runs_out():
    tok = _tok("白日依山尽黄河入海流欲穷千里目更上一层")   # 尤韵只有"流"一个字
    c = VerseConstraint(tok, "五绝", rhyme=True)
    m = c.allowed("白日依山尽，黄河入海流。欲穷千里目，更上一层")
    assert {tok.decode([i]) for i in m.nonzero().flatten().tolist()} == {"流"}
    assert c.fallbacks == {"重韵"}                        # 只放宽了重韵，押韵仍然成立


def test_a_given_prompt_may_already_repeat():
    tok = _tok("白日依山尽黄河入海流欲穷千里目更上一层楼")
    c = VerseConstraint(tok, "五绝", rhyme=True)
    assert c.state("白日依山尽，黄河入海流。欲穷千里目，更上一层流") == (3, 5, 5)   # 不报错


@pytest.mark.parametrize("bad", ["", "仄", "上声一董", "阳阳"])
def test_unknown_or_empty_rhyme_group_is_an_error(bad):           # R4：'' 不再被悄悄忽略
    tok = _tok("白日依山尽黄河入海流")
    with pytest.raises(RhymeGroupError, match="未知的平声韵部"):
        VerseConstraint(tok, "五绝", rhyme_group=bad)
    model = gc.model.GPT(gc.config.preset("course", vocab_size=tok.vocab_size, n_layer=1,
                                          n_head=1, n_embd=8, block_size=32))
    with pytest.raises(RhymeGroupError):                          # 没有诗体也一样
        generate(model, tok, "", rhyme_group=bad, max_new_tokens=40)
    assert issubclass(RhymeGroupError, ValueError)


def test_rhyme_group_missing_from_the_vocabulary_is_an_error():   # R17：不再悄悄放宽
    tok = _tok("东风红童翁公弓宫")
    assert not set(group_chars("江")) & set("东风红童翁公弓宫")
    with pytest.raises(RhymeGroupError, match="词表里没有上平三江的字"):
        VerseConstraint(tok, "五绝", rhyme_group="江")
    assert VerseConstraint(tok, "五绝", rhyme_group="东").rhyme_group == "上平一东"


def test_cli_rejects_an_empty_rhyme_group(capsys):                 # R4：命令行 --rhyme-group ''
    assert cli.main(["generate", "--rhyme-group", "", "--form", "五绝", "--seed", "0"]) == 2
    err = capsys.readouterr().err
    assert "未知的平声韵部 ''" in err and "Traceback" not in err


def test_vocabulary_tables_are_shared_but_rhyme_groups_are_not():
    """词表上的表每个分词器只建一次；指定不同韵部的两个约束不会拿错对方的掩码。"""
    from gptcourse.constraints import VerseConstraint, _vocab
    model, tok, _ = gc.checkpoint.load()
    a = VerseConstraint(tok, "五绝", rhyme_group="东")
    b = VerseConstraint(tok, "五绝", rhyme_group="阳")
    assert a._cache is b._cache is _vocab(tok).cache
    ma, mb = a._rhyme_mask(None), b._rhyme_mask(None)
    assert not torch.equal(ma, mb)
    east, yang = tok.encode("东")[0], tok.encode("阳")[0]
    assert ma[east] and not ma[yang] and mb[yang] and not mb[east]


# ---------------------------------------------------------------- 解码不比规则更严（M1）
_ACCEPTED = {"押韵": (dict(rhyme=True), 168), "平仄": (dict(tones=True), 112),
             "押韵+平仄": (dict(rhyme=True, tones=True), 109)}


def _val_poems(tok, n=200):
    poems = [p for p in gc.data.load_corpus("tang_jinti").val.split("\n") if p][:n]
    assert len(poems) == n and all(gc.verse.poem_form(p) for p in poems)
    return [p for p in poems if not tok.unknown_chars(p)]       # 3 首有词表外的字


def _accepts(poem, rhyme=False, tones=False) -> bool:
    """verse 认为合格：押韵（不重韵，即 strict）、没有一条平仄规则不成立。"""
    return ((not rhyme or gc.verse.check_rhyme(poem, strict=True).rhymes)
            and (not tones or False not in gc.verse.check_tones(poem).values()))


@pytest.mark.parametrize("how", ["诗体", "只给押韵平仄", "藏头"])
@pytest.mark.parametrize("name", list(_ACCEPTED))
def test_every_prefix_of_an_accepted_poem_is_allowed(shipped, how, name):
    """反方向的守卫：verse 接受的 200 首真实验证集诗里，每一个前缀之后，约束解码都允许这首诗
    真正的下一个字（最后是结束符）。规定比 verse 严的只有"不重韵"（所以用 strict 的押韵）和
    "讲平仄的位置只许表里有平仄的字"——这 200 首里用不上第二条：没有一个前缀被拒绝。"""
    model, tok = shipped
    kw, expected = _ACCEPTED[name]
    poems = [p for p in _val_poems(tok) if _accepts(p, **kw)]
    assert len(poems) == expected
    refused = []
    for p in poems:
        lines = gc.verse.split_lines(p)[0]
        where = {"诗体": dict(form=gc.verse.poem_form(p)), "只给押韵平仄": {},
                 "藏头": dict(acrostic="".join(line[0] for line in lines))}[how]
        cons = VerseConstraint(tok, **where, **kw)
        for k in range(len(p) + 1):
            nxt = tok.encode(p[k])[0] if k < len(p) else tok.eos_id
            if not cons.allowed(p[:k])[nxt]:
                refused.append((p, k))
        assert not cons.fallbacks, p
    assert refused == []


def test_a_stricter_rule_would_be_caught(shipped, monkeypatch):
    """上面的守卫能失败：把平仄改成"讲平仄的字必须是平声"（比 verse 严），它就找到被拒绝的前缀。"""
    model, tok = shipped
    p = next(p for p in _val_poems(tok) if _accepts(p, tones=True))
    cons = VerseConstraint(tok, gc.verse.poem_form(p), tones=True)
    monkeypatch.setattr(VerseConstraint, "_tone_target", lambda self, s: (
        None if s.count not in gc.verse.tone_positions(s.L or 7) else {"平"}))
    refused = [k for k in range(len(p)) if not cons.allowed(p[:k])[tok.encode(p[k])[0]]]
    assert refused and all(gc.verse.tone(p[k]) == "仄" for k in refused)


def test_constraints_read_the_rule_positions_from_verse():
    """押韵的句、平仄的规则只写在 verse 里（rhyme_lines / foot_lines / tone_pairs）。"""
    import inspect

    import gptcourse.constraints as constraints
    assert "% 2" not in inspect.getsource(constraints)
    assert gc.verse.rhyme_lines(8) == (1, 3, 5, 7) and gc.verse.foot_lines(4) == (0, 1, 3)
    pairs = gc.verse.tone_pairs(7, 8)
    assert [r.name for r in pairs] == list(gc.verse.check_tones(
        "白日依山尽黄河，黄河入海流白日。欲穷千里目白日，更上一层楼白日。"
        "白日依山尽黄河，黄河入海流白日。欲穷千里目白日，更上一层楼白日。"))
    assert len(pairs) == 8 * 2 + 4 * 3 + 3 and all(r.a in (r.b, r.b - 1) for r in pairs)
