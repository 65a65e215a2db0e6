"""评分沙箱：每份作业在一个封闭的进程树里运行（Linux 上用 bubblewrap）。

沙箱里能看到的：系统目录（/usr、/lib、/etc…）、Python 与课程包（都只读）、这份作业自己的临时目录
（唯一可写，外加一个私有的 /tmp）。看不到的：网络（独立的网络命名空间，只有一个不通的 lo）、
同一批的其他作业、评分进程本身（独立的 PID 命名空间）。另有三道限额：地址空间（内存）、CPU 时间、
进程数。时限一到就杀掉整个沙箱：沙箱里 1 号进程一死，命名空间里的每个进程都随之消失，所以握着
GIL 的 C 循环（``sum(range(10**12))``）和脱离会话的子进程都活不过时限。

为什么是 bubblewrap：它是 Flatpak 用的沙箱工具，Debian/Ubuntu/Fedora 都有软件包，一条命令就能
同时建好挂载、PID、网络、IPC 命名空间和用户命名空间；``--die-with-parent`` 保证评分进程死掉时
沙箱也跟着死。util-linux 的 ``unshare`` 也能建命名空间，但只读挂载要自己一条条 ``mount``，
且需要 root。没有 bubblewrap（macOS、Windows，或者系统禁止了用户命名空间）时，``probe()``
说明原因，评分照常进行但**不封闭**（见 ``UNSEALED``）。
"""
from __future__ import annotations

import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gptcourse.runtime import ROOT

UNSEALED = ("注意：作业将不封闭地运行（{why}）——学生的代码以你的身份运行，能读写你的文件、"
            "联网、留下进程（时限与内存限额仍然有效）；只给信得过的作业这样评分，"
            "或换到装了 bubblewrap 的 Linux 上评分。")
_PIDS_V1 = Path("/sys/fs/cgroup/pids")


@dataclass(frozen=True)
class Limits:
    """一份作业的限额。``memory`` 是地址空间（字节），``cpu`` 是每个进程的 CPU 秒数。"""
    memory: int = 4 << 30
    cpu: int = 900
    processes: int = 64
    file_size: int = 1 << 30        # 单个文件的上限（RLIMIT_FSIZE）
    tmp_size: int = 256 << 20       # 私有 /tmp（内存里的 tmpfs）的上限


@dataclass
class Outcome:
    returncode: int | None          # None：时限到，被杀掉
    seconds: float
    log_tail: str


@functools.cache
def probe() -> str | None:
    """能用 bubblewrap 就返回 None，否则返回一句“为什么不能”。结果在本进程里缓存。"""
    if not sys.platform.startswith("linux"):
        return f"{sys.platform} 上没有 bubblewrap"
    exe = shutil.which("bwrap")
    if exe is None:
        return "没有安装 bubblewrap（Debian/Ubuntu：apt-get install bubblewrap）"
    try:
        r = subprocess.run([exe, *_base_args(), "--ro-bind", "/", "/", "true"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bubblewrap 启动失败：{e}"
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["（无输出）"])[-1]
        return f"bubblewrap 不能建立命名空间：{last}"
    return None


def _base_args() -> list[str]:
    # 用户命名空间里的 nobody：即使评分者是 root，沙箱里也没有任何特权（CapEff = 0）
    return ["--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534",
            "--cap-drop", "ALL", "--die-with-parent", "--new-session"]


# 课程仓库里评分要用的部分。不挂整个仓库：老师常在仓库根目录下评分，那里有别的章节的作业、
# 旧成绩册、反馈页，还有 .git（里面有教师版的答案）——这些一概不进沙箱。
COURSE_PARTS = ("gptcourse", "gptcourse_kit", "data", "docs")


def _readable_roots() -> tuple[list[Path], list[tuple[str, str]]]:
    """沙箱里只读可见的目录（系统目录、Python 的安装位置、其中的 sys.path 目录、课程包与数据），
    以及要照原样重建的符号链接（合并了 /usr 的系统上 /bin、/lib… 都是链接）。"""
    candidates = [Path(p) for p in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64",
                                    "/libx32", "/etc")]
    python = [Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).parent,
              *(ROOT / part for part in COURSE_PARTS)]
    candidates += python
    # sys.path 上只取 Python 与课程包之内的目录：在 ``python -m`` 下 sys.path[0] 是老师的当前
    # 目录（旧成绩册、别的章节的作业），``$HOME`` 也可能在上面——这些都不挂进沙箱
    inside = [q.resolve() for q in python if q.exists()]
    candidates += [Path(p) for p in sys.path if p and Path(p).is_dir()
                   and any(Path(p).resolve().is_relative_to(q) for q in inside)]
    links = [(os.readlink(p), str(p)) for p in candidates[:7] if p.is_symlink()]
    keep: list[Path] = []
    for p in sorted({c.resolve() for c in candidates if c.exists()}, key=lambda q: len(q.parts)):
        if not any(p.is_relative_to(k) for k in keep):
            keep.append(p)
    return keep, links


