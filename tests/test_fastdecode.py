"""快速一步（gptcourse.fastdecode）与 generate 的 compile= / precision= 选项。

不依赖 CPU 的舍入：比较容差内的 logits 与 top-2 之差远大于容差时的贪心词元；编译的测试只有一个
（很小的模型，批大小 1），其余编译测试要 GPTCOURSE_COMPILE_TESTS=1。"""
from __future__ import annotations

import os

import pytest
import torch

from gptcourse import fastdecode
from gptcourse.config import preset
from gptcourse.errors import UserError
from gptcourse.generate import generate, generate_batch, stream_tokens
from gptcourse.model import GPT
from gptcourse.runtime import ROOT
from gptcourse.tokenizer import CharTokenizer

TEXT = "\n春风吹绿江南岸，明月何时照我还。白日依山尽，黄河入海流。欲穷千里目，更上一层楼。"
MORE_COMPILE = pytest.mark.skipif(os.environ.get("GPTCOURSE_COMPILE_TESTS") != "1",
                                  reason="编译要几十秒：GPTCOURSE_COMPILE_TESTS=1 时才跑")


@pytest.fixture(scope="module")
def tok():
    return CharTokenizer.from_text(TEXT)


def tiny(tok, pos="rope", seed=0) -> GPT:
    torch.manual_seed(seed)
    design = "course" if pos == "rope" else "mini"
    return GPT(preset(design, vocab_size=tok.vocab_size, block_size=32, n_layer=2, n_head=2,
                      n_embd=32, dropout=0.0, attn_dropout=0.0, resid_dropout=0.0)).eval()


def teacher_logits(model, ids: list[int]) -> torch.Tensor:
    """教学路径逐位置的 logits [T, V]（带缓存，一次一个词元）。"""
    cache, out = model.new_cache(), []
    with torch.inference_mode():
        for i in ids:
            out.append(model(torch.tensor([[i]]), cache=cache)[0][0, -1])
    return torch.stack(out)


def fast_logits(decoder, ids: list[int], batch: int = 1) -> torch.Tensor:
    cache = decoder.new_cache(batch)
    return torch.stack([decoder(cache, torch.full((batch,), i), t)[0]
                        for t, i in enumerate(ids)])


@pytest.mark.parametrize("pos", ["rope", "learned"])
def test_static_step_equals_the_model_in_fp32(tok, pos):
    model = tiny(tok, pos)
    ids = [tok.eos_id] + tok.encode(TEXT[1:30])
    d = fastdecode.FastDecoder(model, compile=False)
    torch.testing.assert_close(fast_logits(d, ids), teacher_logits(model, ids),
                               atol=1e-5, rtol=1e-5)


def test_static_step_in_bf16_is_close_and_leaves_the_model_alone(tok):
    model = tiny(tok)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ids = [tok.eos_id] + tok.encode(TEXT[1:30])
    d = fastdecode.FastDecoder(model, torch.bfloat16, compile=False)
    assert d.step.model is not model and next(d.step.model.parameters()).dtype == torch.bfloat16
    got, want = fast_logits(d, ids), teacher_logits(model, ids)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, atol=0.05, rtol=0.05)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    assert next(model.parameters()).dtype == torch.float32


def test_caches_are_separate_per_caller(tok):
    """同一个解码器、两个缓存交替前进：各自的结果与单独运行相同（网页演示的并发请求）。"""
    model = tiny(tok)
    d = fastdecode.FastDecoder(model, compile=False)
    a, b = [tok.eos_id] + tok.encode("春风吹绿"), [tok.eos_id] + tok.encode("白日依山")
    ca, cb = d.new_cache(), d.new_cache()
    mixed_a, mixed_b = [], []
    for t, (x, y) in enumerate(zip(a, b)):
        mixed_a.append(d(ca, torch.tensor([x]), t)[0])
        mixed_b.append(d(cb, torch.tensor([y]), t)[0])
    torch.testing.assert_close(torch.stack(mixed_a), fast_logits(d, a), atol=0, rtol=0)
    torch.testing.assert_close(torch.stack(mixed_b), fast_logits(d, b), atol=0, rtol=0)


