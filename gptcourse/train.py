"""训练循环：取批次、前向、反向、裁剪、step，定时评估与记录（:func:`train`）。

一步训练的顺序：前向 → 损失 → zero_grad(set_to_none) → 反向 → 裁剪 → step。
同一台机器、同一个种子 → 同一条损失曲线（按步数计预算时；bf16="auto" 只看硬件能力，
见 :mod:`gptcourse.precision`）。第 s 步的批次只由 (seed, s, rank) 决定，所以"训练一半、
存盘、读回、再训练一半"与一口气训完取到完全相同的批次。

权重怎么更新（参数分组、AdamW / Muon、预热 + 余弦衰减）在 :mod:`gptcourse.optim`；训练用的数据
（:func:`gptcourse.titled.training_splits`）在 :mod:`gptcourse.titled`。这两处的名字在这里也能用
（``gc.train.lr_at``、``gc.train.training_splits`` ……），定义只有一份。

速度：损失与梯度范数先留在设备上，每 ``log_interval`` 步（以及评估前、结束时）才取回一次，
同时检查有没有 NaN/inf（发散时抛出 :class:`TrainingDiverged`）；``compile=True`` 用
``torch.compile``，第一步编译失败就退回普通模式并说明原因。实测见 docs/benchmarks.md。

训练记录 :class:`~gptcourse.checkpoint.History`（``train`` 返回它，检查点的 meta 里也存着它）
与一次训练写出的检查点（:class:`~gptcourse.checkpoint.Checkpoints`）在 :mod:`gptcourse.checkpoint`：
它们是写进文件的东西；``gc.train.History`` 也能用。
"""
from __future__ import annotations

import contextlib
import math
import shutil
import sys
import time
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from . import distributed as dist_utils
from .checkpoint import History  # 训练记录（gc.train.History 也能用）
from .data import get_batch
from .errors import UserError
from .model import GPT, eval_mode
from .objectives import Objective, WithObjectives
from .optim import OPTIMIZERS, cosine_lr, lr_at, make_optimizer, param_groups
from .precision import BF16_MODES, Bf16Weights, resolve_bf16
from .runtime import available_memory
from .titled import training_splits  # noqa: F401  （gc.train.training_splits 也能用）

