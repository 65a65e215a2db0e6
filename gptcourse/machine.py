"""这台机器是什么、现在忙不忙、物理上限是多少：笔记本报告用时与速度时说明在哪台机器上量的，速度基准也以它为地基。

速度数字只有在**安静**的机器上才可信：别的进程抢走的 CPU 时间会让每个数都变小，而且变小的比例
随时在变。所以基准在开始和结束时各拍一张“快照”（时间、负载平均、CPU 型号与指令集、线程数，
以及**除本进程以外**的进程用掉了多少 CPU），并在各段之间重测 fp32 矩阵乘法上限：

- 别的进程用掉超过 ``MAX_OTHER_SHARE``（默认全部核的 15 %），或
- 1 分钟负载平均超过每核 ``MAX_LOAD_PER_CORE``（0.3），或
- 虚拟机的宿主抢走（steal）的 CPU 时间超过 ``MAX_STEAL_SHARE``（5 %），或
- 各段之间重测的 fp32 上限（每次取 ``CEILING_REPEATS`` 次里最快的）的**中位数**比最好的一次低
  ``MAX_DRIFT``（15 %）以上：别的负载会压低大多数次，宿主偶尔的一次抖动只压低一次（2 核的云主机
  AMD EPYC 上什么都不跑、连续测 8 次，最快与最慢就差 11 %，单次低到 −19 %），

就算“忙”：速度基准（课堂工具包里的 ``bench``）拒绝把结果写进 ``docs/benchmarks.*``，除非加
``--allow-busy``——那时每个数字都标上“机器忙”。

物理上限（每个结果都报告它占上限的比例）：

- fp32 / bf16 矩阵乘法的 GFLOP/s（n×n 乘 n×n，2n³ 次运算，取最快的一次）；
- 内存带宽（STREAM 式的复制：一个远大于缓存的数组拷贝到另一个，读 + 写的字节数 / 秒）。
  批大小 1 的解码每写一个词元要把全部权重读一遍，所以“权重字节数 / 带宽”就是每个词元的下限。
"""
from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import torch

from .precision import bf16_decision, cpu_info

MAX_OTHER_SHARE = 0.15          # 别的进程最多用掉全部核的这么多
MAX_LOAD_PER_CORE = 0.3         # 1 分钟负载平均 / 核数
MAX_DRIFT = 0.15                # 各次 fp32 上限之间的最大相对差
MAX_STEAL_SHARE = 0.05          # 宿主（虚拟机之外）抢走全部核的这么多
CEILING_REPEATS = 15            # 每次重测 fp32 上限取这么多次里最快的一次（约 1.5 秒）


def machine_info() -> dict:
    """CPU 型号、核数、线程数、PyTorch 版本，以及与 bf16 相关的指令集标志。"""
    name, flags = cpu_info()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"cpu": name or "未知", "cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "gpu": gpu,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "bf16_flags": sorted(flags & {"avx512_bf16", "amx_bf16", "amx_tile", "avx512f"}),
            "bf16_decision": bf16_decision("cpu")[1]}


def _cpu_jiffies() -> tuple[int, int] | None:
    """(全部核的忙碌 jiffies, 本进程用掉的 jiffies)，读 /proc；不是 Linux 时 None。
    忙碌里含 steal（宿主拿走的时间），见 ``steal_jiffies``。"""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        with open(f"/proc/{os.getpid()}/stat", encoding="ascii") as f:
            own = f.read().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)          # idle + iowait
    return sum(fields[:8]) - idle, int(own[11]) + int(own[12])        # utime + stime


def steal_jiffies() -> tuple[int, int] | None:
    """(宿主抢走的 jiffies, 全部 jiffies)，读 /proc/stat 的 steal 列；读不到时 None。"""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def steal_share(start: tuple[int, int] | None, end: tuple[int, int] | None) -> float | None:
    """两次 ``steal_jiffies()`` 之间，宿主抢走了全部 CPU 时间的多少（0…1）。"""
    if start is None or end is None or end[1] <= start[1]:
        return None
    return (end[0] - start[0]) / (end[1] - start[1])


def other_cpu_share(seconds: float = 1.0) -> float | None:
    """这 ``seconds`` 秒里，**别的**进程用掉了全部核的多少（0…1）；读不到 /proc 时 None。"""
    a = _cpu_jiffies()
    if a is None:
        return None
    time.sleep(seconds)
    b = _cpu_jiffies()
    ticks = os.sysconf("SC_CLK_TCK") * seconds * (os.cpu_count() or 1)
    return max(0.0, ((b[0] - a[0]) - (b[1] - a[1])) / ticks)


def snapshot(seconds: float = 1.0) -> dict:
    """此刻的机器状态：时间、负载平均、别的进程的 CPU 占比、线程数。"""
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"time": time.strftime("%Y-%m-%d %H:%M:%S"),
            "load_average": list(load) if load else None, "steal_jiffies": steal_jiffies(),
            "other_cpu_share": other_cpu_share(seconds),
            "cores": os.cpu_count(), "torch_threads": torch.get_num_threads()}


