"""python -m gptcourse train：几步就写出可加载的 best / last / 发布文件；坏参数给出清楚的错误。"""
from __future__ import annotations

import json

import pytest

from gptcourse import checkpoint, cli

TINY = ["--corpus", "tang_5jue", "--preset", "mini", "--batch-size", "4", "--block-size", "32",
        "--warmup", "1", "--no-bf16", "--no-progress"]


def test_train_writes_loadable_best_and_last(tmp_path, capsys):
    out = tmp_path / "ckpt" / "tiny.pt"
    assert cli.main(["train", *TINY, "--steps", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    summary = json.loads(printed.split("训练完成：", 1)[1])
    assert summary["steps"] == 2 and summary["tokens"] == 2 * 4 * 32
    assert summary["best_val_loss"] > 0 and summary["tokens_per_s"] > 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["tiny.best.pt", "tiny.last.pt",
                                                           "tiny.pt"]
    model, tok, meta = checkpoint.load(out)
    assert meta["step"] == 2 and meta["corpus"] == "tang_5jue" and meta["preset"] == "mini"
    assert model.config.block_size == 32 and model.config.vocab_size == tok.vocab_size
    assert meta["command"].startswith("python -m gptcourse train ")
    assert "--steps 2" in meta["command"] and meta["bf16"] is False
    assert [r["step"] for r in meta["history"]["steps"]] == [1, 2]
    assert meta["best_val_loss"] == meta["history"]["evals"][-1]["val"]
    last = checkpoint.load_raw(out.with_suffix(".last.pt"))
    assert last["optimizer"] is not None and last["step"] == 2        # last 可以接着训练
    assert checkpoint.load_raw(out)["optimizer"] is None               # 发布文件只含权重


@pytest.mark.parametrize("args, message", [
    ([], "--minutes 或 --steps"),
    (["--steps", "0"], "max_steps 必须 ≥ 1"),
    (["--steps", "2", "--batch-size", "0"], "batch_size 必须 ≥ 1"),
    (["--steps", "2", "--lr", "-1"], "lr > 0"),
    (["--steps", "2", "--bf16", "--no-bf16"], "不能同时给出"),
    (["--steps", "2", "--block-size", "-3"], "block_size 必须在 [1, 8192] 之内"),
    (["--steps", "2", "--block-size", "0"], "block_size 必须在 [1, 8192] 之内，收到 0"),
    (["--minutes", "0"], "max_minutes 必须 > 0"),
])
def test_bad_arguments_give_clear_errors(tmp_path, capsys, args, message):
    argv = ["train", "--corpus", "tang_5jue", "--preset", "mini", "--no-progress",
            "--out", str(tmp_path / "x.pt"), *args]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("错误：") and message in err
    assert not list(tmp_path.iterdir())                                 # 什么也没写


def test_unknown_corpus_is_an_argparse_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["train", "--corpus", "nope", "--steps", "1", "--out", str(tmp_path / "x.pt")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "nope" in err and "tang_jinti" in err
