"""命令行 ``python -m gptcourse eval``：损失、基线与验收表（采样用检查点的发布设置）。"""
from __future__ import annotations

import math

from .. import checkpoint, release
from ..acceptance import acceptance_checks, acceptance_table
from ..data import DOCUMENTS, available_corpora, is_verse, open_corpus
from ..errors import UserError
from ..evaluate import LN2, baselines, split_metrics
from ..generate import check_seed, sample_poems
from ..sampling import check_sampling_args


def cli_arguments(p) -> None:
    p.add_argument("--checkpoint", default=None, help="检查点路径（默认：随课程发布的模型）")
    p.add_argument("--corpus", default="tang_jinti", metavar="名字或文件",
                   help=f"内置语料（{'、'.join(available_corpora())}），或你自己的 UTF-8 文本文件")
    p.add_argument("--documents", choices=DOCUMENTS, default=None,
                   help="自己的文本怎样分篇（同 train 的 --documents）")
    p.add_argument("--samples", type=int, default=None,
                   help="验收用的采样首数（默认 200，release.GATE_SIZE）")
    p.add_argument("--seed", type=int, default=None,
                   help="起始种子（默认：检查点确认放行用的种子块，release.gate_seeds）")
    p.add_argument("--temperature", type=float, default=None,
                   help="采样温度（默认：检查点的发布设置；设置其余各项也取发布设置）")
    p.add_argument("--batch-size", type=int, default=32)


MAX_SAMPLES = 10_000                 # --samples 的上限
LOGITS_BUDGET = 2**30                # 打分时一批 logits 的字节数上限（batch × block × V × 4）


def cli_main(args) -> int:
    n = release.GATE_SIZE if args.samples is None else args.samples
    if not 1 <= n <= MAX_SAMPLES:
        raise UserError(f"--samples 必须在 [1, {MAX_SAMPLES}] 之内，收到 {args.samples}")
    if args.batch_size < 1:
        raise UserError(f"--batch-size 必须 ≥ 1，收到 {args.batch_size}")
    if args.temperature is not None:                           # 先检查参数，再做耗时的打分
        check_sampling_args(temperature=args.temperature)
    check_seed(args.seed, n)                                   # 不是打完两分钟分才说种子不对
    model, tok, meta = checkpoint.load(args.checkpoint)
    seeds = (release.gate_seeds(meta)[0] if args.seed is None else args.seed, n)
    per_row = model.config.block_size * model.config.vocab_size * 4
    if args.batch_size * per_row > LOGITS_BUDGET:              # 分配之前：一批的 logits 放得下吗
        raise UserError(f"--batch-size 最多 {LOGITS_BUDGET // per_row}（一批的 logits 不超过 "
                        f"{LOGITS_BUDGET // 2**20} MiB），收到 {args.batch_size}")
    corpus = open_corpus(args.corpus, args.documents)
    name = args.checkpoint or "随课程发布的模型"
    print(f"检查点：{name}（第 {meta['step']} 步）；语料 {args.corpus}")
    val = split_metrics(model, tok, corpus.val, batch_size=args.batch_size)
    test = split_metrics(model, tok, corpus.test, batch_size=args.batch_size)
    base = baselines(tok, corpus.train, corpus.val, corpus.test)
    print(f"\n{'':16}{'val loss':>10}{'test loss':>11}{'val 困惑度':>12}{'val bits/字':>12}")
    rows = [("模型", val.loss, test.loss)] + [
        (name + (f" k={b['k']:g}" if b["k"] else ""), b["val"], b["test"])
        for name, b in base.items()]
    for name, v, t in rows:
        print(f"{name:<16}{v:>10.4f}{t:>11.4f}{math.exp(v):>13,.1f}{v / LN2:>12.3f}")
    if not is_verse(corpus):                      # 格律的验收表只对诗有意义
        print(f"\n{corpus.description} 不是近体诗：不做格律的验收（只报告上面的损失与基线）")
        return 0
    d = release.decoding(meta, {"temperature": args.temperature})
    samples = sample_poems(model, tok, seeds[1], seed=seeds[0], params=d.params, spec=d.spec)
    which = "检查点的发布设置" if (meta or {}).get("release") else "默认设置"
    print(f"\n采样 {len(samples)} 首（{which}："
          + "，".join(f"{k}={v}" for k, v in d.to_dict().items())
          + f"；空提示；{release.seed_note(seeds)}），例如：")
    for s in samples[:3]:
        print("  " + s)
    checks = acceptance_checks(samples, corpus.train, val_loss=val.loss)
    print()
    print(acceptance_table(checks))
    return 0 if all(c.passed for c in checks) else 1
