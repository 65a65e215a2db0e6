"""网页演示 gptcourse.serve：在空闲端口上启动真实的服务器，用 HTTP 请求检查 API、错误处理与并发；
用裸套接字扮演不守规矩的客户端（慢速请求头、正文不发完、半路断开、跨站来源）。"""
from __future__ import annotations

import json
import re
import select
import socket
import struct
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager

import pytest
import torch

from gptcourse import serve
from gptcourse.config import preset
from gptcourse.data import load_corpus
from gptcourse.generate import generate
from gptcourse.model import GPT
from gptcourse.serve import MAX_BODY, MAX_PROMPT, Limits, make_server
from gptcourse.serve.http import ClientGone, Gate, HostPolicy, host_name
from gptcourse.tokenizer import CharTokenizer
from gptcourse.verse import analyze, check_form

FAST = dict(header_timeout=0.5, body_timeout=0.5, write_timeout=2.0, queue_timeout=5.0)
CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(scope="module")
def tiny():
    tok = CharTokenizer.from_text(load_corpus("tang_5jue").train + "春夏秋冬")
    torch.manual_seed(0)
    model = GPT(preset("course", vocab_size=tok.vocab_size, n_layer=2, n_head=2, n_embd=32))
    return model, tok


@contextmanager
def running(model, tok, **kw):
    limits = Limits(**{**FAST, **kw.pop("limits", {})})
    srv = make_server(model, tok, "127.0.0.1", 0, limits=limits, **kw)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    srv.base = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture(scope="module")
def server(tiny):
    with running(*tiny) as srv:
        yield srv


