"""账本（issue 48）：笔记本正文里每一句带数字或说模型行为的话都登记在 docs/claims/，对着现在的
来源（course.pt 的 meta、docs/*.json、提交的输出）成立；没登记的句子让测试失败。"""
from __future__ import annotations

import json
import re

import pytest

from gptcourse_kit import claims as cl

NOTEBOOKS = cl.notebooks()
CLAIMS = [c for nb in NOTEBOOKS for c in cl.load_ledger(nb)]
SOURCES = {nb: cl.Sources(nb) for nb in NOTEBOOKS}


@pytest.mark.parametrize("claim", CLAIMS, ids=[f"{c.notebook[:2]}-{c.cell}-{c.quote[:12]}"
                                               for c in CLAIMS])
def test_every_registered_claim_holds_against_the_current_sources(claim):
    problem = cl.evaluate(claim, SOURCES[claim.notebook])
    assert problem is None, problem


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_figure_or_behaviour_sentence_is_registered(notebook):
    missing = cl.uncovered(notebook, cl.load_ledger(notebook), SOURCES[notebook].nb)
    assert not missing, (f"{len(missing)} 句带数字或说模型行为的话没有登记"
                         f"（docs/claims/{notebook}.toml；python -m gptcourse_kit.claims --todo "
                         "给出草稿）：\n" + "\n".join(missing))


def test_scanner_flags_figures_and_behaviour_but_not_section_numbers_or_code():
    text = ("自由写诗押韵 83 %，比参考快 1.96×。见 3.5 节与练习 4；"
            "代码 `x = 12` 与公式 $10^3$ 不算。\n"
            "1. 第一条\n## 12.1 标题里的节号不算\n训练 800 秒。")
    found = cl.sentences("c", text)
    figures = [text[a:b] for s in found for a, b in s.figures]
    assert figures == ["83 %", "1.96×", "800 秒"]
    assert [s.behaviour for s in found] == [True, False]


def test_a_stale_figure_in_a_source_fails_its_claim(tmp_path):
    """重跑基准改了 docs/benchmarks.json：引用旧数的登记不再成立（这就是 CI 变红的方式）。"""
    nb = {"cells": [{"id": "m1", "cell_type": "markdown", "source": ["快了 1.96×。"]}]}
    claim = cl.Claim("x", "m1", "1.96×", "figure", value="bench['ratio']", expect=1.96, tol=0.005)
    sources = cl.Sources("x", root=tmp_path, overrides={"bench": {"ratio": 1.96}})
    sources.__dict__["nb"] = nb
    assert cl.evaluate(claim, sources) is None
    stale = cl.Sources("x", root=tmp_path, overrides={"bench": {"ratio": 2.4}})
    stale.__dict__["nb"] = nb
    assert "现在是 2.4" in cl.evaluate(claim, stale)
    assert cl.uncovered("x", [claim], nb) == []
    assert len(cl.uncovered("x", [], nb)) == 1


def test_a_claim_whose_words_left_the_cell_is_stale(tmp_path):
    nb = {"cells": [{"id": "m1", "cell_type": "markdown", "source": ["快了 2.1×。"]}]}
    sources = cl.Sources("x", root=tmp_path)
    sources.__dict__["nb"] = nb
    claim = cl.Claim("x", "m1", "1.96×", "fact", ref="r")
    assert "已经没有这几个字" in cl.evaluate(claim, sources)


