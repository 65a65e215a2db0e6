"""命令行 ``python -m gptcourse train``：在语料上训练、保存 best/last 检查点、打印总结。

    python -m gptcourse train --corpus tang_jinti --preset course --minutes 10 --out ckpt/course.pt
    torchrun --nproc_per_node=2 -m gptcourse train ...      # 同一个入口，多进程 DDP

只有 0 号进程写检查点与打印。
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

from .. import checkpoint, objectives, titled, verse
from .. import distributed as dist_utils
from ..config import MAX_BLOCK_SIZE, preset, preset_names
from ..data import available_corpora, load_corpus, poem_starts, vocabulary_text
from ..errors import UserError
from ..generate import sample_poems
from ..model import GPT
from ..precision import resolve_bf16
from ..runtime import get_device, set_seed
from ..tokenizer import CharTokenizer
from ..train import History, TrainConfig, TrainingDiverged, make_optimizer, train

# 编译要先花一段时间（算在训练时间里），之后每步快一点：训练超过这么多步才划算。
# 门槛 = 编译多花的秒数 ÷ 每步省下的秒数：inductor 磁盘缓存是冷的时候多花 26 秒（2026-12-01，
# Intel Xeon 2 核，清空 /tmp/torchinductor_* 后实测），每步省 52 ms（docs/benchmarks.md 训练一节）
# → 约 490 步。缓存热的时候只多花几秒，门槛更低；按冷缓存定，宁可少编译。
COMPILE_MIN_STEPS = 500
MAX_PROBE_POEMS = 1000          # --probe-poems 的上限：每次评估都要采样这么多首


def compile_pays(steps: int | None, minutes: float | None) -> bool:
    """``--compile`` 没给时：按步数（或按分钟数估算的步数）是否超过实测的门槛决定。"""
    if steps is not None:
        return steps >= COMPILE_MIN_STEPS
    return minutes is not None and minutes >= 3            # 3 分钟 ≈ 门槛步数（2 核 CPU）


def cli_arguments(p) -> None:
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
    p.add_argument("--bf16", action="store_true", help="强制用 bf16（默认看硬件是否支持）")
    p.add_argument("--bf16-mode", choices=("autocast", "weights"), default="autocast",
                   help="bf16 的做法：autocast，或 weights = bf16 权重 + fp32 主权重")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="用 torch.compile 加速训练（先编译约一分钟；失败时自动退回普通模式）。"
                        f"默认：步数 ≥ {COMPILE_MIN_STEPS} 时编译"
                        "（实测的门槛，见 docs/benchmarks.md）")
    p.add_argument("--eval-batches", type=int, default=20, help="每次评估每个划分取多少个批次")
    p.add_argument("--half", action="store_true", help="以 bf16 存储权重（文件减半）")
    p.add_argument("--windows", choices=("poem", "random"), default="poem",
                   help="训练窗口的起点：poem = 每首诗前的换行符（默认，与生成时一致）；"
                        "random = 任意位置")
    p.add_argument("--probe-poems", type=int, default=0,
                   help="每次评估时采样这么多首诗，记下诗体合格率、押韵率与平仄"
                        "（训练曲线，存进 meta）")
    p.add_argument("--init", default=None, metavar="检查点",
                   help="从这个检查点的权重开始（微调）；词表与模型结构取自它，--preset 不起作用")
    p.add_argument("--titled", action="store_true",
                   help="以题作诗：训练文本是 《题》正文，只在正文上算损失；"
                        "验证集只用训练集里没有的题目（只用于 tang_jinti）")
    p.add_argument("--untitled-every", type=int, default=2, metavar="K",
                   help="--titled 时每 K 首里有一首不带题目（默认 2：一半；0 = 全带题目），"
                        "这样不给题目时模型照样会写")
    p.add_argument("--aux", default=None, metavar="rhyme=0.3,norepeat",
                   help="训练时的辅助目标（逗号分开，可写 名字=权重）：rhyme = 在韵脚前一个位置"
                        "预测韵部，tones = 在讲平仄的位置前预测平/仄，norepeat = 压低本诗用过的"
                        "韵脚字（不重韵）；头只在训练时用，不存进检查点")
    p.add_argument("--aux-weight", type=float, default=1.0,
                   help="没写权重的辅助目标的权重 λ：总损失 = 语言模型损失 + Σ λ × 辅助损失"
                        "（默认 1）")
    p.add_argument("--snapshots", default=None, metavar="目录",
                   help="每次评估后把当时的权重另存到这个目录（step_000250.pt……，meta 里记训练"
                        "墙钟 wall_s）：画学习曲线、量“多久训练到目标损失”用")
    p.add_argument("--no-progress", action="store_true")
    # 测试用：每个进程把最终权重的哈希和本进程的损失写进这个目录（检查 DDP 各进程是否一致）
    p.add_argument("--dump-rank-state", default=None, help=argparse.SUPPRESS)


def cli_main(args) -> int:
    if args.minutes is None and args.steps is None:
        raise UserError("请用 --minutes 或 --steps 给出训练预算")
    if args.no_bf16 and args.bf16:
        raise UserError("--bf16 与 --no-bf16 不能同时给出")
    if not math.isfinite(args.lr) or args.lr <= 0:
        raise UserError(f"需要 lr > 0 的有限数，收到 lr={args.lr}")
    if args.block_size is not None and not 1 <= args.block_size <= MAX_BLOCK_SIZE:
        raise UserError(f"block_size 必须在 [1, {MAX_BLOCK_SIZE}] 之内，收到 {args.block_size}")
    if not 0 <= args.probe_poems <= MAX_PROBE_POEMS:          # 每次评估都采样这么多首
        raise UserError(f"--probe-poems 必须在 [0, {MAX_PROBE_POEMS}] 之内，"
                        f"收到 {args.probe_poems}")
    aux_names = objectives.parse(args.aux)
    if not (math.isfinite(args.aux_weight) and 0 < args.aux_weight <= objectives.MAX_WEIGHT):
        raise UserError(f"--aux-weight 必须在 (0, {objectives.MAX_WEIGHT:g}] 之内，"
                        f"收到 {args.aux_weight}")
    out = checkpoint.check_writable(args.out)              # 训练之前就确认能写，而不是训练之后
    snapshots = None if args.snapshots is None else Path(args.snapshots)
    if snapshots is not None:
        snapshots.mkdir(parents=True, exist_ok=True)
        checkpoint.check_writable(snapshots / "step_000000.pt")
    _refuse_overwriting_init(args.init, out)               # 不覆盖训练的起点
    bf16 = False if args.no_bf16 else (True if args.bf16 else "auto")
    tcfg = TrainConfig(batch_size=args.batch_size, lr=args.lr, warmup_steps=args.warmup,
                       max_steps=args.steps, max_minutes=args.minutes, grad_accum=args.grad_accum,
                       eval_interval=args.eval_interval, seed=args.seed, bf16=bf16,
                       progress=not args.no_progress, bf16_mode=args.bf16_mode,
                       compile=compile_pays(args.steps, args.minutes) if args.compile is None
                       else args.compile,
                       eval_batches=args.eval_batches)            # 先检查参数，再做耗时的事
    dist_utils.init()
    rank = dist_utils.rank()
    set_seed(args.seed)
    if args.titled and args.corpus != "tang_jinti":
        raise UserError("--titled 只用于 tang_jinti（题目来自 data/tang_jinti_meta.tsv）")
    corpus = load_corpus(args.corpus)
    device = get_device()
    if args.init is not None:                   # 微调：词表和结构都来自起点检查点
        if args.block_size is not None or args.dropout is not None:
            raise UserError("--init 时模型结构取自检查点，不能再给 --block-size / --dropout")
        model, tok, init_meta = checkpoint.load(args.init, eval_mode=False)
        cfg, model = model.config, model.to(device)
    else:
        tok = CharTokenizer.from_text(vocabulary_text(corpus))  # 训练集正文 + 标题 + 《》
        overrides = {"vocab_size": tok.vocab_size}
        if args.block_size is not None:
            overrides["block_size"] = args.block_size
        if args.dropout is not None:
            overrides.update(dropout=args.dropout, attn_dropout=args.dropout,
                             resid_dropout=args.dropout)
        cfg = preset(args.preset, **overrides)
        model = GPT(cfg).to(device)
    targets = None
    if args.titled:                             # 《题》正文，题目那几个位置不算损失
        if args.untitled_every < 0:
            raise UserError(f"--untitled-every 必须 ≥ 0，收到 {args.untitled_every}")
        train_ids, train_y = titled.encode(titled.rows("train"), tok,
                                           untitled_every=args.untitled_every)
        val_ids, val_y = titled.encode(titled.rows("val"), tok, errors="unk")
        targets = {"train": train_y, "val": val_y}
    else:
        train_ids = torch.tensor(tok.encode(corpus.train), dtype=torch.long)
        val_ids = torch.tensor(tok.encode(corpus.val, errors="unk"), dtype=torch.long)
    starts = None
    if args.windows == "poem":              # 窗口从换行符开始：模型总能看到整首诗的上文
        starts = {name: poem_starts(ids, tok.eos_id, cfg.block_size)
                  for name, ids in (("train", train_ids), ("val", val_ids))}
    aux = objectives.build(aux_names, {"train": train_ids, "val": val_ids}, tok, cfg.n_embd,
                           args.aux_weight)            # 只在训练时用的头，不进检查点
    best_path, last_path = out.with_suffix(".best.pt"), out.with_suffix(".last.pt")
    optimizer = make_optimizer(model, tcfg.lr, tcfg.weight_decay, tcfg.betas)
    history = History()
    used_bf16, bf16_reason = resolve_bf16(bf16, device)          # 只看硬件能力，每次都一样
    meta = {"corpus": args.corpus, "preset": args.preset, "train_config": asdict(tcfg),
            "bf16": used_bf16, "windows": args.windows, "world_size": dist_utils.world_size(),
            "command": _command(args), "titled": args.titled,
            **({"aux": {o.name: o.weight for o in aux}} if aux else {}),
            **({"init": {"checkpoint": str(args.init), "step": init_meta.get("step"),
                         "val_loss": init_meta.get("val_loss")}} if args.init else {})}
    if rank == 0:
        n = sum(p.numel() for p in model.parameters())
        print(f"模型 {args.preset}：{n:,} 个参数；词表 {tok.vocab_size}；设备 {device.type}；"
              f"bf16={'开' if used_bf16 else '关'}（{bf16_reason}）；"
              f"进程数 {dist_utils.world_size()}")

    written: dict = {}                                 # 这次训练写出的 best（不是以前留下的）

    def on_eval(step, val, is_best):                  # 只在 0 号进程上被调用
        m = {**meta, "val_loss": val, "history": history.to_dict()}
        checkpoint.save(last_path, model, tok, optimizer=optimizer, step=step, meta=m)
        if is_best:
            checkpoint.save(best_path, model, tok, step=step, meta=m, half=args.half)
            written["best"] = step
        if snapshots is not None:                     # 学习曲线：这一刻的权重，连同训练墙钟
            checkpoint.save(snapshots / f"step_{step:06d}.pt", model, tok, step=step,
                            meta={"val_loss": val, "wall_s": round(time.perf_counter() - t0, 1),
                                  "command": meta["command"]})

    t0 = time.perf_counter()
    probes: list[dict] = []
    meta["probe"] = probes

    def probe(step, model_, history_):               # 训练曲线：自由采样的诗写得像不像、押不押韵
        if args.probe_poems < 1 or rank != 0:
            return
        poems = sample_poems(model_, tok, args.probe_poems, seed=10_000, temperature=0.8)
        rhyme, tonal = verse.rates(poems)
        probes.append({"step": step, "tokens": step * tcfg.batch_size * cfg.block_size
                       * tcfg.grad_accum * dist_utils.world_size(),
                       "wall_s": round(time.perf_counter() - t0, 1),
                       "val_loss": history_.evals[-1].get("val") if history_.evals else None,
                       "form_rate": sum(map(verse.is_valid_form, poems)) / len(poems),
                       "rhyme_rate": rhyme, "repeated_rate": verse.repeated_rhyme_rate(poems),
                       "tonal_share": tonal})

    diverged = interrupted = None
    try:
        history = train(model, train_ids, val_ids, tcfg, optimizer=optimizer, history=history,
                        on_eval=on_eval, starts=starts, targets=targets, callbacks=[probe],
                        objectives=aux)
    except TrainingDiverged as e:               # 发散：留下发散之前最好的那一版（若有）
        diverged, history = e, e.history
    except KeyboardInterrupt:                   # Ctrl+C：同上，一行说明，退出码 130
        interrupted = "已中断（Ctrl+C）"
    wall = time.perf_counter() - t0
    steps = history.steps[-1]["step"] if history.steps else 0
    if args.dump_rank_state:
        _dump_rank_state(Path(args.dump_rank_state), rank, model, history)
    failed, code = (f"错误：{diverged}", 1) if diverged is not None else (interrupted, 130)
    if rank == 0 and "best" not in written:       # 这次训练没有写出过 best：不拿以前留下的充数
        why = "在那之前没有一次有限的验证损失" if diverged is not None else "还没有评估过一次"
        stale = f"（{best_path.name} 是以前的训练留下的，没有动它）" if best_path.exists() else ""
        print(f"{failed or '错误：训练结束'}。{why}，所以没有写出检查点 {out}{stale}",
              file=sys.stderr)
        dist_utils.cleanup()
        return code if failed else 1
    if rank == 0:
        tokens = steps * tcfg.batch_size * cfg.block_size * tcfg.grad_accum * \
            dist_utils.world_size()
        summary = {"steps": steps, "tokens": tokens, "wall_s": round(wall, 1),
                   "tokens_per_s": round(tokens / wall), "best_val_loss": history.best_val}
        if diverged is not None:
            summary["diverged_at_step"] = diverged.step
        if interrupted:
            summary["interrupted"] = True
        # 发布用的文件 = 验证损失最好的那一版（只含权重，不含优化器状态）
        model_best, _, _ = checkpoint.load(best_path)
        checkpoint.save(out, model_best, tok, step=steps,
                        meta={**meta, **summary, "history": history.to_dict()}, half=args.half)
        if failed:
            when = "发散" if diverged is not None else "中断"
            print(f"{failed}。已把{when}之前验证损失最好的检查点写到 {out}"
                  f"（第 {written['best']} 步）：" + json.dumps(summary, ensure_ascii=False),
                  file=sys.stderr)
        else:
            print("训练完成：" + json.dumps(summary, ensure_ascii=False))
    dist_utils.cleanup()
    return code if failed else 0


def _refuse_overwriting_init(init, out: Path) -> None:
    """--init 的文件若正是这次训练要写的 --out、<out>.best.pt 或 <out>.last.pt，训练会覆盖
    它的起点：训练之前就拒绝（退出码 2），请换一个 --out。"""
    if init is None:
        return
    init = Path(init)
    for target in (out, out.with_suffix(".best.pt"), out.with_suffix(".last.pt")):
        same = (init.exists() and target.exists() and init.samefile(target)) or \
            init.resolve() == target.resolve()
        if same:
            raise UserError(f"--init {init} 正是这次训练要写的 {target.name}：训练会覆盖它的起点。"
                            f"请换一个 --out（例如 {out.with_name(out.stem + '_ft.pt')}）")


def _command(args) -> str:
    """记录训练命令：从命令行启动时照抄 argv，否则由解析后的参数重建。"""
    if len(sys.argv) > 1 and sys.argv[1] == "train":
        argv = sys.argv[2:]
    else:
        argv = []
        for k, v in vars(args).items():
            if k in ("command", "func") or v is None or v is False:
                continue
            flag = "--" + k.replace("_", "-")
            argv += [flag] if v is True else [flag, str(v)]
    world = dist_utils.world_size()
    launcher = f"torchrun --nproc_per_node={world} -m" if world > 1 else "python -m"
    return f"{launcher} gptcourse train " + shlex.join(argv)


def _dump_rank_state(folder, rank: int, model: torch.nn.Module, history: History) -> None:
    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().cpu().contiguous().numpy().tobytes())
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"rank{rank}.json").write_text(json.dumps(
        {"rank": rank, "world_size": dist_utils.world_size(), "weights_sha256": h.hexdigest(),
         "losses": [r["loss"] for r in history.steps]}))
