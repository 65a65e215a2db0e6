"""笔记本 01 的第二组练习（字节级 BPE、两道预测题、近似重复）：参考是 ``gc.bpe``、``gc.data``。"""
from __future__ import annotations

from ..bpe import BPETokenizer, get_stats, merge, split_chunks
from ..data import near_duplicate_groups
from ._common import _call, _fail, _got, _ok, choice, exercise

_TEXT = ("床前明月光，疑是地上霜。举头望明月，低头思故乡。\n"
         "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。\n"
         "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。\n"
         "明月松间照，清泉石上流。明月几时有，春风又绿江南岸。\n")
_REPEATED = _TEXT + "白日依山尽，" * 2 + "\n"      # 同一块出现 3 次：次数要按块的出现次数加权


# ---------------------------------------------------------------- 检查器
def _learn(chunks: list[list[int]], vocab_size: int) -> dict:
    """每块等权地学合并规则（参考是 ``BPETokenizer.train``；这里只用来认出两种常见错误）。"""
    merges = {}
    for idx in range(256, vocab_size):
        counts: dict = {}
        for ids in chunks:
            get_stats(ids, counts)
        if not counts:
            break
        pair = min(counts, key=lambda p: (-counts[p], p))
        merges[pair] = idx
        chunks = [merge(ids, pair, idx) for ids in chunks]
    return merges


def _unchunked(text: str, vocab_size: int) -> dict:
    return _learn([list(text.encode("utf-8"))], vocab_size)


def _unweighted(text: str, vocab_size: int) -> dict:
    return _learn([list(c.encode("utf-8")) for c in dict.fromkeys(split_chunks(text))], vocab_size)


_TRAIN_MISTAKES = (
    (_unchunked, "合并跨过了块的边界：先用 gc.bpe.split_chunks(text) 切块，"
                 "只在块内数相邻对、做合并"),
    (_unweighted, "相同的块只留了一份，却没有按它出现的次数加权：一个块出现 3 次，它里面的每一对"
                  "也要算 3 次（get_stats(ids, counts, weight=次数)）"),
)


@exercise
def bpe_train(fn) -> bool:
    """练习：``fn(text, vocab_size) -> merges``（{(a, b): 新 id}，按学到的顺序）。"""
    for text, vs in (("aaabdaaabac", 259), (_TEXT, 300), (_REPEATED, 300), ("ab", 300), ("", 260)):
        got = _got(fn, text, vs, where=f"bpe_train({text[:8]!r}…, {vs}) ")
        if not isinstance(got, dict):
            return _fail(f"应返回字典 {{(a, b): 新 id}}，收到 {type(got).__name__}")
        want = BPETokenizer.train(text, vocab_size=vs).merges
        got_items = [(tuple(k), v) for k, v in got.items()]
        if got_items == list(want.items()):
            continue
        if len(got) != len(want):
            extra = "没有可合并的 id 对时要提前停止；" if len(want) < vs - 256 else ""
            return _fail(f"vocab_size={vs} 时应学 {len(want)} 条合并规则，你学了 {len(got)} 条。"
                         f"{extra}新 id 从 256 开始，一直到 vocab_size − 1")
        for mistake, hint in _TRAIN_MISTAKES:
            if got_items == list(mistake(text, vs).items()):
                return _fail(hint)
        k = next(i for i, (a, b) in enumerate(zip(got_items, want.items())) if a != b)
        return _fail(f"第 {k + 1} 条合并规则不同：你的是 {got_items[k]}，"
                     f"应为 {list(want.items())[k]}。"
                     "每轮选出现次数最多的一对，次数相同时选数值最小的一对（min 按 (−次数, 对)）")
    return _ok()


def _encoder(pick, once: bool = False):
    """按 ``pick(可用的对, 次数, merges)`` 选对的编码（认出选错对、只合并一次的常见错误用）。"""
    def encode(text: str, merges: dict) -> list[int]:
        out = []
        for chunk in split_chunks(text):
            ids = list(chunk.encode("utf-8"))
            while True:
                stats = get_stats(ids)
                known = [p for p in stats if p in merges]
                if not known:
                    break
                pair = pick(known, stats, merges)
                ids = merge(ids, pair, merges[pair])
                if once:
                    break
            out.extend(ids)
        return out
    return encode


