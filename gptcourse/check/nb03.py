"""笔记本 03（训练循环）的练习检查器。

用法：``gc.check.nb03.lr_schedule(你的函数)`` 打印"正确 ✓"或一句说明哪里不对的中文，
返回 True / False。参考答案是本文件里的 ``solution_*`` 函数，登记在共用的 ``SOLUTIONS`` 表里，
``gc.check.show_solution("train_step")`` 打印它的源代码。"先猜一猜"的题（``predict_*``）
在实验之后检查：把你的猜测和实验量出来的数一起交给检查器。
"""
from __future__ import annotations

import copy
import inspect
import io
import math
import re
import textwrap
import tokenize
from unittest import mock

import torch
import torch.nn.functional as F

from ..config import preset
from ..data import get_batch
from ..model import GPT
from ..train import TrainConfig, batch_generator, train
from ._common import _call, _fail, _ok, choice, exercise, register, results
from .nb03_aux import aux_loss, rhyme_targets, solution_aux_loss, solution_rhyme_targets  # noqa: F401

EXERCISES = ("cross_entropy", "perplexity", "param_groups", "lr_schedule", "train_step",
             "accumulate_grads", "estimate_loss", "training_loop", "rhyme_targets", "aux_loss",
             "title_targets", "titled_step",
             "early_stopping", "predict_init_loss", "predict_title_loss", "predict_bf16_gap",
             "predict_overfit", "predict_windows")
PREDICTIONS = tuple(n for n in EXERCISES if n.startswith("predict_"))
__all__ = list(EXERCISES)

_ORIGINAL_CE = F.cross_entropy
_FORBIDDEN = re.compile(r"\b(?:F|functional|nn)\s*\.\s*"
                        r"(?:cross_entropy|nll_loss|CrossEntropyLoss|NLLLoss)\b"
                        r"|\b(?:CrossEntropyLoss|NLLLoss|nll_loss)\s*\(")


def _tiny_model(seed: int = 0, **kw) -> GPT:
    torch.manual_seed(seed)
    cfg = dict(vocab_size=30, block_size=8, n_layer=1, n_head=2, n_embd=16, dropout=0.0,
               attn_dropout=0.0, resid_dropout=0.0)
    return GPT(preset("mini", **(cfg | kw)))


def _batch(seed: int, B: int = 4, T: int = 8, V: int = 30):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(V, (B, T), generator=g), torch.randint(V, (B, T), generator=g)


def _ids(seed: int, n: int = 300, V: int = 30) -> torch.Tensor:
    """一条有规律的 id 序列（多数位置是 +1 递增，偶尔跳一下），让小模型学得动。"""
    g = torch.Generator().manual_seed(seed)
    jumps = torch.randint(V, (n,), generator=g) * (torch.rand(n, generator=g) < 0.2)
    return (torch.arange(n) + jumps.cumsum(0)) % V


# ---------------------------------------------------------------- 参考答案
def solution_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """logits [N, V]、targets [N] → 平均负对数似然。先减去每行最大值再取 log-sum-exp，防止溢出。"""
    z = logits - logits.max(dim=-1, keepdim=True).values               # [N, V]
    log_probs = z - z.exp().sum(dim=-1, keepdim=True).log()            # log softmax
    return -log_probs[torch.arange(len(targets)), targets].mean()


def solution_perplexity(loss: float) -> float:
    """困惑度 = e^损失：模型平均在"这么多个等可能的字"之间犹豫。"""
    return math.exp(loss)


def solution_param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """维度 ≥ 2 的张量做权重衰减，其余（偏置、归一化的 γ/β）不做。"""
    params = [p for p in model.parameters() if p.requires_grad]       # 共享的张量只出现一次
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


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


@torch.no_grad()
def solution_estimate_loss(model, splits, batch_size, block_size, n_batches, seed=1234) -> dict:
    """eval 模式、不求梯度；每个划分用同一个种子取 n_batches 个批次求平均；最后恢复原来的模式。"""
    was_training = model.training
    model.eval()
    out = {}
    for name, data in splits.items():
        g = torch.Generator().manual_seed(seed)                        # 每个划分都从同一个种子开始
        losses = [model(*get_batch(data, batch_size, block_size, generator=g))[1].item()
                  for _ in range(n_batches)]
        out[name] = sum(losses) / n_batches
    model.train(was_training)
    return out


def solution_training_loop(model, train_data, val_data, cfg):
    """和 gc.train.train 一样的循环（不含进度条、计时、梯度累积）：返回 (每步损失, 评估记录)。"""
    T = model.config.block_size
    opt = torch.optim.AdamW(solution_param_groups(model, cfg.weight_decay), lr=cfg.lr,
                            betas=cfg.betas)
    losses, evals = [], []
    model.train()
    for step in range(cfg.max_steps):
        lr = solution_lr_schedule(step, cfg.lr, cfg.warmup_steps, cfg.max_steps, cfg.min_lr_ratio)
        for group in opt.param_groups:
            group["lr"] = lr
        gen = batch_generator(cfg.seed, step)                          # 第 step 步的批次
        x, y = get_batch(train_data, cfg.batch_size, T, generator=gen)
        _, loss = model(x, y)                                          # 前向 + 损失
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        losses.append(loss.item())
        if (step + 1) % cfg.eval_interval == 0 or step + 1 == cfg.max_steps:
            est = solution_estimate_loss(model, {"train": train_data, "val": val_data},
                                         cfg.batch_size, T, cfg.eval_batches)
            evals.append({"step": step + 1, **est})
    return losses, evals


