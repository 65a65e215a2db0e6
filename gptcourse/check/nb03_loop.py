"""笔记本 03 的第二组练习：参数分组、学习率日程、一步训练、梯度累积、评估与整个训练循环。
参考就是包（``gc.train``），并认得几种典型的写错方式（``_MISTAKES``）。"""
from __future__ import annotations

import copy
import math
from dataclasses import replace

import torch

from .. import optim
from .. import train as gc_train
from ..config import preset
from ..data import get_batch
from ..model import GPT
from ._common import _call, _fail, _got, _ok, exercise
from .nb03_loss import _batch, _ids, _tiny_model


def _close(a, b: float, rel: float = 1.3e-6, abs_tol: float = 1e-5) -> bool:
    """a 是与 b 相近的数（默认是 assert_close 的 float32 容差）；a 不是数也算不相近。"""
    try:
        return math.isclose(float(a), b, rel_tol=rel, abs_tol=abs_tol)
    except (TypeError, ValueError):
        return False


def _differs(a: torch.nn.Module, b: torch.nn.Module, rtol=1e-5, atol=1e-7) -> str | None:
    """a 与 b 第一个不一致的参数的名字；全都一致时是 None。"""
    return next((n for (n, p), q in zip(a.named_parameters(), b.parameters())
                 if not torch.allclose(p, q, rtol=rtol, atol=atol)), None)


def _watch(model) -> list[tuple[bool, bool]]:
    """记下 model 之后每次前向时的 (model.training, 是否记录梯度)（检查用的模型用完就扔）。"""
    seen: list[tuple[bool, bool]] = []
    model.register_forward_pre_hook(lambda m, a: seen.append((m.training, torch.is_grad_enabled())))
    return seen


@exercise
def param_groups(fn) -> bool:
    """练习：``fn(model, weight_decay) -> [衰减组, 不衰减组]``，每组 {"params", "weight_decay"}。"""
    for model in (_tiny_model(), GPT(preset("teacher", vocab_size=30, block_size=8, n_layer=2,
                                            n_head=2, n_embd=16))):
        names = {id(p): n for n, p in model.named_parameters()}
        got = _got(fn, model, 0.1)
        try:
            decay, no_decay = got
            got_sets = [{id(p) for p in decay["params"]}, {id(p) for p in no_decay["params"]}]
            wd = (decay["weight_decay"], no_decay["weight_decay"])
        except Exception:  # noqa: BLE001
            return _fail("应返回两个字典组成的列表：[{'params': [...], 'weight_decay': wd}, "
                         "{'params': [...], 'weight_decay': 0.0}]")
        if wd != (0.1, 0.0):
            return _fail(f"两组的 weight_decay 应是 (0.1, 0.0)，收到 {wd}")
        if sum(len(g["params"]) for g in (decay, no_decay)) != len(got_sets[0] | got_sets[1]):
            return _fail("有参数出现了不止一次（共享的词嵌入/输出头只能放一次）")
        want_sets = [{id(p) for p in g["params"]} for g in optim.param_groups(model, 0.1)]
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
            got = _got(fn, step, max_lr, warmup, total, ratio)
            want = optim.lr_at(step, max_lr, warmup, total, ratio)
            if not _close(got, want, 1e-6, 1e-12):
                where = "预热阶段" if step < warmup else ("地板" if step >= total else "余弦阶段")
                hint = {"预热阶段": "预热是 max_lr·(step+1)/(warmup+1)：第 0 步就要有一点学习率",
                        "地板": "step ≥ total 之后停在 max_lr·min_lr_ratio",
                        "余弦阶段": "进度 r = (step−warmup)/(total−warmup)，"
                                    "lr = min_lr + ½(1+cos πr)(max_lr−min_lr)"}[where]
                return _fail(f"step={step}（{where}），max_lr={max_lr}, warmup={warmup}, "
                             f"total={total}, min_lr_ratio={ratio}：你的结果 {got!r}，"
                             f"期望 {want:.6g}。{hint}")
    return _ok()


