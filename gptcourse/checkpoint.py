"""检查点：模型权重、优化器状态、步数、随机数状态、配置和词表都在一个文件里。

只凭一个检查点就能继续训练或生成文字。

- **原子写入**：先写同目录的临时文件 ``.<名>.<pid>.<随机>.tmp``，再 ``os.replace``；写到一半
  出错、被 Ctrl+C 或 SIGTERM 打断时删掉临时文件。被 SIGKILL 杀掉留下的临时文件以 "." 开头、
  以 ".tmp" 结尾，不会被当成检查点；下一次往同一目录保存同名检查点时，进程已不在的临时文件会被删掉。
- **校验和（发现损坏，不防伪造）**：保存时记下配置、权重、词表、步数、优化器、随机数状态与
  meta（含发布设置）的 SHA-256（``sha256`` 字段，``"v2:<十六进制>"``，:func:`payload_sha256`），
  读取时**总是按这全部字段**重新计算；对不上 → :class:`CheckpointError`。编码带类型与长度
  （字典、列表带元素个数），任何结构上的改动都对不上。它发现的是磁盘或传输造成的损坏、截断和
  无意的改动（手改了 ``n_head``、词表里的一个字）；它没有密钥，**不是签名**：能改文件的人也能
  重算它，所以来历不明的检查点不要读（``weights_only=True`` 保证读取时不执行文件里的代码，
  但权重与设置仍是文件说了算）。
  覆盖范围不由文件自己说了算：``sha256_covers`` 不是这全部字段（例如 ``[]`` 或 ``["model"]``）
  的文件一律拒绝。
- **写只有一种校验和，读认得更早的文件**：更早版本写过 v1 编码的全字段校验和（字典不记大小，把键
  挪一层对得上）和只覆盖权重与优化器的 v1 校验和，更旧的文件没有校验和。读取时照样核对 v1
  校验和（:func:`v1_sha256`，只读不写），但它们都无法确认配置、词表与 meta 没被改过，默认拒绝；
  确认它可信之后，``load(..., trust_unverified=True)``（命令行：环境变量
  ``GPTCOURSE_TRUST_UNVERIFIED=1``）才读取，并发出 :class:`UnverifiedCheckpointWarning`；
  :func:`upgrade` 把它重存为新格式（权重不变）。
- **只读普通、不压缩的文件**：FIFO、设备文件会被拒绝（否则一直等下去）；zip 里有压缩成员的
  文件会在解压之前被拒绝（防“压缩炸弹”）。
- **安全读取**：``torch.load(weights_only=True)``，不执行文件里的任何代码。
- **格式**：写 ``gptcourse-checkpoint-v2``；v1 文件（权重里还存着每层的因果掩码）照样能读，读时
  迁移（:func:`_migrate` 去掉掩码，模型按 ``block_size`` 自己建）。
- ``resume`` 先检查全部内容（配置、词表、权重形状、优化器分组与状态形状、随机数状态），
  全部没问题才改动模型和优化器。
- **一次训练写出的文件**：:class:`Checkpoints`（每次评估存 last 与 best，结束时写发布文件）与
  它存进 meta 的训练记录 :class:`History`（:func:`gptcourse.train.train` 返回的就是它）。
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import time
import warnings
import zipfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch

from . import files
from .bpe import BPETokenizer
from .config import GPTConfig
from .errors import MachineError, MissingFileError, UserError
from .model import GPT
from .runtime import DATA_DIR
from .tokenizer import CharTokenizer, Tokenizer, check_dict

FORMAT = "gptcourse-checkpoint-v2"    # v2：权重里没有因果掩码（模型按 block_size 自己建）
V1 = "gptcourse-checkpoint-v1"        # 仍然能读：读的时候迁移成 v2，见 _migrate
REQUIRED_KEYS = ("config", "model", "tokenizer", "step", "optimizer", "rng", "meta")
SHIPPED = DATA_DIR / "checkpoints" / "course.pt"     # 随课程发布的预训练模型



def tokenizer_from_dict(d: dict) -> Tokenizer:
    """按 ``type`` 字段还原任意一种分词器（检查点里存的是 ``tok.to_dict()``）。

    不认识的类型 → UserError。"""
    kind = check_dict(d).get("type")
    if kind == "char":
        return CharTokenizer.from_dict(d)
    if kind == "bpe":
        return BPETokenizer.from_dict(d)
    raise UserError(f"未知的分词器类型 {kind!r}")

class CheckpointError(UserError):
    """检查点文件损坏、格式不对，或与当前模型/词表不匹配。"""


class UnverifiedCheckpointWarning(UserWarning):
    """按用户的明确许可读取了校验和不完整（旧格式或没有校验和）的检查点。"""


# 读取校验和不完整的检查点的明确许可（命令行用；库里用 trust_unverified=True）
TRUST_ENV = "GPTCOURSE_TRUST_UNVERIFIED"


def _trust_from_env() -> bool:
    return os.environ.get(TRUST_ENV, "").strip().lower() in ("1", "true", "yes")


# ---------------------------------------------------------------- 写入
MAX_NAME_BYTES = 200    # 文件系统限 255 字节；临时文件名与 .best.pt 还要余量


class CheckpointWriteError(CheckpointError, MachineError):
    """写检查点时机器出了问题（磁盘满、只读、没有权限、文件太大）。既是 CheckpointError
    （训练照旧接住它、发布写好的 best），也是 MachineError（命令行：一行，退出码 1）。"""


@contextlib.contextmanager
def _as_checkpoint_errors():
    """:mod:`gptcourse.files` 的两种错误 → 检查点的：用户的 → CheckpointError，机器的 →
    CheckpointWriteError（信息不变）。"""
    try:
        yield
    except CheckpointError:
        raise
    except MachineError as e:
        raise CheckpointWriteError(str(e)) from e.__cause__
    except UserError as e:
        raise CheckpointError(str(e)) from None


def check_writable(path: str | Path) -> Path:
    """训练开始之前就确认 path 能写（规则见 :func:`gptcourse.files.check_file`：不是目录、不是
    符号链接、名字不为空、最近的已有上级目录真的能写），再加上：名字最多 MAX_NAME_BYTES 字节。"""
    name = Path(path).name
    if len(os.fsencode(name)) > MAX_NAME_BYTES:       # 临时文件名、.best.pt 还要更长
        raise CheckpointError(f"检查点的文件名太长（{len(os.fsencode(name))} 字节，"
                              f"最多 {MAX_NAME_BYTES}）：{name[:40]}…")
    with _as_checkpoint_errors():
        return files.check_file(path, probe=True)      # 原样传下去：“dir/” 的 / 要看得见


@contextlib.contextmanager
def run_lock(out: str | Path):
    """一次训练独占它的 ``--out``：``<out>.lock``（O_EXCL 建，写着进程号）。另一个还活着的进程
    拿着锁 → UserError（两次训练交替写同一组文件，发布的会是一个的权重配另一个的记录）；
    拿锁的进程已经不在了（被 SIGKILL 的）→ 接过来。"""
    out = Path(out)
    lock = out.with_name(out.name + ".lock")
    out.parent.mkdir(parents=True, exist_ok=True)      # check_writable 已确认能建
    for _ in range(3):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                pid = int(lock.read_text(encoding="ascii").strip() or 0)
            except (OSError, ValueError):
                pid = 0
            if pid and pid != os.getpid() and files.process_alive(pid):
                raise UserError(f"另一个训练（进程 {pid}）正在写 {out}：等它结束，或换一个 "
                                f"--out（锁文件 {lock.name}）") from None
            lock.unlink(missing_ok=True)                 # 上一次被杀掉时留下的
            continue
        with os.fdopen(fd, "w", encoding="ascii") as f:  # 不经 files：锁文件，O_EXCL 建的
            f.write(str(os.getpid()))
        break
    else:
        raise UserError(f"拿不到 {lock}：请确认没有别的训练在写 {out} 后删掉它")
    try:
        yield lock
    finally:
        lock.unlink(missing_ok=True)


def atomic_save(obj, path: str | Path) -> Path:
    """把对象保存到 path，按 :mod:`gptcourse.files` 的规则（同目录的临时文件 + ``os.replace``，
    不顺着链接写，失败时删掉临时文件）。磁盘满、只读、文件太大 → :class:`CheckpointWriteError`；
    torch 丢了 errno 的 RuntimeError（“unexpected pos …”）也算写失败。"""
    path = check_writable(path)
    with _as_checkpoint_errors(), files.replacing(
            path, "wb", what="检查点", failures=(OSError, RuntimeError),
            note="（临时文件已删除，已有的同名文件没有动）") as f:
        torch.save(obj, f)
    return path


# 校验和覆盖的字段：给权重以意义的一切（配置、词表、meta）都在内——改了 n_head 或词表里的一个字，
# 权重照样载得进去，写出来的却是乱码。
CHECKSUM_COVERS = ("config", "model", "tokenizer", "step", "optimizer", "rng", "meta")
# 校验和的编码（写进文件的只有这一种）："v2:<64 位十六进制>"。每个值带类型标记与长度，字典与列表带
# 元素个数，所以任何结构上的改动（把一个键挪到另一层、拆开或合并字符串、列表换成元组）都会改变它。
CHECKSUM_SCHEME = "v2"


def _feed(h, x) -> None:
    """规范、无歧义的编码：类型标记 + 长度 + 内容；容器是类型标记 + 元素个数 + 各元素。"""
    def atom(tag: bytes, payload: bytes) -> None:
        h.update(tag + str(len(payload)).encode() + b":" + payload)

    if isinstance(x, torch.Tensor):
        t = x.detach().cpu().contiguous()
        atom(b"T", f"{t.dtype}{tuple(t.shape)}".encode())
        atom(b"t", t.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(x, dict):
        items = []
        for k, v in x.items():                       # 键按编码后的字节排序：不同类型的键也能比
            kh = hashlib.sha256()
            _feed(kh, k)
            items.append((kh.digest(), k, v))
        h.update(b"D" + str(len(items)).encode() + b":")
        for _, k, v in sorted(items, key=lambda it: it[0]):
            _feed(h, k)
            _feed(h, v)
    elif isinstance(x, list | tuple):
        h.update((b"L" if isinstance(x, list) else b"U") + str(len(x)).encode() + b":")
        for v in x:
            _feed(h, v)
    elif x is None:
        h.update(b"N")
    elif isinstance(x, bool):
        h.update(b"B1" if x else b"B0")
    elif isinstance(x, int):
        atom(b"I", str(x).encode())
    elif isinstance(x, float):
        atom(b"F", x.hex().encode())
    elif isinstance(x, str):
        atom(b"S", x.encode("utf-8", "surrogatepass"))
    elif isinstance(x, bytes):
        atom(b"Y", x)
    else:                                            # torch.dtype 之类：类型名 + repr
        atom(b"R", f"{type(x).__module__}.{type(x).__qualname__}".encode())
        atom(b"r", repr(x).encode("utf-8", "surrogatepass"))


def payload_sha256(obj: dict, covers=CHECKSUM_COVERS) -> str:
    """``covers`` 里各字段的校验和 ``"v2:<十六进制>"``：:func:`save` 与 :func:`upgrade` 写的就是它
    （总是全部字段），读取时按它核对。"""
    h = hashlib.sha256()
    _feed(h, {k: obj[k] for k in covers})
    return f"{CHECKSUM_SCHEME}:{h.hexdigest()}"


# ---------------------------------------------------------------- 更早版本的校验和（只读）
# 更早版本写的文件：有 "sha256_covers" 的是 v1 编码的全字段校验和；没有的只覆盖权重与优化器状态
# （LEGACY_COVERS，也是 v1 编码），或者根本没有校验和。读取时照样核对，但不再写。
LEGACY_COVERS = ("model", "optimizer")


def _feed_v1(h, x) -> None:
    """v1 编码：字典不记大小（键挪一层校验和不变），其余的值按 repr。"""
    if isinstance(x, torch.Tensor):
        t = x.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(x, dict):
        for k in sorted(x, key=repr):
            h.update(f"K{k!r}".encode())
            _feed_v1(h, x[k])
    elif isinstance(x, (list, tuple)):
        h.update(f"L{len(x)}".encode())
        for v in x:
            _feed_v1(h, v)
    else:
        h.update(f"V{x!r}".encode())


def v1_sha256(obj: dict, covers=CHECKSUM_COVERS) -> str:
    """更早版本写的校验和（只有十六进制，没有 ``v2:``）：只用来核对旧文件，gptcourse 不再写它。"""
    h = hashlib.sha256()
    _feed_v1(h, {k: obj[k] for k in covers})
    return h.hexdigest()


def save(path: str | Path, model: GPT, tokenizer, *, optimizer=None, step: int = 0,
         meta: dict | None = None, half: bool = False) -> Path:
    """保存检查点。``half=True`` 时权重以 bf16 存储（文件减半，加载时还原为 fp32）。"""
    state = model.state_dict()
    if half:
        state = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in state.items()}
    if tokenizer.vocab_size != model.config.vocab_size:
        raise CheckpointError(f"词表大小 {tokenizer.vocab_size} 与模型 vocab_size "
                              f"{model.config.vocab_size} 不一致")
    obj = {
        "format": FORMAT,
        "config": model.config.to_dict(),
        "model": state,
        "tokenizer": tokenizer.to_dict(),
        "step": int(step),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "rng": {"torch": torch.get_rng_state(),
                **({"cuda": torch.cuda.get_rng_state_all()} if torch.cuda.is_available() else {})},
        "meta": dict(meta or {}),
    }
    obj["sha256"], obj["sha256_covers"] = payload_sha256(obj), list(CHECKSUM_COVERS)
    return atomic_save(obj, path)


# ---------------------------------------------------------------- 读取与检查
def load_raw(path: str | Path | None = None, map_location="cpu",
             trust_unverified: bool | None = None) -> dict:
    """读取检查点字典并检查格式与校验和；错误时抛出 :class:`CheckpointError`，说明问题所在。

    ``trust_unverified``：是否读取校验和不完整的旧文件（见模块说明）；None = 看环境变量
    ``GPTCOURSE_TRUST_UNVERIFIED``。"""
    path = Path(path) if path is not None else SHIPPED
    if not path.exists():
        raise MissingFileError(f"找不到检查点文件 {path}")
    if not path.is_file():                       # 目录、FIFO、设备文件：读它会报错或一直等下去
        raise CheckpointError(f"{path} 不是普通文件，不能当检查点读取")
    _refuse_compressed(path)
    if _wants_cuda(map_location) and not torch.cuda.is_available():
        raise CheckpointError(f"不能把 {path.name} 加载到 {map_location}：这台机器没有可用的 CUDA")
    try:
        obj = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # 损坏的 zip、不安全的 pickle、根本不是 PyTorch 文件……
        first = (str(e).strip().splitlines() or [""])[0][:120]
        raise CheckpointError(f"{path.name} 不是可读取的 PyTorch 检查点（{type(e).__name__}: "
                              f"{first}）") from e
    if not isinstance(obj, dict) or obj.get("format") not in (FORMAT, V1):
        raise CheckpointError(f"{path.name} 不是 gptcourse 检查点（缺少 format={FORMAT!r}）")
    missing = [k for k in REQUIRED_KEYS if k not in obj]
    if missing:
        raise CheckpointError(f"{path.name} 缺少字段 {missing}，文件不完整")
    _check_fields(obj, path.name)
    _verify(obj, path.name, _trust_from_env() if trust_unverified is None else trust_unverified)
    return _migrate(obj)


def _migrate(obj: dict) -> dict:
    """v1 → v2。v1 把每层的因果掩码（``blocks.N.attn.mask``，一个不训练的布尔 buffer）也存进了
    权重；v2 的模型把它登记为 ``persistent=False``，按 ``block_size`` 自己建。读 v1 文件时去掉这些键
    ——在核对校验和之后，所以文件本身照旧按保存时的内容核对；文件里的掩码即使被改过也不会被用上。"""
    if obj["format"] == V1:
        obj["model"] = {k: v for k, v in obj["model"].items() if not k.endswith(".attn.mask")}
        obj["format"] = FORMAT
    return obj


# 没有完整校验和的文件各是什么（出现在错误与警告里）
_OLDER = {"v1": "是更早版本的 v1 校验和（不记字典的大小与层次：把一个键挪到另一层，校验和不变）",
          "legacy": "只覆盖权重与优化器的旧格式校验和", None: "没有校验和"}


def _checksum_kind(obj: dict, name: str) -> tuple[str | None, tuple[str, ...]]:
    """文件带的是哪种校验和 → ("v2" | "v1" | "legacy" | None, 它覆盖的字段)。

    文件自己声明的覆盖范围只用来认出格式：有 ``sha256_covers`` 的必须正好是全部字段。"""
    if "sha256_covers" not in obj:                       # 更早的格式
        return ("legacy", LEGACY_COVERS) if "sha256" in obj else (None, ())
    covers = obj["sha256_covers"]
    if not isinstance(covers, list | tuple) or \
            sorted(map(str, covers)) != sorted(CHECKSUM_COVERS):
        raise CheckpointError(
            f"{name} 的 sha256_covers 是 {covers!r}，不是全部字段"
            f"（{'、'.join(CHECKSUM_COVERS)}）："
            "gptcourse 保存的文件总是全部覆盖，这个文件被改过，拒绝读取")
    if "sha256" not in obj:
        raise CheckpointError(f"{name} 有 sha256_covers 却没有 sha256：文件被改过，拒绝读取")
    digest = obj["sha256"]
    if ":" not in digest:
        return "v1", CHECKSUM_COVERS
    if not digest.startswith(f"{CHECKSUM_SCHEME}:"):
        raise CheckpointError(f"{name} 的校验和编码 {digest.split(':')[0][:20]!r} 不认识"
                              f"（这个版本的 gptcourse 写 {CHECKSUM_SCHEME}）：文件被改过，"
                              "或来自更新的 gptcourse，拒绝读取")
    return CHECKSUM_SCHEME, CHECKSUM_COVERS


def _verify(obj: dict, name: str, trust_unverified: bool) -> None:
    """核对校验和（旧文件的 v1 校验和也核对）；没有完整 v2 校验和的文件只在明确许可时读取。"""
    kind, covers = _checksum_kind(obj, name)
    if kind is not None:
        digest = payload_sha256(obj) if kind == CHECKSUM_SCHEME else v1_sha256(obj, covers)
        if digest != obj["sha256"]:
            raise CheckpointError(f"{name} 的校验和不符：{'、'.join(covers)} 在保存之后被"
                                  "改动或损坏")
    if kind == CHECKSUM_SCHEME:
        return
    what = _OLDER[kind]
    if not trust_unverified:
        raise CheckpointError(
            f"{name} {what}：无法确认配置、词表与 meta（发布设置）没被改过，默认不读取。"
            "确认文件可信后"
            f"设环境变量 {TRUST_ENV}=1 再读（库里：trust_unverified=True），"
            "或用 gptcourse.checkpoint.upgrade(旧文件, 新文件) 重存为新格式")
    weak = "配置、词表与 meta 的结构" if kind == "v1" else "配置、词表与 meta "
    warnings.warn(f"{name} {what}：{weak}不在校验和之内，按你的许可照常读取；"
                  "可用 gptcourse.checkpoint.upgrade 重存为新格式", UnverifiedCheckpointWarning,
                  stacklevel=4)


def upgrade(src: str | Path, dst: str | Path) -> Path:
    """把旧检查点（你确认可信的）重存为新格式：补上覆盖全部字段的校验和，v1 迁移成 v2（去掉
    存着的因果掩码）；其余字段与权重一字不改。``dst`` 可以等于 ``src``（原子替换）。"""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnverifiedCheckpointWarning)
        obj = load_raw(src, trust_unverified=True)
    _config_and_tokenizer(obj, Path(src).name)              # 配置与词表能还原、彼此一致
    obj = {k: v for k, v in obj.items() if k not in ("sha256", "sha256_covers")}
    obj["sha256"], obj["sha256_covers"] = payload_sha256(obj), list(CHECKSUM_COVERS)
    return atomic_save(obj, dst)


def _refuse_compressed(path: Path) -> None:
    """torch.save 写的 zip 里每个成员都是"不压缩"存放的：文件多大，读进内存就多大。
    有压缩成员的文件（例如一个 371 KB、解开有 1 GB 的"压缩炸弹"）在解压之前就拒绝。"""
    try:
        with zipfile.ZipFile(path) as z:
            packed = [i.filename for i in z.infolist() if i.compress_type != zipfile.ZIP_STORED]
    except (zipfile.BadZipFile, OSError):
        return                                    # 不是 zip：交给 torch.load 给出清楚的错误
    if packed:
        raise CheckpointError(f"{path.name} 里有压缩过的成员（{packed[0]} 等 {len(packed)} 个）："
                              "gptcourse 检查点不压缩，为防止解压出超大数据而拒绝读取")


def _wants_cuda(map_location) -> bool:
    try:
        return isinstance(map_location, (str, torch.device)) and \
            torch.device(map_location).type == "cuda"
    except RuntimeError:                         # 不认识的设备名：交给 torch.load 报错
        return False


def _check_fields(obj: dict, name: str) -> None:
    """每个字段的类型：坏的字段在这里变成 CheckpointError，而不是之后的 TypeError。"""
    kinds = {"config": dict, "model": dict, "tokenizer": dict, "meta": dict, "rng": dict}
    for key, kind in kinds.items():
        if not isinstance(obj[key], kind):
            raise CheckpointError(f"{name} 的字段 {key!r} 应是 {kind.__name__}，"
                                  f"收到 {type(obj[key]).__name__}")
    if not all(isinstance(v, torch.Tensor) for v in obj["model"].values()):
        raise CheckpointError(f"{name} 的权重里有不是张量的条目")
    step = obj["step"]
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise CheckpointError(f"{name} 的 step 应是 ≥ 0 的整数，收到 {step!r}")
    if obj["optimizer"] is not None and not isinstance(obj["optimizer"], dict):
        raise CheckpointError(f"{name} 的优化器状态应是 dict 或 None")
    if "sha256" in obj and not isinstance(obj["sha256"], str):
        raise CheckpointError(f"{name} 的 sha256 字段应是字符串")


def _config_and_tokenizer(obj: dict, name: str):
    """从检查点字典还原 (GPTConfig, 分词器)，并检查两者一致。"""
    absent = sorted({f.name for f in fields(GPTConfig)} - set(obj["config"]))
    if absent:                                  # 缺了 n_head 就悄悄用默认值 4：那不是这个模型
        raise CheckpointError(f"{name} 的配置缺少字段 {absent}")
    try:
        cfg = GPTConfig.from_dict(obj["config"])
        tok = tokenizer_from_dict(obj["tokenizer"])
    except (ValueError, TypeError, KeyError) as e:
        raise CheckpointError(f"{name} 里的配置或词表无法还原：{e}") from e
    if tok.vocab_size != cfg.vocab_size:
        raise CheckpointError(f"{name} 里的词表有 {tok.vocab_size} 个词元，但模型配置是 "
                              f"vocab_size={cfg.vocab_size}")
    return cfg, tok


def load(path: str | Path | None = None, map_location="cpu", eval_mode: bool = True,
         trust_unverified: bool | None = None):
    """加载检查点 → (model, tokenizer, meta)。``path=None`` 加载随课程发布的模型。

    meta 里有 step、config 以及训练时记录的指标。``trust_unverified`` 见 :func:`load_raw`。
    """
    obj = load_raw(path, map_location, trust_unverified)
    name = Path(path).name if path is not None else SHIPPED.name
    cfg, tok = _config_and_tokenizer(obj, name)
    check_config_matches(cfg, obj["model"], name)     # 先比形状，再分配内存
    model = GPT(cfg)
    load_weights(model, obj["model"])
    model.to(map_location if isinstance(map_location, (str, torch.device)) else "cpu")
    if eval_mode:
        model.eval()
    meta = {"step": obj["step"], "config": cfg, **obj["meta"]}
    return model, tok, meta


def check_config_matches(cfg: GPTConfig, state: dict, name: str) -> None:
    """配置与文件里的权重一致吗——在建模型之前就查：一个配置写成 2048 层、权重只有 20 MB 的文件
    不会先把内存吃光（模型先建在 ``meta`` 设备上，只有形状，不占内存）。"""
    layers = {k.split(".")[1] for k in state if k.startswith("blocks.")}
    if len(layers) != cfg.n_layer:
        raise CheckpointError(f"{name} 的配置与权重不符：配置 n_layer={cfg.n_layer}，"
                              f"权重里有 {len(layers)} 层")
    with torch.device("meta"):
        shell = GPT(cfg)
    try:
        check_weights(shell, state, values=False)
    except CheckpointError as e:
        raise CheckpointError(f"{name} 的配置与权重不符：{e}") from None


def check_weights(model: GPT, state: dict, values: bool = True) -> None:
    """state 能否载入 model：键、形状、dtype 类别（浮点/整数/布尔）一致，浮点权重全是有限数。"""
    own = model.state_dict()
    missing, extra = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    if missing or extra:
        raise CheckpointError(f"检查点与模型结构不匹配：缺少 {missing[:5]}，多出 {extra[:5]}")
    for k, v in state.items():
        if v.shape != own[k].shape:
            raise CheckpointError(f"参数 {k} 形状不符：检查点 {tuple(v.shape)}，"
                                  f"模型 {tuple(own[k].shape)}")
        if v.is_floating_point() != own[k].is_floating_point() or \
                (v.dtype == torch.bool) != (own[k].dtype == torch.bool):
            raise CheckpointError(f"参数 {k} 的类型不符：检查点 {v.dtype}，模型 {own[k].dtype}")
        if values and v.is_floating_point() and not torch.isfinite(v).all():
            raise CheckpointError(f"参数 {k} 里有 NaN 或 inf（训练发散后保存的？）")


def load_weights(model: GPT, state: dict) -> None:
    """把 state 载入 model（bf16 存储会还原为 fp32），不符时给出清楚的错误、不改动 model。"""
    check_weights(model, state)
    own = model.state_dict()
    model.load_state_dict({k: v.to(own[k].dtype) for k, v in state.items()})


def check_optimizer_state(optimizer, saved: dict, params_by_index: list[torch.Tensor]) -> None:
    """优化器状态能否载入：分组数、每组参数个数、每个参数的状态张量形状都要一致。"""
    groups = saved.get("param_groups")
    if not isinstance(groups, list) or not isinstance(saved.get("state"), dict):
        raise CheckpointError("检查点里的优化器状态缺少 param_groups / state")
    if len(groups) != len(optimizer.param_groups):
        raise CheckpointError(f"优化器参数分组数不同：检查点 {len(groups)}，"
                              f"当前 {len(optimizer.param_groups)}")
    for i, (g, own) in enumerate(zip(groups, optimizer.param_groups)):
        if not isinstance(g, dict) or len(g.get("params", ())) != len(own["params"]):
            raise CheckpointError(f"优化器第 {i} 组的参数个数不同")
    for idx, st in saved["state"].items():
        if not isinstance(idx, int) or not 0 <= idx < len(params_by_index):
            raise CheckpointError(f"优化器状态里有不存在的参数编号 {idx!r}")
        shape = params_by_index[idx].shape
        for key, v in (st.items() if isinstance(st, dict) else ()):
            if isinstance(v, torch.Tensor) and v.dim() > 0 and v.shape != shape:
                raise CheckpointError(f"优化器状态 {key}（参数 {idx}）形状 {tuple(v.shape)}，"
                                      f"参数是 {tuple(shape)}")


def _check_rng(rng: dict) -> None:
    state = rng.get("torch")
    own = torch.get_rng_state()
    if not isinstance(state, torch.Tensor) or state.dtype != own.dtype or \
            state.shape != own.shape:
        raise CheckpointError("检查点里的随机数状态损坏（torch 的 RNG 状态大小或类型不对）")
    if torch.cuda.is_available() and "cuda" in rng and \
            len(rng["cuda"]) != torch.cuda.device_count():
        raise CheckpointError("检查点里的 CUDA 随机数状态与本机 GPU 数目不符")


def resume(path: str | Path, model: GPT, optimizer=None, tokenizer=None) -> int:
    """把检查点里的权重、优化器与随机数状态恢复到已建好的对象上，返回步数。

    批次由 (seed, step) 决定（见 ``train.batch_generator``），dropout 用全局随机数，
    这里一并恢复，所以接着训练与不中断地训练完全一样。任何一项不符都在改动之前报错。
    """
    obj = load_raw(path)
    name = Path(path).name
    cfg, tok = _config_and_tokenizer(obj, name)
    if cfg != model.config:
        diff = {k: (v, getattr(model.config, k)) for k, v in cfg.to_dict().items()
                if getattr(model.config, k) != v}
        shown = "，".join(f"{k} 检查点={a!r} 模型={b!r}" for k, (a, b) in diff.items())
        raise CheckpointError(f"检查点的配置与当前模型不同，不能接着训练：{shown}")
    if tokenizer is not None and tok.to_dict() != tokenizer.to_dict():
        raise CheckpointError("检查点的词表与当前分词器不同，不能接着训练")
    check_weights(model, obj["model"])
    if optimizer is not None:
        if obj["optimizer"] is None:
            raise CheckpointError("检查点里没有优化器状态（可能是只含权重的发布版）")
        params = [p for g in optimizer.param_groups for p in g["params"]]
        check_optimizer_state(optimizer, obj["optimizer"], params)
    _check_rng(obj["rng"])
    # ---- 到这里全部检查过了，才开始改动 ----
    load_weights(model, obj["model"])
    if optimizer is not None:
        optimizer.load_state_dict(obj["optimizer"])
    torch.set_rng_state(obj["rng"]["torch"])
    if torch.cuda.is_available() and "cuda" in obj["rng"]:
        torch.cuda.set_rng_state_all(obj["rng"]["cuda"])
    return obj["step"]


# ---------------------------------------------------------------- 训练记录
@dataclass
class History:
    """训练记录：每步一行（step, loss, lr, grad_norm, tokens_per_s），每次评估一行。

    ``info``：这次训练的设置，例如 {"bf16": False, "bf16_reason": "…", "compiled": False}。
    ``tokens_per_s`` 是每 log_interval 步一段的平均（不含评估）。
    """
    steps: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    info: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "History":
        """从 to_dict() 的结果（例如检查点 meta["history"]）还原，用于接着训练。"""
        return cls(steps=[dict(r) for r in d.get("steps", [])],
                   evals=[dict(r) for r in d.get("evals", [])], info=dict(d.get("info", {})))

    @property
    def best_val(self) -> float:
        vals = [e["val"] for e in self.evals if "val" in e]
        return min(vals) if vals else float("nan")


# ---------------------------------------------------------------- 一次训练写出的文件
class Checkpoints:
    """一次训练写出的检查点（命令行 ``train`` 用它；笔记本也可以）::

        ckpts = Checkpoints("ckpt/run.pt", model, tok, optimizer)
        train(model, ..., history=ckpts.history, on_eval=ckpts.on_eval)
        summary = ckpts.finish(tokens_per_step(cfg, model.config.block_size))

    - 每次评估（:meth:`on_eval`）：``<名>.last.pt``（带优化器，可以接着训练）；验证损失创新低时
      ``<名>.best.pt``（只含权重）；给了 ``snapshots`` 目录时再存一份 ``step_000250.pt``，meta 里
      记下那一刻的训练墙钟 ``wall_s``（画学习曲线、量"多久训练到目标损失"用）。
    - 训练结束（:meth:`finish`，正常结束、发散或中断都一样）：把**这次**训练写出的 best 另存为
      发布文件 ``<名>.pt``，meta 里加上总结；这次一次 best 都没写出过就什么也不写。
    ``meta`` 是每个文件都带的记录（语料、配置、命令……，同一个字典：之后往里加的也会存进去）。
    只在 0 号进程上用（:func:`~gptcourse.train.train` 只在 0 号进程上调用 ``on_eval``）。
    写文件是原子的（:func:`save`）。"""

    def __init__(self, out, model: GPT, tok, optimizer: torch.optim.Optimizer | None = None,
                 meta: dict | None = None, history: History | None = None, half: bool = False,
                 snapshots=None):
        self.out = Path(out)
        self.best, self.last = self.out.with_suffix(".best.pt"), self.out.with_suffix(".last.pt")
        self.model, self.tok, self.optimizer, self.half = model, tok, optimizer, half
        self.meta = {} if meta is None else meta
        self.history = History() if history is None else history
        self.snapshots = None if snapshots is None else Path(snapshots)
        self.best_step: int | None = None       # 这次训练的 best 在第几步（不是以前留下的）
        self.best_state: dict | None = None     # 那一步的权重（CPU 上的副本）
        self.t0 = time.perf_counter()           # 训练墙钟从这里算

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def on_eval(self, step: int, val: float | None, is_best: bool) -> None:
        """``train`` 的 ``on_eval``：存 last，创新低时存 best，有快照目录时存快照。"""
        meta = {**self.meta, "val_loss": val, "history": self.history.to_dict()}
        if is_best:                             # 先记在内存里：发布的是这次训练自己的 best，
            self.best_state = {k: v.detach().to("cpu", copy=True)       # 磁盘写不出也还在
                               for k, v in self.model.state_dict().items()}
            self.best_step = step
        save(self.last, self.model, self.tok, optimizer=self.optimizer, step=step, meta=meta)
        if is_best:
            save(self.best, self.model, self.tok, step=step, meta=meta, half=self.half)
        if self.snapshots is not None:          # 学习曲线：这一刻的权重，连同训练墙钟
            try:
                save(self.snapshots / f"step_{step:06d}.pt", self.model, self.tok, step=step,
                     meta={"val_loss": val, "wall_s": round(self.elapsed(), 1),
                           "command": self.meta.get("command")})
            except CheckpointError as e:        # 快照是可选的：停掉快照，训练照常
                warnings.warn(f"{e}；之后不再写快照，训练继续", stacklevel=2)
                self.snapshots = None

    def finish(self, tokens_per_step: int, diverged_at: int | None = None,
               interrupted: bool = False) -> dict | None:
        """训练结束 → 总结 {"steps", "tokens", "wall_s", "tokens_per_s", "best_val_loss"（发散时
        还有 "diverged_at_step"，中断时 "interrupted"）}，并把验证损失最好的那一版写成发布文件
        ``out``（只含权重，meta 里有总结与完整的 history）。``tokens_per_step``：一步训练看多少个
        词元（:func:`gptcourse.train.tokens_per_step`）；``diverged_at``：在第几步发散（没有发散就是
        None）。这次训练没写出过 best → None，什么也不写（不拿以前留下的 best 充数）。"""
        if self.best_step is None:
            return None
        wall, history = self.elapsed(), self.history
        steps = history.steps[-1]["step"] if history.steps else 0
        tokens = steps * tokens_per_step
        summary = {"steps": steps, "tokens": tokens, "wall_s": round(wall, 1),
                   "tokens_per_s": round(tokens / wall), "best_val_loss": history.best_val}
        if diverged_at is not None:
            summary["diverged_at_step"] = diverged_at
        if interrupted:
            summary["interrupted"] = True
        model_best = GPT(self.model.config)                 # 发布用的文件 = 这次训练验证损失
        model_best.load_state_dict(self.best_state)         # 最好的那一版（内存里的，不重读磁盘）
        save(self.out, model_best, self.tok, step=steps,
             meta={**self.meta, **summary, "history": history.to_dict()}, half=self.half)
        return summary