def test_ledger_entries_are_well_formed(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text('[[claim]]\ncell = "a"\nquote = "q"\nkind = "figure"\n', encoding="utf-8")
    with pytest.raises(ValueError, match="value\\+expect"):
        cl.load_ledger("x", path)
    path.write_text('[[claim]]\ncell = "a"\nquote = "q"\nkind = "guess"\nref = "r"\n',
                    encoding="utf-8")
    with pytest.raises(ValueError, match="写错了"):
        cl.load_ledger("x", path)


def test_every_markdown_cell_has_a_stable_id():
    for nb in NOTEBOOKS:
        cells = json.loads((cl.NOTEBOOKS / f"{nb}.ipynb").read_text("utf-8"))["cells"]
        ids = [c.get("id") for c in cells]
        assert all(ids) and len(set(ids)) == len(ids), nb


GUIDE_ROW = re.compile(r"^\| (0\d) [^|]+\| (\d+) s \| (\d+) s \|$", re.M)
TIMER = re.compile(r"(?:用时|用了|到这里）)\s*([\d.]+) 秒")


def test_the_guides_running_times_are_the_committed_runs():
    """教学指南的运行时间表：完整模式 = 各笔记本提交的最后一个计时器，快速模式 =
    docs/notebook_times.json（classroom times 量的）；各差不到 1 秒（表里是取整的秒数）。"""
    guide = (cl.ROOT / "docs" / "teaching_guide.md").read_text(encoding="utf-8")
    quick = json.loads((cl.ROOT / "docs" / "notebook_times.json").read_text("utf-8"))["wall_s"]
    rows = {n: (int(q), int(f)) for n, q, f in GUIDE_ROW.findall(guide)}
    assert sorted(rows) == [nb[:2] for nb in NOTEBOOKS]
    for nb in NOTEBOOKS:
        last = [c for c in SOURCES[nb].nb["cells"] if c["cell_type"] == "code"][-1]
        full = float(TIMER.findall(SOURCES[nb].out(last["id"]))[-1])
        assert abs(rows[nb[:2]][1] - full) < 1, (nb, rows[nb[:2]], full)
        assert abs(rows[nb[:2]][0] - quick[nb]) < 1, (nb, rows[nb[:2]], quick[nb])


@pytest.mark.parametrize("text,words", [
    ('[[claim]\ncell = ', "不是合法的 TOML"),
    ('[[claim]]\ncell = "a"\nquote = "q"\nkind = "fact"\nref = "r"\nref = "s"\n',
     "不是合法的 TOML"),
    ('[claim]\ncell = "a"\nquote = "q"\nkind = "fact"\nref = "r"\n', "表的数组"),
    ('claim = [1, 2]\n', "第 1 条登记写错了"),
    ('[[claim]]\ncell = "a"\nkind = "fact"\nref = "r"\n', "必填"),
    ('[[claim]]\ncell = "a"\nquote = 11\nkind = "fact"\nref = "r"\n', "写错了"),
    ('[[claim]]\ncell = "a"\nquote = "q"\nkind = "figure"\nvalue = "1"\nexpect = "eleven"\n',
     "expect、tol 是数"),
    ('[[claim]]\ncell = "a"\nquote = "q"\nkind = "figure"\nvalue = "1"\nexpect = true\n',
     "expect、tol 是数"),
])
def test_a_malformed_ledger_is_one_line_exit_2_naming_the_file(tmp_path, monkeypatch, capsys,
                                                                text, words):
    """账本写错（语法、表的形状、缺字段、类型）：CLI 一行、退出码 2，不是堆栈；ValueError 照旧。"""
    monkeypatch.setattr(cl, "LEDGER", tmp_path)
    nb = NOTEBOOKS[0]
    (tmp_path / f"{nb}.toml").write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=words):
        cl.load_ledger(nb)
    assert cl.main([nb]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{nb}.toml" in err and words in err
    (tmp_path / f"{nb}.toml").unlink()
    (tmp_path / f"{nb}.toml").mkdir()
    assert cl.main([nb]) == 2 and "读不了" in capsys.readouterr().err


@pytest.mark.parametrize("kw", [dict(value="'abc'", expect=1), dict(value="None", expect=1),
                                dict(check="torch.ones(3)")])
def test_an_expression_with_an_unusable_result_is_reported_not_raised(tmp_path, kw):
    nb = {"cells": [{"id": "m1", "cell_type": "markdown", "source": ["快了 1.96×。"]}]}
    sources = cl.Sources("x", root=tmp_path)
    sources.__dict__["nb"] = nb
    claim = cl.Claim("x", "m1", "1.96×", "figure", **kw)
    assert "算不出来" in cl.evaluate(claim, sources)
