"""训练与评估里的错误：目标没错位、Block 放进 Python list、忘了 train()、忘了 eval()、
把小语料上接近 0 的损失当成"学会了"。每个错误旁边都有它的正确版本和抓它的检查。"""
from __future__ import annotations

import torch
import torch.nn as nn

from ..model import GPT, Block
from .common import Diagnosis


# ---------------------------------------------------------------- 1. 目标没有错位
def unshifted_batch(data: torch.Tensor, batch_size: int, block_size: int,
                    generator: torch.Generator | None = None):
    """错误：y 就是 x 本身——模型只要学会"抄输入"，损失就能降到接近 0。"""
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    x = data[starts[:, None] + torch.arange(block_size)]                # [B, T]
    return x, x.clone()


def check_targets_shifted(batch_fn) -> Diagnosis:
    """在 0, 1, 2, … 这条序列上取批次：y 必须处处等于 x + 1。"""
    data = torch.arange(1000)
    x, y = batch_fn(data, 4, 8, generator=torch.Generator().manual_seed(0))
    if torch.equal(y, x):
        return Diagnosis(False, "y 与 x 完全相同：目标没有向右错一位，模型会学成复读机")
    if not torch.equal(y, x + 1):
        diffs = sorted(set((y - x).flatten().tolist()))
        return Diagnosis(False, f"y − x 应处处为 1，实际为 {diffs}")
    return Diagnosis(True, "y 正好是 x 向右错一位")


# ---------------------------------------------------------------- 2. Block 放进 Python list
class ListBlocksGPT(GPT):
    """错误：``self.blocks = [Block(cfg), …]``——普通 list 里的模块不会被注册，
    ``parameters()``、``state_dict()``、``.to(device)`` 都看不见它们，优化器也就从不更新它们。"""

    def __init__(self, cfg):
        super().__init__(cfg)
        del self.blocks                                   # 去掉父类注册好的 ModuleList
        blocks = [Block(cfg) for _ in range(cfg.n_layer)]
        for b in blocks:
            b.apply(self._init_weights)
        self.blocks = blocks                              # 普通 list：参数"消失"了


def hidden_modules(module: nn.Module) -> dict[str, nn.Module]:
    """找出藏在 list / tuple / dict 属性里、没被注册的子模块：{"blocks[0]": 模块, …}。"""
    found = {}
    for prefix, m in module.named_modules():
        for name, value in vars(m).items():
            if name.startswith("_"):
                continue
            if isinstance(value, dict):
                items = value.items()
            elif isinstance(value, (list, tuple)):
                items = enumerate(value)
            else:
                continue
            for key, item in items:
                if isinstance(item, nn.Module):
                    found[f"{prefix + '.' if prefix else ''}{name}[{key!r}]"] = item
    return found


def check_parameters_registered(model: nn.Module) -> Diagnosis:
    """所有子模块的参数都必须出现在 model.parameters() 里。"""
    hidden = hidden_modules(model)
    if hidden:
        n = sum(p.numel() for m in hidden.values() for p in m.parameters())
        return Diagnosis(False, f"{len(hidden)} 个子模块藏在普通容器里（如 {next(iter(hidden))}），"
                                f"共 {n:,} 个参数不在 parameters() 中，优化器看不见")
    return Diagnosis(True, "所有子模块都已注册")


# ---------------------------------------------------------------- 3. 忘了 train()
def train_forgetting_train(model, data, steps: int, batch_fn, eval_every: int = 10,
                           lr: float = 3e-3, seed: int = 0) -> list[float]:
    """错误：每隔 eval_every 步调用 model.eval() 评估，之后却没有切回 model.train()——
    从第一次评估起，dropout 在训练中就一直关着。"""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    losses = []
    for step in range(steps):
        x, y = batch_fn(data, 16, model.config.block_size, generator=g)
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if (step + 1) % eval_every == 0:
            model.eval()
            with torch.no_grad():
                model(x, y)                               # "评估"……然后就忘了 model.train()
    return losses


def train_correctly(model, data, steps: int, batch_fn, eval_every: int = 10,
                    lr: float = 3e-3, seed: int = 0) -> list[float]:
    """正确：评估完立刻 model.train()（``gc.train.estimate_loss`` 就是这样做的）。
    每一步就是 ``gc.train.train_step``（不裁剪），与上面的错误版本只差评估之后那一句。"""
    from ..train import train_step

    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        model.train()
        x, y = batch_fn(data, 16, model.config.block_size, generator=g)
        losses.append(train_step(model, opt, [(x, y)], grad_clip=0)[0])
        if (step + 1) % eval_every == 0:
            model.eval()
            with torch.no_grad():
                model(x, y)
            model.train()
    return losses


