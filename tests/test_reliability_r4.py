"""可靠性第 4 轮（issue 31，../shared/reviews/reliability.md 的 F1–F10）：第 3 轮的修正
（tests/test_reliability_r3.py）之外，每个原因再加几个没人试过的变体。每个测试都很快（小模型，
不训练，或把训练换成立刻结束的假训练）。

- F1 发布设置里的押韵/平仄是默认，不是要求：没要求的请求从不被拒绝，说明放宽了什么；
- F2 sample_poems 的首数、--probe-poems 有上限，说出上限；NumPy 的整数照常接受；
- F3 train 的起点经过硬链接、``..`` 也认得出；中断/发散时不拿以前的 .best.pt 充数；
- F4 覆盖范围：CHECKSUM_COVERS 就是读取时用到的全部字段，重复、字符串、换顺序都不能骗过它；
  v2 编码带类型与长度：任何结构上的改动（键挪一层、列表换元组）都改变校验和；
- F5–F10 网页范围、seed、双重题目、假值的发布设置、NumPy 的数、batch_size、Ctrl+C。
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

import gptcourse.cli.train as cli_train
from gptcourse import checkpoint, cli, release
from gptcourse.checkpoint import CheckpointError
from gptcourse.config import preset
from gptcourse.data import Corpus
from gptcourse.errors import UserError
from gptcourse.generate import MAX_POEMS, generate, generate_batch, sample_poems
from gptcourse.model import GPT
from gptcourse.serve import make_server
from gptcourse.serve.params import parse_params
from gptcourse.tokenizer import CharTokenizer

TRAIN = ["train", "--corpus", "tang_5jue", "--preset", "mini", "--batch-size", "2",
         "--no-progress", "--no-bf16", "--eval-batches", "2"]
JIANGXUE = "千山鸟飞绝，万径人踪灭。"                  # 《江雪》的首联：仄韵，押不了平声韵


@pytest.fixture
def tok(tiny_corpus_text) -> CharTokenizer:
    return CharTokenizer.from_text(tiny_corpus_text + "《》" + JIANGXUE + "孤舟蓑笠翁独钓寒江雪")


@pytest.fixture
def model(tok) -> GPT:
    torch.manual_seed(0)
    return GPT(preset("mini", vocab_size=tok.vocab_size, block_size=16, n_layer=1, n_head=2,
                      n_embd=16)).eval()


def rhyming_release(tmp_path, model, tok, **settings):
    return checkpoint.save(tmp_path / "rel.pt", model, tok,
                           meta={"release": {"settings": {"rhyme": True, **settings}}})


# ================================================================ F1：默认不是要求
@pytest.mark.parametrize("settings", [{}, {"tones": True}])
def test_F1_a_plain_request_is_relaxed_not_refused_library(tok, settings):
    meta = {"release": {"settings": {"rhyme": True, **settings}}}
    d = release.for_request(meta, {}, None, tok, JIANGXUE)
    assert d["rhyme"] is False and d["relaxed"] and "这次不加押韵" in d["relaxed"][0]
    with pytest.raises(UserError, match="不要求押韵的话：命令行加 --no-rhyme，"
                                        '网页请求写 "rhyme": false'):
        release.for_request(meta, {"rhyme": True}, None, tok, JIANGXUE)


def test_F1_G41_cli_falls_back_to_free_sampling_and_says_so_in_one_line(capsys, tmp_path,
                                                                         model, tok,
                                                                         one_line_error):
    path = rhyming_release(tmp_path, model, tok)
    assert cli.main(["generate", "--checkpoint", str(path), "--prompt", JIANGXUE,
                     "--seed", "0"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(JIANGXUE) and out.count("\n") == 1
    assert err.count("\n") == 1 and err.startswith("注：检查点的发布设置默认押韵") \
        and "改为自由采样" in err, err
    one_line_error(["generate", "--checkpoint", str(path), "--prompt", JIANGXUE,
                    "--rhyme"], "不要求押韵的话：命令行加 --no-rhyme")


def test_F1_N41_N28_server_relaxes_plain_requests_and_names_it(tok):
    defaults = {**release.validate_settings({"rhyme": True}), "rhyme": True}
    for prompt in (JIANGXUE, "春" * 15):                   # 仄韵首联；一句超过 7 个字
        body = json.dumps({"prompt": prompt, "seed": 0}).encode()
        p = parse_params(body, tok, defaults)
        assert p["rhyme"] is False and len(p["relaxed"]) == 1, p
    with pytest.raises(UserError, match='"rhyme": false'):
        parse_params(json.dumps({"prompt": JIANGXUE, "rhyme": True}).encode(), tok, defaults)


# ================================================================ F2：尺寸有上限
@pytest.mark.parametrize("n", [MAX_POEMS + 1, 10**12])
def test_F2_sample_poems_count_is_bounded_before_any_sampling(model, tok, n, monkeypatch):
    import gptcourse.generate as G
    monkeypatch.setattr(G, "generate_batch", lambda *a, **k: pytest.fail("sampled"))
    with pytest.raises(UserError, match=f"n 最多 {MAX_POEMS}"):
        sample_poems(model, tok, n)


@pytest.mark.parametrize("value", ["1000000000", "-1"])
def test_F2_train_probe_poems_is_bounded(tmp_path, value, one_line_error):
    one_line_error([*TRAIN, "--steps", "1", "--probe-poems", value,
                    "--out", str(tmp_path / "m.pt")],
                   f"--probe-poems 必须在 [0, {cli_train.MAX_PROBE_POEMS}] 之内，收到 {value}")
    assert not list(tmp_path.iterdir())


# ================================================================ F3：train 的数据安全
def test_F3_I12_init_reached_through_a_hard_link_or_dotdot_is_refused(tmp_path, model,
                                                                      tok, one_line_error):
    init = checkpoint.save(tmp_path / "run.best.pt", model, tok)
    os.link(init, tmp_path / "copy.pt")
    (tmp_path / "sub").mkdir()
    for given in (tmp_path / "copy.pt", tmp_path / "sub" / ".." / "run.best.pt"):
        one_line_error([*TRAIN, "--steps", "2", "--init", str(given),
                        "--out", str(tmp_path / "run.pt")],
                       "正是这次训练要写的 run.best.pt：训练会覆盖它的起点")


def test_F3_I14_ctrl_c_before_the_first_evaluation_never_ships_a_stale_best(
        capsys, tmp_path, model, tok, monkeypatch, tiny_corpus_text, file_sha):
    out, best = tmp_path / "m.pt", tmp_path / "m.best.pt"
    checkpoint.save(out, model, tok, step=1, meta={"run": "A"})
    checkpoint.save(best, model, tok, step=1, meta={"run": "A"})
    before = file_sha(out), file_sha(best)

    def ctrl_c(*a, **kw):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli_train, "train", ctrl_c)
    small = Corpus("tang_5jue", "三首", tiny_corpus_text, tiny_corpus_text, tiny_corpus_text)
    monkeypatch.setattr(cli_train, "open_corpus", lambda *a: small)   # 不读整份语料
    assert cli.main([*TRAIN, "--steps", "4", "--out", str(out)]) == 130
    assert capsys.readouterr().err == (f"已中断（Ctrl+C）。还没有评估过一次，所以没有写出检查点 "
                                       f"{out}（m.best.pt 是以前的训练留下的，没有动它）\n")
    assert (file_sha(out), file_sha(best)) == before


# ================================================================ F4：覆盖范围不由文件说了算
def test_F4_the_checksum_covers_every_field_that_is_read():
    assert set(checkpoint.CHECKSUM_COVERS) == set(checkpoint.REQUIRED_KEYS)
    assert set(checkpoint.LEGACY_COVERS) < set(checkpoint.CHECKSUM_COVERS)


@pytest.mark.parametrize("covers", [
    ["model"] * 7,                                              # 个数对，字段不对
    ",".join(checkpoint.CHECKSUM_COVERS),                      # 字符串，不是列表
    [*checkpoint.CHECKSUM_COVERS, "model"],                    # 多出一个重复的
    None,
])
def test_F4_C8_C9_forged_coverage_is_refused_even_with_consent(tmp_path, model, tok, covers,
                                                              monkeypatch):
    path = checkpoint.save(tmp_path / "m.pt", model, tok)
    obj = torch.load(path, weights_only=True)
    obj["config"]["n_head"] = 1
    obj["sha256_covers"] = covers
    obj["sha256"] = checkpoint.payload_sha256(obj, ["model"])
    torch.save(obj, path)
    monkeypatch.setenv(checkpoint.TRUST_ENV, "1")
    with pytest.raises(CheckpointError, match="不是全部字段"):
        checkpoint.load(path)


def test_F4_full_coverage_in_another_order_still_loads(tmp_path, model, tok):
    path = checkpoint.save(tmp_path / "m.pt", model, tok, step=5)
    obj = torch.load(path, weights_only=True)
    obj["sha256_covers"] = list(reversed(obj["sha256_covers"]))
    torch.save(obj, path)
    assert checkpoint.load(path)[2]["step"] == 5


def test_F4_C7_legacy_checksum_with_an_edited_n_head_does_not_init_a_training(tmp_path,
                                                                              model, tok,
                                                                              monkeypatch,
                                                                              one_line_error):
    monkeypatch.delenv(checkpoint.TRUST_ENV, raising=False)
    path = checkpoint.save(tmp_path / "m.pt", model, tok)
    obj = torch.load(path, weights_only=True)
    obj["config"]["n_head"] = 1
    del obj["sha256_covers"]
    obj["sha256"] = checkpoint.v1_sha256(obj, checkpoint.LEGACY_COVERS)
    torch.save(obj, path)
    one_line_error([*TRAIN, "--steps", "1", "--init", str(path),
                    "--out", str(tmp_path / "ft.pt")], "只覆盖权重与优化器的旧格式校验和")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt"]


# ================================================================ F5：发布设置与网页范围
def test_F5_release_top_p_below_the_server_range_is_refused_at_start(model, tok):
    defaults = release.validate_settings({"top_p": 0.001})         # 库：(0, 1] 之内，合法
    with pytest.raises(UserError, match="top_p 必须在 \\[0.01, 1.0\\] 之内，收到 0.001"):
        make_server(model, tok, port=0, defaults=defaults)


# ================================================================ F6：seed
@pytest.mark.parametrize("seed", ["7", 1.7, -1, 2**64, True])
def test_F6_sample_poems_seed_is_validated_before_sampling(model, tok, seed, monkeypatch):
    import gptcourse.generate as G
    monkeypatch.setattr(G, "generate_batch", lambda *a, **k: pytest.fail("sampled"))
    with pytest.raises(UserError, match="seed 必须是 \\[0, 2\\*\\*63 - 3\\] 之内的整数或 None"):
        sample_poems(model, tok, 3, seed=seed)


def test_F6_F9_numpy_integers_are_integers_for_seed_and_max_new_tokens(model, tok):
    want = generate(model, tok, "春", max_new_tokens=4, seed=7)
    assert generate(model, tok, "春", max_new_tokens=np.int64(4), seed=np.int64(7)) == want
    assert generate_batch(model, tok, ["春"], max_new_tokens=np.int32(4), seed=np.int64(7)) \
        == [want]
    with pytest.raises(UserError, match="max_new_tokens 必须是 ≥ 0 的整数，收到 4.0"):
        generate(model, tok, "春", max_new_tokens=4.0)


def test_F6_sample_poems_seed_none_samples(model, tok):
    assert len(sample_poems(model, tok, 2, seed=None, max_new_tokens=3)) == 2


# ================================================================ F7：双重题目
@pytest.mark.parametrize("prompt", ["\u3000《别》", "\n《别》", " 《别题》春"])
def test_F7_title_plus_a_padded_prompt_title_is_refused(model, tok, prompt):
    with pytest.raises(UserError, match="提示里的《…》会成为第二个题目"):
        generate(model, tok, prompt, title="春", max_new_tokens=2)


# ================================================================ F8：假值的发布设置
@pytest.mark.parametrize("meta", [{"release": ""}, {"release": False},
                                  {"release": {"settings": 0}},
                                  {"release": {"settings": ""}}])
def test_F8_falsy_release_values_are_errors(meta):
    with pytest.raises(UserError, match="应是字典"):
        release.settings(meta)


def test_F8_missing_or_none_is_the_fallback():
    for meta in (None, {}, {"release": None}, {"release": {}}, {"release": {"settings": None}}):
        assert release.settings(meta) == release.FALLBACK


# ================================================================ F9：NumPy 的数
def test_F9_numpy_sampling_numbers_pass(model, tok):
    want = generate(model, tok, "春", max_new_tokens=3, seed=0, top_k=5, temperature=0.8)
    assert generate(model, tok, "春", max_new_tokens=3, seed=0, top_k=np.int64(5),
                    temperature=np.float32(0.8)) == want


# ================================================================ F10：batch_size 与 Ctrl+C
@pytest.mark.parametrize("bs", [True, 2.0, "2", None])
def test_F10_sample_poems_batch_size_must_be_a_positive_integer(model, tok, bs):
    with pytest.raises(UserError, match="batch_size 必须是 ≥ 1 的整数"):
        sample_poems(model, tok, 3, batch_size=bs)


def test_K2_a_multi_line_compile_failure_is_reported_in_one_line(tiny_corpus_text, monkeypatch,
                                                                 capsys):
    from gptcourse.train import TrainConfig, train

    class Broken(torch.nn.Module):
        def forward(self, *a):
            raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found in cxx:\n"
                               "  g++\n\nSet TORCHDYNAMO_VERBOSE=1 for the internal stack trace")
    monkeypatch.setattr(torch, "compile", lambda m: Broken())
    t = CharTokenizer.from_text(tiny_corpus_text)
    ids = torch.tensor(t.encode(tiny_corpus_text * 4), dtype=torch.long)
    torch.manual_seed(0)
    m = GPT(preset("mini", vocab_size=t.vocab_size, block_size=16, n_layer=1, n_head=2, n_embd=16))
    h = train(m, ids, ids, TrainConfig(batch_size=4, max_steps=2, eval_interval=2, eval_batches=1,
                                       bf16=False, progress=False, compile=True))
    assert "\n" not in h.info["compiled"] and "found in cxx: g++ Set TORCHDYNAMO" in \
        h.info["compiled"]
    err = [line for line in capsys.readouterr().err.splitlines() if "第一步失败" in line]
    assert len(err) == 1 and err[0].endswith("改用普通模式"), err


def test_F4_moving_a_key_between_nesting_levels_breaks_the_checksum(tmp_path, model, tok):
    path = checkpoint.save(tmp_path / "m.pt", model, tok, meta={
        "release": {"settings": {"rhyme": True, "top_p": 0.95}, "val_loss": 3.0}})
    obj = torch.load(path, weights_only=True)
    rel = obj["meta"]["release"]
    rel["top_p"] = rel["settings"].pop("top_p")          # 发布设置少了 top_p，校验和不变
    torch.save(obj, path)
    with pytest.raises(CheckpointError, match="校验和不符"):
        checkpoint.load(path)


@pytest.mark.parametrize("case, edit", [
    ("split-string", lambda m: m.update(a="ab", b="c")),
    ("list-to-tuple", lambda m: m.update(lst=tuple(m["lst"]))),
    ("int-to-str", lambda m: m.update(n="1")),
    ("bool-to-int", lambda m: m.update(flag=1)),
    ("float-to-int", lambda m: m.update(x=1)),
    ("flatten-list", lambda m: m.update(lst=[1, 2, 3])),
    ("key-into-sibling", lambda m: m["inner"].update(b=m.pop("b"))),
])
def test_F4_every_structural_edit_breaks_the_checksum(tmp_path, model, tok, case, edit):
    meta = {"a": "a", "b": "bc", "lst": [[1, 2], 3], "n": 1, "flag": True, "x": 1.0,
            "inner": {"c": None}}
    path = checkpoint.save(tmp_path / "m.pt", model, tok, meta=meta)
    obj = torch.load(path, weights_only=True)
    edit(obj["meta"])
    assert repr(obj["meta"]) != repr(meta)
    torch.save(obj, path)
    with pytest.raises(CheckpointError, match="校验和不符"):
        checkpoint.load(path)


def _v1_full(obj):
    obj["sha256"] = checkpoint.v1_sha256(obj)     # 更早版本写的全字段校验和


def test_F4_v1_full_checksum_is_unverified_refused_by_default_then_upgraded(tmp_path, model, tok,
                                                                            monkeypatch):
    monkeypatch.delenv(checkpoint.TRUST_ENV, raising=False)
    path = checkpoint.save(tmp_path / "m.pt", model, tok, step=3,
                           meta={"release": {"settings": {"top_p": 0.95}}})
    obj = torch.load(path, weights_only=True)
    _v1_full(obj)
    torch.save(obj, path)
    with pytest.raises(CheckpointError, match="m.pt 是更早版本的 v1 校验和.*默认不读取.*upgrade"):
        checkpoint.load(path)
    with pytest.warns(checkpoint.UnverifiedCheckpointWarning, match="v1 校验和"):
        checkpoint.load(path, trust_unverified=True)
    rel = obj["meta"]["release"]                                   # v1 看不出的挪动
    rel["top_p"] = rel["settings"].pop("top_p")
    assert checkpoint.v1_sha256(obj) == obj["sha256"]
    rel["settings"]["top_p"] = rel.pop("top_p")
    new = checkpoint.upgrade(path, tmp_path / "new.pt")
    raw = checkpoint.load_raw(new, trust_unverified=False)
    assert raw["sha256"] == checkpoint.payload_sha256(raw) and raw["sha256"].startswith("v2:")
    assert raw["meta"] == obj["meta"] and raw["step"] == 3
    for k, v in obj["model"].items():
        assert torch.equal(v, raw["model"][k]), k


def test_F4_an_edited_v1_full_checksum_is_corrupt_even_with_consent(tmp_path, model, tok):
    path = checkpoint.save(tmp_path / "m.pt", model, tok)
    obj = torch.load(path, weights_only=True)
    _v1_full(obj)
    obj["config"]["n_head"] = 1
    torch.save(obj, path)
    with pytest.raises(CheckpointError, match="校验和不符"):
        checkpoint.load(path, trust_unverified=True)


@pytest.mark.parametrize("digest", ["v3:" + "0" * 64, "sha512:abc", ":", "V2:" + "0" * 64])
def test_F4_an_unknown_checksum_scheme_is_refused_even_with_consent(tmp_path, model, tok, digest):
    path = checkpoint.save(tmp_path / "m.pt", model, tok)
    obj = torch.load(path, weights_only=True)
    obj["sha256"] = digest
    torch.save(obj, path)
    with pytest.raises(CheckpointError, match="校验和编码 .* 不认识"):
        checkpoint.load(path, trust_unverified=True)
