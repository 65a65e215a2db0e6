"""笔记本 01（数据与分词）的练习检查器：用几组输入把你的函数与包里的版本（``gc.bpe``、``gc.data``、
``gc.tokenizer``）逐一比较，打印第一个不一致的输入。"""
from __future__ import annotations

from collections.abc import Callable

import torch

from ..bpe import get_stats, merge
from ..data import WindowDataset, split_of
from ..tokenizer import CharTokenizer
from ._common import _call, _compare, _fail, _got, _ok, exercise

# 本笔记本的练习，按出现顺序
EXERCISES = ("build_vocab", "count_pairs", "merge_pair", "bpe_train", "bpe_encode", "bpe_decode",
             "guess_compression", "split_by_poem", "near_duplicate", "guess_leak", "shift_xy")
__all__ = list(EXERCISES)

_POEMS = "床前明月光，疑是地上霜。\n举头望明月，低头思故乡。\n白日依山尽，黄河入海流。\n"
# 哈希桶正好落在边界上的诗（h = 89 / 90 / 94 / 95）：h <= 90、h < 94 这类差一错误只在这里露出来
_BOUNDARY = {"红豆生南国，低头思故乡。": 90, "空山不见人，处处闻啼鸟。": 94,
             "春来发几枝，复照青苔上。": 95, "春眠不觉晓，千山鸟飞绝。": 89}


# ---------------------------------------------------------------- 参考：包里的函数
def _vocab(text: str) -> tuple[dict[str, int], list[str]]:
    """``CharTokenizer`` 的字符表去掉 id 0 的 ``<unk>``：按字符排序分配 id。"""
    itos = CharTokenizer.from_text(text).itos[1:]
    return {ch: i for i, ch in enumerate(itos)}, itos


def _window(ids: list[int], start: int, block_size: int) -> tuple[list[int], list[int]]:
    x, y = WindowDataset(torch.tensor(ids), block_size)[start]
    return x.tolist(), y.tolist()


def _splits(text: str) -> dict[str, str]:
    """``gc.data.split_of`` 把每首诗分到 train/val/test，保持原有顺序。"""
    parts = {"train": "", "val": "", "test": ""}
    for poem in filter(str.strip, text.split("\n")):
        parts[split_of(poem)] += poem + "\n"
    return parts


from .nb01_bpe import (  # noqa: E402,F401  BPE 与数据卫生的练习（一个模块放不下）
    bpe_decode,
    bpe_encode,
    bpe_train,
    guess_compression,
    guess_leak,
    near_duplicate,
)


# ---------------------------------------------------------------- 检查器
@exercise
def build_vocab(fn: Callable[[str], tuple[dict, list]]) -> bool:
    """练习：``fn(text) -> (stoi, itos)``，id 按字符排序，stoi 与 itos 互逆。"""
    cases = [(_POEMS,), ("春眠不觉晓",), ("ba\nab",), ("a",)]

    def norm(v):
        stoi, itos = v
        return dict(stoi), list(itos)

    return _compare(fn, _vocab, cases, "build_vocab", norm)


@exercise
def count_pairs(fn: Callable[[list[int]], dict]) -> bool:
    """练习：``fn(ids) -> {(a, b): 次数}``，即 get_stats。"""
    cases = [([1, 2, 3, 1, 2],), ([97, 97, 97],), ([5],), ([],),
             (list("春风又绿江南岸".encode("utf-8")),)]
    return _compare(fn, get_stats, cases, "count_pairs", dict)


@exercise
def merge_pair(fn: Callable[[list[int], tuple[int, int], int], list[int]]) -> bool:
    """练习：``fn(ids, pair, idx)`` 从左到右替换不重叠的 pair，即 merge。"""
    cases = [([1, 2, 3, 1, 2], (1, 2), 4), ([97, 97, 97], (97, 97), 256),
             ([97, 97, 97, 97], (97, 97), 256), ([1, 2], (2, 1), 9), ([], (1, 2), 3),
             ([1, 2, 1], (1, 2), 300),
             ([12, 3], (2, 3), 300), ([256, 97], (56, 97), 300)]    # 按数字的文本替换会在这里出错
    return _compare(fn, merge, cases, "merge_pair", list)