def bwrap_command(argv: list[str], scratch: Path, hide: list[Path] = (),
                  limits: Limits = Limits()) -> list[str]:
    """在 bubblewrap 里运行 argv 的完整命令行；``hide`` 里的目录（其他作业所在处）换成空目录。"""
    cmd = [shutil.which("bwrap") or "bwrap", *_base_args()]
    roots, links = _readable_roots()
    tmp, course = Path("/tmp").resolve(), ROOT.resolve()
    under_tmp = [p for p in roots if p.is_relative_to(tmp)]   # 例如克隆在 /tmp 下的仓库
    shell = []                                   # 仓库目录本身：一个空的、之后只读的 tmpfs，

    def bind(p: Path) -> None:                   # 只有挂进去的几个部分在里面
        if p.is_relative_to(course) and not shell:
            shell.append(course)
            cmd.extend(["--size", "4096", "--tmpfs", str(course)])
        cmd.extend(["--ro-bind", str(p), str(p)])

    for p in roots:
        if p not in under_tmp:
            bind(p)
    for target, name in links:
        cmd += ["--symlink", target, name]
    cmd += ["--proc", "/proc", "--dev", "/dev", "--size", str(limits.tmp_size), "--tmpfs", "/tmp"]
    for p in under_tmp:                          # 私有的 /tmp 盖住了它们：在 tmpfs 之上再只读挂回来
        bind(p)
    for p in shell:                              # 仓库所在的 /tmp 是可写的：仓库目录单独设成只读
        cmd += ["--remount-ro", str(p)]
    for p in (Path(h).resolve() for h in hide):
        visible = any(p.is_relative_to(r) for r in roots)
        if visible and not any(r.is_relative_to(p) for r in roots) \
                and not scratch.resolve().is_relative_to(p):
            cmd += ["--size", "4096", "--tmpfs", str(p)]
    cmd += ["--bind", str(scratch), str(scratch), "--remount-ro", "/",
            "--chdir", str(scratch), "--", *argv]
    return cmd


def _pids_cgroup(limit: int) -> Path | None:
    """root 不受 RLIMIT_NPROC 约束，于是用 pids cgroup 限制进程数；建不了就返回 None。"""
    if os.geteuid() != 0:
        return None
    for base in (_PIDS_V1, Path("/sys/fs/cgroup")):
        if not (base / "cgroup.procs").exists() or not os.access(base, os.W_OK):
            continue
        group = base / f"gptcourse-grade-{os.getpid()}-{time.monotonic_ns()}"
        try:
            group.mkdir()
            (group / "pids.max").write_text(str(limit))
            return group
        except OSError:
            try:
                group.rmdir()
            except OSError:
                pass
    return None


def _limiter(limits: Limits, group: Path | None):
    def apply() -> None:
        soft = lambda n: (n, n)                                         # noqa: E731
        resource.setrlimit(resource.RLIMIT_AS, soft(limits.memory))
        resource.setrlimit(resource.RLIMIT_CPU, soft(limits.cpu))
        resource.setrlimit(resource.RLIMIT_CORE, soft(0))
        resource.setrlimit(resource.RLIMIT_FSIZE, soft(limits.file_size))
        if os.geteuid() != 0:
            running = sum(1 for _ in Path("/proc").glob("[0-9]*")) if Path("/proc").exists() else 0
            resource.setrlimit(resource.RLIMIT_NPROC, soft(running + limits.processes))
        if group is not None:
            (group / "cgroup.procs").write_text("0")
    return apply


def run(argv: list[str], *, scratch: Path, timeout: float, limits: Limits, env: dict,
        pass_fds: tuple[int, ...] = (), hide: list[Path] = (), sealed: bool = True,
        log: Path | None = None) -> Outcome:
    """运行 argv（sealed 时在沙箱里），最多 timeout 秒；时限到就杀掉整个进程树。"""
    cmd = bwrap_command(argv, scratch, hide, limits) if sealed else argv
    group = _pids_cgroup(limits.processes) if sealed else None
    log = log or scratch / "log.txt"
    start = time.monotonic()
    try:
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                    env=env, cwd=scratch, pass_fds=pass_fds,
                                    start_new_session=True,
                                    preexec_fn=_limiter(limits, group))
            try:
                rc: int | None = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                rc = None
            _kill_tree(proc, group)
    finally:
        if group is not None:
            _remove_group(group)
    text = log.read_bytes()[-4000:].decode("utf-8", "replace")
    return Outcome(rc, time.monotonic() - start, text)


def _kill_tree(proc: subprocess.Popen, group: Path | None) -> None:
    """杀掉进程组；封闭时 bwrap 一死，PID 命名空间里的一切都随之消失。"""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if group is not None:                     # 不封闭时 pids cgroup 不存在；封闭时兜底
        try:
            for pid in (group / "cgroup.procs").read_text().split():
                os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError):
            pass
    proc.wait()


def _remove_group(group: Path) -> None:
    for _ in range(50):
        try:
            group.rmdir()
            return
        except OSError:
            time.sleep(0.05)
