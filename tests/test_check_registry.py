"""检查器的登记表：每个练习都有检查器、教师版里的答案单元格（唯一的参考答案，show_solution
打印它）和评分单元格；键带章节；包里自己的函数交上去也必须通过检查（检查器的参考就是包）。"""
from __future__ import annotations

import importlib
import importlib.util
import json
import re
from dataclasses import replace

import nbformat
import pytest
import torch
import torch.nn.functional as F

import gptcourse as gc
from gptcourse.check import _common
from gptcourse.runtime import ROOT

CHAPTERS = ("nb01", "nb02", "nb03", "nb04", "nb05")


def _notebook(chapter: str) -> nbformat.NotebookNode:
    path = next((ROOT / "notebooks").glob(f"{chapter[2:]}_*.ipynb"))
    return nbformat.read(path, as_version=4)


def _grade_ids(chapter: str) -> dict[str, str]:
    """评分单元格：grade_id（nbXX-<练习>-check，练习名里的 - 当作 _）→ 单元格源码。"""
    out = {}
    for cell in _notebook(chapter).cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        m = re.fullmatch(rf"{chapter}-(.+)-check", meta.get("grade_id", ""))
        if m and meta.get("grade"):                         # 评分单元格（答案单元格 grade=False）
            out[m.group(1).replace("-", "_")] = cell.source
    return out


def _cells(chapter: str, flag: str) -> dict[str, nbformat.NotebookNode]:
    """nbgrader 的答案单元格（flag="solution"）或评分单元格（"grade"）：练习名 → 单元格。"""
    out = {}
    for cell in _notebook(chapter).cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        gid = meta.get("grade_id", "")
        if meta.get(flag) and gid.startswith(f"{chapter}-"):
            name = gid.removeprefix(f"{chapter}-")
            out[(name.removesuffix("-check") if flag == "grade" else name).replace("-", "_")] = cell
    return out


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_exercise_has_a_checker_a_solution_cell_and_a_grade_id(chapter, capsys, monkeypatch):
    """每个练习：检查器、教师版里的答案单元格（show_solution 打印的正是它，参考答案只有这一份）
    和评分单元格；__all__ 就是练习表。"""
    mod = importlib.import_module(f"gptcourse.check.{chapter}")
    checks, solutions = _grade_ids(chapter), _cells(chapter, "solution")
    assert len(mod.EXERCISES) >= 8 and len(set(mod.EXERCISES)) == len(mod.EXERCISES)
    assert mod.__all__ == list(mod.EXERCISES)
    monkeypatch.setenv("GPTCOURSE_SOLUTIONS", "1")
    for name in mod.EXERCISES:
        checker = getattr(mod, name)
        assert checker.is_exercise and checker.key == f"{chapter}.{name}", name
        assert name in checks, f"{chapter}.{name} 在笔记本里没有评分单元格"
        assert re.search(rf"\b{name}\(", checks[name]), (name, checks[name])
        cell = solutions[name].source
        assert "### BEGIN SOLUTION" in cell and _common.solution_cell(f"{chapter}.{name}") == cell
        assert gc.check.show_solution(f"{chapter}.{name}") is True
        assert capsys.readouterr().out == cell + "\n"
    assert set(checks) == set(mod.EXERCISES) == set(solutions), set(checks) ^ set(mod.EXERCISES)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_teacher_solution_passes_its_checker(chapter):
    """教师版的答案单元格通过了检查：提交的完整运行里每个评分单元格都打印“正确 ✓”
    （笔记本测试在快速模式里重新执行它们）。"""
    for name, cell in _cells(chapter, "grade").items():
        out = "".join(o.get("text", "") for o in cell.get("outputs", []))
        assert "正确 ✓" in out and "还不对" not in out, (chapter, name, out[:300])


def test_fallbacks_are_the_ones_the_notebooks_use():
    """学生版的代替品只登记笔记本里 ``gc.check.fallback("…")`` 用到的，一个不多。"""
    used = set()
    for chapter in CHAPTERS:
        for cell in _notebook(chapter).cells:
            used |= set(re.findall(r'gc\.check\.fallback\("(nb0\d\.\w+)"', cell.source))
    assert used == set(_common.FALLBACKS)


def test_keys_are_chapter_qualified_so_guess_offset_is_two_exercises(capsys, monkeypatch):
    gc.check.nb02.guess_offset(5)
    gc.check.nb05.guess_offset("A")
    assert _common.RESULTS["nb02.guess_offset"]["passed"] is True
    assert _common.RESULTS["nb05.guess_offset"]["passed"] is False
    both = [r for r in _common.results() if r["exercise"] == "guess_offset"]
    assert {r["chapter"] for r in both} == {"nb02", "nb05"}
    assert all(set(r) == {"key", "chapter", "exercise", "passed", "message"} for r in both)
    monkeypatch.setenv("GPTCOURSE_SOLUTIONS", "1")             # 老师打开了参考答案
    gc.check.show_solution("nb05.guess_offset")
    assert 'guess_offset = "B"' in capsys.readouterr().out
    gc.check.show_solution("nb02.guess_offset")
    assert "guess_offset = 5" in capsys.readouterr().out
    with pytest.raises(ValueError, match="nb02.guess_offset"):
        gc.check.show_solution("guess_offset")
    with pytest.raises(ValueError, match="可选"):
        gc.check.show_solution("nb02.nope")
    assert not hasattr(gc.check, "guess_offset")                 # 没有不带章节的扁平名字


