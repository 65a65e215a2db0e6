"""写文件的规则，写在一处：包里和教师与维护者的工具包里每个写文件的地方都用它。

1. **原子**：先写目标旁边（同一目录）的临时文件 ``.<名>.<进程号>.<随机>.tmp``，写完 fsync，再
   ``os.replace``。中途出错、被 Ctrl+C 或 SIGTERM 打断：临时文件删掉，目标原来的内容不动。被
   SIGKILL 杀掉留下的临时文件，下次往同一处写时删掉（写它的进程已经不在了）。
2. **不顺着链接写**：目标是符号链接（悬空的也算）→ 拒绝；``within`` 给出时，目标所在的目录
   （顺着链接解析之后）必须还在 ``within`` 里面。
3. **不写到输入上**：``inputs``（这条命令读的文件）里的任何一个，同一路径、链接或硬链接都算 → 拒绝。
4. **目录输出**（:func:`check_folder`）：要写的文件已经存在时不覆盖，除非 ``force``。
5. **一行说清**：用户的问题（上面几条、目录当文件、名字太长）→
   :class:`~gptcourse.errors.UserError`，命令行退出码 2；机器的问题（磁盘满、只读、没有写权限、
   文件太大）→ :class:`~gptcourse.errors.MachineError`，退出码 1。两种都是一句话，说出文件与原因。

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> write_text(d / "a.txt", "春风")
    PosixPath('...a.txt')
    >>> (d / "a.txt").read_text(encoding="utf-8"), sorted(p.name for p in d.iterdir())
    ('春风', ['a.txt'])
    >>> import shutil; shutil.rmtree(d)
"""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from .errors import MachineError, UserError

MAX_NAME_BYTES = 255          # 文件系统对一个名字的上限（临时文件名另外截短，见 _temp_prefix）

# errno → 一句话。前几种是机器的问题（MachineError，退出码 1），USER_ERRNOS 是用户给的路径不对。
REASONS = {errno.ENOSPC: "磁盘已满", errno.EDQUOT: "超出磁盘配额", errno.EROFS: "只读文件系统",
           errno.EFBIG: "文件太大（超过了 ulimit -f 或文件系统的上限）",
           errno.EACCES: "没有写权限", errno.EPERM: "没有写权限", errno.EIO: "读写出错（EIO）",
           errno.ENAMETOOLONG: "文件名太长", errno.EISDIR: "是一个目录",
           errno.ENOTDIR: "路径里有一段不是目录", errno.ELOOP: "符号链接绕成了圈"}
USER_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.EISDIR, errno.ENOTDIR, errno.ELOOP,
                         errno.EEXIST})


def reason(e: BaseException, folder: Path | None = None) -> str:
    """写失败的原因，一句话。没有 errno 的异常（torch.save 的 RuntimeError “unexpected pos …”）
    就看看 ``folder`` 所在的磁盘还剩多少。"""
    if isinstance(e, OSError) and e.errno in REASONS:
        return REASONS[e.errno]
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    try:
        free = shutil.disk_usage(folder).free if folder is not None else None
    except OSError:
        free = None
    full = free is not None and free < 2**30
    hint = f"；磁盘只剩 {free / 2**20:.1f} MB，多半是满了" if full else ""
    return " ".join(str(e).split())[:160] + hint


def failure(e: BaseException, path: Path, note: str = "",
            what: str = "") -> UserError | MachineError:
    """写 path 失败 → 要抛出的一句话的错误（“写不出{what} {path}：{原因}{note}”）：路径本身不对
    是 UserError，其余是 MachineError。"""
    message = f"写不出{what} {path}：{reason(e, Path(path).parent)}{note}"
    if isinstance(e, OSError) and e.errno in USER_ERRNOS:
        return UserError(message)
    return MachineError(message)


# ---------------------------------------------------------------- 写之前：目标对不对
def nearest_existing(path: Path) -> Path:
    """path 本身或它最近的已存在的上级（写文件之前看看那里是目录还是文件、能不能写）。"""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _same(a: Path, b: Path) -> bool:
    """a 与 b 是同一个文件：同一路径（解析链接之后），或 samefile（硬链接）。"""
    try:
        if Path(a).resolve() == Path(b).resolve():
            return True
        return Path(a).exists() and Path(b).exists() and Path(a).samefile(b)
    except OSError:
        return False


