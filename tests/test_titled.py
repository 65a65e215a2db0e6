"""以题作诗：格式、没见过的题目、只在正文上算损失、题目走过 generate / 命令行 / 网页服务。"""
from __future__ import annotations

import json

import pytest
import torch

import gptcourse as gc
from gptcourse import checkpoint, cli, titled, titles
from gptcourse.config import preset
from gptcourse.errors import UserError
from gptcourse.generate import generate, generate_batch
from gptcourse.model import GPT
from gptcourse.serve.params import parse_params
from gptcourse.tokenizer import CharTokenizer

POEM = "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。"


def test_format_and_strip():
    assert titled.titled("春晓", POEM) == titles.format_title("春晓", POEM) == "《春晓》" + POEM
    assert titles.strip("《春晓》" + POEM) == POEM and titles.strip(POEM) == POEM
    for bad in ("", "  ", "春《晓", "春晓，", "春\n晓", "长" * (titles.MAX_TITLE + 1), 3):
        with pytest.raises(UserError):
            titles.check_title(bad)


def test_decoding_does_not_load_the_corpus_loader():
    """L3：题目的格式在 titles（不导入 data），所以 generate 不会把语料加载器拖进来。"""
    import subprocess
    import sys
    code = "import sys, gptcourse.generate; print('gptcourse.data' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "False\n"


@pytest.mark.parametrize("raw, norm", [
    ("秋兴八首 其一", "秋兴"), ("秋兴八首 其三", "秋兴"), ("帝京篇十首 一", "帝京篇"),
    ("杂诗二首之一", "杂诗"), ("闻鴈", "闻雁"), ("登 鹳雀楼", "登鹳雀楼"),
    ("十五夜望月", "十五夜望月"),
])
def test_normalise(raw, norm):
    assert titled.normalise(raw) == norm


def test_held_out_titles_are_never_seen_in_training():
    meta = gc.data.load_meta()
    seen = {titled.normalise(t) for t, _ in titled.rows("train", meta)}
    for split in ("val", "test"):
        held = titled.rows(split, meta)
        assert len(held) > 500 and not any(titled.normalise(t) in seen for t, _ in held)
    all_val = [r for r in meta if r["split"] == "val"]
    assert len(titled.rows("val", meta)) < len(all_val)          # 确实去掉了见过的题目


@pytest.fixture(scope="module")
def tiny():
    text = "\n".join(titled.titled(t, b) for t, b in [("春晓", POEM), ("静夜思",
                     "床前明月光，疑是地上霜。举头望明月，低头思故乡。")])
    tok = CharTokenizer.from_text("\n" + text)
    torch.manual_seed(0)
    model = GPT(preset("course", vocab_size=tok.vocab_size, block_size=64, n_layer=1, n_head=2,
                       n_embd=32)).eval()
    return model, tok


def test_mask_puts_no_loss_on_title_tokens(tiny):
    model, tok = tiny
    ids, y = titled.encode([("春晓", POEM)], tok)
    text = tok.decode(ids.tolist())
    assert text == "\n《春晓》" + POEM + "\n"
    masked = [tok.decode([int(i)]) for i, t in zip(ids, y) if t == -1]
    assert masked == ["\n", "《", "春", "晓", "》"]                       # 开头的换行本来就不是目标
    assert torch.equal(y[y != -1], ids[y != -1])
    # 整段的损失 == 只对正文与诗末换行的那些位置求平均
    x, t = ids[None, :-1], y[None, 1:]
    _, loss = model(x, t)
    logits = model(x)[0][0]
    keep = t[0] != -1
    want = torch.nn.functional.cross_entropy(logits[keep], t[0][keep])
    torch.testing.assert_close(loss, want)


def test_get_batch_takes_targets_from_the_masked_sequence(tiny):
    model, tok = tiny
    ids, y = titled.encode([("春晓", POEM)] * 4, tok)
    x, t = gc.data.get_batch(ids, 3, 16, generator=torch.Generator().manual_seed(0), targets=y)
    starts = [int((ids.unfold(0, 16, 1) == row).all(1).nonzero()[0]) for row in x]
    for s, row in zip(starts, t):
        assert torch.equal(row, y[s + 1:s + 17])
    with pytest.raises(UserError, match="targets"):
        gc.data.get_batch(ids, 2, 8, targets=y[:-1])


