"""“先猜一猜”真的是先猜（issue 33 第 3 条）。

每道预测题在笔记本里是三样东西：题目（文字）、学员填字母的答案格（``### BEGIN SOLUTION``），
和检查格（``gc.check.nbXX.guess_*(guess_*, …)`` / ``predict_*``）。这里查：

1. **解释在答案格之后。** ``EXPLAINED_BY`` 给每道题列出“说出答案的那几句话”（机理、结论、读图）；
   它们必须出现在笔记本里（删掉了就要改这张表），而且第一次出现在答案格**之后**——
   不在题目上方的文字、小节标题、答案格的提示里，也不在更早的代码打印出来的文字里。
2. **检查在测量之后。** 答案格与检查格之间至少有一个做实验的代码格：猜错时学员眼前已经有
   这次量到的数，检查器再给一句提示，而不是替他说出字母（``choice`` 从不打印正确字母）。
   纯推理题（``REASONING``）没有测量，不受这一条约束。
3. 每道用字母作答的题都经过 ``gc.check._common.choice``：答错时不说出正确的字母。
4. **标题和学习目标不剧透**（issue 48 第 4 条）。学员作答之前扫一眼就会读到的“标题式”文字——第一格
   （标题、学习目标、章节概览）和其他带一级标题的“部分导言”格、题目所在那一节（从上一个 ``##``
   标题到答案格）的各级标题和以粗体开头的行、答案格里的提示——不许出现 ``HEADLINE_GIVEAWAYS``
   为这道题列出的说法（例如 03 ``predict_overfit`` 之前的“早停”“过拟合”：它们宣告了先降后升）。
"""
from __future__ import annotations

import inspect
import re

import nbformat
import pytest

import gptcourse as gc
from gptcourse.runtime import ROOT
from gptcourse_kit.classroom.student import BEGIN

NOTEBOOKS = sorted((ROOT / "notebooks").glob("0[1-5]_*.ipynb"))
CHECK = re.compile(r"gc\.check\.(nb0\d)\.((?:guess|predict)_\w+)\(\s*(\w+)")

# (笔记本编号, 检查器) → 说出答案的句子片段（原样出现在某个单元格的源码里）
EXPLAINED_BY = {
    ("01", "guess_compression"): ["**结果怎么读？**", "个要用字节片段拼"],
    ("01", "guess_leak"): ["验证损失测到的只是记忆力"],
    ("02", "guess_saturation"): ["点积 q·k 是 D 项之和，方差为 D", "赢者通吃"],
    ("02", "guess_sqrt_c"): ["点积只加了 D 项", "÷√C 的分布最“平”"],
    ("02", "guess_norm"): ["高速公路", "梯度不必穿过任何归一化"],
    ("02", "guess_init_growth"): ["共 2L 次", "方差就一路累加"],
    ("02", "guess_offset"): ["offset_profiles"],
    ("03", "predict_init_loss"): [r"$-\ln(1/V)=\ln V$", "接近**均匀分布**"],
    ("03", "predict_title_loss"): ["高出 {title_loss - body_loss:.2f}"],
    ("03", "predict_bf16_gap"): ["bf16 的误差和量尺本身的抖动"],
    ("03", "predict_overfit"): ["U 形", "背诵训练集"],
    ("03", "predict_windows"): ["位置编码的排名随窗口方式而变", "绝对位置本身就告诉了模型"],
    ("04", "guess_ledger"): ["**读这本账。**", "只差在上文"],
    ("04", "guess_zigzag"): ["**锯齿。**", "双数位的字多半是词的后半"],
    ("04", "guess_shuffled_tones"): ["接近掷硬币"],
    ("05", "guess_frequency"): ["频率的误差随 1/√n 缩小"],
    ("05", "guess_offset"): ["忘了偏移：第一个差"],
}
# 从前写在题目上方、现在删掉了的说法：可以不出现，但出现就必须在答案格之后
GIVEAWAYS = {
    ("01", "guess_leak"): ["都在训练集里出现过几十次", "初学者常做的事"],
    ("01", "guess_compression"): ["字符分词器每个字产生几个词元"],
    ("03", "predict_init_loss"): ["≈ ln V", "−ln P 是多少"],
    ("03", "predict_overfit"): ["真实语料也会被背下来", "过拟合 U 形", "过拟合与早停",
                                "两者会明显分开"],
    ("04", "guess_ledger"): ["上文越少越难猜", "每段开头的字几乎没有上文"],
    ("03", "predict_windows"): ["免费答案", "只编码两个字之间的**相对**距离"],
    ("02", "guess_sqrt_c"): ["一个头只在自己的 D 维里算点积"],
    ("02", "guess_norm"): ["GPT-2 以来的标准做法"],
    ("04", "guess_zigzag"): ["开启新的意思，最难猜"],
}
# 作答之前的标题、学习目标、章节概览和答案格提示里不许出现的说法（issue 48 第 4 条）
HEADLINE_GIVEAWAYS = {
    ("01", "guess_leak"): ["泄漏", "而不是按位置"],
    ("02", "guess_saturation"): ["为什么除以"],
    ("02", "guess_sqrt_c"): ["为什么除以", "行不行", "√head_dim"],
    ("02", "guess_norm"): ["标准做法", "几乎都用", "更稳"],
    ("03", "predict_init_loss"): ["ln V", r"\ln V"],
    ("03", "predict_overfit"): ["早停", "过拟合", "≠", "U 形", "先降后升"],
    ("03", "predict_windows"): ["混杂", "反超", "作弊"],
    ("04", "guess_zigzag"): ["二字词", "节奏", "锯齿", "最难猜"],
    ("04", "guess_shuffled_tones"): ["相反", "掷硬币"],
}
# 纯推理题：答案靠数数/推理得出，没有要先跑的实验
REASONING = {("02", "guess_offset")}


