"""发布设置：一次发布认证的是“模型 + 解码设置”，设置存在检查点的 meta["release"] 里。

``choose`` 在一组种子上对每组候选设置采样、过一遍验收表（:mod:`gptcourse.acceptance`），从全部
通过的设置里挑模型自己最“情愿”写的那组（诗的平均负对数似然最低，即最流畅的），再换一组从没用过的
种子确认一遍。``generate`` / ``serve`` / ``eval`` 的命令行默认用这组设置（:func:`settings`）。
"""
from __future__ import annotations

import itertools

import numpy as np

from .acceptance import acceptance_checks, poem_nll, sample_poems

# 没有发布设置的检查点（例如自己刚训练的）用的默认值
FALLBACK = {"temperature": 0.8, "top_k": None, "top_p": None, "repetition_penalty": 1.0,
            "rhyme": False, "tones": False}
GRID = {"temperature": (0.8, 0.9, 1.0), "top_p": (None, 0.95), "rhyme": (False, True)}
CHOOSE_SEEDS = (0, 100)          # (起始种子, 首数)：挑设置用
CONFIRM_SEEDS = (50_000, 200)    # 确认用：与挑选时不重叠


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
           choose_seeds=CHOOSE_SEEDS, confirm_seeds=CONFIRM_SEEDS, progress=print) -> dict:
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
