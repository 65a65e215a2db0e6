"""权重怎么更新：参数分组（哪些衰减）、优化器（AdamW，或让各层的矩阵用 Muon）与学习率日程
（线性预热 + 余弦衰减）。

训练循环（:mod:`gptcourse.train`）每一步问这里两件事：这一步的学习率是多少（:func:`lr_at`），
以及用哪个优化器走这一步（:func:`make_optimizer`）。
"""
from __future__ import annotations

import math

import torch

OPTIMIZERS = ("adamw", "muon")


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """维度 ≥ 2 的张量（矩阵、嵌入）做权重衰减；偏置与归一化的 γ 不做。"""
    params = [p for p in model.parameters() if p.requires_grad]       # 共享的张量只出现一次
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: torch.nn.Module, lr: float, weight_decay: float = 0.1,
                   betas=(0.9, 0.95), kind: str = "adamw") -> torch.optim.Optimizer:
    if kind == "muon":
        return MuonAdamW(model, lr, weight_decay, betas)
    return torch.optim.AdamW(param_groups(model, weight_decay), lr=lr, betas=betas)


class MuonAdamW:
    """Muon 管各层里的矩阵（注意力与 MLP 的权重：把每一步的更新正交化），AdamW 管其余的
    （嵌入 / 输出头这个共享的大矩阵、归一化的 γ，以及训练时加进来的辅助头）。

    ``torch.optim.Muon`` 用 ``adjust_lr_fn="match_rms_adamw"``：更新的均方根与 AdamW 相当，
    所以两部分用同一个学习率和同一条日程。对外像一个优化器：``param_groups`` 是两部分的组连在一起
    （Muon 在前），``state_dict`` 的参数编号也连着排，检查点与续训照常。"""

    def __init__(self, model: torch.nn.Module, lr: float, weight_decay: float, betas):
        embedding = {id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding)
                     for p in m.parameters()}
        params = [p for p in model.parameters() if p.requires_grad]
        matrices = [p for p in params if p.dim() == 2 and id(p) not in embedding]
        inside = {id(p) for p in matrices}
        rest = [p for p in params if id(p) not in inside]
        self.muon = torch.optim.Muon(matrices, lr=lr, weight_decay=weight_decay,
                                     adjust_lr_fn="match_rms_adamw")
        self.adamw = torch.optim.AdamW(
            [{"params": [p for p in rest if p.dim() >= 2], "weight_decay": weight_decay},
             {"params": [p for p in rest if p.dim() < 2], "weight_decay": 0.0}],
            lr=lr, betas=betas)
        self.parts = (self.muon, self.adamw)

    @property
    def param_groups(self) -> list[dict]:
        return [g for o in self.parts for g in o.param_groups]

    def add_param_group(self, group: dict) -> None:                  # 辅助头：交给 AdamW
        self.adamw.add_param_group(group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.parts:
            o.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for o in self.parts:
            o.step()

    def state_dict(self) -> dict:
        """与单个优化器同样的格式：参数编号在两部分之间连着排。"""
        out, offset = {"state": {}, "param_groups": []}, 0
        for o in self.parts:
            sd = o.state_dict()
            out["state"] |= {i + offset: st for i, st in sd["state"].items()}
            out["param_groups"] += [{**g, "params": [i + offset for i in g["params"]]}
                                    for g in sd["param_groups"]]
            offset += sum(len(g["params"]) for g in o.param_groups)
        return out

    def load_state_dict(self, saved: dict) -> None:
        groups, offset = list(saved["param_groups"]), 0
        for o in self.parts:
            mine, groups = groups[:len(o.param_groups)], groups[len(o.param_groups):]
            n = sum(len(g["params"]) for g in mine)
            o.load_state_dict({
                "state": {i - offset: st for i, st in saved["state"].items()
                          if offset <= i < offset + n},
                "param_groups": [{**g, "params": [i - offset for i in g["params"]]}
                                 for g in mine]})
            offset += n


def cosine_lr(frac: float, max_lr: float, min_lr_ratio: float = 0.1) -> float:
    """余弦衰减：frac = 0 时是 max_lr，frac ≥ 1 时停在地板 max_lr × min_lr_ratio。"""
    frac = min(max(frac, 0.0), 1.0)
    min_lr = max_lr * min_lr_ratio
    return min_lr + 0.5 * (1 + math.cos(math.pi * frac)) * (max_lr - min_lr)


def lr_at(step: float, max_lr: float, warmup: float, total: float,
          min_lr_ratio: float = 0.1) -> float:
    """第 step 步（从 0 数）的学习率：线性预热到 max_lr，再余弦衰减到 max_lr × min_lr_ratio。"""
    if step < warmup:
        return max_lr * (step + 1) / (warmup + 1)
    return cosine_lr((step - warmup) / max(1e-9, total - warmup), max_lr, min_lr_ratio)