def solution_title_targets(pairs, tok) -> tuple[torch.Tensor, torch.Tensor]:
    """[(题目, 正文)] → (ids, targets)：``\\n《题》正文\\n…``；题目连同书名号的位置目标记 −1。"""
    ids, targets = [tok.eos_id], [-1]                 # 开头的换行：之前没有字，不会被当成目标
    for title, body in pairs:
        head = tok.encode("《" + title + "》")         # 条件：给模型看，不要它写
        tail = tok.encode(body) + [tok.eos_id]        # 正文和诗末的换行：要学的东西
        ids += head + tail
        targets += [-1] * len(head) + tail
    return torch.tensor(ids), torch.tensor(targets)


def solution_titled_step(model, optimizer, ids, targets, cfg, step) -> float:
    """以题作诗的一步微调：和 gc.train.train 的第 step 步相同，只是目标取自 targets。"""
    lr = solution_lr_schedule(step, cfg.lr, cfg.warmup_steps, cfg.max_steps, cfg.min_lr_ratio)
    for group in optimizer.param_groups:
        group["lr"] = lr
    gen = batch_generator(cfg.seed, step)
    x, y = get_batch(ids, cfg.batch_size, model.config.block_size, generator=gen,
                     targets=targets)                 # y 里题目的位置是 −1
    _, loss = model(x, y)                             # cross_entropy(ignore_index=−1)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    optimizer.step()
    return loss.item()


def solution_early_stopping(evals: list[dict], patience: int) -> tuple[int, int]:
    """(最好的一步, 停下的一步)：验证损失连续 patience 次评估没有创新低（严格更低）就停。"""
    best_val, best_step, waited = float("inf"), None, 0
    for e in evals:
        if e["val"] < best_val:
            best_val, best_step, waited = e["val"], e["step"], 0
        else:
            waited += 1
            if waited == patience:
                return best_step, e["step"]
    return best_step, evals[-1]["step"]


def solution_predict_init_loss() -> str:
    return "C"      # 大约 ln V：logits 几乎全是 0，softmax 接近均匀


def solution_predict_title_loss() -> str:
    return "C"      # 课程检查点没在训练里见过题目：题目上的损失高得多


def solution_predict_bf16_gap() -> str:
    return "C"      # 比换批次的起伏小 10 倍以上


def solution_predict_overfit() -> str:
    return "B"      # 先降后升（完整模式；检查器按这一次量到的曲线判）


def solution_predict_windows() -> str:
    return "B"      # RoPE 反超（完整模式；检查器按这一次量到的两个损失判）


SOLUTIONS = {name: globals()[f"solution_{name}"] for name in EXERCISES}
register("nb03", {"early_stopping": solution_early_stopping})


# ---------------------------------------------------------------- 检查器：写函数
def _uses_forbidden(fn) -> bool:
    """fn 是不是 F.cross_entropy 本身，或者源代码里调用了它（或 nll_loss / CrossEntropyLoss）。"""
    if fn is _ORIGINAL_CE or getattr(fn, "__module__", "") in ("torch.nn.functional",
                                                               "torch._C._nn"):
        return True
    try:
        src = textwrap.dedent(inspect.getsource(fn))
        tokens = [t.string for t in tokenize.generate_tokens(io.StringIO(src).readline)
                  if t.type not in (tokenize.COMMENT, tokenize.STRING)]   # 注释和字符串不算
    except (OSError, TypeError, tokenize.TokenError, SyntaxError):
        return False
    return bool(_FORBIDDEN.search(" ".join(tokens)))


@exercise
def cross_entropy(fn) -> bool:
    """练习：``fn(logits [N, V], targets [N]) -> 标量张量``，不许调用 F.cross_entropy。"""
    ban = ("这道题要自己写：不许调用 F.cross_entropy、nll_loss 或 nn.CrossEntropyLoss——"
           "用 log-sum-exp 自己算")
    if _uses_forbidden(fn):
        return _fail(ban)
    g = torch.Generator().manual_seed(0)
    cases = [(torch.tensor([[2.0, 1.0, 0.0]]), torch.tensor([0])),
             (torch.tensor([[2.0, 1.0, 0.0]]), torch.tensor([2])),
             (torch.randn(6, 11, generator=g), torch.randint(11, (6,), generator=g)),
             (torch.tensor([[1000.0, 999.0, 0.0], [-1000.0, 0.0, 5.0]]), torch.tensor([1, 0]))]
    called = []

    def spy(*a, **k):                                                  # 调用时照常计算，但记下来
        called.append(True)
        return _ORIGINAL_CE(*a, **k)

    for logits, targets in cases:
        with mock.patch.object(F, "cross_entropy", spy), mock.patch.object(F, "nll_loss", spy):
            got, err = _call(fn, logits.clone(), targets.clone())
        if called:
            return _fail(ban)
        if err:
            return _fail(err)
        want = _ORIGINAL_CE(logits, targets)
        got = torch.as_tensor(got, dtype=torch.float32)
        if got.numel() != 1:
            return _fail(f"应返回一个标量（所有位置的平均），收到形状 {tuple(got.shape)}")
        if not torch.isfinite(got):
            return _fail(f"logits 很大（{logits.max().item():g}）时得到 {got.item()}："
                         "先减去每行的最大值再求 exp")
        if not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
            rows = torch.arange(len(targets))
            p_target = logits.softmax(-1)[rows, targets]
            if torch.allclose(got.abs(), p_target.mean(), rtol=1e-4):
                return _fail("看起来你返回的是目标概率的平均，别忘了取对数再加负号")
            if torch.allclose(got, -want, rtol=1e-4, atol=1e-5):
                return _fail("符号反了：损失是 −ln p（正数），不是 ln p")
            if torch.allclose(got, logits.softmax(-1)[rows, targets].log().neg().sum(), rtol=1e-4):
                return _fail("你返回的是总和，应当是平均（除以位置数 N）")
            return _fail(f"logits={logits.tolist()}，targets={targets.tolist()}：\n"
                         f"  你的结果 {got.item():.6f}，正确结果是 {want.item():.6f}")
    return _ok()


