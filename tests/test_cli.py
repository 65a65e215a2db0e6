"""命令行（generate、eval 与错误的分类）：坏输入是一行中文、退出码 2、没有堆栈（--debug 除外）。
训练命令的测试在 test_cli_train.py。"""
from __future__ import annotations

import pytest
import torch

from gptcourse import checkpoint, cli
from gptcourse.config import preset
from gptcourse.errors import UserError
from gptcourse.model import GPT
from gptcourse.tokenizer import CharTokenizer


@pytest.fixture
def small_ckpt(tmp_path, tiny_corpus_text):
    tok = CharTokenizer.from_text(tiny_corpus_text)
    torch.manual_seed(0)
    model = GPT(preset("mini", vocab_size=tok.vocab_size, block_size=16, n_layer=1, n_head=2,
                       n_embd=16))
    return checkpoint.save(tmp_path / "small.pt", model, tok)


# ---------------------------------------------------------------- generate
def test_bad_device(one_line_error, capsys, small_ckpt):
    one_line_error(["generate", "--checkpoint", str(small_ckpt), "--device", "bogus"],
                   "不认识的设备 'bogus'")
    if not torch.cuda.is_available():
        one_line_error(["generate", "--checkpoint", str(small_ckpt), "--device", "cuda"],
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
def test_extreme_sampling_values_are_rejected(one_line_error, capsys, small_ckpt, flags, message):
    one_line_error(["generate", "--checkpoint", str(small_ckpt), *flags], message)


@pytest.mark.parametrize("change, message", [
    (lambda o: o.update(tokenizer=None), "'tokenizer' 应是 dict"),
    (lambda o: o.update(meta=[1]), "'meta' 应是 dict"),
])
def test_checkpoint_with_missing_parts(one_line_error, capsys, small_ckpt, change, message):
    obj = torch.load(small_ckpt, weights_only=True)
    change(obj)
    torch.save(obj, small_ckpt)
    one_line_error(["generate", "--checkpoint", str(small_ckpt)], message)


# ---------------------------------------------------------------- eval：先检查参数，再做耗时的打分
@pytest.mark.parametrize("flags, message", [
    (["--batch-size", "-1"], "--batch-size 必须 ≥ 1"),
    (["--batch-size", "0"], "--batch-size 必须 ≥ 1"),
    (["--temperature", "-1"], "temperature 必须是 ≥ 0"),
])
def test_eval_checks_arguments_first(one_line_error, capsys, monkeypatch, small_ckpt, flags,
                                     message):
    monkeypatch.setattr(checkpoint, "load", lambda *a, **k: pytest.fail("不该加载检查点"))
    one_line_error(["eval", "--checkpoint", str(small_ckpt), *flags], message)


# ---------------------------------------------------------------- 错误的分类与 --debug
def test_debug_shows_the_traceback(small_ckpt):
    with pytest.raises(ValueError, match="不认识的设备"):
        cli.main(["--debug", "generate", "--checkpoint", str(small_ckpt), "--device", "bogus"])


def test_user_errors_are_classified_by_type():
    from gptcourse.config import preset as make

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
def test_bad_release_settings_are_one_line_at_load_time(one_line_error, capsys, tmp_path,
                                                        small_ckpt, release, message):
    ckpt = str(released(tmp_path, small_ckpt, release))
    for argv in (["generate", "--checkpoint", ckpt], ["serve", "--checkpoint", ckpt,
                                                      "--port", "0"]):
        one_line_error(argv, message)


def test_release_rhyme_applies_only_to_whole_poems(one_line_error, capsys, tmp_path):
    """X7：发布设置要求押韵；只想续写几个字（--max-new-tokens 16）不该因为"写不完一首"而失败。"""
    args = ["generate", "--prompt", "春", "--seed", "0"]
    assert cli.main([*args, "--max-new-tokens", "16"]) == 0                # 随课程发布的模型
    out = capsys.readouterr().out
    assert out.startswith("春") and 1 < len(out.strip()) <= 17
    one_line_error([*args, "--max-new-tokens", "16", "--rhyme"], "不够写完这首诗")


def test_rhyme_group_with_no_rhyme_is_a_contradiction(one_line_error, capsys):
    """R12（G09）：--rhyme-group 阳 --no-rhyme 以前悄悄押阳韵；现在一行错误。"""
    one_line_error(["generate", "--rhyme-group", "阳", "--no-rhyme", "--form", "五绝",
                            "--seed", "3"], "只能取一")


def test_eval_checks_its_seed_before_scoring(one_line_error, capsys, monkeypatch):
    """R13（G22）：eval --seed -1 在打分之前就拒绝（以前要先打两分钟分）。"""
    import gptcourse.cli.eval as ce
    monkeypatch.setattr(ce.checkpoint, "load", lambda *a, **k: pytest.fail("不该开始打分"))
    one_line_error(["eval", "--seed", "-1", "--samples", "1"], "seed")


# ---------------------------------------------------------------- 坏输入：生成的尺寸与种子、Ctrl+C
@pytest.mark.parametrize("case, value", [("G12", str(10**12)), ("G13", "9" * 25),
                                         ("G40", str(10**9))])
def test_cli_max_new_tokens_bound(small_saved, case, value, one_line_error):
    one_line_error(["generate", "--checkpoint", str(small_saved), "--max-new-tokens", value,
                    "-n", "4", "--seed", "0"], "max_new_tokens 最多 1024")


def test_cli_n_is_bounded(small_saved, one_line_error):
    one_line_error(["generate", "--checkpoint", str(small_saved), "-n", "20000"],
                   "-n 必须在 [1, 10000] 之内，收到 20000")
    one_line_error(["generate", "--checkpoint", str(small_saved), "-n", "200000"],
                   "-n 必须在 [1, 10000] 之内")


def test_cli_seed_2_64(small_saved, one_line_error):
    one_line_error(["generate", "--checkpoint", str(small_saved), "--seed", str(2**64),
                    "--max-new-tokens", "8"], "seed 必须是")


def test_ctrl_c_in_any_command_is_one_line_and_exit_130(capsys, small_saved, monkeypatch):
    import gptcourse.cli.generate as cg

    def ctrl_c(*a, **kw):
        raise KeyboardInterrupt
    monkeypatch.setattr(cg, "generate_batch", ctrl_c)
    assert cli.main(["generate", "--checkpoint", str(small_saved)]) == 130
    assert capsys.readouterr().err == "已中断（Ctrl+C）\n"
