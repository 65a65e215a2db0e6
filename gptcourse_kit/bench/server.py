"""网页演示的负载测试：``python -m gptcourse_kit.bench.server [--quick]``。

在 127.0.0.1 的空闲端口上用子进程启动 ``python -m gptcourse serve``（随课程发布的模型，默认限额），
然后在本进程里用线程扮演客户端，全部在同一次运行里测量：

1. 1、4、16 个并发客户端（1 个客户端时与"直接调用 generate()"交替进行，两边赶上同样的
   机器负载，比一比 HTTP 的开销），各发固定数量（默认 32，但每个客户端至少 4 个）的
   ``POST /api/generate``（短的 ``max_new_tokens``），
   超过时间上限就不再发新请求 → 请求/秒、延迟 p50/p95/最大值、503 的个数；
2. 同样的 4 个客户端，同时有 100 个慢速客户端（slowloris：请求头每秒送一个字节，被服务器断开
   就重连；比服务器的 64 个连接上限还多）→ 正常客户端照样得到服务：连接数满时服务器先断开
   等请求头最久的连接，没满时慢速连接也在 ``header_timeout`` 后被关掉；
3. 8 个请求发出后立即断开（每个要写 200 个字）→ 下一个请求要等多久（工作被放弃，名额放回）。

CPU 是共享的时候数字会波动；输出里写明 CPU、它的相关指令集和测量时的负载。
"""
from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from gptcourse import files
from gptcourse.checkpoint import SHIPPED
from gptcourse.errors import MachineError, UserError

from .training import machine_info

CONCURRENCY = (1, 4, 16)