def _clear_greedy(model, tok, prompt: str, n: int, margin: float = 1e-3) -> bool:
    """教学路径贪心写 n 个词元时，每一步第一名都比第二名大 margin 以上（舍入翻不了它）。"""
    ids = [tok.eos_id] + tok.encode(prompt)
    cache = model.new_cache()
    with torch.inference_mode():
        x = torch.tensor([ids])
        for _ in range(n):
            logits = model(x, cache=cache)[0][0, -1]
            top = logits.topk(2).values
            if top[0] - top[1] < margin:
                return False
            x = logits.argmax().view(1, 1)
    return True


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_generate_fast_path_writes_the_same_greedy_tokens(tok, precision):
    model = tiny(tok)
    prompts = [p for p in ("春", "明月", "白日依", "黄") if _clear_greedy(model, tok, p, 20, 0.1)]
    assert prompts                                             # 这个小模型上至少有一个清楚的例子
    want = generate_batch(model, tok, prompts, max_new_tokens=20, temperature=0)
    assert generate_batch(model, tok, prompts, max_new_tokens=20, temperature=0,
                          precision=precision) == want
    assert [generate(model, tok, p, max_new_tokens=20, temperature=0, precision=precision)
            for p in prompts] == want


def test_fast_path_past_block_size_and_with_constraints(tok):
    """上下文满了之后退回整段重算；诗体约束照样满足；流式输出与一次返回相同。"""
    model = tiny(tok)
    out = generate(model, tok, "春", max_new_tokens=60, temperature=0.8, seed=3,
                   precision="bf16")
    assert out.startswith("春") and len(tok.encode(out)) <= 61
    poem = generate(model, tok, "", form="五绝", seed=1, precision="bf16")
    lines = poem.replace("。", "，").split("，")[:4]
    assert [len(x) for x in lines] == [5, 5, 5, 5]
    streamed = "".join(stream_tokens(model, tok, "春", max_new_tokens=12, seed=2,
                                     precision="bf16"))
    assert "春" + streamed == generate(model, tok, "春", max_new_tokens=12, seed=2,
                                       precision="bf16")


def test_default_is_the_teaching_path(tok, monkeypatch):
    """默认（compile=False、fp32）不碰快速一步；compile=None 在词元少、没有编译好的一步时也不碰。"""
    model = tiny(tok)

    def boom(*a, **k):
        raise AssertionError("快速一步不该被用到")
    monkeypatch.setattr("gptcourse.generate.decoder_for", boom)
    generate(model, tok, "春", max_new_tokens=8, seed=0)
    generate(model, tok, "春", max_new_tokens=8, seed=0, compile=None)


def test_bad_fast_options(tok):
    model = tiny(tok)
    with pytest.raises(UserError, match="precision"):
        generate(model, tok, "春", precision="fp16")
    with pytest.raises(UserError, match="use_cache"):
        generate(model, tok, "春", use_cache=False, precision="bf16")
    with pytest.raises(UserError, match="compile"):
        generate(model, tok, "春", compile="yes")


def test_inductor_cache_dir_is_the_users_and_configurable(monkeypatch, tmp_path):
    monkeypatch.delenv(fastdecode.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    path = fastdecode.inductor_cache_dir()
    if fastdecode.sys.platform.startswith("linux"):
        assert path == tmp_path / "xdg" / "gptcourse" / "inductor"
    assert path.parts[-2:] == ("gptcourse", "inductor")
    monkeypatch.setenv(fastdecode.CACHE_ENV, str(tmp_path / "mine"))
    assert fastdecode.inductor_cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    assert fastdecode.use_inductor_cache() == tmp_path / "mine"
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "mine")
    assert (tmp_path / "mine").is_dir()


def test_no_compiler_falls_back_with_a_reason(tok, monkeypatch):
    monkeypatch.setattr(fastdecode.shutil, "which", lambda name: None)
    d = fastdecode.FastDecoder(tiny(tok), compile=True)
    assert not d.compiled and "C++" in d.reason and d.ready(1)


def test_compiled_step_is_close_to_eager(tok):
    """唯一默认运行的编译测试：很小的模型、批大小 1、fp32；编译不了时说明原因并跳过。"""
    ok, why = fastdecode.compiler_available()
    if not ok:
        pytest.skip(why)
    model = tiny(tok)
    ids = [tok.eos_id] + tok.encode(TEXT[1:20])
    d = fastdecode.FastDecoder(model, compile=True)
    got = fast_logits(d, ids)
    if not d.compiled:
        pytest.skip(d.reason)
    torch.testing.assert_close(got, teacher_logits(model, ids), atol=1e-4, rtol=1e-4)
    assert d.ready(1) and d.compile_seconds[1] > 0


