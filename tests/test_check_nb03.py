"""笔记本 03 的练习检查器：教师版的答案单元格通过，典型错误各自得到指向真正错误的中文提示。"""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

import gptcourse as gc
from gptcourse.check import nb03, nb03_loop, nb03_loss
from gptcourse.check._common import RESULTS
from gptcourse.data import get_batch
from gptcourse.optim import lr_at, param_groups
from gptcourse.train import estimate_loss

# 教师版的答案单元格用到的、笔记本前文的名字：学员自己写过的零件，这里换成包里的
LOOP_ENV = {"param_groups": param_groups, "lr_schedule": lr_at, "estimate_loss": estimate_loss}


def test_exported_and_solutions_pass(passes, capsys, monkeypatch, teacher):
    RESULTS.clear()                                                     # 只看这个测试里检查过的
    assert len(nb03.EXERCISES) >= 8 and set(nb03.PREDICTIONS) < set(nb03.EXERCISES)
    for name in nb03.EXERCISES:
        assert getattr(nb03, name).is_exercise, name
        if name not in nb03.PREDICTIONS:
            answer = teacher(f"nb03.{name}", **LOOP_ENV)
            assert passes(getattr(nb03, name), answer)[0], name
    monkeypatch.setenv("GPTCOURSE_SOLUTIONS", "1")             # 老师打开了参考答案
    gc.check.show_solution("train_step")
    assert "zero_grad(set_to_none=True)" in capsys.readouterr().out
    nb03.predict_windows("A", 5.9, 5.5)                                 # 猜错的一题
    assert nb03.report() == len(nb03.EXERCISES) - len(nb03.PREDICTIONS)
    out = capsys.readouterr().out
    assert "✗ predict_windows" in out
    assert f"通过 {len(nb03.EXERCISES) - len(nb03.PREDICTIONS)}/" in out


def test_package_functions_pass_too(passes, capsys):
    assert passes(nb03.lr_schedule, lr_at)[0]                 # 包里的实现与答案一致
    assert passes(nb03.param_groups, param_groups)[0]
    assert passes(nb03.estimate_loss, estimate_loss)[0]
    assert passes(nb03.training_loop,                          # 包里的 train 本身
                  lambda m, d, v, cfg: gc.train.train(m, d, v, cfg))[0]


def test_stub_is_not_done(passes, capsys):
    def stub(*a):
        raise NotImplementedError("请完成练习")

    ok, out = passes(nb03.training_loop, stub)
    assert not ok and "还没完成" in out
    ok, out = passes(nb03.predict_bf16_gap, None, 0.001, 0.2)
    assert not ok and "还没完成" in out


def test_cross_entropy_forbidden_library_call(passes, capsys):
    ok, out = passes(nb03.cross_entropy, F.cross_entropy)         # 直接交 F.cross_entropy
    assert not ok and "不许调用 F.cross_entropy" in out

    def wraps_it(logits, targets):
        return F.cross_entropy(logits, targets)

    ok, out = passes(nb03.cross_entropy, wraps_it)
    assert not ok and "不许调用" in out

    def via_module(logits, targets):
        return torch.nn.CrossEntropyLoss()(logits, targets)

    ok, out = passes(nb03.cross_entropy, via_module)
    assert not ok and "不许调用" in out

    def hidden(logits, targets):                                        # 源码里看不出来，运行时抓住
        fn = getattr(torch.nn.functional, "cross" + "_entropy")
        return fn(logits, targets)

    ok, out = passes(nb03.cross_entropy, hidden)
    assert not ok and "不许调用" in out

    def commented(logits, targets):
        # 不许调用 F.cross_entropy：注释里提到它不算
        return -logits.log_softmax(-1)[torch.arange(len(targets)), targets].mean()

    assert passes(nb03.cross_entropy, commented)[0]


