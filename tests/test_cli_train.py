"""python -m gptcourse train：几步就写出可加载的 best / last / 发布文件；坏参数给出清楚的错误。"""
from __future__ import annotations

import json
import math
import os

import pytest
import torch

import gptcourse.cli.train as cli_train
from gptcourse import checkpoint, cli, files, runtime
from gptcourse.config import preset
from gptcourse.data import Corpus
from gptcourse.errors import UserError
from gptcourse.model import GPT
from gptcourse.tokenizer import CharTokenizer

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


def test_the_probe_records_the_leading_indicator_beside_free_rhyme(tmp_path):
    """issue 48 §12.1：每次评估，探针在自由押韵率旁边记下领先指标（真诗第 2–4 个韵脚上模型放在
    本诗韵部里的概率）与它的机会水平，两者都是概率。"""
    out = tmp_path / "probe.pt"
    assert cli.main(["train", *TINY[2:], "--corpus", "tang_5jue", "--steps", "2",
                     "--eval-interval", "1", "--eval-batches", "1", "--probe-poems", "2",
                     "--out", str(out)]) == 0
    probes = checkpoint.load(out)[2]["probe"]
    assert [p["step"] for p in probes] == [1, 2]
    for p in probes:
        assert 0 < p["group_mass"] < 1 and 0 < p["group_chance"] < 1
        assert 0 <= p["rhyme_rate"] <= 1


# ---------------------------------------------------------------- 坏输入与 Ctrl+C
# 尺寸、种子、--init 在训练之前检查；中断或发散时发布文件不拿旧的 best 充数。
TRAIN = ["train", "--corpus", "tang_5jue", "--preset", "mini", "--batch-size", "2",
         "--no-progress", "--no-bf16", "--eval-batches", "2"]
TRAIN_ONE = [*TRAIN, "--steps", "1"]


@pytest.mark.parametrize("case, flag, value, message", [
    ("P9", "--batch-size", str(10**9), "batch_size 最多 65536，收到 1000000000"),
    ("P10", "--grad-accum", str(10**9), "grad_accum 最多 4096，收到 1000000000"),
])
def test_train_sizes_are_bounded(tmp_path, case, flag, value, message, one_line_error):
    one_line_error([*TRAIN, "--steps", "1", "--out", str(tmp_path / "x.pt"), flag, value],
                   message)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("case, seed", [("P1", "-1"), ("P2", str(2**40))])
def test_train_seed_is_validated(tmp_path, case, seed, one_line_error):
    one_line_error([*TRAIN, "--steps", "1", "--seed", seed,
                    "--out", str(tmp_path / "x.pt")],
                   f"seed 必须是 [0, 2**32) 之内的整数（NumPy 的种子范围），收到 {seed}")
    with pytest.raises(UserError, match="seed 必须是"):
        runtime.set_seed(int(seed))


def interrupt_after(monkeypatch, evals: int):
    """让 cli.train 里的训练在第 evals 次评估之后收到 Ctrl+C（KeyboardInterrupt）；
    evals=0：训练开始之前。"""
    real = cli_train.train

    def fake(*a, **kw):
        if evals == 0:
            raise KeyboardInterrupt
        seen = []

        def ctrl_c(step, model_, history):
            seen.append(step)
            if len(seen) == evals:
                raise KeyboardInterrupt
        kw["callbacks"] = [*kw.get("callbacks", []), ctrl_c]
        return real(*a, **kw)
    monkeypatch.setattr(cli_train, "train", fake)