def request(srv, path, body=None, raw: bytes | None = None, method=None, headers=None):
    """→ (状态码, 响应正文字节, 响应头)。"""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(srv.base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def post(srv, body, path="/api/generate", headers=None):
    status, data, _ = request(srv, path, body, headers=headers)
    return status, json.loads(data)


def connect(srv) -> socket.socket:
    return socket.create_connection(srv.server_address[:2], timeout=10)


def read_until_closed(s: socket.socket) -> bytes:
    """读到服务器关闭连接为止（10 秒还没关 → socket.timeout，测试失败）。"""
    chunks = []
    while chunk := s.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def raw_exchange(srv, data: bytes) -> tuple[int, dict, bytes]:
    """发一段原始字节 → (状态码, 小写的响应头, 正文)。"""
    with connect(srv) as s:
        s.sendall(data)
        resp = read_until_closed(s)
    head, _, body = resp.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    hdrs = dict((k.lower(), v.strip()) for k, _, v in (h.partition(":") for h in lines[1:]))
    return int(lines[0].split()[1]), hdrs, body


def http_post(srv, body: bytes, extra: str = "", length: bool = True) -> bytes:
    cl = f"Content-Length: {len(body)}\r\n" if length else ""
    return (f"POST /api/generate HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\n{cl}{extra}\r\n").encode() + body


# ---------------------------------------------------------------- 页面与 API
def test_page_has_the_expected_controls(server):
    status, page, hdrs = request(server, "/")
    html = page.decode("utf-8")
    assert status == 200 and hdrs["Content-Type"].startswith("text/html")
    for needle in ('id="prompt"', 'id="form"', "五绝", "七律", 'id="acrostic"',
                   'id="temperature"', 'id="top_k"', 'id="top_p"', 'type="range"',
                   'id="poem"', 'lang="zh-CN"', 'src="/app.js"', 'href="/style.css"',
                   'id="rhyme"', 'id="tones"', "押韵", "平仄"):
        assert needle in html, needle
    assert "<script>" not in html and "<style>" not in html        # CSP 不允许内联脚本和样式
    status, js, hdrs = request(server, "/app.js")
    assert status == 200 and hdrs["Content-Type"].startswith("text/javascript")
    assert b"/api/stream" in js and b"getReader" in js and b"innerHTML" not in js
    assert request(server, "/style.css")[2]["Content-Type"].startswith("text/css")


def test_generate_matches_the_library(server):
    body = {"prompt": "春", "form": "五绝", "seed": 3, "temperature": 0.9, "top_k": 50}
    status, out = post(server, body)
    assert status == 200
    assert out["text"] == generate(server.model, server.tok, **body)
    assert check_form(out["text"], "五绝") and out["text"].startswith("春")
    status, out = post(server, {"acrostic": "春夏秋冬", "seed": 1})
    assert status == 200 and check_form(out["text"], acrostic="春夏秋冬")


def test_stream_sends_pieces_then_done(server):
    body = {"prompt": "山", "form": "七绝", "seed": 5}
    status, data, hdrs = request(server, "/api/stream", body)
    assert status == 200 and "ndjson" in hdrs["Content-Type"]
    msgs = [json.loads(line) for line in data.decode("utf-8").splitlines()]
    pieces = [m["piece"] for m in msgs if "piece" in m]
    assert msgs[-1]["done"] is True and len(pieces) == 4 * 8 - 1    # 七绝 32 个符号，提示占 1 个
    assert msgs[-1]["text"] == "山" + "".join(pieces) == post(server, body)[1]["text"]


@pytest.mark.parametrize("body, word", [
    ({"temperature": -1}, "temperature"), ({"temperature": "hot"}, "temperature"),
    ({"top_p": 0}, "top_p"), ({"top_p": 1.5}, "top_p"), ({"top_k": -3}, "top_k"),
    ({"top_k": 2.5}, "top_k"), ({"repetition_penalty": 0}, "repetition_penalty"),
    ({"max_new_tokens": 10_000}, "max_new_tokens"), ({"seed": "x"}, "seed"),
    ({"form": "六绝"}, "form"), ({"prompt": 5}, "prompt"),
    ({"prompt": "春" * (MAX_PROMPT + 1)}, "太长"),
    ({"prompt": "春☃"}, "☃"), ({"acrostic": "春夏秋冬", "form": "七律"}, "藏头字却有"),
    ({"prompt": "白日依山，", "form": "五绝"}, "第 1 句"), ({"colour": "red"}, "colour"),
    ({"temperature": True}, "temperature"),
    # 探测表里的 500：不可哈希的 form、极小的采样参数（都在旧的允许范围之内）、巨大的整数
    ({"form": []}, "form"), ({"form": {}}, "form"), ({"form": ["五绝"]}, "form"),
    ({"temperature": 1e-300}, "temperature"), ({"top_p": 1e-300}, "top_p"),
    ({"repetition_penalty": 1e-300}, "repetition_penalty"),
    ({"temperature": 10**400}, "temperature"), ({"prompt": [["春"]]}, "prompt"),
    ({"rhyme": "yes"}, "rhyme"), ({"tones": 1}, "tones"), ({"rhyme": True, "form": "五绝", "prompt": "春眠不觉晓，处处闻啼鸟。"}, "韵"),  # noqa: E501
])
def test_bad_values_get_400_with_a_message(server, body, word):
    for path in ("/api/generate", "/api/stream"):
        status, out = post(server, body, path)
        assert status == 400, (body, out)
        assert word in out["error"] and " / " in out["error"] and CJK.search(out["zh"])


def test_rhyme_and_tones_with_the_verse_report(server):
    for path in ("/api/generate", "/api/stream"):
        for body in ({"form": "五绝", "rhyme": True, "seed": 2},
                     {"acrostic": "春夏秋冬", "rhyme": True, "tones": True, "seed": 4}):
            status, data, _ = request(server, path, body)
            out = json.loads(data.decode().splitlines()[-1])
            assert status == 200 and out["text"] == generate(
                server.model, server.tok, **body)
            a = out["analysis"]
            assert a == analyze(out["text"]).to_dict()              # 报告由 verse.analyze 算出
            assert a["rhymes"] and a["valid_form"] and len(a["tones"]) == len(out["text"])
            text = out["text"]
            even = [i - 1 for i, c in enumerate(text) if c in "。？！"]   # 双数句的末字
            assert a["rhyme_positions"][-2:] == even
            assert set(a["tones"]) <= {"平", "仄", "中", None}
            if body.get("tones"):                                   # 没有一条规则不成立
                assert False not in a["rules"].values()
    status, out = post(server, {"prompt": "春", "max_new_tokens": 4, "seed": 1})
    assert status == 200 and out["analysis"]["form"] is None        # 不受约束的续写也有报告


def test_small_but_valid_sampling_values_work(server):
    for body in ({"temperature": 0.01}, {"top_p": 0.01}, {"repetition_penalty": 0.1},
                 {"temperature": 0, "repetition_penalty": 3}):
        for path in ("/api/generate", "/api/stream"):
            status, data, _ = request(server, path, {"prompt": "春", "seed": 1,
                                                     "max_new_tokens": 8, **body})
            assert status == 200, (body, data)
            assert "error" not in data.decode().splitlines()[-1]


def test_bad_json_unknown_path_and_large_body(server):
    for raw, word in ((b"{not json", "JSON"), (b"[1, 2]", "JSON"), (b"\xff\xfe", "UTF-8"),
                      (b"[" * 4000, "嵌套"), (b"1" * 5000, "数字"),
                      (b'{"temperature": ' + b"9" * 5000 + b"}", "JSON")):
        status, data, _ = request(server, "/api/generate", raw=raw)
        assert status == 400 and word in json.loads(data)["error"], raw[:20]
    status, data, _ = request(server, "/nope")
    assert status == 404 and "not found" in json.loads(data)["error"]
    assert request(server, "/api/nope", {})[0] == 404
    status, data, _ = request(server, "/api/generate", raw=b" " * (MAX_BODY + 1))
    assert status == 413 and "too large" in json.loads(data)["error"]
    status, data, _ = request(server, "/api/info")
    assert status == 200 and json.loads(data)["forms"] == ["五绝", "五律", "七绝", "七律"]


def test_concurrent_requests_are_independent(server):
    bodies = [{"prompt": p, "form": "五律", "seed": i} for i, p in enumerate("春夏秋冬山水")]
    want = [generate(server.model, server.tok, **b)
            for b in bodies]
    got: dict[int, tuple] = {}

    def worker(i):
        path = "/api/stream" if i % 2 else "/api/generate"
        status, data, _ = request(server, path, bodies[i])
        text = json.loads(data.decode().splitlines()[-1])["text"] if status == 200 else None
        got[i] = (status, text)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(bodies))]
    bad = threading.Thread(target=lambda: request(server, "/api/generate", raw=b"{oops"))
    for t in threads + [bad]:
        t.start()
    for t in threads + [bad]:
        t.join(timeout=120)
    assert [got[i] for i in range(len(bodies))] == [(200, w) for w in want]
    assert post(server, {"prompt": "月", "seed": 1})[0] == 200     # 之后服务器照常工作


