"""笔记本 03（训练循环）的练习检查器，参考是包（``gc.train``）；练习分在 ``nb03_*`` 里，都从这里取。
``predict_*`` 在实验之后检查：把你的猜测和实验量出来的数一起交给检查器。"""
from __future__ import annotations

import copy
import math

from ._common import _fail, _got, _ok, choice, exercise, register, results
from .nb03_aux import aux_loss, rhyme_targets, title_targets, titled_step  # noqa: F401
from .nb03_loop import (  # noqa: F401
    accumulate_grads,
    compare_loops,
    estimate_loss,
    lr_schedule,
    param_groups,
    train_step,
    training_loop,
)
from .nb03_loss import cross_entropy, perplexity  # noqa: F401

EXERCISES = ("cross_entropy", "perplexity", "param_groups", "lr_schedule", "train_step",
             "accumulate_grads", "estimate_loss", "training_loop", "rhyme_targets", "aux_loss",
             "title_targets", "titled_step",
             "early_stopping", "predict_init_loss", "predict_title_loss", "predict_bf16_gap",
             "predict_overfit", "predict_windows")
PREDICTIONS = tuple(n for n in EXERCISES if n.startswith("predict_"))
__all__ = list(EXERCISES)


def solution_early_stopping(evals: list[dict], patience: int) -> tuple[int, int]:
    """(最好的一步, 停下的一步)：验证损失连续 patience 次评估没有创新低（严格更低）就停。"""
    best_val, best_step, waited = float("inf"), None, 0
    for e in evals:
        if e["val"] < best_val:
            best_val, best_step, waited = e["val"], e["step"], 0
        else:
            waited += 1
            if waited == patience:
                return best_step, e["step"]
    return best_step, evals[-1]["step"]


register("nb03", {"early_stopping": solution_early_stopping})   # 学生版的代替品（包里没有）


def _vs_previous(evals: list[dict], patience: int) -> tuple[int, int]:
    """典型错误：只要比上一次评估低就把耐心清零（最好的一步仍按最低值记）。"""
    best, prev, waited = min(evals[:1], key=lambda e: e["val"]), float("inf"), 0
    for e in evals:
        best = e if e["val"] < best["val"] else best
        waited = 0 if e["val"] < prev else waited + 1
        prev = e["val"]
        if waited == patience:
            return best["step"], e["step"]
    return best["step"], evals[-1]["step"]


def _early_stopping_hint(evals: list[dict], patience: int, got: tuple[int, int]) -> str:
    """错误的答案等于哪一种典型错误的结果，就说出是哪一种。"""
    best, stop = solution_early_stopping(evals, patience)
    steps = [e["step"] for e in evals]
    ties = [dict(e, val=e["val"] - 1e-9 * i) for i, e in enumerate(evals)]    # 持平也算进步
    later = steps[min(steps.index(stop) + 1, len(steps) - 1)]
    wrong = {(min(evals, key=lambda e: e["val"])["step"], stop):
             "——停下之后的评估已经不会发生了，最好的一步只能在停下之前找",
             solution_early_stopping(ties, patience):
             "——和最好值相等不算进步（要严格更低）",
             (steps.index(best), steps.index(stop)):
             "——返回的是列表下标，应当返回评估记录里的 step",
             (best, later): f"——多等了一次：连续 {patience} 次没有创新低就停",
             _vs_previous(evals, patience):
             "——要和目前最好的值比，不是和上一次评估比：比上一次低、却没低过最好值，不算进步"}
    wrong.pop((best, stop), None)
    return wrong.get(tuple(got), "")


@exercise
def early_stopping(fn) -> bool:
    """练习：``fn(evals, patience) -> (最好的一步, 停下的一步)``。"""
    for vals, patience, what in (([6.0, 5.5, 5.2, 5.3, 5.4, 5.6], 2, "先降后升"),
                                 ([6.0, 5.5, 5.2, 5.1], 2, "一直在下降，从没停"),
                                 ([6.0, 5.5, 5.5, 5.5, 5.4], 2, "持平不算创新低"),
                                 ([6.0, 5.2, 5.3, 5.1, 5.4, 5.5, 5.6], 2,
                                  "中途回升后又创新低：耐心要重新计"),
                                 ([6.0, 5.2, 5.3, 5.4, 4.0], 2, "停下以后的评估不能再看"),
                                 ([5.0, 5.3, 5.2, 5.4], 2,
                                  "回落了一点但没低过最好值：不算进步，耐心接着数"),
                                 ([5.0, 5.1, 5.2], 1, "patience = 1")):
        evals = [{"step": 25 * (i + 1), "val": v} for i, v in enumerate(vals)]
        got = _got(fn, copy.deepcopy(evals), patience)
        want = solution_early_stopping(evals, patience)
        try:
            got = (int(got[0]), int(got[1]))
        except Exception:  # noqa: BLE001
            return _fail(f"应返回 (best_step, stop_step) 两个步数，收到 {got!r}")
        if got != want:
            return _fail(f"{what}：验证损失 {vals}，patience={patience}；"
                         f"你的结果 {got}，期望 {want}{_early_stopping_hint(evals, patience, got)}")
    return _ok()