def test_title_goes_in_front_and_is_not_returned(tiny):
    model, tok = tiny
    plain = generate(model, tok, "《春晓》", seed=3, max_new_tokens=10)
    assert generate(model, tok, "", title="春晓", seed=3, max_new_tokens=10) == plain[4:]
    batch = generate_batch(model, tok, ["", "春"], title="春晓", seed=3, max_new_tokens=10)
    assert batch[0] == plain[4:] and batch[1].startswith("春")


def test_title_combines_with_form_acrostic_and_rhyme():
    model, tok, _ = checkpoint.load()
    for kw in (dict(form="五绝"), dict(acrostic="春夏秋冬"), dict(form="七绝", rhyme=True)):
        poem = generate(model, tok, "", title="送友人", seed=0, temperature=0.9, **kw)
        a = gc.verse.analyze(poem)
        assert a.valid_form and (not kw.get("rhyme") or a.rhymes), poem
        assert not kw.get("acrostic") or "".join(l[0] for l in gc.verse.split_lines(poem)[0]) \
            == "春夏秋冬"


def test_cli_and_server_take_a_title(capsys):
    assert cli.main(["generate", "--title", "送友人", "--form", "五绝", "--seed", "1"]) == 0
    poem = capsys.readouterr().out.strip()
    model, tok, meta = checkpoint.load()
    want = generate(model, tok, "", title="送友人", form="五绝", seed=1,
                    **gc.release.settings(meta))
    assert poem == want
    assert cli.main(["generate", "--title", "送《友》人"]) == 2
    p = parse_params(json.dumps({"title": "送友人", "form": "五绝"}).encode(), tok)
    assert p["title"] == "送友人"
    assert parse_params(json.dumps({"title": ""}).encode(), tok)["title"] is None
    from gptcourse.serve.http import ApiError
    with pytest.raises(ApiError, match="太长"):
        parse_params(json.dumps({"title": "春" * 30}).encode(), tok)


def test_train_cli_fine_tunes_from_init_on_titled_text(tmp_path, capsys):
    out = tmp_path / "t.pt"
    argv = ["train", "--init", str(checkpoint.SHIPPED), "--titled", "--steps", "2",
            "--batch-size", "2", "--eval-interval", "2", "--eval-batches", "1", "--warmup", "1",
            "--lr", "1e-4", "--no-progress", "--no-bf16", "--out", str(out)]
    assert cli.main(argv) == 0
    model, tok, meta = checkpoint.load(out)
    assert meta["titled"] is True and meta["init"]["checkpoint"] == str(checkpoint.SHIPPED)
    assert model.config == checkpoint.load()[0].config
    assert cli.main(["train", "--corpus", "tang_5jue", "--titled", "--steps", "1",
                     "--out", str(tmp_path / "x.pt")]) == 2


def test_title_measurements_on_a_tiny_model(tiny):
    model, tok = tiny
    pairs = [("春晓", POEM), ("静夜思", "床前明月光，疑是地上霜。举头望明月，低头思故乡。")] * 3
    r = gc.evaluate.title_information(model, tok, pairs[:2] * 5, k=2)
    assert r["n"] == 10 and 0 <= r["retrieval"] <= 1 and r["chance"] == 0.5
    assert r["delta"] == pytest.approx(r["other"] - r["own"])
    lo, hi = r["delta_ci"]
    assert lo <= r["delta"] <= hi
    reuse = gc.evaluate.title_reuse(model, tok, ["春晓", "静夜思"], max_new_tokens=8)
    assert reuse["n"] == 2 and 0 <= reuse["own"] <= 1
    with pytest.raises(UserError, match="不同的题目"):
        gc.evaluate.title_reuse(model, tok, ["春晓", "春晓"])
    assert gc.evaluate.bootstrap_interval([1.0, 1.0]) == (1.0, 1.0)


def test_untitled_every_keeps_some_poems_without_a_title(tiny):
    model, tok = tiny
    pairs = [("春晓", POEM)] * 4
    ids, y = titled.encode(pairs, tok, untitled_every=2)
    assert tok.decode(ids.tolist()).count("《") == 2                    # 第 0、2 首不带题目
    assert int((y == -1).sum()) == 1 + 2 * 4                              # 开头 + 两个题目