def start_server(checkpoint: Path, *extra: str) -> tuple[subprocess.Popen, int]:
    """子进程里启动 serve（端口 0），从启动横幅里读出端口。``extra``：更多命令行参数。"""
    proc = subprocess.Popen([sys.executable, "-m", "gptcourse", "serve", "--port", "0",
                             "--checkpoint", str(checkpoint), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()                 # "网页演示已启动：http://127.0.0.1:PORT/ …"
    if "http://" not in line:
        proc.kill()
        raise RuntimeError(f"服务器没有启动：{line!r}")
    return proc, int(line.split("http://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])


def one_request(port: int, body: dict, timeout: float = 120) -> tuple[int, float]:
    """→ (状态码, 秒)。连接失败算作状态 0。"""
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/api/generate", json.dumps(body),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        status = resp.status
    except OSError:
        status = 0
    finally:
        conn.close()
    return status, time.perf_counter() - t0


def percentile(xs: list[float], q: float) -> float:
    """最近秩法的分位数（q ∈ (0, 1]）。"""
    xs = sorted(xs)
    return xs[max(0, math.ceil(q * len(xs)) - 1)] if xs else float("nan")


def load(port: int, clients: int, requests: int, time_limit: float, max_new_tokens: int) -> dict:
    """clients 个线程从同一个计数器里领请求，直到发完 requests 个或超过 time_limit 秒。"""
    lock, results, next_i = threading.Lock(), [], [0]
    t_start = time.perf_counter()

    def client():
        while True:
            with lock:
                i = next_i[0]
                if i >= requests or time.perf_counter() - t_start > time_limit:
                    return
                next_i[0] += 1
            status, sec = one_request(port, {"seed": i, "max_new_tokens": max_new_tokens})
            with lock:
                results.append((status, sec))

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t_start
    return {"clients": clients, **_summary(results, wall), "wall_s": wall}


class Stallers:
    """n 个慢速客户端：请求头每秒送一个字节、永远不送完；被服务器关掉就重连。"""

    def __init__(self, port: int, n: int, min_seconds: float = 13.0):
        self.port, self.n, self.stop = port, n, threading.Event()
        self.min_seconds = min_seconds          # 至少坚持这么久，好看到服务器的 header_timeout
        self.opened = self.closed_by_server = 0
        self.lifetimes: list[float] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _open(self) -> list:
        """→ [套接字, 打开的时刻]；连不上时套接字是 None（下一秒再试）。"""
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            s.sendall(b"POST /api/generate HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        except OSError:
            return [None, time.monotonic()]
        self.opened += 1
        return [s, time.monotonic()]

    def _run(self):
        conns = [self._open() for _ in range(self.n)]
        while not self.stop.wait(1.0):
            for c in conns:
                if c[0] is None:
                    c[:] = self._open()
                    continue
                try:
                    gone = select.select([c[0]], [], [], 0)[0] and c[0].recv(4096) == b""
                    if not gone:
                        c[0].sendall(b"x")
                except OSError:
                    gone = True
                if gone:                                 # 服务器断开了：记下活了多久，重连
                    self.closed_by_server += 1
                    self.lifetimes.append(time.monotonic() - c[1])
                    c[0].close()
                    c[:] = self._open()
        for c in conns:
            if c[0] is not None:
                c[0].close()

    def __enter__(self):
        self.t0 = time.monotonic()
        self.thread.start()
        time.sleep(1.5)                                  # 让慢速连接先占上
        return self

    def __exit__(self, *exc):
        time.sleep(max(0.0, self.t0 + self.min_seconds - time.monotonic()))
        self.stop.set()
        self.thread.join()


def abandoned(port: int, n: int = 8) -> dict:
    """n 个"发完就走"的长请求（200 个字），然后计时下一个普通请求。"""
    body = json.dumps({"max_new_tokens": 200, "seed": 1}).encode()
    for _ in range(n):
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"POST /api/generate HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                      + body)
    time.sleep(0.2)
    status, sec = one_request(port, {"seed": 0, "max_new_tokens": 16})
    return {"abandoned": n, "next_status": status, "next_latency_s": sec}


def run(quick: bool = False, requests: int | None = None, time_limit: float = 60.0,
        max_new_tokens: int = 16, stalled: int = 100, checkpoint: Path = SHIPPED) -> dict:
    requests = requests or (8 if quick else 32)
    m = machine_info()
    print(f"CPU：{m['cpu']}，{m['cores']} 核；相关指令：{', '.join(m['bf16_flags']) or '无'}；"
          f"PyTorch {m['torch']}，torch 线程数 {m['torch_threads']}（服务器子进程继承同样的环境）；"
          f"负载 {os.getloadavg()[0]:.1f}（测量前）")
    print(f"服务器：python -m gptcourse serve（{checkpoint.name}，默认限额），127.0.0.1；"
          f"每个请求 max_new_tokens={max_new_tokens}，每行 {requests} 个请求，"
          f"时间上限 {time_limit:g} 秒")
    proc, port = start_server(checkpoint)
    try:
        one_request(port, {"max_new_tokens": max_new_tokens})                 # 预热
        print(f"{'客户端':>6} | {'成功':>4} | {'503':>3} | {'失败':>4} | {'请求/秒':>7} | "
              f"{'p50 秒':>6} | {'p95 秒':>6} | {'最大 秒':>7}")
        base, single = single_vs_library(port, checkpoint, requests, max_new_tokens)
        print(f"{'库':>6} | {base['ok']:>4} |   – |    – | {base['req_per_s']:>7.2f} | "
              f"{base['p50_s']:>6.2f} | {base['p95_s']:>6.2f} | {base['max_s']:>7.2f}  "
              "（直接调用 generate()，与下一行交替进行）")
        _print_row(single, "1")
        rows = [single]
        for c in CONCURRENCY[1:]:             # 并发越高发得越多：每个客户端至少 4 个
            rows.append(load(port, c, max(requests, 4 * c), time_limit, max_new_tokens))
            _print_row(rows[-1], f"{c}")
        with Stallers(port, stalled) as st:
            slow = load(port, 4, requests, time_limit, max_new_tokens)
        slow |= {"stalled": stalled, "stalled_opened": st.opened,
                 "stalled_closed_by_server": st.closed_by_server,
                 "stalled_mean_lifetime_s": (sum(st.lifetimes) / len(st.lifetimes)
                                             if st.lifetimes else None)}
        _print_row(slow, f"4+{stalled}慢")
        life = slow["stalled_mean_lifetime_s"]
        print(f"慢速连接：打开 {st.opened} 个，被服务器关掉 {st.closed_by_server} 个"
              + (f"，平均存活 {life:.1f} 秒" if life else ""))
        ab = abandoned(port)
        print(f"{ab['abandoned']} 个长请求发出后立即断开，下一个请求：状态 {ab['next_status']}，"
              f"{ab['next_latency_s']:.2f} 秒")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(f"负载 {os.getloadavg()[0]:.1f}（测量后）")
    return {"machine": m, "max_new_tokens": max_new_tokens, "requests_per_row": requests,
            "time_limit_s": time_limit, "library": base, "rows": rows, "stalled": slow,
            "abandoned": ab}


def single_vs_library(port: int, checkpoint: Path, requests: int, max_new_tokens: int) -> tuple:
    """1 个客户端，与直接调用 generate()（不经过 HTTP，同样的参数）交替进行，两边赶上同样的
    机器负载 → (库的统计, 服务器的统计)。请求/秒 = 请求数 / 各自用时之和。"""
    from gptcourse import checkpoint as ckpt
    from gptcourse.generate import generate
    from gptcourse.serve import DEFAULTS

    model, tok, _ = ckpt.load(checkpoint)
    model.eval()
    kw = {**DEFAULTS, "max_new_tokens": max_new_tokens}
    generate(model, tok, **kw)                                                  # 预热
    lib, srv = [], []
    for i in range(requests):
        t0 = time.perf_counter()
        generate(model, tok, **{**kw, "seed": i})
        lib.append(time.perf_counter() - t0)
        srv.append(one_request(port, {"seed": i, "max_new_tokens": max_new_tokens}))
    return (_summary([(200, sec) for sec in lib], sum(lib)),
            {"clients": 1, **_summary(srv, sum(sec for _, sec in srv))})


def _summary(results: list[tuple[int, float]], seconds: float) -> dict:
    """[(状态码, 秒)] 与总用时 → 成功数、503 数、失败数、请求/秒、成功请求的延迟分位数。"""
    ok = [sec for status, sec in results if status == 200]
    return {"sent": len(results), "ok": len(ok),
            "busy_503": sum(status == 503 for status, _ in results),
            "failed": sum(status not in (200, 503) for status, _ in results),
            "req_per_s": len(ok) / seconds, "p50_s": percentile(ok, 0.5),
            "p95_s": percentile(ok, 0.95), "max_s": max(ok, default=float("nan"))}


def _print_row(r: dict, label: str) -> None:
    print(f"{label:>6} | {r['ok']:>4} | {r['busy_503']:>3} | {r['failed']:>4} | "
          f"{r['req_per_s']:>7.2f} | {r['p50_s']:>6.2f} | {r['p95_s']:>6.2f} | "
          f"{r['max_s']:>7.2f}", flush=True)


def markdown_table(result: dict) -> str:
    """把 run() 的结果写成 Markdown 表格（docs/benchmarks.md 的服务器一节用）。"""
    lines = ["| 客户端 | 成功 | 503 | 失败 | 请求/秒 | p50 秒 | p95 秒 | 最大 秒 |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    b = result["library"]
    lines.append(f"| 对照：直接调用 `generate()`（与 1 个客户端交替） | {b['ok']} | – | – | "
                 f"{b['req_per_s']:.2f} | {b['p50_s']:.2f} | {b['p95_s']:.2f} | "
                 f"{b['max_s']:.2f} |")
    st = result["stalled"]
    for r, label in [(r, f"{r['clients']}") for r in result["rows"]] + \
            [(st, f"4 + {st['stalled']} 个慢速客户端")]:
        lines.append(f"| {label} | {r['ok']} | {r['busy_503']} | {r['failed']} | "
                     f"{r['req_per_s']:.2f} | {r['p50_s']:.2f} | {r['p95_s']:.2f} | "
                     f"{r['max_s']:.2f} |")
    return "\n".join(lines)


def stream_request(port: int, body: dict, timeout: float = 120) -> tuple[int, float, float]:
    """``POST /api/stream`` → (状态码, 第一个字到达的秒数, 整首到达的秒数)。"""
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    first = whole = float("nan")
    try:
        conn.request("POST", "/api/stream", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        status = resp.status
        for line in resp:
            if first != first and b'"piece"' in line:
                first = time.perf_counter() - t0
        whole = time.perf_counter() - t0
    except OSError:
        status = 0
    finally:
        conn.close()
    return status, first, whole


def demo_latency(requests: int = 50, clients=(1, 8), checkpoint: Path = SHIPPED,
                 wait_compile: float = 900) -> dict:
    """网页演示的首字时间与整首七律的时间（发布设置、form=七律），p50/p95，1 与 8 个并发客户端。
    服务器带 ``--compile`` 启动，等后台编译完（/api/info 的 compiled）才开始计时。"""
    proc, port = start_server(checkpoint, "--compile")
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < wait_compile:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/api/info")
            if json.loads(conn.getresponse().read()).get("compiled"):
                break
            conn.close()
            time.sleep(1)
        compiled_after = time.monotonic() - t0
        stream_request(port, {"form": "七律", "seed": 0})                   # 预热
        rows = []
        for c in clients:
            lock, out, nxt = threading.Lock(), [], [0]

            def client(lock=lock, out=out, nxt=nxt):
                while True:
                    with lock:
                        i = nxt[0]
                        if i >= requests:
                            return
                        nxt[0] += 1
                    r = stream_request(port, {"form": "七律", "seed": i})
                    with lock:
                        out.append(r)
            threads = [threading.Thread(target=client) for _ in range(c)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            ok = [(f, w) for s, f, w in out if s == 200]
            rows.append({"clients": c, "sent": len(out), "ok": len(ok),
                         "first_p50_s": percentile([f for f, _ in ok], 0.5),
                         "first_p95_s": percentile([f for f, _ in ok], 0.95),
                         "whole_p50_s": percentile([w for _, w in ok], 0.5),
                         "whole_p95_s": percentile([w for _, w in ok], 0.95)})
            r = rows[-1]
            print(f"网页演示 {c} 个客户端：首字 p50 {r['first_p50_s']:.3f} 秒、p95 "
                  f"{r['first_p95_s']:.3f} 秒；整首七律 p50 {r['whole_p50_s']:.3f} 秒、p95 "
                  f"{r['whole_p95_s']:.3f} 秒（{r['ok']}/{r['sent']} 成功）", flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {"requests": requests, "compiled_after_s": compiled_after, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gptcourse_kit.bench.server",
                                description="网页演示的负载测试（127.0.0.1，固定请求数与时间上限）")
    p.add_argument("--quick", action="store_true", help="每行只发 8 个请求")
    p.add_argument("--requests", type=int, default=None,
                   help="每行的请求数（默认 32；每个客户端至少 4 个）")
    p.add_argument("--time-limit", type=float, default=60.0, help="每行最多多少秒（默认 60）")
    p.add_argument("--max-new-tokens", type=int, default=16, help="每个请求写多少个字（默认 16）")
    p.add_argument("--stalled", type=int, default=100,
                   help="慢速客户端个数（默认 100，多于服务器的 64 个连接上限）")
    p.add_argument("--json", default=None, help="把结果写成 JSON")
    args = p.parse_args(argv)
    result = run(args.quick, args.requests, args.time_limit, args.max_new_tokens, args.stalled)
    if args.json:
        try:
            files.write_text(args.json, json.dumps(result, ensure_ascii=False, indent=2) + "\n")
        except (UserError, MachineError) as e:
            print(f"错误：{e}", file=sys.stderr)
            return 1 if isinstance(e, MachineError) else 2
    print()
    print(markdown_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
