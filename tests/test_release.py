"""发布设置：挑选规则、确认、检查点里没有设置时的默认值。"""
from __future__ import annotations

import torch

import gptcourse as gc
from gptcourse import release


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
    assert calls[-1] == (0.9, release.GATE_SEEDS)                 # 换一组种子确认
    assert all(seeds == release.TUNE_SEEDS for _, seeds in calls[:-1])
    assert set(range(release.TUNE_SEEDS[0], sum(release.TUNE_SEEDS))).isdisjoint(
        range(release.GATE_SEEDS[0], sum(release.GATE_SEEDS)))


def test_seed_note_says_whether_a_gate_is_out_of_sample():
    assert release.seed_note(release.GATE_SEEDS) == \
        "种子 50000–50199（200 首；挑选发布设置用的是 0–199，不重叠：样本外）"
    assert "样本内" in release.seed_note((0, 200)) and "样本内" in release.seed_note((199, 5))
    assert "样本外" in release.seed_note((200, 10))
