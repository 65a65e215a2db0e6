"""网页演示的课堂演示接口（issue 53 第 3 项）：``POST /api/next`` 与 ``POST /api/attention``。

/api/next 的每个阶段都与直接调用 :mod:`gptcourse.sampling` 的过滤器逐项比较；/api/attention 与
``model.attention_maps`` 比较，并检查每行加起来是 1、右上方（未来）是 0。服务器与请求工具来自
tests/test_serve.py。"""
from __future__ import annotations

import json
import threading

import pytest
import torch
from test_serve import FakeGeneration, post, request, running, wait_for

from gptcourse import serve
from gptcourse.config import preset
from gptcourse.data import load_corpus
from gptcourse.generate import STAGES, generate, next_token_stages, stream_tokens
from gptcourse.model import GPT, CausalSelfAttention
from gptcourse.sampling import (
    SamplingParams,
    _filtered_probs,
    apply_repetition_penalty,
    apply_temperature,
    sample_with,
    top_k_filter,
    top_p_filter,
)
from gptcourse.serve.params import MAX_ATTENTION, TOP_DEFAULT, TOP_MAX
from gptcourse.tokenizer import CharTokenizer

LINE = "白日依山尽，黄河入海流。"


@pytest.fixture(scope="module")
def tiny():
    tok = CharTokenizer.from_text(load_corpus("tang_5jue").train + "春夏秋冬")
    torch.manual_seed(0)
    model = GPT(preset("course", vocab_size=tok.vocab_size, n_layer=2, n_head=2, n_embd=32))
    return model, tok


@pytest.fixture(scope="module")
def server(tiny):
    with running(*tiny) as srv:
        yield srv


def filters_by_hand(model, tok, prompt, temperature, top_k, top_p):
    """不经过服务器：模型的 logits → 禁用 <unk> → gc.sampling 的温度、top-k、top-p。"""
    ids = torch.tensor([[tok.eos_id] + tok.encode(prompt)])
    with torch.no_grad():
        logits = model(ids)[0][0, -1].float()
    ruled = logits.index_fill(-1, torch.tensor([tok.unk_id]), float("-inf"))
    t = apply_temperature(ruled, temperature)
    k = top_k_filter(t, top_k)
    return {"model": logits, "rules": ruled, "temperature": t, "top_k": k,
            "top_p": top_p_filter(k, top_p)}


# ---------------------------------------------------------------- 库：next_token_stages
@pytest.mark.parametrize("kw", [
    dict(temperature=0.8, top_k=30, top_p=0.9),
    dict(temperature=1.3, repetition_penalty=2.5, form="五绝"),
    dict(temperature=0.6, top_p=0.5, acrostic="春夏秋冬", repetition_penalty=0.5),
])
def test_stages_draw_what_the_decoder_draws(tiny, kw):
    """同一个种子：从 next_token_stages 的 rules 阶段按 sample_with 抽一个字 == 解码循环写出的
    第一个字（_apply_rules 与 _choose 的规则那一步相同）；top_p 阶段的 softmax 就是抽样的分布。"""
    model, tok = tiny
    prompt = "春风" if "acrostic" not in kw else "春"
    stages = next_token_stages(model, tok, prompt, **kw)
    params = SamplingParams.from_dict(kw)
    want = _filtered_probs(stages["rules"], params.temperature, params.top_k, params.top_p)
    assert torch.equal(stages["top_p"].softmax(-1), want)
    for seed in range(6):
        pieces = stream_tokens(model, tok, prompt, seed=seed, **kw)
        first = next(pieces)
        pieces.close()
        gen = torch.Generator().manual_seed(seed)
        picked = sample_with(stages["rules"][None], params, [gen])
        assert first == tok.decode(picked.tolist()), (seed, first)
        assert stages["top_p"][picked].isfinite().all()


