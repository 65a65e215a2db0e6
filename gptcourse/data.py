"""语料与批次：按名字加载 data/ 里的语料，按诗切分，切出训练窗口。

数据流：文本 (str) ──分词器──► ids (1-D LongTensor) ──get_batch / WindowDataset──► (x, y)
其中 y 就是 x 向右错一位：x[t] 之后的下一个字正是 y[t]。
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import Dataset

from .errors import MissingFileError, UserError
from .runtime import DATA_DIR
from .titles import TITLE_MARKS
from .verse import LINE_ENDS, poem_form

# 名字 → (说明, 是否已分好 train/val/test 三个文件)
CORPORA: dict[str, tuple[str, bool]] = {
    "tang_jinti": ("唐代近体诗（五绝、五律、七绝、七律），课程默认语料", True),
    "tang_5jue": ("五言绝句子集，小而快，适合演示与过拟合实验", True),
    "tangshi300": ("唐诗三百首（熟悉的提示词来源）", False),
    "luxun_nahan": ("鲁迅《呐喊》（现代白话散文，用来对比分词器）", False),
}
SPLITS = ("train", "val", "test")


def available_corpora() -> list[str]:
    """data/ 里可以按名字加载的语料。"""
    return list(CORPORA)


def split_of(poem: str) -> str:
    """按内容哈希决定一首诗属于哪个划分（与 data/SOURCES.md 的规则一致）。

    同一首诗无论出现在哪个语料里，都落在同一个划分，所以不会"训练集见过、验证集又考"。

    >>> split_of("白日依山尽，黄河入海流。欲穷千里目，更上一层楼。")
    'train'
    """
    h = int(hashlib.sha256(poem.encode("utf-8")).hexdigest()[:8], 16) % 100
    return "train" if h < 90 else ("val" if h < 95 else "test")


# ---------------------------------------------------------------- 近似重复与干净的划分
# 异体字 → 通行字，只用于“两首诗是不是同一首”的比较，从不改动语料本身。这些对子是从近似重复的
# 诗之间“只差一个字”的句子里统计出来、再逐一人工核对过的（scripts/build_splits.py 会打印候选）；
# 只收“同一个词的两种写法”，不收“日/月”“晓/晚”这种真正的异文。
VARIANTS = dict(zip(
    "鴈猨埽歛堦嗁妬翦罇暎劒櫂飜竝蹏廻徧桮羇鵶棃珮粧彊缾蠭慙遰褭帬煖鏁疎牀峯羣蹤隣敧牕隄嬾悮",
    "雁猿扫敛阶啼妒剪樽映剑棹翻并蹄回遍杯羁鸦梨佩妆强瓶蜂惭递袅裙暖锁疏床峰群踪邻欹窗堤懒误"))
_NORMALIZE = str.maketrans(VARIANTS)
_LINE_END = re.compile(f"[{LINE_ENDS}]")                 # 断句与 verse 相同


def normalize_variants(text: str) -> str:
    """把异体字换成通行字（只为比较）。

    >>> normalize_variants("鴈声远过潇湘去")
    '雁声远过潇湘去'
    """
    return text.translate(_NORMALIZE)


MIN_NEAR_LINE = 4      # 比这短的句不用来认近似重复（一两个字的句“只差一个字”太容易；诗句都更长）
MAX_NEAR_LINE = 64     # 比这长的句只认完全相同（“挖掉一个字”的键是 O(长度²)：
                       # 一行 3 MB 没有标点的文本会耗尽内存）


def _keys(line: str) -> list[str]:
    """一句的索引键：每个“挖掉一个字”的写法；太长的句只用它自己（只认完全相同）。"""
    if len(line) > MAX_NEAR_LINE:
        return ["\0\0" + line]
    return [line[:k] + "\0" + line[k + 1:] for k in range(len(line))]


def _lines(poem: str) -> list[str]:
    parts = _LINE_END.split(normalize_variants(poem))
    return [line for line in parts if len(line) >= MIN_NEAR_LINE]


NEAR_WORK_PER_KEY = 8          # 近似重复的比较次数最多是“索引里的（键, 篇）对数”的这么多倍，
NEAR_WORK_FLOOR = 2_000_000    # 再加这么多：小语料、几百篇套话一样的文本总是逐对比到底


def _common_cap(index: dict[str, set[int]]) -> int:
    """桶大小的上限 K：只由不超过 K 篇共有的键两两比较，总次数 Σ|桶|² 不超过预算。

    一句话同时出现在成千上万篇里，是套话（“本章完”“作者：佚名”），不是重复的证据；
    逐对比较却要平方的时间。内置语料最大的桶只有 21 篇，K 从不生效。
    """
    sizes: dict[int, int] = {}
    for bucket in index.values():
        sizes[len(bucket)] = sizes.get(len(bucket), 0) + 1
    budget = NEAR_WORK_PER_KEY * sum(s * n for s, n in sizes.items()) + NEAR_WORK_FLOOR
    cap = work = 0
    for s in sorted(sizes):
        work += s * s * sizes[s]
        if work > budget:
            break
        cap = s
    return cap


def _near_pairs(poems: list[str], stats: dict[str, int] | None = None) -> list[tuple[int, int]]:
    """所有近似重复的诗对 (i, j)，i < j（太常见的句子只连出等价的一组边，见下）。

    两句“相同”：归一异体字之后至多差一个字（同长）。两首诗 i < j 近似重复：i 的句子里，在 j 中
    有“相同”句子的句数 n 满足 2n ≥ 两首中较短那首的句数。用“挖掉一个字”的句子作索引键，整个
    语料一秒左右。

    最坏情况也是近线性的：共有一个键的篇超过 :func:`_common_cap` 篇时，这个键不再逐对展开。
    它仍然计数——两篇已经由别的句子连上时，逐篇查它在不在这个桶里；桶里有至多两句的短篇时，
    一句相同就够，所以用两颗“星”连起整个桶（最小下标的短篇连每一篇，最小下标的一篇连每个
    短篇：连通的组、以及“某篇有没有前面的伙伴”都与逐对比较相同）。只漏掉一种：两篇都不短、
    相同的句子全是这种套话。``stats`` 给出时记下 ``compared``（做了多少次比较）和 ``cap``。
    """
    lines = [_lines(p) for p in poems]
    index: dict[str, set[int]] = {}
    for i, ls in enumerate(lines):
        for line in ls:
            for key in _keys(line):
                index.setdefault(key, set()).add(i)
    cap = _common_cap(index)
    compared = 0
    pairs = set()
    for i, ls in enumerate(lines):
        shared: dict[int, int] = {}
        deferred = []                           # 含套话键的句：(已由普通键找到的篇, 套话的桶)
        for line in ls:
            line_keys = _keys(line)
            small = [index[k] for k in line_keys if len(index[k]) <= cap]
            common = [index[k] for k in line_keys if len(index[k]) > cap]
            hits = set().union(*small)
            compared += sum(map(len, small))
            for j in hits:
                if j > i:
                    shared[j] = shared.get(j, 0) + 1
            if common:
                deferred.append((hits, common))
        for hits, common in deferred:
            for j in shared:
                compared += 1
                if j not in hits and any(j in bucket for bucket in common):
                    shared[j] += 1
        pairs.update((i, j) for j, n in shared.items()
                     if ls and 2 * n >= min(len(ls), len(lines[j])))
    for bucket in (b for b in index.values() if len(b) > cap):
        short = [i for i in bucket if len(lines[i]) <= 2]
        compared += len(bucket)
        if short:
            first, s = min(bucket), min(short)
            pairs.update((min(s, j), max(s, j)) for j in bucket if j != s)
            pairs.update((first, j) for j in short if j != first)
    if stats is not None:
        stats.update(compared=compared, cap=cap)
    return sorted(pairs)


def near_duplicate_groups(poems: list[str]) -> list[list[int]]:
    """把近似重复的诗（异体字、一字之差的异文、同一首诗的两个版本）连成组。

    返回每组的下标（升序），只列两首及以上的组；组按第一个下标排序。

    >>> near_duplicate_groups(["白日依山尽，黄河入海流。", "白日依山尽，黄河入海留。",
    ...                        "春眠不觉晓，处处闻啼鸟。"])
    [[0, 1]]
    """
    parent = list(range(len(poems)))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    first: dict[str, int] = {}                  # 完全相同的诗先连起来，近似的比较只做一次（几万行
    for i, p in enumerate(poems):               # 同样的“哈哈哈哈”不再是平方的时间）
        parent[i] = first.setdefault(p, i)
    unique = sorted(first.values())
    for a, b in _near_pairs([poems[i] for i in unique]):
        parent[root(unique[a])] = root(unique[b])
    groups: dict[int, list[int]] = {}
    for i in range(len(poems)):
        groups.setdefault(root(i), []).append(i)
    return sorted(g for g in groups.values() if len(g) > 1)


def assign_splits(poems: list[str]) -> list[str]:
    """干净的划分：一组近似重复的诗整组去同一个划分。

    组的去处由组里按字典序最小的那首诗的内容哈希决定（:func:`split_of`，与旧规则同一个哈希），
    所以结果与诗在文件里的顺序无关；没有近似重复的诗，去处与旧规则完全相同。
    """
    out = [split_of(p) for p in poems]
    for group in near_duplicate_groups(poems):
        split = split_of(min(poems[i] for i in group))
        for i in group:
            out[i] = split
    return out


def leak_count(train_poems: list[str], eval_poems: list[str]) -> int:
    """评估集里有多少首诗与训练集的某首诗近似重复（判据同 :func:`near_duplicate_groups`）。"""
    n = len(train_poems)
    return len({j - n for i, j in _near_pairs(train_poems + eval_poems) if i < n <= j})


def poems(text: str) -> list[str]:
    """把"一行一首"的文本拆成诗的列表（去掉空行）。"""
    return [line for line in text.split("\n") if line.strip()]


@dataclass(frozen=True)
class Corpus:
    """一份语料的三个划分；每个划分都是"一行一首、以换行结尾"的字符串。"""
    name: str
    description: str
    train: str
    val: str
    test: str

    def split(self, name: str) -> str:
        if name not in SPLITS:
            raise UserError(f"未知的划分 {name!r}；可选：{', '.join(SPLITS)}")
        return getattr(self, name)

    def __repr__(self) -> str:
        sizes = ", ".join(f"{s}={len(poems(self.split(s))):,} 行" for s in SPLITS)
        return f"Corpus({self.name!r}: {sizes})"


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def load_corpus(name: str = "tang_jinti", data_dir: Path | str | None = None) -> Corpus:
    """按名字加载语料，不依赖当前工作目录。

    已分好三个文件的语料直接读取；单文件语料（唐诗三百首、《呐喊》）按同一条
    哈希规则逐行分配到 train/val/test。
    """
    if name not in CORPORA:
        raise UserError(f"没有名为 {name!r} 的语料；可用的语料：{', '.join(available_corpora())}")
    root = Path(data_dir) if data_dir is not None else DATA_DIR
    description, pre_split = CORPORA[name]
    if pre_split:
        parts = {}
        for s in SPLITS:
            path = root / f"{name}.{s}.txt"
            if not path.exists():
                raise MissingFileError(f"找不到语料文件 {path.name}（应在 {root} 中）")
            parts[s] = _read(path)
    else:
        path = root / f"{name}.txt"
        if not path.exists():
            raise MissingFileError(f"找不到语料文件 {path.name}（应在 {root} 中）")
        buckets: dict[str, list[str]] = {s: [] for s in SPLITS}
        for line in poems(_read(path)):
            buckets[split_of(line)].append(line + "\n")
        parts = {s: "".join(lines) for s, lines in buckets.items()}
    return Corpus(name=name, description=description, **parts)


# ---------------------------------------------------------------- 你自己的文本
DOCUMENTS = ("lines", "paragraphs")     # 一行一篇，或空行分开的一段一篇
MAX_TEXT_BYTES = 512 * 2**20            # 自己的语料最多这么大（整个读进内存）
VERSE_SHARE = 0.9                       # 训练集里至少这么多篇是近体诗，才算“诗的语料”
PARAGRAPH_LINES = 20                    # 自动判断：平均一段不超过这么多行，才按段切
_BLANK = re.compile(r"\n[ \t\u3000]*\n+")   # 一个或几个空行（可以含空格、全角空格）


def read_text_file(path: Path | str) -> str:
    """读一个 UTF-8 文本文件；空文件、二进制文件、解不开的字节 → UserError（说出字节的位置）。"""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path} 是目录：请给一个文本文件（或内置语料的名字）")
    if path.exists() and not path.is_file():
        raise UserError(f"{path} 不是普通文件（FIFO、设备……）：请给一个文本文件")
    if not path.is_file():
        raise MissingFileError(f"找不到语料文件 {path}（也不是内置语料的名字："
                               f"{', '.join(available_corpora())}）")
    size = path.stat().st_size
    if size > MAX_TEXT_BYTES:
        raise UserError(f"{path.name} 有 {size / 2**20:,.0f} MiB，"
                        f"最多 {MAX_TEXT_BYTES // 2**20} MiB")
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise UserError(f"读不了 {path}：{e.strerror or e}") from None
    nul = raw.find(b"\0")
    if nul >= 0:
        raise UserError(f"{path.name} 看起来是二进制文件（第 {nul} 个字节是 NUL），"
                        "请给一个 UTF-8 的文本文件")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path.name} 不是 UTF-8：第 {e.start} 个字节（0x{raw[e.start]:02x}）"
                        "解不开（GBK 的文件请先转成 UTF-8，例如 iconv -f GBK -t UTF-8）") from None
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        raise UserError(f"{path.name} 是空的（没有一个非空白的字）")
    return text


def _join_lines(block: str) -> str:
    """一段里被硬换行断开的几行接回一行：两边都是汉字等非 ASCII 字时直接接上，否则隔一个空格。"""
    out = ""
    for line in (ln.strip() for ln in block.split("\n")):
        if line:
            glue = "" if not out or (not out[-1].isascii() and not line[0].isascii()) else " "
            out += glue + line
    return out


def split_documents(text: str, documents: str | None = None) -> tuple[list[str], str]:
    """文本 → (篇的列表, 用的切法)。``"lines"``：一行一篇；``"paragraphs"``：空行分开的一段一篇，
    段内的换行去掉（换行在课程里是“一篇结束”的记号）。``None``：有空行分段、段不止一行、平均
    一段不超过 ``PARAGRAPH_LINES`` 行时按段（一首诗一段、分行写），否则按行（《呐喊》这样一行一段、
    空行只隔开各篇小说的文本，按行才有足够多的篇）。

    >>> split_documents("床前明月光，\\n疑是地上霜。\\n\\n举头望明月，\\n低头思故乡。\\n")
    (['床前明月光，疑是地上霜。', '举头望明月，低头思故乡。'], 'paragraphs')
    """
    if documents is not None and documents not in DOCUMENTS:
        raise UserError(f"documents 只能是 {' 或 '.join(DOCUMENTS)}，收到 {documents!r}")
    blocks = [b for b in _BLANK.split(text.strip("\n")) if b.strip()]
    if documents is None:                   # 空行常见、一段平均不超过 PARAGRAPH_LINES 行：按段
        lines = sum(1 for ln in text.split("\n") if ln.strip())
        short = len(blocks) * PARAGRAPH_LINES >= lines
        documents = "paragraphs" if len(blocks) > 1 and lines > len(blocks) and short else "lines"
    if documents == "lines":
        return [ln.strip() for ln in text.split("\n") if ln.strip()], documents
    return [_join_lines(b) for b in blocks], documents


def text_corpus(path: Path | str, documents: str | None = None) -> Corpus:
    """自己的 UTF-8 文本 → 语料：按篇切开（:func:`split_documents`），与内置语料同一条规则
    划分（内容哈希，近似重复的整组去同一个划分，:func:`assign_splits`）。验证集一篇都没分到时
    UserError。"""
    path = Path(path)
    docs, how = split_documents(read_text_file(path), documents)
    where = assign_splits(docs)
    parts = {s: "".join(d + "\n" for d, w in zip(docs, where) if w == s) for s in SPLITS}
    counts = {s: len(poems(parts[s])) for s in SPLITS}
    if not counts["train"] or not counts["val"]:
        each = "一行一篇" if how == "lines" else "一段一篇"
        biggest = max(map(len, near_duplicate_groups(docs)), default=1)
        distinct = len(set(docs))
        hint = ("篇太少：至少要几十篇，验证集才分得到（也可以试试另一种 --documents）"
                if len(docs) < 100 else
                f"其中不一样的只有 {distinct} 篇（重复的篇只能进同一个划分）：需要更多不一样的篇"
                if distinct < 100 else
                f"其中 {biggest} 篇彼此（近似）重复，一组只能进同一个划分：需要更多不一样的篇"
                if 2 * biggest >= len(docs) else "这些篇按内容哈希都落在了别的划分里（它本来就是"
                "某个语料的验证集或测试集？）")
        raise UserError(f"{path.name} 有 {len(docs)} 篇（{each}），划分后训练集 "
                        f"{counts['train']} 篇、验证集 {counts['val']} 篇：{hint}")
    what = "一行一篇" if how == "lines" else "空行分段，一段一篇"
    return Corpus(name=path.name, description=f"你的文本 {path.name}（{len(docs):,} 篇，{what}）",
                  **parts)


def open_corpus(spec: str, documents: str | None = None) -> Corpus:
    """命令行的 ``--corpus``：内置语料的名字按名字加载（:func:`load_corpus`），否则当作你自己的
    文本文件（:func:`text_corpus`）。"""
    if not spec.strip():
        raise UserError("--corpus 是空的：请给内置语料的名字或一个文本文件")
    if spec in CORPORA:
        if documents is not None:
            raise UserError("--documents 只用于你自己的文本文件，内置语料已经分好了篇")
        return load_corpus(spec)
    return text_corpus(spec, documents)


def is_verse(corpus: Corpus) -> bool:
    """训练集里至少 ``VERSE_SHARE`` 的篇是近体诗（五绝、五律、七绝、七律）：格律的探针与
    验收才有意义。"""
    docs = poems(corpus.train)
    return bool(docs) and sum(poem_form(d) is not None for d in docs) >= VERSE_SHARE * len(docs)


def load_meta(data_dir: Path | str | None = None) -> list[dict[str, str]]:
    """data/tang_jinti_meta.tsv：每首近体诗的划分、作者、标题与正文（按来源顺序，划分与语料文件一致）。"""
    root = Path(data_dir) if data_dir is not None else DATA_DIR
    path = root / "tang_jinti_meta.tsv"
    if not path.exists():
        raise MissingFileError(f"找不到 {path.name}（应在 {root} 中）")
    lines = _read(path).rstrip("\n").split("\n")
    header = lines[0].split("\t")
    return [dict(zip(header, line.split("\t"))) for line in lines[1:]]




def vocabulary_text(corpus: Corpus) -> str:
    """课程模型的词表由哪些字组成：训练集的正文，加上训练集诗的标题和书名号《》。

    标题里的字与书名号预先放进词表，以题作诗的微调就不必改动词表（嵌入矩阵的形状不变）。
    """
    titles = "".join(r["title"] for r in load_meta() if r["split"] == "train") \
        if corpus.name == "tang_jinti" else ""
    return corpus.train + titles + TITLE_MARKS


def poem_starts(ids: torch.Tensor, eos_id: int, block_size: int) -> torch.Tensor:
    """每首诗前面那个换行符的位置（且从那里能切出完整窗口）。

    用作 :func:`get_batch` 的 ``starts``：窗口的第一个输入总是换行符，第一个目标是一首诗的
    第一个字，模型在每个位置都能看到这首诗的全部上文——和生成时（从换行符开始写）完全一致。

    >>> poem_starts(torch.tensor([0, 5, 6, 0, 7, 8, 0, 9]), eos_id=0, block_size=2)
    tensor([0, 3])
    """
    starts = (ids == eos_id).nonzero().flatten()                       # 换行符的位置
    return starts[starts < len(ids) - block_size]


def get_batch(data: torch.Tensor, batch_size: int, block_size: int,
              device: torch.device | str | None = None,
              generator: torch.Generator | None = None,
              starts: torch.Tensor | None = None,
              targets: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """从一条长 id 序列里随机取 batch_size 个长度为 block_size 的窗口。

    data: [N] 整数 id。返回 x, y: [B, T]，y[:, t] == data[start + t + 1]。
    ``starts`` 给出时，只从这些起点里随机挑（例如 :func:`poem_starts`）；否则任意位置都可以。
    ``targets``：与 data 等长的目标序列（[N]，或每个位置几个标签的 [N, K]），y 从它里面取
    （−1 = 这个位置不算损失，例如以题作诗时的题目，见 :mod:`gptcourse.titled`）；不给时目标就是
    data 本身。
    """
    if data.dim() != 1:
        raise UserError(f"data 应是一维 id 序列，收到形状 {tuple(data.shape)}")
    if len(data) <= block_size:
        raise UserError(f"数据只有 {len(data)} 个词元，不够切出 block_size={block_size} 的窗口")
    if starts is None:
        starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator)  # [B]
    else:
        if len(starts) == 0 or int(starts.max()) >= len(data) - block_size:
            raise UserError("starts 为空，或有起点离结尾不足一个窗口")
        starts = starts[torch.randint(len(starts), (batch_size,), generator=generator)]   # [B]
    offsets = torch.arange(block_size)                                                   # [T]
    x = data[starts[:, None] + offsets]             # [B, T]
    if targets is not None and targets.shape[:1] != data.shape:
        raise UserError(f"targets 的形状 {tuple(targets.shape)} 应与 data {tuple(data.shape)} "
                        f"相同（或在后面多出几维：[N, K]）")
    y = (data if targets is None else targets)[starts[:, None] + offsets + 1]   # [B, T(, K)]
    if device is not None:
        x, y = x.to(device), y.to(device)
    return x, y


class WindowDataset(Dataset):
    """滑动窗口数据集：第 i 个样本从 i*stride 开始，长 block_size。

    stride=1 时相邻样本几乎重叠（样本最多）；stride=block_size 时窗口互不重叠。
    """

    def __init__(self, data: torch.Tensor, block_size: int, stride: int = 1):
        if stride < 1:
            raise UserError(f"stride 必须 ≥ 1，收到 {stride}")
        if len(data) <= block_size:
            raise UserError(f"数据只有 {len(data)} 个词元，"
                             f"不够切出 block_size={block_size} 的窗口")
        self.data, self.block_size, self.stride = data, block_size, stride

    def __len__(self) -> int:
        return (len(self.data) - self.block_size - 1) // self.stride + 1

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= i < len(self):
            raise IndexError(f"样本下标 {i} 越界（共 {len(self)} 个）")
        s = i * self.stride
        chunk = self.data[s: s + self.block_size + 1]   # [T+1]
        return chunk[:-1], chunk[1:]                    # x [T], y [T]