_EARLIEST = "每一步合并“学得最早”的那一对（merges 里新 id 最小的），直到没有一对在 merges 里为止"
_ENCODE_MISTAKES = (
    (_encoder(lambda ps, st, m: max(ps, key=lambda p: (st[p], -m[p]))),
     "，而不是在这段文字里出现最多的那一对"),
    (_encoder(lambda ps, st, m: min(ps)), "：比的是新 id（学到的先后），不是 id 对本身的数值大小"),
    (_encoder(lambda ps, st, m: max(ps, key=m.get)), "：你选的是新 id 最大的（最后学到的）那一对"),
    (_encoder(lambda ps, st, m: min(ps, key=m.get), once=True), "：你每块只合并了一次"),
)


@exercise
def bpe_encode(fn) -> bool:
    """练习：``fn(text, merges) -> ids``，结果必须与 ``BPETokenizer.encode`` 相同。"""
    trained = BPETokenizer.train(_TEXT * 3, vocab_size=330)
    ordered = BPETokenizer({(98, 99): 256, (97, 98): 257})   # “ab” 更常见，但 “bc” 学得更早
    cases = [(trained, t) for t in ("明月", "床前明月光，疑是地上霜。", _TEXT, "春风🙂 abc\n", "")]
    cases += [(ordered, "abcab"), (ordered, "abcbc"),          # 再分开“最常见”“数值最小”“最后学到”
              (BPETokenizer({(97, 98): 256, (98, 99): 257}), "abc")]
    runs = [(tok, text, _got(fn, text, dict(tok.merges), where=f"bpe_encode({text[:8]!r}…) "))
            for tok, text in cases]
    for tok, text, got in runs:
        want = tok.encode(text)
        if isinstance(got, (list, tuple)) and list(got) == want:
            continue
        if isinstance(got, (bytes, bytearray)) or got == list(text.encode("utf-8")):
            return _fail("你返回的是原始字节：还要按合并规则反复合并")
        why = next((h for f, h in _ENCODE_MISTAKES            # 每个输入都对得上才点名这种错误
                    if all(g == f(t, dict(k.merges)) for k, t, g in runs)), "")
        return _fail(f"{text[:12]!r} 的编码不同：你的 {got!r}，应为 {want}。{_EARLIEST}{why}")
    return _ok()


@exercise
def bpe_decode(fn) -> bool:
    """练习：``fn(ids, merges) -> str``；半个汉字的字节显示为 “�”。"""
    tok = BPETokenizer.train(_TEXT * 3, vocab_size=330)
    chun = list("春".encode("utf-8"))
    cases = [tok.encode(_TEXT), tok.encode("明月🙂"), chun[:2], chun[:2] + chun[2:], []]
    for ids in cases:
        got, err = _call(fn, ids, dict(tok.merges))
        if err:
            if "UnicodeDecodeError" in err:
                return _fail("半个汉字的字节不是合法的 UTF-8：解码时用 "
                             "bytes.decode('utf-8', errors='replace')，不完整的部分显示为 “�”")
            return _fail(f"bpe_decode({ids[:6]}…) {err}")
        want = tok.decode(ids)
        if got == want:
            continue
        if ids and got == "".join(tok.decode([i]) for i in ids):
            return _fail("你把每个词元单独解码再拼起来：半个汉字单独解码会变成 “�”。"
                         "应先把所有字节拼在一起，再整体解码")
        return _fail(f"ids {ids[:6]}… 解码为 {got!r}，应为 {want!r}")
    return _ok()


