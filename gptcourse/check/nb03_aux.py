"""笔记本 03 第 12.1 节（辅助目标）与第 13 节（以题作诗）的练习检查器。参考是包
（``gc.objectives``、``gc.titled.encode``、``gc.train.train``）；典型错误各有一个故意写错的版本，
只用来把学员的输出对上“是哪一种错”。"""
from __future__ import annotations

import copy
import math
from dataclasses import replace

import torch
import torch.nn.functional as F

from .. import verse
from ..objectives import PING_GROUPS, masked_cross_entropy, rhyme_labels
from ..optim import param_groups
from ..titled import encode as titled_encode
from ..tokenizer import CharTokenizer
from ..train import TrainConfig, train
from ._common import _call, _fail, _got, _ok, exercise
from .nb03_loop import _LOOP_DROPOUT, _close, _differs
from .nb03_loss import _ids, _tiny_model

# 平韵首句不入韵、平韵首句入韵、仄韵、不合诗体、七绝（平韵首句入韵）、韵脚有多音字（洮：萧 / 豪）
_POEMS = ("白日依山尽，黄河入海流。欲穷千里目，更上一层楼。",
          "床前明月光，疑是地上霜。举头望明月，低头思故乡。",
          "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。",
          "白日依山尽，黄河入海流。欲穷千里目，更上楼。",              # 押韵但不合诗体
          "朝辞白帝彩云间，千里江陵一日还。两岸猿声啼不住，轻舟已过万重山。",
          "北斗七星高，哥舒夜带刀。至今窥牧马，不敢过临洮。")


def _tensor(v) -> torch.Tensor | None:
    """v 作为一维整数张量；转不了时是 None。"""
    try:
        return torch.as_tensor(v, dtype=torch.long).flatten()
    except Exception:  # noqa: BLE001
        return None


def _with_mistake(ids: torch.Tensor, tok, mistake: str) -> torch.Tensor:
    """参考答案带上一个典型错误（只用来给提示）。"""
    out = torch.full((len(ids),), 0 if mistake == "zero_default" else -1, dtype=torch.long)
    offset = 0
    for poem in tok.decode(ids.tolist()).split("\n"):
        r = verse.check_rhyme(poem)
        valid = verse.is_valid_form(poem) or mistake == "any_form"
        if poem and valid and (r.rhymes or mistake == "ze_too"):
            ends = [b - 1 for _, b, _ in verse.line_spans(poem)]
            positions = (ends if mistake == "odd_lines" else
                         ends[1::2] if mistake == "ze_too" and not r.rhymes else r.positions)
            group = PING_GROUPS.index(r.group) if r.group in PING_GROUPS else 0
            for i in positions:
                own = verse.ping_groups(poem[i])                     # 这个字自己的第一个平声韵部
                out[offset + i - (mistake == "before")] = (
                    PING_GROUPS.index(own[0]) if mistake == "own_group" and own else group)
        offset += len(poem) + (mistake != "no_newline")
    return out


_HINTS = {
    "before": "每个标签都早了一位：是漏算了开头的换行，还是把标签放在了韵脚的前一个位置？"
              "ids 以换行开头（\\n诗\\n诗…），标签要记在韵脚那个字自己的位置上："
              "取批次时它会像 y 一样错一位取出，第 t 个位置的头才去预测第 t + 1 个字的韵部",
    "odd_lines": "单数句的末字也记了标签。只有入韵的位置才有韵部：双数句的末字，"
                 "和首句入韵时首句的末字（check_rhyme(...).positions 就是这些下标）",
    "ze_too": "不押平声韵的诗（例如仄韵的《春晓》）也记了标签。"
              "那样的诗没有平声韵部可学，整首都记 −1",
    "any_form": "不合诗体的诗也记了标签：先用 gc.verse.is_valid_form 挑出合乎诗体的诗",
    "zero_default": "没有韵脚的位置应记 −1（“这个位置不考”），而不是 0——0 是第一个韵部的编号",
    "no_newline": "从第二首诗开始位置错开了：诗与诗之间还有一个换行符，它也占一个位置",
    "own_group": "韵脚记的是这个字自己的第一个平声韵部：多音字（如“洮”在萧、豪两部）会记错。"
                 "要记整首诗共同的韵部 check_rhyme(poem).group",
}


@exercise
def rhyme_targets(fn) -> bool:
    """练习：``fn(ids, tok) -> 与 ids 等长的张量``，韵脚的位置记平声韵部编号，其余 −1。"""
    text = "\n" + "\n".join(_POEMS) + "\n"
    tok = CharTokenizer.from_text(text)
    ids = torch.tensor(tok.encode(text), dtype=torch.long)
    got = _got(fn, ids, tok)
    labels, want = _tensor(got), rhyme_labels(ids, tok)
    if labels is None:
        return _fail(f"应返回一维整数张量，收到 {type(got).__name__}")
    if labels.shape != want.shape:
        return _fail(f"长度应与 ids 相同（{len(want)}），收到 {len(labels)}")
    if torch.equal(labels, want):
        return _ok()
    for mistake, hint in _HINTS.items():
        if torch.equal(labels, _with_mistake(ids, tok, mistake)):
            return _fail(hint)
    i = int((labels != want).nonzero()[0])
    return _fail(f"第 {i} 个位置（字 {tok.decode([int(ids[i])])!r}）你记了 {int(labels[i])}，"
                 f"应是 {int(want[i])}")


