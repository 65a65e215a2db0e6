"""笔记本 03（训练循环）的练习检查器。

用法与前两章相同：``gc.check.lr_schedule(你的函数)`` 打印"正确 ✓"或一句说明哪里不对的中文，
并返回 True / False。参考答案是本文件里的 ``solution_*`` 函数，登记在共用的 ``SOLUTIONS``
表里，``gc.check.show_solution("train_step")`` 打印它的源代码。
"""
from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F

from ..config import preset
from ..model import GPT
from .nb01 import SOLUTIONS, _call, _fail, _ok  # 各笔记本共用的参考答案登记表

__all__ = ["cross_entropy", "perplexity", "lr_schedule", "param_groups", "train_step",
           "accumulate_grads"]

EXERCISES = ("cross_entropy", "perplexity", "lr_schedule", "param_groups", "train_step",
             "accumulate_grads")


def _tiny_model(seed: int = 0, **kw) -> GPT:
    torch.manual_seed(seed)
    cfg = dict(vocab_size=30, block_size=8, n_layer=1, n_head=2, n_embd=16, dropout=0.0,
               attn_dropout=0.0, resid_dropout=0.0)
    return GPT(preset("mini", **(cfg | kw)))


def _batch(seed: int, B: int = 4, T: int = 8, V: int = 30):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(V, (B, T), generator=g), torch.randint(V, (B, T), generator=g)


# ---------------------------------------------------------------- 参考答案
def solution_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """logits [N, V]、targets [N] → 平均负对数似然。先减去每行最大值再取 log-sum-exp，防止溢出。"""
    z = logits - logits.max(dim=-1, keepdim=True).values               # [N, V]
    log_probs = z - z.exp().sum(dim=-1, keepdim=True).log()            # log softmax
    return -log_probs[torch.arange(len(targets)), targets].mean()


def solution_perplexity(loss: float) -> float:
    """困惑度 = e^损失：模型平均在"这么多个等可能的字"之间犹豫。"""
    return math.exp(loss)


def solution_lr_schedule(step: int, max_lr: float, warmup: int, total: int,
                         min_lr_ratio: float = 0.1) -> float:
    """线性预热 (step+1)/(warmup+1)·max_lr，之后余弦衰减到 max_lr·min_lr_ratio，再保持不变。"""
    min_lr = max_lr * min_lr_ratio
    if step < warmup:
        return max_lr * (step + 1) / (warmup + 1)
    if step >= total:
        return min_lr
    ratio = (step - warmup) / (total - warmup)                         # 0 → 1
    return min_lr + 0.5 * (1 + math.cos(math.pi * ratio)) * (max_lr - min_lr)