def busy_reasons(snapshots: list[dict], fp32_gflops: list[float]) -> list[str]:
    """快照与各次 fp32 上限 → 机器“忙”的理由（空列表 = 安静）。

    负载平均只看第一张快照（开始之前）：之后的负载平均里有基准自己的线程。别的进程的 CPU 占比
    不含本进程，每张快照都看。"""
    reasons = []
    for i, s in enumerate(snapshots):
        share, load, cores = s.get("other_cpu_share"), s.get("load_average"), s["cores"] or 1
        if share is not None and share > MAX_OTHER_SHARE:
            reasons.append(f"{s['time']} 别的进程用掉了全部核的 {share:.0%}"
                           f"（上限 {MAX_OTHER_SHARE:.0%}）")
        if i == 0 and load and load[0] / cores > MAX_LOAD_PER_CORE:
            reasons.append(f"{s['time']} 负载平均 {load[0]:.2f}，每核 {load[0] / cores:.2f}"
                           f"（上限 {MAX_LOAD_PER_CORE}）")
    if len(snapshots) > 1:
        steal = steal_share(snapshots[0].get("steal_jiffies"), snapshots[-1].get("steal_jiffies"))
        if steal is not None and steal > MAX_STEAL_SHARE:
            reasons.append(f"宿主抢走了测量期间全部 CPU 时间的 {steal:.0%}"
                           f"（steal，上限 {MAX_STEAL_SHARE:.0%}）")
    if len(fp32_gflops) > 1:
        drift = 1 - statistics.median(fp32_gflops) / max(fp32_gflops)
        if drift > MAX_DRIFT:
            shown = "、".join(f"{g:.0f}" for g in fp32_gflops)
            reasons.append(f"fp32 上限各段重测的中位数比最好的一次低 {drift:.0%}"
                           f"（{shown} GFLOP/s，上限 {MAX_DRIFT:.0%}）")
    return reasons


# ---------------------------------------------------------------- 物理上限
def _best(fn, repeats: int) -> float:
    fn()                                                           # 预热
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def matmul_ceiling(n: int = 2048, repeats: int = 5, dtype=torch.float32) -> dict:
    """n×n 的矩阵乘法（2n³ 次浮点运算），取最快的一次 → GFLOP/s。"""
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=g).to(dtype) for _ in range(2))
    best = _best(lambda: a @ b, repeats)
    return {"n": n, "dtype": str(dtype).removeprefix("torch."), "seconds": best,
            "gflops": 2 * n**3 / best / 1e9}


def memory_bandwidth(megabytes: int = 256, repeats: int = 5) -> dict:
    """STREAM 式复制：``megabytes`` MB 的 fp32 数组拷贝到另一个（远大于缓存），读 + 写的 GB/s。"""
    n = megabytes * 2**20 // 4
    a, b = torch.ones(n), torch.empty(n)
    best = _best(lambda: b.copy_(a), repeats)
    return {"megabytes": megabytes, "seconds": best, "gb_s": 2 * a.nbytes / best / 1e9}


def limits(quick: bool = False) -> dict:
    """这台机器的 fp32 / bf16 矩阵乘法上限与内存带宽。没有原生 bf16 指令时 bf16 只测小矩阵
    （靠转换模拟，慢几十倍，测大矩阵要等很久）。"""
    native_bf16 = bf16_decision("cpu")[0]
    return {"fp32": matmul_ceiling(512 if quick else 2048, 3 if quick else 5),
            "bf16": matmul_ceiling(256 if quick or not native_bf16 else 2048,
                                   2 if quick else 3, torch.bfloat16),
            "memory": memory_bandwidth(32 if quick else 256, 2 if quick else 5)}


def cache_levels(cpu: str = "/sys/devices/system/cpu/cpu0/cache") -> list[dict]:
    """CPU 0 看得见的各级数据缓存：[{"level", "type", "bytes", "shared_cpus"}]；读不到时空列表。"""
    out = []
    for d in sorted(Path(cpu).glob("index*")):
        try:
            kind = (d / "type").read_text().strip()
            if kind == "Instruction":
                continue
            size = (d / "size").read_text().strip()
            mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1], 1)
            out.append({"level": int((d / "level").read_text()), "type": kind,
                        "bytes": int(size.rstrip("KMG")) * mult,
                        "shared_cpus": (d / "shared_cpu_list").read_text().strip()})
        except (OSError, ValueError):
            continue
    return out


def cache_holding(nbytes: int, levels: list[dict] | None = None) -> str:
    """放得下 nbytes 的最小一级缓存（"L3（105 MiB）"）；都放不下 → "内存（DRAM）"。"""
    for c in sorted(levels if levels is not None else cache_levels(), key=lambda c: c["level"]):
        if c["bytes"] >= nbytes:
            return f"L{c['level']}（{c['bytes'] / 2**20:g} MiB）"
    return "内存（DRAM）"
