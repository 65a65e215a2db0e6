"""网页演示 gptcourse.serve：在空闲端口上启动真实的服务器，用 HTTP 请求检查 API、错误处理与并发。"""
from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest
import torch

from gptcourse.config import preset
from gptcourse.constraints import check_form
from gptcourse.data import load_corpus
from gptcourse.generate import generate
from gptcourse.model import GPT
from gptcourse.serve import MAX_BODY, MAX_PROMPT, make_server
from gptcourse.tokenizer import CharTokenizer


@pytest.fixture(scope="module")
def server():
    tok = CharTokenizer.from_text(load_corpus("tang_5jue").train + "春夏秋冬")
    torch.manual_seed(0)
    model = GPT(preset("course", vocab_size=tok.vocab_size, n_layer=2, n_head=2, n_embd=32))
    srv = make_server(model, tok, "127.0.0.1", 0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    host, port = srv.server_address[:2]
    srv.base = f"http://{host}:{port}"
    yield srv
    srv.shutdown()
    srv.server_close()


def request(srv, path, body=None, raw: bytes | None = None, method=None):
    """→ (状态码, 响应正文字节, Content-Type)。"""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(srv.base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers.get("Content-Type", "")


def post(srv, body, path="/api/generate"):
    status, data, _ = request(srv, path, body)
    return status, json.loads(data)


def test_page_has_the_expected_controls(server):
    status, page, ctype = request(server, "/")
    html = page.decode("utf-8")
    assert status == 200 and ctype.startswith("text/html")
    for needle in ('id="prompt"', 'id="form"', "五绝", "七律", 'id="acrostic"',
                   'id="temperature"', 'id="top_k"', 'id="top_p"', 'type="range"',
                   'id="poem"', "/api/stream", "getReader", 'lang="zh-CN"'):
        assert needle in html, needle


def test_generate_matches_the_library(server):
    body = {"prompt": "春", "form": "五绝", "seed": 3, "temperature": 0.9, "top_k": 50}
    status, out = post(server, body)
    assert status == 200
    assert out["text"] == generate(server.model, server.tok, **{**body, "top_p": 0.9})
    assert check_form(out["text"], "五绝") and out["text"].startswith("春")
    status, out = post(server, {"acrostic": "春夏秋冬", "seed": 1})
    assert status == 200 and check_form(out["text"], acrostic="春夏秋冬")


def test_stream_sends_pieces_then_done(server):
    body = {"prompt": "山", "form": "七绝", "seed": 5}
    status, data, ctype = request(server, "/api/stream", body)
    assert status == 200 and "ndjson" in ctype
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
])
def test_bad_values_get_400_with_a_message(server, body, word):
    for path in ("/api/generate", "/api/stream"):
        status, out = post(server, body, path)
        assert status == 400, (body, out)
        assert word in out["error"] and " / " in out["error"]


def test_bad_json_unknown_path_and_large_body(server):
    for raw in (b"{not json", b"[1, 2]", b"\xff\xfe"):
        status, data, _ = request(server, "/api/generate", raw=raw)
        assert status == 400 and "JSON" in json.loads(data)["error"]
    status, data, _ = request(server, "/nope")
    assert status == 404 and "not found" in json.loads(data)["error"]
    assert request(server, "/api/nope", {})[0] == 404
    status, data, _ = request(server, "/api/generate", raw=b" " * (MAX_BODY + 1))
    assert status == 413 and "too large" in json.loads(data)["error"]
    status, data, _ = request(server, "/api/info")
    assert status == 200 and json.loads(data)["forms"] == ["五绝", "五律", "七绝", "七律"]


def test_concurrent_requests_are_independent(server):
    bodies = [{"prompt": p, "form": "五律", "seed": i} for i, p in enumerate("春夏秋冬山水")]
    want = [generate(server.model, server.tok, **{"top_p": 0.9, "temperature": 0.8, **b})
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
