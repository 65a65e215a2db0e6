"""字节级 BPE：往返、确定性、钉死的小例子、错误输入。"""
from __future__ import annotations

import doctest

import pytest

import gptcourse.bpe as bpe_mod
from gptcourse import DATA_DIR
from gptcourse.bpe import BPETokenizer, encode_bytes, get_stats, merge, split_chunks

HARD_STRINGS = [
    "",
    "床前明月光，疑是地上霜。\n举头望明月，低头思故乡。\n",
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "emoji 🙂🚀 and ZWJ family 👨‍👩‍👧‍👦, flag 🇨🇳, skin tone 👍🏽",
    "罕见字𠀀𪚥𰻞（扩展区）与异体字：疎劒鴈",
    "混合 mixed テキスト 한국어 Ελληνικά русский عربى\t\r\n  空格  ",
    "\n\n\n",
    "\x00\x01\ufffd",
]


@pytest.fixture(scope="module")
def poem_text() -> str:
    return (DATA_DIR / "tang_5jue.val.txt").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def small_bpe(poem_text) -> BPETokenizer:
    return BPETokenizer.train(poem_text, vocab_size=400)


def test_doctests_pass():
    result = doctest.testmod(bpe_mod)
    assert result.attempted >= 5 and result.failed == 0


def test_get_stats_and_merge_examples():
    assert get_stats([5, 6, 5, 6, 5]) == {(5, 6): 2, (6, 5): 2}
    assert get_stats([]) == {} and get_stats([7]) == {}
    assert merge([5, 6, 5, 6, 5], (5, 6), 300) == [300, 300, 5]
    assert merge([1, 1, 1, 1], (1, 1), 9) == [9, 9]
    assert merge([1, 2], (2, 1), 9) == [1, 2]


def test_pinned_worked_example():
    # a a a b d a a a b a c：(97,97) 出现 4 次最多；
    # 随后 (97,98) 与 (256,97) 都是 2 次，取较小的 (97,98)
    tok = BPETokenizer.train("aaabdaaabac", vocab_size=259)
    assert list(tok.merges.items()) == [((97, 97), 256), ((97, 98), 257), ((256, 257), 258)]
    assert tok.merge_counts == [4, 2, 2]
    assert tok.encode("aaabdaaabac") == [258, 100, 258, 97, 99]
    assert tok.vocab[258] == b"aaab"


def test_chinese_character_is_three_bytes():
    tok = BPETokenizer()
    assert tok.encode("春") == list("春".encode("utf-8")) == [230, 152, 165]
    assert tok.vocab_size == 256


@pytest.mark.parametrize("text", HARD_STRINGS)
def test_round_trip_hard_strings(small_bpe, text):
    ids = small_bpe.encode(text)
    assert all(0 <= i < small_bpe.vocab_size for i in ids)
    assert small_bpe.decode(ids) == text


def test_round_trip_long_real_text(small_bpe):
    text = (DATA_DIR / "luxun_nahan.txt").read_text(encoding="utf-8")[:30000]
    ids = small_bpe.encode(text)
    assert small_bpe.decode(ids) == text
    assert len(ids) < len(text.encode("utf-8"))       # 确实压缩了


def test_training_compresses_and_merges_are_deterministic(poem_text, small_bpe):
    again = BPETokenizer.train(poem_text, vocab_size=400)
    assert again == small_bpe and again.merge_counts == small_bpe.merge_counts
    assert small_bpe.vocab_size == 400 and len(small_bpe.merges) == 144
    counts = small_bpe.merge_counts
    # 新 id 对必含刚合并出的 id，次数不会超过被合并的 id 对，所以每步的最大次数单调不增
    assert counts == sorted(counts, reverse=True)
    ids = small_bpe.encode(poem_text)
    assert len(ids) < 0.7 * len(poem_text.encode("utf-8"))


