"""笔记本 03 的练习检查器：参考答案通过，典型错误各自得到对应的中文提示。"""
from __future__ import annotations

import math

import torch

import gptcourse as gc
from gptcourse.check import nb03
from gptcourse.train import lr_at, param_groups


def test_exported_and_solutions_pass(passes, capsys):
    for name in nb03.EXERCISES:
        assert passes(getattr(gc.check, name), gc.check.SOLUTIONS[name])[0], name
    gc.check.show_solution("train_step")
    assert "zero_grad(set_to_none=True)" in capsys.readouterr().out


def test_package_functions_pass_too(passes, capsys):
    assert passes(nb03.lr_schedule, lr_at)[0]                 # 包里的实现与答案一致
    assert passes(nb03.param_groups, param_groups)[0]


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


def test_perplexity_and_lr_mistakes(passes, capsys):
    ok, out = passes(nb03.perplexity, lambda loss: 2 ** loss)
    assert not ok and "e^损失" in out
    def warmup_from_zero(s, lr, w, total, r=0.1):                       # 预热从 0 开始：第 0 步不学
        return lr * s / w if s < w else lr_at(s, lr, w, total, r)

    ok, out = passes(nb03.lr_schedule, warmup_from_zero)
    assert not ok and "预热阶段" in out
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


def test_train_step_mistakes(passes, capsys):
    def no_zero_grad(model, opt, x, y, clip):
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        return loss.item()

    ok, out = passes(nb03.train_step, no_zero_grad)
    assert not ok and "zero_grad" in out and "第 2 步" in out

    def clip_after_step(model, opt, x, y, clip):
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        return loss.item()

    ok, out = passes(nb03.train_step, clip_after_step)
    assert not ok and "裁剪要在 step 之前" in out


def test_accumulate_mistakes(passes, capsys):
    def no_division(model, micro):
        for x, y in micro:
            model(x, y)[1].backward()

    ok, out = passes(nb03.accumulate_grads, no_division)
    assert not ok and "除以 2" in out
    ok, out = passes(nb03.accumulate_grads, lambda m, micro: None)
    assert not ok and "没有梯度" in out
    assert math.isclose(nb03.solution_perplexity(math.log(123)), 123)