@exercise
def perplexity(fn) -> bool:
    """练习：``fn(平均损失) -> 困惑度``。"""
    for loss in (0.0, 1.0, math.log(123), 2.408, 5.2):
        got, err = _call(fn, loss)
        if err:
            return _fail(err)
        try:
            got = float(got)
        except (TypeError, ValueError):
            return _fail(f"应返回一个数，收到 {got!r}")
        if not math.isclose(got, math.exp(loss), rel_tol=1e-6):
            hint = ""
            if loss and math.isclose(got, 2 ** loss, rel_tol=1e-6):
                hint = "——你用了 2 为底；损失的单位是 nats（自然对数），要用 e 为底"
            elif math.isclose(got, math.log(loss) if loss > 0 else -1, rel_tol=1e-6):
                hint = "——困惑度是 e 的损失次方，不是损失的对数"
            return _fail(f"损失 {loss:.4f} 时你的结果是 {got!r}，"
                         f"应是 e^损失 = {math.exp(loss):.4f}{hint}")
    return _ok()


@exercise
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
        want_sets = [{id(p) for p in g["params"]} for g in solution_param_groups(model, 0.1)]
        if sum(len(g["params"]) for g in (decay, no_decay)) != len(got_sets[0] | got_sets[1]):
            return _fail("有参数出现了不止一次（共享的词嵌入/输出头只能放一次）")
        for got_s, want_s, what in zip(got_sets, want_sets, ("衰减组", "不衰减组")):
            if got_s != want_s:
                extra = sorted(names.get(i, "?") for i in got_s - want_s)[:3]
                miss = sorted(names[i] for i in want_s - got_s)[:3]
                return _fail(f"{what}不对：多了 {extra}，少了 {miss}（按 p.dim() ≥ 2 分组）")
    return _ok()


@exercise
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
                hint = {"预热阶段": "预热是 max_lr·(step+1)/(warmup+1)：第 0 步就要有一点学习率",
                        "地板": "step ≥ total 之后停在 max_lr·min_lr_ratio",
                        "余弦阶段": "进度 r = (step−warmup)/(total−warmup)，"
                                    "lr = min_lr + ½(1+cos πr)(max_lr−min_lr)"}[where]
                return _fail(f"step={step}（{where}），max_lr={max_lr}, warmup={warmup}, "
                             f"total={total}, min_lr_ratio={ratio}：你的结果 {got!r}，"
                             f"期望 {want:.6g}。{hint}")
    return _ok()


def _params_equal(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.allclose(p, q, rtol=1e-5, atol=1e-7)
               for p, q in zip(a.parameters(), b.parameters()))


@exercise
def train_step(fn) -> bool:
    """练习：``fn(model, optimizer, x, y, grad_clip) -> 损失``，按正确顺序做完一步。"""
    ref, mine = _tiny_model(), _tiny_model()
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt_mine = torch.optim.AdamW(mine.parameters(), lr=1e-2)
    for i in range(3):                                                 # 连走三步：忘了清梯度会暴露
        x, y = _batch(i)
        before = copy.deepcopy(mine)
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
        if _params_equal(mine, ref):
            continue
        grads = [p.grad for p in mine.parameters()]
        if _params_equal(mine, before) or all(g is None or not g.any() for g in grads):
            return _fail(f"第 {i + 1} 步之后参数根本没动：是不是把 zero_grad 放在了 backward 之后"
                         "（刚算出的梯度被清掉了），或者忘了 optimizer.step()？")
        if i == 0:                                                     # 第一步就不同：裁剪的问题
            unclipped = _tiny_model()
            o = torch.optim.AdamW(unclipped.parameters(), lr=1e-2)
            _, loss = unclipped(x, y)
            loss.backward()
            o.step()
            if _params_equal(mine, unclipped):
                return _fail("第 1 步的更新没有被裁剪：backward 之后、step 之前调用 "
                             "torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)")
            return _fail("第 1 步之后参数与参考答案不同：裁剪要在 backward 之后、step 之前，"
                         "而且用传入的 grad_clip")
        return _fail(f"第 {i + 1} 步之后参数与参考答案不同（第 1 步还是对的）：是不是忘了 "
                     "optimizer.zero_grad(set_to_none=True)？梯度在步与步之间累加了")
    return _ok()


@exercise
def accumulate_grads(fn) -> bool:
    """练习：``fn(model, micro_batches)`` 只做前向与反向（不 step），梯度应等于大批次的梯度。"""
    x, y = _batch(7, B=8)
    big = _tiny_model()
    big(x, y)[1].backward()
    for n in (2, 4):
        model = _tiny_model()
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
                only_last = _tiny_model()
                (only_last(*micro[-1])[1] / n).backward()
                last_grad = dict(only_last.named_parameters())[name].grad
                if abs(ratio - n) < 0.05:
                    hint = f"大约是大批次的 {ratio:.2f} 倍——每个微批次的损失要除以 {n}"
                elif torch.allclose(p.grad, last_grad, rtol=1e-4, atol=1e-6):
                    hint = ("只剩最后一个微批次的：中途不要清梯度，"
                            "让 backward 把各微批次的梯度累加起来")
                else:
                    hint = "与大批次不同"
                return _fail(f"{n} 个微批次：{name} 的梯度{hint}")
    return _ok()


