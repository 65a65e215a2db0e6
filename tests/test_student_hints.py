"""学生版里看不到答案的任何一行：提示、练习之前的代码与文字、练习之前打印出来的包源码都算。

``test_student_edition.py`` 只查整块答案原样出现；这里逐行查（issue 33 第 2 条）：每个答案块里
每一行“不平凡”的代码（去掉空白后至少 ``MIN_CHARS`` 个字符），都不许出现在

- 学生版任何地方的提示里（``# 提示：`` 注释与存根的 ``NotImplementedError`` 文字）；
- 这道练习之前（含它自己）的代码单元格与文字单元格里；
- 这道练习之前用 ``inspect.getsource`` 打印出来的包源码里。

比较前把 ``·``→``*``、``−``→``-``，去掉所有空白、行尾注释和开头的 ``return``；赋值行的右边
单独再查一次（“提示里写着右边那半行”也算泄漏）。练习之后的单元格不查：做完再看包的写法是对的。

整行比较抓不住只抄了半行的提示（“τ == 0 时用 torch.nn.functional.one_hot(argmax)”）。所以每道练习
自己的提示再逐段查一次：提示里一段连续的代码（ASCII 字符）和这道题的答案共有一段至少
``MIN_FRAGMENT`` 个字符、含调用、下标或运算符的代码，也算泄漏。只点出一个名字（“用
gc.verse.split_lines 切句”）不算：那是告诉学员用哪个工具，不是替他写出那一行。
"""
from __future__ import annotations

import difflib
import inspect
import re

import nbformat
import pytest

import gptcourse as gc
from gptcourse.runtime import ROOT
from gptcourse_kit.classroom.student import BEGIN, END, student_notebook

NOTEBOOKS = sorted((ROOT / "notebooks").glob("0[1-5]_*.ipynb"))
MIN_CHARS = 18
GETSOURCE = re.compile(r"getsource\(\s*([A-Za-z_][\w.]*)\s*\)")
ALIAS = re.compile(r"^(from [\w.]+ import [\w, ]+|import [\w.]+(?: as \w+)?"
                   r"|\w+ = gc(?:\.\w+)+)\s*(?:#.*)?$", re.M)
STUB = re.compile(r"raise NotImplementedError\((['\"])(.*?)\1\)")
MIN_FRAGMENT = 16
CODE_RUN = re.compile(r"[\x21-\x7e ]+")           # 提示里一段连续的 ASCII 字符：一段代码
STRUCTURE = re.compile(r"[(\[=<>+*/%&|-]")         # 有调用、下标或运算：不只是一个名字
# 不是泄漏的行：题目本身给出的、或前面的练习已经教过的写法。键是去掉空白后的行（或它的右边）
GIVEN = {
    "02_attention_mask.ipynb": {
        "rope_pair(x1,x2,cos,sin)": "练习 6 的函数签名（练习 7 调用它）",
    },
    "03_training_loop.ipynb": {
        "max_lr*min_lr_ratio": "lr_schedule 的文档字符串写明的地板（题目的规格）",
        "torch.Generator().manual_seed(seed)": "前面每个取批次的单元格都这样建生成器",
        "torch.optim.AdamW(param_groups(model,cfg.weight_decay),lr=cfg.lr,betas=cfg.betas)":
            "练习 param_groups 之后打印的 gc.train.make_optimizer：训练循环是把做过的零件接起来",
        "gc.train.batch_generator(cfg.seed,step)": "题目要求的取批次方式（提示里点名的包函数）",
        "opt.zero_grad(set_to_none=True)": "练习 train_step 之后打印的 gc.train.train_step",
    },
    "04_evaluation.ipynb": {
        '[tok.eos_id]+tok.encode(text,errors="unk")': "split_loss 的开头，正文讲过",
        "gc.evaluate.window_plan(n,T,stride)": "题目说明里点名的包函数",
        "np.random.default_rng(seed)": "题目说明给定的随机数发生器",
        "rng.integers(0,n,(reps,n))": "题目说明给出的抽样下标（重点在之后的统计量与分位数）",
    },
}
# 整道练习不查：题目就是改正上面打印出来的代码（只有改对的那一行是答案，它不在上面）
FIX_THE_PRINTED_CODE = {"b167fde9"}                 # 04 练习 fix_attention：改正 buggy_attention