def test_cross_entropy_mistakes(passes, capsys):
    def naive(logits, targets):                                         # 不减最大值：溢出
        p = logits.exp() / logits.exp().sum(-1, keepdim=True)
        return -p[torch.arange(len(targets)), targets].log().mean()

    ok, out = passes(nb03.cross_entropy, naive)
    assert not ok and "最大值" in out
    ok, out = passes(nb03.cross_entropy,
                     lambda l, t: l.softmax(-1)[torch.arange(len(t)), t].mean())
    assert not ok and "取对数" in out
    ok, out = passes(nb03.cross_entropy,                        # 忘了取平均
                     lambda l, t: -l.log_softmax(-1)[torch.arange(len(t)), t])
    assert not ok and "标量" in out
    ok, out = passes(nb03.cross_entropy,                        # 忘了负号
                     lambda l, t: l.log_softmax(-1)[torch.arange(len(t)), t].mean())
    assert not ok and "符号反了" in out


def test_perplexity_and_lr_mistakes(passes, capsys):
    ok, out = passes(nb03.perplexity, lambda loss: 2 ** loss)
    assert not ok and "2 为底" in out

    def warmup_from_zero(s, lr, w, total, r=0.1):                       # 预热从 0 开始：第 0 步不学
        return lr * s / w if s < w else lr_at(s, lr, w, total, r)

    ok, out = passes(nb03.lr_schedule, warmup_from_zero)
    assert not ok and "预热阶段" in out and "(step+1)/(warmup+1)" in out
    ok, out = passes(nb03.lr_schedule,
                     lambda s, lr, w, total, r=0.1: lr_at(s, lr, w, total, 0.0))
    assert not ok and "min_lr_ratio=0.1" in out


def test_param_groups_mistakes(passes, capsys):
    def everything_decayed(model, wd):
        return [{"params": list(model.parameters()), "weight_decay": wd},
                {"params": [], "weight_decay": 0.0}]

    ok, out = passes(nb03.param_groups, everything_decayed)
    assert not ok and "衰减组不对" in out and "bias" in out

    def by_name(model, wd):                                             # 共享权重被放了两次
        named = list(model.named_parameters(remove_duplicate=False))
        return [{"params": [p for n, p in named if p.dim() >= 2], "weight_decay": wd},
                {"params": [p for n, p in named if p.dim() < 2], "weight_decay": 0.0}]

    ok, out = passes(nb03.param_groups, by_name)
    assert not ok and "不止一次" in out


def _step(order):
    def fn(model, opt, x, y, clip):
        _, loss = model(x, y)
        for op in order:
            {"zero": lambda: opt.zero_grad(set_to_none=True), "back": loss.backward,
             "clip": lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), clip),
             "step": opt.step}[op]()
        return loss.item()
    return fn


def test_train_step_mistakes(passes, capsys):
    ok, out = passes(nb03.train_step, _step(["back", "clip", "step"]))
    assert not ok and "zero_grad" in out and "第 2 步" in out
    ok, out = passes(nb03.train_step, _step(["zero", "back", "step", "clip"]))
    assert not ok and "没有被裁剪" in out
    ok, out = passes(nb03.train_step, _step(["zero", "back", "step"]))
    assert not ok and "没有被裁剪" in out
    ok, out = passes(nb03.train_step, _step(["back", "zero", "clip", "step"]))
    assert not ok and "zero_grad 放在了 backward 之后" in out
    assert passes(nb03.train_step, _step(["zero", "back", "clip", "step"]))[0]


def test_accumulate_mistakes(passes, capsys):
    def no_division(model, micro):
        for x, y in micro:
            model(x, y)[1].backward()

    ok, out = passes(nb03.accumulate_grads, no_division)
    assert not ok and "除以 2" in out
    ok, out = passes(nb03.accumulate_grads, lambda m, micro: None)
    assert not ok and "没有梯度" in out

    def zeroing_each_time(model, micro):
        for x, y in micro:
            model.zero_grad()
            (model(x, y)[1] / len(micro)).backward()

    ok, out = passes(nb03.accumulate_grads, zeroing_each_time)
    assert not ok and "最后一个微批次" in out