# ---------------------------------------------------------------- 协议：正文、类型、头
def test_security_headers_on_every_response(server):
    responses = [request(server, "/")[2], request(server, "/app.js")[2],
                 request(server, "/api/info")[2], request(server, "/nope")[2],
                 request(server, "/api/generate", {"top_p": 2})[2],
                 request(server, "/api/generate", {}, headers={"Origin": "http://evil"})[2]]
    for hdrs in responses:
        csp = hdrs["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
        assert not re.search(r"https?:|\*|unsafe", csp), csp            # 没有任何外部来源
        assert hdrs["X-Content-Type-Options"] == "nosniff"
        assert hdrs["Referrer-Policy"] == "no-referrer" and hdrs["X-Frame-Options"] == "DENY"
        assert hdrs["Server"] == "gptcourse-demo"                       # 不透露 Python 版本
    with connect(server) as s:                  # 请求行都不对（HTTP/0.9 式的回答只有正文）
        s.sendall(b"GARBAGE\r\n\r\n")
        assert json.loads(read_until_closed(s))["zh"] == "请求格式不对"
    status, hdrs, body = raw_exchange(server, b"GET / HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n")
    assert status == 431 and hdrs["content-type"].startswith("application/json")
    assert "frame-ancestors 'none'" in hdrs["content-security-policy"]      # http.server 自己的错误
    assert CJK.search(json.loads(body)["zh"])
    status, _, body = raw_exchange(server, b"PUT /api/generate HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert status == 501 and "只有 GET、POST" in json.loads(body)["zh"]


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded",
                                   "multipart/form-data; boundary=x", None,
                                   "application/json; charset=latin-1", "application/jsonp"])
