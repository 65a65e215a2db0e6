"""数据模块：按名字加载语料（与工作目录无关）、按诗哈希划分、窗口与批次。"""
from __future__ import annotations

import importlib.util
import re

import pytest
import torch

import gptcourse as gc
from gptcourse import DATA_DIR
from gptcourse.data import WindowDataset, get_batch, load_corpus, poem_starts, split_of
from gptcourse.runtime import ROOT


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
    assert corpus.train.count("\n") == 3574
    assert corpus.val.count("\n") == 198 and corpus.test.count("\n") == 218


@pytest.fixture(scope="module")
def built():
    """scripts/build_splits.py 按干净的规则重算出的文件内容（只算一次）。"""
    spec = importlib.util.spec_from_file_location("build_splits", ROOT / "scripts" / "build_splits.py")  # noqa: E501
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, module.build_files()


def test_shipped_splits_are_what_the_script_builds(built):
    module, (files, old, new) = built
    assert module.stale_files(files) == []          # data/ 由脚本可复现地生成
    assert len(old) == len(new) == 37203
    assert sum(a != b for a, b in zip(old, new)) == 300


def test_clean_splits_have_no_near_duplicate_across_train_and_eval():
    corpus = load_corpus("tang_jinti")
    train = gc.data.poems(corpus.train)
    held_out = gc.data.poems(corpus.val) + gc.data.poems(corpus.test)
    assert gc.data.leak_count(train, held_out) == 0


def test_old_rule_leaks_near_duplicates():
    """旧规则逐首哈希：一字之差的两个版本会被分到两边（干净规则要修的问题）。"""
    corpus = load_corpus("tang_jinti")
    everything = [p for s in ("train", "val", "test") for p in gc.data.poems(corpus.split(s))]
    old = {s: [p for p in everything if split_of(p) == s] for s in ("train", "val")}
    assert gc.data.leak_count(old["train"], old["val"]) == 154


A = "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。"


@pytest.mark.parametrize("other, same", [
    (A, True),                                                     # 完全相同
    ("白日依山尽，黄河入海留。欲穷千里目，更上一层楼。", True),     # 一字之差
    ("白日依山尽，黄河入海留。欲穷万里目，更上一层楼。", True),     # 两句各差一字：仍有一半句子相同
    ("白日依山尽，黄河入海流。春眠不觉晓，处处闻啼鸟。", True),     # 一半句子相同（边界：恰好一半）
    ("白日依山尽，处处闻啼鸟。夜来风雨声，花落知多少。", False),    # 只有一句相同
    ("白月依江尽，黄水出海流。欲穷千里目，更上一层楼。", True),     # 差两个字的句子不算相同，但还有两句  # noqa: E501
    ("白月依江尽，黄水出海流。欲寻千载目，更上一层楼。", False),    # 只剩一句相同
])
def test_near_duplicate_rule(other, same):
    assert (gc.data.near_duplicate_groups([A, other]) == [[0, 1]]) is same


def test_variants_are_normalised_only_for_the_comparison():
    a = "鴈声远过潇湘去，十二楼中月自明。粧成每被秋娘妒，疎影横斜水清浅。"
    b = "雁声远过潇湘去，十二楼中月自明。妆成每被秋娘妒，疏影横斜水清浅。"
    assert gc.data.normalize_variants(a) == b
    # 把两句各改一个字：只靠“一字之差”不够（每句差两个字），归一异体字后就认出是同一首
    a2 = a.replace("十二楼中月自明", "十一楼中月自白").replace("水清浅", "水青浅")
    assert gc.data.near_duplicate_groups([a2, b]) == [[0, 1]]
    assert gc.data.load_corpus("tang_jinti").train.count("鴈") > 0       # 语料本身不改


def test_assign_splits_keeps_groups_together_and_ignores_order():
    poems = [A, "白日依山尽，黄河入海留。欲穷千里目，更上一层楼。", "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。"]  # noqa: E501
    splits = gc.data.assign_splits(poems)
    assert splits[0] == splits[1] == split_of(min(poems[:2]))
    assert splits[2] == split_of(poems[2])                       # 没有近似重复：与旧规则相同
    assert gc.data.assign_splits(poems[::-1]) == splits[::-1]


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


