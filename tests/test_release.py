"""发布设置：挑选规则、确认、检查点里没有设置时的默认值。"""
from __future__ import annotations

import json

import pytest
import torch

import gptcourse as gc
from gptcourse import checkpoint, cli, release
from gptcourse.config import preset
from gptcourse.errors import UserError
from gptcourse.model import GPT
from gptcourse.serve import make_server
from gptcourse.serve.params import parse_params
from gptcourse.tokenizer import CharTokenizer


def test_settings_fall_back_and_override():
    assert release.settings(None) == release.FALLBACK
    assert release.settings({"release": {"settings": None}}) == release.FALLBACK
    s = release.settings({"release": {"settings": {"temperature": 0.9, "rhyme": True}}})
    assert s["temperature"] == 0.9 and s["rhyme"] is True and s["top_p"] is None


def _tiny():
    corpus = gc.data.load_corpus("tang_5jue")
    tok = gc.tokenizer.CharTokenizer.from_text(corpus.train)
    torch.manual_seed(0)
    model = gc.model.GPT(gc.config.preset("course", vocab_size=tok.vocab_size, n_layer=1,
                                          n_head=2, n_embd=32))
    return model, tok, corpus


def test_choose_reports_every_candidate_and_refuses_when_nothing_passes():
    model, tok, corpus = _tiny()
    said = []
    out = release.choose(model, tok, corpus.train, val_loss=8.0,
                         grid={"temperature": (0.8, 1.0), "rhyme": (True,)},
                         choose_seeds=(0, 4), confirm_seeds=(100, 4), progress=said.append)
    assert out["settings"] is None and len(out["candidates"]) == 2 and len(said) == 2
    first = out["candidates"][0]
    assert first["setting"]["temperature"] == 0.8 and first["setting"]["rhyme"] is True
    assert not first["passed"] and "验证集损失 (nats/字)" in first["failed"]   # 8.0 > 5.0
    assert first["seeds"] == [0, 4] and len(first["examples"]) == 3


def test_choose_picks_the_most_fluent_passing_setting_and_confirms_it(monkeypatch):
    calls = []

    def fake(model, tok, train_text, val_loss, setting, seeds):
        calls.append((setting["temperature"], tuple(seeds)))
        nll = {0.8: 3.0, 0.9: 3.5, 1.0: 4.0}[setting["temperature"]]
        passed = setting["temperature"] != 0.8          # 0.8 最流畅但没通过
        return {"setting": dict(setting), "seeds": list(seeds), "passed": passed,
                "failed": [] if passed else ["distinct-1"], "nll": nll}

    monkeypatch.setattr(release, "evaluate_setting", fake)
    out = release.choose(None, None, "", 4.0, grid={"temperature": (0.8, 0.9, 1.0)},
                         progress=lambda s: None)
    assert out["settings"]["temperature"] == 0.9
    assert calls[-1] == (0.9, release.gate_block(0))             # 没看过的第一块上确认
    assert all(seeds == release.TUNE_SEEDS for _, seeds in calls[:-1])
    assert [look["purpose"][:2] for look in out["looks"]] == ["挑选", "确认"]
    assert release.gate_seeds({"release": out}) == release.gate_block(0)


def _fake_gate(monkeypatch, passed=True):
    calls = []

    def fake(model, tok, train_text, val_loss, setting, seeds):
        calls.append(tuple(seeds))
        return {"setting": dict(setting), "seeds": list(seeds), "passed": passed,
                "failed": [] if passed else ["distinct-1"], "nll": 3.0}

    monkeypatch.setattr(release, "evaluate_setting", fake)
    return calls