def solution_param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """维度 ≥ 2 的张量做权重衰减，其余（偏置、归一化的 γ/β）不做。"""
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def solution_train_step(model, optimizer, x, y, grad_clip: float = 1.0) -> float:
    """前向 → 损失 → zero_grad(set_to_none) → 反向 → 裁剪 → step；返回损失。"""
    _, loss = model(x, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return loss.item()


def solution_accumulate_grads(model, micro_batches) -> None:
    """对每个微批次做前向和反向，损失除以微批次数 n，梯度累加后等于一个大批次的梯度。"""
    n = len(micro_batches)
    for x, y in micro_batches:
        _, loss = model(x, y)
        (loss / n).backward()


SOLUTIONS.update({name: globals()[f"solution_{name}"] for name in EXERCISES})


# ---------------------------------------------------------------- 检查器
def cross_entropy(fn) -> bool:
    """练习：``fn(logits [N, V], targets [N]) -> 标量张量``，不许调用 F.cross_entropy。"""
    g = torch.Generator().manual_seed(0)
    cases = [(torch.tensor([[2.0, 1.0, 0.0]]), torch.tensor([0])),
             (torch.tensor([[2.0, 1.0, 0.0]]), torch.tensor([2])),
             (torch.randn(6, 11, generator=g), torch.randint(11, (6,), generator=g)),
             (torch.tensor([[1000.0, 999.0, 0.0], [-1000.0, 0.0, 5.0]]), torch.tensor([1, 0]))]
    for logits, targets in cases:
        got, err = _call(fn, logits.clone(), targets.clone())
        if err:
            return _fail(err)
        want = F.cross_entropy(logits, targets)
        got = torch.as_tensor(got, dtype=torch.float32)
        if got.numel() != 1:
            return _fail(f"应返回一个标量（所有位置的平均），收到形状 {tuple(got.shape)}")
        if not torch.isfinite(got):
            return _fail(f"logits 很大（{logits.max().item():g}）时得到 {got.item()}："
                         "先减去每行的最大值再求 exp")
        if not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
            p_target = logits.softmax(-1)[torch.arange(len(targets)), targets]
            if torch.allclose(got.abs(), p_target.mean(), rtol=1e-4):
                return _fail("看起来你返回的是目标概率的平均，别忘了取对数再加负号")
            return _fail(f"logits={logits.tolist()}，targets={targets.tolist()}：\n"
                         f"  你的结果 {got.item():.6f}，F.cross_entropy 是 {want.item():.6f}")
    return _ok()


def perplexity(fn) -> bool:
    """练习：``fn(平均损失) -> 困惑度``。"""
    for loss in (0.0, 1.0, math.log(123), 2.408, 5.2):
        got, err = _call(fn, loss)
        if err:
            return _fail(err)
        try:
            same = math.isclose(float(got), math.exp(loss), rel_tol=1e-6)
        except (TypeError, ValueError):
            same = False
        if not same:
            return _fail(f"损失 {loss:.4f} 时你的结果是 {got!r}，"
                         f"应是 e^损失 = {math.exp(loss):.4f}")
    return _ok()


def lr_schedule(fn) -> bool:
    """练习：``fn(step, max_lr, warmup, total, min_lr_ratio) -> 学习率``。"""
    for max_lr, warmup, total, ratio in ((1e-3, 10, 100, 0.1), (3e-4, 0, 50, 0.0),
                                         (1.0, 5, 6, 0.5)):
        for step in range(total + 5):
            got, err = _call(fn, step, max_lr, warmup, total, ratio)
            if err:
                return _fail(err)
            want = solution_lr_schedule(step, max_lr, warmup, total, ratio)
            try:
                same = math.isclose(float(got), want, rel_tol=1e-6, abs_tol=1e-12)
            except (TypeError, ValueError):
                same = False
            if not same:
                where = "预热阶段" if step < warmup else ("地板" if step >= total else "余弦阶段")
                return _fail(f"step={step}（{where}），max_lr={max_lr}, warmup={warmup}, "
                             f"total={total}, min_lr_ratio={ratio}：你的结果 {got!r}，"
                             f"期望 {want:.6g}")
    return _ok()


def param_groups(fn) -> bool:
    """练习：``fn(model, weight_decay) -> [衰减组, 不衰减组]``。

    每组是 {"params": [...], "weight_decay": ...}。"""
    for model in (_tiny_model(), GPT(preset("teacher", vocab_size=30, block_size=8, n_layer=2,
                                            n_head=2, n_embd=16))):
        names = {id(p): n for n, p in model.named_parameters()}
        got, err = _call(fn, model, 0.1)
        if err:
            return _fail(err)
        try:
            decay, no_decay = got
            got_sets = [{id(p) for p in decay["params"]}, {id(p) for p in no_decay["params"]}]
            wd = (decay["weight_decay"], no_decay["weight_decay"])
        except Exception:  # noqa: BLE001
            return _fail("应返回两个字典组成的列表：[{'params': [...], 'weight_decay': wd}, "
                         "{'params': [...], 'weight_decay': 0.0}]")
        if wd != (0.1, 0.0):
            return _fail(f"两组的 weight_decay 应是 (0.1, 0.0)，收到 {wd}")
        want = solution_param_groups(model, 0.1)
        want_sets = [{id(p) for p in g["params"]} for g in want]
        if sum(len(g["params"]) for g in (decay, no_decay)) != len(got_sets[0] | got_sets[1]):
            return _fail("有参数出现了不止一次（共享的词嵌入/输出头只能放一次）")
        for got_s, want_s, what in zip(got_sets, want_sets, ("衰减组", "不衰减组")):
            if got_s != want_s:
                extra = sorted(names.get(i, "?") for i in got_s - want_s)[:3]
                miss = sorted(names[i] for i in want_s - got_s)[:3]
                return _fail(f"{what}不对：多了 {extra}，少了 {miss}")
    return _ok()


def train_step(fn) -> bool:
    """练习：``fn(model, optimizer, x, y, grad_clip) -> 损失``，按正确顺序做完一步。"""
    ref, mine = _tiny_model(), _tiny_model()
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt_mine = torch.optim.AdamW(mine.parameters(), lr=1e-2)
    for i in range(3):                                                 # 连走三步：忘了清梯度会暴露
        x, y = _batch(i)
        want = solution_train_step(ref, opt_ref, x, y, 0.05)           # 很小的阈值：一定会裁剪
        got, err = _call(fn, mine, opt_mine, x, y, 0.05)
        if err:
            return _fail(err)
        try:
            same_loss = math.isclose(float(got), want, rel_tol=1e-5)
        except (TypeError, ValueError):
            same_loss = False
        if not same_loss:
            return _fail(f"第 {i + 1} 步返回的损失是 {got!r}，应是 {want:.6f}（返回 loss.item()）")
        for (n, p), q in zip(mine.named_parameters(), ref.parameters()):
            if not torch.allclose(p, q, rtol=1e-5, atol=1e-7):
                hint = ("是不是忘了 zero_grad（梯度在步与步之间累加了）？" if i else
                        "检查顺序：裁剪要在 step 之前，且用传入的 grad_clip")
                return _fail(f"第 {i + 1} 步之后参数 {n} 与参考答案不同。{hint}")
    return _ok()


def accumulate_grads(fn) -> bool:
    """练习：``fn(model, micro_batches)`` 只做前向与反向（不 step），梯度应等于大批次的梯度。"""
    x, y = _batch(7, B=8)
    big = _tiny_model()
    big(x, y)[1].backward()
    for n in (2, 4):
        model = copy.deepcopy(_tiny_model())
        size = 8 // n
        micro = [(x[i:i + size], y[i:i + size]) for i in range(0, 8, size)]
        _, err = _call(fn, model, micro)
        if err:
            return _fail(err)
        for (name, p), q in zip(model.named_parameters(), big.parameters()):
            if p.grad is None:
                return _fail(f"{name} 没有梯度：每个微批次都要 backward()")
            if not torch.allclose(p.grad, q.grad, rtol=1e-4, atol=1e-6):
                ratio = (p.grad.norm() / q.grad.norm()).item()
                hint = (f"你的梯度大约是大批次的 {ratio:.2f} 倍——每个微批次的损失要除以 {n}"
                        if abs(ratio - n) < 0.05 else "梯度与大批次不同")
                return _fail(f"{n} 个微批次：{name} 的{hint}")
    return _ok()