@exercise
def estimate_loss(fn) -> bool:
    """练习：``fn(model, splits, batch_size, block_size, n_batches, seed)`` → {划分名: 损失}。"""
    splits = {"train": _ids(1), "val": _ids(2)}
    seen = []
    for start_training in (True, False):
        model = _tiny_model(dropout=0.3, attn_dropout=0.3, resid_dropout=0.3)
        model.train(start_training)
        hook = model.register_forward_pre_hook(
            lambda m, a: seen.append((m.training, torch.is_grad_enabled())))
        got, err = _call(fn, model, splits, 4, 8, 3, 7)
        hook.remove()
        if err:
            return _fail(err)
        if any(training for training, _ in seen):
            return _fail("评估时 dropout 还开着：先 model.eval()，同一批数据每次才会评出同一个数")
        if any(grad for _, grad in seen):
            return _fail("评估时还在记录梯度：用 torch.no_grad()（或 @torch.no_grad() 装饰函数），"
                         "省内存也省时间")
        if model.training != start_training:
            return _fail("评估完要恢复**原来的**模式（先记下 was_training = model.training，"
                         f"最后 model.train(was_training)）；这次进来时 training={start_training}，"
                         f"出去时却是 {model.training}")
        want = solution_estimate_loss(model, splits, 4, 8, 3, 7)
        if not isinstance(got, dict) or set(got) != set(want):
            return _fail(f"应返回 {{划分名: 平均损失}}，键是 {sorted(want)}；收到 {got!r}")
        for name in want:
            if not math.isclose(float(got[name]), want[name], rel_tol=1e-5):
                return _fail(f"划分 {name!r}：你的结果 {float(got[name]):.5f}，"
                             f"期望 {want[name]:.5f}。"
                             "每个划分都要用 torch.Generator().manual_seed(seed) 重新开始取批次，"
                             "取 n_batches 个批次，对它们的损失求平均")
    return _ok()


# 故意不用默认值：把 weight_decay / min_lr_ratio 写死成 0.1 的循环在这里会露馅
_LOOP_CFG = dict(batch_size=4, lr=1e-2, warmup_steps=3, max_steps=12, eval_interval=5,
                 eval_batches=2, grad_clip=0.5, weight_decay=0.5, min_lr_ratio=0.4, bf16=False,
                 progress=False, seed=3)
# 检查循环的小模型开着 dropout：评估时忘了 eval()、或多消耗了随机数，损失都会对不上
_LOOP_DROPOUT = dict(dropout=0.2, attn_dropout=0.2, resid_dropout=0.2)


def _mistake_loop(model, data, val, cfg, mistake):
    """参考循环，故意带上一个典型错误，只用来给出准确的提示。返回每步损失。"""
    T = model.config.block_size
    wd = 0.1 if mistake == "default_weight_decay" else cfg.weight_decay
    min_lr_ratio = 0.1 if mistake == "default_min_lr" else cfg.min_lr_ratio
    if mistake == "all_decayed":
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=wd)
    else:
        opt = torch.optim.AdamW(solution_param_groups(model, wd), lr=cfg.lr,
                                betas=(0.9, 0.999) if mistake == "default_betas" else cfg.betas)
    losses = []
    for step in range(cfg.max_steps):
        s = step + 1 if mistake == "lr_off_by_one" else step
        lr = cfg.lr if mistake == "constant_lr" else solution_lr_schedule(
            s, cfg.lr, cfg.warmup_steps, cfg.max_steps, min_lr_ratio)
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = get_batch(data, cfg.batch_size, T, generator=batch_generator(cfg.seed, step))
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if mistake != "no_clip":
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        losses.append(loss.item())
    return losses


_MISTAKES = {
    "constant_lr": "学习率一直是 cfg.lr：每一步开始时要按日程设置 "
                   "group['lr'] = lr_schedule(step, …)",
    "lr_off_by_one": "学习率日程错开了一步：第 step 步（从 0 数）用 lr_schedule(step, …)，"
                     "不是 step+1",
    "no_clip": "没有裁剪梯度：backward 之后、step 之前调用 "
               "clip_grad_norm_(model.parameters(), cfg.grad_clip)",
    "all_decayed": "优化器没有分组：用 param_groups(model, cfg.weight_decay)，"
                   "偏置和归一化的 γ 不衰减",
    "default_betas": "优化器的 betas 不对：用 cfg.betas（(0.9, 0.95)），"
                     "不是默认的 (0.9, 0.999)",
    "default_weight_decay": "权重衰减写死成了 0.1：用 cfg.weight_decay（这次检查用的是 0.5）",
    "default_min_lr": "学习率的地板写死成了 0.1：用 cfg.min_lr_ratio（这次检查用的是 0.4）",
}


def _mode_hint(seen: list[tuple[bool, bool]], n_steps: int) -> str | None:
    """前向钩子记下的 (model.training, 是否记录梯度)：训练的前向应是 (True, True)，
    评估的前向应是 (False, False)。"""
    if any(training and not grad for training, grad in seen):
        return ("评估时 dropout 还开着（model.training 是 True）：评估前 model.eval()，"
                "或者直接用 estimate_loss")
    if any(grad and not training for training, grad in seen):
        return ("有的训练步在 eval 模式下做：评估完要 model.train() 切回来，"
                "否则之后的训练步都没有 dropout")
    if sum(grad for _, grad in seen) > n_steps:
        return (f"记录梯度的前向有 {sum(grad for _, grad in seen)} 次，训练只有 {n_steps} 步："
                "评估也在 train 模式、记录梯度。评估要 model.eval() + torch.no_grad()"
                "（estimate_loss 就是这样做的），否则 dropout 开着，还多消耗随机数，"
                "之后每一步的 dropout 掩码都和 gc.train.train 错开")
    return None