def test_a_gate_block_that_was_looked_at_is_never_used_to_confirm(monkeypatch):
    """issue 48：配方试验与第一次确认都看过的块（50000–50199）不能再拿来确认放行。"""
    calls = _fake_gate(monkeypatch)
    seen = release.record([], release.gate_block(0), "配方试验", "用来挑配方")
    out = release.choose(None, None, "", 4.0, grid={"temperature": (1.0,)},
                         progress=lambda s: None, history=seen)
    assert calls[-1] == release.gate_block(1)                    # 跳过看过的那块
    assert out["looks"][0] == seen[0] and len(out["looks"]) == 3
    with pytest.raises(UserError, match="已经看过（配方试验：用来挑配方）"):
        release.choose(None, None, "", 4.0, grid={"temperature": (1.0,)},
                       confirm_seeds=(50_100, 200), progress=lambda s: None, history=seen)


def test_one_block_is_confirmed_once_even_after_a_failure(monkeypatch):
    """确认没通过，这块也用掉了：换个设置再在同一块上确认 → UserError；下一次自动换下一块。"""
    _fake_gate(monkeypatch, passed=False)
    warm = {**release.FALLBACK, "temperature": 0.9}
    result, history = release.confirm(None, None, "", 4.0, warm, [])
    assert not result["passed"] and history[0]["outcome"].startswith("未通过")
    with pytest.raises(UserError, match="不能再用来确认放行"):
        release.confirm(None, None, "", 4.0, release.FALLBACK, history,
                        seeds=release.gate_block(0))
    assert release.fresh_gate(history) == release.gate_block(1)
    # 没有一次通过的确认：gate_seeds 退回第 0 块
    assert release.gate_seeds({"release": {"looks": history}}) == release.gate_block(0)


def test_fresh_gate_avoids_tuning_and_trial_seeds(monkeypatch):
    monkeypatch.setattr(release, "GATE_START", release.TRIAL_SEEDS[0] - 100)
    block = release.fresh_gate([])
    assert not release._overlap(block, release.TRIAL_SEEDS)
    monkeypatch.setattr(release, "GATE_START", release.STUDY_SEEDS[0])
    assert not release._overlap(release.fresh_gate([]), release.STUDY_SEEDS)
    assert not release._overlap(block, release.TUNE_SEEDS)


def test_looks_table_prints_every_look_in_order():
    h = release.record([], (50_000, 200), "第一次确认", "未通过 distinct-1")
    h = release.record(h, (50_200, 200), release.CONFIRM, "通过")
    table = release.looks_table({"release": {"looks": h}})
    assert table.splitlines() == ["1. 种子 50000–50199（200 首）：第一次确认 → 未通过 distinct-1",
                                  "2. 种子 50200–50399（200 首）：确认放行 → 通过"]
    assert release.gate_seeds({"release": {"looks": h}}) == (50_200, 200)
    assert "没有记下" in release.looks_table({})


def test_seed_note_says_whether_the_seeds_overlap_the_tuning_seeds():
    assert release.seed_note(release.gate_block(0)) == \
        "种子 50000–50199（200 首；挑选发布设置用的是 0–199，不重叠）"
    assert "样本内" in release.seed_note((0, 200)) and "样本内" in release.seed_note((199, 5))
    assert "样本外" not in release.seed_note((200, 10))


# ---------------------------------------------------------------- F1：发布设置从不拒绝普通请求
JIANGXUE = "千山鸟飞绝，万径人踪灭。"          # 柳宗元《江雪》的首联：仄韵


def test_G41_release_rhyme_falls_back_to_free_sampling_for_a_ze_rhyme_opening(capsys):
    model, tok, meta = gc.checkpoint.load()
    assert release.settings(meta)["rhyme"] is True and release.settings(meta)["tones"] is False
    assert cli.main(["generate", "--prompt", JIANGXUE, "--seed", "0"]) == 0
    out, err = capsys.readouterr()
    temp = release.settings(meta)["temperature"]                  # 发布设置的温度，只去掉押韵
    assert out == gc.generate.generate(model, tok, JIANGXUE, seed=0, temperature=temp) + "\n"
    assert err == ("注：检查点的发布设置默认押韵，但这个开头写不下去（要求押韵，但已有的双数句末字"
                   "不是同一平声韵部的字）：这次不加押韵，改为自由采样\n")


def test_G42_the_same_with_a_title():
    assert cli.main(["generate", "--title", "江雪", "--prompt", JIANGXUE,
                        "--seed", "0"]) == 0


