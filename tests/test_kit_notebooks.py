"""笔记本工具（gptcourse_kit.notebooks）遇到坏文件：说出是哪一个，接着检查其余的。"""
from __future__ import annotations

import json

import pytest

from gptcourse_kit import notebooks as nbtool

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