def test_post_bodies_must_be_json(server, ctype):
    extra = "" if ctype is None else f"Content-Type: {ctype}\r\n"
    data = http_post(server, '{"prompt": "春"}'.encode())
    data = data.replace(b"Content-Type: application/json\r\n", extra.encode())
    status, _, body = raw_exchange(server, data)
    assert status == 415 and "application/json" in json.loads(body)["zh"]
    assert post(server, {"seed": 1, "max_new_tokens": 4},
                headers={"Content-Type": "application/json; charset=UTF-8"})[0] == 200


def test_chunked_or_missing_length_is_not_ignored(server):
    chunked = http_post(server, b'10\r\n{"colour": "red"}\r\n0\r\n\r\n', length=False,
                        extra="Transfer-Encoding: chunked\r\n")
    status, _, body = raw_exchange(server, chunked)
    assert status == 411 and "Content-Length" in json.loads(body)["zh"]
    status, _, body = raw_exchange(server, http_post(server, b'{"colour": "red"}', length=False))
    assert status == 411
    for bad in ("-1", "abc", "1, 2"):
        status, _, _ = raw_exchange(server, http_post(server, b"{}", length=False,
                                                      extra=f"Content-Length: {bad}\r\n"))
        assert status == 400, bad


def test_keep_alive_and_errors_that_leave_the_body_unread(server):
    body = b'{"max_new_tokens": 2, "seed": 1}'
    one = http_post(server, body).replace(b"Connection: close\r\n", b"")
    with connect(server) as s:                    # 两个请求走同一个连接（正文按长度读完）
        s.sendall(one + one)
        data = read_until_closed(s)               # 空闲 header_timeout 之后服务器关闭
    assert data.count(b"HTTP/1.1 200 OK") == 2
    bad = one.replace(b"application/json", b"text/plain")
    with connect(server) as s:                    # 415：正文没读，连接必须关掉，不能当成下一个请求
        s.sendall(bad + one)
        data = read_until_closed(s)
    assert data.startswith(b"HTTP/1.1 415") and data.count(b"HTTP/1.1") == 1
    assert b"Connection: close" in data


def test_host_and_origin_must_be_this_server(tiny, server):
    port = server.server_address[1]
    for headers in ({"Host": "evil.example"}, {"Host": f"evil.example:{port}"},
                    {"Origin": "http://evil.example"}, {"Origin": "null"},
                    {"Origin": f"https://127.0.0.1:{port}"}):
        for path, body in (("/api/generate", {"max_new_tokens": 2}), ("/", None)):
            status, data, _ = request(server, path, body, headers=headers)
            assert status == 403 and "拒绝" in json.loads(data)["zh"], headers
    same = {"Origin": f"http://127.0.0.1:{port}"}
    assert post(server, {"max_new_tokens": 2}, headers=same)[0] == 200
    assert post(server, {"max_new_tokens": 2}, headers={"Host": f"localhost:{port}",
                                                        "Origin": f"http://localhost:{port}"}
                )[0] == 200
    with running(*tiny, allow_origins=["http://course.example"],
                 allow_hosts=["teacher-pc.local"]) as srv:
        assert post(srv, {"max_new_tokens": 2}, headers={"Origin": "http://course.example"})[0] \
            == 200
        assert request(srv, "/", headers={"Host": "teacher-pc.local:8000"})[0] == 200
        assert request(srv, "/", headers={"Origin": "http://evil.example"})[0] == 403
        # 允许的来源：CORS 预检通过，回答带 Access-Control-Allow-Origin；别的来源没有
        status, _, hdrs = request(srv, "/api/generate", method="OPTIONS",
                                  headers={"Origin": "http://course.example"})
        assert status == 204 and hdrs["Access-Control-Allow-Origin"] == "http://course.example"
        assert "POST" in hdrs["Access-Control-Allow-Methods"]
        _, _, hdrs = request(srv, "/api/generate", {"max_new_tokens": 2},
                             headers={"Origin": "http://course.example"})
        assert hdrs["Access-Control-Allow-Origin"] == "http://course.example"
        assert "Access-Control-Allow-Origin" not in request(srv, "/api/info")[2]
        assert request(srv, "/api/generate", method="OPTIONS",
                       headers={"Origin": "http://evil.example"})[0] == 403


