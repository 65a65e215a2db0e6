"""坏输入的回归测试（可靠性探测表里的坏结果）：分词器、配置、采样参数、评估、批量生成。"""
from __future__ import annotations

import json
import math

import pytest
import torch

from gptcourse import DATA_DIR
from gptcourse.bpe import BPETokenizer, encode_bytes, merge
from gptcourse.checkpoint import tokenizer_from_dict
from gptcourse.config import MAX_BLOCK_SIZE, GPTConfig, preset
from gptcourse.evaluate import split_loss
from gptcourse.generate import generate, generate_batch, next_token_probs
from gptcourse.model import GPT
from gptcourse.sampling import (
    GREEDY_BELOW,
    apply_repetition_penalty,
    apply_temperature,
    check_sampling_args,
    sample_next,
)
from gptcourse.tokenizer import CharTokenizer, Tokenizer, UnknownCharacterError


@pytest.fixture(scope="module")
def char_tok() -> CharTokenizer:
    return CharTokenizer.from_text("床前明月光，疑是地上霜。\n")


@pytest.fixture(scope="module")
def bpe_tok() -> BPETokenizer:
    return BPETokenizer.train("床前明月光，疑是地上霜。\n" * 20, vocab_size=270)


@pytest.fixture(params=["char", "bpe"])
def tok(request, char_tok, bpe_tok):
    return char_tok if request.param == "char" else bpe_tok


# ---------------------------------------------------------------- 一个分词器接口
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
def test_encode_of_a_non_string_is_a_type_error(tok, bad):
    with pytest.raises(TypeError, match=f"encode 需要字符串，收到 {type(bad).__name__}"):
        tok.encode(bad)
    with pytest.raises(TypeError):
        tok.encode(bad, errors="unk")
    with pytest.raises(TypeError):
        tok.unknown_chars(bad)


@pytest.mark.parametrize("bad", [[-1], [10**6], [1.0], [True], [False], ["a"], "abc", [[1, 2]]])
def test_decode_of_a_bad_id_is_a_value_error(tok, bad):
    with pytest.raises(ValueError, match="超出词表范围|id 序列"):
        tok.decode(bad)


def test_decode_accepts_tensors_and_tuples(tok):
    ids = tok.encode("明月")
    assert tok.decode(torch.tensor(ids)) == tok.decode(tuple(ids)) == "明月"
    import numpy as np
    mixed = [torch.tensor(ids[0]), *map(np.int64, ids[1:])]      # 0 维张量、NumPy 整数也是 id
    assert tok.decode(mixed) == "明月"
    for bad in (torch.tensor(True), np.bool_(True), torch.tensor(1.0)):
        with pytest.raises(ValueError, match="超出词表范围"):
            tok.decode([bad])
    with pytest.raises(ValueError, match="超出词表范围"):
        tok.decode(torch.tensor([[ids[0]]]))                     # 2-D 张量


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


# ---------------------------------------------------------------- BPE 编码：快，且与朴素写法相同
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


# ---------------------------------------------------------------- GPTConfig 的检查
@pytest.mark.parametrize("override, message", [
    (dict(norm_eps=-1.0), "norm_eps 必须是 > 0"),
    (dict(norm_eps=0.0), "norm_eps 必须是 > 0"),
    (dict(norm_eps=float("nan")), "norm_eps"),
    (dict(rope_base=0, pos="rope"), "rope_base 必须是 > 1"),
    (dict(rope_base=-5, pos="rope"), "rope_base 必须是 > 1"),
    (dict(rope_base=1.0), "rope_base 必须是 > 1"),
    (dict(rope_base=float("inf")), "rope_base"),
    (dict(init_std=-1), "init_std 必须是 > 0"),
    (dict(dropout=1.0), r"dropout 必须在 \[0, 1\) 内"),
    (dict(attn_dropout=-0.1), r"attn_dropout 必须在 \[0, 1\) 内"),
    (dict(resid_dropout=float("nan")), "resid_dropout"),
    (dict(dropout="0.1"), "dropout"),
    (dict(n_embd=0), "n_embd 必须 ≥ 1"),
    (dict(n_layer=-1), "n_layer 必须 ≥ 1"),
    (dict(vocab_size=0), "vocab_size 必须 ≥ 1"),
    (dict(n_embd=96.0), "n_embd 必须是整数"),
    (dict(n_layer=2.5), "n_layer 必须是整数"),
    (dict(n_head=True), "n_head 必须是整数"),
    (dict(vocab_size="x"), "vocab_size 必须是整数"),
    (dict(n_embd=100, n_head=3), "必须能被 n_head=3 整除"),
    (dict(block_size=MAX_BLOCK_SIZE + 1), "block_size=8193 太大"),
    (dict(bias="yes"), "bias 必须是 True 或 False"),
    (dict(colour="blue"), r"未知字段：\['colour'\]"),
])
def test_config_validation(override, message):
    with pytest.raises(ValueError, match=message):
        preset("mini", **override)


