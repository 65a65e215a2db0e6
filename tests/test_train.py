"""gptcourse.train：参数分组、学习率日程、裁剪、梯度累积、estimate_loss、确定性、bf16、预算、步骤顺序。

全部用几千个参数的小模型，每个测试不到一两秒。
"""
from __future__ import annotations

import math
import time

import pytest
import torch

from gptcourse import checkpoint, cli, precision
from gptcourse import train as T
from gptcourse.config import preset
from gptcourse.data import get_batch
from gptcourse.errors import UserError
from gptcourse.model import GPT
from gptcourse.optim import cosine_lr, lr_at, make_optimizer, param_groups
from gptcourse.tokenizer import CharTokenizer
from gptcourse.train import (
    History,
    TrainConfig,
    TrainingDiverged,
    batch_generator,
    estimate_loss,
    train,
    train_step,
)


def tiny_model(seed: int = 0, vocab: int = 64, **kw) -> GPT:
    base = dict(vocab_size=vocab, block_size=16, n_layer=1, n_head=2, n_embd=16)
    torch.manual_seed(seed)
    return GPT(preset("mini", **(base | kw)))


@pytest.fixture
def ids(tiny_corpus_text) -> torch.Tensor:
    tok = CharTokenizer.from_text(tiny_corpus_text)
    return torch.tensor(tok.encode(tiny_corpus_text * 4), dtype=torch.long)   # [N]


def quiet(**kw) -> TrainConfig:
    base = dict(batch_size=4, lr=3e-3, warmup_steps=2, max_steps=6, eval_interval=3,
                eval_batches=2, bf16=False, progress=False)
    return TrainConfig(**(base | kw))


# ------------------------------------------------------------------ 参数分组
def test_param_groups_mini_design():
    model = GPT(preset("mini"))                                   # V=123, 3 层, C=96, 带偏置
    decay, no_decay = param_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"])
    assert all(p.dim() == 1 for p in no_decay["params"])
    # 衰减：词嵌入（与输出头共享，只算一次）+ 位置嵌入 + 每块 4 个矩阵
    assert len(decay["params"]) == 2 + 4 * 3
    # 不衰减：每块 qkv/proj/fc/fc-proj 四个偏置 + 两个 LN 的 γ 与 β，再加最终 LN 的 γ 与 β
    assert len(no_decay["params"]) == 8 * 3 + 2
    n_decay = sum(p.numel() for p in decay["params"])
    n_no = sum(p.numel() for p in no_decay["params"])
    assert n_decay == 11_808 + 6_144 + 3 * (27_648 + 9_216 + 36_864 + 36_864)
    assert n_decay + n_no == 353_664                                # 与课程规格的总数一致
    ids_ = [id(p) for g in (decay, no_decay) for p in g["params"]]
    assert len(ids_) == len(set(ids_))                              # 共享权重没有重复


def test_param_groups_teacher_has_only_norm_weights_undecayed():
    model = GPT(preset("teacher", vocab_size=50, n_layer=2))        # 无偏置、RMSNorm
    decay, no_decay = param_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    assert sorted(names[id(p)] for p in no_decay["params"]) == [
        "blocks.0.norm1.weight", "blocks.0.norm2.weight", "blocks.1.norm1.weight",
        "blocks.1.norm2.weight", "norm_f.weight"]
    opt = make_optimizer(model, 1e-3)
    assert opt.defaults["betas"] == (0.9, 0.95)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0]


# ------------------------------------------------------------------ 学习率日程
def test_lr_schedule_values():
    lr, w, total = 1e-3, 10, 110
    assert lr_at(0, lr, w, total) == pytest.approx(lr / 11)          # 预热起点
    assert lr_at(9, lr, w, total) == pytest.approx(lr * 10 / 11)     # 预热最后一步
    assert lr_at(10, lr, w, total) == pytest.approx(lr)              # 峰值
    assert lr_at(60, lr, w, total) == pytest.approx(0.55 * lr)       # 余弦中点 = (峰值+地板)/2
    assert lr_at(110, lr, w, total) == pytest.approx(0.1 * lr)       # 地板
    assert lr_at(10_000, lr, w, total) == pytest.approx(0.1 * lr)    # 之后一直是地板
    assert lr_at(50, lr, 0, 100, min_lr_ratio=0.0) == pytest.approx(lr / 2)
    assert cosine_lr(-1, lr) == pytest.approx(lr) and cosine_lr(2, lr) == pytest.approx(lr / 10)