@exercise
def guess_compression(guess, ratio: dict | None = None) -> bool:
    """预测题；``ratio``：{"字符（1024）": 每字词元数, "BPE（1024）": …}，差 < 0.02 算一样。"""
    right, seen = "A", ""
    if ratio is not None:
        char, bpe = float(ratio["字符（1024）"]), float(ratio["BPE（1024）"])
        right = "C" if abs(char - bpe) < 0.02 else ("A" if char < bpe else "B")
        seen = f"这次量到的每字词元数：字符 {char:.3f}，BPE {bpe:.3f}"
    nudge = ("字符分词每个字是几个词元（罕见字变成 <unk> 也算一个）？"
             "1024 个 BPE 词元里，256 个花在单字节上，剩下的合并够不够覆盖常用字？")
    return choice(guess, right, why=seen, hints=nudge)


@exercise
def guess_leak(guess, overlap: float | None = None) -> bool:
    """预测题；``overlap``：这次量出的比例（0–1），< 20 % 是 A，< 80 % 是 B，否则 C。"""
    right, seen = "C", ""
    if overlap is not None:
        right = "A" if overlap < 0.2 else ("B" if overlap < 0.8 else "C")
        seen = f"这次量到验证集 {overlap:.0%} 的句子在训练集里出现过"
    nudge = "复制 50 遍之后，最后 10% 的文本是哪几首诗的第几遍复制？前面 90% 里有没有它们？"
    return choice(guess, right, why=seen, hints=nudge)


_NEAR_CASES = [
    # (a, b, 说明)：说明用于错误提示
    ("白日依山尽，黄河入海流。", "白日依山尽，黄河入海流。", "完全相同"),
    ("城北无饥鸦，城南有战马。", "城北无饥鵶，城南有战马。", "只差一个异体字（鵶/鸦）"),
    ("万方资以化，交泰属升平。", "万物资以化，交泰属升平。", "一句里差一个字"),
    ("春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。",
     "春眠不觉晓，处处闻啼鸟。山中一夜雨，树杪百重泉。", "四句里有两句相同（正好一半）"),
    ("春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。",
     "春眠不觉晓，江上闻啼鸟。山中一夜雨，树杪百重泉。", "四句里只有一句相同"),
    ("春眠不觉晓，处处闻啼鸟。", "春眠不知晓，处处闻鸣鸟。", "两句各差一个字"),
    ("春眠不觉晓，处处闻啼鸟。", "秋眠不知晓，处处闻啼鸟。", "一句差两个字、一句相同"),
    ("床前明月光，疑是地上霜。", "床前明月光，疑是地上霜。举头望明月，低头思故乡。",
     "短的两句都在长的四句里（按较短那首算一半）"),
    ("床前明月光，疑是地上霜。举头望明月，低头思故乡。", "床前明月光，江上一孤舟。",
     "短的那首两句里有一句在长的里面（正好是较短那首的一半）"),
    ("白日依山尽，黄河入海流。", "白日依山尽远，黄河入海流。", "句长不同不算“差一个字”"),
    ("白日依山尽，黄河入海流。", "白日依山尽远，江上一孤舟。",
     "句长不同不算“差一个字”（编辑距离 1 也不算：两句都要同长）"),
    ("雪岫花开几树粧，城北无饥鵶。", "雪峰花开几树妆，城南无饥鸦。", "每句一个异体字加一个异文"),
]


@exercise
def near_duplicate(fn) -> bool:
    """练习：``fn(a, b) -> bool``，与 ``gc.data.near_duplicate_groups`` 的判据一致。"""
    for a, b, what in _NEAR_CASES:
        want = near_duplicate_groups([a, b]) == [[0, 1]]
        got = _got(fn, a, b, where=f"near_duplicate({a[:6]}…, {b[:6]}…) ")
        if not isinstance(got, bool):
            return _fail(f"应返回 True 或 False，收到 {got!r}")
        if got != want:
            verdict = "是" if want else "不是"
            return _fail(f"“{a}” 与 “{b}”（{what}）{verdict}近似重复，你的函数返回了 {got}。"
                         "判据：归一异体字（gc.data.normalize_variants）之后，较短那首至少一半的句子"
                         "在另一首里有至多差一个字的同长句子")
    return _ok()