def predictions(nb) -> list[dict]:
    """笔记本里每道预测题：检查器名、作答变量、答案格与检查格的位置。"""
    out = []
    for k, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for chapter, name, var in CHECK.findall(cell.source):
            assign = re.compile(rf"^\s*{re.escape(var)}\s*=", re.M)
            answers = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"
                       and BEGIN in c.source and assign.search(c.source)]
            assert len(answers) == 1, (name, var, answers)
            out.append(dict(chapter=chapter, name=name, var=var, answer=answers[0], check=k))
    return out


def _shown_text(cell) -> str:
    """单元格里学员读得到的文字：源码，以及提交的输出里的文字（打印、Markdown）。"""
    parts = [cell.source]
    for o in cell.get("outputs", []):
        if "text" in o:
            parts.append("".join(o["text"]))
        for key in ("text/markdown", "text/plain"):
            if key in o.get("data", {}):
                parts.append("".join(o["data"][key]))
    return "\n".join(parts)


HEADING = re.compile(r"^(#+)\s")


def headlines(nb, answer: int) -> list[tuple[int, str]]:
    """作答之前“标题式”的文字：(单元格, 那段文字)。第一格与带一级标题的部分导言格整格算；
    题目所在那一节（上一个 ``##`` 或 ``#`` 标题起）里每个标题行和以粗体开头的行（题目那一行
    除外：选项本来就列着答案）；答案格里的注释（提示）。"""
    cells = nb.cells[:answer + 1]
    found = [(0, cells[0].source)]
    start = 0
    for i, c in enumerate(cells):
        if c.cell_type != "markdown":
            continue
        levels = [len(m.group(1)) for m in map(HEADING.match, c.source.splitlines()) if m]
        if 1 in levels and i > 0:
            found.append((i, c.source))
        if any(n <= 2 for n in levels):
            start = i
    whole = {i for i, _ in found}                                        # 整格算过的不再逐行算
    for i in range(start, answer):
        if nb.cells[i].cell_type == "markdown" and i not in whole:
            found += [(i, line) for line in nb.cells[i].source.splitlines()  # 题目（带选项）不算
                      if HEADING.match(line) or line.startswith("**") and "先猜一猜" not in line]
    found += [(answer, line) for line in nb.cells[answer].source.splitlines()
              if line.lstrip().startswith("#") and "SOLUTION" not in line]
    return found


def headline_problems(nb, key, answer: int) -> list[str]:
    out = []
    for i, text in headlines(nb, answer):
        for word in HEADLINE_GIVEAWAYS.get(key, []):
            if word in text:
                line = next(l for l in text.splitlines() if word in l).strip()
                out.append(f"{key}：作答之前的标题 / 学习目标 / 提示（第 {i} 格）说出了 "
                           f"{word!r}：{line[:80]}")
    return out


