"""单元测试的公共夹具（环境变量与绘图后端在仓库根目录的 conftest.py 里设置）。"""
from __future__ import annotations

import pytest
from browser import chromium_available  # noqa: F401  浏览器测试的夹具（tests/browser.py）

TINY_POEMS = [
    "床前明月光，疑是地上霜。举头望明月，低头思故乡。",
    "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。",
    "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。",
]


@pytest.fixture
def tiny_corpus_text() -> str:
    """三首五绝，每首一行，换行结束一首诗（与 data/ 中语料的格式相同）。"""
    return "\n".join(TINY_POEMS) + "\n"


@pytest.fixture
def small_tok(tiny_corpus_text):
    """那三首诗的字（加上《》，题目用）的分词器：61 个词元。"""
    from gptcourse.tokenizer import CharTokenizer

    return CharTokenizer.from_text(tiny_corpus_text + "《》")


@pytest.fixture
def small_gpt(small_tok):
    """``small_gpt(seed=0, **配置)``：词表是 ``small_tok`` 的极小 GPT（1 层、16 维、窗口 16），
    eval 模式；坏输入的测试用它，不训练。"""
    import torch

    from gptcourse.config import preset
    from gptcourse.model import GPT

    def make(seed: int = 0, **kw):
        torch.manual_seed(seed)
        return GPT(preset("mini", vocab_size=small_tok.vocab_size, block_size=16, n_layer=1,
                          n_head=2, n_embd=16, **kw)).eval()

    return make


@pytest.fixture
def small_model(small_gpt):
    return small_gpt()


@pytest.fixture
def small_saved(tmp_path, small_model, small_tok):
    """``small_model`` 存成的检查点 ``small.pt``（第 3 步）。"""
    from gptcourse import checkpoint

    return checkpoint.save(tmp_path / "small.pt", small_model, small_tok, step=3)


@pytest.fixture(autouse=True)
def _close_figures():
    """每个测试结束后关闭所有图，避免内存累积与跨测试的状态泄漏。"""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


@pytest.fixture
def passes(capsys):
    """``passes(checker, *args)``：调用一个练习检查器，返回 (是否通过, 打印的内容)，
    并断言返回值是 bool 且与是否打印"正确 ✓"一致。"""
    def run(checker, *args) -> tuple[bool, str]:
        ok = checker(*args)
        out = capsys.readouterr().out
        assert isinstance(ok, bool)
        assert ("正确 ✓" in out) == ok
        return ok, out

    return run


@pytest.fixture
def one_line_error(capsys):
    """``one_line_error(argv, message)``：命令行以退出码 2 结束，stderr 只有一行"错误：…"，
    其中含 ``message``，没有 Traceback；返回这一行。"""
    def check(argv, message) -> str:
        from gptcourse import cli

        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("错误：") and message in err, err
        assert err.count("\n") == 1 and "Traceback" not in err
        return err

    return check


@pytest.fixture
def file_sha():
    """``file_sha(path)``：文件内容的 SHA-256（十六进制），用来证明文件没被动过。"""
    import hashlib

    return lambda path: hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def teacher():
    """``teacher("nb01.build_vocab")``：执行教师版笔记本里这道题的答案单元格（参考答案只有这一份，
    ``show_solution`` 打印的也是它），返回它定义的那个名字的值；定义了几个名字时返回
    名字 → 值。``env`` 补上单元格用到的、笔记本前文定义的名字。"""
    import math

    import numpy as np
    import torch

    import gptcourse as gc
    from gptcourse.check._common import solution_cell

    def answer(key: str, **env):
        ns = {"torch": torch, "nn": torch.nn, "F": torch.nn.functional, "math": math, "np": np,
              "gc": gc, **env}
        before = dict(ns)
        exec(compile(solution_cell(key), f"<教师版 {key}>", "exec"), ns)  # noqa: S102
        new = {k: v for k, v in ns.items() if before.get(k, ns) is not v
               and not k.startswith("__") and not isinstance(v, type(math))}    # 导入的模块不算
        return next(iter(new.values())) if len(new) == 1 else new

    return answer
