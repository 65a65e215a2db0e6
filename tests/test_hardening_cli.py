"""命令行的坏输入：一行中文、退出码 2、没有堆栈（--debug 除外）；笔记本工具遇到坏文件接着检查。"""
from __future__ import annotations

import json

import pytest
import torch

from gptcourse import checkpoint, cli, files
from gptcourse.config import preset
from gptcourse.model import GPT
from gptcourse.tokenizer import CharTokenizer
from gptcourse_kit import notebooks as nbtool

TRAIN = ["train", "--corpus", "tang_5jue", "--preset", "mini", "--batch-size", "2",
         "--no-progress", "--no-bf16", "--steps", "1"]


def one_line_error(capsys, argv, message) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("错误：") and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.fixture
def small_ckpt(tmp_path, tiny_corpus_text):
    tok = CharTokenizer.from_text(tiny_corpus_text)
    torch.manual_seed(0)
    model = GPT(preset("mini", vocab_size=tok.vocab_size, block_size=16, n_layer=1, n_head=2,
                       n_embd=16))
    return checkpoint.save(tmp_path / "small.pt", model, tok)


# ---------------------------------------------------------------- generate
def test_bad_device(capsys, small_ckpt):
    one_line_error(capsys, ["generate", "--checkpoint", str(small_ckpt), "--device", "bogus"],
                   "不认识的设备 'bogus'")
    if not torch.cuda.is_available():
        one_line_error(capsys, ["generate", "--checkpoint", str(small_ckpt), "--device", "cuda"],
                       "没有可用的 CUDA")


@pytest.mark.parametrize("flags", [["--temperature", "1e-300"], ["--top-p", "1e-300"],
                                   ["--temperature", "1e-300", "--stream"]])
def test_tiny_sampling_values_generate_greedily(capsys, small_ckpt, flags):
    base = ["generate", "--checkpoint", str(small_ckpt), "--prompt", "床", "--seed", "0",
            "--max-new-tokens", "6"]
    assert cli.main([*base, "--temperature", "0"]) == 0
    greedy = capsys.readouterr().out
    assert cli.main([*base, *flags]) == 0
    assert capsys.readouterr().out == greedy


@pytest.mark.parametrize("flags, message", [
    (["--repetition-penalty", "1e-300"], "repetition_penalty 必须在"),
    (["--temperature", "1e300"], "temperature 最大为 100"),
])
def test_extreme_sampling_values_are_rejected(capsys, small_ckpt, flags, message):
    one_line_error(capsys, ["generate", "--checkpoint", str(small_ckpt), *flags], message)


@pytest.mark.parametrize("change, message", [
    (lambda o: o.update(tokenizer=None), "'tokenizer' 应是 dict"),
    (lambda o: o.update(meta=[1]), "'meta' 应是 dict"),
])
def test_checkpoint_with_missing_parts(capsys, small_ckpt, change, message):
    obj = torch.load(small_ckpt, weights_only=True)
    change(obj)
    torch.save(obj, small_ckpt)
    one_line_error(capsys, ["generate", "--checkpoint", str(small_ckpt)], message)


# ---------------------------------------------------------------- train：先检查参数与 --out，再训练
@pytest.mark.parametrize("flags, message", [
    (["--block-size", "0"], "block_size 必须在 [1, 8192] 之内，收到 0"),
    (["--block-size", "10000000"], "block_size 必须在 [1, 8192] 之内"),
    (["--lr", "inf"], "lr > 0 的有限数"),
    (["--lr", "nan"], "lr > 0 的有限数"),
])
def test_train_rejects_bad_sizes_and_rates(capsys, tmp_path, flags, message):
    one_line_error(capsys, [*TRAIN, "--out", str(tmp_path / "x.pt"), *flags], message)
    assert not list(tmp_path.iterdir())


