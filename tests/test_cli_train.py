"""python -m gptcourse train：几步就写出可加载的 best / last / 发布文件；坏参数给出清楚的错误。"""
from __future__ import annotations

import json

import pytest
import torch

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


def test_a_corpus_that_is_neither_a_name_nor_a_file_is_one_line(tmp_path, capsys):
    assert cli.main(["train", "--corpus", "nope", "--steps", "1",
                     "--out", str(tmp_path / "x.pt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope" in err and "tang_jinti" in err


# ---------------------------------------------------------------- 你自己的文本（issue 53）
def _own_text(path, n=120, lines=3):
    """n 篇分行写、空行隔开的“诗”（随机的字，不合格律）：自动判断应按段分篇。"""
    g = torch.Generator().manual_seed(0)
    chars = "春夏秋冬山水风月花鸟云雨江河日夜人心歌酒"
    docs = ["\n".join("".join(chars[i] for i in torch.randint(len(chars), (12,), generator=g))
                       for _ in range(lines)) for _ in range(n)]
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return path


def test_train_and_eval_on_your_own_text_file(tmp_path, capsys):
    text = _own_text(tmp_path / "我的文本.txt")
    out = tmp_path / "mine.pt"
    assert cli.main(["train", *TINY[2:], "--corpus", str(text), "--steps", "4",
                     "--eval-interval", "2", "--probe-poems", "3", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "120 篇，空行分段" in said and "不是近体诗：不做格律的探针" in said
    model, tok, meta = checkpoint.load(out)
    assert meta["corpus"] == "我的文本.txt" and meta["verse"] is False
    assert meta["windows"] == "random" and meta["probe"] == []
    assert tok.vocab_size == 20 + 4                     # 20 个字，加换行、<unk> 与书名号《》
    assert cli.main(["eval", "--checkpoint", str(out), "--corpus", str(text)]) == 0
    said = capsys.readouterr().out
    assert "不做格律的验收" in said and "val loss" in said


def test_train_on_the_bundled_prose_uses_random_windows(tmp_path, capsys):
    out = tmp_path / "nahan.pt"
    assert cli.main(["train", *TINY[2:], "--corpus", "luxun_nahan", "--steps", "2",
                     "--eval-interval", "2", "--eval-batches", "1", "--out", str(out)]) == 0
    meta = checkpoint.load(out)[2]
    assert meta["corpus"] == "luxun_nahan" and meta["verse"] is False
    assert meta["windows"] == "random"
    assert cli.main(["train", *TINY[2:], "--corpus", "luxun_nahan", "--documents", "lines",
                     "--steps", "1", "--out", str(out)]) == 2
    assert "--documents 只用于你自己的文本文件" in capsys.readouterr().err


@pytest.mark.parametrize("content, message", [
    (b"", "是空的"),
    (b" \n\n\t\n", "是空的"),
    ("春风".encode("gbk") + b"\n", "不是 UTF-8：第 0 个字节（0xb4）"),
    ("春风\n".encode() + b"\x80abc", "第 7 个字节（0x80）"),
    (b"\x89PNG\r\n\x1a\n\x00\x00", "二进制文件（第 8 个字节是 NUL）"),
    ("一\n二\n三\n".encode(), "有 3 篇（一行一篇），划分后训练集"),
])
def test_bad_text_files_are_one_line_errors(tmp_path, capsys, content, message):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(content)
    assert cli.main(["train", *TINY[2:], "--corpus", str(bad), "--steps", "1",
                     "--out", str(tmp_path / "x.pt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "x.pt").exists()


def test_a_text_too_small_for_one_window_is_one_line(tmp_path, capsys):
    tiny = tmp_path / "tiny.txt"
    chars = "春夏秋冬山水风月花鸟云雨江河日夜人心歌酒"
    tiny.write_text("".join(f"{a}{b}\n" for a in chars for b in chars), encoding="utf-8")
    assert cli.main(["train", *TINY[2:], "--corpus", str(tiny), "--block-size", "1024",
                     "--steps", "1", "--out", str(tmp_path / "x.pt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "不够切出" in err, err


def _failing_save(monkeypatch, when):
    """checkpoint.save 在 ``when(path)`` 为真时像磁盘满了一样失败。"""
    real = checkpoint.save

    def save(path, *a, **k):
        if when(path):
            raise checkpoint.CheckpointError(f"写不出检查点 {path}：磁盘已满")
        return real(path, *a, **k)
    monkeypatch.setattr(checkpoint, "save", save)


def test_a_failed_write_mid_run_still_publishes_this_runs_best(tmp_path, capsys, monkeypatch):
    """R6（F04、F12）：第二次评估时 last 写不出——一句话，退出码 1，发布文件是第 1 步的 best。"""
    out = tmp_path / "m.pt"
    calls = []
    _failing_save(monkeypatch, lambda p: p.name == "m.last.pt" and calls.append(p) is None
                  and len(calls) == 2)
    assert cli.main(["train", *TINY, "--steps", "3", "--eval-interval", "1",
                     "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "磁盘已满" in err and "Traceback" not in err and err.count("\n") == 1, err
    assert checkpoint.load_raw(out)["meta"]["history"]["evals"][0]["step"] == 1
    assert not (tmp_path / "m.pt.lock").exists()


def test_a_full_snapshot_folder_stops_the_snapshots_not_the_run(tmp_path, capsys, monkeypatch):
    """R6（F02）：只有 --snapshots 的目录满了：警告一次、不再写快照，训练照常写出 --out。"""
    snaps, out = tmp_path / "snaps", tmp_path / "m.pt"
    _failing_save(monkeypatch, lambda p: p.parent == snaps)
    assert cli.main(["train", *TINY, "--steps", "2", "--eval-interval", "1",
                     "--snapshots", str(snaps), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.count("不再写快照") == 1 and "Traceback" not in err, err
    assert checkpoint.load_raw(out)["step"] == 2


def test_the_published_file_is_this_runs_best_not_whatever_is_on_disk(tmp_path):
    """R5（F11）：另一次训练在这期间改写了 <out>.best.pt——发布的仍是这次训练自己的 best。"""
    from gptcourse.checkpoint import Checkpoints
    from gptcourse.config import preset
    from gptcourse.model import GPT
    from gptcourse.tokenizer import CharTokenizer
    tok = CharTokenizer.from_text("春风明月\n")
    torch.manual_seed(0)
    mine = GPT(preset("mini", vocab_size=tok.vocab_size, block_size=8))
    other = GPT(preset("mini", vocab_size=tok.vocab_size, block_size=16))
    ckpts = Checkpoints(tmp_path / "m.pt", mine, tok)
    ckpts.on_eval(1, 1.9, True)
    checkpoint.save(tmp_path / "m.best.pt", other, tok, step=9)          # 别人写的
    ckpts.finish(tokens_per_step=8)
    model, _, _ = checkpoint.load(tmp_path / "m.pt")
    assert model.config.block_size == 8
    torch.testing.assert_close(model.state_dict(), mine.state_dict())


@pytest.mark.parametrize("make, value, message", [
    (lambda d: (d / "f").write_text("x"), "f", "不是目录"),
    (lambda d: (d / "f").write_text("x"), "f/sub", "建不了"),
    (lambda d: None, " ", "是空的"),
    (lambda d: (d / "s").mkdir() or (d / "s" / "step_000002.pt").write_bytes(b"x"), "s",
     "已有 1 个快照"),
])
def test_snapshots_must_be_an_empty_folder(tmp_path, capsys, monkeypatch, make, value, message):
    """R8（T01–T05、T08）：--snapshots 是文件、建不了、是空字符串、已有别的训练的快照——
    训练之前一行错误，退出码 2，什么都没写。"""
    make(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert cli.main(["train", *TINY, "--steps", "2", "--snapshots", value,
                     "--out", str(tmp_path / "m.pt")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("out, message", [("newdir/", "以 / 结尾"), ("a" * 245 + ".pt", "太长")])
def test_out_that_names_a_folder_or_is_too_long_is_refused_before_training(
        tmp_path, capsys, out, message):
    """R8（T25、T26）：--out 以 / 结尾是目录；248 字节的名字训练完才失败——都在训练之前拒绝。"""
    assert cli.main(["train", *TINY, "--steps", "2", "--out", f"{tmp_path}/{out}"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []
