"""测试框架本身：包里的 doctest 都要跑；只跑 notebooks/ 时根目录的 conftest.py 也设快速模式。

（变异测试找出的边界在 test_sampling.py 与 test_data.py，两条精度路径在 test_evaluate.py 与
test_cli_train.py。）"""
from __future__ import annotations

import doctest
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gptcourse as gc

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