def check_file(path: str | Path, *, inputs: Iterable[str | Path] = (),
               within: str | Path | None = None, probe: bool = False) -> Path:
    """写 path 之前：名字不为空、不太长、不是目录、不是符号链接、不是输入、不在 ``within`` 之外、
    上级不是文件（UserError）；``probe`` 时真的在最近的已有上级里试建一个临时文件（权限、只读、
    配额：MachineError）。返回 ``Path(path)``。"""
    text, path = str(path), Path(path)
    if not text.strip() or not path.name or path.name in (".", "..") \
            or text.endswith(("/", os.sep)):
        raise UserError(f"路径 {text!r} 没有文件名（以 / 结尾的是目录）")
    size = len(os.fsencode(path.name))
    if size > MAX_NAME_BYTES:
        raise UserError(f"文件名太长（{size} 字节，最多 {MAX_NAME_BYTES}）：{path.name[:40]}…")
    if path.is_symlink():
        raise UserError(f"{path} 是一个符号链接：不顺着链接写（请删掉它，或换一个名字）")
    if path.is_dir():
        raise UserError(f"{path} 是一个目录，请给出文件名")
    for source in inputs:
        if source is not None and _same(path, source):
            which = "" if str(source) == str(path) else f"（{source}）"
            raise UserError(f"{path} 是这条命令要读的文件{which}：不会覆盖它，请换一个名字")
    if within is not None and Path(within).resolve() not in \
            (path.parent.resolve(), *path.parent.resolve().parents):
        raise UserError(f"{path} 经符号链接指到了 {within} 之外：不顺着链接写")
    parent = nearest_existing(path.parent)
    if not parent.is_dir():
        raise UserError(f"无法在 {parent} 下建目录：它是一个文件")
    if probe:
        try:
            with tempfile.TemporaryFile(dir=parent):
                pass
        except OSError as e:
            raise failure(e, path) from None
    return path


def check_folder(out: str | Path, targets: Iterable[str | Path], *,
                 inputs: Iterable[str | Path] = (), force: bool = False,
                 flag: str = "--out") -> Path:
    """往目录 out 写 targets 之前（``student``、``site``、``slides``、``handout``）：out 不是文件；
    不包含输入（写进去会覆盖或混进输入）；targets 不重名、不是链接、不是输入；已有的不覆盖，
    除非 ``force``。不对 → UserError。"""
    out, targets, inputs = Path(out), [Path(t) for t in targets], [Path(p) for p in inputs]
    if not str(out).strip():
        raise UserError(f"{flag} 是空的：请给一个目录")
    if out.exists() and not out.is_dir():
        raise UserError(f"{flag} {out} 是一个已有的文件，不是目录；请给一个（新的）目录")
    where = out.resolve()
    inside = [str(p) for p in inputs if where in p.resolve().parents]
    if inside:
        raise UserError(f"{flag} {where} 包含输入（如 {inside[0]}），写进去会覆盖或混进输入；"
                        "请换一个不包含它们的新目录")
    names = [t.name for t in targets]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:                                                    # 两个班的同一章：后写的吃掉先写的
        raise UserError(f"有 {len(twice)} 个输出重名（如 {twice[0]}）：同名的输入请分开生成")
    for t in targets:
        check_file(t, inputs=inputs, within=out if out.exists() else None)
    existing = [str(t) for t in targets if t.exists()]
    if existing and not force:
        raise UserError(f"{where} 里已经有 {len(existing)} 个要写的文件（如 {existing[0]}），"
                        "不覆盖；换一个空目录，或加 --force")
    return out


def make_folder(folder: str | Path) -> Path:
    """建目录（连同上级）；建不了 → 一句话（UserError 或 MachineError）。"""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise failure(e, folder) from None
    return folder


# ---------------------------------------------------------------- 原子写入
def _temp_prefix(path: Path) -> str:
    """临时文件名的前缀 ``.<名>.``；名字很长时截短（否则 ``.tmp`` 的名字超过 255 字节）。"""
    name = os.fsencode(path.name)[:200]
    return "." + os.fsdecode(name).encode("utf-8", "ignore").decode("utf-8", "ignore") + "."