def test_train_checks_out_before_training(capsys, tmp_path, monkeypatch):
    import gptcourse.cli.train as tc

    monkeypatch.setattr(tc, "open_corpus", lambda *a: pytest.fail("不该开始训练"))
    one_line_error(capsys, [*TRAIN, "--out", str(tmp_path)], "是一个目录")
    (tmp_path / "file").write_text("x")
    one_line_error(capsys, [*TRAIN, "--out", str(tmp_path / "file" / "x.pt")], "它是一个文件")
    one_line_error(capsys, [*TRAIN, "--out", ""], "没有文件名")


def test_train_checks_that_out_is_writable(capsys, tmp_path, monkeypatch):
    def refuse(*a, **k):                                      # 只读目录（root 也写不了的那种）
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(files.tempfile, "TemporaryFile", refuse)
    assert cli.main([*TRAIN, "--out", str(tmp_path / "x.pt")]) == 1     # 机器的问题：退出码 1
    err = capsys.readouterr().err
    assert err == f"错误：写不出 {tmp_path / 'x.pt'}：没有写权限\n", err


def test_given_block_size_is_used_not_the_preset(capsys, tmp_path):
    out = tmp_path / "b.pt"
    assert cli.main([*TRAIN, "--block-size", "8", "--eval-interval", "1", "--out", str(out)]) == 0
    assert checkpoint.load(out)[0].config.block_size == 8              # 给了就用，不退回预设
    assert json.loads(capsys.readouterr().out.split("训练完成：")[1])["tokens"] == 2 * 8


# ---------------------------------------------------------------- eval：先检查参数，再做耗时的打分
@pytest.mark.parametrize("flags, message", [
    (["--batch-size", "-1"], "--batch-size 必须 ≥ 1"),
    (["--batch-size", "0"], "--batch-size 必须 ≥ 1"),
    (["--temperature", "-1"], "temperature 必须是 ≥ 0"),
])
def test_eval_checks_arguments_first(capsys, monkeypatch, small_ckpt, flags, message):
    monkeypatch.setattr(checkpoint, "load", lambda *a, **k: pytest.fail("不该加载检查点"))
    one_line_error(capsys, ["eval", "--checkpoint", str(small_ckpt), *flags], message)


# ---------------------------------------------------------------- 错误的分类与 --debug
def test_debug_shows_the_traceback(small_ckpt):
    with pytest.raises(ValueError, match="不认识的设备"):
        cli.main(["--debug", "generate", "--checkpoint", str(small_ckpt), "--device", "bogus"])


def test_user_errors_are_classified_by_type():
    from gptcourse.config import preset as make
    from gptcourse.errors import UserError

    def raises(fn):
        try:
            fn()
        except Exception as e:
            return e
        raise AssertionError("没有抛出异常")

    assert isinstance(raises(lambda: make("nope")), UserError)              # 配置写错
    assert isinstance(raises(lambda: checkpoint.load("/nonexistent.pt")), UserError)
    assert isinstance(raises(lambda: checkpoint.load("/nonexistent.pt")), FileNotFoundError)
    assert not isinstance(raises(lambda: int("x")), UserError)              # 程序的问题
    assert not isinstance(raises(lambda: torch.zeros(2).view(3)), UserError)


def test_internal_errors_keep_their_traceback(monkeypatch, small_ckpt):
    import gptcourse.cli.generate as gen

    def bug(*a, **k):
        raise ValueError("程序的错误，不是用户的")   # 一个 bug：是 ValueError，不是 UserError
    monkeypatch.setattr(gen, "generate_batch", bug)
    with pytest.raises(ValueError, match="程序的错误"):
        cli.main(["generate", "--checkpoint", str(small_ckpt)])