def test_estimate_loss_mistakes(passes, capsys):
    def no_eval(model, splits, B, T, n, seed=1234):
        with torch.no_grad():
            out = {}
            for k, d in splits.items():
                g = torch.Generator().manual_seed(seed)
                out[k] = sum(model(*get_batch(d, B, T, generator=g))[1].item()
                             for _ in range(n)) / n
            return out

    ok, out = passes(nb03.estimate_loss, no_eval)
    assert not ok and "model.eval()" in out

    def no_grad_missing(model, splits, B, T, n, seed=1234):
        was = model.training
        model.eval()
        out = {}
        for k, d in splits.items():
            g = torch.Generator().manual_seed(seed)
            out[k] = sum(model(*get_batch(d, B, T, generator=g))[1].item() for _ in range(n)) / n
        model.train(was)
        return out

    ok, out = passes(nb03.estimate_loss, no_grad_missing)
    assert not ok and "no_grad" in out

    @torch.no_grad()
    def always_train_after(model, splits, B, T, n, seed=1234):
        out = estimate_loss(model, splits, B, T, n, seed)
        model.train()
        return out

    ok, out = passes(nb03.estimate_loss, always_train_after)
    assert not ok and "原来的" in out

    @torch.no_grad()
    def one_generator(model, splits, B, T, n, seed=1234):
        was = model.training
        model.eval()
        g = torch.Generator().manual_seed(seed)                        # 两个划分共用一个生成器
        out = {k: sum(model(*get_batch(d, B, T, generator=g))[1].item() for _ in range(n)) / n
               for k, d in splits.items()}
        model.train(was)
        return out

    ok, out = passes(nb03.estimate_loss, one_generator)
    assert not ok and "manual_seed(seed)" in out and "'val'" in out


def test_training_loop_mistakes(passes, capsys, teacher):
    sol = teacher("nb03.training_loop", **LOOP_ENV)
    assert passes(nb03.training_loop, sol)[0]
    ok, out = passes(nb03.training_loop,               # 批次不由 (seed, step) 决定
                     lambda m, d, v, cfg: sol(m, d, v, replace(cfg, seed=cfg.seed + 1)))
    assert not ok and "第 1 步的损失就不同" in out
    hints = {"constant_lr": "按日程设置", "lr_off_by_one": "错开了一步", "no_clip": "没有裁剪",
             "all_decayed": "没有分组", "default_betas": "betas",
             "default_weight_decay": "cfg.weight_decay", "default_min_lr": "cfg.min_lr_ratio"}
    loop = nb03_loop._mistake_loop
    for mistake, hint in hints.items():
        ok, out = passes(nb03.training_loop,
                         lambda m, d, v, cfg, k=mistake: (loop(m, d, v, cfg, k), []))
        assert not ok and hint in out, (mistake, out)

    def no_last_eval(m, d, v, cfg):
        losses, evals = sol(m, d, v, cfg)
        return losses, evals[:-1]

    def steps_from_0(m, d, v, cfg):
        losses, evals = sol(m, d, v, cfg)
        return losses, [dict(e, step=e["step"] - 1) for e in evals]

    for wrong, hint in ((no_last_eval, "最后一步也要评估"), (steps_from_0, "步数从 1 数")):
        ok, out = passes(nb03.training_loop, wrong)
        assert not ok and hint in out
    ok, out = passes(nb03.training_loop, lambda m, d, v, cfg: [1.0, 2.0])
    assert not ok and "(losses, evals)" in out


def _naive_eval(model, splits, batch_size, block_size, n_batches, seed=1234):
    """评估时既不 eval() 也不 no_grad()：dropout 开着，还多消耗随机数。"""
    out = {}
    for name, data in splits.items():
        g = torch.Generator().manual_seed(seed)
        out[name] = sum(model(*get_batch(data, batch_size, block_size, generator=g))[1].item()
                        for _ in range(n_batches)) / n_batches
    return out