@exercise
def aux_loss(fn) -> bool:
    """练习：``fn(head, hidden [B, T, C], targets [B, T]) -> 标量``，只在要考的位置上平均。"""
    g = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(8, 5)
    with torch.no_grad():
        head.weight.copy_(torch.randn(5, 8, generator=g) * 2)     # 分布够尖，错误才看得出来
        head.bias.copy_(torch.randn(5, generator=g))
    hidden = torch.randn(2, 6, 8, generator=g)                    # [B, T, C]
    targets = torch.randint(0, 5, (2, 6), generator=g)            # [B, T]
    targets[torch.rand(2, 6, generator=g) < 0.6] = -1            # 大部分位置不考
    targets[0, 0] = 3
    got, err = _call(fn, head, hidden, targets)
    if err:
        if "out of bounds" in err or "Target -1" in err or "IndexError" in err:
            return _fail("交叉熵碰到了 −1 的目标：告诉 F.cross_entropy 哪个值表示“不算”")
        return _fail(err)
    if not isinstance(got, torch.Tensor) or got.dim() != 0:
        return _fail("应返回一个标量张量（不要 .item()：后面还要对它反向传播）")
    if not got.requires_grad:
        return _fail("返回的损失没有梯度：它要能反向传播到头和隐藏状态（不要 .item()，"
                     "也不要用 torch.tensor(...) 重新包一次）")
    logits = head(hidden)                                          # [B, T, 5]
    want = masked_cross_entropy(logits, targets)
    n, total = int((targets >= 0).sum()), targets.numel()
    if math.isclose(got.item(), want.item() * n / total, rel_tol=1e-4):
        return _fail(f"你除以了全部 {total} 个位置；只有 {n} 个位置要考，平均只在它们之间算")
    soft = F.cross_entropy(logits.softmax(-1).flatten(0, 1), targets.flatten(), ignore_index=-1)
    if math.isclose(got.item(), soft.item(), rel_tol=1e-4):
        return _fail("交叉熵之前先做了 softmax：F.cross_entropy 要的是 logits，"
                     "它自己会做 log-softmax")
    if not math.isclose(got.item(), want.item(), rel_tol=1e-4, abs_tol=1e-6):
        return _fail(f"损失是 {got.item():.4f}，应是 {want.item():.4f}")
    empty, err = _call(fn, head, hidden, torch.full_like(targets, -1))
    if err or not isinstance(empty, torch.Tensor) or not math.isfinite(empty.item()):
        return _fail("一个要考的位置都没有时（一个窗口里没有韵脚很常见）应得 0，"
                     f"你的结果是 {empty if err is None else err}：求平均时分母至少取 1")
    if empty.item() != 0.0:
        return _fail(f"一个要考的位置都没有时应得 0，你的结果是 {empty.item()}")
    return _grads_reach(fn, head, hidden, targets)


def _grads_reach(fn, head, hidden, targets) -> bool:
    """值对了还不够：backward 之后头（head.weight）和主干（hidden）的梯度都要与参考相同。"""
    ref_head, ref_hidden = copy.deepcopy(head), hidden.clone().requires_grad_(True)
    masked_cross_entropy(ref_head(ref_hidden), targets).backward()
    head.zero_grad(set_to_none=True)
    mine = hidden.clone().requires_grad_(True)
    loss = _got(fn, head, mine, targets)
    try:
        loss.backward()
    except (AttributeError, RuntimeError) as e:
        return _fail(f"对你的损失 backward() 时出错 {type(e).__name__}: {e}")
    reach = {"head": (head.weight.grad, ref_head.weight.grad),
             "hidden": (mine.grad, ref_hidden.grad)}
    cut = [k for k, (g, _) in reach.items() if g is None or not bool(g.any())]
    if cut:
        return _fail({
            "head": "头（head.weight）收不到梯度：损失要由 head(hidden) 的 logits 直接算出",
            "hidden": "梯度到不了隐藏状态（主干）：不要对 hidden 用 .detach()。辅助目标正是要通过 "
                      "hidden 把韵部的信号传回主干；只有头学到东西，主干就白练了"}[cut[0]]
            if len(cut) == 1 else "backward 之后头和隐藏状态都没有梯度：损失和它们之间断了"
            "（.item() 后重新包成张量、对 logits .detach() 后再 requires_grad_()，都会这样）")
    if not all(torch.allclose(g, w, rtol=1e-4, atol=1e-6) for g, w in reach.values()):
        return _fail("损失的值对了，但 backward 之后头或隐藏状态的梯度与参考不同：损失要就是"
                     "head(hidden) 在要考的位置上的平均交叉熵，中间不要改动或截断计算图")
    return _ok()