def _as_losses_and_evals(got):
    if hasattr(got, "steps") and hasattr(got, "evals"):                # 也接受 gc.train.History
        return [r["loss"] for r in got.steps], list(got.evals)
    losses, evals = got
    return [float(v) for v in losses], list(evals)


@exercise
def training_loop(fn) -> bool:
    """练习：``fn(model, train_data, val_data, cfg) -> (每步损失, 评估记录)``，同 train()。"""
    data, val = _ids(11, 400), _ids(12, 200)
    cfg = TrainConfig(**_LOOP_CFG)
    ref = _tiny_model(seed=5, **_LOOP_DROPOUT)
    hist = train(ref, data, val, cfg)
    want_losses = [r["loss"] for r in hist.steps]
    mine = _tiny_model(seed=5, **_LOOP_DROPOUT)                # 同样的权重、同样的随机数状态
    seen: list[tuple[bool, bool]] = []
    hook = mine.register_forward_pre_hook(
        lambda m, a: seen.append((m.training, torch.is_grad_enabled())))
    try:
        got, err = _call(fn, mine, data, val, cfg)
    finally:
        hook.remove()
    if err:
        return _fail(err)
    hint = _mode_hint(seen, cfg.max_steps)
    if hint:
        return _fail(hint)
    try:
        losses, evals = _as_losses_and_evals(got)
    except Exception:  # noqa: BLE001
        return _fail("应返回 (losses, evals)：losses 是每步的损失（Python 数），"
                     "evals 是 [{'step': …, 'train': …, 'val': …}, …]")
    if len(losses) != cfg.max_steps:
        return _fail(f"应训练 cfg.max_steps = {cfg.max_steps} 步并记下每步的损失，"
                     f"收到 {len(losses)} 个")
    bad = [i for i, (a, b) in enumerate(zip(losses, want_losses))
           if not math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-5)]
    if bad:
        first = bad[0]
        if first == 0:
            return _fail("第 1 步的损失就不同：批次不对。第 step 步（从 0 数）用 "
                         "get_batch(train_data, cfg.batch_size, T, "
                         "generator=gc.train.batch_generator(cfg.seed, step))，"
                         "T = model.config.block_size")
        for mistake, hint in _MISTAKES.items():
            trial = _mistake_loop(_tiny_model(seed=5, **_LOOP_DROPOUT), data, val, cfg, mistake)
            if all(math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-5) for a, b in zip(trial, losses)):
                return _fail(hint)
        return _fail(f"前 {first} 步的损失一致，第 {first + 1} 步开始不同"
                     f"（你的 {losses[first]:.5f}，gc.train.train 的 {want_losses[first]:.5f}）："
                     "检查 zero_grad、裁剪、学习率日程和优化器")
    steps = [e.get("step") for e in evals] if all(isinstance(e, dict) for e in evals) else None
    want_steps = [e["step"] for e in hist.evals]
    if steps != want_steps:
        return _fail(f"评估的步数应是 {want_steps}（每 cfg.eval_interval 步一次，最后一步也要评估；"
                     f"步数从 1 数），收到 {steps}")
    for e, w in zip(evals, hist.evals):
        for split in ("train", "val"):
            if split not in e or not math.isclose(float(e[split]), w[split], rel_tol=1e-4):
                return _fail(f"第 {w['step']} 步的评估 {split!r} 不对（期望 {w[split]:.5f}）：用 "
                             "estimate_loss(model, {'train': train_data, 'val': val_data}, "
                             "cfg.batch_size, T, cfg.eval_batches)")
    for (name, p), q in zip(mine.named_parameters(), ref.parameters()):
        if not torch.allclose(p, q, rtol=1e-4, atol=1e-5):
            return _fail(f"损失都一致，但最后的参数 {name} 不同：最后一步之后是不是又多走了一步？")
    return _ok()


def _same(a: float, b: float) -> bool:          # torch.testing.assert_close 的 float32 容差
    return math.isclose(a, b, rel_tol=1.3e-6, abs_tol=1e-5)