def test_lr_schedule_monotone():
    lrs = [lr_at(s, 1.0, 20, 200) for s in range(250)]
    assert all(a < b for a, b in zip(lrs[:20], lrs[1:21]))            # 预热：严格上升
    assert all(a >= b for a, b in zip(lrs[20:], lrs[21:]))            # 之后：单调不增
    assert min(lrs[20:]) == pytest.approx(0.1) and lrs[-1] == pytest.approx(0.1)


# ------------------------------------------------------------------ 一步训练
def _global_norm(model) -> float:
    return math.sqrt(sum(p.grad.pow(2).sum().item() for p in model.parameters()
                         if p.grad is not None))


def test_clipping_by_global_norm(ids):
    batches = [get_batch(ids, 4, 16, generator=torch.Generator().manual_seed(0))]
    model = tiny_model(dropout=0.0, attn_dropout=0.0, resid_dropout=0.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    _, raw = train_step(model, opt, batches, grad_clip=0)            # 0 = 不裁剪
    assert _global_norm(model) == pytest.approx(raw, rel=1e-5)
    assert raw > 0.05
    loss, norm = train_step(model, opt, batches, grad_clip=0.05)
    assert norm == pytest.approx(raw, rel=1e-5)                       # 返回的是裁剪前的范数
    assert _global_norm(model) == pytest.approx(0.05, rel=1e-4)       # 所有梯度一起缩放到 0.05
    assert math.isfinite(loss)


def test_grad_accumulation_equals_big_batch_only_with_division(ids):
    x, y = get_batch(ids, 8, 16, generator=torch.Generator().manual_seed(1))  # [8, 16]
    kw = dict(dropout=0.0, attn_dropout=0.0, resid_dropout=0.0)

    big = tiny_model(**kw)
    big.zero_grad()
    big(x, y)[1].backward()                                           # 一个 8 条的大批次
    want = {n: p.grad.clone() for n, p in big.named_parameters()}

    acc = tiny_model(**kw)                                            # 两个 4 条的微批次
    train_step(acc, torch.optim.SGD(acc.parameters(), lr=0.0), [(x[:4], y[:4]), (x[4:], y[4:])],
               grad_clip=0)
    for n, p in acc.named_parameters():
        torch.testing.assert_close(p.grad, want[n], rtol=1e-5, atol=1e-7)

    wrong = tiny_model(**kw)                                          # 忘了除以微批次数
    wrong.zero_grad()
    for sl in (slice(0, 4), slice(4, 8)):
        wrong(x[sl], y[sl])[1].backward()
    g_wrong = wrong.tok_emb.weight.grad
    assert not torch.allclose(g_wrong, want["tok_emb.weight"], rtol=1e-3)
    torch.testing.assert_close(g_wrong, 2 * want["tok_emb.weight"], rtol=1e-5, atol=1e-7)


def test_step_order(ids, monkeypatch):
    """前向 → 损失 → zero_grad(set_to_none) → 反向 → 裁剪 → step；累积时每个微批次前向+反向。"""
    model = tiny_model()
    opt = make_optimizer(model, 1e-3)
    events: list[str] = []
    model.register_forward_hook(lambda *a: events.append("forward"))
    model.lm_head.weight.register_hook(lambda g: events.append("backward"))
    zero, step = opt.zero_grad, opt.step

    def zero_grad(set_to_none=True):
        events.append(f"zero_grad(set_to_none={set_to_none})")
        zero(set_to_none=set_to_none)

    def step_():
        assert all(p.grad is not None for p in model.parameters())
        events.append("step")
        return step()

    clip = torch.nn.utils.clip_grad_norm_

    def clip_(params, max_norm, *a, **k):
        events.append("clip")
        return clip(params, max_norm, *a, **k)

    monkeypatch.setattr(opt, "zero_grad", zero_grad)
    monkeypatch.setattr(opt, "step", step_)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip_)
    g = torch.Generator().manual_seed(0)
    train_step(model, opt, [get_batch(ids, 2, 16, generator=g)])
    assert events == ["forward", "zero_grad(set_to_none=True)", "backward", "clip", "step"]
    events.clear()
    train_step(model, opt, [get_batch(ids, 2, 16, generator=g) for _ in range(2)])
    assert events == ["forward", "zero_grad(set_to_none=True)", "backward",
                      "forward", "backward", "clip", "step"]