def _eval_without_train(model, splits, batch_size, block_size, n_batches, seed=1234):
    """评估时 eval() 了，却忘了切回 train：之后的训练步都没有 dropout。"""
    model.eval()
    with torch.no_grad():
        return _naive_eval(model, splits, batch_size, block_size, n_batches, seed)


def test_training_loop_catches_evaluation_mode_mistakes(passes, capsys, teacher):
    """评审里被当成正确的错答案：评估在 train 模式、记录梯度（dropout > 0 的检查模型才看得出）。"""
    for wrong_eval, hint in ((_naive_eval, "评估也在 train 模式、记录梯度"),
                             (_eval_without_train, "model.train() 切回来")):
        loop = teacher("nb03.training_loop", **(LOOP_ENV | {"estimate_loss": wrong_eval}))
        ok, out = passes(nb03.training_loop, loop)
        assert not ok and hint in out, out
    assert passes(nb03.training_loop, teacher("nb03.training_loop", **LOOP_ENV))[0]


def test_compare_loops_explains_which_step_diverged(capsys, teacher):
    """第 10 节的证明：不一致时说出是哪一步、为什么，而不是一个 assert_close 的 traceback。"""
    data, val = nb03_loss._ids(11, 400), nb03_loss._ids(12, 200)
    cfg = gc.train.TrainConfig(**nb03_loop._LOOP_CFG)
    runs = {}
    for who, est in (("ok", estimate_loss), ("naive", _naive_eval)):
        m = nb03_loss._tiny_model(seed=5, **nb03_loop._LOOP_DROPOUT)
        loop = teacher("nb03.training_loop", **(LOOP_ENV | {"estimate_loss": est}))
        runs[who] = (m, loop(m, data, val, cfg))
    pkg = nb03_loss._tiny_model(seed=5, **nb03_loop._LOOP_DROPOUT)
    hist = gc.train.train(pkg, data, val, cfg)
    m, (losses, evals) = runs["ok"]
    assert nb03.compare_loops(losses, evals, m, hist, pkg) is True
    assert "全部一致" in capsys.readouterr().out
    m, (losses, evals) = runs["naive"]
    assert nb03.compare_loops(losses, evals, m, hist, pkg) is False
    out = capsys.readouterr().out
    assert "第 1 次评估" in out and "dropout" in out and "Traceback" not in out


def test_early_stopping_mistakes(passes, capsys):
    def global_min(evals, patience):                                    # 看了停下之后的评估
        best = min(evals, key=lambda e: e["val"])["step"]
        return best, nb03.solution_early_stopping(evals, patience)[1]

    ok, out = passes(nb03.early_stopping, global_min)
    assert not ok and "停下之后" in out

    def ties_count(evals, patience):                         # 持平也算进步：后来的略低一点
        return nb03.solution_early_stopping([dict(e, val=e["val"] - 1e-9 * i)
                                             for i, e in enumerate(evals)], patience)

    ok, out = passes(nb03.early_stopping, ties_count)
    assert not ok and "严格更低" in out

    def indices(evals, patience):
        b, s = nb03.solution_early_stopping(evals, patience)
        steps = [e["step"] for e in evals]
        return steps.index(b), steps.index(s)

    ok, out = passes(nb03.early_stopping, indices)
    assert not ok and "下标" in out


