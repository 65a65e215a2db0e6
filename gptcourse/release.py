"""发布设置：一次发布认证的是“模型 + 解码设置”，设置存在检查点的 meta["release"] 里。

``choose`` 在一组种子（``TUNE_SEEDS``）上对每组候选设置采样、过一遍验收表
（:mod:`gptcourse.acceptance`），从全部通过的设置里挑模型自己最“情愿”写的那组（诗的平均负对数
似然最低，即最流畅的），再在另一组从没用过的种子（``GATE_SEEDS``）上确认一遍。
``generate`` / ``serve`` / ``eval`` 的命令行默认用这组设置（:func:`settings`）。

**样本外的验收**：挑选时看过的种子上的验收表是"样本内"的（设置就是照着它挑的），不能拿来证明
放行。所以每一张打印出来的验收表——命令行 ``eval``、模型卡（``data/checkpoints/README.md``）、
笔记本——都用 ``GATE_SEEDS``，并用 :func:`seed_note` 写明用的是哪些种子、与挑选的种子是否重叠。
两组种子只定义在这里。
"""
from __future__ import annotations

import itertools

import numpy as np

from .acceptance import acceptance_checks, poem_nll, sample_poems

# 没有发布设置的检查点（例如自己刚训练的）用的默认值
FALLBACK = {"temperature": 0.8, "top_k": None, "top_p": None, "repetition_penalty": 1.0,
            "rhyme": False, "tones": False}
GRID = {"temperature": (0.8, 0.9, 1.0), "top_p": (None, 0.95), "rhyme": (False, True)}
# (起始种子, 首数)。首数必须与门槛定下时一样（200 首）：distinct-n 随首数增多而变小，
# 100 首上通过的设置到 200 首可能不通过（第一次挑选就这样失败过）。
TUNE_SEEDS = (0, 200)            # choose 挑设置用（样本内）
GATE_SEEDS = (50_000, 200)       # 确认与每一张打印的验收表用：与 TUNE_SEEDS 不重叠（样本外）


def seed_note(seeds: tuple[int, int]) -> str:
    """一句话说明一组 (起始种子, 首数) 是不是样本外的，例如
    "种子 50000–50199（200 首；挑选发布设置用的是 0–199，不重叠：样本外）"。"""
    start, n = seeds
    t0, tn = TUNE_SEEDS
    overlap = start < t0 + tn and t0 < start + n
    where = ("与挑选重叠：样本内，不能证明放行" if overlap else "不重叠：样本外")
    return f"种子 {start}–{start + n - 1}（{n} 首；挑选发布设置用的是 {t0}–{t0 + tn - 1}，{where}）"


def settings(meta: dict | None) -> dict:
    """检查点的发布解码设置（没有时退回 FALLBACK）。"""
    release = (meta or {}).get("release") or {}
    return {**FALLBACK, **(release.get("settings") or {})}


def evaluate_setting(model, tok, train_text: str, val_loss: float, setting: dict,
                     seeds: tuple[int, int]) -> dict:
    """按一组设置采样 seeds[1] 首（种子从 seeds[0] 起），返回验收结果与平均负对数似然。"""
    start, n = seeds
    kw = {k: v for k, v in setting.items() if k != "temperature"}
    poems = sample_poems(model, tok, n, seed=start, temperature=setting["temperature"], **kw)
    checks = acceptance_checks(poems, train_text, val_loss=val_loss)
    scored = [p for p in poems if p]
    return {"setting": dict(setting), "seeds": list(seeds), "passed": all(c.passed for c in checks),
            "checks": {c.name: round(float(c.value), 4) for c in checks},
            "failed": [c.name for c in checks if not c.passed],
            "nll": round(float(np.mean(poem_nll(model, tok, scored))), 4) if scored else None,
            "examples": poems[:3]}


def choose(model, tok, train_text: str, val_loss: float, grid: dict = GRID,
           choose_seeds=TUNE_SEEDS, confirm_seeds=GATE_SEEDS, progress=print) -> dict:
    """在 grid 的每组设置上跑验收，挑出发布设置并确认；返回要存进 meta["release"] 的字典。"""
    rows = []
    for values in itertools.product(*grid.values()):
        setting = {**FALLBACK, **dict(zip(grid, values))}
        rows.append(evaluate_setting(model, tok, train_text, val_loss, setting, choose_seeds))
        progress(f"{_label(setting)}：{_verdict(rows[-1])}；NLL {rows[-1]['nll']}")
    passing = [r for r in rows if r["passed"]]
    if not passing:
        return {"settings": None, "candidates": rows, "confirmed": None,
                "reason": "没有一组候选设置通过全部验收项"}
    best = min(passing, key=lambda r: r["nll"])
    confirm = evaluate_setting(model, tok, train_text, val_loss, best["setting"], confirm_seeds)
    progress(f"选中 {_label(best['setting'])}；确认（另一组种子）：{_verdict(confirm)}")
    return {"settings": best["setting"] if confirm["passed"] else None, "candidates": rows,
            "chosen": best, "confirmed": confirm,
            "rule": "全部验收项通过的设置里，模型自己给诗的平均负对数似然最低者；"
                    "再用另一组种子确认"}


def _verdict(r: dict) -> str:
    return "通过" if r["passed"] else "未通过 " + "、".join(r["failed"])


def _label(s: dict) -> str:
    parts = [f"温度 {s['temperature']}", f"top-p {s['top_p']}" if s["top_p"] else "不截断"]
    parts += ["押韵约束"] if s.get("rhyme") else []
    parts += ["平仄约束"] if s.get("tones") else []
    return "、".join(parts)