@exercise
def shift_xy(fn: Callable[[list[int], int, int], tuple]) -> bool:
    """练习：``fn(ids, start, block_size) -> (x, y)``，y 比 x 错后一位。"""
    ids = list(range(100, 120))
    cases = [(ids, 0, 4), (ids, 3, 8), (ids, 15, 4), ([7, 8], 0, 1)]

    def norm(v):
        x, y = v
        return [int(t) for t in x], [int(t) for t in y]

    for args in cases:                              # 先安静地比一遍；有不同就让 _compare 报告
        got, err = _call(fn, *args)
        try:
            same = err is None and norm(got) == norm(_window(*args))
        except Exception:  # noqa: BLE001
            same = False
        if not same:
            return _compare(fn, _window, cases, "shift_xy", norm)
    # 窗口越界：x 或 y 会被截短。16 = len − T 是最常见的差一错误（只检查了 start + T ≤ len，
    # 忘了 y 还要多一个 id）：x 有 4 个，y 只有 3 个
    for start in (len(ids) - 4, 17, -1):
        try:
            fn(ids, start, 4)
        except (ValueError, IndexError):
            continue
        except Exception as e:  # noqa: BLE001
            return _fail(f"shift_xy(ids, {start}, 4) 应抛出 ValueError，收到 {type(e).__name__}")
        extra = ("（len(ids) = 20，从 16 开始 x 有 4 个，y 只剩 3 个：条件应是 "
                 "start + T + 1 ≤ len(ids)，不是 start + T ≤ len(ids)）"
                 if start == len(ids) - 4 else "")
        return _fail(f"shift_xy(ids, {start}, 4) 应报错：从 {start} 开始取不出 4 + 1 个 id，"
                     f"静默地返回截短的窗口会让 x、y 长度不一{extra}")
    return _ok()


@exercise
def split_by_poem(fn: Callable[[str], dict]) -> bool:
    """练习：``fn(text) -> {"train":…, "val":…, "test":…}``，按诗的内容哈希划分。"""
    from ..runtime import DATA_DIR

    lines = (DATA_DIR / "tangshi300.txt").read_text(encoding="utf-8").split("\n")[:150]
    poems = [p for p in lines if p.strip()] + ["白日依山尽，黄河入海流。"] * 3   # 含重复
    boundary = "".join(p + "\n" for p in _BOUNDARY)
    for text in (_POEMS, boundary, "\n".join(poems) + "\n"):
        got = _got(fn, text, where="split_by_poem(...) ")
        if not isinstance(got, dict) or set(got) != {"train", "val", "test"}:
            return _fail("应返回 {'train': …, 'val': …, 'test': …} 三个键的字典")
        want = _splits(text)
        if got == want:
            continue
        where = {}
        for split in ("train", "val", "test"):
            for p in str(got[split]).split("\n"):
                where.setdefault(p, split)
        for k, p in enumerate(q for q in text.split("\n") if q.strip()):
            right = next(sp for sp in ("train", "val", "test") if p + "\n" in want[sp])
            if where.get(p) != right:
                h = (f"（它的哈希桶 h = {_BOUNDARY[p]}，正在边界上：h < 90 → train，"
                     "90 ≤ h < 95 → val，其余 → test）") if p in _BOUNDARY else ""
                return _fail(f"split_by_poem：第 {k + 1} 首诗（{p[:12]}……）应在 {right}，"
                             f"你放进了 {where.get(p, '任何划分之外')}{h}")
        if all(str(got[sp]).splitlines() == list(dict.fromkeys(want[sp].splitlines()))
               for sp in got):
            return _fail("重复的诗被你去掉了：这里只按哈希划分，每首诗（包括重复出现的）都原样"
                         "放进它的划分；去重是后面近似重复一节的事")
        return _fail("每首诗的去处都对，但顺序或换行不对：保持原有顺序，每首诗后面保留一个换行")
    return _ok()