def test_one_letter_judge_for_every_chapter(capsys):
    for checker in (gc.check.nb01.guess_leak, gc.check.nb02.guess_norm, gc.check.nb04.guess_ledger,
                    gc.check.nb05.guess_frequency):
        assert checker("Z") is False
        assert "请填一个选项字母" in capsys.readouterr().out
    assert gc.check.nb03.predict_init_loss("(c)", 8.8, 6436) is True
    assert _common.choice(" b ", "B", "ABC") is True
    assert _common.choice("A", "B", {"A": "变小", "B": "变大"}) is False
    out = capsys.readouterr().out                                  # 猜错：不说出正确的字母
    assert "你猜的是 A（变小），和这次量出的不一样" in out and "B（变大）" not in out


def _tok_vocab(text):
    tok = gc.tokenizer.CharTokenizer.from_text(text)
    itos = tok.itos[1:]                                     # 去掉 id 0 的 <unk>
    return {c: i for i, c in enumerate(itos)}, itos


def _bpe(merges):
    return gc.bpe.BPETokenizer(merges=merges)


# 包里的函数（或由包的函数直接拼出的答案）：交上去必须通过对应的检查器
PACKAGE = {
    "nb01.build_vocab": lambda: (_tok_vocab,),
    "nb01.count_pairs": lambda: (gc.bpe.get_stats,),
    "nb01.merge_pair": lambda: (gc.bpe.merge,),
    "nb01.bpe_train": lambda: (lambda t, v: gc.bpe.BPETokenizer.train(t, vocab_size=v).merges,),
    "nb01.bpe_encode": lambda: (lambda t, m: _bpe(m).encode(t),),
    "nb01.bpe_decode": lambda: (lambda ids, m: _bpe(m).decode(ids),),
    "nb01.near_duplicate": lambda: (
        lambda a, b: gc.data.near_duplicate_groups([a, b]) == [[0, 1]],),
    "nb02.scaled_attention": lambda: (                  # 模型手写路径用的那个纯函数
        lambda q, k, v, mask: gc.model.causal_attention(q, k, v, mask)[0],),
    "nb02.layernorm": lambda: (lambda x, eps=1e-5: F.layer_norm(x, x.shape[-1:], eps=eps),),
    "nb02.gpt_block": lambda: (gc.model.Block,),
    "nb02.leaky_model": lambda: (gc.check.nb02.solution_make_leaky, _learner_model()),
    "nb03.lr_schedule": lambda: (gc.optim.lr_at,),
    "nb03.param_groups": lambda: (gc.optim.param_groups,),
    "nb03.estimate_loss": lambda: (gc.train.estimate_loss,),
    "nb03.training_loop": lambda: (lambda m, d, v, cfg: gc.train.train(m, d, v, cfg),),
    "nb04.future_leak_test": lambda: (lambda m: gc.mistakes.leak_test(m) > 1e-5,),
    "nb05.top_p": lambda: (gc.sampling.top_p_filter,),
    "nb05.repetition_penalty": lambda: (gc.sampling.apply_repetition_penalty,),
    "nb05.decode_loop": lambda: (
        lambda model, tok, prompt="", max_new_tokens=60, temperature=0.0, seed=None:
        gc.generate.generate(model, tok, prompt, max_new_tokens=max_new_tokens,
                             temperature=temperature, seed=seed, use_cache=False),),
}


