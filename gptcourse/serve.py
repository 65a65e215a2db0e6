"""网页演示：``python -m gptcourse serve``，只用标准库的 ``http.server``。

- ``GET /``：一个中文页面（提示、诗体、藏头、温度/top-k/top-p 滑块，诗一个字一个字地出现）；
  ``GET /font.otf`` 是课程自带的中文字体，没装中文字体的机器也能正常显示；
- ``GET /api/info``：模型与参数范围；
- ``POST /api/generate``：JSON 参数（与 :func:`gptcourse.generate.generate` 相同）→ JSON 结果；
- ``POST /api/stream``：同样的参数 → 逐行 JSON（NDJSON）：``{"piece": "春"}`` ……
  最后一行 ``{"done": true, "text": …}``。

请求一律先校验：正文过大 → 413；不是 JSON、参数未知、类型或范围不对、有词表外的字 → 400；
未知路径 → 404。每个错误都带一句中文和一句英文。每个请求在自己的线程里用自己的 KV 缓存，
模型权重只读（加载后处于 eval 模式），所以并发请求互不干扰；同时运行的生成数由信号量限制。
"""
from __future__ import annotations

import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from .constraints import FORMS
from .generate import generate, stream_tokens

PAGE = Path(__file__).parent / "serve_static" / "index.html"
FONT = Path(__file__).parent / "fonts" / "GPTCourseCJKSans-Regular.otf"   # 课程自带的中文字体
MAX_BODY = 8192                 # 请求正文上限（字节）
MAX_PROMPT = 64                 # 提示最多多少个字
MAX_ACROSTIC = 8
MAX_NEW_TOKENS = 200
MAX_CONCURRENT = 4              # 同时在跑的生成数（多出来的请求排队等待）
DEFAULTS = dict(prompt="", max_new_tokens=None, temperature=0.8, top_k=None, top_p=0.9,
                repetition_penalty=1.0, seed=None, form=None, acrostic=None)


class ApiError(Exception):
    def __init__(self, status: int, zh: str, en: str):
        super().__init__(f"{zh} / {en}")
        self.status, self.zh, self.en = status, zh, en

    def payload(self) -> dict:
        return {"error": f"{self.zh} / {self.en}", "zh": self.zh, "en": self.en}


def _number(d: dict, key: str, lo: float, hi: float, integer: bool = False, lo_open=False):
    v = d[key]
    ok_type = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok_type or (not integer and not math.isfinite(v)):
        kind = "整数" if integer else "数"
        raise ApiError(400, f"{key} 必须是{kind}，收到 {v!r}",
                       f"{key} must be {'an integer' if integer else 'a number'}")
    if v < lo or v > hi or (lo_open and v == lo):
        left = "(" if lo_open else "["
        raise ApiError(400, f"{key} 必须在 {left}{lo}, {hi}] 之内，收到 {v}",
                       f"{key} must be in {left}{lo}, {hi}], got {v}")
    return v


def parse_params(body: bytes, tok) -> dict:
    """请求正文 → generate() 的关键字参数；任何问题都抛出 :class:`ApiError`（400）。"""
    try:
        d = json.loads(body.decode("utf-8") or "{}")
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ApiError(400, f"请求正文不是合法的 JSON（{e}）",
                       "request body is not valid JSON") from None
    if not isinstance(d, dict):
        raise ApiError(400, "请求正文必须是一个 JSON 对象", "request body must be a JSON object")
    unknown = sorted(set(d) - set(DEFAULTS))
    if unknown:
        raise ApiError(400, f"未知参数：{', '.join(unknown)}", f"unknown fields: {unknown}")
    p = {**DEFAULTS, **{k: v for k, v in d.items() if v is not None}}
    for key, cap in (("prompt", MAX_PROMPT), ("acrostic", MAX_ACROSTIC)):
        if p[key] is None:
            continue
        if not isinstance(p[key], str):
            raise ApiError(400, f"{key} 必须是字符串", f"{key} must be a string")
        if len(p[key]) > cap:
            raise ApiError(400, f"{key} 太长：{len(p[key])} 个字，最多 {cap} 个",
                           f"{key} too long: {len(p[key])} > {cap} characters")
        missing = tok.unknown_chars(p[key])
        if missing:
            raise ApiError(400, f"{key} 里有词表之外的字：{'、'.join(map(repr, missing[:10]))}",
                           f"{key} contains characters outside the vocabulary")
    if p["acrostic"] == "":
        p["acrostic"] = None
    if p["form"] in ("", "不限"):
        p["form"] = None
    if p["form"] is not None and p["form"] not in FORMS:
        raise ApiError(400, f"form 只能是 {'、'.join(FORMS)} 之一，收到 {p['form']!r}",
                       f"form must be one of {list(FORMS)}")
    _number(p, "temperature", 0, 3)
    _number(p, "top_p", 0, 1, lo_open=True)
    _number(p, "repetition_penalty", 0, 3, lo_open=True)
    if p["top_k"] is not None:
        _number(p, "top_k", 0, tok.vocab_size, integer=True)
        p["top_k"] = p["top_k"] or None                     # 0 = 不限
    if p["max_new_tokens"] is not None:
        _number(p, "max_new_tokens", 1, MAX_NEW_TOKENS, integer=True)
    if p["seed"] is not None:
        _number(p, "seed", 0, 2**31 - 1, integer=True)
    return p