def test_predictions(passes, capsys, monkeypatch):
    monkeypatch.setenv("GPTCOURSE_QUICK", "0")                       # 完整模式：按这次量到的判
    assert passes(nb03.predict_init_loss, "c", 8.80, 6436)[0]
    ok, out = passes(nb03.predict_init_loss, "D", 8.80, 6436)
    assert not ok and "ln 6436" in out
    ok, out = passes(nb03.predict_init_loss, "E", 8.80, 6436)
    assert not ok and "A、B、C、D" in out
    assert passes(nb03.predict_title_loss, "C", 10.8, 5.46)[0]
    ok, out = passes(nb03.predict_title_loss, "B", 10.8, 5.46)
    assert not ok and "实验给出的是" not in out and "+5.34" in out
    assert passes(nb03.predict_title_loss, "B", 5.9, 5.46)[0]           # 答案随测量而定
    assert passes(nb03.predict_bf16_gap, "C", 0.0004, 0.25)[0]
    assert not passes(nb03.predict_bf16_gap, "A", 0.0004, 0.25)[0]
    assert passes(nb03.predict_bf16_gap, "A", 0.3, 0.25)[0]   # 答案随测量而定
    u = {"evals": [{"val": 6.5}, {"val": 6.0}, {"val": 6.6}]}
    assert passes(nb03.predict_overfit, "B", u)[0]
    ok, out = passes(nb03.predict_overfit, "A", u)
    assert not ok and "最后是 6.60" in out and "先降后升" not in out     # 测量，不是答案
    falling = {"evals": [{"val": 6.5}, {"val": 6.0}, {"val": 5.9}]}    # 训练太短，还没回升
    ok, out = passes(nb03.predict_overfit, "B", falling)          # 按这次量到的判，不是写死的 B
    assert not ok and "A（一直下降）" not in out and "很短" in out
    assert passes(nb03.predict_overfit, "A", falling)[0]
    assert passes(nb03.predict_windows, "B", 5.9, 5.5)[0]
    assert not passes(nb03.predict_windows, "A", 5.9, 5.5)[0]
    ok, out = passes(nb03.predict_windows, "b", 5.5, 5.51)       # 差 < 0.02：量到的是 C
    assert not ok and "实验给出的是" not in out and "很短" in out
    assert passes(nb03.predict_windows, "C", 5.5, 5.51)[0]
    assert passes(nb03.predict_windows, "A", 5.4, 5.5)[0]
    monkeypatch.setenv("GPTCOURSE_QUICK", "1")     # 快速模式量不出现象：按完整模式的结果（B）判
    ok, out = passes(nb03.predict_overfit, "B", falling)
    assert ok and "完整模式" in out
    assert not passes(nb03.predict_overfit, "A", falling)[0]
    assert passes(nb03.predict_windows, "B", 5.5, 5.51)[0]


def _titled_keeping_marks(pairs, tok):
    """典型错误：只把题目里的字记成 −1，书名号《》上还在算损失。"""
    ids, targets = [tok.eos_id], [-1]
    for title, body in pairs:
        head, tail = tok.encode("《" + title + "》"), tok.encode(body) + [tok.eos_id]
        ids += head + tail
        targets += [head[0]] + [-1] * (len(head) - 2) + [head[-1]] + tail
    return torch.tensor(ids), torch.tensor(targets)


def test_title_targets_mistakes(passes, capsys):
    assert passes(nb03.title_targets, gc.titled.encode)[0]           # 包里的实现也通过
    ok, out = passes(nb03.title_targets, _titled_keeping_marks)
    assert not ok and "书名号《》上还在算损失" in out

    def no_mask(pairs, tok):
        ids, _ = gc.titled.encode(pairs, tok)
        return ids, ids.clone()

    ok, out = passes(nb03.title_targets, no_mask)
    assert not ok and "在题目里，目标应是 −1" in out

    def masks_eos(pairs, tok):
        ids, y = gc.titled.encode(pairs, tok)
        y[ids == tok.eos_id] = -1
        return ids, y

    ok, out = passes(nb03.title_targets, masks_eos)
    assert not ok and "诗末的换行" in out

    def no_brackets(pairs, tok):
        return gc.titled.encode([(t, b) for t, b in pairs], tok)[0][1:], None

    ok, out = passes(nb03.title_targets, no_brackets)
    assert not ok


def test_titled_step_mistakes(passes, capsys, teacher):
    step_ = teacher("nb03.titled_step", lr_schedule=lr_at)

    def ignores_targets(model, opt, ids, targets, cfg, step):
        return step_(model, opt, ids, ids, cfg, step)

    ok, out = passes(nb03.titled_step, ignores_targets)
    assert not ok and "算进了题目的位置" in out

    def constant_lr(model, opt, ids, targets, cfg, step):
        x, y = get_batch(ids, cfg.batch_size, model.config.block_size,
                         generator=gc.train.batch_generator(cfg.seed, step), targets=targets)
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        return loss.item()

    ok, out = passes(nb03.titled_step, constant_lr)
    assert not ok and "第 2 步开始不一致" in out and "lr_schedule" in out