def _norm(text: str) -> str:
    return re.sub(r"\s+", "", text.replace("·", "*").replace("−", "-").replace("×", "*"))


def _needles(line: str) -> list[str]:
    code = re.sub(r"\s+#.*$", "", line).strip()
    if not code or code.startswith("#"):
        return []
    code = code.removeprefix("return ").strip()
    out = [code]
    m = re.match(r"^[\w\s,\[\]\.]+?=(?!=)(.+)$", code)         # a, b = 右边
    if m:
        out.append(m.group(1).strip())
    return [n for n in {_norm(x) for x in out} if len(n) >= MIN_CHARS]


def _solution_lines(source: str) -> list[str]:
    lines, out = source.split("\n"), []
    for i, x in enumerate(lines):
        if x.strip() == BEGIN:
            j = next(k for k in range(i, len(lines)) if lines[k].strip() == END)
            out += lines[i + 1:j]
    return out


def _hints(cell) -> list[str]:
    out = [x.split("提示", 1)[1] for x in cell.source.split("\n")
           if x.strip().startswith("#") and "提示" in x]
    return out + [m.group(2) for m in STUB.finditer(cell.source)]


def _printed_source(cell, ns) -> str:
    out = []
    for expr in GETSOURCE.findall(cell.source):
        try:
            out.append(inspect.getsource(eval(expr, ns)))          # 只是属性访问：gc.x.y
        except Exception:  # noqa: BLE001 - 笔记本里现算的对象：这里找不到就不查
            pass
    return "\n".join(out)


def leaks(path) -> list[tuple[str, str, str]]:
    """(练习单元格的 id, 答案里的一行, 在哪里看得到它) 的列表。"""
    teacher = nbformat.read(path, as_version=4)
    student = student_notebook(nbformat.read(path, as_version=4), path.name)
    by_id = {c.id: c for c in student.cells}
    ns = {"gc": gc, "inspect": inspect}
    for c in teacher.cells:
        if c.cell_type == "code":
            for line in ALIAS.findall(c.source):
                exec(line, ns)                                       # 只有导入语句与别名
    hints = _norm("\n".join(h for c in student.cells for h in _hints(c)))
    found, before = [], []
    for cell in teacher.cells:
        shown = by_id.get(cell.id)
        if shown is not None:
            before.append(_norm(shown.source))
            if shown.cell_type == "code":
                before.append(_norm(_printed_source(shown, ns)))
        if cell.cell_type != "code" or BEGIN not in cell.source \
                or cell.id in FIX_THE_PRINTED_CODE:
            continue
        above = "\n".join(before)
        given = GIVEN.get(path.name, {})
        for line in _solution_lines(cell.source):
            needles = _needles(line)
            if any(n in given for n in needles):
                continue
            for needle in needles:
                where = "提示" if needle in hints else ("练习之前" if needle in above else None)
                if where:
                    found.append((cell.id, line.strip(), where))
                    break
    return found


def _shared(a: str, b: str) -> str:
    """a 与 b 最长的公共子串。"""
    m = difflib.SequenceMatcher(None, a, b, autojunk=False).find_longest_match(0, len(a), 0, len(b))
    return a[m.a:m.a + m.size]


def fragment_leaks(path) -> list[tuple[str, str, str]]:
    """(练习单元格的 id, 提示与答案共有的那段代码, 提示)：提示里抄了答案的半行。"""
    teacher = nbformat.read(path, as_version=4)
    student = student_notebook(nbformat.read(path, as_version=4), path.name)
    by_id = {c.id: c for c in student.cells}
    given = [_norm(k) for k in GIVEN.get(path.name, {})]
    found = []
    for cell in teacher.cells:
        if cell.cell_type != "code" or BEGIN not in cell.source:
            continue
        code = [_norm(re.sub(r"\s+#.*$", "", x)) for x in _solution_lines(cell.source)
                if not x.strip().startswith("#")]
        answer = "\n".join(code)                      # 一行一行：公共子串不会跨行
        shown = {h.strip().lstrip("：:").removeprefix("还没完成：").strip()  # 注释与存根是同一句
                 for h in _hints(by_id[cell.id])}
        for hint in sorted(shown):
            for run in CODE_RUN.findall(hint):
                shared = _shared(_norm(run), answer)
                if len(shared) >= MIN_FRAGMENT and STRUCTURE.search(shared) \
                        and not any(shared in g for g in given):
                    found.append((cell.id, shared, hint))
    return found