# ---------------------------------------------------------------- 你自己的文本（issue 53）
def test_documents_are_lines_or_blank_line_paragraphs():
    split = gc.data.split_documents
    assert split("白日依山尽，黄河入海流。\n床前明月光，疑是地上霜。\n") == \
        (["白日依山尽，黄河入海流。", "床前明月光，疑是地上霜。"], "lines")
    poems2 = "白日依山尽，\n黄河入海流。\n\n床前明月光，\n疑是地上霜。\n"
    assert split(poems2) == (["白日依山尽，黄河入海流。", "床前明月光，疑是地上霜。"], "paragraphs")
    assert split(poems2, "lines")[0] == ["白日依山尽，", "黄河入海流。",
                                         "床前明月光，", "疑是地上霜。"]
    assert split("Hello\nworld\n\n春\n风\n", "paragraphs")[0] == ["Hello world", "春风"]
    assert split("\r\n".join(["一", "二"]) + "\r\n", None)[0] == ["一", "二"]   # Windows 的换行
    with pytest.raises(ValueError, match="documents 只能是"):
        split("一\n", "words")


def test_long_stories_separated_by_blank_lines_are_split_by_line():
    """《呐喊》：一行一段，空行只隔开各篇小说——按段只有 23 篇，按行才够划分。"""
    text = gc.data.read_text_file(DATA_DIR / "luxun_nahan.txt")
    docs, how = gc.data.split_documents(text)
    assert how == "lines" and len(docs) > 900


def test_your_own_text_is_split_like_the_bundled_corpora(tmp_path):
    """同一条规则：按内容哈希（split_of），近似重复的整组去同一个划分（assign_splits）。"""
    val = gc.data.poems(load_corpus("tang_5jue").val)[:40]
    train = gc.data.poems(load_corpus("tang_5jue").train)[:200]
    chars = "流留楼头秋声明清深生心林云门人春"
    twin = next(t for t in (train[0][:-2] + c + "。" for c in chars)        # 一字之差的异文，
                if gc.data.split_of(t) != gc.data.split_of(train[0]))        # 自己的哈希去别处
    path = tmp_path / "mine.txt"
    docs = [*train, *val, twin]
    path.write_text("\n".join(docs) + "\n", encoding="utf-8")
    own = gc.data.text_corpus(path)
    for name in gc.data.SPLITS:                                # 与内置语料同一个函数
        assert gc.data.poems(own.split(name)) == [
            d for d, w in zip(docs, gc.data.assign_splits(docs)) if w == name]
    where = dict(zip(docs, gc.data.assign_splits(docs)))
    assert where[twin] == where[train[0]]                      # 异文跟着它的原作走
    assert gc.data.is_verse(own) and own.name == "mine.txt" and "一行一篇" in own.description
    nahan = tmp_path / "nahan.txt"
    nahan.write_bytes((DATA_DIR / "luxun_nahan.txt").read_bytes())
    assert not gc.data.is_verse(gc.data.text_corpus(nahan))


def test_a_folder_a_fifo_or_an_empty_name_as_corpus_is_named_for_what_it_is(tmp_path):
    import os

    from gptcourse.errors import UserError
    os.mkfifo(tmp_path / "pipe")
    for spec, words in ((tmp_path, "是目录"), (tmp_path / "pipe", "不是普通文件"),
                        ("", "是空的"), ("  ", "是空的")):
        with pytest.raises(UserError, match=words):
            gc.data.open_corpus(str(spec))


def test_a_huge_line_without_punctuation_is_split_in_bounded_time_and_memory():
    """一行 3 MB、没有标点（以前“挖掉一个字”的键是 O(长度²)：耗尽内存被杀掉）。"""
    import time
    t0 = time.perf_counter()
    assert gc.data.assign_splits(["春" * 3_000_000, "风" * 100]) in (
        [a, b] for a in gc.data.SPLITS for b in gc.data.SPLITS)
    assert time.perf_counter() - t0 < 10


def test_thousands_of_identical_lines_are_grouped_without_quadratic_time():
    import time
    t0 = time.perf_counter()
    where = gc.data.assign_splits(["好的好的，收到收到。"] * 20_000 + ["白日依山尽，黄河入海流。"])
    assert len(set(where[:-1])) == 1 and time.perf_counter() - t0 < 10
    assert gc.data.near_duplicate_groups(["白日依山尽，黄河入海流。", "白日依山尽，黄河入海留。",
                                          "春眠不觉晓，处处闻啼鸟。", "白日依山尽，黄河入海流。"]) \
        == [[0, 1, 3]]


def test_a_text_whose_documents_are_all_near_duplicates_says_so(tmp_path):
    """300 篇几乎一样的句子整组进了训练集：说出“彼此重复”，而不是猜它是别的语料的验证集。"""
    from gptcourse.errors import UserError
    path = tmp_path / "same.txt"
    path.write_text("".join(f"第{i}句：今天天气很好，我们去公园散步，看见了很多人在跑步。\n"
                            for i in range(300)), encoding="utf-8")
    with pytest.raises(UserError, match="300 篇彼此（近似）重复"):
        gc.data.text_corpus(path)


