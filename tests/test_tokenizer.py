"""字符分词器：往返、稳定的排序 id、未知字符的两种策略、保存/加载。"""
from __future__ import annotations

import json

import pytest
import torch

import gptcourse as gc
from gptcourse.bpe import BPETokenizer
from gptcourse.checkpoint import tokenizer_from_dict
from gptcourse.tokenizer import CharTokenizer, Tokenizer, UnknownCharacterError


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


# ---------------------------------------------------------------- 两种分词器的同一个接口与坏输入
@pytest.fixture(scope="module")
def char_tok() -> CharTokenizer:
    return CharTokenizer.from_text("床前明月光，疑是地上霜。\n")


@pytest.fixture(scope="module")
def bpe_tok() -> BPETokenizer:
    return BPETokenizer.train("床前明月光，疑是地上霜。\n" * 20, vocab_size=270)


@pytest.fixture(params=["char", "bpe"])
def any_tok(request, char_tok, bpe_tok):
    return char_tok if request.param == "char" else bpe_tok


def test_both_tokenizers_implement_the_protocol(char_tok, bpe_tok):
    for t in (char_tok, bpe_tok):
        assert isinstance(t, Tokenizer)
        assert t.decode(t.encode("明月光\n")) == "明月光\n"
        assert t.encode("\n") == [t.eos_id]
        assert t.unknown_chars("明月") == []
        assert tokenizer_from_dict(t.to_dict()) == t
    assert (char_tok.unk_id, bpe_tok.unk_id) == (0, None)
    assert bpe_tok.eos_id == 10 and char_tok.eos_id == char_tok.stoi["\n"]


def test_piece_is_the_text_of_one_token(char_tok, bpe_tok):
    assert char_tok.piece(char_tok.stoi["月"]) == "月"
    assert char_tok.piece(0) == "\ufffd"                        # <unk>
    first_byte = "月".encode("utf-8")[0]
    assert bpe_tok.piece(first_byte) == "\ufffd"                 # 不完整的 UTF-8
    for i in bpe_tok.encode("明月光，\n"):
        assert bpe_tok.piece(i) == bpe_tok.vocab[i].decode("utf-8", errors="replace")
    assert [bpe_tok.piece(i) for i in bpe_tok.encode("\n")] == ["\n"]
    whole = BPETokenizer.train("明月" * 50, vocab_size=262)          # 学到了整个“明”与“月”
    assert [whole.piece(i) for i in whole.encode("明月")] == ["明月"]


@pytest.mark.parametrize("bad", [b"abc", None, 123, ["床", "前"], ("床",)])
def test_encode_of_a_non_string_is_a_type_error(any_tok, bad):
    with pytest.raises(TypeError, match=f"encode 需要字符串，收到 {type(bad).__name__}"):
        any_tok.encode(bad)
    with pytest.raises(TypeError):
        any_tok.encode(bad, errors="unk")
    with pytest.raises(TypeError):
        any_tok.unknown_chars(bad)


@pytest.mark.parametrize("bad", [[-1], [10**6], [1.0], [True], [False], ["a"], "abc", [[1, 2]]])
def test_decode_of_a_bad_id_is_a_value_error(any_tok, bad):
    with pytest.raises(ValueError, match="超出词表范围|id 序列"):
        any_tok.decode(bad)


def test_decode_accepts_tensors_and_tuples(any_tok):
    ids = any_tok.encode("明月")
    assert any_tok.decode(torch.tensor(ids)) == any_tok.decode(tuple(ids)) == "明月"
    import numpy as np
    mixed = [torch.tensor(ids[0]), *map(np.int64, ids[1:])]      # 0 维张量、NumPy 整数也是 id
    assert any_tok.decode(mixed) == "明月"
    for bad in (torch.tensor(True), np.bool_(True), torch.tensor(1.0)):
        with pytest.raises(ValueError, match="超出词表范围"):
            any_tok.decode([bad])
    with pytest.raises(ValueError, match="超出词表范围"):
        any_tok.decode(torch.tensor([[ids[0]]]))                     # 2-D 张量


def test_lone_surrogate(char_tok, bpe_tok):
    with pytest.raises(UnknownCharacterError, match="ud800"):
        bpe_tok.encode("月\ud800")
    assert bpe_tok.unknown_chars("月\ud800\ud800") == ["\ud800"]
    assert bpe_tok.decode(bpe_tok.encode("月\ud800", errors="unk")) == "月\ufffd"
    assert char_tok.encode("月\ud800", errors="unk")[-1] == 0


@pytest.mark.parametrize("data, message", [
    ({"type": "char", "unk": "false", "chars": "ab\n"}, "'unk' 应是 bool"),
    ({"type": "char", "unk": 1, "chars": "ab\n"}, "'unk' 应是 bool"),
    ({"type": "char", "unk": True, "chars": 123}, "'chars' 应是 str"),
    ({"type": "char", "unk": True}, "缺少字段 'chars'"),
    ({"type": "char", "unk": True, "chars": ["ab", "c"]}, "'chars' 应是 str"),
    ([], "应是 JSON 对象"),
    (None, "应是 JSON 对象"),
    ({"type": "bpe", "merges": [[1]]}, "两个整数"),
    ({"type": "bpe", "merges": [["a", "b"]]}, "两个整数"),
    ({"type": "bpe", "merges": [[1.7, 2.2]]}, "两个整数"),
    ({"type": "bpe", "merges": [[True, 2]]}, "两个整数"),
    ({"type": "bpe", "merges": None}, "'merges' 应是 list"),
    ({"type": "bpe", "version": 99, "merges": []}, "版本 99"),
    ({"type": "wordpiece"}, "未知的分词器类型 'wordpiece'"),
])
def test_bad_tokenizer_data(data, message):
    with pytest.raises(ValueError, match=message):
        tokenizer_from_dict(data)


def test_unk_false_round_trips_as_false(tmp_path):
    t = CharTokenizer.from_text("ab\n", unk=False)
    t.save(tmp_path / "t.json")
    assert json.loads((tmp_path / "t.json").read_text())["unk"] is False
    assert CharTokenizer.load(tmp_path / "t.json").unk_id is None


@pytest.mark.parametrize("content", [b"", b'{"type": "char", "unk"', b"\xe6\x00\xff", "[" * 100_000,
                                     '{"type":"char","unk":true,"chars":"春风"}'.encode("gbk")])
def test_unreadable_tokenizer_files(tmp_path, content):
    path = tmp_path / "t.json"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    with pytest.raises(ValueError, match="t.json"):
        CharTokenizer.load(path)
    with pytest.raises(ValueError, match="t.json|不是字符"):
        BPETokenizer.load(path)


def test_tokenizer_file_is_a_directory(tmp_path):
    with pytest.raises(ValueError, match="不是可读取的分词器 JSON"):
        CharTokenizer.load(tmp_path)
