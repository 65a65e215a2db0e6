"""练习检查器：教师版的答案单元格必须通过，典型的错误答案必须被指出。"""
from __future__ import annotations

import hashlib
import re

import pytest

import gptcourse as gc
from gptcourse.check import nb01


@pytest.mark.parametrize("name", nb01.EXERCISES)
def test_the_teacher_solution_passes(name, capsys, teacher):
    arg = teacher(f"nb01.{name}", get_stats=gc.bpe.get_stats, merge=gc.bpe.merge)
    assert getattr(gc.check.nb01, name)(arg) is True
    assert "正确 ✓" in capsys.readouterr().out


def _unsorted_vocab(text):
    itos = list(dict.fromkeys(text))             # 按出现顺序，不排序
    return {c: i for i, c in enumerate(itos)}, itos


def _overlapping_merge(ids, pair, idx):
    out = list(ids)                              # 把重叠的也算进去：aaa → 错
    for i in range(len(out) - 1):
        if (out[i], out[i + 1]) == pair:
            out[i] = idx
    return [t for t in out if t != pair[1]] if pair[0] != pair[1] else out


def _split_by_position(text):
    poems = [p + "\n" for p in text.split("\n") if p]
    n = int(0.9 * len(poems))
    return {"train": "".join(poems[:n]), "val": "".join(poems[n:]), "test": ""}


WRONG = {
    "build_vocab": _unsorted_vocab,
    "count_pairs": lambda ids: {p: 1 for p in zip(ids, ids[1:])},          # 忘了累加
    "merge_pair": _overlapping_merge,
    "shift_xy": lambda ids, s, t: (ids[s:s + t], ids[s:s + t]),            # 忘了错一位
    "split_by_poem": _split_by_position,
}


@pytest.mark.parametrize("name", sorted(WRONG))
def test_wrong_answers_fail_with_the_failing_input(name, capsys):
    assert getattr(gc.check.nb01, name)(WRONG[name]) is False
    out = capsys.readouterr().out
    assert "还不对 ✗" in out and name in out


def test_exceptions_and_non_callables_are_reported(capsys):
    def boom(ids):
        raise KeyError("x")

    assert gc.check.nb01.count_pairs(boom) is False
    assert "KeyError" in capsys.readouterr().out
    assert gc.check.nb01.merge_pair(42) is False
    assert "需要传入一个函数" in capsys.readouterr().out


def test_unfinished_exercise_says_not_done_and_is_recorded(capsys):
    def stub(ids):
        raise NotImplementedError("提示：数相邻的一对")

    assert gc.check.nb01.count_pairs(stub) is False
    assert "还没完成" in capsys.readouterr().out
    assert gc.check.nb01.merge_pair(None) is False
    assert "还没完成" in capsys.readouterr().out
    from gptcourse.check import _common
    assert _common.RESULTS["nb01.count_pairs"]["passed"] is False
    assert _common.RESULTS["nb01.count_pairs"]["message"] == "还没完成：提示：数相邻的一对"
    assert gc.check.nb01.count_pairs(gc.bpe.get_stats) is True
    assert _common.RESULTS["nb01.count_pairs"] == {
        "key": "nb01.count_pairs", "chapter": "nb01", "exercise": "count_pairs", "passed": True,
        "message": "正确"}


def test_every_exercise_has_a_wrong_answer_test():
    assert set(WRONG) | set(BPE_WRONG) == set(nb01.EXERCISES)
    assert len(nb01.EXERCISES) >= 8


def test_show_solution(capsys, monkeypatch):
    monkeypatch.setenv("GPTCOURSE_SOLUTIONS", "1")             # 老师打开了参考答案
    gc.check.show_solution("shift_xy")                         # 教师版笔记本里的答案单元格
    assert "def shift_xy(" in capsys.readouterr().out
    with pytest.raises(ValueError, match="可选"):
        gc.check.show_solution("nope")


# ---------------------------------------------------------------- BPE、预测题与近似重复（nb01_bpe）
from gptcourse.check import nb01_bpe  # noqa: E402


def _train_first_seen(text, vocab_size):
    chunks = [list(c.encode("utf-8")) for c in gc.bpe.split_chunks(text)]
    merges = {}
    for idx in range(256, vocab_size):
        counts = {}
        for ids in chunks:
            gc.bpe.get_stats(ids, counts)
        if not counts:
            break
        pair = max(counts, key=counts.get)                     # 并列时取先出现的，而不是最小的
        merges[pair] = idx
        chunks = [gc.bpe.merge(ids, pair, idx) for ids in chunks]
    return merges


def _train_never_stops(text, vocab_size):
    merges = gc.bpe.BPETokenizer.train(text, vocab_size=vocab_size).merges
    n = len(merges)
    return {**merges, **{(0, i): 256 + n + i for i in range(vocab_size - 256 - n)}}