# ---------------------------------------------------------------- 12.1 辅助目标
def _learner_rhyme_targets(ids, tok, before=False, odd=False, ze=False, anyform=False, zero=False,
                           gap=1):
    """学员会写的样子：逐首诗走一遍，带上可以打开的典型错误。"""
    out = torch.full((len(ids),), 0 if zero else -1)
    offset = 0
    for poem in tok.decode(ids.tolist()).split("\n"):
        r = gc.verse.check_rhyme(poem)
        ok_form = anyform or gc.verse.is_valid_form(poem)
        if poem and ok_form and (r.rhymes or ze):
            ends = [b - 1 for _, b, _ in gc.verse.line_spans(poem)]
            positions = ends if odd else (r.positions if r.rhymes else ends[1::2])
            g = gc.objectives.PING_GROUPS.index(r.group) if r.group else 0
            for i in positions:
                out[offset + i - before] = g
        offset += len(poem) + gap
    return out


def test_rhyme_targets_mistakes(passes, capsys):
    assert passes(nb03.rhyme_targets, _learner_rhyme_targets)[0]
    for kw, hint in [({"before": True}, "前一个位置"), ({"odd": True}, "单数句的末字"),
                     ({"ze": True}, "仄韵的《春晓》"), ({"anyform": True}, "is_valid_form"),
                     ({"zero": True}, "应记 −1"), ({"gap": 0}, "换行符")]:
        ok, out = passes(nb03.rhyme_targets, lambda i, t, kw=kw: _learner_rhyme_targets(i, t, **kw))
        assert not ok and hint in out, (kw, out)
    ok, out = passes(nb03.rhyme_targets, lambda i, t: _learner_rhyme_targets(i, t)[:-1])
    assert not ok and "长度应与 ids 相同" in out


def test_aux_loss_mistakes(passes, capsys):
    def learner(head, hidden, targets):
        logits = head(hidden)
        keep = targets >= 0
        if not keep.any():
            return logits.sum() * 0
        return F.cross_entropy(logits[keep], targets[keep])

    assert passes(nb03.aux_loss, learner)[0]
    mistakes = {
        "全部": lambda h, x, t: F.cross_entropy(h(x).flatten(0, 1), t.flatten(), ignore_index=-1,
                                              reduction="sum") / t.numel(),
        "softmax": lambda h, x, t: F.cross_entropy(h(x).softmax(-1).flatten(0, 1), t.flatten(),
                                                   ignore_index=-1),
        "分母至少取 1": lambda h, x, t: F.cross_entropy(h(x).flatten(0, 1), t.flatten(),
                                                     ignore_index=-1),   # 空时 NaN
        "不算": lambda h, x, t: F.cross_entropy(h(x).flatten(0, 1), t.flatten()),
        "不要 .item()": lambda h, x, t: torch.tensor(learner(h, x, t).item()),
    }
    for hint, fn in mistakes.items():
        ok, out = passes(nb03.aux_loss, fn)
        assert not ok and hint in out, (hint, out)


# -------------------------------------------------- 审阅 2026-12-04（03–05）里漏过的错误答案
def _masked_ce(logits, targets):
    keep = targets >= 0
    return F.cross_entropy(logits[keep], targets[keep]) if keep.any() else logits.sum() * 0