def test_config_from_dict_rejects_non_dicts_and_presets_still_build():
    with pytest.raises(ValueError, match="配置应是 dict"):
        GPTConfig.from_dict([1, 2])
    for name in ("mini", "teacher", "gpt2", "course"):
        assert GPTConfig.from_dict(preset(name).to_dict()) == preset(name)


# ---------------------------------------------------------------- 极端的采样参数
@pytest.fixture(scope="module")
def model_and_tok(char_tok):
    torch.manual_seed(0)
    return GPT(preset("mini", vocab_size=char_tok.vocab_size, block_size=16, n_layer=1,
                      n_head=2, n_embd=16)), char_tok


@pytest.mark.parametrize("kw", [dict(temperature=1e-300), dict(temperature=GREEDY_BELOW / 2),
                                dict(top_p=1e-300), dict(top_p=1e-45),
                                dict(temperature=1e-300, top_p=1e-300, top_k=1)])
def test_tiny_values_act_as_greedy(model_and_tok, kw):
    """τ → 0 与 p → 0 的极限都是"只留最可能的那个"：与贪心的结果相同，不会让 multinomial 崩溃。"""
    model, tok = model_and_tok
    greedy = generate(model, tok, "明", max_new_tokens=8, temperature=0)
    assert generate(model, tok, "明", max_new_tokens=8, seed=0, **kw) == greedy
    probs = next_token_probs(model, tok, "明", **kw)
    assert torch.isfinite(probs).all() and probs.max().item() == pytest.approx(1.0)


def test_tiny_repetition_penalty_is_rejected_or_works(model_and_tok):
    model, tok = model_and_tok
    for bad in (1e-300, 0.001, 1e300, 101.0):
        with pytest.raises(ValueError, match=r"repetition_penalty 必须在 \[0.01, 100\] 之内"):
            generate(model, tok, "明", max_new_tokens=4, repetition_penalty=bad)
    for ok in (0.01, 100.0):                                   # 边界上的值能用
        assert len(generate(model, tok, "明", max_new_tokens=4, repetition_penalty=ok, seed=0))


def test_huge_temperature_is_rejected_and_the_limit_works(model_and_tok):
    model, tok = model_and_tok
    with pytest.raises(ValueError, match="temperature 最大为 100"):
        generate(model, tok, "明", temperature=1e300)
    with pytest.raises(ValueError, match="temperature 必须是 ≥ 0 的有限数"):
        check_sampling_args(temperature=float("inf"))
    assert len(generate(model, tok, "明", max_new_tokens=4, temperature=100.0, seed=0)) >= 1


def test_sampler_math_at_the_limits():
    logits = torch.tensor([1.0, 3.0, 3.0, float("-inf")])
    assert apply_temperature(logits, 1e-300).tolist() == [-math.inf, 3.0, 3.0, -math.inf]
    assert apply_temperature(logits, 0.5).tolist() == [2.0, 6.0, 6.0, -math.inf]
    g = torch.Generator().manual_seed(0)
    picks = {int(sample_next(logits, 1e-300, generator=g)) for _ in range(20)}
    assert picks == {1, 2}                                     # 并列第一的都可能被抽到
    out = apply_repetition_penalty(torch.tensor([2.0, -2.0]), [0, 1], 0.01)
    assert out.tolist() == pytest.approx([200.0, -0.02])


def test_generate_batch_refuses_a_bare_string(model_and_tok):
    model, tok = model_and_tok
    with pytest.raises(TypeError, match="prompts 应是提示的列表"):
        generate_batch(model, tok, "明月")
    assert len(generate_batch(model, tok, ["明月"], max_new_tokens=2, seed=0)) == 1


# ---------------------------------------------------------------- split_loss 的 batch_size
@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_split_loss_rejects_bad_batch_sizes(model_and_tok, bad):
    model, tok = model_and_tok
    with pytest.raises(ValueError, match="batch_size 必须是 ≥ 1 的整数"):
        split_loss(model, tok, "床前明月光，\n" * 5, batch_size=bad)


def test_split_loss_does_not_depend_on_batch_size(model_and_tok):
    model, tok = model_and_tok
    text = "床前明月光，疑是地上霜。\n" * 4
    losses = [split_loss(model, tok, text, batch_size=b, block_size=8) for b in (1, 2, 100)]
    assert losses == pytest.approx([losses[0]] * 3, abs=1e-5)
    assert 0 < losses[0] < 2 * math.log(tok.vocab_size)