# ---------------------------------------------------------------- /api/next
def test_next_reports_every_stage_as_gc_sampling_computes_it(server):
    body = {"prompt": "春风", "temperature": 0.7, "top_k": 40, "top_p": 0.6, "top": TOP_MAX}
    status, d = post(server, body, "/api/next")
    assert status == 200, d
    want = filters_by_hand(server.model, server.tok, "春风", 0.7, 40, 0.6)
    assert d["stages"] == list(STAGES) == list(want)
    assert len(d["top"]) == TOP_MAX
    for stage, logits in want.items():
        probs = logits.softmax(-1)
        assert d["kept"][stage] == int(logits.isfinite().sum()), stage
        for item in d["top"]:
            assert item["probs"][stage] == pytest.approx(float(probs[item["id"]]), abs=1e-6)
        total = sum(item["probs"][stage] for item in d["top"]) + d["others"][stage]
        assert total == pytest.approx(1.0, abs=1e-5), stage            # 每个阶段都是一个分布
    assert d["kept"]["model"] == server.tok.vocab_size
    assert d["kept"]["rules"] == server.tok.vocab_size - 1               # <unk> 从不生成
    assert d["kept"]["top_k"] == 40 and 1 <= d["survivors"] == d["kept"]["top_p"] <= 40
    # 列表按采样前的分布从大到小排；top-k/top-p 只去掉排在后面的：留下的正好是前 survivors 个
    order = torch.sort(want["rules"], descending=True, stable=True).indices[:TOP_MAX].tolist()
    assert [item["id"] for item in d["top"]] == order
    after = [item["probs"]["top_p"] for item in d["top"]]
    n = d["survivors"]
    assert all(p > 0 for p in after[:n]) and all(p == 0 for p in after[n:])
    assert sum(after[:n]) == pytest.approx(1.0, abs=1e-5) and d["others"]["top_p"] == 0
    assert [item["char"] for item in d["top"]] == [server.tok.decode([i]) for i in order]


def test_top_p_keeps_exactly_the_nucleus(server):
    """top-p 去掉的，正是排在前面的字的概率已经凑够 p 之后的那些（温度之后的分布上量）。"""
    for p in (0.3, 0.5, 0.8):           # 随机的小模型很平：低温让核小到放得进列表
        status, d = post(server, {"prompt": "山", "temperature": 0.05, "top_p": p,
                                  "top": TOP_MAX}, "/api/next")
        assert status == 200, d
        before = [item["probs"]["temperature"] for item in d["top"]]
        n = d["survivors"]
        assert n < TOP_MAX, "核超出了列表：换一个更小的 p"
        assert sum(before[:n - 1]) < p <= sum(before[:n]) + 1e-6    # 刚好凑够 p 的那一个也留下
        assert d["kept"]["top_k"] == d["kept"]["rules"]              # 没有 top-k：不去掉任何字


def test_sliders_change_the_distribution(server):
    """温度越低越尖；top-k 留下 k 个；温度 0 只留 argmax，它就是贪心写出的第一个字。"""
    def first(**kw):
        status, d = post(server, {"prompt": "春", **kw}, "/api/next")
        assert status == 200, d
        return d
    cold, hot = first(temperature=0.3), first(temperature=2.0)
    assert cold["top"][0]["probs"]["top_p"] > hot["top"][0]["probs"]["top_p"]
    assert cold["top"][0]["id"] == hot["top"][0]["id"]                 # 温度不改变排序
    assert first(top_k=5)["survivors"] == 5
    greedy = first(temperature=0)
    assert greedy["greedy"] and greedy["survivors"] == 1
    assert greedy["top"][0]["probs"]["top_p"] == 1.0
    text = generate(server.model, server.tok, "春", max_new_tokens=1, temperature=0)
    assert text == "春" + greedy["top"][0]["char"]
    assert len(first()["top"]) == TOP_DEFAULT


def test_the_sampled_character_is_always_a_survivor(server):
    """/api/generate 用同样的参数写出的第一个字，一定在 /api/next 留下的字里。"""
    body = {"prompt": "江", "temperature": 0.9, "top_k": 8, "top_p": 0.7}
    status, d = post(server, {**body, "top": TOP_MAX}, "/api/next")
    kept = {item["char"] for item in d["top"][:d["survivors"]]}
    for seed in range(8):
        status, out = post(server, {**body, "seed": seed, "max_new_tokens": 1})
        assert status == 200 and out["text"][1:] in kept, (out["text"], kept)