# ---------------------------------------------------------------- 笔记本工具
BROKEN = {
    "90_truncated": b'{\n "cells": [\n  {\n   "cell_type": "m',
    "91_empty": b"",
    "92_binary": b"\xbc\x00\xff\xfe",
    "93_nocells": json.dumps({"metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode(),
    "96_badversion": json.dumps({"cells": [], "metadata": {}, "nbformat": 99,
                                 "nbformat_minor": 0}).encode(),
}


@pytest.fixture
def nb_dir(tmp_path, monkeypatch):
    for name, data in BROKEN.items():
        (tmp_path / f"{name}.ipynb").write_bytes(data)
    import nbformat
    good = nbformat.v4.new_notebook()
    good.cells = [nbformat.v4.new_markdown_cell("# 好的\n学习目标\n运行时间")]
    nbformat.write(good, tmp_path / "99_good.ipynb")
    monkeypatch.setattr(nbtool, "NOTEBOOK_DIR", tmp_path)
    return tmp_path


def test_notebooks_check_reports_each_broken_notebook_and_goes_on(capsys, nb_dir):
    assert nbtool.main(["check"]) == 1
    out = capsys.readouterr().out
    assert "Traceback" not in out
    for name in BROKEN:
        line = next(x for x in out.splitlines() if name in x)
        assert "无法读取" in line or "问题" in line, line
    assert "检查 99_good.ipynb：" in out                       # 坏文件之后的也检查了


def test_notebooks_run_reports_unreadable_notebooks_and_leaves_them(capsys, nb_dir):
    assert nbtool.main(["run", "90_truncated", "92_binary"]) == 1
    out = capsys.readouterr().out
    assert out.count("失败（文件未改动）") == 2 and "Traceback" not in out
    assert (nb_dir / "90_truncated.ipynb").read_bytes() == BROKEN["90_truncated"]


# ---------------------------------------------------------------- 发布设置（K15–K25、X7、X8）
def released(tmp_path, small_ckpt, settings):
    model, tok, meta = checkpoint.load(small_ckpt)
    meta = {k: v for k, v in meta.items() if k not in ("step", "config")}
    return checkpoint.save(tmp_path / "released.pt", model, tok,
                           meta={**meta, "release": settings})


@pytest.mark.parametrize("release, message", [
    ({"settings": {"foo": 1}}, "未知的键：foo"),
    ({"settings": {"form": "五绝"}}, "未知的键：form"),
    ({"settings": [1, 2]}, "应是字典"),
    ("strange", "应是字典"),
    ({"settings": {"rhyme": "yes"}}, "rhyme 必须是 True 或 False"),
    ({"settings": {"temperature": 1e9}}, "temperature 最大为"),
])
def test_bad_release_settings_are_one_line_at_load_time(capsys, tmp_path, small_ckpt, release,
                                                        message):
    ckpt = str(released(tmp_path, small_ckpt, release))
    for argv in (["generate", "--checkpoint", ckpt], ["serve", "--checkpoint", ckpt,
                                                      "--port", "0"]):
        one_line_error(capsys, argv, message)


def test_release_rhyme_applies_only_to_whole_poems(capsys, tmp_path):
    """X7：发布设置要求押韵；只想续写几个字（--max-new-tokens 16）不该因为"写不完一首"而失败。"""
    args = ["generate", "--prompt", "春", "--seed", "0"]
    assert cli.main([*args, "--max-new-tokens", "16"]) == 0                # 随课程发布的模型
    out = capsys.readouterr().out
    assert out.startswith("春") and 1 < len(out.strip()) <= 17
    one_line_error(capsys, [*args, "--max-new-tokens", "16", "--rhyme"], "不够写完这首诗")


def test_rhyme_group_with_no_rhyme_is_a_contradiction(capsys):
    """R12（G09）：--rhyme-group 阳 --no-rhyme 以前悄悄押阳韵；现在一行错误。"""
    one_line_error(capsys, ["generate", "--rhyme-group", "阳", "--no-rhyme", "--form", "五绝",
                            "--seed", "3"], "只能取一")


def test_eval_checks_its_seed_before_scoring(capsys, monkeypatch):
    """R13（G22）：eval --seed -1 在打分之前就拒绝（以前要先打两分钟分）。"""
    import gptcourse.cli.eval as ce
    monkeypatch.setattr(ce.checkpoint, "load", lambda *a, **k: pytest.fail("不该开始打分"))
    one_line_error(capsys, ["eval", "--seed", "-1", "--samples", "1"], "seed")