def _encode_most_frequent(text, merges):
    out = []
    for chunk in gc.bpe.split_chunks(text):
        ids = list(chunk.encode("utf-8"))
        while True:
            stats = gc.bpe.get_stats(ids)
            known = [p for p in stats if p in merges]
            if not known:
                break
            pair = max(known, key=lambda p: (stats[p], -merges[p]))   # 出现最多的，而不是学得最早的
            ids = gc.bpe.merge(ids, pair, merges[pair])
        out.extend(ids)
    return out


def _decode_strict(ids, merges):
    vocab = {i: bytes([i]) for i in range(256)}
    for (a, b), idx in merges.items():
        vocab[idx] = vocab[a] + vocab[b]
    return b"".join(vocab[i] for i in ids).decode("utf-8")


def _decode_each(ids, merges):
    return "".join(gc.bpe.BPETokenizer(merges=merges).decode([i]) for i in ids)


def _near_exact_lines(a, b):
    la, lb = (set(re.split("[，。？！；]", gc.data.normalize_variants(p))) - {""} for p in (a, b))
    return 2 * len(la & lb) >= min(len(la), len(lb))


def _plain_near(a, b):
    def lines(p):
        return [s for s in re.split("[，。？！；]", p) if s]

    def same(x, y):
        return len(x) == len(y) and sum(c != d for c, d in zip(x, y)) <= 1

    la, lb = lines(a), lines(b)
    return 2 * sum(any(same(x, y) for y in lb) for x in la) >= min(len(la), len(lb))


def _near_longer(a, b):
    def lines(p):
        return [s for s in re.split("[，。？！；]", gc.data.normalize_variants(p)) if s]

    def same(x, y):
        return len(x) == len(y) and sum(c != d for c, d in zip(x, y)) <= 1

    la, lb = lines(a), lines(b)
    return 2 * sum(any(same(x, y) for y in lb) for x in la) >= max(len(la), len(lb))


BPE_WRONG = {
    "bpe_train": [(_train_first_seen, "最小"), (_train_never_stops, "提前停止"),
                  (lambda t, v: nb01_bpe._unchunked(t, v), "split_chunks")],
    "bpe_encode": [(_encode_most_frequent, "学得最早"),
                   (lambda t, m: list(t.encode("utf-8")), "原始字节")],
    "bpe_decode": [(_decode_strict, "errors='replace'"), (_decode_each, "拼在一起")],
    "near_duplicate": [(_near_exact_lines, "至多差一个字"), (_plain_near, "normalize_variants"),
                       (_near_longer, "较短"), (lambda a, b: a == b, "近似重复")],
    "guess_compression": [("B", "1024"), ("C", "字符"), ("Z", "选项字母")],
    "guess_leak": [("A", "复制"), ("B", "复制"), ("?", "选项字母")],
}


@pytest.mark.parametrize("name", sorted(BPE_WRONG))
def test_bpe_and_hygiene_checkers_reject_typical_mistakes(passes, name, capsys):
    checker = getattr(gc.check.nb01, name)
    for wrong, hint in BPE_WRONG[name]:
        ok, out = passes(checker, wrong)
        assert not ok and hint in out, (name, hint, out)


def test_plain_near_duplicate_really_differs_only_on_variants():
    a, b = "雪岫花开几树粧，城北无饥鵶。", "雪峰花开几树妆，城南无饥鸦。"
    assert gc.data.near_duplicate_groups([a, b]) == [[0, 1]]
    assert _plain_near(a, b) is False


def test_shift_xy_must_reject_windows_out_of_range(passes, capsys):
    def no_check(ids, s, t):
        return ids[s:s + t], ids[s + 1:s + t + 1]

    ok, out = passes(gc.check.nb01.shift_xy, no_check)
    assert not ok and "应报错" in out


def test_shift_xy_off_by_one_bound_is_rejected(passes):
    def off_by_one(ids, s, t):                  # 只检查了 x：start = len − T 时 y 少一个
        if s < 0 or s + t > len(ids):
            raise ValueError("越界")
        return ids[s:s + t], ids[s + 1:s + t + 1]

    ok, out = passes(gc.check.nb01.shift_xy, off_by_one)
    assert not ok and "shift_xy(ids, 16, 4)" in out and "start + T + 1 ≤ len(ids)" in out


def _near_edit_distance(a, b):                   # 编辑距离 ≤ 1：长度不同的句子也算“差一个字”
    def lines(p):
        return [s for s in re.split("[，。？！；]", gc.data.normalize_variants(p)) if s]

    def close(x, y):
        if len(x) == len(y):
            return sum(c != d for c, d in zip(x, y)) <= 1
        short, long_ = sorted((x, y), key=len)
        return len(long_) - len(short) == 1 and any(long_[:i] + long_[i + 1:] == short
                                                    for i in range(len(long_)))

    la, lb = lines(a), lines(b)
    return 2 * sum(any(close(x, y) for y in lb) for x in la) >= min(len(la), len(lb))