class ModeRecorder:
    """记录每次前向时 model.training 与是否在求梯度：[(training, grad_enabled), …]。"""

    def __init__(self, model: nn.Module):
        self.calls: list[tuple[bool, bool]] = []
        self._h = model.register_forward_pre_hook(
            lambda m, args: self.calls.append((m.training, torch.is_grad_enabled())))

    def close(self):
        self._h.remove()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def check_train_mode(train_fn, model, data, batch_fn, steps: int = 30) -> Diagnosis:
    """跑一小段训练：每一次求梯度的前向都必须处在 train 模式（dropout 开着）。"""
    with ModeRecorder(model) as rec:
        train_fn(model, data, steps, batch_fn)
    grad_calls = [tr for tr, grad in rec.calls if grad]
    off = grad_calls.count(False)
    if off:
        return Diagnosis(False, f"{len(grad_calls)} 次训练前向里有 {off} 次处在 eval 模式："
                                "评估之后忘了 model.train()，dropout 被关掉了")
    return Diagnosis(True, f"{len(grad_calls)} 次训练前向都在 train 模式")


# ---------------------------------------------------------------- 4. 忘了 eval()
@torch.no_grad()
def estimate_loss_forgetting_eval(model, data, n_batches: int = 5, seed: int = 1234) -> float:
    """错误：评估时没有 model.eval()——dropout 还开着，同一批数据每次评出不同的损失。"""
    g = torch.Generator().manual_seed(seed)
    from ..data import get_batch
    losses = [model(*get_batch(data, 16, model.config.block_size, generator=g))[1].item()
              for _ in range(n_batches)]
    return sum(losses) / len(losses)


def estimate_loss_correctly(model, data, n_batches: int = 5, seed: int = 1234) -> float:
    """正确：用 ``gc.train.estimate_loss``（eval 模式、no_grad、之后恢复原来的模式）。"""
    from ..train import estimate_loss
    return estimate_loss(model, {"val": data}, 16, model.config.block_size, n_batches, seed)["val"]


def check_eval_mode(eval_fn, model, data) -> Diagnosis:
    """评估两次必须得到同一个数，而且评估时的每次前向都处在 eval 模式。"""
    model.train()                                         # 模拟训练进行到一半时去评估
    with ModeRecorder(model) as rec:
        a, b = eval_fn(model, data), eval_fn(model, data)
    in_train = sum(tr for tr, _ in rec.calls)
    if in_train or a != b:
        return Diagnosis(False, f"两次评估得到 {a:.4f} 和 {b:.4f}；{len(rec.calls)} 次前向里 "
                                f"{in_train} 次处在 train 模式：评估前忘了 model.eval()")
    return Diagnosis(True, f"两次评估都是 {a:.4f}，全程 eval 模式")


# ---------------------------------------------------------------- 5. 小语料上的"零损失"
def repeated_corpus(poem: str, times: int = 200) -> str:
    """把同一首诗重复很多遍——一个能让损失降到接近 0 的"玩具语料"。"""
    return (poem.removesuffix("\n") + "\n") * times


def generalisation_gap(model, tok, train_text: str, val_text: str,
                       max_chars: int = 4000) -> tuple[float, float]:
    """(训练集损失, 验证集损失)：各取前 max_chars 个字，用 ``gc.evaluate.split_loss`` 计算。"""
    from ..evaluate import split_loss
    return (split_loss(model, tok, train_text[:max_chars]),
            split_loss(model, tok, val_text[:max_chars]))


def check_generalisation(model, tok, train_text: str, val_text: str,
                         max_gap: float = 1.0, max_chars: int = 4000) -> Diagnosis:
    """训练集损失低不等于学会了：验证集（没见过的诗）的损失必须跟得上。"""
    tr, va = generalisation_gap(model, tok, train_text, val_text, max_chars)
    if va - tr > max_gap:
        return Diagnosis(False, f"训练损失 {tr:.3f}，验证损失 {va:.3f}，差距 {va - tr:.2f} nats > "
                                f"{max_gap}：模型在背诵训练文本，而不是学会了写诗")
    return Diagnosis(True, f"训练损失 {tr:.3f}，验证损失 {va:.3f}，差距 {va - tr:.2f} ≤ {max_gap}")
