"""笔记本 03 第 12.1 节（辅助目标）的练习检查器：``rhyme_targets`` 与 ``aux_loss``。

检查器的参考就是包里的实现（``gc.objectives.rhyme_labels`` 与 ``gc.objectives.Objective.loss``）；
典型错误各有一个故意写错的版本，只用来把学员的输出对上“是哪一种错”。
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .. import verse
from ..objectives import PING_GROUPS, Objective, rhyme_labels
from ..tokenizer import CharTokenizer
from ._common import _call, _fail, _got, _ok, exercise

# 平韵首句不入韵、平韵首句入韵、仄韵、不合诗体、七绝（平韵首句入韵）
_POEMS = ("白日依山尽，黄河入海流。欲穷千里目，更上一层楼。",
          "床前明月光，疑是地上霜。举头望明月，低头思故乡。",
          "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。",
          "白日依山尽，黄河入海流。欲穷千里目，更上楼。",              # 押韵但不合诗体
          "朝辞白帝彩云间，千里江陵一日还。两岸猿声啼不住，轻舟已过万重山。")


def _data():
    text = "\n" + "\n".join(_POEMS) + "\n"
    tok = CharTokenizer.from_text(text)
    return torch.tensor(tok.encode(text), dtype=torch.long), tok


def _with_mistake(ids: torch.Tensor, tok, mistake: str) -> torch.Tensor:
    """参考答案带上一个典型错误（只用来给提示）。"""
    text = tok.decode(ids.tolist())
    out = torch.full((len(ids),), 0 if mistake == "zero_default" else -1, dtype=torch.long)
    offset = 0
    for poem in text.split("\n"):
        r = verse.check_rhyme(poem)
        valid = verse.is_valid_form(poem) or mistake == "any_form"
        if poem and valid and (r.rhymes or mistake == "ze_too"):
            if mistake == "odd_lines":
                positions = [b - 1 for _, b, _ in verse.line_spans(poem)]
            elif mistake == "ze_too" and not r.rhymes:
                positions = [b - 1 for _, b, _ in verse.line_spans(poem)[1::2]]
            else:
                positions = r.positions
            group = PING_GROUPS.index(r.group) if r.group in PING_GROUPS else 0
            for i in positions:
                out[offset + i - (mistake == "before")] = group
        offset += len(poem) + (mistake != "no_newline")
    return out


_HINTS = {
    "before": "标签放在了韵脚的前一个位置。标签要记在韵脚**那个字自己**的位置上："
              "取批次时它会像 y 一样错一位取出，第 t 个位置的头才去预测第 t + 1 个字的韵部——"
              "你再往前挪一位，就成了预测“下下个字”",
    "odd_lines": "单数句的末字也记了标签。只有入韵的位置才有韵部：双数句的末字，"
                 "和首句入韵时首句的末字（check_rhyme(...).positions 就是这些下标）",
    "ze_too": "不押平声韵的诗（例如仄韵的《春晓》）也记了标签。"
              "那样的诗没有平声韵部可学，整首都记 −1",
    "any_form": "不合诗体的诗也记了标签：先用 gc.verse.is_valid_form 挑出合乎诗体的诗",
    "zero_default": "没有韵脚的位置应记 −1（“这个位置不考”），而不是 0——0 是第一个韵部的编号",
    "no_newline": "从第二首诗开始位置错开了：诗与诗之间还有一个换行符，它也占一个位置",
}


@exercise
def rhyme_targets(fn) -> bool:
    """练习：``fn(ids, tok) -> 与 ids 等长的张量``，韵脚的位置记平声韵部编号，其余 −1。"""
    ids, tok = _data()
    got = _got(fn, ids, tok)
    try:
        got = torch.as_tensor(got, dtype=torch.long).flatten()
    except Exception:  # noqa: BLE001
        return _fail(f"应返回一维整数张量，收到 {type(got).__name__}")
    want = rhyme_labels(ids, tok)
    if got.shape != want.shape:
        return _fail(f"长度应与 ids 相同（{len(want)}），收到 {len(got)}")
    if torch.equal(got, want):
        return _ok()
    for mistake, hint in _HINTS.items():
        if torch.equal(got, _with_mistake(ids, tok, mistake)):
            return _fail(hint)
    i = int((got != want).nonzero()[0])
    return _fail(f"第 {i} 个位置（字 {tok.decode([int(ids[i])])!r}）你记了 {int(got[i])}，"
                 f"应是 {int(want[i])}")


def _loss_cases():
    g = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(8, 5)
    with torch.no_grad():
        head.weight.copy_(torch.randn(5, 8, generator=g) * 2)     # 分布够尖，错误才看得出来
        head.bias.copy_(torch.randn(5, generator=g))
    hidden = torch.randn(2, 6, 8, generator=g)
    targets = torch.randint(0, 5, (2, 6), generator=g)
    targets[torch.rand(2, 6, generator=g) < 0.6] = -1            # 大部分位置不考
    targets[0, 0] = 3
    return head, hidden, targets


@exercise
def aux_loss(fn) -> bool:
    """练习：``fn(head, hidden [B, T, C], targets [B, T]) -> 标量张量``：−1 不算，
    只在要考的位置上平均，一个都没有时是 0。"""
    head, hidden, targets = _loss_cases()
    ref = Objective("x", 8, tuple("abcde"), {})
    ref.head = head
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
    want = ref.loss(hidden, targets)
    n, total = int((targets >= 0).sum()), targets.numel()
    if math.isclose(got.item(), want.item() * n / total, rel_tol=1e-4):
        return _fail(f"你除以了全部 {total} 个位置；只有 {n} 个位置要考，平均只在它们之间算")
    logits = head(hidden)
    soft = F.cross_entropy(logits.softmax(-1).flatten(0, 1), targets.flatten(), ignore_index=-1)
    if math.isclose(got.item(), soft.item(), rel_tol=1e-4):
        return _fail("交叉熵之前先做了 softmax：F.cross_entropy 要的是 logits，"
                     "它自己会做 log-softmax")
    if not math.isclose(got.item(), want.item(), rel_tol=1e-4, abs_tol=1e-6):
        return _fail(f"损失是 {got.item():.4f}，应是 {want.item():.4f}")
    none = torch.full_like(targets, -1)
    empty, err = _call(fn, head, hidden, none)
    if err or not isinstance(empty, torch.Tensor) or not math.isfinite(empty.item()):
        return _fail("一个要考的位置都没有时（一个窗口里没有韵脚很常见）应得 0，"
                     f"你的结果是 {empty if err is None else err}：求平均时分母至少取 1")
    if empty.item() != 0.0:
        return _fail(f"一个要考的位置都没有时应得 0，你的结果是 {empty.item()}")
    return _ok()