# ------------------------------------------------------------------ estimate_loss
def test_estimate_loss_eval_mode_no_grad_restores_mode(ids):
    model = tiny_model(dropout=0.5, attn_dropout=0.5, resid_dropout=0.5)
    seen = []
    model.register_forward_hook(lambda m, i, o: seen.append((m.training, torch.is_grad_enabled())))
    model.train()
    a = estimate_loss(model, {"train": ids, "val": ids}, 4, 16, n_batches=3)
    assert model.training                                              # 切回了训练模式
    assert seen and all(s == (False, False) for s in seen)             # eval 模式 + 不求梯度
    b = estimate_loss(model, {"train": ids}, 4, 16, n_batches=3)
    assert a["train"] == b["train"]                                    # dropout 关着：结果确定
    model.eval()
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        manual = sum(model(*get_batch(ids, 4, 16, generator=g))[1].item() for _ in range(3)) / 3
    assert a["val"] == pytest.approx(manual)                           # 就是几个批次的平均
    estimate_loss(model, {"val": ids}, 4, 16, n_batches=1)
    assert not model.training                                          # 原来是 eval 就保持 eval
    assert all(p.grad is None for p in model.parameters())


# ------------------------------------------------------------------ 整个循环
def test_same_seed_same_history(ids):
    runs = [train(tiny_model(), ids, ids, quiet()) for _ in range(2)]
    assert [r["loss"] for r in runs[0].steps] == [r["loss"] for r in runs[1].steps]
    assert [e["val"] for e in runs[0].evals] == [e["val"] for e in runs[1].evals]
    other = train(tiny_model(), ids, ids, quiet(seed=1))
    assert [r["loss"] for r in other.steps] != [r["loss"] for r in runs[0].steps]


def test_history_rows_and_callbacks(ids):
    seen = []
    h = train(tiny_model(), ids, ids, quiet(), callbacks=[lambda s, m, h: seen.append(s)],
              on_eval=lambda s, v, best: seen.append((s, round(v, 6), best)))
    assert [r["step"] for r in h.steps] == [1, 2, 3, 4, 5, 6]
    assert set(h.steps[0]) == {"step", "loss", "lr", "grad_norm", "tokens_per_s"}
    assert [e["step"] for e in h.evals] == [3, 6]
    assert [r["lr"] for r in h.steps] == pytest.approx([lr_at(s, 3e-3, 2, 6) for s in range(6)])
    assert seen[1] == 3 and seen[3] == 6 and seen[0][2] is True        # 第一次评估总是最好
    assert h.best_val == min(e["val"] for e in h.evals)
    assert History.from_dict(h.to_dict()) == h


def test_bf16_runs_and_stays_close_to_fp32(ids):
    kw = dict(max_steps=12, lr=1e-2, eval_interval=12)
    h32 = train(tiny_model(), ids, ids, quiet(**kw, bf16=False))
    h16 = train(tiny_model(), ids, ids, quiet(**kw, bf16=True))
    l32, l16 = [r["loss"] for r in h32.steps], [r["loss"] for r in h16.steps]
    assert all(math.isfinite(v) for v in l16 + [r["grad_norm"] for r in h16.steps])
    assert l16 != l32                                                  # 真的走了 bf16 路径
    assert abs(l16[0] - l32[0]) < 0.02                                 # 同一初始点
    assert l16[-1] < l16[0] - 0.3                                      # bf16 也在学
    assert abs(l16[-1] - l32[-1]) < 0.1                                # 差别在噪声范围内
    assert abs(h16.evals[-1]["val"] - h32.evals[-1]["val"]) < 0.1


def test_step_budget_stops(ids):
    h = train(tiny_model(), ids, None, quiet(max_steps=3, eval_interval=100))
    assert len(h.steps) == 3 and [e["step"] for e in h.evals] == [3]   # 最后一步总会评估
    h = train(tiny_model(), ids, None, quiet(max_steps=6), stop_step=4)
    assert len(h.steps) == 4


def test_minute_budget_stops(ids):
    t0 = time.perf_counter()
    h = train(tiny_model(), ids, ids, quiet(max_steps=None, max_minutes=0.03, warmup_steps=2,
                                            eval_interval=10**6))
    wall = time.perf_counter() - t0
    assert wall >= 1.8 and len(h.steps) >= 3      # 1.8 秒的预算：不会提前停（慢机器上也不设上限）
    assert len(h.evals) == 1 and h.evals[0]["step"] == len(h.steps)   # 停下时评估一次
    lrs = [r["lr"] for r in h.steps]
    assert lrs[:2] == pytest.approx([3e-3 / 3, 3e-3 * 2 / 3])         # 预热仍按步数
    assert all(a >= b for a, b in zip(lrs[2:], lrs[3:]))              # 之后按时间余弦衰减
    assert lrs[2] == pytest.approx(3e-3) and lrs[-1] >= 3e-4