def test_the_scan_finds_hint_lines_that_are_the_answer(tmp_path):
    """对照：一个提示就是答案的练习、一段先打印答案的源码，这个扫描都能找出来。"""
    nb = nbformat.v4.new_notebook()
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    nb.cells = [md("# 标题"),
                code("print(inspect.getsource(gc.bpe.get_stats))"),
                code("def causal_mask(T):\n"
                     "    # 提示：return torch.tril(torch.ones(T, T, dtype=torch.bool))\n"
                     f"    {BEGIN}\n"
                     "    return torch.tril(torch.ones(T, T, dtype=torch.bool))\n"
                     f"    {END}"),
                code("def get_stats(ids):\n    # 提示：数一数\n"
                     f"    {BEGIN}\n    counts = {{}}\n    for pair in zip(ids, ids[1:]):\n"
                     "        counts[pair] = counts.get(pair, 0) + 1\n"
                     f"    return counts\n    {END}")]
    path = tmp_path / "probe.ipynb"
    nbformat.write(nb, path)
    got = {(cid, where) for cid, _, where in leaks(path)}
    assert got == {(nb.cells[2].id, "提示"), (nb.cells[3].id, "练习之前")}, got


def test_the_fragment_scan_finds_half_a_line_in_a_hint(tmp_path):
    """对照：提示抄了答案的半行（整行扫描看不出来），片段扫描找得出来；只点名一个工具不算。"""
    nb = nbformat.v4.new_notebook()
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    nb.cells = [md("# 标题"),
                code("def temperature_softmax(logits, tau):\n"
                     "    # 提示：τ == 0 时返回 torch.nn.functional.one_hot(argmax)\n"
                     f"    {BEGIN}\n    if tau == 0:\n"
                     "        return torch.nn.functional.one_hot(logits.argmax(-1),\n"
                     "                                           logits.shape[-1])\n"
                     f"    return torch.softmax(logits / tau, dim=-1)\n    {END}"),
                code("def my_rhymes(poem):\n"
                     "    # 提示：先用 gc.verse.split_lines 切句；韵脚有没有共同的韵部？\n"
                     f"    {BEGIN}\n    lines, marks = gc.verse.split_lines(poem)\n"
                     f"    return bool(lines)\n    {END}")]
    path = tmp_path / "probe.ipynb"
    nbformat.write(nb, path)
    assert leaks(path) == []
    got = fragment_leaks(path)
    assert [(cid, shared) for cid, shared, _ in got] == \
        [(nb.cells[1].id, "torch.nn.functional.one_hot(")], got


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_no_hint_quotes_part_of_its_answer(path):
    found = fragment_leaks(path)
    assert not found, "提示里抄了答案的一段：\n" + "\n".join(
        f"  {cid} {shared!r} ← 提示：{hint}" for cid, shared, hint in found)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_no_solution_line_is_visible_before_its_exercise(path):
    found = leaks(path)
    assert not found, "学生版里看得到答案的行：\n" + "\n".join(
        f"  {cid} [{w}] {line}" for cid, line, w in found)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_student_cells_name_no_solution_and_cannot_enable_them(path):
    """代替品用 ``gc.check.fallback("nbXX.名字")``：学生版里不出现 ``solution_*`` 的名字，
    也没有打开参考答案的那一行（``enable_solutions`` 只写在教师版提到 show_solution 的
    那行文字里）。"""
    student = student_notebook(nbformat.read(path, as_version=4), path.name)
    for i, cell in enumerate(student.cells):
        assert "solution_" not in cell.source, (i, cell.source[:200])
        assert "enable_solutions" not in cell.source, (i, cell.source[:200])