def test_ctrl_c_during_train_writes_the_best_so_far_and_says_one_line(capsys, tmp_path,
                                                                      monkeypatch):
    interrupt_after(monkeypatch, 1)
    out = tmp_path / "ft.pt"
    assert cli.main([*TRAIN, "--steps", "40", "--eval-interval", "2", "--out", str(out)]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"已中断（Ctrl+C）。已把中断之前验证损失最好的检查点写到 {out}（第 2 步）："), err
    _, _, meta = checkpoint.load(out)
    assert meta["interrupted"] is True and meta["history"]["evals"][-1]["step"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ft.best.pt", "ft.last.pt", "ft.pt"]


def test_ctrl_c_before_the_first_evaluation_writes_nothing(capsys, tmp_path, monkeypatch):
    interrupt_after(monkeypatch, 0)
    out = tmp_path / "ft.pt"
    assert cli.main([*TRAIN, "--steps", "4", "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert err == f"已中断（Ctrl+C）。还没有评估过一次，所以没有写出检查点 {out}\n"
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("case, init_name", [("I12", "run.best.pt"), ("I13", "run.pt"),
                                             ("I12b", "run.last.pt")])
def test_init_that_train_would_overwrite_is_refused(tmp_path, small_model, small_tok, case,
                                                    init_name, one_line_error, file_sha):
    init = checkpoint.save(tmp_path / init_name, small_model, small_tok)
    before = file_sha(init)
    one_line_error([*TRAIN, "--steps", "2", "--init", str(init),
                    "--out", str(tmp_path / "run.pt")],
                   f"--init {init} 正是这次训练要写的 {init_name}：训练会覆盖它的起点。"
                   "请换一个 --out")
    assert file_sha(init) == before and sorted(p.name for p in tmp_path.iterdir()) == [init_name]


def test_init_reached_through_a_link_is_refused(tmp_path, small_model, small_tok, one_line_error):
    init = checkpoint.save(tmp_path / "run.best.pt", small_model, small_tok)
    (tmp_path / "other.pt").symlink_to(init)
    one_line_error([*TRAIN, "--steps", "2", "--init", str(tmp_path / "other.pt"),
                    "--out", str(tmp_path / "run.pt")], "正是这次训练要写的 run.best.pt")


def test_divergence_before_the_first_evaluation_never_ships_a_stale_best(capsys, tmp_path,
                                                                         small_model, small_tok,
                                                                         file_sha):
    """以前的训练留下了 m.pt 与 m.best.pt；这一次在第一次评估之前就发散：两者都不动，说真话。"""
    out, best = tmp_path / "m.pt", tmp_path / "m.best.pt"
    checkpoint.save(out, small_model, small_tok, step=1, meta={"run": "A"})
    checkpoint.save(best, small_model, small_tok, step=1, meta={"run": "A"})
    before = file_sha(out), file_sha(best)
    rc = cli.main([*TRAIN, "--steps", "3", "--eval-interval", "3", "--lr", "1e30", "--warmup", "0",
                   "--out", str(out)])
    assert rc == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("错误：训练在第 ") and err[0].endswith(
        f"在那之前没有一次有限的验证损失，所以没有写出检查点 {out}"
        "（m.best.pt 是以前的训练留下的，没有动它）"), err
    assert (file_sha(out), file_sha(best)) == before


@pytest.mark.parametrize("value", ["1000000000", "-1"])
def test_train_probe_poems_is_bounded(tmp_path, value, one_line_error):
    one_line_error([*TRAIN, "--steps", "1", "--probe-poems", value,
                    "--out", str(tmp_path / "m.pt")],
                   f"--probe-poems 必须在 [0, {cli_train.MAX_PROBE_POEMS}] 之内，收到 {value}")
    assert not list(tmp_path.iterdir())


def test_init_reached_through_a_hard_link_or_dotdot_is_refused(tmp_path, small_model, small_tok,
                                                               one_line_error):
    init = checkpoint.save(tmp_path / "run.best.pt", small_model, small_tok)
    os.link(init, tmp_path / "copy.pt")
    (tmp_path / "sub").mkdir()
    for given in (tmp_path / "copy.pt", tmp_path / "sub" / ".." / "run.best.pt"):
        one_line_error([*TRAIN, "--steps", "2", "--init", str(given),
                        "--out", str(tmp_path / "run.pt")],
                       "正是这次训练要写的 run.best.pt：训练会覆盖它的起点")


def test_ctrl_c_before_the_first_evaluation_never_ships_a_stale_best(capsys, tmp_path, small_model,
                                                                     small_tok, monkeypatch,
                                                                     tiny_corpus_text, file_sha):
    out, best = tmp_path / "m.pt", tmp_path / "m.best.pt"
    checkpoint.save(out, small_model, small_tok, step=1, meta={"run": "A"})
    checkpoint.save(best, small_model, small_tok, step=1, meta={"run": "A"})
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


@pytest.mark.parametrize("flags, message", [
    (["--block-size", "0"], "block_size 必须在 [1, 8192] 之内，收到 0"),
    (["--block-size", "10000000"], "block_size 必须在 [1, 8192] 之内"),
    (["--lr", "inf"], "lr > 0 的有限数"),
    (["--lr", "nan"], "lr > 0 的有限数"),
])
def test_train_rejects_bad_sizes_and_rates(one_line_error, capsys, tmp_path, flags, message):
    one_line_error([*TRAIN_ONE, "--out", str(tmp_path / "x.pt"), *flags], message)
    assert not list(tmp_path.iterdir())


def test_train_checks_out_before_training(one_line_error, capsys, tmp_path, monkeypatch):
    import gptcourse.cli.train as tc

    monkeypatch.setattr(tc, "open_corpus", lambda *a: pytest.fail("不该开始训练"))
    one_line_error([*TRAIN_ONE, "--out", str(tmp_path)], "是一个目录")
    (tmp_path / "file").write_text("x")
    one_line_error([*TRAIN_ONE, "--out", str(tmp_path / "file" / "x.pt")], "它是一个文件")
    one_line_error([*TRAIN_ONE, "--out", ""], "没有文件名")


def test_train_checks_that_out_is_writable(one_line_error, capsys, tmp_path, monkeypatch):
    def refuse(*a, **k):                                      # 只读目录（root 也写不了的那种）
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(files.tempfile, "TemporaryFile", refuse)
    assert cli.main([*TRAIN_ONE, "--out", str(tmp_path / "x.pt")]) == 1   # 机器的问题：退出码 1
    err = capsys.readouterr().err
    assert err == f"错误：写不出 {tmp_path / 'x.pt'}：没有写权限\n", err


def test_given_block_size_is_used_not_the_preset(capsys, tmp_path):
    out = tmp_path / "b.pt"
    assert cli.main([*TRAIN_ONE, "--block-size", "8", "--eval-interval", "1",
                     "--out", str(out)]) == 0
    assert checkpoint.load(out)[0].config.block_size == 8              # 给了就用，不退回预设
    assert json.loads(capsys.readouterr().out.split("训练完成：")[1])["tokens"] == 2 * 8


def test_cli_training_with_bf16_forced_on_and_off(tmp_path, capsys):
    """同一个命令，--bf16 与 --no-bf16 都能训练，两者的验证损失只差舍入误差。"""
    import json

    from gptcourse import cli

    losses = {}
    for flag in ("--bf16", "--no-bf16"):
        out = tmp_path / f"{flag.strip('-')}.pt"
        argv = ["train", "--corpus", "tang_5jue", "--preset", "mini", "--batch-size", "2",
                "--block-size", "16", "--steps", "2", "--eval-interval", "2", "--warmup", "1",
                "--no-progress", flag, "--out", str(out)]
        assert cli.main(argv) == 0
        printed = capsys.readouterr().out
        assert ("bf16=开" if flag == "--bf16" else "bf16=关") in printed
        losses[flag] = json.loads(printed.split("训练完成：", 1)[1])["best_val_loss"]
    assert all(math.isfinite(v) for v in losses.values())
    assert losses["--bf16"] == pytest.approx(losses["--no-bf16"], abs=0.05)