def test_batch_generator_depends_on_seed_step_rank():
    draw = [torch.randint(1000, (4,), generator=batch_generator(*a)).tolist()
            for a in [(0, 5, 0), (0, 5, 0), (0, 6, 0), (0, 5, 1), (1, 5, 0)]]
    assert draw[0] == draw[1]
    assert len({tuple(d) for d in draw}) == 4


@pytest.mark.parametrize("bad", [dict(max_steps=None), dict(max_steps=0), dict(batch_size=0),
                                 dict(grad_accum=0), dict(lr=0), dict(max_minutes=-1),
                                 dict(bf16="yes"), dict(min_lr_ratio=2)])
def test_train_config_rejects_bad_values(bad):
    with pytest.raises(ValueError, match="|".join(bad) or "预算"):
        quiet(**bad)


# ------------------------------------------------------------------ 延迟同步、发散、配置
@pytest.mark.parametrize("bad", [dict(lr=math.inf), dict(lr=math.nan), dict(log_interval=0),
                                 dict(bf16_mode="fp8"), dict(betas=(0.9, 1.0)),
                                 dict(grad_clip=math.inf), dict(weight_decay=-1),
                                 dict(max_minutes=math.inf)])
def test_train_config_rejects_more_bad_values(bad):
    with pytest.raises(ValueError, match="|".join(bad)):
        quiet(**bad)