def compare_loops(my_losses, my_evals, my_model, pkg_hist, pkg_model) -> bool:
    """第 10 节的证明：你的循环与 ``gc.train.train`` 逐步比较（损失、评估、最后的权重）。

    全部一致就打印一句话并返回 True；否则说出**第一处**不同在哪一步、最可能的原因
    （dropout 的随机数、train / eval 模式、学习率日程、权重衰减……），返回 False，不抛异常。"""
    pkg_losses = [r["loss"] for r in pkg_hist.steps]
    eval_steps = [e["step"] for e in pkg_hist.evals]
    if len(my_losses) != len(pkg_losses):
        print(f"✗ 你的循环记了 {len(my_losses)} 步的损失，包走了 {len(pkg_losses)} 步："
              "for step in range(cfg.max_steps)，每步记一次 loss.item()")
        return False
    s = next((i + 1 for i, (a, b) in enumerate(zip(my_losses, pkg_losses)) if not _same(a, b)),
             None)
    j = next((i for i, (a, b) in enumerate(zip(my_evals, pkg_hist.evals))
              if a.get("step") != b["step"] or not all(_same(float(a.get(k, math.nan)), b[k])
                                                       for k in ("train", "val"))), None)
    if j is None and len(my_evals) != len(eval_steps):
        print(f"✗ 你的循环评估了 {len(my_evals)} 次，包评估了 {len(eval_steps)} 次"
              f"（第 {eval_steps} 步）：每 cfg.eval_interval 步一次，最后一步也要评估")
        return False
    eval_mode = ("评估要在 eval 模式（model.eval()，关掉 dropout）、torch.no_grad() 里做，做完"
                 " model.train() 切回来——estimate_loss 就是这样。train 模式下评估，dropout 开着，"
                 "评出的数每次都不一样，还多消耗了随机数：之后每一步的 dropout 掩码都和"
                 " gc.train.train 错开，后面的损失也就跟着不同")
    if j is not None and (s is None or eval_steps[j] < s):
        e, w = my_evals[j], pkg_hist.evals[j]
        print(f"✗ 前 {eval_steps[j]} 步的损失都一致，但第 {j + 1} 次评估（第 {w['step']} 步）不同："
              f"你的 val {float(e.get('val', math.nan)):.6f}，包的 {w['val']:.6f}。{eval_mode}")
        return False
    if s is not None:
        where = (f"✗ 第 {s} 步开始不一致：你的损失 {my_losses[s - 1]:.6f}，"
                 f"包的 {pkg_losses[s - 1]:.6f}。")
        if s == 1:
            why = ("第 1 步的前向就不同：训练时模型要在 train 模式（model.train()，dropout 开着），"
                   "第 step 步的批次用 gc.train.batch_generator(cfg.seed, step) 取")
        elif s - 1 in eval_steps:
            why = f"它紧跟在第 {s - 1} 步的评估之后：{eval_mode}"
        else:
            why = ("前面的步都一致，所以是参数更新不同：学习率日程（cfg.warmup_steps、"
                   "cfg.min_lr_ratio）、权重衰减（cfg.weight_decay，只给 dim ≥ 2 的参数）、"
                   "梯度裁剪（cfg.grad_clip）、zero_grad 的位置")
        print(where + why)
        return False
    for (name, a), b in zip(my_model.state_dict().items(), pkg_model.state_dict().values()):
        if not torch.allclose(a, b, rtol=1.3e-6, atol=1e-5):
            print(f"✗ 损失与评估都一致，但最后的权重 {name} 不同：最后一步之后是不是又多走了一步？")
            return False
    print(f"{len(my_losses)} 步的损失、{len(my_evals)} 次评估、"
          f"{len(my_model.state_dict())} 个权重张量全部一致 ✓")
    return True


class _CharTok:
    """检查器用的小分词器：一个字一个 id，0 号是换行（eos）。"""

    def __init__(self, text: str):
        self.itos = ["\n"] + sorted(set(text) - {"\n"})
        self.stoi = {c: i for i, c in enumerate(self.itos)}
        self.eos_id, self.vocab_size = 0, len(self.itos)

    def encode(self, s: str, errors: str = "strict") -> list[int]:
        return [self.stoi[c] for c in s]


_TITLED_PAIRS = [("春晓", "春眠不觉晓，处处闻啼鸟。"), ("静夜思", "床前明月光，疑是地上霜。"),
                 ("登鹳雀楼", "白日依山尽，黄河入海流。")]


def _tensor(v) -> torch.Tensor | None:
    try:
        return torch.as_tensor(v, dtype=torch.long).flatten()
    except (TypeError, ValueError, RuntimeError):
        return None


@exercise
def title_targets(fn) -> bool:
    """练习：``fn(pairs, tok) -> (ids, targets)``，题目（含《》）的目标是 −1，正文与换行照常。"""
    tok = _CharTok("".join(t + b for t, b in _TITLED_PAIRS) + "《》")
    want_ids, want_y = solution_title_targets(_TITLED_PAIRS, tok)
    got, err = _call(fn, list(_TITLED_PAIRS), tok)
    if err:
        return _fail(err)
    if not (isinstance(got, (tuple, list)) and len(got) == 2):
        return _fail(f"应返回 (ids, targets) 两个张量，收到 {type(got).__name__}")
    ids, y = (_tensor(v) for v in got)
    if ids is None or y is None:
        return _fail("ids 和 targets 都应是整数张量（或整数列表）")
    if ids.shape != want_ids.shape or not torch.equal(ids, want_ids):
        return _fail(f"ids 不对：应是 {len(want_ids)} 个词元，开头一个换行，每首写成 "
                     "《题》正文 再接一个换行（eos），即 \\n《春晓》春眠…\\n《静夜思》…\\n")
    if y.shape != want_y.shape:
        return _fail(f"targets 应与 ids 一样长（{len(want_ids)}），收到 {len(y)}")
    bad = [i for i in range(1, len(want_y)) if int(y[i]) != int(want_y[i])]   # 第 0 位从来不是目标
    if not bad:
        return _ok()
    char = tok.itos[int(want_ids[bad[0]])]
    marks = [i for i in bad if tok.itos[int(want_ids[i])] in "《》"]
    if marks and all(tok.itos[int(want_ids[i])] in "《》" for i in bad):
        return _fail("书名号《》上还在算损失：《和》是题目的一部分（模型读到它们，而不用学着写），"
                     "目标也要记成 −1")
    if int(want_y[bad[0]]) == -1:
        return _fail(f"第 {bad[0]} 个位置（{char!r}）在题目里，目标应是 −1，收到 {int(y[bad[0]])}："
                     "题目是给模型的条件，不在它上面算损失")
    if char == "\n":
        return _fail(f"第 {bad[0]} 个位置是诗末的换行，目标应是它自己（{int(want_y[bad[0]])}）："
                     "模型要学会在哪里结束一首诗")
    return _fail(f"第 {bad[0]} 个位置（正文的 {char!r}）目标应是 {int(want_y[bad[0]])}，收到 "
                 f"{int(y[bad[0]])}：正文的每个字都要算损失")


