"""网页演示的 HTTP 底座：让一个只用标准库的服务器经得起不守规矩的客户端。

:mod:`gptcourse.serve` 只管"诗"（参数、生成、页面）；这里管"连接"，每一条都对应一种攻击或事故：

- **读超时是总时限**：请求头（连同 keep-alive 的空闲等待）必须在 ``header_timeout`` 秒内收完，
  正文在 ``body_timeout`` 秒内收完。按"每次 recv 最多等多久"计时挡不住每隔几秒送一个字节的
  慢速攻击（slowloris），所以每次 recv 只等到这一阶段的截止时刻为止；
- **写超时**：客户端不读数据时，一次写最多等 ``write_timeout`` 秒，然后断开；
- **连接数有上限**：同时最多 ``connections`` 个连接（每个一个线程）；满了时先断开等请求头
  等得最久的连接，所有连接都在忙时新来的立即得到 503；
- **生成名额**（:class:`Gate`）：最多 ``slots`` 个生成同时在跑、``queue`` 个在排队，
  再多的请求立即 503；排队的客户端断开了就不再等；
- **只接待本机页面**（:class:`HostPolicy`）：``Host`` 必须是本机或绑定的地址，``Origin``（若有）
  必须与页面同源——挡住跨站请求伪造与 DNS 重绑定；
- **每个响应都带安全头**（:data:`SECURITY_HEADERS`）：CSP 不允许任何外部来源、不许被嵌进框架。
"""
from __future__ import annotations

import io
import ipaddress
import json
import select
import socket
import sys
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, fields
from http.server import HTTPServer

from ..errors import UserError

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "font-src 'self'; connect-src 'self'; base-uri 'none'; "
                               "form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
}
LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"", "0.0.0.0", "::"})


class ApiError(Exception):
    """一个要回给客户端的 4xx/5xx：状态码 + 中文说明 + 英文说明。"""

    def __init__(self, status: int, zh: str, en: str):
        super().__init__(f"{zh} / {en}")
        self.status, self.zh, self.en = status, zh, en

    def payload(self) -> dict:
        return {"error": f"{self.zh} / {self.en}", "zh": self.zh, "en": self.en}


class ClientGone(Exception):
    """客户端已经断开：停止手上的工作，什么也不用回。"""


@dataclass(frozen=True)
class Limits:
    """每个连接、每个请求的上限。测试里把时间设得很短。"""
    slots: int = 4                  # 同时在跑的生成数
    queue: int = 16                 # 排队等生成名额的请求数（可以是 0）；再多 → 503
    queue_timeout: float = 30.0     # 最多排队多少秒；超时 → 503
    connections: int = 64           # 同时打开的连接数（每个一个线程）；再多 → 503 并断开
    header_timeout: float = 10.0    # 从开始等请求（含 keep-alive 空闲）到请求头收完的总时间
    body_timeout: float = 10.0      # 收完请求正文的总时间
    write_timeout: float = 10.0     # 每次向客户端写数据最多等多久（客户端不读 → 断开）

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            ok = isinstance(v, int) if f.type == "int" else isinstance(v, (int, float))
            if isinstance(v, bool) or not ok or not (v >= 0 if f.name == "queue" else v > 0):
                raise UserError(f"Limits.{f.name} 必须是正数（queue 可以是 0），收到 {v!r}")


# ---------------------------------------------------------------- 带截止时刻的读写
class DeadlineReader(io.RawIOBase):
    """套接字的读端：每次 recv 最多等到 ``owner.deadline``（time.monotonic() 的时刻）为止。"""

    def __init__(self, sock: socket.socket, owner):
        self.sock, self.owner = sock, owner

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        left = self.owner.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("读取超时")
        self.sock.settimeout(left)
        return self.sock.recv_into(buf)


class TimedWriter(io.BufferedIOBase):
    """套接字的写端：每次 write 整体最多等 ``timeout`` 秒（sendall 的超时是总时间）。"""

    def __init__(self, sock: socket.socket, timeout: float):
        self.sock, self.timeout = sock, timeout

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.sock.settimeout(self.timeout)
        self.sock.sendall(data)
        return len(memoryview(data))


def client_gone(sock: socket.socket) -> bool:
    """对方是否已经重置了连接（不读走任何数据，也不等待）。

    读到 EOF 不算：``shutdown(SHUT_WR)``（半关闭，``nc -N`` 与一些脚本这样做）只是说"我不再发了"，
    它还在等回答。真的走了的客户端靠 RST（``ECONNRESET``）、套接字上的错误（``SO_ERROR``）或
    写回答时的 ``EPIPE`` 认出来——流式接口每写一个字就会发现。"""
    try:
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
            return True
        readable, _, _ = select.select([sock], [], [], 0)
        if readable:
            sock.recv(1, socket.MSG_PEEK)   # 重置的连接在这里抛 ConnectionResetError
        return False
    except (OSError, ValueError):          # 重置、已关闭
        return True