def process_alive(pid: int) -> bool:
    """进程 pid 还在（别人的进程也算）。"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:                      # 别人的进程：还活着
        return True
    return True


def remove_stale_temps(path: Path) -> None:
    """删掉写 path 留下的、写它的进程已经不在了的临时文件（例如被 SIGKILL 杀掉的）。"""
    prefix = _temp_prefix(path)
    try:
        leftovers = list(path.parent.glob(f"{glob_escape(prefix)}*.tmp"))
    except OSError:
        return
    for tmp in leftovers:
        pid = tmp.name[len(prefix):].split(".", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not process_alive(int(pid)):
            with contextlib.suppress(OSError):
                tmp.unlink()


def glob_escape(text: str) -> str:
    """glob 的特殊字符按字面匹配。"""
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """写入期间把 SIGTERM 变成异常，这样 ``finally`` 能删掉临时文件（只在主线程、默认处理时）。"""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def replacing(path: str | Path, mode: str = "w", *, encoding: str | None = "utf-8",
              newline: str | None = None, inputs: Iterable[str | Path] = (),
              within: str | Path | None = None,
              failures: tuple[type[BaseException], ...] = (OSError,),
              note: str = "（临时文件已删除，原来的文件没有动）", what: str = "") -> Iterator:
    """``with replacing(path) as f: f.write(...)``：按本模块的规则原子地写 path。

    ``failures``：写的时候出了这些异常算“写失败”（一句话的 UserError/MachineError，见
    :func:`failure`）；其余异常原样抛出。两种情况临时文件都删掉。"""
    path = check_file(path, inputs=inputs, within=within)
    make_folder(path.parent)
    remove_stale_temps(path)
    with sigterm_raises():
        try:
            fd, tmp = tempfile.mkstemp(prefix=f"{_temp_prefix(path)}{os.getpid()}.",
                                       suffix=".tmp", dir=path.parent)
        except OSError as e:
            raise failure(e, path, what=what) from None
        try:
            binary = "b" in mode
            with os.fdopen(fd, mode, encoding=None if binary else encoding,
                           newline=None if binary else newline) as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o666 & ~_umask())          # mkstemp 建的是 0600，发布的文件应可读
            os.replace(tmp, path)
        except failures as e:
            _unlink(tmp)
            raise failure(e, path, note, what) from e
        except BaseException:
            _unlink(tmp)
            raise


def _unlink(tmp: str | Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(tmp)


def write_text(path: str | Path, text: str, *, encoding: str = "utf-8",
               newline: str | None = None, **rules) -> Path:
    """原子地写一个文本文件（规则见模块说明；``rules``：inputs、within）→ path。"""
    with replacing(path, "w", encoding=encoding, newline=newline, **rules) as f:
        f.write(text)
    return Path(path)


def write_bytes(path: str | Path, data: bytes, **rules) -> Path:
    """原子地写一个二进制文件 → path。"""
    with replacing(path, "wb", **rules) as f:
        f.write(data)
    return Path(path)


def copy_file(src: str | Path, dst: str | Path, **rules) -> Path:
    """原子地把 src 复制到 dst（不顺着 dst 上的链接写）→ dst。"""
    with open(src, "rb") as fin, replacing(dst, "wb", **rules) as fout:
        shutil.copyfileobj(fin, fout)
    return Path(dst)


def copy_tree(src: str | Path, dst: str | Path, *, within: str | Path | None = None) -> Path:
    """把目录 src 下的文件逐个原子地复制到 dst 下（已有的同名文件换掉；dst 里的链接不顺着写）。"""
    src, dst = Path(src), Path(dst)
    for f in sorted(src.rglob("*")):
        if f.is_file():
            copy_file(f, dst / f.relative_to(src), within=within if within is not None else dst)
    return dst


@contextlib.contextmanager
def replacing_folder(out: str | Path, *,
                     failures: tuple[type[BaseException], ...] = (OSError,)) -> Iterator[Path]:
    """``with replacing_folder(out) as tmp:`` 往旁边的临时目录里写，写完整个换到 out（out 原来的
    内容换下来后删掉）；中途出错，临时目录删掉、out 不动。out 该不该被覆盖由调用者先查。"""
    out = Path(out)
    make_folder(out.parent)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f"{_temp_prefix(out)}{os.getpid()}.", dir=out.parent))
    except OSError as e:
        raise failure(e, out) from None
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())                  # 临时目录是 0700：换成普通的权限
        for f in tmp.rglob("*"):
            os.chmod(f, (0o777 if f.is_dir() else 0o666) & ~_umask())
        old = None
        if out.exists():
            old = out.with_name(f"{_temp_prefix(out)}{os.getpid()}.old")
            os.replace(out, old)
        os.replace(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except failures as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise failure(e, out, f"（临时文件已删除，{out} 原来的内容没有动）") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