# 尺寸的硬上限（再大的值只会是笔误）；内存够不够另由 check_memory 按模型与机器估计
MAX_SIZES = {"batch_size": 2**16, "grad_accum": 2**12, "eval_batches": 10**4}
MAX_SEED = 2**32                  # NumPy 的种子范围 [0, 2³²)（runtime.set_seed 也设 NumPy）


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
    bf16: bool | str = "auto"         # "auto"：硬件支持 bf16（AVX512-BF16/AMX、CUDA）才用
    progress: bool = True
    bf16_mode: str = "autocast"       # "autocast" 或 "weights"（bf16 权重 + fp32 主权重）
    compile: bool = False             # torch.compile 前向与反向；失败时退回普通模式
    log_interval: int = 10            # 每多少步把损失取回一次（进度条、发散检查）
    optimizer: str = "adamw"          # "adamw"，或 "muon"（各层的矩阵用 Muon，见 MuonAdamW）

    def __post_init__(self):
        if self.max_steps is None and self.max_minutes is None:
            raise UserError("需要训练预算：max_steps 或 max_minutes 至少给一个")
        if self.max_steps is not None and self.max_steps < 1:
            raise UserError(f"max_steps 必须 ≥ 1，收到 {self.max_steps}")
        if self.max_minutes is not None and not 0 < self.max_minutes < math.inf:
            raise UserError(f"max_minutes 必须 > 0，收到 {self.max_minutes}")
        for name in ("batch_size", "grad_accum", "eval_interval", "eval_batches", "log_interval"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} 必须 ≥ 1，收到 {getattr(self, name)}")
            if getattr(self, name) > MAX_SIZES.get(name, math.inf):
                raise UserError(f"{name} 最多 {MAX_SIZES[name]}，收到 {getattr(self, name)}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) \
                or not 0 <= self.seed < MAX_SEED:
            raise UserError(f"seed 必须是 [0, 2**32) 之内的整数（NumPy 的种子范围），"
                            f"收到 {self.seed!r}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise UserError(f"需要 lr > 0 的有限数，收到 lr={self.lr}")
        if self.warmup_steps < 0 or not 0 <= self.grad_clip < math.inf:
            raise UserError(f"需要 warmup_steps ≥ 0、0 ≤ grad_clip < ∞，收到 "
                             f"warmup_steps={self.warmup_steps}、grad_clip={self.grad_clip}")
        if not 0 <= self.weight_decay < math.inf or not all(0 <= b < 1 for b in self.betas):
            raise UserError(f"需要 weight_decay ≥ 0（有限）、betas 在 [0, 1) 内，收到 "
                             f"weight_decay={self.weight_decay}、betas={self.betas}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise UserError(f"min_lr_ratio 必须在 [0, 1] 内，收到 {self.min_lr_ratio}")
        if self.bf16 not in (True, False, "auto"):
            raise UserError(f"bf16 只能是 True、False 或 'auto'，收到 {self.bf16!r}")
        if self.optimizer not in OPTIMIZERS:
            raise UserError(f"optimizer 只能是 {' 或 '.join(OPTIMIZERS)}，收到 {self.optimizer!r}")
        if self.bf16_mode not in BF16_MODES:
            raise UserError(f"bf16_mode 只能是 {' 或 '.join(BF16_MODES)}，收到 {self.bf16_mode!r}")


def tokens_per_step(cfg: TrainConfig, block_size: int) -> int:
    """一步训练看多少个词元：批次 × 窗口长度 × 微批次数 × 进程数。"""
    return cfg.batch_size * block_size * cfg.grad_accum * dist_utils.world_size()


def step_bytes(cfg: "TrainConfig", config) -> int:
    """一步训练大约要多少字节（估计，偏大）：一个微批次的 logits 与它的梯度、每层的激活、
    注意力分数，加上一步的 grad_accum 个微批次的 id。"""
    B, T, C = cfg.batch_size, config.block_size, config.n_embd
    per_row = T * (3 * config.vocab_size + 20 * config.n_layer * C) \
        + 2 * config.n_layer * config.n_head * T * T
    return 4 * B * per_row + 16 * B * T * cfg.grad_accum


def check_memory(cfg: "TrainConfig", config, device: torch.device) -> None:
    """估计的一步所需内存超过机器可用的内存 → UserError（说出这台机器上 batch_size 的上限）。"""
    free, need = available_memory(device), step_bytes(cfg, config)
    if free is None or need <= free:
        return
    one = step_bytes(TrainConfig(batch_size=1, grad_accum=cfg.grad_accum), config)
    raise UserError(f"批次太大：batch_size={cfg.batch_size}、grad_accum={cfg.grad_accum} "
                    "每步估计要 "
                    f"{need / 2**30:.1f} GiB 内存，这台机器现在可用 {free / 2**30:.1f} GiB；"
                    f"batch_size 最多约 {max(1, free // one)}（需要更大的批次请用 grad_accum）")


class TrainingDiverged(RuntimeError):
    """损失或梯度范数变成了 NaN/inf：再训练下去没有意义。``history`` 里有发散之前的记录。"""

    def __init__(self, step: int, loss: float, lr: float, history: "History"):
        self.step, self.loss, self.history = step, loss, history
        super().__init__(f"训练在第 {step} 步发散：损失 = {loss}（学习率 {lr:.3g}）。通常是学习率"
                         f"太大或预热太短，请调低 lr 或加长 warmup_steps")


def batch_generator(seed: int, step: int, rank: int = 0) -> torch.Generator:
    """第 step 步、第 rank 个进程取批次用的随机数生成器：只由 (seed, step, rank) 决定。"""
    return torch.Generator().manual_seed(((seed * 1_000_003 + step) * 1_009 + rank) % 2**63)


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               batches: list[tuple[torch.Tensor, torch.Tensor]], grad_clip: float = 1.0,
               amp=None, ddp: torch.nn.Module | None = None) -> tuple[float, float]:
    """一步训练：前向 → 损失 → zero_grad(set_to_none) → 反向 → 裁剪 → step。

    ``batches`` 里有 n 个微批次 (x [B, T], y [B, T])：每个的损失先除以 n 再反向，
    梯度累加之后才等于一个 n·B 的大批次的梯度。返回 (平均损失, 裁剪前的全局梯度范数)。
    ``ddp``：做前向的模块（DDP 包装、torch.compile 的结果），参数就是 model 的参数。
    """
    loss, norm = _step(model, optimizer, batches, grad_clip, amp, ddp)
    return loss.item(), norm.item()


def _step(model, optimizer, batches, grad_clip=1.0, amp=None, forward=None,
          shadow: Bf16Weights | None = None,
          objectives: tuple[Objective, ...] = ()) -> tuple[torch.Tensor, torch.Tensor]:
    """train_step 的实现，但损失与范数留在设备上（不做主机同步）。

    ``shadow``：bf16 权重副本（见 :class:`gptcourse.precision.Bf16Weights`），前向与反向在副本上，
    裁剪与 step 在 model 的 fp32 主权重上。
    ``objectives``：辅助目标（见 :mod:`gptcourse.objectives`）。这时 ``forward`` 是
    :class:`~gptcourse.objectives.WithObjectives`，每个微批次是 (x, y, *辅助标签)，返回的损失是
    各项 [1 + n]（第 0 项是语言模型损失）；反向用的是总损失，裁剪也包括辅助头的参数。
    """
    forward = forward if forward is not None else (shadow.low if shadow else model)
    n, mean_loss = len(batches), 0.0
    for i, (x, y, *aux) in enumerate(batches):
        with dist_utils.no_sync(forward, last=i == n - 1):           # 多进程时只在最后一次同步
            with amp if amp is not None else contextlib.nullcontext():
                parts, loss = forward(x, y, *aux)                    # 前向 + 损失
            if i == 0:
                optimizer.zero_grad(set_to_none=True)                # 清掉上一步的梯度
            (loss / n).backward()                                    # 除以 n 才等于大批次
        logged = parts if objectives else loss.detach()              # 语言模型损失（与各项）
        mean_loss = mean_loss + logged.double() / n                  # 与 loss.item() / n 相同
    if shadow is not None:
        shadow.grads_to_master()                                     # bf16 梯度 → fp32 主权重
    max_norm = grad_clip if grad_clip > 0 else float("inf")
    params = [*model.parameters(), *(p for o in objectives for p in o.parameters())]
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)          # 按全局范数裁剪
    optimizer.step()
    if shadow is not None:
        shadow.master_to_low()
    return mean_loss, norm


@torch.no_grad()
def estimate_loss(model: torch.nn.Module, splits: dict[str, torch.Tensor], batch_size: int,
                  block_size: int, n_batches: int = 20, seed: int = 1234,
                  starts: dict[str, torch.Tensor] | None = None,
                  targets: dict[str, torch.Tensor] | None = None) -> dict[str, float]:
    """eval 模式、不求梯度，对每个划分取 n_batches 个固定随机批次的平均损失，之后恢复原来的模式。

    ``starts`` 可以给某些划分指定窗口起点（例如按诗对齐，见 :func:`gptcourse.data.poem_starts`）；
    ``targets`` 给某些划分指定目标序列（−1 = 不算损失，见 :func:`gptcourse.data.get_batch`）。
    """
    device = next(model.parameters()).device
    out = {}
    with eval_mode(model):
        for name, data in splits.items():
            g = torch.Generator().manual_seed(seed)                # 每次评估用同一批窗口
            s, y = (starts or {}).get(name), (targets or {}).get(name)
            losses = [model(*get_batch(data, batch_size, block_size, device, g, s, y))[1].item()
                      for _ in range(n_batches)]
            out[name] = sum(losses) / len(losses)
    return out


def maybe_compile(module: torch.nn.Module, enabled: bool) -> tuple[torch.nn.Module, str]:
    """(做前向的模块, 说明)。torch.compile 是惰性的：真正的编译错误在第一步才出现，见 train。"""
    if not enabled:
        return module, "未编译"
    if torch.device(next(module.parameters()).device).type == "cpu" and \
            not any(shutil.which(c) for c in ("g++", "c++", "clang++")):
        return module, ("torch.compile 在 CPU 上需要 C++ 编译器（g++ / clang++），"
                        "这里没有，改用普通模式")
    try:
        return torch.compile(module), "torch.compile"
    except Exception as e:                                           # 例如 dynamo 不支持这个 Python
        return module, f"torch.compile 不可用（{type(e).__name__}: {e}），改用普通模式"


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def train(model: GPT, train_data: torch.Tensor, val_data: torch.Tensor | None, cfg: TrainConfig,
          optimizer: torch.optim.Optimizer | None = None, start_step: int = 0,
          history: History | None = None, callbacks=(), on_eval=None,
          stop_step: int | None = None, starts: dict[str, torch.Tensor] | None = None,
          targets: dict[str, torch.Tensor] | None = None,
          objectives: list[Objective] | tuple[Objective, ...] = ()) -> History:
    """训练 model，返回 History。``callbacks`` 里的函数在每次评估后调用：fn(step, model, history)。

    ``on_eval(step, val_loss, is_best)`` 用于保存检查点（命令行用它保存 best 与 last）。
    ``start_step`` 从检查点接着训练时用；``stop_step`` 让训练在这一步提前返回（学习率日程
    仍按 max_steps 计算），用来演示"中断 → 存盘 → 续训"。
    按分钟计预算时：预热仍按步数，之后余弦按"预热结束后已用时间 / 剩余预算"走。
    ``starts``：{划分名: 窗口起点}，给出时训练批次与评估都只从这些起点取窗口（按诗对齐）。
    ``targets``：{划分名: 目标序列}，−1 的位置不算损失（以题作诗只学正文，
    见 :mod:`gptcourse.titled`）。
    ``objectives``：训练时的辅助目标（:mod:`gptcourse.objectives`，例如韵部与平仄）：总损失 =
    语言模型损失 + Σ 权重 × 辅助损失；它们的头放进优化器（给出的 optimizer 里没有时自动加一组），
    一起裁剪，但不属于 model，训练完就扔掉。每步的 ``loss`` 记语言模型损失，``aux`` 记各辅助损失；
    评估只算语言模型损失（与不加辅助目标时可比），另记验证集上的 ``aux_<名字>``。
    在 torchrun 下自动用 DistributedDataParallel：每个进程取不同的批次，只有 0 号进程评估与记录。
    损失或梯度范数出现 NaN/inf 时抛出 :class:`TrainingDiverged`（最多晚 log_interval 步发现）。
    """
    history = history if history is not None else History()
    run = _Run(model, cfg, optimizer, objectives, history)     # 优化器、bf16、编译、辅助头
    T, rank = model.config.block_size, dist_utils.rank()
    splits = {"train": train_data} | ({"val": val_data} if val_data is not None else {})
    _check_labels(run.objectives, splits)
    total = cfg.max_steps if cfg.max_steps is not None else 10**9
    end = min(total, stop_step) if stop_step is not None else total
    budget_s = cfg.max_minutes * 60 if cfg.max_minutes is not None else None
    schedule = _Schedule(cfg, total, budget_s)
    log = _Log(history, cfg, start_step, run.objectives, tokens_per_step(cfg, T))
    t_start, elapsed = time.perf_counter(), 0.0
    step, stop = start_step, start_step >= end
    model.train()
    for o in run.objectives:
        o.train()
    while not stop:
        lr = schedule(step, elapsed)                            # 预热 + 余弦（见 optim.lr_at）
        for group in run.optimizer.param_groups:
            group["lr"] = lr
        gens = [batch_generator(cfg.seed, step, rank) for _ in range(1 + len(run.objectives))]
        batches = _batches(train_data, "train", gens, cfg.grad_accum, cfg.batch_size, T,
                           run.device, starts, targets, run.objectives)   # 每个进程、每一步各不相同
        loss, norm = run.step(batches, first=step == start_step)   # 损失与范数留在设备上
        step += 1
        log.add(step, loss, lr, norm)
        stop = step >= end
        if budget_s is not None:               # 所有进程用 0 号进程的时钟：学习率与停止一致
            elapsed = dist_utils.from_rank0(time.perf_counter() - t_start)
            stop = stop or elapsed >= budget_s
        at_eval = step % cfg.eval_interval == 0 or stop
        if at_eval or step % cfg.log_interval == 0:                   # 各进程在同样的步取回
            log.flush()
        if rank == 0 and at_eval:
            losses = run.evaluate(splits, starts, targets)
            is_best = log.evaluated(step, losses, lr, time.perf_counter() - t_start)
            if on_eval is not None:
                on_eval(step, losses.get("val"), is_best)
            for fn in callbacks:
                fn(step, model, history)
            log.restart()                       # 评估的时间不算进训练吞吐
    log.close()
    return history


# ---------------------------------------------------------------- train() 的零件
class _Run:
    """train() 开始前的准备，以及之后每一步、每次评估都要用的东西：检查内存，把辅助头放进优化器，
    决定 bf16（autocast 或 bf16 权重副本）与要不要 torch.compile，记进 ``history.info``。"""

    def __init__(self, model: GPT, cfg: TrainConfig, optimizer, objectives, history: History):
        self.model, self.cfg, self.history = model, cfg, history
        self.device = device = next(model.parameters()).device
        check_memory(cfg, model.config, device)                   # 分配之前：批次放得下吗
        self.objectives = tuple(o.to(device) for o in objectives)
        self.optimizer = optimizer or make_optimizer(model, cfg.lr, cfg.weight_decay, cfg.betas,
                                                     cfg.optimizer)
        _add_heads(self.optimizer, self.objectives, cfg.weight_decay)
        use_bf16, reason = resolve_bf16(cfg.bf16, device)
        shadow = Bf16Weights(model) if use_bf16 and cfg.bf16_mode == "weights" else None
        if shadow is not None and (dist_utils.world_size() > 1 or self.objectives):
            raise UserError("bf16_mode='weights' 还不支持多进程（DDP）和辅助目标，请用 'autocast'")
        self.shadow, self.amp = shadow, torch.autocast(device.type, dtype=torch.bfloat16,
                                                       enabled=use_bf16 and shadow is None)
        self.with_heads = WithObjectives(model, list(self.objectives))  # (x, y, *标签) → 损失
        self.base = dist_utils.wrap(self.with_heads if self.objectives
                                    else shadow.low if shadow else model)
        self.forward, compiled = maybe_compile(self.base, cfg.compile)
        history.info = {"bf16": use_bf16, "bf16_reason": reason,
                        "bf16_mode": cfg.bf16_mode if use_bf16 else None, "compiled": compiled}
        if dist_utils.rank() == 0 and cfg.compile:  # bf16 的决定与理由在 info（命令行会打印）
            _say(f"编译：{compiled}")

    def step(self, batches, first: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """一步训练（:func:`_step`）。编译出的模块只在第一次运行时失败才退回普通模式重走这一步。"""
        try:
            return self._step(batches)
        except Exception as e:
            if self.forward is self.base or not first:
                raise
            why = " ".join(str(e).split())[:200]         # 一行：torch 的报错常有好几行
            self.forward, self.history.info["compiled"] = self.base, (
                f"torch.compile 第一步失败（{type(e).__name__}: {why}），改用普通模式")
            _say(self.history.info["compiled"])
            return self._step(batches)

    def _step(self, batches):
        return _step(self.model, self.optimizer, batches, self.cfg.grad_clip, self.amp,
                     self.forward, self.shadow, self.objectives)

    def evaluate(self, splits, starts, targets) -> dict[str, float]:
        """各划分的语言模型损失；有辅助目标时再加验证集上的 ``aux_<名字>``。"""
        cfg, T = self.cfg, self.model.config.block_size
        losses = estimate_loss(self.model, splits, cfg.batch_size, T, cfg.eval_batches,
                               starts=starts, targets=targets)
        if self.objectives and "val" in splits:
            losses |= estimate_objectives(self.with_heads, splits["val"], cfg.batch_size,
                                          cfg.eval_batches, starts=starts, targets=targets)
        return losses


class _Schedule:
    """第 step 步的学习率。按步数计预算：就是 :func:`~gptcourse.optim.lr_at`。按分钟计预算：
    预热仍按步数，之后余弦按"预热结束后已用时间 / 剩余预算"走。"""

    def __init__(self, cfg: TrainConfig, total: int, budget_s: float | None):
        self.cfg, self.total, self.budget_s = cfg, total, budget_s
        self.t_warm: float | None = None                            # 预热结束的时刻

    def __call__(self, step: int, elapsed: float) -> float:
        cfg = self.cfg
        if self.budget_s is None or step < cfg.warmup_steps:
            return lr_at(step, cfg.lr, cfg.warmup_steps, self.total, cfg.min_lr_ratio)
        self.t_warm = elapsed if self.t_warm is None else self.t_warm  # 按时间计预算的余弦段
        return cosine_lr((elapsed - self.t_warm) / max(1e-9, self.budget_s - self.t_warm),
                         cfg.lr, cfg.min_lr_ratio)


class _Log:
    """训练的记录与进度条。每步的 (损失, 范数) 先留在设备上（:meth:`add`），:meth:`flush` 时
    一次取回写进 ``history.steps``（一次主机同步）；:meth:`evaluated` 记一次评估。
    发现 NaN/inf 就抛出 :class:`TrainingDiverged`。"""

    def __init__(self, history: History, cfg: TrainConfig, start_step: int, objectives,
                 per_step: int):
        self.history, self.progress, self.per_step = history, cfg.progress, per_step
        self.names = [o.name for o in objectives]
        self.bar = tqdm(total=cfg.max_steps, initial=start_step,
                        disable=not cfg.progress or dist_utils.rank() != 0,
                        desc="训练", unit="步", dynamic_ncols=True)
        self.best = min((e["val"] for e in history.evals if "val" in e), default=float("inf"))
        self.pending: list[tuple] = []          # 还没取回的 (step, 损失, lr, 范数)，都在设备上
        self.restart()

    def restart(self) -> None:
        self.t_mark = time.perf_counter()       # 这一段（上次取回之后）开始的时刻

    def add(self, step: int, loss: torch.Tensor, lr: float, norm: torch.Tensor) -> None:
        self.pending.append((step, loss, lr, norm))
        self.bar.update(1)

    def flush(self) -> None:
        if not self.pending:
            return
        values = torch.stack([torch.cat([lo.reshape(-1), no.double().reshape(1)])
                              for _, lo, _, no in self.pending]).tolist()
        tps = self.per_step * len(self.pending) / max(1e-9, time.perf_counter() - self.t_mark)
        for (s, _, lr, _), (lo, *aux, no) in zip(self.pending, values):
            extra = {"aux": dict(zip(self.names, aux))} if self.names else {}
            self.history.steps.append({"step": s, "loss": lo, "lr": lr, "grad_norm": no,
                                       "tokens_per_s": tps, **extra})
            if not (math.isfinite(lo) and math.isfinite(no)):
                self.pending.clear()
                self.bar.close()
                raise TrainingDiverged(s, lo if not math.isfinite(lo) else no, lr, self.history)
        self.pending.clear()
        row = self.history.steps[-1]
        self.bar.set_postfix(loss=f"{row['loss']:.3f}", lr=f"{row['lr']:.2e}", tok_s=f"{tps:,.0f}")
        self.restart()

    def evaluated(self, step: int, losses: dict[str, float], lr: float, elapsed_s: float) -> bool:
        """记一次评估（有 NaN/inf → TrainingDiverged），返回验证损失是否创新低。"""
        self.history.evals.append({"step": step, **losses, "elapsed_s": elapsed_s})
        bad = [v for v in losses.values() if not math.isfinite(v)]
        if bad:
            self.bar.close()
            raise TrainingDiverged(step, bad[0], lr, self.history)
        is_best = "val" in losses and losses["val"] < self.best
        self.best = min(self.best, losses.get("val", self.best))
        if self.progress:
            self.bar.write(f"step {step:5d} | "
                           + " | ".join(f"{k} {v:.4f}" for k, v in losses.items()))
        return is_best

    def close(self) -> None:
        self.bar.close()


def _check_labels(objectives, splits: dict[str, torch.Tensor]) -> None:
    """每个辅助目标都要有每个划分的标签，而且与那个划分的 id 序列一样长 → 否则 UserError
    （而不是取批次时的 KeyError / 越界）。"""
    for o in objectives:
        for split, data in splits.items():
            labels = getattr(o, "labels", {}).get(split)
            if labels is None:
                raise UserError(f"辅助目标 {o.name} 没有 {split} 划分的标签：objectives.build 的"
                                f" splits 里要有 {split!r}（给了 val_data 就要给 val）")
            if labels.shape[:1] != data.shape[:1]:
                raise UserError(f"辅助目标 {o.name} 的 {split} 标签有 {labels.shape[0]} 个，"
                                f"数据有 {data.shape[0]} 个词元：标签要按同一段数据来算")


def _batches(data, split, gens, n, batch_size, T, device, starts, targets, objectives):
    """n 个微批次 (x, y, *辅助标签)；gens[0] 取 (x, y)，gens[1:] 是与它同种子的生成器。

    辅助标签用同样的起点再取一次（``get_batch`` 的 targets 换成标签序列），所以和 y 一样错一位：
    第 t 个位置的标签属于第 t + 1 个字。"""
    s, out = (starts or {}).get(split), []
    for _ in range(n):
        x, y = get_batch(data, batch_size, T, device, gens[0], s, (targets or {}).get(split))
        aux = [get_batch(data, batch_size, T, device, g, s, o.labels[split])[1]
               for g, o in zip(gens[1:], objectives)]
        out.append((x, y, *aux))
    return out


@torch.no_grad()
def estimate_objectives(with_heads: WithObjectives, val_data: torch.Tensor, batch_size: int,
                        n_batches: int = 20, seed: int = 1234, starts=None,
                        targets=None) -> dict[str, float]:
    """验证集上各辅助目标的平均损失 {"aux_<名字>": …}：eval 模式，与 estimate_loss 同样的窗口。"""
    objectives = tuple(with_heads.objectives)
    gens = [torch.Generator().manual_seed(seed) for _ in range(1 + len(objectives))]
    batches = _batches(val_data, "val", gens, n_batches, batch_size,
                       with_heads.model.config.block_size, next(with_heads.parameters()).device,
                       starts, targets, objectives)
    with eval_mode(with_heads):
        sums = sum(with_heads(*batch)[0][1:].double() for batch in batches)
    return {f"aux_{o.name}": v / n_batches for o, v in zip(objectives, sums.tolist())}


def _add_heads(optimizer, objectives, weight_decay: float) -> None:
    """把辅助头里还不在优化器中的参数加成一组（矩阵衰减、偏置不衰减，与模型同样的分组规则）。"""
    known = {id(p) for g in optimizer.param_groups for p in g["params"]}
    for group in param_groups(torch.nn.ModuleList(objectives), weight_decay):
        group["params"] = [p for p in group["params"] if id(p) not in known]
        if group["params"]:
            optimizer.add_param_group(group)