# ---------------------------------------------------------------- 生成名额
class Gate:
    """最多 ``slots`` 个生成同时在跑，最多 ``queue`` 个请求排队；再多的立即得到 503。

    先来先得：放回的名额直接交给排在最前面的请求，新来的请求不能插队（否则高并发时
    总有请求一直抢不到名额）。
    """

    def __init__(self, slots: int, queue: int):
        self.slots, self.queue = slots, queue
        self.running = 0
        self._waiters: deque[threading.Event] = deque()
        self._lock = threading.Lock()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    @contextmanager
    def slot(self, timeout: float, gone=lambda: False):
        """占一个名额（必要时排队，每 0.1 秒看一眼 ``gone()``）；with 块结束时放回。"""
        self._acquire(timeout, gone)
        try:
            yield
        finally:
            with self._lock:
                if self._waiters:
                    self._waiters.popleft().set()      # 名额直接交给队首，running 不变
                else:
                    self.running -= 1

    def _acquire(self, timeout: float, gone) -> None:
        with self._lock:
            if self.running < self.slots and not self._waiters:
                self.running += 1
                return
            if len(self._waiters) >= self.queue:
                raise ApiError(503, f"服务器正忙：{self.running} 首诗正在写，"
                                    f"{len(self._waiters)} 个请求在排队，请稍后再试",
                               "server busy, try again later")
            turn = threading.Event()
            self._waiters.append(turn)
        end = time.monotonic() + timeout
        while not turn.wait(0.1):
            late = time.monotonic() >= end
            if late or gone():
                with self._lock:
                    if not turn.is_set():              # 还没轮到：离开队伍
                        self._waiters.remove(turn)
                        if late:
                            raise ApiError(503, f"排队超过 {timeout:g} 秒，请稍后再试",
                                           "timed out waiting for a free slot")
                        raise ClientGone
                return                                 # 恰好轮到了：名额已经是我们的


# ---------------------------------------------------------------- Host / Origin
def host_name(value: str) -> str | None:
    """``Host`` 头的值 → 小写主机名（去掉端口和 IPv6 的方括号）；格式不对 → None。

    >>> host_name("LocalHost:8000"), host_name("[::1]:80"), host_name("a:b")
    ('localhost', '::1', None)
    """
    v = value.strip().lower()
    if v.startswith("["):
        name, sep, port = v[1:].partition("]")
        port = port[1:] if port.startswith(":") else ("x" if port else "")
    else:
        name, sep, port = v.partition(":")
    if not name or (port and not (port.isascii() and port.isdigit())):
        return None
    return name


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


class HostPolicy:
    """谁可以用这个服务器：挡住别的网站（CSRF）和指向本机的陌生域名（DNS 重绑定）。

    - ``Host`` 必须是 localhost / 127.0.0.1 / ::1、绑定的地址或 ``allow_hosts`` 里的名字；
      绑定到 0.0.0.0（课堂上给全班用）时，任何 IP 地址也可以——DNS 重绑定只能借用域名；
    - ``Origin`` 若出现，必须与 ``http://<Host>`` 相同（同源），或在 ``allow_origins`` 里
      （这些来源的页面还会得到 CORS 响应头，可以跨站调用 API）。
    """

    def __init__(self, bound_host: str, allow_hosts=(), allow_origins=()):
        self.hosts = LOCAL_NAMES | {bound_host.lower()} | {h.lower() for h in allow_hosts}
        self.any_ip = bound_host in WILDCARDS
        self.origins = {o.lower().rstrip("/") for o in allow_origins}

    def check(self, host: str | None, origin: str | None) -> None:
        """不允许 → ApiError(403)。没有 Host 头的不是浏览器（浏览器总会发送），放行。"""
        if host is not None:
            name = host_name(host)
            if name is None or not (name in self.hosts or (self.any_ip and _is_ip(name))):
                raise ApiError(403, f"拒绝访问：Host {host[:100]!r} 不是这台服务器的地址"
                                    "（课堂使用请加 --allow-host）", "forbidden host")
        if origin is not None:
            o = origin.strip().lower().rstrip("/")
            if o not in self.origins and (host is None or o != f"http://{host.strip().lower()}"):
                raise ApiError(403, f"拒绝跨站请求：来源 {origin[:100]!r} 与页面不同源"
                                    "（需要时请加 --allow-origin）", "cross-origin request refused")

    def cors_headers(self, origin: str | None) -> dict[str, str]:
        """来源在 ``allow_origins`` 里时要加的 CORS 响应头（别的来源：没有，浏览器不给它读）。"""
        if origin is None or origin.strip().lower().rstrip("/") not in self.origins:
            return {}
        return {"Access-Control-Allow-Origin": origin.strip(), "Vary": "Origin"}


# ---------------------------------------------------------------- 服务器
def raw_json_response(err: ApiError) -> bytes:
    """不经过请求处理器、直接写给套接字的一个完整 JSON 响应（连接数满时用）。"""
    body = json.dumps(err.payload(), ensure_ascii=False).encode("utf-8")
    head = [f"HTTP/1.1 {err.status} Error", "Content-Type: application/json; charset=utf-8",
            f"Content-Length: {len(body)}", "Connection: close", "Cache-Control: no-store",
            "Retry-After: 1", *(f"{k}: {v}" for k, v in SECURITY_HEADERS.items())]
    return ("\r\n".join(head) + "\r\n\r\n").encode("ascii") + body


class BoundedHTTPServer(HTTPServer):
    """每个连接一个线程，但最多 ``limits.connections`` 个。

    连接数满了时，先断开**等请求头等得最久**的那个连接（慢速客户端或空闲的 keep-alive）给新连接
    腾位置：正常的客户端一连上就发完请求头，几乎不会是"最久"的那个，所以再多的慢速连接也挤不掉
    它们。所有连接都在忙（读正文、生成）时，新连接立即得到 503。
    """
    allow_reuse_address = True
    request_queue_size = 128                 # listen() 的积压队列（socketserver 默认只有 5）

    def __init__(self, address, handler, limits: Limits):
        self.limits = limits
        self.connections = threading.BoundedSemaphore(limits.connections)
        self.gate = Gate(limits.slots, limits.queue)
        self._idle: dict[socket.socket, float] = {}      # 正在等请求头的连接 → 开始等的时刻
        self._idle_lock = threading.Lock()
        super().__init__(address, handler)

    def waiting_for_request(self, sock: socket.socket, since: float | None) -> None:
        """处理器报告：从 since 起在等请求头（None = 不再等了）。"""
        with self._idle_lock:
            if since is None:
                self._idle.pop(sock, None)
            else:
                self._idle[sock] = since

    def _evict_idle(self) -> bool:
        with self._idle_lock:
            if not self._idle:
                return False
            victim = min(self._idle, key=self._idle.__getitem__)
            del self._idle[victim]
        try:
            victim.shutdown(socket.SHUT_RDWR)            # 它的 recv 立即返回，线程随之结束
        except OSError:
            pass
        return self.connections.acquire(timeout=1.0)

    def process_request(self, request, client_address):
        if not (self.connections.acquire(blocking=False) or self._evict_idle()):
            self._refuse(request)
            return
        try:
            threading.Thread(target=self._serve, args=(request, client_address),
                             daemon=True).start()
        except RuntimeError:                       # 线程开不出来：同样按"忙"处理
            self.connections.release()
            self._refuse(request)

    def _serve(self, request, client_address):
        try:
            self.finish_request(request, client_address)
        except Exception:  # noqa: BLE001 - 一个连接出错不能影响别的连接
            self.handle_error(request, client_address)
        finally:
            self.waiting_for_request(request, None)
            self.shutdown_request(request)
            self.connections.release()

    def _refuse(self, request) -> None:
        err = ApiError(503, f"服务器正忙：已有 {self.limits.connections} 个连接，请稍后再试",
                       "too many connections")
        try:
            request.settimeout(1.0)
            request.sendall(raw_json_response(err))
            request.shutdown(socket.SHUT_WR)
            request.setblocking(False)             # 读掉已经到达的请求，免得关闭时发出 RST
            while request.recv(65536):
                pass
        except OSError:
            pass
        self.shutdown_request(request)

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], OSError):  # 断开、重置、超时：是客户端的事
            return
        super().handle_error(request, client_address)


def lingering_close(sock: socket.socket, seconds: float = 1.0, max_bytes: int = 1 << 20) -> None:
    """先发完响应（FIN），再把对方还没读完的请求正文读掉一会儿，然后才关闭。

    直接关闭一个还有未读数据的连接会发出 RST，客户端可能因此丢掉已经收到的错误响应。
    """
    try:
        sock.shutdown(socket.SHUT_WR)
        end, got = time.monotonic() + seconds, 0
        while got < max_bytes:
            left = end - time.monotonic()
            if left <= 0:
                break
            sock.settimeout(left)
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += len(chunk)
    except OSError:
        pass