def _learner_model():
    """一个通过泄漏测试的模型（leaky_model 的第二个参数）：学员的 GPT 只返回 logits。"""
    cfg = replace(gc.check.nb02._CFGS[0], attention="manual")   # 手写路径才读掩码 buffer
    torch.manual_seed(0)
    ref = gc.model.GPT(cfg).eval()

    class LogitsOnly(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model, self.tok_emb, self.blocks = ref, ref.tok_emb, ref.blocks

        def forward(self, idx):
            return self.model(idx)[0]

    return LogitsOnly().eval()


@pytest.mark.parametrize("key", sorted(PACKAGE))
def test_the_packages_own_function_passes_the_checker(key, passes):
    chapter, name = key.split(".")
    checker = getattr(importlib.import_module(f"gptcourse.check.{chapter}"), name)
    ok, out = passes(checker, *PACKAGE[key]())
    assert ok, out


def test_show_solution_refuses_until_the_teacher_enables_it(capsys, monkeypatch):
    """学生版（默认）：show_solution 只说一句“不显示”，不打印答案；老师打开之后才打印。"""
    monkeypatch.delenv("GPTCOURSE_SOLUTIONS", raising=False)
    gc.check.enable_solutions(False)
    assert gc.check.show_solution("nb02.causal_mask") is False
    out = capsys.readouterr().out
    assert "只在教师版里显示" in out and "torch.tril" not in out
    monkeypatch.setenv("GPTCOURSE_SOLUTIONS", "0")
    assert gc.check.show_solution("nb02.causal_mask") is False
    capsys.readouterr()
    try:
        gc.check.enable_solutions()
        assert gc.check.show_solution("nb02.causal_mask") is True
        assert "torch.tril" in capsys.readouterr().out
    finally:
        gc.check.enable_solutions(False)
    monkeypatch.setenv("GPTCOURSE_SOLUTIONS", "1")
    assert gc.check.show_solution("nb02.causal_mask") is True
    assert "torch.tril" in capsys.readouterr().out


def test_fallback_hides_the_solution_name_and_source():
    """学生版的代替品：算的与参考答案相同，但名字里没有 solution_，源码里没有答案。"""
    import inspect

    f = gc.check.fallback("nb02.causal_mask")
    assert f(3).tolist() == torch.tril(torch.ones(3, 3)).bool().tolist()
    assert "solution" not in f.__name__ and not hasattr(f, "__wrapped__")
    assert "tril" not in inspect.getsource(f)
    with pytest.raises(ValueError, match="可选"):
        gc.check.fallback("nb02.nope")


def test_a_prediction_counts_its_first_committed_letter(monkeypatch, capsys):
    """先猜后看（issue 33）：在学员的内核里，第一次交的字母记下并打印出来；看了测量再改成对的
    字母，判的仍是第一次的（打印一句说明）。单元测试与裁判里不记（同一个检查器喂很多答案）。"""
    guess_leak = gc.check.nb01.guess_leak                     # 正确答案是 C
    monkeypatch.setattr(_common, "COMMITTED", {})
    monkeypatch.delenv(_common.COMMIT_ENV, raising=False)
    assert _common.committing() is False                      # pytest 不是 Jupyter 内核
    assert guess_leak("A") is False and guess_leak("C") is True
    assert _common.COMMITTED == {}
    capsys.readouterr()
    monkeypatch.setenv(_common.COMMIT_ENV, "1")
    assert guess_leak("z") is False                           # 不是选项字母：不算作答
    assert _common.COMMITTED == {}
    assert guess_leak(" a ") is False
    assert guess_leak("C") is False                           # 改成对的也不算
    out = capsys.readouterr().out
    assert out.count("（第一次作答：A，已记下；评分按第一次作答）") == 2
    assert "你把答案改成了 C；先猜后看，评分仍按第一次作答的 A" in out
    assert _common.RESULTS["nb01.guess_leak"]["passed"] is False
    assert gc.check.nb01.guess_compression("A") is True       # 每题各记各的
    assert _common.COMMITTED == {"nb01.guess_leak": "A", "nb01.guess_compression": "A"}
    monkeypatch.setenv(_common.COMMIT_ENV, "0")
    assert guess_leak("C") is True


def test_the_first_letter_survives_a_kernel_restart_in_jupyterlab(monkeypatch, tmp_path, capsys):
    """JupyterLab 的内核带着 JPY_SESSION_NAME：第一次作答也记在笔记本旁边的文件里，
    “Restart Kernel and Run All” 之后改了的字母仍不算。"""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(_common.COMMIT_ENV, "1")
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "2024001_张三.ipynb"))
    monkeypatch.setattr(_common, "COMMITTED", {})
    assert gc.check.nb01.guess_leak("B") is False
    monkeypatch.setattr(_common, "COMMITTED", {})                   # 重启内核
    assert gc.check.nb01.guess_leak("C") is False
    assert "评分仍按第一次作答的 B" in capsys.readouterr().out
    saved = json.loads((tmp_path / _common.COMMIT_FILE).read_text(encoding="utf-8"))
    assert saved == {"2024001_张三.ipynb": {"nb01.guess_leak": "B"}}


# ---------------------------------------------------------------- 严格模式与学员函数里的 sys.exit
@pytest.mark.parametrize("value, on", [("false", False), ("no", False), (" 0 ", False),
                                       ("OFF", False), ("", False), ("1", True),
                                       ("autograde", True), ("yes", True)])
def test_strict_mode_reads_off_words_as_off(monkeypatch, value, on):
    from gptcourse.check import _common
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.setenv("GPTCOURSE_STRICT", value)
    assert _common.strict() is on
    monkeypatch.delenv("GPTCOURSE_STRICT")
    monkeypatch.setenv("NBGRADER_EXECUTION", value)
    assert _common.strict() is on


def test_sys_exit_in_a_student_function_is_a_hint_not_an_escape(monkeypatch, capsys):
    """学员的函数里 sys.exit()：检查器照样记下“还不对”（严格模式下是 AssertionError），
    SystemExit 不会逃出检查单元格。"""
    import sys as _sys

    from gptcourse.check import _common, nb01
    monkeypatch.delenv("GPTCOURSE_STRICT", raising=False)
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)

    def count_pairs(ids):
        _sys.exit(3)
    assert nb01.count_pairs(count_pairs) is False
    assert _common.RESULTS["nb01.count_pairs"]["passed"] is False
    assert "SystemExit" in capsys.readouterr().out
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    with pytest.raises(AssertionError):
        nb01.count_pairs(count_pairs)