def test_form_mask_and_repetition_penalty_are_the_decoders(server):
    """诗体的格式掩码与重复惩罚作用在 rules 阶段，与 next_token_stages（解码循环的同一步）相同。"""
    status, d = post(server, {"prompt": "春风", "form": "五绝", "top": TOP_MAX}, "/api/next")
    assert status == 200 and d["settings"]["form"] == "五绝"
    assert d["kept"]["rules"] < d["kept"]["model"] - 1                   # 第三个字不能是标点
    assert "，" not in {item["char"] for item in d["top"] if item["probs"]["rules"] > 0}
    want = next_token_stages(server.model, server.tok, "春风", form="五绝")
    assert d["kept"]["rules"] == int(want["rules"].isfinite().sum())
    status, d = post(server, {"prompt": "春春春", "repetition_penalty": 3.0, "top": TOP_MAX},
                     "/api/next")
    assert status == 200, d
    tok = server.tok
    with torch.no_grad():
        logits = server.model(torch.tensor([[tok.eos_id] + tok.encode("春春春")]))[0][0, -1]
    ruled = apply_repetition_penalty(logits.float(), tok.encode("春"), 3.0)
    want = ruled.index_fill(-1, torch.tensor([tok.unk_id]), float("-inf")).softmax(-1)
    for item in d["top"]:                                  # 出现过的“春”被压低，其余的随之变大
        assert item["probs"]["rules"] == pytest.approx(float(want[item["id"]]), abs=1e-6)
        lower = item["id"] == tok.encode("春")[0]
        assert (item["probs"]["rules"] < item["probs"]["model"]) == lower


@pytest.mark.parametrize("body, word", [
    ({"top": 0}, "top"), ({"top": TOP_MAX + 1}, "top"), ({"top": "5"}, "top"),
    ({"top": 2.5}, "top"), ({"temperature": 9}, "temperature"), ({"top_p": 0}, "top_p"),
    ({"top_k": -1}, "top_k"), ({"prompt": "☃"}, "词表"), ({"nope": 1}, "未知参数"),
    ({"title": "☃"}, "title"), ({"repetition_penalty": 0}, "repetition"),
])
def test_next_bad_input_is_400_with_zh_and_en(server, body, word):
    status, d = post(server, body, "/api/next")
    assert status == 400 and word in d["zh"] and d["en"] and d["error"], d


# ---------------------------------------------------------------- /api/attention
def test_attention_rows_sum_to_one_and_are_causal(server):
    status, d = post(server, {"text": LINE}, "/api/attention")
    assert status == 200, d
    cfg = server.model.config
    T = len(LINE) + 1
    assert d["tokens"] == ["\n", *LINE] and d["text"] == LINE
    assert (d["n_layer"], d["n_head"]) == (cfg.n_layer, cfg.n_head)
    w = torch.tensor(d["weights"])
    assert w.shape == (cfg.n_layer, cfg.n_head, T, T)
    assert torch.allclose(w.sum(-1), torch.ones(cfg.n_layer, cfg.n_head, T), atol=1e-3)
    assert (w.triu(1) == 0).all() and (w >= 0).all()                    # 看不到未来
    assert (w[..., 0, 0] == 1).all()                                      # 第一个位置只能看自己
    ids = torch.tensor([[server.tok.eos_id] + server.tok.encode(LINE)])
    want = torch.stack([m[0] for m in server.model.attention_maps(ids)])
    assert torch.allclose(w, want, atol=1e-4)


@pytest.mark.parametrize("body, word", [
    ({"text": ""}, "空"), ({"text": "春" * (MAX_ATTENTION + 1)}, "太长"), ({"text": 5}, "字符串"),
    ({}, "text"), ({"text": "春", "layer": 0}, "未知参数"), ({"text": "春☃"}, "词表"),
    ([], "JSON 对象"),
])
def test_attention_bad_input_is_400_with_zh_and_en(server, body, word):
    status, d = post(server, body, "/api/attention")
    assert status == 400 and word in d["zh"] and d["en"], d