_TITLED_CFG = dict(batch_size=4, lr=1e-2, warmup_steps=2, max_steps=5, weight_decay=0.05,
                   min_lr_ratio=0.3, eval_interval=100, eval_batches=1, bf16=False,
                   progress=False, seed=3)


def _titled_data():
    ids = _ids(7, n=200)
    y = ids.clone()
    y[(torch.arange(len(ids)) % 10) < 4] = -1              # 每 10 个位置里 4 个是“题目”
    return ids, y


def _run_titled(fn, cfg, ids, y):
    model = _tiny_model(seed=1, **_LOOP_DROPOUT)
    opt = torch.optim.AdamW(solution_param_groups(model, cfg.weight_decay), lr=cfg.lr,
                            betas=cfg.betas)
    torch.manual_seed(5)                                               # dropout 的随机数
    model.train()
    losses = []
    for step in range(cfg.max_steps):
        got, err = _call(fn, model, opt, ids, y, cfg, step)
        if err:
            return None, model, err
        try:
            losses.append(float(got))
        except (TypeError, ValueError):
            return None, model, f"第 {step} 步应返回损失（loss.item()），收到 {type(got).__name__}"
    return losses, model, None


@exercise
def titled_step(fn) -> bool:
    """练习：``fn(model, optimizer, ids, targets, cfg, step) -> 损失``，做包里的第 step 步。"""
    cfg = TrainConfig(**_TITLED_CFG)
    ids, y = _titled_data()
    got, mine, err = _run_titled(fn, cfg, ids, y)
    if err:
        return _fail(err)
    model = _tiny_model(seed=1, **_LOOP_DROPOUT)
    torch.manual_seed(5)
    hist = train(model, ids, None, cfg, targets={"train": y})
    want = [r["loss"] for r in hist.steps]
    s = next((i for i, (a, b) in enumerate(zip(got, want)) if not _same(a, b)), None)
    if s is None:
        if all(torch.allclose(a, b, rtol=1.3e-6, atol=1e-5)
               for a, b in zip(mine.parameters(), model.parameters())):
            return _ok()
        return _fail("每步的损失都对，但最后的权重不同："
                     "裁剪（cfg.grad_clip）和 optimizer.step() 都做了吗？")
    if s == 0:
        unmasked, _, _ = _run_titled(solution_titled_step, cfg, ids, ids)
        if unmasked is not None and _same(got[0], unmasked[0]):
            return _fail("第 1 步的损失算进了题目的位置：取批次时要传 targets=targets"
                         "（gc.data.get_batch(ids, B, T, generator=…, targets=targets)），"
                         "y 里题目那几个位置才是 −1")
        return _fail(f"第 1 步的损失是 {got[0]:.6f}，应是 {want[0]:.6f}：批次用 "
                     "gc.train.batch_generator(cfg.seed, step) 取，窗口长 model.config.block_size，"
                     "目标取自 targets")
    return _fail(f"第 {s + 1} 步开始不一致（你的 {got[s]:.6f}，包的 {want[s]:.6f}），前面都对："
                 "学习率要按日程 lr_schedule(step, cfg.lr, cfg.warmup_steps, cfg.max_steps, "
                 "cfg.min_lr_ratio) 写进每一组参数；zero_grad 在 backward 之前；"
                 "裁剪用 cfg.grad_clip")


def _early_stopping_hint(evals: list[dict], patience: int, got: tuple[int, int]) -> str:
    """把错误的答案和几种典型错误的结果对一对，说出是哪一种。"""
    best, stop = solution_early_stopping(evals, patience)
    steps = [e["step"] for e in evals]
    ties = [dict(e, val=e["val"] - 1e-9 * i) for i, e in enumerate(evals)]    # 持平也算进步
    later = steps[min(steps.index(stop) + 1, len(steps) - 1)]
    wrong = {(min(evals, key=lambda e: e["val"])["step"], stop):
             "——停下之后的评估已经不会发生了，最好的一步只能在停下之前找",
             solution_early_stopping(ties, patience):
             "——和最好值相等不算进步（要严格更低）",
             (steps.index(best), steps.index(stop)):
             "——返回的是列表下标，应当返回评估记录里的 step",
             (best, later): f"——多等了一次：连续 {patience} 次没有创新低就停"}
    wrong.pop((best, stop), None)
    return wrong.get(tuple(got), "")


@exercise
def early_stopping(fn) -> bool:
    """练习：``fn(evals, patience) -> (最好的一步, 停下的一步)``。"""
    def ev(vals, every=25):
        return [{"step": every * (i + 1), "val": v} for i, v in enumerate(vals)]

    cases = [(ev([6.0, 5.5, 5.2, 5.3, 5.4, 5.6]), 2, "先降后升"),
             (ev([6.0, 5.5, 5.2, 5.1]), 2, "一直在下降，从没停"),
             (ev([6.0, 5.5, 5.5, 5.5, 5.4]), 2, "持平不算创新低"),
             (ev([6.0, 5.2, 5.3, 5.1, 5.4, 5.5, 5.6]), 2, "中途回升后又创新低：耐心要重新计"),
             (ev([6.0, 5.2, 5.3, 5.4, 4.0]), 2, "停下以后的评估不能再看"),
             (ev([5.0, 5.1, 5.2]), 1, "patience = 1")]
    for evals, patience, what in cases:
        got, err = _call(fn, copy.deepcopy(evals), patience)
        if err:
            return _fail(err)
        want = solution_early_stopping(evals, patience)
        try:
            got = (int(got[0]), int(got[1]))
        except Exception:  # noqa: BLE001
            return _fail(f"应返回 (best_step, stop_step) 两个步数，收到 {got!r}")
        if got != want:
            vals = [e["val"] for e in evals]
            return _fail(f"{what}：验证损失 {vals}，patience={patience}；"
                         f"你的结果 {got}，期望 {want}{_early_stopping_hint(evals, patience, got)}")
    return _ok()


