"""测试公共设置。

- 在导入时设置 GPTCOURSE_QUICK=1：之后由 nbval 启动的笔记本内核会继承这个环境变量，
  所以 ``pytest`` 以快速模式执行 notebooks/ 下的笔记本。
- 单元测试使用无界面的 Agg 后端画图。
"""
from __future__ import annotations

import os

os.environ["GPTCOURSE_QUICK"] = "1"
os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # 避免调试器在内核启动时的警告

import matplotlib  # noqa: E402

matplotlib.use("Agg")

import pytest  # noqa: E402

TINY_POEMS = [
    "床前明月光，疑是地上霜。举头望明月，低头思故乡。",
    "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。",
    "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。",
]


@pytest.fixture
def tiny_corpus_text() -> str:
    """三首五绝，每首一行，换行结束一首诗（与 data/ 中语料的格式相同）。"""
    return "\n".join(TINY_POEMS) + "\n"


@pytest.fixture(autouse=True)
def _close_figures():
    """每个测试结束后关闭所有图，避免内存累积与跨测试的状态泄漏。"""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def passes(capsys, checker, *args) -> tuple[bool, str]:
    """调用一个练习检查器：返回 (是否通过, 打印的内容)，并断言返回值与"正确 ✓"一致。"""
    ok = checker(*args)
    out = capsys.readouterr().out
    assert isinstance(ok, bool)
    assert ("正确 ✓" in out) == ok
    return ok, out