def test_G41_library_return_says_what_was_relaxed():
    model, tok, meta = gc.checkpoint.load()
    d = release.for_request(meta, {}, None, tok, JIANGXUE)
    assert d["rhyme"] is False and len(d["relaxed"]) == 1 and "默认押韵" in d["relaxed"][0]
    plain = release.for_request(meta, {}, None, tok, "春")           # 写得下去：照常押韵
    assert plain["rhyme"] is True and plain["relaxed"] == []
    kept = release.for_request(meta, {"form": "五绝"}, None, tok, JIANGXUE)
    assert kept["form"] == "五绝" and kept["rhyme"] is False and "只用你自己要求的约束" in \
        kept["relaxed"][0]


def test_G41_an_explicit_rhyme_request_still_errors_and_says_how_to_turn_it_off(capsys):
    model, tok, meta = gc.checkpoint.load()
    for prompt in (JIANGXUE, "春" * 64):
        with pytest.raises(gc.errors.UserError) as e:
            release.for_request(meta, {"rhyme": True}, None, tok, prompt)
        assert "命令行加 --no-rhyme，网页请求写 \"rhyme\": false" in str(e.value)
    assert cli.main(["generate", "--prompt", JIANGXUE, "--seed", "0", "--rhyme"]) == 2
    assert "--no-rhyme" in capsys.readouterr().err
    with pytest.raises(gc.errors.UserError, match="第 1 句超过了 5 个字$"):   # 诗体是用户要的
        release.for_request(meta, {"form": "五绝"}, None, tok, "春" * 6)