def test_near_duplicate_with_edit_distance_is_rejected(passes):
    ok, out = passes(gc.check.nb01.near_duplicate, _near_edit_distance)
    assert not ok and "白日依山尽远，江上一孤舟" in out and "不是近似重复" in out


def test_split_by_poem_failure_is_short(passes, capsys):
    def wrong_threshold(text):
        parts = {"train": [], "val": [], "test": []}
        for p in text.split("\n"):
            if p.strip():
                h = int(hashlib.sha256(p.encode("utf-8")).hexdigest()[:8], 16) % 100
                parts["train" if h < 80 else ("val" if h < 95 else "test")].append(p + "\n")
        return {k: "".join(v) for k, v in parts.items()}

    ok, out = passes(gc.check.nb01.split_by_poem, wrong_threshold)
    assert not ok and "应在 train" in out and len(out) < 200


# -------------------------------------------------- 审阅 2026-12-04（01–02）里漏过的错误答案
def _split_with(train_if, val_if):
    """按哈希桶划分，但边界由 ``train_if(h)`` / ``val_if(h)`` 决定（差一错误）。"""
    def split(text):
        parts = {"train": "", "val": "", "test": ""}
        for p in filter(str.strip, text.split("\n")):
            h = int(hashlib.sha256(p.encode("utf-8")).hexdigest()[:8], 16) % 100
            parts["train" if train_if(h) else ("val" if val_if(h) else "test")] += p + "\n"
        return parts
    return split


def test_boundary_poems_sit_in_the_buckets_they_claim():
    for poem, bucket in nb01._BOUNDARY.items():
        assert int(hashlib.sha256(poem.encode("utf-8")).hexdigest()[:8], 16) % 100 == bucket


@pytest.mark.parametrize("wrong, bucket", [
    (_split_with(lambda h: h <= 90, lambda h: h < 95), 90),           # 桶 90 进了训练集
    (_split_with(lambda h: h < 90, lambda h: h <= 95), 95),           # 桶 95 进了验证集
    (_split_with(lambda h: h < 90, lambda h: h < 94), 94),            # “90~94” 读成 90 ≤ h < 94
    (_split_with(lambda h: h < 89, lambda h: h < 95), 89),
])
def test_split_by_poem_rejects_off_by_one_bucket_boundaries(passes, wrong, bucket):
    """审阅 01–02 F4。"""
    ok, out = passes(gc.check.nb01.split_by_poem, wrong)
    assert not ok and f"h = {bucket}" in out and "90 ≤ h < 95" in out


def test_split_by_poem_names_dropped_duplicates(passes):
    """审阅 01–02 F15：去掉了重复的诗，提示不该说“顺序或换行不对”。"""
    right = _split_with(lambda h: h < 90, lambda h: h < 95)

    def dedup(text):
        return right("\n".join(dict.fromkeys(text.split("\n"))))

    ok, out = passes(gc.check.nb01.split_by_poem, dedup)
    assert not ok and "重复的诗被你去掉了" in out and "顺序" not in out


def _merge_by_text(ids, pair, idx):                   # 把 id 拼成文本再 str.replace
    text = "," + ",".join(map(str, ids)) + ","
    text = text.replace(f"{pair[0]},{pair[1]}", str(idx))
    return [int(t) for t in text.strip(",").split(",") if t]


def test_merge_pair_rejects_a_str_replace_merge_that_breaks_at_digit_boundaries(passes):
    """审阅 01–02 F7：[12, 3] 按 (2, 3) 合并成 [1300]。"""
    assert _merge_by_text([97, 97, 98], (97, 98), 256) == [97, 256]     # 三位数的字节上它是对的
    ok, out = passes(gc.check.nb01.merge_pair, _merge_by_text)
    assert not ok and ("[12, 3]" in out or "[256, 97]" in out)


def test_bpe_train_rejects_identical_chunks_counted_once(passes):
    """审阅 01–02 F6：相同的块只留一份，却没有按出现次数加权。"""
    ok, out = passes(gc.check.nb01.bpe_train, nb01_bpe._unweighted)
    assert not ok and "加权" in out


@pytest.mark.parametrize("wrong, hint", [
    (nb01_bpe._encoder(lambda ps, st, m: min(ps)), "不是 id 对本身的数值大小"),
    (nb01_bpe._encoder(lambda ps, st, m: max(ps, key=m.get)), "最后学到的"),
    (nb01_bpe._encoder(lambda ps, st, m: min(ps, key=m.get), once=True), "只合并了一次"),
])
def test_bpe_encode_names_the_actual_wrong_choice(passes, wrong, hint):
    """审阅 01–02 F15：选错对或只合并一次，提示不该说“而不是出现最多的那一对”。"""
    ok, out = passes(gc.check.nb01.bpe_encode, wrong)
    assert not ok and hint in out and "出现最多" not in out
