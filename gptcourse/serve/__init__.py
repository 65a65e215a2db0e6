"""网页演示：``python -m gptcourse serve``，只用标准库的 ``http.server``。

- ``GET /``：一个中文页面（提示、诗体、藏头、温度/top-k/top-p 滑块，诗一个字一个字地出现；
  下面是"课堂演示"：拖滑块看下一个字的分布、看每个头的注意力），脚本和样式是同源的
  ``/app.js``、``/live.js``（课堂演示）、``/style.css``；``/font.otf`` 是课程自带的中文字体；
- ``GET /api/info``：模型与参数范围；
- ``POST /api/generate``：JSON 参数（与 :func:`gptcourse.generate.generate` 相同，包括押韵
  ``rhyme`` 与平仄 ``tones`` 两个开关）→ JSON 结果，带格律报告 ``analysis``（见 :func:`result`）；
- ``POST /api/stream``：同样的参数 → 逐行 JSON（NDJSON）：``{"piece": "春"}`` ……
  最后一行 ``{"done": true, "text": …, "analysis": …}``；中途出错时最后一行是 ``{"error": …}``。
- ``POST /api/next``（课堂演示）：同样的参数（可再加 ``top``）→ 下一个字的分布：排在前面的
  ``top`` 个字在每个阶段（模型、重复惩罚与格式、温度、top-k、top-p）的概率、每个阶段留下几个
  词元（见 :func:`next_reply`，算法是 :func:`gptcourse.generate.next_token_stages`）；
- ``POST /api/attention``（课堂演示）：``{"text": "白日依山尽"}`` → 每层每个头的注意力权重
  （行 = 查询位置，列 = 键位置；第 0 个位置是开头的换行），见 :meth:`Handler._attention`。

每个错误都是 JSON，带一句中文和一句英文：路径不对 → 404；``Host``/``Origin`` 不是本机页面 → 403；
正文不是 ``application/json`` → 415；没有 ``Content-Length``（或分块传输）→ 411；正文过大 → 413；
正文没按时传完 → 408；不是 JSON、参数未知、类型或范围不对、有词表外的字 → 400；
生成名额和队列都满了 → 503。客户端断开后，生成在下一个字之前停止，名额立即放回。
课堂上给全班用：``--host 0.0.0.0``（学生用老师电脑的 IP 访问）；用主机名访问时加
``--allow-host 名字``；别的网站的页面要调用 API 时加 ``--allow-origin http://那个网站``
（它会得到 CORS 响应头，``OPTIONS`` 预检也会通过）。
连接、超时与安全头的规则见 :mod:`gptcourse.serve.http`，
请求参数见 :mod:`gptcourse.serve.params`。

每个请求在自己的线程里用自己的 KV 缓存，模型权重只读（加载后处于 eval 模式），所以并发请求
互不干扰。
"""
from __future__ import annotations

import copy
import io
import json
import re
import socket
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import torch

from ..errors import UserError
from ..evaluate import text_attention
from ..fastdecode import cached_decoder, warm_up_in_background
from ..generate import STAGES, VerseSpec, next_token_stages, stream_tokens
from ..sampling import SamplingParams
from ..titles import MAX_TITLE
from ..verse import FORMS
from .http import (
    SECURITY_HEADERS,
    ApiError,
    BoundedHTTPServer,
    ClientGone,
    DeadlineReader,
    HostPolicy,
    Limits,
    TimedWriter,
    client_gone,
    lingering_close,
)
from .params import (
    DEFAULTS,
    MAX_ACROSTIC,
    MAX_NEW_TOKENS,
    MAX_PROMPT,
    RANGES,
    TOP_DEFAULT,
    TOP_MAX,
    ZERO_OK,
    attention_limit,
    brief,
    check_defaults,
    parse_attention,
    parse_next,
    parse_params,
    result,
)