# ---------------------------------------------------------------- 检查器："先猜一猜"
INIT_OPTIONS = {"A": "接近 0", "B": "大约 1", "C": "大约 ln V", "D": "大约 V"}


@exercise
def predict_init_loss(guess, measured: float, vocab_size: int) -> bool:
    """先猜：刚初始化的模型在真实诗句上的损失是多少？"""
    values = {"A": 0.0, "B": 1.0, "C": math.log(vocab_size), "D": float(vocab_size)}
    right = min(values, key=lambda k: abs(values[k] - measured))
    return choice(guess, right, INIT_OPTIONS,
                  why=f"量出来是 {measured:.3f}，ln {vocab_size} = {math.log(vocab_size):.3f}："
                      "logits 几乎全是 0，softmax 接近均匀分布，每个字的概率约 1/V")


BF16_OPTIONS = {"A": "比换一个批次的起伏还大", "B": "比起伏小，但不到 10 倍",
                "C": "比起伏小 10 倍以上"}


TITLE_OPTIONS = {"A": "题目上更低", "B": "差不多（相差不到 1 nat/字）",
                 "C": "题目上高得多（高 1 nat/字以上）"}


@exercise
def predict_title_loss(guess, title_loss: float, body_loss: float) -> bool:
    """先猜：课程检查点在题目（含《》）的位置上的损失，和正文的位置比起来怎样？"""
    d = title_loss - body_loss
    right = "A" if d <= -1 else ("C" if d >= 1 else "B")
    return choice(guess, right, TITLE_OPTIONS,
                  why=f"题目上 {title_loss:.3f}，正文上 {body_loss:.3f} nats/字，相差 {d:+.2f}")


@exercise
def predict_bf16_gap(guess, gap: float, spread: float) -> bool:
    """先猜：eval 模式下同一批数据，bf16 与 fp32 的损失差，和换批次的起伏比起来有多大？"""
    right = "A" if gap >= spread else ("B" if gap * 10 >= spread else "C")
    return choice(guess, right, BF16_OPTIONS,
                  why=f"成对的差 {gap:.5f}，换批次的起伏（标准差）{spread:.4f}，"
                      f"相差 {spread / max(gap, 1e-12):.0f} 倍")


OVERFIT_OPTIONS = {"A": "一直下降", "B": "先降后升", "C": "几乎不变"}
_SHORT = "（这次的训练很短——快速模式？——所以按这次量到的判；完整模式的结果见正文）"
# 快速模式（评分就在快速模式下跑）训练太短，量不出完整模式的现象：这时按完整模式量到的结果判，
# 否则照着正文答对的学生反而记错
_QUICK = "（快速模式训练太短，量不出这个现象：按完整模式量到的结果判）"


def _judged(seen: str, full_mode: str) -> tuple[str, str]:
    """(按哪个答案判, 附加说明)：完整模式按这次量到的；快速模式量不出时按完整模式的结果。"""
    from ..runtime import is_quick
    if seen != full_mode and is_quick():
        return full_mode, _QUICK
    return seen, "" if seen == full_mode else _SHORT


def _observed_overfit(vals: list[float]) -> str:
    low = min(vals)
    if vals[-1] - low > 0.1:
        return "B"
    return "A" if vals[0] - vals[-1] > 0.1 else "C"


@exercise
def predict_overfit(guess, history) -> bool:
    """先猜：在几百首诗上一直训练下去（不加 dropout），验证损失会怎样？

    对错按这一次实验量到的曲线判（完整模式下是 B，先降后升）；曲线还没显示出来时
    （快速模式训练太短），按量到的形状判，并说明原因。"""
    vals = [e["val"] for e in (history.evals if hasattr(history, "evals") else history["evals"])]
    seen, note = _judged(_observed_overfit(vals), "B")
    return choice(guess, seen, OVERFIT_OPTIONS,
                  why=f"验证损失从 {vals[0]:.2f} 降到最低 {min(vals):.2f}，最后是 {vals[-1]:.2f}"
                      + (note or "：模型开始背诵训练集了"))


WINDOW_OPTIONS = {"A": "学习式位置仍然更好", "B": "RoPE 反超", "C": "两者差不多（差距小于 0.02）"}


@exercise
def predict_windows(guess, learned: float, rope: float) -> bool:
    """先猜：窗口不再从诗的开头切（随机窗口）时，学习式位置与 RoPE 谁的验证损失更低？

    对错按这一次量到的两个损失判（完整模式下是 B：RoPE 反超，绝对位置不再是"第几个字"的
    免费答案）。"""
    seen, note = _judged("C" if abs(learned - rope) < 0.02 else ("A" if learned < rope else "B"),
                         "B")
    return choice(guess, seen, WINDOW_OPTIONS,
                  why=f"随机窗口下：学习式位置 {learned:.3f}，RoPE {rope:.3f}" + note)


def report() -> int:
    """打印本章每个练习在这次运行里的检查结果（✓ 通过、✗ 没通过、— 还没检查），返回通过的个数。"""
    done = {r["exercise"]: r for r in results() if r["chapter"] == "nb03"}
    for name in EXERCISES:
        r = done.get(name)
        mark = "—" if r is None else ("✓" if r["passed"] else "✗")
        print(f"{mark} {name:<18} {'' if r is None or r['passed'] else r['message']}")
    passed = sum(bool(done.get(n, {}).get("passed")) for n in EXERCISES)
    print(f"通过 {passed}/{len(EXERCISES)}")
    return passed