# ---------------------------------------------------------------- 检查器："先猜一猜"
@exercise
def predict_init_loss(guess, measured: float, vocab_size: int) -> bool:
    """先猜：刚初始化的模型在真实诗句上的损失是多少？"""
    values = {"A": 0.0, "B": 1.0, "C": math.log(vocab_size), "D": float(vocab_size)}
    return choice(guess, min(values, key=lambda k: abs(values[k] - measured)),
                  {"A": "接近 0", "B": "大约 1", "C": "大约 ln V", "D": "大约 V"},
                  why=f"量出来是 {measured:.3f}，ln {vocab_size} = {math.log(vocab_size):.3f}："
                      "logits 几乎全是 0，softmax 接近均匀分布，每个字的概率约 1/V")


@exercise
def predict_title_loss(guess, title_loss: float, body_loss: float) -> bool:
    """先猜：课程检查点在题目（含《》）的位置上的损失，和正文的位置比起来怎样？"""
    d = title_loss - body_loss
    return choice(guess, "A" if d <= -1 else ("C" if d >= 1 else "B"),
                  {"A": "题目上更低", "B": "差不多（相差不到 1 nat/字）",
                   "C": "题目上高得多（高 1 nat/字以上）"},
                  why=f"题目上 {title_loss:.3f}，正文上 {body_loss:.3f} nats/字，相差 {d:+.2f}")


@exercise
def predict_bf16_gap(guess, gap: float, spread: float) -> bool:
    """先猜：eval 模式下同一批数据，bf16 与 fp32 的损失差，和换批次的起伏比起来有多大？"""
    return choice(guess, "A" if gap >= spread else ("B" if gap * 10 >= spread else "C"),
                  {"A": "比换一个批次的起伏还大", "B": "比起伏小，但不到 10 倍",
                   "C": "比起伏小 10 倍以上"},
                  why=f"成对的差 {gap:.5f}，换批次的起伏（标准差）{spread:.4f}，"
                      f"相差 {spread / max(gap, 1e-12):.0f} 倍")


def _judged(seen: str, full_mode: str) -> tuple[str, str]:
    """(按哪个答案判, 附加说明)：按这次量到的判；快速模式（评分就在快速模式下跑）训练太短、
    量不出完整模式的现象时按完整模式的结果判，否则照着正文答对的学生反而记错。"""
    from ..runtime import is_quick
    if seen != full_mode and is_quick():
        return full_mode, "（快速模式训练太短，量不出这个现象：按完整模式量到的结果判）"
    return seen, "" if seen == full_mode else ("（这次的训练很短——快速模式？——所以按这次量到的判；"
                                               "完整模式的结果见正文）")


@exercise
def predict_overfit(guess, history) -> bool:
    """先猜：在几百首诗上一直训练（不加 dropout），验证损失会怎样？完整模式下是 B（先降后升）。"""
    vals = [e["val"] for e in (history.evals if hasattr(history, "evals") else history["evals"])]
    shape = "B" if vals[-1] - min(vals) > 0.1 else ("A" if vals[0] - vals[-1] > 0.1 else "C")
    seen, note = _judged(shape, "B")
    return choice(guess, seen, {"A": "一直下降", "B": "先降后升", "C": "几乎不变"},
                  why=f"验证损失从 {vals[0]:.2f} 降到最低 {min(vals):.2f}，最后是 {vals[-1]:.2f}"
                      + (note or "：模型开始背诵训练集了"))


@exercise
def predict_windows(guess, learned: float, rope: float) -> bool:
    """先猜：随机窗口时，学习式位置与 RoPE 谁的验证损失更低？完整模式下是 B（RoPE 反超）。"""
    seen, note = _judged("C" if abs(learned - rope) < 0.02 else ("A" if learned < rope else "B"),
                         "B")
    return choice(guess, seen, {"A": "学习式位置仍然更好", "B": "RoPE 反超",
                                "C": "两者差不多（差距小于 0.02）"},
                  why=f"随机窗口下：学习式位置 {learned:.3f}，RoPE {rope:.3f}" + note)


def report() -> int:
    """打印本章每个练习在这次运行里的检查结果（✓ 通过、✗ 没通过、— 还没检查），返回通过的个数。"""
    done = {r["exercise"]: r for r in results() if r["chapter"] == "nb03"}
    for name in EXERCISES:
        r = done.get(name)
        mark = "—" if r is None else ("✓" if r["passed"] else "✗")
        print(f"{mark} {name:<18} {'' if r is None or r['passed'] else r['message']}")
    passed = sum(bool(done.get(n, {}).get("passed")) for n in EXERCISES)
    print(f"通过 {passed}/{len(EXERCISES)}")
    return passed