@exercise
def train_step(fn) -> bool:
    """练习：``fn(model, optimizer, x, y, grad_clip) -> 损失``，按正确顺序做完一步。"""
    ref, mine = _tiny_model(), _tiny_model()
    opt_ref, opt_mine = (torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (ref, mine))
    for i in range(3):                                                 # 连走三步：忘了清梯度会暴露
        x, y = _batch(i)
        before = copy.deepcopy(mine)
        want = gc_train.train_step(ref, opt_ref, [(x, y)], 0.05)[0]   # 很小的阈值：一定会裁剪
        got = _got(fn, mine, opt_mine, x, y, 0.05)
        if not _close(got, want, 1e-5, 0.0):
            return _fail(f"第 {i + 1} 步返回的损失是 {got!r}，应是 {want:.6f}（返回 loss.item()）")
        if _differs(mine, ref) is None:
            continue
        if _differs(mine, before) is None or all(p.grad is None or not p.grad.any()
                                                 for p in mine.parameters()):
            return _fail(f"第 {i + 1} 步之后参数根本没动：是不是把 zero_grad 放在了 backward 之后"
                         "（刚算出的梯度被清掉了），或者忘了 optimizer.step()？")
        if i == 0:                                                     # 第一步就不同：裁剪的问题
            unclipped = _tiny_model()                                  # grad_clip=0：不裁剪的一步
            opt = torch.optim.AdamW(unclipped.parameters(), lr=1e-2)
            gc_train.train_step(unclipped, opt, [(x, y)], 0)
            if _differs(mine, unclipped) is None:
                return _fail("第 1 步的更新没有被裁剪：backward 之后、step 之前调用 "
                             "torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)")
            return _fail("第 1 步之后参数与参考答案不同：裁剪要在 backward 之后、step 之前，"
                         "而且用传入的 grad_clip")
        return _fail(f"第 {i + 1} 步之后参数与参考答案不同（第 1 步还是对的）：是不是忘了 "
                     "optimizer.zero_grad(set_to_none=True)？梯度在步与步之间累加了")
    return _ok()


@exercise
def accumulate_grads(fn) -> bool:
    """练习：``fn(model, micro_batches)`` 只做前向与反向（不 step、不清梯度），梯度应等于
    大批次的梯度加上调用前已有的梯度。"""
    x, y = _batch(7, B=8)
    big = _tiny_model()
    big(x, y)[1].backward()
    for n in (2, 4):
        model, size = _tiny_model(), 8 // n
        micro = [(x[i:i + size], y[i:i + size]) for i in range(0, 8, size)]
        g = torch.Generator().manual_seed(n)
        before = {}                                          # 调用前的权重与已有的梯度
        for name, p in model.named_parameters():
            p.grad = torch.randn(p.shape, generator=g) * 1e-3
            before[name] = (p.detach().clone(), p.grad.clone())
        _got(fn, model, micro)
        for (name, p), q in zip(model.named_parameters(), big.parameters()):
            weight, prior = before[name]
            if not torch.equal(p.detach(), weight):
                return _fail(f"{name} 的权重变了：这里只做前向和反向，不要 optimizer.step()，"
                             "也不要自己更新权重——更新是调用它的训练循环在累积完之后做的事")
            if p.grad is None:
                return _fail(f"{name} 没有梯度：每个微批次都要 backward()（也不要把梯度清成 None）")
            if torch.allclose(p.grad, prior, rtol=1e-4, atol=1e-7):
                return _fail(f"{name} 没有梯度：每个微批次都要 backward()")
            if not torch.allclose(p.grad, prior + q.grad, rtol=1e-4, atol=1e-6):
                return _fail(f"{n} 个微批次：{name} 的梯度" + _accumulate_hint(
                    p.grad, prior, q.grad, micro, n, name))
    return _ok()


def _accumulate_hint(grad, prior, want, micro, n: int, name: str) -> str:
    """累积出的梯度错在哪：没除以 n、中途清了梯度、一开始就清了梯度，或说不出来。"""
    last = _tiny_model()                                   # 只算最后一个微批次
    (last(*micro[-1])[1] / n).backward()
    only_last = dict(last.named_parameters())[name].grad
    ratio = ((grad - prior).norm() / want.norm()).item()
    if abs(ratio - n) < 0.05:
        return f"大约是大批次的 {ratio:.2f} 倍——每个微批次的损失要除以 {n}"
    if torch.allclose(grad, only_last, rtol=1e-4, atol=1e-6):
        return "只剩最后一个微批次的：中途不要清梯度，让 backward 把各微批次的梯度累加起来"
    if torch.allclose(grad, want, rtol=1e-4, atol=1e-6):
        return ("丢掉了调用前已有的梯度：不要 zero_grad()。这个函数只管往 .grad 上累加，"
                "清梯度是训练循环在每一步开始时做的事")
    return "与大批次不同"


@exercise
def estimate_loss(fn) -> bool:
    """练习：``fn(model, splits, batch_size, block_size, n_batches, seed)`` → {划分名: 损失}。"""
    splits = {"train": _ids(1), "val": _ids(2)}
    for start_training in (True, False):
        model = _tiny_model(dropout=0.3, attn_dropout=0.3, resid_dropout=0.3)
        model.train(start_training)
        seen = _watch(model)
        got, err = _call(fn, model, splits, 4, 8, 3, 7)
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
        want = gc_train.estimate_loss(model, splits, 4, 8, 3, 7)
        if not isinstance(got, dict) or set(got) != set(want):
            return _fail(f"应返回 {{划分名: 平均损失}}，键是 {sorted(want)}；收到 {got!r}")
        for name in want:
            if not _close(got[name], want[name], 1e-5, 0.0):
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
# 等于把 cfg 改一项的典型错误（常数学习率 = 不预热、地板就是 cfg.lr）
_AS_CFG = {"constant_lr": {"warmup_steps": 0, "min_lr_ratio": 1.0}, "no_clip": {"grad_clip": 0},
           "default_betas": {"betas": (0.9, 0.999)}, "default_weight_decay": {"weight_decay": 0.1},
           "default_min_lr": {"min_lr_ratio": 0.1}}