def test_attention_text_must_fit_the_context(tiny):
    """block_size 小于 MAX_ATTENTION 的模型：上限是 block_size − 1（开头还有一个换行）。"""
    _, tok = tiny
    torch.manual_seed(0)
    small = GPT(preset("course", vocab_size=tok.vocab_size, n_layer=1, n_head=2, n_embd=16,
                       block_size=8))
    with running(small, tok) as srv:
        info = json.loads(request(srv, "/api/info")[1])
        assert info["limits"]["attention"] == 7
        assert post(srv, {"text": "春" * 7}, "/api/attention")[0] == 200
        status, d = post(srv, {"text": "春" * 8}, "/api/attention")
        assert status == 400 and "太长" in d["zh"]


def test_info_describes_the_model_for_the_page(server):
    info = json.loads(request(server, "/api/info")[1])
    cfg = server.model.config
    assert (info["n_layer"], info["n_head"]) == (cfg.n_layer, cfg.n_head)
    assert list(info["stages"]) == list(STAGES)
    assert info["limits"]["attention"] == MAX_ATTENTION
    assert (info["limits"]["top"], info["limits"]["top_default"]) == (TOP_MAX, TOP_DEFAULT)


def test_attention_and_generation_at_the_same_time_do_not_mix(server):
    """注意力在模型的副本上记录：同时写诗的请求得到与库相同的诗，注意力也不被它们打乱。"""
    gen = {"prompt": "春", "form": "五绝", "seed": 2}
    poem = generate(server.model, server.tok, **gen)
    want = post(server, {"text": LINE}, "/api/attention")[1]["weights"]
    results: list = []

    def worker(i):
        if i % 2:
            results.append(("poem", post(server, gen)[1]["text"]))
        else:
            results.append(("attn", post(server, {"text": LINE}, "/api/attention")[1]["weights"]))
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 8
    assert all(v == (poem if kind == "poem" else want) for kind, v in results)
    assert all(m._record is None for m in server.model.modules()
               if isinstance(m, CausalSelfAttention))                  # 共享的模型从未被挂上记录槽


@pytest.mark.parametrize("path, body", [("/api/next", {}), ("/api/attention", {"text": "春"})])
def test_live_endpoints_wait_for_a_slot_like_generation(tiny, monkeypatch, path, body):
    """名额（Gate）满了：课堂演示的请求与写诗一样得到 503，而不是绕过上限。"""
    fake = FakeGeneration()
    monkeypatch.setattr(serve, "stream_tokens", fake)
    with running(*tiny, limits=dict(slots=1, queue=0)) as srv:
        first = threading.Thread(target=lambda: post(srv, {}))
        first.start()
        assert fake.started.wait(10)
        status, d = post(srv, body, path)
        assert status == 503 and "服务器正忙" in d["zh"]
        fake.release.set()
        first.join(30)
        wait_for(lambda: srv.gate.running == 0)
        assert post(srv, body, path)[0] == 200


def test_page_has_the_class_demo(server):
    html = request(server, "/")[1].decode("utf-8")
    for needle in ("课堂演示", 'id="live_temperature"', 'id="live_top_k"', 'id="live_top_p"',
                   'id="live_repetition_penalty"', 'id="bars"', 'id="attn_text"',
                   'id="attn_layer"', 'id="attn_head"', 'id="heatmap"', 'src="/live.js"'):
        assert needle in html, needle
    for slider in ("live_temperature", "live_top_p", "live_repetition_penalty"):
        tag = html[html.index(f'id="{slider}"'):].split(">", 1)[0]
        assert "min=" not in tag and "max=" not in tag and "value=" not in tag, tag
    status, js, hdrs = request(server, "/live.js")
    js = js.decode("utf-8")
    assert status == 200 and hdrs["Content-Type"].startswith("text/javascript")
    for needle in ("/api/next", "/api/attention", "info.ranges", "info.zero_ok", "info.defaults"):
        assert needle in js, needle
    assert "innerHTML" not in js and "http://" not in js.replace("http://www.w3.org/2000/svg", "")


@pytest.mark.parametrize("path", ["/api/next", "/api/attention"])
def test_opening_a_live_endpoint_with_get_says_post_not_missing(server, path):
    """在地址栏里打开 /api/next：405 “只接受 POST”，而不是 404 “没有这个地址”。"""
    status, data, _ = request(server, path)
    d = json.loads(data)
    assert status == 405 and "POST" in d["zh"] and d["en"], d
    status, data, _ = request(server, "/api/nope")
    assert status == 404