@MORE_COMPILE
def test_compiled_bf16_batch_and_generate(tok):
    model = tiny(tok)
    d = fastdecode.decoder_for(model, torch.bfloat16, compile=True)
    ids = [tok.eos_id] + tok.encode(TEXT[1:20])
    torch.testing.assert_close(fast_logits(d, ids), teacher_logits(model, ids),
                               atol=0.05, rtol=0.05)
    prompts = [p for p in ("春", "明月", "白日依") if _clear_greedy(model, tok, p, 16, 0.1)]
    want = generate_batch(model, tok, prompts, max_new_tokens=16, temperature=0)
    assert generate_batch(model, tok, prompts, max_new_tokens=16, temperature=0, compile=True,
                          precision="bf16") == want
    assert fastdecode.cached_decoder(model, torch.bfloat16) is d


def test_fused_gate_up_follows_the_model_after_an_in_place_update():
    """fp32 的快速一步用的是模型自己的权重，只有拼好的 gate_up [2·Hd, C] 是拷贝：权重变了
    （像优化器的一步）之后它原地更新，解码器不重建（编译好的一步不必重新编译），结果与教学路径相同。"""
    torch.manual_seed(0)
    model = GPT(preset("course", vocab_size=50, block_size=16, n_layer=2, n_head=2,
                       n_embd=16)).eval()
    d = fastdecode.decoder_for(model, None, compile=False)
    col = torch.tensor([3])
    before = d(d.new_cache(1), col, 0)
    with torch.no_grad():
        model.blocks[0].mlp.up.weight.mul_(-3)
    d2 = fastdecode.decoder_for(model, None, compile=False)
    assert d2 is d
    after = d2(d2.new_cache(1), col, 0)
    with torch.inference_mode():
        want = model(col[:, None])[0][:, -1]
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- 坏输入与边角
# 坏输入、调用者的训练模式、bf16 副本的重建、编译缓存目录、后台编译。
KW = dict(max_new_tokens=8, temperature=0, seed=0)


@pytest.mark.parametrize("precision", [["bf16"], {"bf16": 1}])
def test_an_unhashable_precision_is_a_user_error(small_gpt, small_tok, precision):
    with pytest.raises(UserError, match="precision 只能是 fp32 / bf16"):
        generate(small_gpt(), small_tok, "春", precision=precision, **KW)


def test_the_fast_step_leaves_the_callers_training_mode_alone(small_gpt, small_tok):
    model = small_gpt(dropout=0.5, attn_dropout=0.5, resid_dropout=0.5).train()
    d = fastdecode.FastDecoder(model, None, compile=False)
    assert model.training                                             # 以前：变成 eval
    cache, col = d.new_cache(1), torch.tensor([small_tok.eos_id])
    a, b = d(cache, col, 0), d(d.new_cache(1), col, 0)                 # 解码时总在 eval
    assert torch.equal(a, b) and model.training


def test_generate_compile_true_leaves_a_training_model_in_training(small_gpt, small_tok,
                                                                   monkeypatch):
    monkeypatch.setattr(fastdecode.shutil, "which", lambda name: None)   # 不编译的快速一步
    model = small_gpt().train()
    generate(model, small_tok, "春", compile=True, **KW)
    assert model.training


def test_bf16_copy_is_rebuilt_after_load_state_dict(small_gpt, small_tok):
    a, b = small_gpt(seed=0), small_gpt(seed=1)
    generate(a, small_tok, "春", precision="bf16", **KW)
    a.load_state_dict(b.state_dict())
    assert generate(a, small_tok, "春", precision="bf16", **KW) == \
        generate(small_gpt(seed=1), small_tok, "春", precision="bf16", **KW)


def test_bf16_copy_is_rebuilt_after_an_in_place_update_and_only_then(small_gpt, small_tok):
    a = small_gpt()
    generate(a, small_tok, "春", precision="bf16", **KW)
    d = fastdecode.decoder_for(a, torch.bfloat16, False)
    generate(a, small_tok, "春", precision="bf16", **KW)
    assert fastdecode.decoder_for(a, torch.bfloat16, False) is d          # 权重没变：不重建
    with torch.no_grad():
        a.lm_head.weight.mul_(-1)                                         # 像优化器的一步
    got = generate(a, small_tok, "春", precision="bf16", **KW)
    assert fastdecode.decoder_for(a, torch.bfloat16, False) is not d
    fastdecode.forget(a)
    assert got == generate(a, small_tok, "春", precision="bf16", **KW)