def test_a_text_of_few_distinct_documents_says_how_many_are_distinct(tmp_path):
    from gptcourse.errors import UserError
    path = tmp_path / "few.txt"
    path.write_text("".join(f"春{i % 10}\n" for i in range(300)), encoding="utf-8")
    with pytest.raises(UserError, match="不一样的只有 10 篇"):
        gc.data.text_corpus(path)


def _near_pairs_by_definition(docs):
    """判据的字面写法（逐对、平方时间），只给小输入用来对照。"""
    lines = [gc.data._lines(d) for d in docs]

    def same(a, b):
        if len(a) != len(b):
            return False
        if len(a) > gc.data.MAX_NEAR_LINE:
            return a == b
        return sum(x != y for x, y in zip(a, b)) <= 1

    return [(i, j) for i in range(len(docs)) for j in range(i + 1, len(docs))
            if lines[i] and 2 * sum(any(same(a, b) for b in lines[j]) for a in lines[i])
            >= min(len(lines[i]), len(lines[j]))]


def _groups(n, pairs):
    parent = list(range(n))

    def root(x):
        while parent[x] != x:
            x = parent[x]
        return x

    for i, j in pairs:
        parent[root(i)] = root(j)
    out = {}
    for i in range(n):
        out.setdefault(root(i), []).append(i)
    return sorted(g for g in out.values() if len(g) > 1)


def test_twenty_thousand_documents_sharing_one_sentence_take_linear_work():
    """两万篇不同的短文都含同一句（套话）：以前每篇都要与其余每篇比一次（约 4 亿次），现在
    比较次数与篇数成正比；结果不变——两句里有一句相同，按判据整组都是近似重复。"""
    import time
    docs = [f"今天天气很好，这是编号{i:05d}的文件。" for i in range(20_000)]
    stats = {}
    t0 = time.perf_counter()
    pairs = gc.data._near_pairs(docs, stats)
    groups = gc.data.near_duplicate_groups(docs)
    assert time.perf_counter() - t0 < 60                     # 平方时间要几十分钟
    assert stats["compared"] < 100 * len(docs)               # 与 CPU 快慢无关的界
    assert stats["cap"] < 20_000                             # 套话的桶没有逐对展开
    assert groups == [list(range(20_000))]
    assert all(i < j for i, j in pairs)


def _own(i):
    """第 i 篇独有的两句（每个字只在这一篇里出现）。"""
    return "".join(chr(0x4E00 + 8 * i + t) for t in range(4)), \
        "".join(chr(0x4E00 + 8 * i + t) for t in range(4, 8))


_LONG = [f"今天天气很好，{a}，{b}。" for a, b in map(_own, range(60))]


@pytest.mark.parametrize("docs", [
    # 三句的长篇共有一句套话：只靠套话不算重复；另有一句相同的两篇（0、1）要连上
    ["今天天气很好，白日依山尽，黄河入海流。", "今天天气很好，白日依山尽，欲穷千里目。"] + _LONG,
    # 加上一篇两句的短篇：它与每一篇都有一半句子相同，所以全部连成一组
    ["今天天气很好，短篇只有两句话。"] + _LONG,
    # 短篇在后：训练集在前、评估集在后时，“有没有前面的伙伴”也要与判据一致
    _LONG + ["今天天气很好，短篇只有两句话。", "今天天气很好，另一篇两句的。"],
])
def test_a_capped_common_sentence_gives_the_same_groups_and_leaks_as_the_definition(
        docs, monkeypatch):
    """把预算压到最小，逼出“套话”的路径：组与泄漏的判断与逐对的判据相同。"""
    monkeypatch.setattr(gc.data, "NEAR_WORK_FLOOR", 0)
    monkeypatch.setattr(gc.data, "NEAR_WORK_PER_KEY", 1)
    stats = {}
    pairs = gc.data._near_pairs(docs, stats)
    assert stats["cap"] < len(docs)                          # 套话的桶确实被截了
    want = _near_pairs_by_definition(docs)
    assert set(pairs) <= set(want)                           # 连出的每条边都是真的
    assert _groups(len(docs), pairs) == _groups(len(docs), want)
    for n in (1, 2, 30, 60, 61):                             # 前 n 篇当训练集
        got = {j for i, j in pairs if i < n <= j}
        assert got == {j for i, j in want if i < n <= j}
        assert gc.data.leak_count(docs[:n], docs[n:]) == len(got)
