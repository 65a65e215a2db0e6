"""命令行 ``python -m gptcourse train``：在语料上训练、保存 best/last 检查点、打印总结。

    python -m gptcourse train --corpus tang_jinti --preset course --minutes 10 --out ckpt/course.pt
    torchrun --nproc_per_node=2 -m gptcourse train ...      # 同一个入口，多进程 DDP

只有 0 号进程写检查点与打印。
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import shlex
import sys
from dataclasses import asdict, fields
from pathlib import Path

import torch

from .. import checkpoint, files, objectives, verse
from .. import distributed as dist_utils
from ..checkpoint import Checkpoints, History
from ..config import MAX_BLOCK_SIZE, preset, preset_names
from ..data import DOCUMENTS, available_corpora, is_verse, open_corpus, vocabulary_text
from ..data import poems as poems_of
from ..errors import UserError
from ..generate import sample_poems
from ..model import GPT
from ..optim import OPTIMIZERS, make_optimizer
from ..precision import BF16_MODES, resolve_bf16
from ..rhyme_probe import rhyme_feet, rhyme_group_mass
from ..runtime import get_device, set_seed
from ..titled import UNTITLED_EVERY, WINDOWS, check_titled, training_splits
from ..tokenizer import CharTokenizer
from ..train import TrainConfig, TrainingDiverged, tokens_per_step, train

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


# 与 TrainConfig 的字段一一对应的选项：字段 → (选项, 说明)。类型与默认值取自字段，默认值只写在
# TrainConfig 里（tests/test_cli_train.py 检查：不给选项时得到的 TrainConfig 就是字段的默认值）。
# 预算（--steps / --minutes）、bf16、compile、progress 的命令行含义与字段不同，另有选项。
CONFIG_FLAGS = {
    "batch_size": ("--batch-size", "每个微批次几个窗口"),
    "lr": ("--lr", "峰值学习率"),
    "min_lr_ratio": ("--min-lr-ratio", "余弦衰减的地板 = lr × 这个比例"),
    "warmup_steps": ("--warmup", "线性预热的步数"),
    "weight_decay": ("--weight-decay", "AdamW 的权重衰减（只作用于矩阵与嵌入）"),
    "grad_clip": ("--grad-clip", "梯度全局范数的上限（0 = 不裁剪）"),
    "grad_accum": ("--grad-accum", "每步累积几个微批次的梯度"),
    "eval_interval": ("--eval-interval", "每多少步评估一次（并存 last / best）"),
    "eval_batches": ("--eval-batches", "每次评估每个划分取多少个批次"),
    "seed": ("--seed", "随机种子（第 s 步的批次只由种子与 s 决定）"),
    "bf16_mode": ("--bf16-mode", "bf16 的做法：autocast，或 weights = bf16 权重 + fp32 主权重"),
    "optimizer": ("--optimizer", "adamw，或 muon = 各层的矩阵用 Muon、其余用 AdamW"),
}
CHOICES = {"bf16_mode": BF16_MODES, "optimizer": OPTIMIZERS}


def cli_arguments(p) -> None:
    p.add_argument("--corpus", default="tang_jinti", metavar="名字或文件",
                   help=f"内置语料（{'、'.join(available_corpora())}），或你自己的 UTF-8 文本文件")
    p.add_argument("--documents", choices=DOCUMENTS, default=None,
                   help="自己的文本怎样分篇：lines = 一行一篇；paragraphs = 空行分开的一段一篇"
                        "（默认自动判断）")
    p.add_argument("--preset", default="course", choices=preset_names())
    p.add_argument("--out", required=True, help="检查点路径（另存 <名>.best.pt 与 <名>.last.pt）")
    p.add_argument("--minutes", type=float, default=None, help="墙钟预算（分钟）")
    p.add_argument("--steps", type=int, default=None, help="步数预算")
    defaults = {f.name: f.default for f in fields(TrainConfig)}
    for name, (flag, text) in CONFIG_FLAGS.items():
        p.add_argument(flag, type=type(defaults[name]), default=defaults[name],
                       choices=CHOICES.get(name), help=f"{text}（默认 %(default)s）")
    p.add_argument("--block-size", type=int, default=None, help="覆盖预设的上下文长度")
    p.add_argument("--dropout", type=float, default=None, help="覆盖预设的全部 dropout")
    p.add_argument("--no-bf16", action="store_true", help="关闭 bf16 自动混合精度")
    p.add_argument("--bf16", action="store_true", help="强制用 bf16（默认看硬件是否支持）")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="用 torch.compile 加速训练（先编译约一分钟；失败时自动退回普通模式）。"
                        f"默认：步数 ≥ {COMPILE_MIN_STEPS} 时编译"
                        "（实测的门槛，见 docs/benchmarks.md）")
    p.add_argument("--half", action="store_true", help="以 bf16 存储权重（文件减半）")
    p.add_argument("--windows", choices=WINDOWS, default=None,
                   help="训练窗口的起点：poem = 每首诗前的换行符（诗的语料的默认，与生成时一致）；"
                        "random = 任意位置（别的文本的默认：一篇可能比窗口长）")
    p.add_argument("--probe-poems", type=int, default=0,
                   help="每次评估时采样这么多首诗，记下诗体合格率、押韵率与平仄"
                        "（训练曲线，存进 meta）")
    p.add_argument("--init", default=None, metavar="检查点",
                   help="从这个检查点的权重开始（微调）；词表与模型结构取自它，--preset 不起作用")
    p.add_argument("--titled", action="store_true",
                   help="以题作诗：训练文本是 《题》正文，只在正文上算损失；"
                        "验证集只用训练集里没有的题目（只用于 tang_jinti）")
    p.add_argument("--untitled-every", type=int, default=UNTITLED_EVERY, metavar="K",
                   help="--titled 时每 K 首里有一首不带题目（默认 %(default)s；0 = 全带题目），"
                        "这样不给题目时模型照样会写")
    p.add_argument("--aux", default=None, metavar="rhyme=0.3,norepeat",
                   help="训练时的辅助目标（逗号分开，可写 名字=权重）：rhyme = 在韵脚前一个位置"
                        "预测韵部，tones = 在讲平仄的位置前预测平/仄，norepeat = 压低本诗用过的"
                        "韵脚字（不重韵），rhymeset = 把韵脚位置的概率抬到本韵部里还没用过的字上，"
                        "firstline = 首句的交叉熵再算一遍；头只在训练时用，不存进检查点")
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
    """训练的全过程：检查参数 → 数据 → 模型 → train() → 收尾（发布文件与总结）。"""
    tcfg, aux_names = _config(args)                      # 先检查参数，再做耗时的事
    out, snapshots = _outputs(args)                      # 训练之前就确认能写，而不是训练之后
    dist_utils.init()
    lock = checkpoint.run_lock(out) if dist_utils.rank() == 0 else contextlib.nullcontext()
    with lock:                                           # 同一个 --out 同时只有一次训练
        return _run(args, tcfg, aux_names, out, snapshots)


def _run(args, tcfg: TrainConfig, aux_names, out: Path, snapshots: Path | None) -> int:
    set_seed(tcfg.seed)
    corpus, device = open_corpus(args.corpus, args.documents), get_device()
    verse_corpus = is_verse(corpus)
    if args.windows is None:
        args.windows = WINDOWS[0] if verse_corpus else "random"
    if args.probe_poems and not verse_corpus:
        print(f"{corpus.description} 不是近体诗：不做格律的探针（--probe-poems 不起作用）")
        args.probe_poems = 0
    model, tok, init_meta = _model(args, corpus, device)
    block_size = model.config.block_size
    data = training_splits(corpus, tok, block_size, args.windows, args.titled,
                           args.untitled_every)
    aux = objectives.build(aux_names, data.ids, tok, model.config.n_embd,
                           args.aux_weight)              # 只在训练时用的头，不进检查点
    optimizer = make_optimizer(model, tcfg.lr, tcfg.weight_decay, tcfg.betas, tcfg.optimizer)
    meta = _meta(args, tcfg, device, aux, init_meta)
    meta["corpus"], meta["verse"] = corpus.name, verse_corpus
    _banner(args.preset, model, tok, device, tcfg.bf16)
    ckpts = Checkpoints(out, model, tok, optimizer, meta=meta, half=args.half,
                        snapshots=snapshots)
    callbacks = [] if args.probe_poems < 1 else \
        [_probe(args.probe_poems, tok, tokens_per_step(tcfg, block_size), ckpts, corpus)]
    diverged = interrupted = None
    try:
        train(model, data.ids["train"], data.ids["val"], tcfg, optimizer=optimizer,
              history=ckpts.history, on_eval=ckpts.on_eval, starts=data.starts,
              targets=data.targets, callbacks=callbacks, objectives=aux)
    except TrainingDiverged as e:               # 发散：留下发散之前最好的那一版（若有）
        diverged = e
    except checkpoint.CheckpointError as e:     # 写不出 last/best（磁盘满、只读……）：同上
        diverged = e
    except KeyboardInterrupt:                   # Ctrl+C：同上，一行说明，退出码 130
        interrupted = "已中断（Ctrl+C）"
    if args.dump_rank_state:
        _dump_rank_state(Path(args.dump_rank_state), dist_utils.rank(), model, ckpts.history)
    code = _finish(ckpts, tcfg, diverged, interrupted)
    dist_utils.cleanup()
    return code


def _config(args) -> tuple[TrainConfig, dict]:
    """命令行参数 → (TrainConfig, 辅助目标 {名字: 权重})；不对 → UserError，什么都还没做。
    TrainConfig 的字段由它自己检查（lr、各种尺寸、种子……），这里只查命令行自己的选项。"""
    if args.minutes is None and args.steps is None:
        raise UserError("请用 --minutes 或 --steps 给出训练预算")
    if args.no_bf16 and args.bf16:
        raise UserError("--bf16 与 --no-bf16 不能同时给出")
    if args.block_size is not None and not 1 <= args.block_size <= MAX_BLOCK_SIZE:
        raise UserError(f"block_size 必须在 [1, {MAX_BLOCK_SIZE}] 之内，收到 {args.block_size}")
    if args.init is not None and (args.block_size is not None or args.dropout is not None):
        raise UserError("--init 时模型结构取自检查点，不能再给 --block-size / --dropout")
    if not 0 <= args.probe_poems <= MAX_PROBE_POEMS:          # 每次评估都采样这么多首
        raise UserError(f"--probe-poems 必须在 [0, {MAX_PROBE_POEMS}] 之内，"
                        f"收到 {args.probe_poems}")
    check_titled(args.corpus, args.titled, args.untitled_every)
    aux_names = objectives.parse(args.aux)
    if not (math.isfinite(args.aux_weight) and 0 < args.aux_weight <= objectives.MAX_WEIGHT):
        raise UserError(f"--aux-weight 必须在 (0, {objectives.MAX_WEIGHT:g}] 之内，"
                        f"收到 {args.aux_weight}")
    compile_ = compile_pays(args.steps, args.minutes) if args.compile is None else args.compile
    given = {name: getattr(args, flag[2:].replace("-", "_"))        # argparse 的 dest
             for name, (flag, _) in CONFIG_FLAGS.items()}
    tcfg = TrainConfig(**given, max_steps=args.steps, max_minutes=args.minutes, compile=compile_,
                       bf16=False if args.no_bf16 else (True if args.bf16 else "auto"),
                       progress=not args.no_progress)
    return tcfg, aux_names


def _outputs(args) -> tuple[Path, Path | None]:
    """--out 与 --snapshots 能写吗（不能 → UserError）；--init 不能正是要写的文件。"""
    out = checkpoint.check_writable(args.out)
    snapshots = None if args.snapshots is None else _snapshot_folder(args.snapshots)
    _refuse_overwriting_init(args.init, out, snapshots)    # 不覆盖训练的起点
    return out, snapshots


def _snapshot_folder(text: str) -> Path:
    """--snapshots：一个空的（或还不存在的）目录。空字符串不是当前目录；已有 step_*.pt 的目录
    会让学习曲线混进另一次训练，拒绝。"""
    if not text.strip():
        raise UserError("--snapshots 是空的：请给一个目录名")
    folder = Path(text)
    if folder.exists() and not folder.is_dir():
        raise UserError(f"--snapshots {folder} 不是目录")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"--snapshots {folder} 建不了：{e.strerror or e}") from None
    old = sorted(folder.glob("step_*.pt"))
    if old:
        raise UserError(f"--snapshots {folder} 里已有 {len(old)} 个快照（{old[0].name} …），"
                        "学习曲线会混进另一次训练：请换一个空目录，或先把它们移走")
    checkpoint.check_writable(folder / "step_000000.pt")
    return folder


def _model(args, corpus, device) -> tuple[GPT, object, dict]:
    """(模型, 词表, 起点检查点的 meta)：--init 时词表和结构都来自起点检查点（微调），否则按预设
    新建，词表是训练集正文 + 标题 + 《》。"""
    if args.init is not None:
        model, tok, init_meta = checkpoint.load(args.init, eval_mode=False)
        return model.to(device), tok, init_meta
    tok = CharTokenizer.from_text(vocabulary_text(corpus))
    overrides = {"vocab_size": tok.vocab_size}
    if args.block_size is not None:
        overrides["block_size"] = args.block_size
    if args.dropout is not None:
        overrides.update(dropout=args.dropout, attn_dropout=args.dropout,
                         resid_dropout=args.dropout)
    return GPT(preset(args.preset, **overrides)).to(device), tok, {}


def _meta(args, tcfg: TrainConfig, device, aux, init_meta: dict) -> dict:
    """每个检查点都带的训练记录（命令、配置、bf16 的决定……）；"probe" 由探针往里加。"""
    meta = {"corpus": args.corpus, "preset": args.preset, "train_config": asdict(tcfg),
            "bf16": resolve_bf16(tcfg.bf16, device)[0], "windows": args.windows,
            "world_size": dist_utils.world_size(), "command": _command(args),
            "titled": args.titled, "probe": []}
    if aux:
        meta["aux"] = {o.name: o.weight for o in aux}
    if args.init is not None:
        meta["init"] = {"checkpoint": str(args.init), "step": init_meta.get("step"),
                        "val_loss": init_meta.get("val_loss")}
    return meta


def _banner(preset_name: str, model: GPT, tok, device, bf16) -> None:
    """0 号进程打印一行：模型多大、词表、设备、bf16 用不用（与理由）、进程数。"""
    if dist_utils.rank() == 0:
        used, reason = resolve_bf16(bf16, device)     # 只看硬件能力，每次都一样（同 meta）
        print(f"模型 {preset_name}：{sum(p.numel() for p in model.parameters()):,} 个参数；"
              f"词表 {tok.vocab_size}；设备 {device.type}；bf16={'开' if used else '关'}"
              f"（{reason}）；进程数 {dist_utils.world_size()}")


PROBE_MASS_POEMS = 300          # 领先指标（韵部质量）用验证集的前这么多首诗


def _probe(n_poems: int, tok, per_step: int, ckpts: Checkpoints, corpus):
    """训练曲线的探针（train 的回调，只在 0 号进程上调用）：每次评估自由采样 n_poems 首，
    记下诗体合格率、押韵率、重韵率与平仄，以及押韵的领先指标——验证集真诗第 2–4 个韵脚上
    模型放在本诗韵部里的概率（:func:`gptcourse.rhyme_probe.rhyme_group_mass`，与它的机会水平）；
    追加到 ``meta["probe"]``。"""
    real = [p for p in poems_of(corpus.val)
            if rhyme_feet(p) is not None and not tok.unknown_chars(p)][:PROBE_MASS_POEMS]

    def probe(step, model_, history_):
        poems = sample_poems(model_, tok, n_poems, seed=10_000, temperature=0.8)
        rhyme, tonal = verse.rates(poems)
        mass = rhyme_group_mass(model_, tok, real, corpus.train) if real else {}
        later = [m for k, m in mass.items() if k >= 2]
        n = sum(m["n"] for m in later) or None          # 验证集里没有押韵的真诗：不记
        ckpts.meta["probe"].append({
            "step": step, "tokens": step * per_step, "wall_s": round(ckpts.elapsed(), 1),
            "val_loss": history_.evals[-1].get("val") if history_.evals else None,
            "form_rate": sum(map(verse.is_valid_form, poems)) / len(poems),
            "rhyme_rate": rhyme, "repeated_rate": verse.repeated_rhyme_rate(poems),
            "tonal_share": tonal,
            "group_mass": n and sum(m["mass"] * m["n"] for m in later) / n,
            "group_chance": n and sum(m["chance"] * m["n"] for m in later) / n})
    return probe


def _finish(ckpts: Checkpoints, tcfg: TrainConfig, diverged, interrupted) -> int:
    """收尾 → 退出码：0 号进程写发布文件（:meth:`Checkpoints.finish`），打印总结或一行说明。"""
    failed, code = (f"错误：{diverged}", 1) if diverged is not None else (interrupted, 130)
    if dist_utils.rank() != 0:                   # 只有 0 号进程写文件、打印
        return code if failed else 0
    try:
        per_step = tokens_per_step(tcfg, ckpts.model.config.block_size)
        summary = ckpts.finish(per_step, diverged.step if isinstance(diverged, TrainingDiverged)
                               else None, bool(interrupted))
    except checkpoint.CheckpointError as e:      # 发布文件也写不出：一句话说清楚
        print(f"{failed + '；' if failed else '错误：'}{e}", file=sys.stderr)
        return 1
    if summary is None:                          # 这次训练没有写出过 best：不拿以前留下的充数
        why = "在那之前没有一次有限的验证损失" if diverged is not None else "还没有评估过一次"
        stale = f"（{ckpts.best.name} 是以前的训练留下的，没有动它）" if ckpts.best.exists() else ""
        print(f"{failed or '错误：训练结束'}。{why}，所以没有写出检查点 {ckpts.out}{stale}",
              file=sys.stderr)
        return code if failed else 1
    if failed:
        when = "中断" if diverged is None else \
            "出错" if isinstance(diverged, checkpoint.CheckpointError) else "发散"
        print(f"{failed}。已把{when}之前验证损失最好的检查点写到 {ckpts.out}"
              f"（第 {ckpts.best_step} 步）：" + json.dumps(summary, ensure_ascii=False),
              file=sys.stderr)
        return code
    print("训练完成：" + json.dumps(summary, ensure_ascii=False))
    return 0


def _refuse_overwriting_init(init, out: Path, snapshots: Path | None = None) -> None:
    """--init 的文件若正是这次训练要写的 --out、<out>.best.pt、<out>.last.pt 或快照目录里的
    step_*.pt，训练会覆盖它的起点：训练之前就拒绝（退出码 2），请换一个 --out。"""
    if init is None:
        return
    init = Path(init)
    if snapshots is not None and init.resolve().parent == snapshots.resolve() \
            and init.name.startswith("step_"):
        raise UserError(f"--init {init} 在 --snapshots 目录里：训练会用同名快照覆盖它的起点。"
                        "请换一个快照目录")
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
    files.write_text(folder / f"rank{rank}.json", json.dumps(
        {"rank": rank, "world_size": dist_utils.world_size(), "weights_sha256": h.hexdigest(),
         "losses": [r["loss"] for r in history.steps]}))
