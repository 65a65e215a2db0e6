"""scripts/rhyme_study.py：参数在开始计算之前检查，一行，退出码 2。"""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys

import pytest

from gptcourse.errors import UserError
from gptcourse.runtime import ROOT


def _rhyme_study():
    path = ROOT / "scripts" / "rhyme_study.py"
    spec = importlib.util.spec_from_file_location("rhyme_study", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("cid, change, message", [
    ("E1", {"seeds": "abc"}, "--seeds 应是逗号分开的整数"),
    ("E2", {"seeds": ""}, "--seeds 应是逗号分开的整数"),
    ("E3", {"variants": "不存在"}, "--variants 只能是"),
    ("E4", {"steps": 0}, "--steps 必须 ≥ 1"),
    ("E5", {"steps": -5}, "--steps 必须 ≥ 1"),
    ("E7", {"json": "/nonexistent/dir/x.json"}, "的目录不存在"),
    ("E8", {"seeds": "0,0"}, "不重复"),
    ("E9", {"seeds": "-1"}, "[0, 2³²)"),
])
def test_rhyme_study_checks_its_arguments_first(cid, change, message):
    study = _rhyme_study()
    args = argparse.Namespace(**{"seeds": "0,1,2", "variants": ",".join(study.VARIANTS),
                                 "steps": 300, "json": None, **change})
    with pytest.raises(UserError, match=re.escape(message)):
        study.check_args(args)
    ok = argparse.Namespace(seeds="0,1", variants="韵部辅助损失", steps=1, json=None)
    assert study.check_args(ok) == ([0, 1], ["韵部辅助损失"])


def test_rhyme_study_missing_init_is_one_line_exit_2():
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "rhyme_study.py"), "--init",
                        "/nonexistent.pt"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 2 and p.stderr == "错误：找不到检查点文件 /nonexistent.pt\n", p.stderr