# ---------------------------------------------------------------- 第 13 节：以题作诗
_TITLED_PAIRS = [("春晓", "春眠不觉晓，处处闻啼鸟。"), ("静夜思", "床前明月光，疑是地上霜。"),
                 ("登鹳雀楼", "白日依山尽，黄河入海流。")]


@exercise
def title_targets(fn) -> bool:
    """练习：``fn(pairs, tok) -> (ids, targets)``，题目（含《》）的目标是 −1，正文与换行照常。"""
    tok = CharTokenizer.from_text("\n《》" + "".join(t + b for t, b in _TITLED_PAIRS), unk=False)
    want_ids, want_y = titled_encode(_TITLED_PAIRS, tok)             # 一个字一个 id，0 号是换行
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
    i, char, want = bad[0], tok.itos[int(want_ids[bad[0]])], int(want_y[bad[0]])
    if all(tok.itos[int(want_ids[k])] in "《》" for k in bad):
        return _fail("书名号《》上还在算损失：《和》是题目的一部分（模型读到它们，而不用学着写），"
                     "目标也要记成 −1")
    if want == -1:
        return _fail(f"第 {i} 个位置（{char!r}）在题目里，目标应是 −1，收到 {int(y[i])}："
                     "题目是给模型的条件，不在它上面算损失")
    if char == "\n":
        return _fail(f"第 {i} 个位置是诗末的换行，目标应是它自己（{want}）："
                     "模型要学会在哪里结束一首诗")
    return _fail(f"第 {i} 个位置（正文的 {char!r}）目标应是 {want}，收到 {int(y[i])}："
                 "正文的每个字都要算损失")


def _package_run(cfg, ids, y):
    """包的训练循环（``gc.train.train``）在检查用的小模型上的每步损失与训练后的模型。"""
    model = _tiny_model(seed=1, **_LOOP_DROPOUT)
    torch.manual_seed(5)                                               # dropout 的随机数
    hist = train(model, ids, None, cfg, targets=None if y is None else {"train": y})
    return [r["loss"] for r in hist.steps], model


@exercise
def titled_step(fn) -> bool:
    """练习：``fn(model, optimizer, ids, targets, cfg, step) -> 损失``，做包里的第 step 步。"""
    cfg = TrainConfig(batch_size=4, lr=1e-2, warmup_steps=2, max_steps=5, weight_decay=0.05,
                      min_lr_ratio=0.3, eval_interval=100, eval_batches=1, bf16=False,
                      progress=False, seed=3, grad_clip=0.4)       # 不用默认的 1.0：写死的露馅
    ids = _ids(7, n=200)
    y = ids.clone()
    y[(torch.arange(len(ids)) % 10) < 4] = -1                          # 每 10 个位置里 4 个是“题目”
    mine = _tiny_model(seed=1, **_LOOP_DROPOUT)
    opt = torch.optim.AdamW(param_groups(mine, cfg.weight_decay), lr=cfg.lr, betas=cfg.betas)
    torch.manual_seed(5)                                               # dropout 的随机数
    mine.train()
    got = []
    for step in range(cfg.max_steps):
        loss = _got(fn, mine, opt, ids, y, cfg, step)
        if not mine.training:
            return _fail("这一步把模型切到了 eval 模式（dropout 关了）：训练的一步要在 train "
                         "模式下做，不要在里面调用 model.eval()")
        try:
            got.append(float(loss))
        except (TypeError, ValueError):
            return _fail(f"第 {step} 步应返回损失（loss.item()），收到 {type(loss).__name__}")
    want, model = _package_run(cfg, ids, y)
    s = next((i for i, (a, b) in enumerate(zip(got, want)) if not _close(a, b)), None)
    if s is None and _differs(mine, model, 1.3e-6, 1e-5) is None:
        return _ok()
    hard, hard_model = _package_run(replace(cfg, grad_clip=1.0), ids, y)      # 裁剪写死成 1.0
    if all(map(_close, got, hard)) and _differs(mine, hard_model, 1.3e-6, 1e-5) is None:
        return _fail(f"裁剪的阈值写死成了 1.0：要用 cfg.grad_clip（这里是 {cfg.grad_clip}）")
    if s is None:
        return _fail("每步的损失都对，但最后的权重不同：裁剪（cfg.grad_clip）和 optimizer.step() "
                     "都做了吗？")
    if s == 0:
        unmasked, _ = _package_run(cfg, ids, None)                    # 题目上也算了损失
        if _close(got[0], unmasked[0]):
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
