"""训练循环：AdamW 参数分组、预热 + 余弦衰减、梯度裁剪、梯度累积、估计损失、进度条。

一步训练的顺序：前向 → 损失 → zero_grad(set_to_none) → 反向 → 裁剪 → step。
同一台机器、同一个种子 → 同一条损失曲线（按步数计预算时）。第 s 步的批次只由
(seed, s, rank) 决定，所以"训练一半、存盘、读回、再训练一半"与一口气训完取到完全相同的批次。
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass, field

import torch
from tqdm.auto import tqdm

from . import distributed as dist_utils
from .data import get_batch
from .model import GPT


@dataclass
class TrainConfig:
    batch_size: int = 32
    lr: float = 1e-3                  # 峰值学习率
    min_lr_ratio: float = 0.1         # 余弦衰减的地板 = lr × min_lr_ratio
    warmup_steps: int = 100
    max_steps: int | None = 1000      # 按步数计预算……
    max_minutes: float | None = None  # ……或按墙钟分钟数（两者都给时先到者为准）
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0            # 全局范数上限；0 表示不裁剪
    grad_accum: int = 1               # 每步的微批次数
    eval_interval: int = 100
    eval_batches: int = 20
    seed: int = 0
    bf16: bool | str = "auto"         # "auto"：CPU 上实测 bf16 更快才用
    progress: bool = True

    def __post_init__(self):
        if self.max_steps is None and self.max_minutes is None:
            raise ValueError("需要训练预算：max_steps 或 max_minutes 至少给一个")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps 必须 ≥ 1，收到 {self.max_steps}")
        if self.max_minutes is not None and not self.max_minutes > 0:
            raise ValueError(f"max_minutes 必须 > 0，收到 {self.max_minutes}")
        for name in ("batch_size", "grad_accum", "eval_interval", "eval_batches"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} 必须 ≥ 1，收到 {getattr(self, name)}")
        if not self.lr > 0 or self.warmup_steps < 0 or self.grad_clip < 0:
            raise ValueError(f"需要 lr > 0、warmup_steps ≥ 0、grad_clip ≥ 0，收到 lr={self.lr}、"
                             f"warmup_steps={self.warmup_steps}、grad_clip={self.grad_clip}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"min_lr_ratio 必须在 [0, 1] 内，收到 {self.min_lr_ratio}")
        if self.bf16 not in (True, False, "auto"):
            raise ValueError(f"bf16 只能是 True、False 或 'auto'，收到 {self.bf16!r}")


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """维度 ≥ 2 的张量（矩阵、嵌入）做权重衰减；偏置与归一化的 γ 不做。"""
    params = [p for p in model.parameters() if p.requires_grad]       # 共享的张量只出现一次
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: torch.nn.Module, lr: float, weight_decay: float = 0.1,
                   betas=(0.9, 0.95)) -> torch.optim.AdamW:
    return torch.optim.AdamW(param_groups(model, weight_decay), lr=lr, betas=betas)


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


def batch_generator(seed: int, step: int, rank: int = 0) -> torch.Generator:
    """第 step 步、第 rank 个进程取批次用的随机数生成器：只由 (seed, step, rank) 决定。"""
    return torch.Generator().manual_seed(((seed * 1_000_003 + step) * 1_009 + rank) % 2**63)


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               batches: list[tuple[torch.Tensor, torch.Tensor]], grad_clip: float = 1.0,
               amp=None, ddp: torch.nn.Module | None = None) -> tuple[float, float]:
    """一步训练：前向 → 损失 → zero_grad(set_to_none) → 反向 → 裁剪 → step。

    ``batches`` 里有 n 个微批次 (x [B, T], y [B, T])：每个的损失先除以 n 再反向，
    梯度累加之后才等于一个 n·B 的大批次的梯度。返回 (平均损失, 裁剪前的全局梯度范数)。
    """
    ddp = ddp if ddp is not None else model
    n, mean_loss = len(batches), 0.0
    for i, (x, y) in enumerate(batches):
        with dist_utils.no_sync(ddp, last=i == n - 1):               # 多进程时只在最后一次同步
            with amp if amp is not None else contextlib.nullcontext():
                _, loss = ddp(x, y)                                  # 前向 + 损失
            if i == 0:
                optimizer.zero_grad(set_to_none=True)                # 清掉上一步的梯度
            (loss / n).backward()                                    # 除以 n 才等于大批次
        mean_loss += loss.item() / n
    max_norm = grad_clip if grad_clip > 0 else float("inf")
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)   # 按全局范数裁剪
    optimizer.step()
    return mean_loss, float(norm)


@torch.no_grad()
def estimate_loss(model: torch.nn.Module, splits: dict[str, torch.Tensor], batch_size: int,
                  block_size: int, n_batches: int = 20, seed: int = 1234,
                  starts: dict[str, torch.Tensor] | None = None) -> dict[str, float]:
    """eval 模式、不求梯度，对每个划分取 n_batches 个固定随机批次的平均损失，然后切回 train。

    ``starts`` 可以给某些划分指定窗口起点（例如按诗对齐，见 :func:`gptcourse.data.poem_starts`）。
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out = {}
    for name, data in splits.items():
        g = torch.Generator().manual_seed(seed)                    # 每次评估用同一批窗口
        s = (starts or {}).get(name)
        losses = [model(*get_batch(data, batch_size, block_size, device, g, s))[1].item()
                  for _ in range(n_batches)]
        out[name] = sum(losses) / len(losses)
    model.train(was_training)
    return out


