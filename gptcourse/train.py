"""训练循环：AdamW 参数分组、预热 + 余弦衰减、梯度裁剪、梯度累积、估计损失、进度条。

一步训练的顺序：前向 → 损失 → zero_grad(set_to_none) → 反向 → 裁剪 → step。
同一台机器、同一个种子 → 同一条损失曲线（按步数计预算时）。
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import torch
from tqdm.auto import tqdm

from .data import get_batch
from .model import GPT
from .runtime import get_device
from . import distributed as dist_utils


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
        if self.grad_accum < 1 or self.batch_size < 1:
            raise ValueError("batch_size 与 grad_accum 必须 ≥ 1")


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


def lr_at(progress_step: float, max_lr: float, warmup: float, total: float,
          min_lr_ratio: float = 0.1) -> float:
    """线性预热到 max_lr，再余弦衰减到 max_lr × min_lr_ratio。步数可以是小数（按时间计预算时）。"""
    min_lr = max_lr * min_lr_ratio
    if progress_step < warmup:
        return max_lr * (progress_step + 1) / (warmup + 1)
    if progress_step >= total:
        return min_lr
    ratio = (progress_step - warmup) / max(1e-9, total - warmup)        # 0 → 1
    return min_lr + 0.5 * (1 + math.cos(math.pi * ratio)) * (max_lr - min_lr)


@torch.no_grad()
def estimate_loss(model: torch.nn.Module, splits: dict[str, torch.Tensor], batch_size: int,
                  block_size: int, n_batches: int = 20, seed: int = 1234) -> dict[str, float]:
    """eval 模式、不求梯度，对每个划分取 n_batches 个固定随机批次的平均损失，然后切回 train。"""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out = {}
    for name, data in splits.items():
        g = torch.Generator().manual_seed(seed)                    # 每次评估用同一批窗口
        losses = [model(*get_batch(data, batch_size, block_size, device, g))[1].item()
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

    @property
    def best_val(self) -> float:
        vals = [e["val"] for e in self.evals if "val" in e]
        return min(vals) if vals else float("nan")


def train(model: GPT, train_data: torch.Tensor, val_data: torch.Tensor | None, cfg: TrainConfig,
          optimizer: torch.optim.Optimizer | None = None, start_step: int = 0,
          history: History | None = None, callbacks=(), on_eval=None) -> History:
    """训练 model，返回 History。``callbacks`` 里的函数在每次评估后调用：fn(step, model, history)。

    ``on_eval(step, val_loss, is_best)`` 用于保存检查点（命令行用它保存 best 与 last）。
    在 torchrun 下自动用 DistributedDataParallel：每个进程取不同的批次，只有 0 号进程记录。
    """
    device = next(model.parameters()).device
    ddp = dist_utils.wrap(model)                                     # 单进程时就是 model 本身
    rank, world = dist_utils.rank(), dist_utils.world_size()
    optimizer = optimizer or make_optimizer(model, cfg.lr, cfg.weight_decay, cfg.betas)
    history = history or History()
    use_bf16 = bf16_is_faster(device) if cfg.bf16 == "auto" else bool(cfg.bf16)
    amp = torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16)
    T = model.config.block_size
    gen = torch.Generator().manual_seed(cfg.seed * 1000 + rank)     # 每个进程不同的批次
    splits = {"train": train_data} | ({"val": val_data} if val_data is not None else {})
    total = cfg.max_steps if cfg.max_steps is not None else 10**9
    tokens_per_step = cfg.batch_size * T * cfg.grad_accum * world
    budget_s = cfg.max_minutes * 60 if cfg.max_minutes is not None else None
    bar = tqdm(total=cfg.max_steps, initial=start_step, disable=not cfg.progress or rank != 0,
               desc="训练", unit="步", dynamic_ncols=True)
    best = min((e["val"] for e in history.evals if "val" in e), default=float("inf"))
    t_start = time.perf_counter()
    step = start_step
    warm_frac = 0.0
    model.train()
    while step < total:
        elapsed = time.perf_counter() - t_start
        if budget_s is not None and dist_utils.any_rank(elapsed >= budget_s):
            break
        if budget_s is None:
            lr = lr_at(step, cfg.lr, cfg.warmup_steps, total, cfg.min_lr_ratio)
        else:                          # 按时间计预算：预热按步数，之后按"已用时间占比"走余弦
            if step < cfg.warmup_steps:
                warm_frac = elapsed / budget_s
            frac = min(1.0, (elapsed / budget_s - warm_frac) / max(1e-9, 1 - warm_frac))
            lr = lr_at(cfg.warmup_steps + frac * 1000 if step >= cfg.warmup_steps else step,
                       cfg.lr, cfg.warmup_steps, cfg.warmup_steps + 1000, cfg.min_lr_ratio)
        for group in optimizer.param_groups:
            group["lr"] = lr
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for micro in range(cfg.grad_accum):
            x, y = get_batch(train_data, cfg.batch_size, T, device, gen)
            with dist_utils.no_sync(ddp, last=micro == cfg.grad_accum - 1), amp:
                _, loss = ddp(x, y)
                (loss / cfg.grad_accum).backward()                  # 除以微批次数才等于大批次
            loss_sum += loss.item() / cfg.grad_accum
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(),
                                              cfg.grad_clip if cfg.grad_clip > 0 else float("inf"))
        optimizer.step()
        step += 1
        dt = time.perf_counter() - t0
        row = {"step": step, "loss": loss_sum, "lr": lr, "grad_norm": float(norm),
               "tokens_per_s": tokens_per_step / dt}
        history.steps.append(row)
        bar.update(1)
        bar.set_postfix(loss=f"{loss_sum:.3f}", lr=f"{lr:.2e}", tok_s=f"{row['tokens_per_s']:,.0f}")
        last = step >= total or (budget_s is not None
                                 and time.perf_counter() - t_start >= budget_s)
        if step % cfg.eval_interval == 0 or last:
            if rank == 0:
                losses = estimate_loss(model, splits, cfg.batch_size, T, cfg.eval_batches)
                history.evals.append({"step": step, **losses,
                                      "elapsed_s": time.perf_counter() - t_start})
                is_best = "val" in losses and losses["val"] < best
                best = min(best, losses.get("val", best))
                bar.write(f"step {step:5d} | " + " | ".join(f"{k} {v:.4f}"
                                                            for k, v in losses.items()))
                if on_eval is not None:
                    on_eval(step, losses.get("val"), is_best)
                for fn in callbacks:
                    fn(step, model, history)
    bar.close()
    return history


# ---------------------------------------------------------------- 命令行：python -m gptcourse train
def cli_arguments(p) -> None:
    from .config import preset_names
    from .data import available_corpora
    p.add_argument("--corpus", default="tang_jinti", choices=available_corpora())
    p.add_argument("--preset", default="course", choices=preset_names())
    p.add_argument("--out", required=True, help="检查点路径（另存 <名>.best.pt 与 <名>.last.pt）")
    p.add_argument("--minutes", type=float, default=None, help="墙钟预算（分钟）")
    p.add_argument("--steps", type=int, default=None, help="步数预算")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--block-size", type=int, default=None, help="覆盖预设的上下文长度")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--dropout", type=float, default=None, help="覆盖预设的全部 dropout")
    p.add_argument("--eval-interval", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-bf16", action="store_true", help="关闭 bf16 自动混合精度")
    p.add_argument("--bf16", action="store_true", help="强制使用 bf16（不做测速判断）")
    p.add_argument("--half", action="store_true", help="以 bf16 存储权重（文件减半）")
    p.add_argument("--no-progress", action="store_true")


def cli_main(args) -> int:
    import json
    from pathlib import Path

    from . import checkpoint
    from .config import preset
    from .data import load_corpus
    from .runtime import set_seed
    from .tokenizer import CharTokenizer

    if args.minutes is None and args.steps is None:
        raise ValueError("请用 --minutes 或 --steps 给出训练预算")
    dist_utils.init()
    rank = dist_utils.rank()
    set_seed(args.seed)
    corpus = load_corpus(args.corpus)
    tok = CharTokenizer.from_text(corpus.train)
    overrides = {"vocab_size": tok.vocab_size}
    if args.block_size:
        overrides["block_size"] = args.block_size
    if args.dropout is not None:
        overrides.update(dropout=args.dropout, attn_dropout=args.dropout,
                         resid_dropout=args.dropout)
    cfg = preset(args.preset, **overrides)
    device = get_device()
    model = GPT(cfg).to(device)
    train_ids = torch.tensor(tok.encode(corpus.train), dtype=torch.long)
    val_ids = torch.tensor(tok.encode(corpus.val, errors="unk"), dtype=torch.long)
    bf16 = False if args.no_bf16 else (True if args.bf16 else "auto")
    tcfg = TrainConfig(batch_size=args.batch_size, lr=args.lr, warmup_steps=args.warmup,
                       max_steps=args.steps, max_minutes=args.minutes, grad_accum=args.grad_accum,
                       eval_interval=args.eval_interval, seed=args.seed, bf16=bf16,
                       progress=not args.no_progress)
    out = Path(args.out)
    best_path, last_path = out.with_suffix(".best.pt"), out.with_suffix(".last.pt")
    optimizer = make_optimizer(model, tcfg.lr, tcfg.weight_decay, tcfg.betas)
    history = History()
    used_bf16 = bf16_is_faster(device) if bf16 == "auto" else bf16
    meta = {"corpus": args.corpus, "preset": args.preset, "train_config": asdict(tcfg),
            "bf16": used_bf16, "world_size": dist_utils.world_size(),
            "command": "python -m gptcourse train " + " ".join(_argv_of(args))}
    if rank == 0:
        n = sum(p.numel() for p in model.parameters())
        print(f"模型 {args.preset}：{n:,} 个参数；词表 {tok.vocab_size}；设备 {device.type}；"
              f"bf16={'开' if used_bf16 else '关'}；进程数 {dist_utils.world_size()}")

    def on_eval(step, val, is_best):
        m = {**meta, "val_loss": val, "history": history.to_dict()}
        checkpoint.save(last_path, model, tok, optimizer=optimizer, step=step, meta=m)
        if is_best:
            checkpoint.save(best_path, model, tok, step=step, meta=m, half=args.half)

    t0 = time.perf_counter()
    history = train(model, train_ids, val_ids, tcfg, optimizer=optimizer, history=history,
                    on_eval=on_eval)
    wall = time.perf_counter() - t0
    if rank == 0:
        steps = history.steps[-1]["step"] if history.steps else 0
        tokens = steps * tcfg.batch_size * cfg.block_size * tcfg.grad_accum * \
            dist_utils.world_size()
        summary = {"steps": steps, "tokens": tokens, "wall_s": round(wall, 1),
                   "tokens_per_s": round(tokens / wall), "best_val_loss": history.best_val}
        # 发布用的文件 = 验证损失最好的那一版（只含权重，不含优化器状态）
        if best_path.exists():
            model_best, _, _ = checkpoint.load(best_path)
            checkpoint.save(out, model_best, tok, step=steps,
                            meta={**meta, **summary, "history": history.to_dict()},
                            half=args.half)
        print("训练完成：" + json.dumps(summary, ensure_ascii=False))
    dist_utils.cleanup()
    return 0


def _argv_of(args) -> list[str]:
    import sys
    return sys.argv[2:] if len(sys.argv) > 2 and sys.argv[1] == "train" else []
