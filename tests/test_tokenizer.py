"""字符分词器：往返、稳定的排序 id、未知字符的两种策略、保存/加载。"""
from __future__ import annotations

import pytest

import gptcourse as gc
from gptcourse.tokenizer import CharTokenizer, UnknownCharacterError


@pytest.fixture
def tok(tiny_corpus_text) -> CharTokenizer:
    return CharTokenizer.from_text(tiny_corpus_text)


def test_round_trip_and_sorted_ids(tok, tiny_corpus_text):
    ids = tok.encode(tiny_corpus_text)
    assert tok.decode(ids) == tiny_corpus_text
    assert len(ids) == len(tiny_corpus_text)
    chars = tok.itos[1:]                      # id 0 是 <unk>
    assert chars == sorted(set(tiny_corpus_text))
    assert tok.vocab_size == len(set(tiny_corpus_text)) + 1
    assert all(tok.stoi[c] == i for i, c in enumerate(tok.itos))


def test_same_corpus_same_vocabulary(tiny_corpus_text):
    shuffled = "\n".join(reversed(tiny_corpus_text.strip().split("\n"))) + "\n"
    assert CharTokenizer.from_text(tiny_corpus_text) == CharTokenizer.from_text(shuffled)


def test_newline_is_end_of_poem(tok):
    ids = tok.encode("床前明月光\n")
    assert ids[-1] == tok.eos_id == tok.stoi["\n"]
    # "\n" 的码位 10 比所有汉字都小，排序后紧跟在 <unk> 之后
    assert tok.eos_id == 1


def test_unknown_characters_strict_names_them(tok):
    with pytest.raises(UnknownCharacterError) as info:
        tok.encode("床前🙂明月龘光龘")
    assert info.value.chars == ["🙂", "龘"]
    assert "🙂" in str(info.value) and "龘" in str(info.value)
    assert isinstance(info.value, ValueError)            # 不是裸的 KeyError


def test_unknown_characters_unk_policy(tok):
    ids = tok.encode("床🙂光", errors="unk")
    assert ids == [tok.stoi["床"], 0, tok.stoi["光"]]
    assert tok.decode(ids) == "床\ufffd光"


def test_bad_arguments(tok):
    with pytest.raises(ValueError, match="errors"):
        tok.encode("床", errors="replace")
    with pytest.raises(ValueError, match="超出词表范围"):
        tok.decode([0, 10_000])
    with pytest.raises(ValueError, match="空文本"):
        CharTokenizer.from_text("")
    no_unk = CharTokenizer.from_text("床前", unk=False)
    with pytest.raises(ValueError, match="<unk>"):
        no_unk.encode("月", errors="unk")


def test_save_load(tmp_path, tok):
    path = tmp_path / "char.json"
    tok.save(path)
    loaded = CharTokenizer.load(path)
    assert loaded == tok and loaded.stoi == tok.stoi and loaded.has_unk == tok.has_unk
    assert gc.checkpoint.tokenizer_from_dict(tok.to_dict()) == tok


def test_real_corpus_vocabulary():
    corpus = gc.data.load_corpus("tang_5jue")
    tok = CharTokenizer.from_text(corpus.train)
    assert tok.vocab_size == len(set(corpus.train)) + 1 == 3629       # 清理后的划分（0e05736）
    assert tok.decode(tok.encode(corpus.train)) == corpus.train
    unseen = tok.unknown_chars(corpus.val)
    assert unseen and all(c not in corpus.train for c in unseen)