def test_host_policy_rules():
    assert host_name("Example.COM") == "example.com" and host_name(":80") is None
    assert host_name("[::1]") == "::1" and host_name("x:８０") is None
    local, anyip = HostPolicy("127.0.0.1"), HostPolicy("0.0.0.0")
    for policy in (local, anyip):
        policy.check("localhost:8000", "http://localhost:8000")
        policy.check(None, None)
        with pytest.raises(serve.ApiError):
            policy.check("rebind.evil.example:8000", None)
    anyip.check("192.168.1.20:8000", "http://192.168.1.20:8000")      # 课堂：学生用 IP 访问
    with pytest.raises(serve.ApiError):
        local.check("192.168.1.20:8000", None)


# ---------------------------------------------------------------- 慢客户端、断开、排队
def wait_closed(s: socket.socket, trickle: bytes = b"", seconds: float = 10) -> float:
    """（每 0.1 秒送一点 ``trickle``）直到服务器关闭连接 → 用了多少秒；超过 seconds → 测试失败。"""
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        try:
            if trickle:
                s.sendall(trickle)
            if select.select([s], [], [], 0.1)[0] and s.recv(65536) == b"":
                return time.monotonic() - t0
        except OSError:                             # 服务器关闭时还有没读的字节 → RST
            return time.monotonic() - t0
    raise AssertionError(f"{seconds} 秒后连接还开着")


def test_slow_headers_and_idle_connections_are_closed(server):
    with connect(server) as s:                   # slowloris：每 0.1 秒送一个字节，永远不送完
        s.sendall(b"POST /api/generate HTTP/1.1\r\n")
        assert wait_closed(s, trickle=b"X") < 10  # header_timeout=0.5 是总时限，不是每次 recv
    with connect(server) as s:                   # 连上了什么也不发
        assert wait_closed(s) < 10
    with connect(server) as s:                   # keep-alive：一个请求之后的空闲连接也会关掉
        s.sendall(b"GET /api/info HTTP/1.1\r\nHost: localhost\r\n\r\n")
        data = read_until_closed(s)
    assert data.startswith(b"HTTP/1.1 200") and b"Connection: close" not in data


def test_short_body_is_closed_within_the_timeout(server):
    t0 = time.monotonic()
    with connect(server) as s:
        s.sendall(http_post(server, b"{}", length=False, extra="Content-Length: 1000\r\n"))
        data = read_until_closed(s)
    assert time.monotonic() - t0 < 10
    assert data.startswith(b"HTTP/1.1 408") and "秒内传完".encode() in data