_BF16_CACHE: dict[str, bool] = {}


def bf16_is_faster(device: torch.device | str = "cpu") -> bool:
    """在本机实测：一个小模型的前向+反向，bf16 autocast 是否比 fp32 快 10% 以上。"""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return False
    if "cpu" not in _BF16_CACHE:
        from .config import preset
        with torch.random.fork_rng():
            torch.manual_seed(0)
            model = GPT(preset("teacher", vocab_size=512, block_size=64, n_layer=2))
            x = torch.randint(512, (8, 64))

            def timed(enabled: bool) -> float:
                best = float("inf")
                for _ in range(3):
                    t0 = time.perf_counter()
                    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=enabled):
                        _, loss = model(x, x)
                    loss.backward()
                    best = min(best, time.perf_counter() - t0)
                return best
            try:
                timed(True)                                        # 预热；不支持时会在这里报错
                _BF16_CACHE["cpu"] = timed(True) < 0.9 * timed(False)
            except RuntimeError:
                _BF16_CACHE["cpu"] = False
    return _BF16_CACHE["cpu"]


@dataclass
class History:
    """训练记录：每步一行（step, loss, lr, grad_norm, tokens_per_s），每次评估一行。"""
    steps: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "History":
        """从 to_dict() 的结果（例如检查点 meta["history"]）还原，用于接着训练。"""
        return cls(steps=[dict(r) for r in d.get("steps", [])],
                   evals=[dict(r) for r in d.get("evals", [])])

    @property
    def best_val(self) -> float:
        vals = [e["val"] for e in self.evals if "val" in e]
        return min(vals) if vals else float("nan")