@pytest.mark.parametrize("log_interval", [1, 4, 100])
def test_deferred_sync_history_equals_synchronous_loop(ids, log_interval):
    """train 每 log_interval 步才取回损失；记录与逐步 .item() 的朴素循环完全一样，权重也一样。"""
    cfg = quiet(max_steps=7, eval_interval=5, log_interval=log_interval)
    model = tiny_model()
    h = train(model, ids, ids, cfg)
    ref = tiny_model()
    opt = make_optimizer(ref, cfg.lr, cfg.weight_decay, cfg.betas)
    rows = []
    for s in range(cfg.max_steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(s, cfg.lr, cfg.warmup_steps, cfg.max_steps, cfg.min_lr_ratio)
        batch = get_batch(ids, cfg.batch_size, 16, generator=batch_generator(cfg.seed, s))
        rows.append(train_step(ref, opt, [batch], cfg.grad_clip))
    assert [(r["loss"], r["grad_norm"]) for r in h.steps] == rows          # 逐位相同
    assert [e["step"] for e in h.evals] == [5, 7]
    for a, b in zip(model.state_dict().values(), ref.state_dict().values()):
        assert torch.equal(a, b)


def test_divergence_raises_with_history(ids):
    with pytest.raises(TrainingDiverged, match="发散.*调低 lr") as e:
        train(tiny_model(), ids, ids, quiet(lr=1e30, warmup_steps=0, max_steps=50,
                                            eval_interval=100, log_interval=5))
    err = e.value
    assert err.step <= 5 and not math.isfinite(err.loss)
    assert [r["step"] for r in err.history.steps] == list(range(1, err.step + 1))
    assert err.history.evals == []                                     # 发散之后不再评估


# ------------------------------------------------------------------ bf16：按能力决定；两种做法
def test_bf16_auto_decides_from_cpu_flags_not_timing(ids, monkeypatch):
    monkeypatch.setattr(precision, "cpu_info", lambda: ("X", frozenset({"avx2", "amx_bf16"})))
    assert precision.bf16_decision("cpu") == (True, "CPU 有 amx_bf16 指令")
    monkeypatch.setattr(precision, "cpu_info", lambda: ("X", frozenset({"avx2", "avx512f"})))
    ok, why = precision.bf16_decision("cpu")
    assert ok is False and "没有 avx512_bf16" in why
    assert precision.resolve_bf16(True, "cpu") == (True, "手动打开")
    runs, hs = [], []
    for _ in range(2):                                                # 同一条命令跑两次
        runs.append(tiny_model())                                     # （也重设了 dropout 的种子）
        hs.append(train(runs[-1], ids, ids, quiet(bf16="auto")))
    assert hs[0].info == hs[1].info and hs[0].info["bf16"] is False
    for a, b in zip(runs[0].state_dict().values(), runs[1].state_dict().values()):
        assert torch.equal(a, b)                                      # 权重逐位相同


@pytest.mark.parametrize("mode", ["autocast", "weights"])
def test_bf16_modes_learn_close_to_fp32(ids, mode):
    kw = dict(max_steps=12, lr=1e-2, eval_interval=12)
    h32 = train(tiny_model(), ids, ids, quiet(**kw))
    model = tiny_model()
    h16 = train(model, ids, ids, quiet(**kw, bf16=True, bf16_mode=mode))
    assert h16.info == {"bf16": True, "bf16_reason": "手动打开", "bf16_mode": mode,
                        "compiled": "未编译"}
    l32, l16 = [r["loss"] for r in h32.steps], [r["loss"] for r in h16.steps]
    assert l16 != l32 and abs(l16[0] - l32[0]) < 0.02
    assert l16[-1] < l16[0] - 0.3 and abs(l16[-1] - l32[-1]) < 0.15
    assert all(p.dtype == torch.float32 for p in model.parameters())   # 主权重仍是 fp32


def test_bf16_weights_keeps_fp32_master_and_bf16_copy():
    model = tiny_model()
    shadow = precision.Bf16Weights(model)
    assert all(q.dtype == torch.bfloat16 for q in shadow.low.parameters())
    assert shadow.low.lm_head.weight is shadow.low.tok_emb.weight     # 共享权重仍共享
    with torch.no_grad():
        model.tok_emb.weight.add_(1.0)
    shadow.master_to_low()
    torch.testing.assert_close(shadow.low.tok_emb.weight.float(), model.tok_emb.weight,
                               atol=0.02, rtol=0.01)


# ------------------------------------------------------------------ torch.compile 的退路
def test_compile_failure_falls_back_to_eager(ids, monkeypatch, capsys):
    class Broken(torch.nn.Module):
        def forward(self, *a):
            raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(torch, "compile", lambda m: Broken())
    h_eager = train(tiny_model(), ids, ids, quiet())
    h = train(tiny_model(), ids, ids, quiet(compile=True))
    assert "第一步失败" in h.info["compiled"] and "no C++ compiler" in h.info["compiled"]
    assert "改用普通模式" in capsys.readouterr().err
    assert [r["loss"] for r in h.steps] == [r["loss"] for r in h_eager.steps]

    def refuse(m):
        raise RuntimeError("dynamo unsupported")

    monkeypatch.setattr(torch, "compile", refuse)
    h = train(tiny_model(), ids, ids, quiet(compile=True))
    assert h.info["compiled"].startswith("torch.compile 不可用")
    assert [r["loss"] for r in h.steps] == [r["loss"] for r in h_eager.steps]


# ------------------------------------------------------------------ 基准（只看结构，不看数值）
def test_training_bench_quick_has_reference_ratio_and_ceilings(capsys):
    from gptcourse_kit.bench import training as bench

    r = bench.run(quick=True, vocab_size=64)
    out = capsys.readouterr().out
    assert [row["case"] for row in r["training"]] == ["参照", "train · 普通模式"]
    ref, mine = r["training"]
    assert ref["ratio"] == 1.0 and mine["ratio"] == pytest.approx(
        mine["tokens_per_s"] / ref["tokens_per_s"])
    assert mine["gflops"] == pytest.approx(6 * r["model"]["params"] * mine["tokens_per_s"] / 1e9)
    assert set(r["matmul_ceiling"]) == {"fp32", "bf16"}
    assert "参照" in out and "÷参照" in out and "bf16 相关指令" in out


def test_cli_divergence_before_any_eval_says_nothing_was_written(tmp_path, capsys):
    out = tmp_path / "x.pt"
    argv = ["train", "--corpus", "tang_5jue", "--preset", "mini", "--batch-size", "2",
            "--block-size", "16", "--no-bf16", "--no-progress", "--lr", "1e30", "--warmup", "0",
            "--steps", "30", "--eval-interval", "100", "--out", str(out)]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "发散" in err and "没有写出检查点" in err and "找不到" not in err
    assert not list(tmp_path.iterdir())


def test_cli_divergence_after_an_eval_keeps_the_best_checkpoint(tmp_path, capsys, monkeypatch):
    from gptcourse.cli import train as train_cli

    real = train_cli.train

    def diverging(model, *a, **kw):                 # 正常训练 2 步（评估一次），然后"发散"
        h = real(model, *a, **kw)
        raise TrainingDiverged(3, math.nan, 1e-3, h)

    monkeypatch.setattr(train_cli, "train", diverging)
    out = tmp_path / "x.pt"
    argv = ["train", "--corpus", "tang_5jue", "--preset", "mini", "--batch-size", "2",
            "--block-size", "16", "--no-bf16", "--no-progress", "--steps", "2", "--out", str(out)]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "第 3 步发散" in err and "已把发散之前验证损失最好的检查点写到" in err
    model, _, meta = checkpoint.load(out)
    assert meta["diverged_at_step"] == 3 and meta["step"] == 2


def test_muon_takes_the_block_matrices_and_adamw_the_rest():
    """--optimizer muon：各层的二维权重进 Muon；共享的嵌入 / 输出头、归一化的 γ 进 AdamW；
    每个参数只出现一次，辅助头加在 AdamW 里。"""
    model = tiny_model()
    opt = make_optimizer(model, 1e-3, kind="muon")
    muon = {id(p) for g in opt.muon.param_groups for p in g["params"]}
    adamw = {id(p) for g in opt.adamw.param_groups for p in g["params"]}
    assert not muon & adamw and muon | adamw == {id(p) for p in model.parameters()}
    assert id(model.tok_emb.weight) in adamw
    assert all(p.dim() == 2 for p in opt.muon.param_groups[0]["params"])
    assert all(p.dim() < 2 for p in opt.adamw.param_groups[1]["params"])
    head = torch.nn.Linear(4, 2)
    opt.add_param_group({"params": list(head.parameters())})
    assert len(opt.param_groups) == 4 and opt.param_groups[-1]["params"][0] is head.weight
    with pytest.raises(UserError, match="optimizer"):
        TrainConfig(optimizer="sgd")


# ---------------------------------------------------------------- 坏输入与一行说明
# 机器放不下的批次在分配之前拒绝；多行的编译错误只说一行。
def test_batch_that_the_machine_cannot_hold_is_refused(monkeypatch):
    cfg = preset("course", vocab_size=6606)
    monkeypatch.setattr(T, "available_memory", lambda device: 2**30)      # 1 GiB 可用
    big = T.TrainConfig(batch_size=4096, max_steps=1)
    with pytest.raises(UserError, match=r"批次太大：batch_size=4096、grad_accum=1 每步估计要 "
                                        r"[\d.]+ GiB 内存，这台机器现在可用 1.0 GiB；"
                                        r"batch_size 最多约 \d+"):
        T.check_memory(big, cfg, torch.device("cpu"))
    T.check_memory(T.TrainConfig(batch_size=8, max_steps=1), cfg, torch.device("cpu"))
    # 估计的上限本身放得下
    err = pytest.raises(UserError, T.check_memory, big, cfg, torch.device("cpu")).value
    limit = int(str(err).rsplit("最多约 ", 1)[1].split("（")[0])
    T.check_memory(T.TrainConfig(batch_size=limit, max_steps=1), cfg, torch.device("cpu"))


def test_a_multi_line_compile_failure_is_reported_in_one_line(tiny_corpus_text, monkeypatch,
                                                              capsys):
    from gptcourse.train import TrainConfig, train

    class Broken(torch.nn.Module):
        def forward(self, *a):
            raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found in cxx:\n"
                               "  g++\n\nSet TORCHDYNAMO_VERBOSE=1 for the internal stack trace")
    monkeypatch.setattr(torch, "compile", lambda m: Broken())
    t = CharTokenizer.from_text(tiny_corpus_text)
    ids = torch.tensor(t.encode(tiny_corpus_text * 4), dtype=torch.long)
    torch.manual_seed(0)
    m = GPT(preset("mini", vocab_size=t.vocab_size, block_size=16, n_layer=1, n_head=2, n_embd=16))
    h = train(m, ids, ids, TrainConfig(batch_size=4, max_steps=2, eval_interval=2, eval_batches=1,
                                       bf16=False, progress=False, compile=True))
    assert "\n" not in h.info["compiled"] and "found in cxx: g++ Set TORCHDYNAMO" in \
        h.info["compiled"]
    err = [line for line in capsys.readouterr().err.splitlines() if "第一步失败" in line]
    assert len(err) == 1 and err[0].endswith("改用普通模式"), err