@pytest.mark.parametrize("where", ["/proc/nope/inductor", "README.md", "/dev/null/x"])
def test_an_unusable_cache_dir_still_generates(small_gpt, small_tok, monkeypatch, where):
    path = str(ROOT / where) if not where.startswith("/") else where
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv(fastdecode.CACHE_ENV, path)
    monkeypatch.setattr(torch, "compile", lambda fn, **k: fn)     # 只走编译分支，不真的编译
    monkeypatch.setattr(fastdecode, "compiler_available", lambda device="cpu": (True, ""))
    with pytest.raises(UserError, match=f"环境变量 {fastdecode.CACHE_ENV}"):
        fastdecode.use_inductor_cache()
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ                       # 什么都没改
    model = small_gpt()
    assert generate(model, small_tok, "春", compile=True, **KW) == \
        generate(model, small_tok, "春", **KW)
    d = fastdecode.decoder_for(model, torch.float32, True)
    assert d.compiled and "不能用" in d.reason and "默认缓存目录" in d.reason


def test_an_explicit_unusable_cache_dir_is_a_user_error(monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    with pytest.raises(UserError, match="编译缓存目录 /proc/nope 不能用"):
        fastdecode.use_inductor_cache("/proc/nope")


@pytest.mark.parametrize("dtype, compiled", [(torch.float32, True), (torch.float32, False),
                                             (torch.bfloat16, False)])
def test_a_model_with_a_fast_decoder_is_freed_when_dropped(small_gpt, small_tok, monkeypatch, dtype,
                                                           compiled):
    """以前解码器放在以模型为键的 WeakKeyDictionary 里，fp32 的解码器又引用着模型：
    键永远不死，循环里每个 compile=True 生成过的模型都留在内存里。"""
    import copy
    import gc
    import weakref
    monkeypatch.setattr(torch, "compile", lambda fn, **k: fn)
    model = small_gpt()
    d = fastdecode.decoder_for(model, dtype, compiled)
    assert fastdecode.decoder_for(model, dtype, compiled) is d                 # 仍然只建一次
    twin = copy.deepcopy(model)                                                # 副本不带走解码器
    assert fastdecode.decoder_for(twin, dtype, compiled) is not d
    alive = weakref.ref(model)
    del model, d, twin
    gc.collect()
    assert alive() is None


def test_a_failing_background_compile_is_one_line_not_a_traceback(small_gpt, small_tok, monkeypatch,
                                                                  capsys):
    def broken(*a, **k):
        raise OSError(30, "Read-only file system")
    monkeypatch.setattr(fastdecode, "decoder_for", broken)
    fastdecode.warm_up_in_background(small_gpt()).join(30)
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1
    assert err.startswith("注：后台编译快速解码失败（OSError") and "网页演示照常" in err


def test_background_compile_does_its_fx_trace_before_requests_start(small_gpt, small_tok,
                                                                    monkeypatch):
    """第 3 轮的 server_new.py 重跑时 N28 得了 500：后台编译里 inductor 第一次 symbolic_trace，
    全局替换了 nn.Module.__call__，同一瞬间请求线程里的模型调用 NameError。现在那次 trace
    在开始后台线程之前、在调用者的线程里做掉（缓存住，编译时不再 trace）。"""
    shim = pytest.importorskip("torch._inductor.loop_body").InterpreterShim
    shim._dummy_gm.cache_clear()
    monkeypatch.setattr(fastdecode, "decoder_for", lambda *a, **k: None)   # 不真的编译
    fastdecode.warm_up_in_background(small_gpt()).join(30)
    assert shim._dummy_gm.cache_info().currsize == 1
    model, x = small_gpt(), torch.zeros(1, 4, dtype=torch.long)
    import threading
    inside, release = threading.Event(), threading.Event()

    def slow_identity(v):                    # 在 symbolic_trace 里停住：模拟那一瞬间
        inside.set()
        release.wait(10)
        return v
    t = threading.Thread(target=torch.fx.symbolic_trace, args=(slow_identity,))
    t.start()
    inside.wait(10)
    try:
        with pytest.raises(NameError, match="not installed as a submodule"):
            model(x)                         # 机理：trace 进行时别的线程调用模块会失败
    finally:
        release.set()
        t.join(10)
    model(x)