def train(model: GPT, train_data: torch.Tensor, val_data: torch.Tensor | None, cfg: TrainConfig,
          optimizer: torch.optim.Optimizer | None = None, start_step: int = 0,
          history: History | None = None, callbacks=(), on_eval=None,
          stop_step: int | None = None, starts: dict[str, torch.Tensor] | None = None) -> History:
    """训练 model，返回 History。``callbacks`` 里的函数在每次评估后调用：fn(step, model, history)。

    ``on_eval(step, val_loss, is_best)`` 用于保存检查点（命令行用它保存 best 与 last）。
    ``start_step`` 从检查点接着训练时用；``stop_step`` 让训练在这一步提前返回（学习率日程
    仍按 max_steps 计算），用来演示"中断 → 存盘 → 续训"。
    按分钟计预算时：预热仍按步数，之后余弦按"预热结束后已用时间 / 剩余预算"走。
    ``starts``：{划分名: 窗口起点}，给出时训练批次与评估都只从这些起点取窗口（按诗对齐）。
    在 torchrun 下自动用 DistributedDataParallel：每个进程取不同的批次，只有 0 号进程评估与记录。
    """
    device = next(model.parameters()).device
    ddp = dist_utils.wrap(model)                                     # 单进程时就是 model 本身
    rank, world = dist_utils.rank(), dist_utils.world_size()
    optimizer = optimizer or make_optimizer(model, cfg.lr, cfg.weight_decay, cfg.betas)
    history = history if history is not None else History()
    use_bf16 = bf16_is_faster(device) if cfg.bf16 == "auto" else bool(cfg.bf16)
    amp = torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16)
    T = model.config.block_size
    splits = {"train": train_data} | ({"val": val_data} if val_data is not None else {})
    total = cfg.max_steps if cfg.max_steps is not None else 10**9
    end = min(total, stop_step) if stop_step is not None else total
    budget_s = cfg.max_minutes * 60 if cfg.max_minutes is not None else None
    tokens_per_step = cfg.batch_size * T * cfg.grad_accum * world
    bar = tqdm(total=cfg.max_steps, initial=start_step, disable=not cfg.progress or rank != 0,
               desc="训练", unit="步", dynamic_ncols=True)
    best = min((e["val"] for e in history.evals if "val" in e), default=float("inf"))
    t_start, t_warm, elapsed = time.perf_counter(), None, 0.0     # t_warm：预热结束的时刻
    step, stop = start_step, start_step >= end
    model.train()
    while not stop:
        if budget_s is None or step < cfg.warmup_steps:
            lr = lr_at(step, cfg.lr, cfg.warmup_steps, total, cfg.min_lr_ratio)
        else:                                                        # 按时间计预算的余弦段
            t_warm = elapsed if t_warm is None else t_warm
            lr = cosine_lr((elapsed - t_warm) / max(1e-9, budget_s - t_warm),
                           cfg.lr, cfg.min_lr_ratio)
        for group in optimizer.param_groups:
            group["lr"] = lr
        t0 = time.perf_counter()
        gen = batch_generator(cfg.seed, step, rank)                  # 每个进程、每一步各不相同
        batches = [get_batch(train_data, cfg.batch_size, T, device, gen,
                             (starts or {}).get("train"))
                   for _ in range(cfg.grad_accum)]
        loss, norm = train_step(model, optimizer, batches, cfg.grad_clip, amp, ddp)
        step += 1
        row = {"step": step, "loss": loss, "lr": lr, "grad_norm": norm,
               "tokens_per_s": tokens_per_step / (time.perf_counter() - t0)}
        history.steps.append(row)
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{row['tokens_per_s']:,.0f}")
        stop = step >= end
        if budget_s is not None:               # 所有进程用 0 号进程的时钟：学习率与停止一致
            elapsed = dist_utils.from_rank0(time.perf_counter() - t_start)
            stop = stop or elapsed >= budget_s
        if rank == 0 and (step % cfg.eval_interval == 0 or stop):
            losses = estimate_loss(model, splits, cfg.batch_size, T, cfg.eval_batches,
                                   starts=starts)
            history.evals.append({"step": step, **losses,
                                  "elapsed_s": time.perf_counter() - t_start})
            is_best = "val" in losses and losses["val"] < best
            best = min(best, losses.get("val", best))
            if cfg.progress:
                bar.write(f"step {step:5d} | "
                          + " | ".join(f"{k} {v:.4f}" for k, v in losses.items()))
            if on_eval is not None:
                on_eval(step, losses.get("val"), is_best)
            for fn in callbacks:
                fn(step, model, history)
    bar.close()
    return history


# ---------------------------------------------------------------- 命令行：python -m gptcourse train
def cli_arguments(p) -> None:
    """命令行参数（实现在 train_cli.py，这里转出，供 ``gptcourse.cli`` 分发）。"""
    from .train_cli import cli_arguments as add
    add(p)


def cli_main(args) -> int:
    from .train_cli import cli_main as run
    return run(args)
