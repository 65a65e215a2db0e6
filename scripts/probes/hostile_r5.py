# ruff: noqa: E501 - 案例表一行一个案例
"""可靠性第 5 轮（issue 31 最后一项）：本轮新加的表面上的敌意输入，打印一张案例表。

    PYTHONPATH=. nice -n 19 python scripts/probes/hostile_r5.py [--only A,B,C,D,E] [--json out.json]

表面：A 辅助目标（objectives.parse / build、train() 的钩子、``train --aux``）、
B 快速解码（fastdecode 与 generate 的 compile / precision）、C 网页服务（到达快速解码的请求）、
D nbgrader 严格模式（check 的 strict()）、E scripts/rhyme_study.py 的参数。

每个案例：输入、期望、观察到的结果、判定（ok / BAD / note）。"坏结果"：库里的 traceback
（非 UserError）、命令行退出码不是 2 的坏输入、服务器 5xx、悄悄的错误结果、数据丢失、
无界分配、挂起。全部用小模型、几步训练，在一个解释器里跑，每个案例有 SIGALRM 超时。
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import gptcourse as gc  # noqa: E402
from gptcourse import checkpoint, cli, fastdecode, objectives  # noqa: E402
from gptcourse.config import preset  # noqa: E402
from gptcourse.errors import UserError  # noqa: E402
from gptcourse.generate import generate, generate_batch  # noqa: E402
from gptcourse.model import GPT  # noqa: E402
from gptcourse.tokenizer import CharTokenizer  # noqa: E402

ROWS: list[dict] = []
SCRATCH = Path(tempfile.mkdtemp(prefix="hostile_r5_"))


class CaseTimeout(BaseException):
    pass


def _alarm(*_):
    raise CaseTimeout


signal.signal(signal.SIGALRM, _alarm)


def case(cid: str, surface: str, what: str, expected: str, fn, judge, timeout: int = 120):
    """跑 fn()；judge(结果, 异常) → (判定, 观察到的一句话)。"""
    t0 = time.time()
    signal.alarm(timeout)
    res = exc = None
    try:
        res = fn()
    except CaseTimeout:
        exc = TimeoutError(f"超过 {timeout} s")
    except BaseException as e:  # noqa: BLE001
        exc = e
    finally:
        signal.alarm(0)
    try:
        verdict, seen = judge(res, exc)
    except Exception as e:  # noqa: BLE001
        verdict, seen = "BAD", f"judge 出错 {type(e).__name__}: {e}; res={res!r:.80} exc={exc!r:.200}"
    row = {"id": cid, "surface": surface, "input": what, "expected": expected,
           "observed": " ".join(str(seen).split())[:300], "verdict": verdict,
           "s": round(time.time() - t0, 1)}
    ROWS.append(row)
    print(f"[{verdict:>4}] {cid:5} {what[:70]:70} → {row['observed'][:160]}", flush=True)
    return res


def _exc(e) -> str:
    return f"{type(e).__name__}: {e}"


def user_error(match: str | None = None):
    """期望 UserError（消息含 match）；其它异常是 traceback（BAD），没有异常也是 BAD。"""
    def judge(res, exc):
        if isinstance(exc, UserError) and (match is None or match in str(exc)):
            return "ok", _exc(exc)
        if exc is None:
            return "BAD", f"没有报错，返回 {res!r:.120}"
        return "BAD", _exc(exc) + " @ " + _where(exc)
    return judge


def returns(pred=lambda r: True, show=repr):
    def judge(res, exc):
        if exc is not None:
            return "BAD", _exc(exc) + " @ " + _where(exc)
        return ("ok" if pred(res) else "BAD"), show(res)
    return judge


def _where(e) -> str:
    tb = traceback.extract_tb(e.__traceback__)[-2:]
    return ", ".join(f"{Path(f.filename).name}:{f.lineno}" for f in tb)


def run_cli(argv: list[str]) -> dict:
    """gptcourse.cli.main(argv) 在本进程里：rc、stderr 的行数与最后一行、有没有逃出的异常。"""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli.main(argv)
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
    lines = err.getvalue().strip().splitlines()
    return {"rc": rc, "n_err": len(lines), "err": lines[-1] if lines else "",
            "out": out.getvalue().strip()[-200:], "tb": "Traceback" in err.getvalue()}


def cli_rc(want: int, match: str | None = None, one_line: bool = True):
    def judge(r, exc):
        if exc is not None:
            return "BAD", "逃出 main(): " + _exc(exc) + " @ " + _where(exc)
        good = r["rc"] == want and not r["tb"] and (match is None or match in r["err"] + r["out"])
        if want == 2 and one_line:             # argparse 自己的错误：用法 + 一行 error，也是退出码 2
            good = good and (r["n_err"] == 1 or "error: argument" in r["err"])
        return ("ok" if good else "BAD"), f"rc={r['rc']} ({r['n_err']} 行) {r['err'][:200]}" + \
            (f" | out: {r['out'][-80:]}" if r["out"] and want == 0 else "")
    return judge


# ---------------------------------------------------------------- 小模型与小检查点
POEMS = ["春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。",
         "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。",
         "床前明月光，疑是地上霜。举头望明月，低头思故乡。"]
TEXT = "\n".join(POEMS) + "\n"
TOK = CharTokenizer.from_text(TEXT + "《》")


def tiny(block_size=24, pos=None, seed=0) -> GPT:
    torch.manual_seed(seed)
    kw = {"pos": pos} if pos else {}
    return GPT(preset("mini", vocab_size=TOK.vocab_size, block_size=block_size, n_layer=1,
                      n_head=2, n_embd=16, **kw)).eval()


TRAIN = ["train", "--corpus", "tang_5jue", "--preset", "mini", "--batch-size", "2",
         "--no-progress", "--no-bf16", "--eval-batches", "1", "--steps", "2",
         "--eval-interval", "2", "--compile" if False else "--no-compile"]


def out(name: str) -> str:
    return str(SCRATCH / name)


# ================================================================ A：辅助目标
def part_a():
    S = "A 辅助目标"
    bad_specs = {"A1": "rhyme=abc", "A2": "rhyme=-1", "A3": "rhyme=1e309", "A4": "rhyme=nan",
                 "A5": "rhyme=inf", "A6": "foo", "A7": "rhyme,rhyme", "A8": "rhyme=0",
                 "A9": "rhyme=-0", "A10": "RHYME", "A11": "=1", "A12": "rhyme==1",
                 "A13": "rhyme;tones", "A14": "rhyme=0x10", "A15": "rhyme=1,rhyme=2",
                 "A16": "rhyme=1e400", "A17": "韵部", "A18": "rhyme=-inf"}
    for cid, spec in bad_specs.items():
        case(cid, S, f"objectives.parse({spec!r})", "UserError 列出可用的名字",
             lambda spec=spec: objectives.parse(spec), user_error("--aux 只能是"))
    good = {"A19": ("", {}), "A20": (",,,", {}), "A21": (None, {}),
            "A22": ("rhyme=0.3,tones", {"rhyme": 0.3, "tones": None}),
            "A23": ("rhyme=", {"rhyme": None}), "A24": (" rhyme , norepeat=2 ",
                                                         {"rhyme": None, "norepeat": 2.0}),
            "A25": (" rhyme = 0.5 ", {"rhyme": 0.5})}
    for cid, (spec, want) in good.items():
        case(cid, S, f"objectives.parse({spec!r})", f"→ {want}",
             lambda spec=spec: objectives.parse(spec), returns(lambda r, w=want: r == w))
    case("A26", S, "objectives.parse('rhyme=1e300')（有限但极大的权重）",
         "UserError：权重有上限（否则总损失溢出成 inf，训练第 1 步“发散”）",
         lambda: objectives.parse("rhyme=1e300"), user_error())
    case("A27", S, "objectives.parse(5)（不是字符串）", "UserError",
         lambda: objectives.parse(5), user_error())
    ids = torch.tensor(TOK.encode(TEXT), dtype=torch.long)
    for cid, w in (("A28", float("inf")), ("A29", float("nan")), ("A30", 0.0), ("A31", -1.0),
                   ("A32", 1e300), ("A33", "1")):
        case(cid, S, f"objectives.build(['rhyme'], …, weight={w!r})", "UserError（权重 > 0、有限、有上限）",
             lambda w=w: objectives.build(["rhyme"], {"train": ids}, TOK, 16, w), user_error())
    case("A34", S, "objectives.build(['nope'], …)", "UserError 没有叫 'nope' 的辅助目标",
         lambda: objectives.build(["nope"], {"train": ids}, TOK, 16), user_error("没有叫"))
    case("A35", S, "objectives.build(['rhyme','rhyme'], …)（列表里重复）", "一个目标（去重）或 UserError",
         lambda: objectives.build(["rhyme", "rhyme"], {"train": ids}, TOK, 16),
         lambda r, e: (("ok", _exc(e)) if isinstance(e, UserError) else
                       ("ok" if e is None and len(r) == 1 else "BAD",
                        _exc(e) if e else f"{len(r)} 个目标")))
    prose = "我家门前有两株树，一株是枣树，还有一株也是枣树。\n这上面的夜的天空，奇怪而高。\n"
    ptok = CharTokenizer.from_text(prose)
    pids = torch.tensor(ptok.encode(prose), dtype=torch.long)
    for cid, name in (("A36", "rhyme"), ("A37", "tones"), ("A38", "norepeat")):
        case(cid, S, f"objectives.build(['{name}'])，语料里没有一首合格式的诗（鲁迅）",
             "UserError：训练集里没有一个标签（辅助损失会一直是 0，悄悄不起作用）",
             lambda name=name: objectives.build([name], {"train": pids}, ptok, 16),
             user_error("没有"))
    bpe = gc.bpe.BPETokenizer.train(TEXT * 3, vocab_size=300)
    bids = torch.tensor(bpe.encode(TEXT), dtype=torch.long)
    case("A39", S, "objectives.build(['rhyme'])，BPE 分词器（一个词元不止一个字）",
         "UserError：标签需要一字一词元（否则全是 −1，悄悄不起作用）",
         lambda: objectives.build(["rhyme"], {"train": bids}, bpe, 16), user_error())
    case("A40", S, "objectives.build(['rhyme', 'tones', 'norepeat'])，三首真诗",
         "三个目标，每个训练集都有标签",
         lambda: [int((o.labels["train"] >= 0).sum()) for o in
                  objectives.build(["rhyme", "tones", "norepeat"], {"train": ids}, TOK, 16)],
         returns(lambda r: len(r) == 3 and all(n > 0 for n in r)))
    model = tiny()
    objs = objectives.build(["rhyme"], {"train": ids}, TOK, 16)
    short = torch.tensor(TOK.encode(POEMS[0] + "\n"), dtype=torch.long)
    cfg = gc.train.TrainConfig(batch_size=2, max_steps=1, eval_interval=1, eval_batches=1,
                               progress=False, bf16=False)
    case("A41", S, "train(model, 另一段数据, objectives=按三首诗算的标签)（标签与数据不等长）",
         "UserError：标签长度与数据不符",
         lambda: gc.train.train(model, torch.cat([short] * 4), None, cfg, objectives=objs),
         user_error())
    case("A42", S, "train(..., objectives=[rhyme])，只有训练集的标签、却给了 val_data",
         "UserError：val 没有标签（而不是 KeyError）",
         lambda: gc.train.train(tiny(), ids, ids, cfg, objectives=objs), user_error())
    case("A43", S, "train(..., objectives=[rhyme]) 1 步，bf16 关",
         "正常结束，history.steps[0] 有 aux.rhyme",
         lambda: gc.train.train(tiny(), ids, None, cfg, objectives=objs).steps[0],
         returns(lambda r: "aux" in r and "rhyme" in r["aux"] and math.isfinite(r["aux"]["rhyme"]),
                 show=lambda r: r.get("aux")))
    big = objectives.build({"rhyme": objectives.MAX_WEIGHT}, {"train": ids}, TOK, 16)
    case("A44", S, "train(..., rhyme 权重 = 上限 10000) 2 步，梯度裁剪 1.0",
         "有限的损失与参数（裁剪包括头）",
         lambda: (lambda m: (gc.train.train(m, ids, None, gc.train.TrainConfig(
             batch_size=2, max_steps=2, eval_interval=2, eval_batches=1, progress=False,
             bf16=False), objectives=big).steps[-1]["loss"],
             all(torch.isfinite(p).all() for p in m.parameters())))(tiny()),
         returns(lambda r: math.isfinite(r[0]) and r[1]))
    case("A45", S, "train(..., objectives=[rhyme], bf16=True, bf16_mode='weights')",
         "UserError（还不支持）",
         lambda: gc.train.train(tiny(), ids, None, gc.train.TrainConfig(
             batch_size=2, max_steps=1, progress=False, bf16=True, bf16_mode="weights"),
             objectives=objs), user_error())

    # ---- 命令行
    for cid, extra, want, match in (
            ("A46", ["--aux", "rhyme=abc"], 2, "--aux 只能是"),
            ("A47", ["--aux", "rhyme=1e309"], 2, "--aux 只能是"),
            ("A48", ["--aux", "nan"], 2, "--aux 只能是"),
            ("A49", ["--aux", "rhyme", "--aux-weight", "nan"], 2, "--aux-weight"),
            ("A50", ["--aux", "rhyme", "--aux-weight", "0"], 2, "--aux-weight"),
            ("A51", ["--aux", "rhyme", "--aux-weight", "-inf"], 2, "--aux-weight"),
            ("A52", ["--aux", "rhyme=1e300"], 2, None),
            ("A53", ["--aux", "rhyme", "--aux-weight", "1e300"], 2, None),
            ("A54", ["--aux", "rhyme,rhyme"], 2, "不重复"),
            ("A55", ["--aux", "rhyme", "--corpus", "luxun_nahan"], 2, "没有"),
            ("A56", ["--aux", "rhyme", "--bf16", "--bf16-mode", "weights"], 2, None),
            ("A65", ["--aux", "rhyme=1e30"], 2, "--aux 只能是"),
            ("A66", ["--aux", "tones", "--aux-weight", "10001"], 2, "--aux-weight"),
            ("A67", ["--aux", "tones", "--titled"], 2, "--titled 只用于")):
        case(cid, S, "train " + " ".join(extra), f"退出码 {want}，一行",
             lambda extra=extra, cid=cid: run_cli(
                 [*[a for a in TRAIN if not (a == "--no-bf16" and "--bf16" in extra)],
                  *[a for a in extra if a != "--corpus" and a != "luxun_nahan"],
                  *(["--corpus", "luxun_nahan"] if "luxun_nahan" in extra else []),
                  "--out", out(f"{cid}.pt")]), cli_rc(want, match), timeout=240)
    case("A57", S, "train --aux ''（空）", "退出码 0，不加辅助目标（meta 里没有 aux）",
         lambda: (run_cli([*TRAIN, "--aux", "", "--out", out("A57.pt")]),
                  checkpoint.load(out("A57.pt"))[2].get("aux")),
         lambda r, e: ("BAD", _exc(e)) if e else (("ok" if r[0]["rc"] == 0 and r[1] is None
                                                  else "BAD"), f"rc={r[0]['rc']} aux={r[1]}"),
         timeout=240)
    case("A58", S, "train --aux rhyme=0.3,tones,norepeat --aux-weight 2",
         "退出码 0，meta.aux = {rhyme: 0.3, tones: 2, norepeat: 2}",
         lambda: (run_cli([*TRAIN, "--aux", "rhyme=0.3,tones,norepeat", "--aux-weight", "2",
                           "--out", out("A58.pt")]), checkpoint.load(out("A58.pt"))[2].get("aux")),
         lambda r, e: ("BAD", _exc(e)) if e else (
             ("ok" if r[0]["rc"] == 0 and r[1] == {"rhyme": 0.3, "tones": 2.0, "norepeat": 2.0}
              else "BAD"), f"rc={r[0]['rc']} aux={r[1]}"), timeout=240)
    case("A59", S, "train --aux rhyme --titled --corpus tang_jinti", "退出码 0",
         lambda: run_cli([*[a if a != "tang_5jue" else "tang_jinti" for a in TRAIN], "--aux",
                          "rhyme", "--titled", "--out", out("A59.pt")]), cli_rc(0), timeout=300)
    case("A60", S, "train --aux rhyme,tones --init <A58 的 .last.pt>", "退出码 0（头重新建，检查点结构不变）",
         lambda: run_cli([*TRAIN, "--aux", "rhyme,tones", "--init", out("A58.last.pt"),
                          "--out", out("A60.pt")]), cli_rc(0), timeout=240)
    case("A61", S, "train --aux norepeat --grad-accum 2", "退出码 0",
         lambda: run_cli([*TRAIN, "--aux", "norepeat", "--grad-accum", "2",
                          "--out", out("A61.pt")]), cli_rc(0), timeout=240)
    case("A62", S, "train --aux rhyme=10000（权重正好是上限）",
         "训练照常（梯度裁剪包括头），退出码 0",
         lambda: run_cli([*TRAIN, "--aux", "rhyme=10000", "--out", out("A62.pt")]),
         lambda r, e: ("BAD", _exc(e)) if e else (
             ("ok" if r["rc"] == 0 else "BAD"), f"rc={r['rc']} {r['err'][:200]}"), timeout=240)

    # ---- 续训：带辅助目标的 .last.pt
    def resume_plain():
        m, _, _ = checkpoint.load(out("A58.last.pt"), eval_mode=False)
        return checkpoint.resume(out("A58.last.pt"), m, gc.train.make_optimizer(m, 1e-3))
    case("A63", S, "checkpoint.resume(A58.last.pt, 只有模型参数组的优化器)（存档里有辅助头的参数组）",
         "UserError 说清参数组不一致（或能续训）",
         resume_plain, lambda r, e: (("ok", _exc(e)) if isinstance(e, UserError) else
                                     ("ok", f"续训第 {r} 步") if e is None else
                                     ("BAD", _exc(e) + " @ " + _where(e))))

    def resume_with_heads():
        m, tok, _ = checkpoint.load(out("A58.last.pt"), eval_mode=False)
        corpus = gc.data.load_corpus("tang_5jue")
        tids = torch.tensor(tok.encode(corpus.train), dtype=torch.long)
        objs = objectives.build({"rhyme": 0.3, "tones": 2.0, "norepeat": 2.0}, {"train": tids},
                                tok, m.config.n_embd)
        opt = gc.train.make_optimizer(m, 1e-3)
        gc.train._add_heads(opt, objs, 0.1)
        step = checkpoint.resume(out("A58.last.pt"), m, opt)
        h = gc.train.train(m, tids, None, gc.train.TrainConfig(
            batch_size=2, max_steps=4, eval_interval=4, eval_batches=1, progress=False,
            bf16=False), optimizer=opt, start_step=step, objectives=objs)
        return step, h.steps[-1]
    case("A64", S, "续训 A58.last.pt：同样的头 + resume + train(start_step) 到第 4 步",
         "从第 2 步接着训练到第 4 步，损失有限",
         resume_with_heads, returns(lambda r: r[0] == 2 and r[1]["step"] == 4
                                    and math.isfinite(r[1]["loss"]),
                                    show=lambda r: f"start {r[0]} → {r[1]['step']}"), timeout=200)


# ================================================================ B：快速解码
def part_b():
    S = "B 快速解码"
    m = tiny()
    P = "春眠"
    kw = dict(max_new_tokens=10, temperature=0, seed=0)
    case("B1", S, "generate(precision='fp16')", "UserError precision 只能是 fp32 / bf16",
         lambda: generate(m, TOK, P, precision="fp16", **kw), user_error("precision"))
    case("B2", S, "generate(precision=None)", "UserError",
         lambda: generate(m, TOK, P, precision=None, **kw), user_error("precision"))
    case("B3", S, "generate(precision='BF16')", "UserError（或当作 bf16）",
         lambda: generate(m, TOK, P, precision="BF16", **kw), user_error("precision"))
    case("B4", S, "generate(precision=['bf16'])（不可哈希）", "UserError",
         lambda: generate(m, TOK, P, precision=["bf16"], **kw), user_error("precision"))
    case("B5", S, "generate(compile='yes')", "UserError",
         lambda: generate(m, TOK, P, compile="yes", **kw), user_error("compile"))
    case("B6", S, "generate(compile=[True])（不可哈希）", "UserError",
         lambda: generate(m, TOK, P, compile=[True], **kw), user_error("compile"))
    case("B7", S, "generate(compile=True, use_cache=False)", "UserError 需要 use_cache=True",
         lambda: generate(m, TOK, P, compile=True, use_cache=False, **kw), user_error("use_cache"))
    case("B8", S, "generate(precision='bf16', use_cache=False)", "UserError",
         lambda: generate(m, TOK, P, precision="bf16", use_cache=False, **kw),
         user_error("use_cache"))
    case("B9", S, "generate(precision='bf16') 贪心 10 个词元", "字符串，以提示开头",
         lambda: generate(m, TOK, P, precision="bf16", **kw),
         returns(lambda r: isinstance(r, str) and r.startswith(P)))
    case("B10", S, "generate(precision='bf16') 两次同种子", "两次相同",
         lambda: [generate(m, TOK, P, precision="bf16", max_new_tokens=20, seed=3)
                  for _ in range(2)], returns(lambda r: r[0] == r[1]))
    case("B11", S, "generate(precision='bf16', prompt='')", "字符串",
         lambda: generate(m, TOK, "", precision="bf16", **kw), returns(lambda r: isinstance(r, str)))
    bs = m.config.block_size
    for cid, n in (("B12", bs - 3), ("B13", bs - 2), ("B14", bs - 1), ("B15", bs), ("B16", bs + 1),
                   ("B17", 3 * bs)):
        case(cid, S, f"generate(precision='bf16', '春眠', max_new_tokens={n})（block_size={bs}）",
             "正好写 n 个新字，或遇到结束符停下；越过上下文时整段重算，不报错",
             lambda n=n: generate(m, TOK, P, precision="bf16", max_new_tokens=n, temperature=1.0,
                                  seed=1, repetition_penalty=1.0),
             returns(lambda r, n=n: isinstance(r, str) and len(r) - len(P) <= n,
                     show=lambda r: f"{len(r) - len(P)} 个新字"))
    case("B18", S, f"generate(precision='bf16', max_new_tokens={64 * bs + 1})", "UserError 说出上限",
         lambda: generate(m, TOK, P, precision="bf16", max_new_tokens=64 * bs + 1),
         user_error("max_new_tokens 最多"))
    case("B19", S, f"generate(precision='bf16', 提示 {bs} 个字)", "UserError 提示太长",
         lambda: generate(m, TOK, (POEMS[0] * 2)[:bs], precision="bf16"), user_error("提示太长"))
    case("B20", S, f"generate(precision='bf16', 提示 {bs - 1} 个字 = 上下文刚满)", "字符串",
         lambda: generate(m, TOK, (POEMS[0] * 2)[:bs - 1], precision="bf16", **kw),
         returns(lambda r: isinstance(r, str)))
    prompts = ["", "春", "春眠不觉", "白日依山尽，"]
    case("B21", S, "generate_batch(4 个不同长度的提示, precision='bf16', seed=5) vs 逐条 seed=5+i",
         "逐行相同（每行自己的随机数；同一个 bf16 一步）",
         lambda: (generate_batch(m, TOK, prompts, max_new_tokens=12, seed=5, precision="bf16"),
                  [generate(m, TOK, p, max_new_tokens=12, seed=5 + i, precision="bf16")
                   for i, p in enumerate(prompts)]),
         lambda r, e: ("BAD", _exc(e)) if e else (("ok" if r[0] == r[1] else "note"),
                                                  "相同" if r[0] == r[1] else
                                                  f"不同（bf16 舍入随批大小变？）{r[0]} vs {r[1]}"))
    case("B22", S, "generate_batch(['春'] * 40, precision='bf16')", "40 首",
         lambda: generate_batch(m, TOK, ["春"] * 40, max_new_tokens=8, seed=0, precision="bf16"),
         returns(lambda r: len(r) == 40, show=lambda r: f"{len(r)} 首"))

    # fp32 快速一步（不编译）与教学路径
    dec = fastdecode.FastDecoder(m, None, compile=False)
    ids = [TOK.eos_id] + TOK.encode(POEMS[0])

    def fast_vs_model():
        cache = dec.new_cache(1)
        worst = 0.0
        full = m(torch.tensor([ids[:bs]]))[0][0]
        for t, i in enumerate(ids[:bs]):
            lg = dec(cache, torch.tensor([i]), t)[0]
            worst = max(worst, (lg - full[t]).abs().max().item())
        return worst
    case("B23", S, "FastDecoder(fp32, 不编译) 逐位置的 logits vs model(整段)", "差 ≤ 1e-5",
         fast_vs_model, returns(lambda r: r <= 1e-5, show=lambda r: f"最大差 {r:.2e}"))
    case("B24", S, f"FastDecoder(...)(cache, col, t={bs})（越过缓存）", "UserError 位置超出了缓存",
         lambda: dec(dec.new_cache(1), torch.tensor([0]), bs), user_error("超出了缓存"))
    case("B25", S, "FastDecoder(...)(cache, col, t=-1)", "UserError",
         lambda: dec(dec.new_cache(1), torch.tensor([0]), -1), user_error("超出了缓存"))
    ml = tiny(pos="learned")
    case("B26", S, "learned 位置编码的模型：generate(precision='bf16')", "字符串",
         lambda: generate(ml, TOK, P, precision="bf16", **kw), returns(lambda r: isinstance(r, str)))

    # 训练中途的模式与权重
    def mode_after():
        mm = tiny()
        mm.train()
        fastdecode.FastDecoder(mm, None, compile=False)
        return mm.training
    case("B27", S, "model.train(); FastDecoder(model, fp32)", "model 仍在 train 模式（不改调用者的模式）",
         mode_after, returns(lambda r: r is True, show=lambda r: f"training={r}"))

    def mode_after_generate():
        mm = tiny()
        mm.train()
        with _no_compiler():
            generate(mm, TOK, P, compile=True, **kw)
        return mm.training
    case("B28", S, "model.train(); generate(compile=True)（这里没有编译器 → 不编译的快速一步）",
         "model 仍在 train 模式（dropout 照旧）", mode_after_generate,
         returns(lambda r: r is True, show=lambda r: f"training={r}"))

    def stale_bf16():
        a, b = tiny(seed=0), tiny(seed=1)
        before = generate(a, TOK, P, precision="bf16", **kw)        # 建好 a 的 bf16 解码器
        a.load_state_dict(b.state_dict())                            # 就地换成 b 的权重
        after = generate(a, TOK, P, precision="bf16", **kw)
        fresh = generate(tiny(seed=1), TOK, P, precision="bf16", **kw)
        return before, after, fresh
    case("B29", S, "generate(bf16)；model.load_state_dict(另一组权重)；再 generate(bf16)",
         "第二次用新权重（= 新模型的结果），不是建解码器时的旧副本", stale_bf16,
         returns(lambda r: r[1] == r[2], show=lambda r: f"旧 {r[0]!r} 新 {r[1]!r} 应为 {r[2]!r}"))

    def stale_after_step():
        a = tiny(seed=0)
        generate(a, TOK, P, precision="bf16", **kw)
        with torch.no_grad():
            a.lm_head.weight.mul_(-1)                                # 就地改权重（像优化器一步）
        got = generate(a, TOK, P, precision="bf16", **kw)
        fastdecode.forget(a)
        return got, generate(a, TOK, P, precision="bf16", **kw)
    case("B30", S, "generate(bf16)；就地改权重（优化器一步那样）；再 generate(bf16)",
         "与 forget() 之后重建的结果相同", stale_after_step,
         returns(lambda r: r[0] == r[1], show=lambda r: f"{r[0]!r} vs 重建后 {r[1]!r}"))

    def switching():
        a = tiny(seed=2)
        r1 = generate(a, TOK, P, precision="bf16", max_new_tokens=15, seed=7)
        r2 = generate(a, TOK, P, max_new_tokens=15, seed=7)
        r3 = generate(a, TOK, P, precision="bf16", max_new_tokens=15, seed=7)
        r4 = generate(a, TOK, P, max_new_tokens=15, seed=7, use_cache=False)
        return r1, r2, r3, r4
    case("B31", S, "同一模型 bf16 → fp32 → bf16 → fp32 无缓存（同种子）",
         "两次 bf16 相同；fp32 有/无缓存相同", switching,
         returns(lambda r: r[0] == r[2] and r[1] == r[3]))

    def threads():
        a = tiny(seed=3)
        seq = [generate(a, TOK, "春", precision="bf16", max_new_tokens=15, seed=s) for s in range(6)]
        got = [None] * 6

        def work(s):
            got[s] = generate(a, TOK, "春", precision="bf16", max_new_tokens=15, seed=s)
        ts = [threading.Thread(target=work, args=(s,)) for s in range(6)]
        [t.start() for t in ts]
        [t.join(60) for t in ts]
        return seq, got
    case("B32", S, "6 个线程同时 generate(bf16, seed=s) vs 顺序", "逐个相同", threads,
         returns(lambda r: r[0] == r[1], show=lambda r: "相同" if r[0] == r[1] else f"{r}"))

    # 编译失败、没有编译器、缓存目录
    def compile_fails():
        a = tiny(seed=4)
        want = generate(a, TOK, P, precision="bf16", **kw)
        fastdecode.forget(a)
        real = torch.compile

        def broken(fn, **k):
            def f(*x):
                raise RuntimeError("inductor 坏了\n第二行")
            return f
        torch.compile = broken
        try:
            got = generate(a, TOK, P, precision="bf16", compile=True, **kw)
            d = fastdecode.decoder_for(a, torch.bfloat16, True)
        finally:
            torch.compile = real
        return want, got, d.compiled, d.reason
    case("B33", S, "generate(bf16, compile=True)，torch.compile 第一次调用就抛错",
         "退回不编译的快速一步，结果与不编译相同，reason 说明", compile_fails,
         returns(lambda r: r[0] == r[1] and r[2] is False and "失败" in r[3],
                 show=lambda r: f"same={r[0] == r[1]} compiled={r[2]} {r[3][:60]}"))

    def no_compiler():
        a = tiny(seed=4)
        with _no_compiler():
            got = generate(a, TOK, P, precision="bf16", compile=True, **kw)
            d = fastdecode.decoder_for(a, torch.bfloat16, True)
        return got, d.compiled, d.reason
    case("B34", S, "generate(compile=True)，PATH 里没有 g++/clang++", "不编译，reason 说明",
         no_compiler, returns(lambda r: r[1] is False and "C++" in r[2], show=lambda r: r[2]))

    envs = {"B35": ("GPTCOURSE_INDUCTOR_CACHE", "/proc/nope/inductor"),
            "B36": ("GPTCOURSE_INDUCTOR_CACHE", str(REPO / "README.md")),
            "B37": ("GPTCOURSE_INDUCTOR_CACHE", "/dev/null/x")}
    for cid, (var, val) in envs.items():
        def with_env(var=var, val=val):
            a = tiny(seed=5)
            old = {k: os.environ.get(k) for k in (var, "TORCHINDUCTOR_CACHE_DIR")}
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
            os.environ[var] = val
            try:
                with _fake_compile():
                    return generate(a, TOK, P, compile=True, **kw)
            finally:
                for k, v in old.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
        case(cid, S, f"generate(compile=True)，{var}={val.replace(str(REPO), '.')}（建不了目录）",
             "照常生成（不用这个缓存目录，或退回不编译），不是 OSError traceback", with_env,
             returns(lambda r: isinstance(r, str)))
    case("B38", S, "fastdecode.use_inductor_cache('/proc/nope')（显式给了建不了的目录）",
         "UserError 说清（显式给的路径）或回退", lambda: fastdecode.use_inductor_cache("/proc/nope"),
         lambda r, e: (("ok", _exc(e)) if isinstance(e, UserError) else
                       ("ok", f"回退到 {r}") if e is None else ("BAD", _exc(e) + " @ " + _where(e))))
    case("B39", S, "fastdecode.inductor_cache_dir()，GPTCOURSE_INDUCTOR_CACHE='~/x'", "展开 ~",
         lambda: _env_call("GPTCOURSE_INDUCTOR_CACHE", "~/x", fastdecode.inductor_cache_dir),
         returns(lambda r: "~" not in str(r), show=str))

    def freed():
        import gc as gcmod
        import weakref
        out_ = []
        for dtype, comp in ((torch.float32, True), (torch.bfloat16, False)):
            a = tiny(seed=8)
            with _fake_compile():
                fastdecode.decoder_for(a, dtype, comp)
            r = weakref.ref(a)
            del a
            gcmod.collect()
            out_.append(r() is None)
        return out_
    case("B41", S, "建过快速解码器（fp32 编译 / bf16）的模型，del 之后 gc.collect()",
         "模型被回收（循环里建模型、compile=True 生成时内存不涨）", freed,
         returns(lambda r: all(r), show=lambda r: f"fp32 编译 回收={r[0]}，bf16 回收={r[1]}"))

    # 真的编译一次（小模型）：缓存的 == 不缓存的（fp32 贪心）
    def real_compile():
        a = tiny(seed=6)
        os.environ["GPTCOURSE_INDUCTOR_CACHE"] = str(SCRATCH / "inductor")
        saved = os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        try:
            plain = generate(a, TOK, P, max_new_tokens=20, temperature=0)
            comp = generate(a, TOK, P, max_new_tokens=20, temperature=0, compile=True)
            d = fastdecode.decoder_for(a, torch.float32, True)
            auto = generate(a, TOK, P, max_new_tokens=20, temperature=0, compile=None)
            batch = generate_batch(a, TOK, ["春", "白日"], max_new_tokens=10, temperature=0,
                                   compile=True)
            single = [generate(a, TOK, p, max_new_tokens=10, temperature=0) for p in ("春", "白日")]
        finally:
            if saved is not None:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = saved
        return plain, comp, auto, d.compiled, d.reason, batch, single
    if fastdecode.compiler_available()[0]:
        case("B40", S, "fp32 贪心：不编译 vs compile=True vs compile=None（已编译）；批 2 vs 逐条",
             "三者相同；批 2 与逐条相同", real_compile,
             returns(lambda r: r[0] == r[1] == r[2] and r[5] == r[6],
                     show=lambda r: f"compiled={r[3]} ({r[4][:40]}) same={r[0] == r[1] == r[2]} "
                                    f"batch={r[5] == r[6]}"), timeout=600)


@contextlib.contextmanager
def _no_compiler():
    real = fastdecode.shutil.which
    fastdecode.shutil.which = lambda c: None
    try:
        yield
    finally:
        fastdecode.shutil.which = real


@contextlib.contextmanager
def _fake_compile():
    """torch.compile 换成原样返回（不真的编译，只走 FastDecoder 的编译分支）。"""
    real = torch.compile
    torch.compile = lambda fn, **k: fn
    try:
        yield
    finally:
        torch.compile = real


def _env_call(var, val, fn):
    old = os.environ.get(var)
    os.environ[var] = val
    try:
        return fn()
    finally:
        if old is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = old


# ================================================================ C：网页服务
def part_c():
    S = "C 网页服务"
    import http.client

    from gptcourse.serve import make_server
    m = tiny(seed=7)
    old = os.environ.get("GPTCOURSE_INDUCTOR_CACHE")
    os.environ["GPTCOURSE_INDUCTOR_CACHE"] = "/proc/nope/inductor"     # 建不了的缓存目录
    err = io.StringIO()
    with contextlib.redirect_stderr(err), _fake_compile():
        srv = make_server(m, TOK, "127.0.0.1", 0, compile=True)
        th = threading.Thread(target=srv.serve_forever, daemon=True)
        th.start()
        if srv.warming is not None:
            srv.warming.join(60)
    if old is None:
        os.environ.pop("GPTCOURSE_INDUCTOR_CACHE", None)
    else:
        os.environ["GPTCOURSE_INDUCTOR_CACHE"] = old
    port = srv.server_address[1]

    def post(body, path="/api/generate"):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        c.request("POST", path, data, {"Content-Type": "application/json",
                                       "Host": f"127.0.0.1:{port}"})
        r = c.getresponse()
        raw = r.read()
        c.close()
        try:
            j = json.loads(raw.splitlines()[-1] if path == "/api/stream" else raw)
        except Exception:  # noqa: BLE001
            j = raw[:80]
        return r.status, j

    case("C1", S, "serve(compile=True)，GPTCOURSE_INDUCTOR_CACHE 建不了：后台编译线程",
         "没有 traceback 进日志；服务器照常", lambda: err.getvalue(),
         returns(lambda r: "Traceback" not in r, show=lambda r: r.strip()[-200:] or "日志是空的"))
    status = {"C2": ({"prompt": "春", "max_new_tokens": 8, "seed": 0}, 200),
              "C3": ({"prompt": "春", "compile": True}, 400),
              "C4": ({"prompt": "春", "precision": "bf16"}, 400),
              "C5": ({"prompt": "春", "max_new_tokens": 10**18}, 400),
              "C6": ({"prompt": "春", "max_new_tokens": 1e3}, 400),
              "C7": ({"prompt": "春", "seed": -1}, 400),
              "C8": ({"prompt": "春", "seed": 2**64}, 400),
              "C9": ({"prompt": ["春"]}, 400),
              "C10": ({"prompt": {"a": 1}}, 400),
              "C11": ({"prompt": "春", "temperature": "0.5"}, 400),
              "C12": ({"prompt": "春", "top_k": 1e9}, 400),
              "C13": ({"prompt": "春", "top_k": True}, 400),
              "C14": ({"prompt": "春", "rhyme": "yes"}, 400),
              "C15": ({"prompt": "春" * 65}, 400),
              "C16": (b"[" * 100000, 400),
              "C17": (b'{"prompt": "\\ud800"}', 400),
              "C18": (b'{"max_new_tokens": ' + b"9" * 5000 + b"}", 400),
              "C19": ({"prompt": "春", "max_new_tokens": 200, "seed": 1}, 200),
              "C20": ({"prompt": "", "max_new_tokens": 1}, 200)}
    for cid, (body, want) in status.items():
        shown = body if isinstance(body, dict) else body[:40]
        case(cid, S, f"POST /api/generate {shown!s:.60}", f"{want}（4xx 是 JSON）",
             lambda body=body: post(body),
             returns(lambda r, w=want: (r[0] == w or (w == 400 and 400 <= r[0] < 500))
                     and (w == 200 or isinstance(r[1], dict)),
                     show=lambda r: f"{r[0]} {str(r[1])[:120]}"))
    case("C21", S, "POST /api/stream {'prompt': '春', 'max_new_tokens': 30}", "200，最后一行 done",
         lambda: post({"prompt": "春", "max_new_tokens": 30, "seed": 2}, "/api/stream"),
         returns(lambda r: r[0] == 200 and r[1].get("done"), show=lambda r: f"{r[0]}"))

    def concurrent():
        res = [None] * 12

        def w(i):
            res[i] = post({"prompt": "春", "max_new_tokens": 12, "seed": i})
        ts = [threading.Thread(target=w, args=(i,)) for i in range(12)]
        [t.start() for t in ts]
        [t.join(120) for t in ts]
        seq = [post({"prompt": "春", "max_new_tokens": 12, "seed": i}) for i in range(12)]
        return res, seq
    case("C22", S, "12 个并发请求（seed 0–11）vs 顺序", "全部 200 或 503（满了），200 的与顺序相同",
         concurrent,
         returns(lambda r: all(a and a[0] in (200, 503) for a in r[0]) and all(
             a[1]["text"] == b[1]["text"] for a, b in zip(*r) if a[0] == 200),
             show=lambda r: f"状态 {sorted({a[0] for a in r[0] if a})}"), timeout=300)
    case("C23", S, "GET /api/info 的 compiled", "false（编译没成功 / 没有编译器时不说成 true）",
         lambda: _get(port, "/api/info"),
         returns(lambda r: r.get("compiled") in (False, True), show=lambda r: f"compiled={r.get('compiled')}"))
    srv.shutdown()
    srv.server_close()


def _get(port, path):
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", path, headers={"Host": f"127.0.0.1:{port}"})
    r = c.getresponse()
    out = json.loads(r.read())
    c.close()
    return out


# ================================================================ D：nbgrader 严格模式
def part_d():
    S = "D 严格模式"
    from gptcourse.check import _common, nb01

    def stub(ids):
        raise NotImplementedError("还没完成：数相邻的一对")

    def strict_with(env: dict):
        saved = {k: os.environ.pop(k, None) for k in _common.STRICT_ENV}
        os.environ.update(env)
        try:
            return _common.strict()
        finally:
            for k in _common.STRICT_ENV:
                os.environ.pop(k, None)
            os.environ.update({k: v for k, v in saved.items() if v is not None})

    table = {"D1": ({}, False), "D2": ({"NBGRADER_EXECUTION": "autograde"}, True),
             "D3": ({"NBGRADER_EXECUTION": "validate"}, True),
             "D4": ({"NBGRADER_EXECUTION": ""}, False),
             "D5": ({"GPTCOURSE_STRICT": "1"}, True), "D6": ({"GPTCOURSE_STRICT": "0"}, False),
             "D7": ({"GPTCOURSE_STRICT": ""}, False),
             "D8": ({"NBGRADER_EXECUTION": "0"}, None), "D9": ({"NBGRADER_EXECUTION": "false"}, None),
             "D10": ({"GPTCOURSE_STRICT": "false"}, False), "D11": ({"GPTCOURSE_STRICT": "no"}, False),
             "D12": ({"GPTCOURSE_STRICT": " 0 "}, False), "D13": ({"GPTCOURSE_STRICT": "yes"}, True),
             "D14": ({"GPTCOURSE_STRICT": "0", "NBGRADER_EXECUTION": "autograde"}, True)}
    for cid, (env, want) in table.items():
        def judge(r, e, want=want):
            if e is not None:
                return "BAD", _exc(e)
            if want is None:
                return "note", f"strict={r}（nbgrader 自己只设 autograde / validate）"
            return ("ok" if r == want else "BAD"), f"strict={r}"
        case(cid, S, f"strict()，环境 {env}", f"strict={want}", lambda env=env: strict_with(env), judge)

    def check_under(env: dict, fn):
        saved = {k: os.environ.pop(k, None) for k in _common.STRICT_ENV}
        os.environ.update(env)
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf):
                try:
                    return ("returned", fn(), buf.getvalue().strip())
                except AssertionError as e:
                    return ("AssertionError", str(e), buf.getvalue().strip())
        finally:
            for k in _common.STRICT_ENV:
                os.environ.pop(k, None)
            os.environ.update({k: v for k, v in saved.items() if v is not None})

    sol = _common.SOLUTIONS["nb01.count_pairs"]
    rows = {"D15": ({}, lambda: nb01.count_pairs(stub), ("returned", False)),
            "D16": ({"NBGRADER_EXECUTION": "autograde"}, lambda: nb01.count_pairs(stub),
                    ("AssertionError", None)),
            "D17": ({"NBGRADER_EXECUTION": "autograde"}, lambda: nb01.count_pairs(lambda i: {}),
                    ("AssertionError", None)),
            "D18": ({"NBGRADER_EXECUTION": "autograde"}, lambda: nb01.count_pairs(sol),
                    ("returned", True)),
            "D19": ({"NBGRADER_EXECUTION": "autograde"}, lambda: nb01.count_pairs(None),
                    ("AssertionError", None)),
            "D20": ({"NBGRADER_EXECUTION": "autograde"}, lambda: nb01.count_pairs(...),
                    ("AssertionError", None)),
            "D21": ({"NBGRADER_EXECUTION": "autograde"},
                    lambda: nb01.count_pairs(lambda i: 1 / 0), ("AssertionError", None)),
            "D22": ({"NBGRADER_EXECUTION": "autograde"},
                    lambda: nb01.count_pairs(lambda i: (_ for _ in ()).throw(SystemExit(3))),
                    ("AssertionError", None))}
    for cid, (env, fn, want) in rows.items():
        def judge(r, e, want=want):
            if e is not None:
                return "BAD", _exc(e) + " @ " + _where(e)
            kind, value, printed = r
            ok = kind == want[0] and (want[1] is None or value == want[1])
            return ("ok" if ok else "BAD"), f"{kind}: {str(value)[:120]}" + \
                (f" | 打印 {printed[:60]}" if printed else "")
        case(cid, S, f"nb01.count_pairs(...)，环境 {env or '{}'}，答案 #{cid}",
             f"{want[0]}", lambda env=env, fn=fn: check_under(env, fn), judge)

    def ready_under():
        from gptcourse.check._common import mine, ready

        def stub2(*a):
            raise NotImplementedError("还没完成")
        return check_under({"NBGRADER_EXECUTION": "autograde"},
                           lambda: (ready("练习 1", stub2), mine(stub2, fallback=len, label="练习 1")))
    case("D23", S, "严格模式下 ready('练习 1', 存根) / mine(存根, fallback=len)",
         "不抛出（证明单元格跳过、用包里的代替）：学生版照样跑到底", ready_under,
         returns(lambda r: r[0] == "returned", show=lambda r: f"{r[0]} {str(r[1])[:60]} | {r[2][:80]}"))


def part_f():
    """学生版第 01 章（快速模式）整本执行：不设 / 设 NBGRADER_EXECUTION。学生看到什么。"""
    S = "D 严格模式"
    import nbformat
    from nbclient import NotebookClient

    from gptcourse.classroom.student import student_notebook
    path = REPO / "notebooks" / "01_data_tokenizer.ipynb"

    def run(env):
        nb = student_notebook(nbformat.read(path, as_version=4), path.name)
        saved = {k: os.environ.get(k) for k in ("NBGRADER_EXECUTION", "GPTCOURSE_STRICT",
                                                 "GPTCOURSE_QUICK", "MPLBACKEND", "PYTHONPATH")}
        os.environ.update({"GPTCOURSE_QUICK": "1", "MPLBACKEND": "Agg",
                           "PYTHONPATH": str(REPO), **env})
        for k in ("NBGRADER_EXECUTION", "GPTCOURSE_STRICT"):
            if k not in env:
                os.environ.pop(k, None)
        try:
            NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                           resources={"metadata": {"path": str(REPO / "notebooks")}}).execute()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        graded = {i for i, c in enumerate(nb.cells) if c.cell_type == "code"
                  and c.get("metadata", {}).get("nbgrader", {}).get("grade")}
        errors = [(i, o["ename"], o["evalue"]) for i, c in enumerate(nb.cells)
                  for o in c.get("outputs", []) if o.get("output_type") == "error"]
        return graded, errors

    def judge_plain(r, e):
        if e is not None:
            return "BAD", _exc(e)
        graded, errors = r
        return ("ok" if not errors else "BAD"), f"{len(graded)} 个评分单元格，{len(errors)} 个错误"

    def judge_strict(r, e):
        if e is not None:
            return "BAD", _exc(e)
        graded, errors = r
        where = {i for i, *_ in errors}
        stray = [x for x in errors if x[0] not in graded or x[1] != "AssertionError"]
        ok = where == graded and not stray and all("还没完成" in v for _, _, v in errors)
        return ("ok" if ok else "BAD"), (f"{len(graded)} 个评分单元格，{len(errors)} 个错误，"
                                         f"非评分单元格/非 AssertionError：{stray[:2]}；"
                                         f"学生看到：AssertionError: {errors[0][2][:60] if errors else ''}")
    case("D24", S, "学生版 01（快速模式）整本执行，不设 NBGRADER_EXECUTION",
         "0 个错误（检查单元格打印“还没完成”）", lambda: run({}), judge_plain, timeout=400)
    case("D25", S, "学生版 01 整本执行，NBGRADER_EXECUTION=autograde（nbgrader 那样 allow_errors）",
         "恰好每个评分单元格一个 AssertionError（文字是“还没完成：…”），其余单元格照常",
         lambda: run({"NBGRADER_EXECUTION": "autograde"}), judge_strict, timeout=400)


# ================================================================ E：rhyme_study.py
def part_e():
    S = "E rhyme_study.py"
    py = sys.executable
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def run(args, timeout=90):
        try:
            p = subprocess.run([py, str(REPO / "scripts" / "rhyme_study.py"), *args], cwd=REPO,
                               env=env, capture_output=True, text=True, timeout=timeout)
            lines = p.stderr.strip().splitlines()
            return {"rc": p.returncode, "n_err": len(lines), "err": lines[-1] if lines else "",
                    "tb": "Traceback" in p.stderr, "out": p.stdout[-100:]}
        except subprocess.TimeoutExpired:
            return {"rc": None, "n_err": 0, "err": f"超过 {timeout} s（参数错误没有在开始时查出）",
                    "tb": False, "out": ""}
    for cid, args, match in (
            ("E1", ["--seeds", "abc"], "--seeds"), ("E2", ["--seeds", ""], "--seeds"),
            ("E3", ["--variants", "不存在"], "--variants"), ("E4", ["--steps", "0"], "--steps"),
            ("E5", ["--steps", "-5"], "--steps"), ("E6", ["--init", "/nonexistent.pt"], "nonexistent"),
            ("E7", ["--json", "/nonexistent/dir/x.json"], "x.json"),
            ("E8", ["--seeds", "0,0"], "--seeds"), ("E9", ["--seeds", "-1"], "--seeds")):
        case(cid, S, "rhyme_study.py " + " ".join(args), "退出码 2，一行，在开始计算之前",
             lambda args=args: run(args), cli_rc(2, match), timeout=120)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="A,B,C,D,E,F")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    parts = {"A": part_a, "B": part_b, "C": part_c, "D": part_d, "E": part_e, "F": part_f}
    for k in args.only.split(","):
        parts[k]()
    bad = [r for r in ROWS if r["verdict"] == "BAD"]
    print(f"\n== {len(ROWS)} 个案例，{len(bad)} 个坏结果，"
          f"{sum(r['verdict'] == 'note' for r in ROWS)} 个备注")
    print("| id | 表面 | 输入 | 期望 | 观察 | 判定 |\n|---|---|---|---|---|---|")
    for r in ROWS:
        cells = [r[k].replace("|", "\\|") for k in ("id", "surface", "input", "expected",
                                                      "observed", "verdict")]
        print("| " + " | ".join(cells) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(ROWS, ensure_ascii=False, indent=1), encoding="utf-8")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
