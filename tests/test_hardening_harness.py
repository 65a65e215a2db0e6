"""测试框架本身：包里的 doctest 都要跑、变异测试找出的两个边界要钉住、两条精度路径都要走到。"""
from __future__ import annotations

import doctest
import importlib
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import gptcourse as gc
from gptcourse.config import preset
from gptcourse.data import get_batch, poem_starts
from gptcourse.evaluate import split_loss
from gptcourse.model import GPT
from gptcourse.sampling import top_p_filter
from gptcourse.tokenizer import CharTokenizer

PACKAGE = Path(gc.__file__).parent
ROOT = PACKAGE.parent
DOCTEST_MODULES = sorted(                                # 含有 ">>> " 示例的模块
    "gptcourse." + ".".join(p.relative_to(PACKAGE).with_suffix("").parts)
    for p in PACKAGE.rglob("*.py")
    if p.name != "__main__.py" and ">>> " in p.read_text(encoding="utf-8"))


def test_doctest_modules_found():
    assert {"gptcourse.bpe", "gptcourse.acceptance", "gptcourse.sampling"} <= set(DOCTEST_MODULES)


@pytest.mark.parametrize("name", DOCTEST_MODULES)
def test_package_doctests_pass(name):
    mod = importlib.import_module(name.removesuffix(".__init__"))
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 1 and result.failed == 0


# ---------------------------------------------------------------- 变异测试找出的边界
def test_top_p_boundary_is_inclusive():
    """四个相等的 logits：概率恰好是 1/4（2 的幂，任何 CPU 上都没有舍入）。

    p = 0.5：第 1、2 名前面的累计概率是 0、0.25 < 0.5，保留；第 3 名前面恰好是 0.5 ≥ p，去掉。
    把 ``before >= p`` 改成 ``>`` 会多留一个词元。
    """
    logits = torch.zeros(4)
    assert top_p_filter(logits, 0.5).isinf().tolist() == [False, False, True, True]
    assert top_p_filter(logits, 0.25).isinf().tolist() == [False, True, True, True]
    assert top_p_filter(logits, 0.75).isinf().tolist() == [False, False, False, True]
    assert top_p_filter(logits, 0.5000001).isinf().tolist() == [False, False, False, True]


def test_top_p_always_keeps_the_top_token():
    logits = torch.tensor([[0.0, 2.0, 1.0], [5.0, 5.0, 0.0]])
    for p in (1e-300, 1e-45, 1e-9):                           # 在 float32 里是 0 或几乎是 0
        assert top_p_filter(logits, p).isinf().tolist() == [[True, False, True],
                                                            [False, True, True]]


def test_poem_starts_boundary():
    """起点 s 要切出长 T 的输入和目标（到 s+T 为止），所以 s ≤ len − T − 1。

    [1, 0, 0, 1]，T = 2：位置 1 的换行可以（x = [0, 0], y = [0, 1]）；位置 2 的不行（y 不够长）。
    把 ``<`` 改成 ``<=`` 会收下位置 2。
    """
    ids = torch.tensor([1, 0, 0, 1])
    starts = poem_starts(ids, eos_id=0, block_size=2)
    assert starts.tolist() == [1]
    x, y = get_batch(ids, 3, 2, starts=starts, generator=torch.Generator().manual_seed(0))
    assert x.tolist() == [[0, 0]] * 3 and y.tolist() == [[0, 1]] * 3
    assert poem_starts(torch.tensor([0, 1, 0]), 0, 2).tolist() == [0]   # 末尾的换行不能当起点


# ---------------------------------------------------------------- 两条精度路径
def tiny_model(tok) -> GPT:
    torch.manual_seed(0)
    return GPT(preset("teacher", vocab_size=tok.vocab_size, block_size=16, n_layer=1, n_head=2,
                      n_embd=16))


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16"])
def test_evaluation_under_both_precisions(tiny_corpus_text, bf16):
    """评估在 bf16 autocast 下也能跑（CPU 不支持 bf16 时只是慢），与 fp32 的差别在容差之内。"""
    tok = CharTokenizer.from_text(tiny_corpus_text)
    model = tiny_model(tok)
    ref = split_loss(model, tok, tiny_corpus_text)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = split_loss(model, tok, tiny_corpus_text)
    assert math.isfinite(loss)
    assert loss == pytest.approx(ref, abs=0.05 if bf16 else 1e-6)
    assert loss == pytest.approx(math.log(tok.vocab_size), abs=0.5)   # 未训练：约等于 ln V


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


# ---------------------------------------------------------------- 根目录的 conftest.py
def test_root_conftest_sets_quick_mode_for_notebooks_alone():
    """``pytest notebooks`` 只读根目录的 conftest.py（不读 tests/conftest.py），也要是快速模式。"""
    probe = ROOT / "conftest.py"
    assert probe.is_file()
    env = {k: v for k, v in os.environ.items() if k != "GPTCOURSE_QUICK"}
    code = ("import runpy, os; runpy.run_path('conftest.py'); "
            "import matplotlib; print(os.environ['GPTCOURSE_QUICK'], matplotlib.get_backend())")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["1", "agg"] or out == ["1", "Agg"]