def wait_for(condition, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{seconds} 秒内没有等到"
        time.sleep(0.02)


class FakeGeneration:
    """替换 serve.stream_tokens：每 0.01 秒产出一个字，直到 ``release`` 被设置（或被关闭）。"""

    def __init__(self, forever: bool = False, fail_after: int | None = None):
        self.release, self.started, self.closed = (threading.Event() for _ in range(3))
        self.forever, self.fail_after = forever, fail_after

    def __call__(self, model, tok, **p):
        self.started.set()
        try:
            n = 0
            while self.forever or not self.release.is_set():
                if self.fail_after is not None and n == self.fail_after:
                    raise RuntimeError("模拟的内部错误")
                n += 1
                yield "春"
                time.sleep(0.01)
        finally:
            self.closed.set()


def test_full_queue_answers_503(tiny, monkeypatch):
    fake = FakeGeneration()
    monkeypatch.setattr(serve, "stream_tokens", fake)
    with running(*tiny, limits=dict(slots=1, queue=1)) as srv:
        results = {}
        first = threading.Thread(target=lambda: results.setdefault("a", post(srv, {})))
        first.start()
        assert fake.started.wait(10)
        second = threading.Thread(target=lambda: results.setdefault("b", post(srv, {})))
        second.start()
        wait_for(lambda: srv.gate.waiting == 1)     # 第二个请求在排队
        status, data, hdrs = request(srv, "/api/stream", {})
        assert status == 503 and "服务器正忙" in json.loads(data)["zh"]
        assert hdrs["Retry-After"] == "1"
        fake.release.set()
        first.join(30)
        second.join(30)
        assert results["a"][0] == results["b"][0] == 200


@pytest.mark.parametrize("path, reset", [("/api/generate", True), ("/api/stream", True),
                                         ("/api/stream", False)])
def test_client_disconnect_stops_the_generation(tiny, monkeypatch, path, reset):
    """客户端走了（RST；流式接口上普通的 close 也是：下一次写就失败）→ 生成停下，名额放回。"""
    fake = FakeGeneration(forever=True)
    monkeypatch.setattr(serve, "stream_tokens", fake)
    with running(*tiny, limits=dict(slots=1, queue=1)) as srv:
        s = connect(srv)
        s.sendall(http_post(srv, b"{}").replace(b"/api/generate", path.encode()))
        assert fake.started.wait(10)
        if reset:                                   # SO_LINGER 0：close 发 RST
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()                                   # 客户端走了
        assert fake.closed.wait(10)                 # 生成停下，名额放回
        monkeypatch.setattr(serve, "stream_tokens", FakeGeneration())
        serve.stream_tokens.release.set()
        assert post(srv, {})[0] == 200
        wait_for(lambda: srv.gate.running == 0)


def test_error_mid_stream_is_the_last_ndjson_line(tiny, monkeypatch):
    monkeypatch.setattr(serve, "stream_tokens", FakeGeneration(forever=True, fail_after=2))
    with running(*tiny) as srv:
        status, data, _ = request(srv, "/api/stream", {"seed": 1})
        text = data.decode("utf-8")
        msgs = [json.loads(line) for line in text.splitlines()]   # 每一行都是 JSON
        assert status == 200 and msgs[:2] == [{"piece": "春"}, {"piece": "春"}]
        assert len(msgs) == 3 and "服务器内部错误" in msgs[-1]["zh"]
        assert "HTTP/1" not in text and "RuntimeError" not in text
        status, data, _ = request(srv, "/api/generate", {})
        assert status == 500 and b"RuntimeError" not in data
        assert "服务器内部错误" in json.loads(data)["zh"]
        wait_for(lambda: srv.gate.running == 0)


def test_every_method_ends_an_unexpected_error_with_a_500_json(tiny, monkeypatch):
    """GET、OPTIONS、POST 共用一个错误收尾（_replying）：意外的异常是 500 JSON，不是断开的连接。"""
    def broken(self):
        raise RuntimeError("boom")

    monkeypatch.setattr(serve.Handler, "_info", broken)
    with running(*tiny) as srv:
        status, data, _ = request(srv, "/api/info")
        assert status == 500 and b"boom" not in data
        assert "服务器内部错误" in json.loads(data)["zh"]
        assert request(srv, "/nothing-here")[0] == 404


def test_connection_cap_evicts_idle_connections_first(tiny):
    with running(*tiny, limits=dict(connections=2, header_timeout=30, body_timeout=30)) as srv:
        idle = [connect(srv), connect(srv)]        # 占满两个连接，什么也不发（慢速客户端）
        idle[1].sendall(b"POST /api/generate HTTP/1.1\r\nX-Slow: ")
        time.sleep(0.2)
        assert post(srv, {"max_new_tokens": 2})[0] == 200    # 挤掉等得最久的那个，照样得到服务
        assert wait_closed(idle[0]) < 10
        idle.append(connect(srv))                   # 又占满：请求头送了一半的那个现在最久
        time.sleep(0.2)
        assert post(srv, {"max_new_tokens": 2})[0] == 200
        assert wait_closed(idle[1]) < 10
        assert not select.select([idle[2]], [], [], 0.2)[0]  # 新来的空闲连接还开着
        busy = [connect(srv), connect(srv)]        # 两个连接都在忙（正文传了一半）：没有可挤的
        for s in busy:
            s.sendall(http_post(srv, b"{", length=False, extra="Content-Length: 100\r\n"))
        time.sleep(0.2)
        with connect(srv) as s:
            data = read_until_closed(s)
        assert data.startswith(b"HTTP/1.1 503") and "服务器正忙".encode() in data
        assert b"frame-ancestors 'none'" in data
        for s in idle + busy:
            s.close()
        wait_for(lambda: request(srv, "/api/info")[0] == 200)


def test_gate_is_first_come_first_served():
    gate, order, threads = Gate(slots=1, queue=3), [], []
    hold = gate.slot(5)
    hold.__enter__()

    def waiter(name):
        with gate.slot(5):
            order.append(name)

    for name in "ABC":                               # 按顺序排进队伍
        threads.append(threading.Thread(target=waiter, args=(name,)))
        threads[-1].start()
        wait_for(lambda: gate.waiting == len(threads))
    with pytest.raises(serve.ApiError) as e:         # 队伍满了：立即 503，不等
        gate.slot(5).__enter__()
    assert e.value.status == 503
    hold.__exit__(None, None, None)
    for t in threads:
        t.join(10)
    assert order == ["A", "B", "C"] and gate.running == 0 and gate.waiting == 0
    with gate.slot(5):                                # 排队超时 → 503；客户端走了 → 离开队伍
        with pytest.raises(serve.ApiError, match="排队超过"):
            gate.slot(0.2).__enter__()
        with pytest.raises(ClientGone):
            gate.slot(5, gone=lambda: True).__enter__()
        assert gate.waiting == 0
    assert gate.running == 0


def test_limits_and_port_are_validated(tiny):
    for bad in (dict(slots=0), dict(queue=-1), dict(header_timeout=0), dict(connections=1.5)):
        with pytest.raises(ValueError, match="Limits"):
            Limits(**bad)
    import argparse
    args = argparse.Namespace(port=70000, checkpoint=None, host="127.0.0.1", allow_host=[],
                              allow_origin=[])
    from gptcourse.cli import serve as serve_cli
    with pytest.raises(ValueError, match="--port"):
        serve_cli.cli_main(args)


def test_server_defaults_are_the_release_settings(tiny):
    """serve 用检查点的发布设置作默认：/api/info 报告它们，请求里没给的参数取它们。"""
    model, tok = tiny
    release = {"temperature": 0.9, "top_p": None, "rhyme": True, "tones": False, "top_k": None,
               "repetition_penalty": 1.0, "not_a_param": 1}
    with running(model, tok, defaults=release) as srv:
        d = json.loads(request(srv, "/api/info")[1])["defaults"]
        assert d["temperature"] == 0.9 and d["top_p"] == 1.0 and d["rhyme"] is True
        assert "not_a_param" not in d
        status, data, _ = request(srv, "/api/generate", {"form": "五绝", "seed": 3})
        text = json.loads(data)["text"]
        want = generate(model, tok, "", form="五绝", seed=3, temperature=0.9, top_p=None,
                        rhyme=True)
        assert status == 200 and text == want and analyze(text).rhymes
        status, data, _ = request(srv, "/api/generate", {"form": "五绝", "seed": 3,
                                                         "rhyme": False, "temperature": 0.5})
        assert json.loads(data)["text"] == generate(model, tok, "", form="五绝", seed=3,
                                                    temperature=0.5, top_p=None)


def test_release_rhyme_does_not_break_short_requests(tiny):
    """X8/Y8：发布设置要求押韵时，只要 8 个字的请求照样 200；明确要求押韵则说明写不完。"""
    model, tok = tiny
    with running(model, tok, defaults={"rhyme": True, "temperature": 0.8}) as srv:
        status, data, _ = request(srv, "/api/generate", {"prompt": "春", "max_new_tokens": 8,
                                                         "seed": 1})
        assert status == 200
        assert json.loads(data)["text"] == generate(model, tok, "春", max_new_tokens=8, seed=1,
                                                    temperature=0.8)
        status, data, _ = request(srv, "/api/generate", {"max_new_tokens": 8, "rhyme": True})
        assert status == 400 and "不够写完" in json.loads(data)["zh"]


JIANGXUE = "千山鸟飞绝，万径人踪灭。"          # 《江雪》的首联：仄韵


@pytest.mark.parametrize("case, body", [
    ("N41", {"prompt": JIANGXUE, "seed": 0}),
    ("N42", {"title": "江雪", "prompt": JIANGXUE, "seed": 0}),
    ("N28", {"prompt": "春" * MAX_PROMPT, "seed": 0}),
])
def test_release_rhyme_never_refuses_a_plain_request(case, body):
    """F1：发布设置默认押韵，开头押不了（仄韵、一句太长）时自由采样，并在 relaxed 里说一声；
    明确要求押韵则 400，并说明怎样关掉。"""
    tok = CharTokenizer.from_text(load_corpus("tang_5jue").train + "《》")   # 以题作诗要《》
    torch.manual_seed(0)
    model = GPT(preset("course", vocab_size=tok.vocab_size, n_layer=1, n_head=2, n_embd=16))
    with running(model, tok, defaults={"rhyme": True, "temperature": 0.8}) as srv:
        status, d = post(srv, body)
        assert status == 200, d
        assert d["text"] == generate(model, tok, body["prompt"], seed=0, temperature=0.8,
                                     title=body.get("title"))
        assert len(d["relaxed"]) == 1 and "发布设置默认押韵" in d["relaxed"][0]
        status, d = post(srv, {**body, "rhyme": True})
        assert status == 400 and '"rhyme": false' in d["zh"] and "--no-rhyme" in d["zh"]
        status, d = post(srv, {"prompt": "春", "seed": 0})     # 写得下去：照常押韵，没有说明
        assert status == 200 and d["relaxed"] == [] and analyze(d["text"]).rhymes


def test_slider_ranges_and_values_come_from_the_server(server):
    """L1：页面不写滑块的范围与初始值，app.js 从 /api/info 的 ranges / zero_ok / defaults 读。"""
    html = request(server, "/")[1].decode("utf-8")
    for slider in ("temperature", "top_p"):
        tag = re.search(rf'<input type="range" id="{slider}"[^>]*>', html).group(0)
        assert "min=" not in tag and "max=" not in tag and "value=" not in tag, tag
    info = json.loads(request(server, "/api/info")[1])
    assert info["ranges"] == {k: list(v) for k, v in serve.params.RANGES.items()}
    assert info["zero_ok"] == ["temperature"]
    js = request(server, "/app.js")[1].decode("utf-8")
    assert "info.ranges" in js and "info.zero_ok" in js


@pytest.mark.parametrize("path", ["/api/generate", "/api/stream"])
def test_a_half_closing_client_gets_its_answer(tiny, path):
    """R11（S07、S08）：发完请求就 shutdown(SHUT_WR)（nc -N 这样做）的客户端照样得到回答。"""
    with running(*tiny) as srv:
        s = connect(srv)
        body = json.dumps({"prompt": "春", "max_new_tokens": 4, "seed": 1}).encode()
        s.sendall(http_post(srv, body).replace(b"/api/generate", path.encode()))
        s.shutdown(socket.SHUT_WR)
        reply = read_until_closed(s)
        s.close()
        assert reply.startswith(b"HTTP/1.") and b" 200 " in reply.split(b"\r\n", 1)[0], reply[:200]
        assert "春".encode() in reply.split(b"\r\n\r\n", 1)[1]
