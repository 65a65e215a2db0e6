"""押韵约束：不重韵（用随课程发布的 course.pt 实测）、要求的韵部用不了时报错（R4、R17）。"""
from __future__ import annotations

import pytest

import torch

import gptcourse as gc
from gptcourse import cli
from gptcourse.generate import sample_poems
from gptcourse.constraints import VerseConstraint
from gptcourse.generate import generate
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