def _mistake_loop(model, data, val, cfg, mistake):
    """参考循环，故意带上一个典型错误（``_MISTAKES``），只用来给出准确的提示。返回每步损失。"""
    cfg = replace(cfg, **_AS_CFG.get(mistake, {}))
    opt = torch.optim.AdamW(model.parameters() if mistake == "all_decayed" else
                            optim.param_groups(model, cfg.weight_decay),
                            lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    losses = []
    for step in range(cfg.max_steps):
        for group in opt.param_groups:
            group["lr"] = optim.lr_at(step + (mistake == "lr_off_by_one"), cfg.lr,
                                         cfg.warmup_steps, cfg.max_steps, cfg.min_lr_ratio)
        x, y = get_batch(data, cfg.batch_size, model.config.block_size,
                         generator=gc_train.batch_generator(cfg.seed, step))
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip:
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
    """前向时的 (model.training, 是否记录梯度)：训练应是 (True, True)，评估应是 (False, False)。"""
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


@exercise
def training_loop(fn) -> bool:
    """练习：``fn(model, train_data, val_data, cfg) -> (每步损失, 评估记录)``，同 train()。"""
    data, val = _ids(11, 400), _ids(12, 200)
    cfg = gc_train.TrainConfig(**_LOOP_CFG)
    ref = _tiny_model(seed=5, **_LOOP_DROPOUT)
    hist = gc_train.train(ref, data, val, cfg)
    want_losses = [r["loss"] for r in hist.steps]
    mine = _tiny_model(seed=5, **_LOOP_DROPOUT)                # 同样的权重、同样的随机数状态
    seen = _watch(mine)
    got, err = _call(fn, mine, data, val, cfg)
    hint = err or _mode_hint(seen, cfg.max_steps)
    if hint:
        return _fail(hint)
    try:
        if hasattr(got, "steps") and hasattr(got, "evals"):            # 也接受 gc.train.History
            got = [r["loss"] for r in got.steps], got.evals
        losses, evals = got
        losses, evals = [float(v) for v in losses], list(evals)
    except Exception:  # noqa: BLE001
        return _fail("应返回 (losses, evals)：losses 是每步的损失（Python 数），"
                     "evals 是 [{'step': …, 'train': …, 'val': …}, …]")
    if len(losses) != cfg.max_steps:
        return _fail(f"应训练 cfg.max_steps = {cfg.max_steps} 步并记下每步的损失，"
                     f"收到 {len(losses)} 个")
    bad = [i for i, (a, b) in enumerate(zip(losses, want_losses)) if not _close(a, b, 1e-4)]
    if bad:
        first = bad[0]
        if first == 0:
            return _fail("第 1 步的损失就不同：批次不对。第 step 步（从 0 数）用 "
                         "get_batch(train_data, cfg.batch_size, T, "
                         "generator=gc.train.batch_generator(cfg.seed, step))，"
                         "T = model.config.block_size")
        for mistake, hint in _MISTAKES.items():
            trial = _mistake_loop(_tiny_model(seed=5, **_LOOP_DROPOUT), data, val, cfg, mistake)
            if all(_close(a, b, 1e-4) for a, b in zip(trial, losses)):
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
            if not _close(e.get(split), w[split], 1e-4, 0.0):
                return _fail(f"第 {w['step']} 步的评估 {split!r} 不对（期望 {w[split]:.5f}）：用 "
                             "estimate_loss(model, {'train': train_data, 'val': val_data}, "
                             "cfg.batch_size, T, cfg.eval_batches)")
    name = _differs(mine, ref, 1e-4, 1e-5)
    if name:
        return _fail(f"损失都一致，但最后的参数 {name} 不同：最后一步之后是不是又多走了一步？")
    return _ok()


def compare_loops(my_losses, my_evals, my_model, pkg_hist, pkg_model) -> bool:
    """第 10 节的证明：你的循环与 ``gc.train.train`` 逐步比较（损失、评估、最后的权重）。全部一致
    就打印一句话、返回 True；否则说出**第一处**不同在哪一步、最可能的原因，返回 False，不抛异常。"""
    pkg_losses = [r["loss"] for r in pkg_hist.steps]
    eval_steps = [e["step"] for e in pkg_hist.evals]
    if len(my_losses) != len(pkg_losses):
        print(f"✗ 你的循环记了 {len(my_losses)} 步的损失，包走了 {len(pkg_losses)} 步："
              "for step in range(cfg.max_steps)，每步记一次 loss.item()")
        return False
    s = next((i + 1 for i, (a, b) in enumerate(zip(my_losses, pkg_losses)) if not _close(a, b)),
             None)
    j = next((i for i, (a, b) in enumerate(zip(my_evals, pkg_hist.evals))
              if a.get("step") != b["step"] or not all(_close(a.get(k), b[k])
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