class Handler(BaseHTTPRequestHandler):
    server_version = "gptcourse-demo"

    # ---------------------------------------------------------------- 工具
    def log_message(self, fmt, *args):                   # 测试里保持安静
        if getattr(self.server, "verbose", False):
            super().log_message(fmt, *args)

    def _send(self, status: int, body: bytes, ctype: str, cache: str = "no-store") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", cache)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj: dict) -> None:
        self._send(status, json.dumps(obj, ensure_ascii=False).encode("utf-8"),
                   "application/json; charset=utf-8")

    def _body(self) -> bytes:
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise ApiError(400, "Content-Length 不是整数", "invalid Content-Length") from None
        if n > MAX_BODY or n < 0:
            raise ApiError(413, f"请求正文太大（{n} 字节，上限 {MAX_BODY}）",
                           f"request body too large ({n} > {MAX_BODY} bytes)")
        return self.rfile.read(n)

    # ---------------------------------------------------------------- 路由
    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path in ("/", "/index.html"):
            self._send(200, PAGE.read_bytes(), "text/html; charset=utf-8")
        elif path == "/font.otf":          # 没装中文字体的机器上，页面也能显示汉字
            self._send(200, FONT.read_bytes(), "font/otf", cache="max-age=86400")
        elif path == "/api/info":
            cfg = self.server.model.config
            self._json(200, {"vocab_size": self.server.tok.vocab_size, "forms": list(FORMS),
                             "block_size": cfg.block_size, "defaults": DEFAULTS,
                             "limits": {"prompt": MAX_PROMPT, "acrostic": MAX_ACROSTIC,
                                        "max_new_tokens": MAX_NEW_TOKENS}})
        else:
            self._json(404, ApiError(404, f"没有这个地址：{path}", "not found").payload())

    def do_POST(self):
        path = self.path.split("?", 1)[0]
        try:
            if path not in ("/api/generate", "/api/stream"):
                raise ApiError(404, f"没有这个地址：{path}", "not found")
            params = parse_params(self._body(), self.server.tok)
            with self.server.slots:
                if path == "/api/generate":
                    self._generate(params)
                else:
                    self._stream(params)
        except ApiError as e:
            self._json(e.status, e.payload())
        except ValueError as e:                                   # generate() 的参数/格式检查
            self._json(400, {"error": f"{e} / invalid request", "zh": str(e),
                             "en": "invalid request"})
        except (BrokenPipeError, ConnectionResetError):           # 浏览器中途关掉了页面
            pass
        except Exception as e:  # noqa: BLE001 - 服务器绝不能因为一个请求而退出
            self._json(500, {"error": f"服务器内部错误 / internal error: {type(e).__name__}"})

    def _generate(self, p: dict) -> None:
        t0 = time.perf_counter()
        text = generate(self.server.model, self.server.tok, **p)
        self._json(200, {"text": text, "prompt": p["prompt"],
                         "new_chars": len(text) - len(p["prompt"]),
                         "seconds": round(time.perf_counter() - t0, 3)})

    def _stream(self, p: dict) -> None:
        pieces = stream_tokens(self.server.model, self.server.tok, **p)
        first = next(pieces, None)             # 参数/格式错误在这里抛出，还来得及回 400
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson; charset=utf-8")
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Accel-Buffering", "no")
        self.end_headers()
        out = [] if first is None else [first]
        line = lambda obj: self.wfile.write(                                   # noqa: E731
            (json.dumps(obj, ensure_ascii=False) + "\n").encode("utf-8"))
        try:
            if first is not None:
                line({"piece": first})
            for piece in pieces:
                out.append(piece)
                line({"piece": piece})
            line({"done": True, "text": p["prompt"] + "".join(out)})
        finally:
            pieces.close()


class DemoServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def make_server(model, tok, host: str = "127.0.0.1", port: int = 8000,
                verbose: bool = False) -> DemoServer:
    """建好（但不启动）服务器；``port=0`` 让系统挑一个空闲端口（见 ``server.server_address``）。"""
    model.eval()
    server = DemoServer((host, port), Handler)
    server.model, server.tok, server.verbose = model, tok, verbose
    server.slots = threading.BoundedSemaphore(MAX_CONCURRENT)
    return server


def cli_arguments(p) -> None:
    p.add_argument("--checkpoint", default=None, help="检查点路径（默认：随课程发布的模型）")
    p.add_argument("--host", default="127.0.0.1", help="监听地址（默认只允许本机访问）")
    p.add_argument("--port", type=int, default=8000, help="端口（默认 8000；0 = 随机空闲端口）")


def cli_main(args) -> int:
    from . import checkpoint

    model, tok, _ = checkpoint.load(args.checkpoint)
    server = make_server(model, tok, args.host, args.port, verbose=True)
    host, port = server.server_address[:2]
    print(f"网页演示已启动：http://{host}:{port}/  （按 Ctrl+C 停止）", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("\n已停止。")
    finally:
        server.server_close()
    return 0