def test_a_new_release_inherits_the_seed_blocks_the_shipped_model_looked_at(tmp_path):
    """issue 52：重新训练的模型 meta 里没有 looks；发布脚本先把已发布的那一版看过的块记进去，
    于是确认用的块对整个项目都是新的（上一版挑配方、确认用过的块不算“没看过”）。"""
    import importlib.util
    spec = importlib.util.spec_from_file_location("release_course",
                                                  gc.ROOT / "scripts" / "release_course.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.shipped_looks(str(tmp_path / "none.pt")) == []
    tok = gc.tokenizer.CharTokenizer.from_text("\n春风\n")
    model = gc.model.GPT(gc.config.preset("mini", vocab_size=tok.vocab_size))
    seen = release.record([], release.gate_block(0), "配方试验", "用来挑配方")
    seen = release.record(seen, release.gate_block(1), "确认放行", "通过")
    shipped, fresh = tmp_path / "shipped.pt", tmp_path / "fresh.pt"
    gc.checkpoint.save(shipped, model, tok, meta={"release": {"looks": seen}})
    gc.checkpoint.save(fresh, model, tok, meta={})
    script.remember_looks(str(fresh), script.shipped_looks(str(shipped)))
    history = release.looks(gc.checkpoint.load(fresh)[2])
    assert history == seen and release.fresh_gate(history) == release.gate_block(2)


# ---------------------------------------------------------------- 默认、假值与网页的范围
# 发布设置里的押韵是默认，不是要求；假值是错误；超出网页服务范围的设置在启动时拒绝。
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


@pytest.mark.parametrize("settings", [{}, {"tones": True}])
def test_a_plain_request_is_relaxed_not_refused_library(tok, settings):
    meta = {"release": {"settings": {"rhyme": True, **settings}}}
    d = release.for_request(meta, {}, None, tok, JIANGXUE)
    assert d["rhyme"] is False and d["relaxed"] and "这次不加押韵" in d["relaxed"][0]
    with pytest.raises(UserError, match="不要求押韵的话：命令行加 --no-rhyme，"
                                        '网页请求写 "rhyme": false'):
        release.for_request(meta, {"rhyme": True}, None, tok, JIANGXUE)


def test_cli_falls_back_to_free_sampling_and_says_so_in_one_line(capsys, tmp_path, model, tok,
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


def test_server_relaxes_plain_requests_and_names_it(tok):
    defaults = {**release.validate_settings({"rhyme": True}), "rhyme": True}
    for prompt in (JIANGXUE, "春" * 15):                   # 仄韵首联；一句超过 7 个字
        body = json.dumps({"prompt": prompt, "seed": 0}).encode()
        p = parse_params(body, tok, defaults)
        assert p["rhyme"] is False and len(p["relaxed"]) == 1, p
    with pytest.raises(UserError, match='"rhyme": false'):
        parse_params(json.dumps({"prompt": JIANGXUE, "rhyme": True}).encode(), tok, defaults)


def test_release_top_p_below_the_server_range_is_refused_at_start(model, tok):
    defaults = release.validate_settings({"top_p": 0.001})         # 库：(0, 1] 之内，合法
    with pytest.raises(UserError, match="top_p 必须在 \\[0.01, 1.0\\] 之内，收到 0.001"):
        make_server(model, tok, port=0, defaults=defaults)


@pytest.mark.parametrize("meta", [{"release": ""}, {"release": False},
                                  {"release": {"settings": 0}},
                                  {"release": {"settings": ""}}])
def test_falsy_release_values_are_errors(meta):
    with pytest.raises(UserError, match="应是字典"):
        release.settings(meta)


def test_missing_or_none_is_the_fallback():
    for meta in (None, {}, {"release": None}, {"release": {}}, {"release": {"settings": None}}):
        assert release.settings(meta) == release.FALLBACK


def test_falsy_release_settings_are_errors_not_defaults():
    with pytest.raises(UserError, match="发布设置应是字典，收到 list"):
        release.settings({"release": {"settings": []}})
    with pytest.raises(UserError, match=r"meta\['release'\] 应是字典，收到 int"):
        release.settings({"release": 0})
    for meta in ({}, {"release": None}, {"release": {"settings": None}}, None):   # 真的没有
        assert release.settings(meta) == release.FALLBACK


@pytest.mark.parametrize("case, key, value, message", [
    ("C17", "temperature", 50.0, "temperature 必须在 [0.01, 3.0] 之内（或正好是 0），收到 50.0"),
    ("C18", "repetition_penalty", 5.0, "repetition_penalty 必须在 [0.1, 3.0] 之内，收到 5.0"),
    ("C19", "top_k", 10**6, "top_k 必须在 [0, 61] 之内，收到 1000000"),
])
def test_release_outside_the_server_ranges_is_refused_at_start(tmp_path, small_model, small_tok,
                                                               case, key, value, message,
                                                               one_line_error):
    assert small_tok.vocab_size == 61
    defaults = release.validate_settings({key: value})              # 库的范围：合法
    with pytest.raises(UserError, match="检查点的发布设置超出网页服务的范围"):
        make_server(small_model, small_tok, port=0, defaults=defaults)
    path = checkpoint.save(tmp_path / "rel.pt", small_model, small_tok,
                           meta={"release": {"settings": {key: value}}})
    one_line_error(["serve", "--checkpoint", str(path), "--port", "0"],
                   f"检查点的发布设置超出网页服务的范围：{message}")
    server = make_server(small_model, small_tok, port=0, defaults=release.validate_settings({}))
    server.server_close()                                            # 范围之内：照常启动


def test_decoding_is_for_request_built_once():
    """release.decoding = for_request 的结果建成 SamplingParams 与 VerseSpec（检查一次）；它的扁平
    字典与 for_request 的相同（命令行 eval 打印的就是它），坏的设置照样是 UserError。"""
    meta = {"release": {"settings": {"temperature": 0.8, "top_p": 0.95, "rhyme": True}}}
    d = release.decoding(meta, {"temperature": None, "form": "五绝"})
    assert d.params.temperature == 0.8 and d.params.top_p == 0.95
    assert d.spec.form == "五绝" and d.spec.rhyme is True and d.relaxed == ()
    assert d.to_dict() == release.for_request(meta, {"form": "五绝"})
    assert release.decoding(None, {}).to_dict() == release.FALLBACK
    with pytest.raises(UserError, match="top_p 必须在"):
        release.decoding(meta, {"top_p": 1.5})