def problems(path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    nbno = path.name[:2]
    found = []
    for p in predictions(nb):
        key = (nbno, p["name"])
        if key not in EXPLAINED_BY:
            found.append(f"{key}：新的预测题，请在 EXPLAINED_BY 里写下说出它答案的句子")
            continue
        texts = [_shown_text(c) for c in nb.cells]
        for phrase in EXPLAINED_BY[key]:
            where = [i for i, t in enumerate(texts) if phrase in t]
            if not where:
                found.append(f"{key}：笔记本里找不到解释 {phrase!r}（改了措辞就更新这张表）")
            elif where[0] <= p["answer"]:
                found.append(f"{key}：解释 {phrase!r} 在第 {where[0]} 格，"
                             f"不在答案格（第 {p['answer']} 格）之后")
        for phrase in GIVEAWAYS.get(key, []):
            where = [i for i, t in enumerate(texts[:p["answer"] + 1]) if phrase in t]
            if where:
                found.append(f"{key}：{phrase!r} 在第 {where[0]} 格，"
                             f"不在答案格（第 {p['answer']} 格）之后")
        found += headline_problems(nb, key, p["answer"])
        if key not in REASONING:
            between = [i for i in range(p["answer"] + 1, p["check"])
                       if nb.cells[i].cell_type == "code"]
            if p["check"] < p["answer"] or not between:
                found.append(f"{key}：检查格（第 {p['check']} 格）之前没有测量："
                             f"答案格是第 {p['answer']} 格，中间没有做实验的代码格")
    return found


def test_the_scan_catches_an_explanation_above_the_question(tmp_path):
    """对照：解释写在题目上方、检查紧跟着答案格，这两样都会被找出来。"""
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    nb = nbformat.v4.new_notebook()
    nb.cells = [md("## 为什么除以 √D\n\n点积只加了 D 项。\n\n### 练习 4（先猜一猜）"),
                code(f'{BEGIN}\nguess_sqrt_c = "B"\n### END SOLUTION'),
                code("gc.check.nb02.guess_sqrt_c(guess_sqrt_c);"),
                code("measure()"),
                md("÷√C 的分布最“平”。")]
    path = tmp_path / "02_probe.ipynb"
    nbformat.write(nb, path)
    got = problems(path)
    assert len(got) == 3 and "点积只加了 D 项" in got[0] and "之前没有测量" in got[2], got
    assert "标题" in got[1] and "为什么除以" in got[1], got
    nb.cells = [nb.cells[0].copy(), nb.cells[1], nb.cells[3], nb.cells[2],
                md("点积只加了 D 项。÷√C 的分布最“平”。")]
    nb.cells[0].source = "### 练习 4（先猜一猜）"
    nbformat.write(nb, path)
    assert problems(path) == []


def test_the_scan_reads_titles_goals_and_hints_above_the_question():
    """对照：学习目标、这一节的标题、粗体引子和答案格提示里的剧透都被找出来；别的节的标题和
    题目之后的文字不算。"""
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    nb = nbformat.v4.new_notebook()
    nb.cells = [md("# 03\n\n## 学习目标\n1. 一直训练下去时验证曲线的形状与早停"),     # 第一格整格算
                md("## 15. 检查点\n\n早停要用的 best.pt 在这里写出"),
                md("## 16. 背下来 ≠ 学会了\n\n### 一直练下去：过拟合\n\n**U 形？** 一直练下去\n\n"
                   "**先猜一猜：** A 一直下降　B 先降后升"),                        # 题目那一行不算
                code(f'# 提示：想想先降后升\n{BEGIN}\nguess_overfit = "B"\n### END SOLUTION'),
                md("## 17. 早停")]
    got = headline_problems(nb, ("03", "predict_overfit"), 3)
    words = sorted(g.split("说出了 ")[1].split("：")[0] for g in got)
    assert words == sorted(["'早停'", "'≠'", "'过拟合'", "'U 形'", "'先降后升'"]), got
    assert all("第 1 格" not in g and "第 4 格" not in g for g in got), got
    nb.cells[0].source = "# 03\n\n## 学习目标\n1. 一直训练下去时验证损失怎样变化"
    nb.cells[2].source = ("## 16. 训练损失低，就是学会了吗？\n\n### 一直练下去\n\n"
                          "**会怎样？** 先猜一猜")
    nb.cells[3].source = f'# 提示：训练集和验证集会一直同进同退吗？\n{BEGIN}\nguess_overfit = "B"'
    assert headline_problems(nb, ("03", "predict_overfit"), 3) == []


def test_every_headline_giveaway_belongs_to_a_prediction():
    assert set(HEADLINE_GIVEAWAYS) <= set(EXPLAINED_BY)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_every_prediction_is_asked_before_it_is_explained(path):
    found = problems(path)
    assert not found, "\n".join(found)


def test_every_registered_prediction_is_in_a_notebook():
    seen = {(p.name[:2], q["name"]) for p in NOTEBOOKS
            for q in predictions(nbformat.read(p, as_version=4))}
    assert seen == set(EXPLAINED_BY)


@pytest.mark.parametrize("key", sorted(set(EXPLAINED_BY) - REASONING), ids="-".join)
def test_letter_predictions_never_print_the_right_letter(key):
    """字母题都经过 ``choice``：它答错时只说“你猜的是…”、这次量到的数和提示。"""
    checker = getattr(getattr(gc.check, f"nb{key[0]}"), key[1])
    assert "choice(" in inspect.getsource(inspect.unwrap(checker)), key