STATIC = Path(__file__).parent / "static"
FONT = Path(__file__).parent.parent / "fonts" / "GPTCourseCJKSans-Regular.otf"   # 课程字体
FILES = {                        # GET 路径 → (文件, Content-Type, Cache-Control)
    "/": (STATIC / "index.html", "text/html; charset=utf-8", "no-store"),
    "/index.html": (STATIC / "index.html", "text/html; charset=utf-8", "no-store"),
    "/app.js": (STATIC / "app.js", "text/javascript; charset=utf-8", "no-store"),
    "/live.js": (STATIC / "live.js", "text/javascript; charset=utf-8", "no-store"),
    "/style.css": (STATIC / "style.css", "text/css; charset=utf-8", "no-store"),
    "/font.otf": (FONT, "font/otf", "max-age=86400"),   # 没装中文字体的机器上也能显示汉字
}
POST_PATHS = ("/api/generate", "/api/stream", "/api/next", "/api/attention")
MAX_BODY = 8192                 # 请求正文上限（字节）
HTTP_ERRORS_ZH = {400: "请求格式不对", 408: "请求超时", 414: "请求地址太长",
                  431: "请求头太长或太多", 501: "不支持这种请求方法（只有 GET、POST 和 OPTIONS）",
                  505: "不支持这个 HTTP 版本"}


class Handler(BaseHTTPRequestHandler):
    server_version = "gptcourse-demo"
    protocol_version = "HTTP/1.1"          # keep-alive；空闲连接在 header_timeout 之后关闭

    # ---------------------------------------------------------------- 连接
    def setup(self):
        self.connection = self.request
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)   # 逐字推送
        self.deadline = 0.0
        self.rfile = io.BufferedReader(DeadlineReader(self.connection, self))
        self.wfile = TimedWriter(self.connection, self.server.limits.write_timeout)
        self._unread = False

    def handle_one_request(self):
        now = time.monotonic()
        self.deadline = now + self.server.limits.header_timeout   # 空闲 + 请求头的总时限
        self._streaming = self._unread = False
        self.headers = None                                       # 上一个请求的头不再算数
        self.server.waiting_for_request(self.connection, now)    # 连接数满时可以被挤掉
        super().handle_one_request()

    def parse_request(self) -> bool:                             # 读请求行之后的请求头
        ok = super().parse_request()
        self.server.waiting_for_request(self.connection, None)   # 请求头收完了
        return ok

    def finish(self):
        super().finish()
        if self._unread:                    # 没读的正文还在路上：读掉它再关，免得发出 RST
            lingering_close(self.connection)

    def version_string(self) -> str:       # 不透露 Python 版本
        return self.server_version

    def log_message(self, fmt, *args):
        if self.server.verbose:
            super().log_message(fmt, *args)

    # ---------------------------------------------------------------- 响应
    def end_headers(self):
        cors = {} if self.headers is None else \
            self.server.policy.cors_headers(self.headers.get("Origin"))
        for k, v in {**SECURITY_HEADERS, **cors}.items():
            self.send_header(k, v)
        super().end_headers()

    def _send(self, status: int, body: bytes, ctype: str, cache: str = "no-store") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", cache)
        if status == 503:
            self.send_header("Retry-After", "1")
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj: dict) -> None:
        self._send(status, json.dumps(obj, ensure_ascii=False).encode("utf-8"),
                   "application/json; charset=utf-8")

    def _line(self, obj: dict) -> None:
        self.wfile.write((json.dumps(obj, ensure_ascii=False) + "\n").encode("utf-8"))

    def send_error(self, code, message=None, explain=None):
        """http.server 自己发现的错误（请求行不对、头太长、方法不支持……）也回 JSON。"""
        self.log_error("code %d, message %s", code, message)
        self.close_connection = self._unread = True
        en = message or self.responses.get(code, ("error",))[0]
        self._json(code, ApiError(code, HTTP_ERRORS_ZH.get(code, "请求有误"), en).payload())

    def _fail(self, status: int, payload: dict) -> None:
        if self._unread:
            self.close_connection = True
        try:
            if self._streaming:             # 200 和一部分诗已经发出：错误只能是最后一行
                self._line(payload)
            else:
                self._json(status, payload)
        except OSError:
            self.close_connection = True

    # ---------------------------------------------------------------- 请求
    def _guard(self) -> None:
        if len(self.headers.get_all("Host") or []) > 1:
            raise ApiError(400, "请求里有多个 Host 头", "duplicate Host header")
        self.server.policy.check(self.headers.get("Host"), self.headers.get("Origin"))

    def _body(self) -> bytes:
        ctype = self.headers.get("Content-Type", "")
        media, _, opts = ctype.partition(";")
        charset = re.search(r"charset\s*=\s*\"?([^\";]*)", opts, re.I)
        if media.strip().lower() != "application/json" or \
                (charset and charset.group(1).strip().lower() not in ("utf-8", "utf8")):
            raise ApiError(415, f"请求正文必须是 UTF-8 的 JSON（Content-Type: application/json），"
                                f"收到 {brief(ctype) if ctype else '（没有 Content-Type）'}",
                           "Content-Type must be application/json")
        if "Transfer-Encoding" in self.headers:
            raise ApiError(411, "不支持分块传输（Transfer-Encoding），请带上 Content-Length",
                           "chunked bodies are not supported; send Content-Length")
        lengths = self.headers.get_all("Content-Length") or []
        if not lengths:
            raise ApiError(411, "POST 请求必须带 Content-Length 头", "Content-Length required")
        if len(lengths) > 1 or not re.fullmatch(r"[0-9]{1,12}", lengths[0].strip()):
            raise ApiError(400, f"Content-Length 必须是一个非负整数，收到 {brief(lengths)}",
                           "invalid Content-Length")
        n = int(lengths[0])
        if n > MAX_BODY:
            raise ApiError(413, f"请求正文太大（{n} 字节，上限 {MAX_BODY}）",
                           f"request body too large ({n} > {MAX_BODY} bytes)")
        limit = self.server.limits.body_timeout
        self.deadline = time.monotonic() + limit
        try:
            body = self.rfile.read(n)
        except TimeoutError:
            raise ApiError(408, f"请求正文没有在 {limit:g} 秒内传完", "request body timed out") \
                from None
        if len(body) < n:
            raise ApiError(400, f"请求正文不完整：说好 {n} 字节，只收到 {len(body)} 字节",
                           "incomplete request body")
        self._unread = False
        return body

    def do_GET(self):
        if self.headers.get("Content-Length", "0").strip() != "0" or \
                "Transfer-Encoding" in self.headers:
            self.close_connection = self._unread = True     # GET 不该有正文；不读它，也不复用连接
        path = self.path.split("?", 1)[0]
        with self._replying():
            self._guard()
            if path in FILES:
                file, ctype, cache = FILES[path]
                self._send(200, file.read_bytes(), ctype, cache)
            elif path == "/api/info":
                self._json(200, self._info())
            elif path in POST_PATHS:                    # 在浏览器地址栏里打开 /api/next：说清楚
                raise ApiError(405, f"{path} 只接受 POST（JSON 正文），不接受 GET",
                               "method not allowed: use POST")
            else:
                raise ApiError(404, f"没有这个地址：{path[:100]}", "not found")

    def do_OPTIONS(self):
        """CORS 预检：只有 ``--allow-origin`` 里的来源会得到允许。"""
        with self._replying():
            self._guard()
            self.send_response(204)
            if self.server.policy.cors_headers(self.headers.get("Origin")):
                self.send_header("Access-Control-Allow-Methods", "GET, POST")
                self.send_header("Access-Control-Allow-Headers", "Content-Type")
                self.send_header("Access-Control-Max-Age", "600")
            self.send_header("Allow", "GET, POST, OPTIONS")
            self.send_header("Content-Length", "0")
            self.end_headers()

    def do_POST(self):
        self._unread = True
        path = self.path.split("?", 1)[0]
        with self._replying():
            self._guard()
            s = self.server
            route = {"/api/generate": (self._generate, parse_params),
                     "/api/stream": (self._stream, parse_params),
                     "/api/next": (self._next, parse_next),
                     "/api/attention": (self._attention, None)}.get(path)
            if route is None:
                raise ApiError(404, f"没有这个地址：{path[:100]}", "not found")
            run, parse = route
            body = self._body()
            params = parse_attention(body, s.tok, s.model.config.block_size) if parse is None \
                else parse(body, s.tok, s.defaults)
            with s.gate.slot(s.limits.queue_timeout, lambda: client_gone(self.connection)):
                run(params)

    @contextmanager
    def _replying(self):
        """每个请求的错误收尾（GET、OPTIONS、POST 共用）：ApiError → 它的状态码与 JSON；
        UserError（generate() 的参数检查）→ 400；客户端断开、写超时 → 关连接；其余 → 500。"""
        try:
            yield
        except ApiError as e:
            self._fail(e.status, e.payload())
        except UserError as e:
            self._fail(400, {"error": f"{e} / invalid request", "zh": str(e),
                             "en": "invalid request"})
        except (ClientGone, OSError):
            self.close_connection = True
        except Exception:  # noqa: BLE001 - 服务器绝不能因为一个请求而退出
            traceback.print_exc(file=sys.stderr)                  # 详情只进日志，不进响应
            self._fail(500, ApiError(500, "服务器内部错误（详情见服务器日志）",
                                     "internal error").payload())

    # ---------------------------------------------------------------- 生成
    def _info(self) -> dict:
        s = self.server
        cfg = s.model.config
        return {"vocab_size": s.tok.vocab_size, "forms": list(FORMS),
                "block_size": cfg.block_size, "n_layer": cfg.n_layer, "n_head": cfg.n_head,
                "defaults": s.defaults, "stages": STAGE_NAMES,
                "limits": {"prompt": MAX_PROMPT, "acrostic": MAX_ACROSTIC, "title": MAX_TITLE,
                           "max_new_tokens": MAX_NEW_TOKENS, "body_bytes": MAX_BODY,
                           "slots": s.limits.slots, "queue": s.limits.queue,
                           "attention": attention_limit(cfg.block_size),
                           "top": TOP_MAX, "top_default": TOP_DEFAULT},
                "ranges": RANGES, "zero_ok": list(ZERO_OK),
                "compiled": bool(getattr(s, "compile", False))
                and cached_decoder(s.model) is not None}

    def _pieces(self, p: dict):
        """逐个产出新文字；每个字之后看一眼客户端还在不在，不在就停下（放回名额）。"""
        gen = stream_tokens(self.server.model, self.server.tok, **p,
                            compile=None if self.server.compile else False)
        try:
            for piece in gen:
                if client_gone(self.connection):
                    raise ClientGone
                yield piece
        finally:
            gen.close()

    def _generate(self, p: dict) -> None:
        t0 = time.perf_counter()
        text = p["prompt"] + "".join(self._pieces(p))
        self._json(200, result(p, text, time.perf_counter() - t0))

    def _next(self, args: tuple[dict, int]) -> None:
        p, top = args
        t0 = time.perf_counter()
        kw = {k: p[k] for k in (*SamplingParams.names(), *VerseSpec.names()) if k in p}
        stages = next_token_stages(self.server.model, self.server.tok, p["prompt"], **kw)
        self._json(200, next_reply(p, stages, self.server.tok, top, time.perf_counter() - t0))

    def _attention(self, text: str) -> None:
        """每层每个头的注意力权重 [L][H][T][T]（保留 4 位小数），T = 1 + 文字的词元数；
        算法是 :func:`gptcourse.evaluate.text_attention`（笔记本的实时演示用同一个函数）。

        ``record_attention`` 要在各层上挂一个记录槽（模块的状态），不能在同时写诗的那个模型上做：
        用模型的一份副本（第一次用时复制），一次只让一个请求用它。"""
        s, t0 = self.server, time.perf_counter()
        with s.attention_lock:
            if s.attention_model is None:
                s.attention_model = copy.deepcopy(s.model).eval()
            tokens, maps = text_attention(s.attention_model, s.tok, text)   # L 个 [H, T, T]
        weights = [[[[round(w, 4) for w in row] for row in head] for head in m.tolist()]
                   for m in maps]
        self._json(200, {"text": text, "tokens": tokens,
                         "n_layer": len(maps), "n_head": maps[0].shape[0], "weights": weights,
                         "seconds": round(time.perf_counter() - t0, 3)})

    def _stream(self, p: dict) -> None:
        t0 = time.perf_counter()
        pieces = self._pieces(p)
        try:
            first = next(pieces, None)       # 参数/格式错误在这里抛出，还来得及回 400
            self.close_connection = True     # 响应以关闭连接结束（没有 Content-Length）
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson; charset=utf-8")
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Accel-Buffering", "no")
            self.send_header("Connection", "close")
            self.end_headers()
            self._streaming = True
            out = [] if first is None else [first]
            if first is not None:
                self._line({"piece": first})
            for piece in pieces:
                out.append(piece)
                self._line({"piece": piece})
            text = p["prompt"] + "".join(out)
            self._line({"done": True, **result(p, text, time.perf_counter() - t0)})
        finally:
            pieces.close()


STAGE_NAMES = {"model": "模型原始分布", "rules": "重复惩罚、格式之后", "temperature": "温度之后",
               "top_k": "top-k 之后", "top_p": "top-p 之后（抽样用）"}
assert tuple(STAGE_NAMES) == STAGES


def next_reply(p: dict, stages: dict, tok, top: int, seconds: float) -> dict:
    """/api/next 的回答。``stages``：:func:`~gptcourse.generate.next_token_stages` 的各阶段 logits。

    - ``top``：采样之前（``rules`` 阶段）概率最大的 ``top`` 个字，从大到小，每个字带它在每个
      阶段的概率 ``probs``（温度不改变排序，top-k/top-p 只去掉排在后面的，所以留下的总是开头几个）；
    - ``others``：每个阶段，列表之外的全部字的概率之和（与列表里的加起来是 1）；
    - ``kept``：每个阶段留下（没有被设成 −∞）的词元数；``survivors`` = 最后一个阶段的；
    - ``greedy``：温度 0 时为 true（只留下 argmax）。"""
    probs = {k: v.softmax(-1) for k, v in stages.items()}
    order = torch.sort(stages["rules"], descending=True, stable=True).indices[:top]
    rest = torch.ones_like(probs["rules"], dtype=torch.bool)
    rest[order] = False
    kept = {k: int(v.isfinite().sum()) for k, v in stages.items()}
    return {"prompt": p["prompt"], "title": p.get("title"), "stages": list(stages),
            "top": [{"id": int(i), "char": tok.decode([int(i)]),
                     "probs": {k: float(v[i]) for k, v in probs.items()}} for i in order],
            "others": {k: float(v[rest].sum()) for k, v in probs.items()},
            "kept": kept, "survivors": kept["top_p"], "greedy": p["temperature"] == 0,
            "settings": {k: p[k] for k in ("temperature", "top_k", "top_p", "repetition_penalty",
                                           "form", "acrostic", "rhyme", "tones")},
            "relaxed": list(dict.fromkeys(p.get("relaxed", []))), "seconds": round(seconds, 4)}


class DemoServer(BoundedHTTPServer):
    """带模型的服务器：``model``、``tok``、``policy``（Host/Origin）、``limits``、``gate``。"""


def make_server(model, tok, host: str = "127.0.0.1", port: int = 8000, verbose: bool = False,
                *, limits: Limits | None = None, allow_hosts=(), allow_origins=(),
                defaults: dict | None = None, compile: bool = False) -> DemoServer:
    """建好（但不启动）服务器；``port=0`` 让系统挑一个空闲端口（见 ``server.server_address``）。

    ``compile=True``：在后台线程里编译快速一步（:mod:`gptcourse.fastdecode`，编译结果存在磁盘
    缓存里，再次启动只要几秒）；编译好之前的请求走普通路径，之后的走编译好的一步。

    ``defaults``：请求里没给的解码参数取这里的值（命令行传入检查点的发布设置）。"""
    given = {k: v for k, v in (defaults or {}).items() if k in DEFAULTS}
    if given.get("top_p", 0) is None:
        given["top_p"] = 1.0            # 网页的滑块：不截断 = top-p 1（p ≥ 1 时不过滤）
    check_defaults(given, tok)          # 超出网页范围的发布设置：启动时拒绝，不是每个请求 400
    model.eval()
    server = DemoServer((host, port), Handler, limits or Limits())
    server.model, server.tok, server.verbose = model, tok, verbose
    server.defaults = {**DEFAULTS, **given}
    server.policy = HostPolicy(host, allow_hosts, allow_origins)
    server.compile = compile
    server.attention_model, server.attention_lock = None, threading.Lock()   # 见 _attention
    server.warming = warm_up_in_background(model) if compile else None
    return server