@pytest.mark.parametrize("fn, hint", [
    (lambda h, x, t: _masked_ce(h(x.detach()), t), "隐藏状态"),              # 主干收不到梯度
    (lambda h, x, t: _masked_ce(h(x).detach().requires_grad_(), t), "都没有梯度"),
    (lambda h, x, t: torch.tensor(_masked_ce(h(x), t).item(), requires_grad=True), "都没有梯度"),
], ids=["hidden_detached", "logits_detached", "rewrapped_item"])
def test_aux_loss_rejects_a_loss_that_sends_no_gradient_to_the_trunk_or_head(passes, fn, hint):
    """审阅 03–05 F3：值都对，但 backward 之后 hidden.grad / head.weight.grad 与包里的不同。"""
    ok, out = passes(nb03.aux_loss, fn)
    assert not ok and hint in out, out


def test_titled_step_rejects_a_hard_coded_clip_and_names_eval_mode(passes, teacher):
    """审阅 03–05 F6 第 2 条（裁剪写死成 1.0）与 F14（步里 model.eval() 得到的提示不对）。"""
    step_ = teacher("nb03.titled_step", lr_schedule=lr_at)

    def clip_one(model, opt, ids, targets, cfg, step):
        return step_(model, opt, ids, targets, replace(cfg, grad_clip=1.0), step)

    def in_eval(model, opt, ids, targets, cfg, step):
        model.eval()
        return step_(model, opt, ids, targets, cfg, step)

    ok, out = passes(nb03.titled_step, clip_one)
    assert not ok and "写死成了 1.0" in out
    ok, out = passes(nb03.titled_step, in_eval)
    assert not ok and "model.eval()" in out and "batch_generator" not in out


def test_early_stopping_rejects_patience_reset_by_the_previous_evaluation(passes):
    """审阅 03–05 F6 第 3 条：[5.0, 5.3, 5.2, 5.4]、patience 2 应得 (25, 75)，不是 (25, 100)。"""
    ok, out = passes(nb03.early_stopping, nb03._vs_previous)
    assert not ok and "(25, 75)" in out and "最好的值" in out


def _accumulate_then(after):
    def accumulate(model, micro):
        for x, y in micro:
            (model(x, y)[1] / len(micro)).backward()
        after(model)
    return accumulate


def _sgd(model):
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad


def _zero_first(model, micro):
    model.zero_grad()
    _accumulate_then(lambda m: None)(model, micro)


@pytest.mark.parametrize("fn, hint", [
    (_zero_first, "不要 zero_grad()"),
    (_accumulate_then(_sgd), "不要 optimizer.step()"),
    (_accumulate_then(lambda m: torch.optim.SGD(m.parameters(), lr=0.1).step()),
     "不要 optimizer.step()"),
], ids=["zero_grad_first", "hand_sgd", "optim_sgd_step"])
def test_accumulate_grads_rejects_clearing_or_stepping(passes, fn, hint):
    """审阅 03–05 F6 第 4、5 条：梯度事先有值（不许清），权重不许变（不许 step）。"""
    assert passes(nb03.accumulate_grads, _accumulate_then(lambda m: None))[0]
    ok, out = passes(nb03.accumulate_grads, fn)
    assert not ok and hint in out, out


def test_rhyme_targets_rejects_each_foot_labelled_with_its_own_group(passes):
    """审阅 03–05 F6 第 1 条：多音字的韵脚（洮）要记整首诗的韵部，不是它自己的第一个平声韵部。"""
    def own_group(ids, tok):
        out = _learner_rhyme_targets(ids, tok)
        for i in (out >= 0).nonzero().flatten().tolist():
            out[i] = gc.objectives.PING_GROUPS.index(gc.verse.ping_groups(tok.itos[int(ids[i])])[0])
        return out

    ok, out = passes(nb03.rhyme_targets, own_group)
    assert not ok and "多音字" in out


def test_rhyme_targets_one_early_names_both_causes(passes):
    """审阅 03–05 F14：漏了开头的换行，与“放在韵脚前一位”得到同样的标签：提示两种都说。"""
    def no_leading_newline(ids, tok):
        return torch.cat([_learner_rhyme_targets(ids[1:], tok), torch.tensor([-1])])

    ok, out = passes(nb03.rhyme_targets, no_leading_newline)
    assert not ok and "开头的换行" in out
