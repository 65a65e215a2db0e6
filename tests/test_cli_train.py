"""python -m gptcourse train：几步就写出可加载的 best / last / 发布文件；坏参数给出清楚的错误。"""
from __future__ import annotations

import dataclasses
import inspect
import json
from dataclasses import asdict

import pytest
import torch

from gptcourse import checkpoint, cli
from gptcourse.cli import train as train_cli
from gptcourse.config import preset
from gptcourse.data import Corpus, poem_starts
from gptcourse.errors import UserError
from gptcourse.model import GPT
from gptcourse.tokenizer import CharTokenizer
from gptcourse.train import (
    Checkpoints,
    TrainConfig,
    make_optimizer,
    tokens_per_step,
    train,
    training_splits,
)

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


# ---------------------------------------------------------------- 默认值只有一处（M5）
def parsed(*flags):
    return cli.build_parser("train").parse_args(["train", "--out", "x.pt", *flags])


def test_flag_defaults_are_the_train_config_defaults():
    """与 TrainConfig 字段对应的选项，默认值与类型都取自字段：不给选项时 _config 得到的 TrainConfig
    除预算外就是字段的默认值；在命令行里另写一个默认值（例如 --warmup 默认 50）这里就失败。"""
    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    args = parsed("--steps", "3")
    for name, (flag, _) in train_cli.CONFIG_FLAGS.items():
        value = getattr(args, flag[2:].replace("-", "_"))
        assert value == fields[name].default and type(value) is type(fields[name].default), name
    cfg, _ = train_cli._config(args)
    want = TrainConfig(max_steps=3, compile=False)
    assert cfg == want, {k: (v, getattr(want, k)) for k, v in asdict(cfg).items()
                         if v != getattr(want, k)}
    assert train_cli._config(parsed("--steps", "3", "--warmup", "7", "--lr", "3e-4",
                                    "--weight-decay", "0"))[0] == \
        TrainConfig(max_steps=3, compile=False, warmup_steps=7, lr=3e-4, weight_decay=0.0)


def test_every_train_config_field_has_a_flag_or_a_reason():
    """TrainConfig 新添一个字段，命令行就要决定：进 CONFIG_FLAGS（默认值取自字段），或者在这里
    说明为什么命令行有自己的选项 / 不给选项。"""
    own = {"max_steps": "--steps（没有默认：预算必须给）", "max_minutes": "--minutes",
           "bf16": "--bf16 / --no-bf16（默认看硬件）", "compile": "--compile（默认按步数决定）",
           "progress": "--no-progress", "betas": "不开放", "log_interval": "不开放"}
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    assert names == set(train_cli.CONFIG_FLAGS) | set(own), names ^ (
        set(train_cli.CONFIG_FLAGS) | set(own))
    assert not set(train_cli.CONFIG_FLAGS) & set(own)
    signature = inspect.signature(training_splits).parameters      # 数据的两个选项也只写一处
    args = parsed("--steps", "1")
    assert args.windows == signature["windows"].default
    assert args.untitled_every == signature["untitled_every"].default


def test_training_splits_is_the_pipeline_by_hand(tiny_corpus_text):
    corpus = Corpus("tang_5jue", "三首", tiny_corpus_text, tiny_corpus_text, "")
    tok = CharTokenizer.from_text(tiny_corpus_text)
    data = training_splits(corpus, tok, 8)
    ids = torch.tensor(tok.encode(tiny_corpus_text))
    assert all(torch.equal(data.ids[s], ids) for s in ("train", "val")) and data.targets is None
    assert torch.equal(data.starts["val"], poem_starts(ids, tok.eos_id, 8))
    assert training_splits(corpus, tok, 8, windows="random").starts is None
    with pytest.raises(UserError, match="windows 只能是 poem 或 random"):
        training_splits(corpus, tok, 8, windows="poems")
    with pytest.raises(UserError, match="--titled 只用于 tang_jinti"):
        training_splits(corpus, tok, 8, titled=True)


def test_checkpoints_write_last_best_snapshots_and_the_release_file(tmp_path, tiny_corpus_text):
    """Checkpoints 是命令行的收尾，也可以直接用：每次评估 last（带优化器）、best、快照；finish
    把这次的 best 写成发布文件并给出总结。一次评估都没有 → finish 什么也不写，返回 None。"""
    tok = CharTokenizer.from_text(tiny_corpus_text)
    torch.manual_seed(0)
    model = GPT(preset("mini", vocab_size=tok.vocab_size, block_size=16, n_layer=1, n_head=2,
                       n_embd=16))
    ids = torch.tensor(tok.encode(tiny_corpus_text * 4))
    cfg = TrainConfig(batch_size=2, max_steps=4, warmup_steps=1, eval_interval=2,
                      eval_batches=1, bf16=False, progress=False)
    optimizer = make_optimizer(model, cfg.lr)
    ckpts = Checkpoints(tmp_path / "run.pt", model, tok, optimizer, meta={"command": "c"},
                        snapshots=tmp_path / "snap")
    train(model, ids, ids, cfg, optimizer=optimizer, history=ckpts.history,
          on_eval=ckpts.on_eval)
    summary = ckpts.finish(cfg)
    assert summary["steps"] == 4 and summary["tokens"] == 4 * tokens_per_step(cfg, 16) == 128
    assert summary["best_val_loss"] == ckpts.history.best_val
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.best.pt", "run.last.pt", "run.pt",
                                                          "snap"]
    snaps = sorted((tmp_path / "snap").iterdir())
    assert [p.name for p in snaps] == ["step_000002.pt", "step_000004.pt"]
    assert {"wall_s", "val_loss"} <= set(checkpoint.load(snaps[0])[2])
    _, _, meta = checkpoint.load(tmp_path / "run.pt")
    assert meta["steps"] == 4 and meta["command"] == "c" and len(meta["history"]["steps"]) == 4
    assert meta["step"] == 4 and checkpoint.load_raw(tmp_path / "run.pt")["optimizer"] is None
    assert checkpoint.load_raw(tmp_path / "run.last.pt")["optimizer"] is not None
    never = Checkpoints(tmp_path / "never.pt", model, tok)
    assert never.finish(cfg) is None and not (tmp_path / "never.pt").exists()


def test_cli_main_reads_as_a_short_story():
    """cli_main 是一段顶层的故事（检查 → 数据 → 模型 → 训练 → 收尾），细节在有名字的函数里。"""
    lines = inspect.getsource(train_cli.cli_main).splitlines()
    assert len(lines) <= 45, len(lines)
