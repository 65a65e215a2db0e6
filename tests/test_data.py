"""数据模块：按名字加载语料（与工作目录无关）、按诗哈希划分、窗口与批次。"""
from __future__ import annotations

import re

import pytest
import torch

import gptcourse as gc
from gptcourse import DATA_DIR
from gptcourse.data import WindowDataset, get_batch, load_corpus, split_of


def test_available_corpora_and_unknown_name_lists_them():
    names = gc.data.available_corpora()
    assert {"tang_jinti", "tang_5jue", "tangshi300", "luxun_nahan"} <= set(names)
    with pytest.raises(ValueError) as info:
        load_corpus("tang_jintii")
    for name in names:
        assert name in str(info.value)


def test_load_is_independent_of_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    corpus = load_corpus("tang_5jue")
    assert corpus.name == "tang_5jue"
    assert corpus.train.count("\n") == 3581
    assert corpus.val.count("\n") == 198 and corpus.test.count("\n") == 211


def test_shipped_splits_follow_the_hash_rule():
    corpus = load_corpus("tang_5jue")
    for split in ("train", "val", "test"):
        poems = [p for p in getattr(corpus, split).split("\n") if p]
        assert {split_of(p) for p in poems} == {split}


def test_splits_are_disjoint_by_poem():
    corpus = load_corpus("tang_jinti")
    train = set(corpus.train.split("\n"))
    assert not (set(corpus.val.split("\n")) - {""}) & train
    assert not (set(corpus.test.split("\n")) - {""}) & train


def _stats(path):
    text = path.read_text(encoding="utf-8")
    lines = sum(1 for line in text.split("\n") if line.strip())
    return f"{path.stat().st_size:,}", f"{lines:,}", f"{len(text.replace(chr(10), '')):,}", \
        f"{len(set(text) - {chr(10)}):,}"


def test_data_readme_table_matches_files():
    """data/README.md 里的表格是手写的：这里逐项重新计算，防止文字与文件不一致。"""
    readme = (DATA_DIR / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([\w.]+\.txt)` \| ([\d,]+) \| ([\d,]+) \S+(?: \S+)? \| ([\d,]+) \| "
                      r"([\d,]+) \|$", readme, flags=re.M)
    assert len(rows) == 9
    for name, size, lines, chars, distinct in rows:
        assert _stats(DATA_DIR / name) == (size, lines, chars, distinct), name


def test_get_batch_shapes_and_shift():
    data = torch.arange(100)
    g = torch.Generator().manual_seed(0)
    x, y = get_batch(data, batch_size=4, block_size=8, generator=g)
    assert x.shape == y.shape == (4, 8)
    assert torch.equal(y, x + 1)                      # 下一个 id 正是 y
    with pytest.raises(ValueError, match="block_size"):
        get_batch(torch.arange(5), 2, 8)


def test_window_dataset_counts_and_shift():
    data = torch.arange(101)                          # 101 个词元
    ds1 = WindowDataset(data, block_size=10, stride=1)
    ds10 = WindowDataset(data, block_size=10, stride=10)
    assert len(ds1) == 91 and len(ds10) == 10
    x, y = ds10[9]
    assert torch.equal(x, torch.arange(90, 100)) and torch.equal(y, torch.arange(91, 101))
    with pytest.raises(IndexError):
        ds10[10]
    with pytest.raises(ValueError, match="stride"):
        WindowDataset(data, 10, stride=0)