def test_incremental_training_matches_naive_recount():
    """增量训练的合并顺序必须与“每步全部重数一遍”的朴素做法完全相同。"""
    text = "春风又绿江南岸，明月何时照我还。\n春眠不觉晓，处处闻啼鸟。\n" * 3 + "abab cdcd ababab"
    fast = BPETokenizer.train(text, vocab_size=300)
    chunks = [list(c.encode("utf-8")) for c in split_chunks(text)]
    expected = []
    for idx in range(256, 300):
        stats: dict = {}
        for ids in chunks:
            get_stats(ids, stats)
        if not stats:
            break
        pair = min(stats, key=lambda p: (-stats[p], p))
        expected.append((pair, idx))
        chunks = [merge(ids, pair, idx) for ids in chunks]
    assert list(fast.merges.items()) == expected


def test_chunks_never_cross_poems():
    text = "白日依山尽，黄河入海流。\n欲穷千里目"
    assert "".join(split_chunks(text)) == text
    assert "\n" in split_chunks(text)
    tok = BPETokenizer.train(text * 50, vocab_size=320)
    assert all(b"\n" not in v or v == b"\n" for v in tok.vocab.values())


def test_save_load_round_trip(tmp_path, small_bpe):
    path = tmp_path / "bpe.json"
    small_bpe.save(path)
    loaded = BPETokenizer.load(path)
    assert loaded == small_bpe and loaded.vocab == small_bpe.vocab
    text = HARD_STRINGS[3]
    assert loaded.encode(text) == small_bpe.encode(text)


def test_stops_early_when_nothing_left_to_merge():
    tok = BPETokenizer.train("ab", vocab_size=1000)
    assert tok.vocab_size == 257


def test_bad_inputs_raise_clear_errors(small_bpe):
    with pytest.raises(ValueError, match="至少为 256"):
        BPETokenizer.train("abc", vocab_size=255)
    with pytest.raises(TypeError, match="整数"):
        BPETokenizer.train("abc", vocab_size=300.0)
    with pytest.raises(TypeError, match="字符串"):
        BPETokenizer.train(b"abc", vocab_size=300)
    with pytest.raises(ValueError, match="超出词表范围"):
        small_bpe.decode([1, 99999])
    with pytest.raises(ValueError, match="errors"):
        small_bpe.encode("春", errors="ignore")
    with pytest.raises(ValueError, match="不合法"):
        BPETokenizer({(1, 2): 300})
    with pytest.raises(ValueError, match="不是 BPE"):
        BPETokenizer.from_dict({"type": "char"})
    assert small_bpe.encode("春", errors="unk") == small_bpe.encode("春")


def test_checkpoint_restores_bpe():
    import gptcourse as gc

    assert not hasattr(gc.tokenizer, "BPETokenizer")        # 一个名字一个家：gc.bpe.BPETokenizer
    restored = gc.checkpoint.tokenizer_from_dict(BPETokenizer.train("aaabdaaabac", 259).to_dict())
    assert restored.encode("aaab") == [258]


# ---------------------------------------------------------------- 编码：快，且与朴素写法相同
def _naive_encode(ids, merges):
    while len(ids) >= 2:
        pair = min(zip(ids, ids[1:]), key=lambda p: merges.get(p, float("inf")))
        if pair not in merges:
            return ids
        ids = merge(ids, pair, merges[pair])
    return ids


def test_heap_encoder_equals_the_naive_loop():
    text = (DATA_DIR / "tang_5jue.val.txt").read_text(encoding="utf-8")[:40_000]
    tok = BPETokenizer.train(text, vocab_size=600)
    long_run = "".join(c for c in text if c not in "，。\n")[:300]       # 没有标点：一整块
    samples = [text[i:i + n] for i, n in zip(range(0, 20_000, 997), range(1, 80, 4))]
    for s in samples + [long_run, "aaaa" * 10, "🙂" * 7, ""]:
        b = list(s.encode("utf-8"))
        assert encode_bytes(b, tok.merges) == _naive_encode(b, tok.merges), s
    assert tok.decode(tok.encode(long_run)) == long_run
