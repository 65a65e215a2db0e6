"""笔记本 03 的以题作诗：题目不算损失的目标序列、按包的第 step 步微调一步。"""
from __future__ import annotations

import torch

from ..titled import encode as titled_encode
from ..train import TrainConfig, param_groups, train
from ._common import _call, _fail, _got, _ok, exercise
from .nb03_loop import _LOOP_DROPOUT, _same
from .nb03_loss import _ids, _tiny_model


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
    want_ids, want_y = titled_encode(_TITLED_PAIRS, tok)
    got = _got(fn, list(_TITLED_PAIRS), tok)
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
    opt = torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=cfg.lr,
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


def _package_run(cfg, ids, y):
    """包的训练循环（``gc.train.train``）在检查用的小模型上的每步损失与训练后的模型。"""
    model = _tiny_model(seed=1, **_LOOP_DROPOUT)
    torch.manual_seed(5)                                               # dropout 的随机数
    hist = train(model, ids, None, cfg, targets=None if y is None else {"train": y})
    return [r["loss"] for r in hist.steps], model


@exercise
def titled_step(fn) -> bool:
    """练习：``fn(model, optimizer, ids, targets, cfg, step) -> 损失``，做包里的第 step 步。"""
    cfg = TrainConfig(**_TITLED_CFG)
    ids, y = _titled_data()
    got, mine, err = _run_titled(fn, cfg, ids, y)
    if err:
        return _fail(err)
    want, model = _package_run(cfg, ids, y)
    s = next((i for i, (a, b) in enumerate(zip(got, want)) if not _same(a, b)), None)
    if s is None:
        if all(torch.allclose(a, b, rtol=1.3e-6, atol=1e-5)
               for a, b in zip(mine.parameters(), model.parameters())):
            return _ok()
        return _fail("每步的损失都对，但最后的权重不同："
                     "裁剪（cfg.grad_clip）和 optimizer.step() 都做了吗？")
    if s == 0:
        unmasked, _ = _package_run(cfg, ids, None)                    # 题目上也算了损失
        if _same(got[0], unmasked[0]):
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
