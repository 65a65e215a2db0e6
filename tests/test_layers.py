"""包的分层（``gptcourse.LAYERS``，说明见 gptcourse/__init__.py）：一个模块只导入比它低的层
（同层可以，但不能成环），延迟导入（函数里的 import）也算。导入 ``a.b.c`` 会执行 ``a.b`` 的
``__init__``，所以也算导入了 ``a.b``。依赖必须看得见：门面 ``import gptcourse``
（之后 ``gc.<任何>``）与 ``importlib.import_module`` / ``__import__`` 只有门面和
命令行（L7）可以用。教师与维护者的包 ``gptcourse_kit`` 不在这个包里，``gptcourse`` 也从不导入它
（``test_the_learners_package_never_names_the_kit``）；F 行是旧命令名的转发。

``violations(pkg)`` 对一个包目录给出全部违规；下面的"栽进去的导入"在包的副本里各加一行，
每一行都必须被抓住。"""
from __future__ import annotations

import ast
import re
import shutil
from collections import defaultdict
from pathlib import Path

import pytest

import gptcourse

PKG = Path(gptcourse.__file__).parent
TEACHING, FORWARD = 10, 20
RANK = {m: (int(layer[1:]) if layer.startswith("L") else {"T": TEACHING, "F": FORWARD}[layer])
        for layer, names in gptcourse.LAYERS.items() for m in names}     # 顶层名字 → 层号
ENTRY = RANK["cli"]                                                    # L7：命令行


def modules(pkg: Path = PKG) -> dict[str, Path]:
    out = {}
    for p in pkg.rglob("*.py"):
        parts = ["gptcourse", *p.relative_to(pkg).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _dynamic(node: ast.AST) -> bool:
    """``importlib.import_module(...)``、``import_module(...)`` 或 ``__import__(...)``。"""
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    return name in ("import_module", "__import__")


def scan(pkg: Path = PKG) -> tuple[dict[str, set[str]], dict[str, list[str]]]:
    """→ (导入图：模块 → 它导入的包内模块, 模块 → 看不见的依赖：门面与动态导入)。"""
    mods = modules(pkg)
    graph: dict[str, set[str]] = defaultdict(set)
    hidden: dict[str, list[str]] = defaultdict(list)
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if _dynamic(node):
                hidden[name].append(f"第 {node.lineno} 行 {ast.unparse(node.func)}(…)")
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
                if "gptcourse" in targets:
                    hidden[name].append(f"第 {node.lineno} 行 import gptcourse")
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                subs = [f"{base}.{a.name}" for a in node.names]
                if base == "gptcourse" and any(s not in mods for s in subs):
                    hidden[name].append(f"第 {node.lineno} 行 from gptcourse import 门面的名字")
                targets = [base] + subs
            else:
                continue
            for t in targets:
                if not t.startswith("gptcourse."):
                    continue
                while t not in mods:
                    t = t.rsplit(".", 1)[0]
                parts = t.split(".")
                for k in range(2, len(parts) + 1):        # 父包的 __init__ 也会执行
                    dep = ".".join(parts[:k])
                    if dep != name and not name.startswith(dep + "."):
                        graph[name].add(dep)
    return graph, hidden


def layer(module: str) -> int | None:
    """模块的层号；门面 gptcourse 与没登记的模块：None。"""
    parts = module.split(".")
    return RANK.get(parts[1]) if len(parts) > 1 else None


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def violations(pkg: Path = PKG) -> list[str]:
    """这个包目录违反分层规则的地方（一条一句话）；[] = 没有。"""
    bad = [f"{m} 不在分层表里：请在 gptcourse.LAYERS 里登记它"
           for m in modules(pkg) if m != "gptcourse" and layer(m) is None]
    graph, hidden = scan(pkg)
    bad += [f"导入成环：{' → '.join(c)}" for c in strongly_connected(graph)]
    for src, deps in graph.items():
        s = layer(src)
        if s in (None, FORWARD):
            continue                               # 门面按需导入任何子模块；转发只运行 cli.forward
        for dep in deps:
            d = layer(dep)
            if d is None:                          # 门面：看不见的依赖，见下面的 hidden
                continue
            if d >= TEACHING and s < TEACHING:
                bad.append(f"{src} → {dep}（库与入口不导入教学和工具模块）")
            elif s == TEACHING and d in (ENTRY, FORWARD):
                bad.append(f"{src} → {dep}（教学模块只导入 L0–L6）")
            elif s < TEACHING and d > s:
                bad.append(f"{src}（L{s}）→ {dep}（L{d}）")
    for src, uses in hidden.items():
        if src != "gptcourse" and layer(src) not in (ENTRY, FORWARD):
            bad += [f"{src}：{u}（依赖看不见；直接导入要用的模块）" for u in uses]
    return sorted(bad)


def test_the_package_keeps_its_layers():
    assert violations() == []


def test_argparse_only_in_entry_points():
    users = sorted(name for name, path in modules().items()
                   if "argparse" in path.read_text(encoding="utf-8")
                   and name != "gptcourse" and layer(name) not in (ENTRY, FORWARD))
    assert users == []


# ---------------------------------------------------------------- 表只有一份
TABLE_ROW = re.compile(r"^\s*(L\d|T|F)\s+((?:[a-z_]+/?\s+)+)")


def _table(text: str) -> dict[str, tuple[str, ...]]:
    """文字里的分层表：以层名开头的行 → 这一行列出的模块（包的 "/" 去掉）。"""
    rows = {}
    for line in text.splitlines():
        m = TABLE_ROW.match(line + " ")
        if m:
            rows[m.group(1)] = tuple(w.rstrip("/") for w in m.group(2).split())
    return rows


def test_docstring_and_readme_tables_are_layers():
    assert _table(gptcourse.__doc__) == gptcourse.LAYERS
    readme = (PKG.parent / "README.md").read_text(encoding="utf-8")
    assert _table(readme[readme.index("## 仓库结构"):]) == gptcourse.LAYERS


def test_layers_name_every_top_level_module_once():
    names = [m for ms in gptcourse.LAYERS.values() for m in ms]
    assert len(names) == len(set(names))
    top = {n.split(".")[1] for n in modules() if n.count(".") >= 1}
    assert set(names) == top


def test_facade_lists_real_modules():
    library = [m for layer, ms in gptcourse.LAYERS.items() if layer not in ("L7", "F") for m in ms]
    assert gptcourse.MODULES == tuple(library)
    assert set(gptcourse.MODULES) <= set(dir(gptcourse))


# ---------------------------------------------------------------- 学习者的包与课堂工具包分开
KIT = "gptcourse_kit"
KIT_PKG = PKG.parent / KIT


def test_the_learners_package_never_names_the_kit():
    """``gptcourse/`` 里没有一个文件提到 ``gptcourse_kit``，只有旧命令名的转发 ``cli/forward.py``
    ——它运行那条命令，不导入其中的名字。"""
    naming = sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*")
                    if p.is_file() and p.suffix in (".py", ".html", ".js", ".css", ".md", ".txt")
                    and KIT in p.read_text(encoding="utf-8", errors="replace"))
    assert naming == ["cli/forward.py"], naming
    assert "import " + KIT not in (PKG / "cli" / "forward.py").read_text(encoding="utf-8")


def test_forwarders_only_forward():
    """F 行的每个模块只是一条转发：没有别的定义，运行的正是 gptcourse_kit 里的同名命令。"""
    for name in gptcourse.LAYERS["F"]:
        path = PKG / name / "__main__.py" if (PKG / name).is_dir() else PKG / f"{name}.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        assert not [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        assert f"forward('gptcourse.{name}')" in ast.unparse(tree), path
        target = KIT_PKG / name
        assert (target / "__main__.py").exists() or target.with_suffix(".py").exists(), target


def test_old_command_names_still_run(capsys):
    """``python -m gptcourse.notebooks --help`` 仍然可用（转发到 gptcourse_kit，并说出新名字）。"""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "gptcourse.notebooks", "--help"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "python -m gptcourse_kit.notebooks" in r.stderr + r.stdout


# ---------------------------------------------------------------- 栽进去的导入：每一个都被抓住
HIDDEN = "（依赖看不见；直接导入要用的模块）"
PLANTED = {
    "facade in a library module": (
        "sampling.py", "\n\ndef _viz():\n    import gptcourse as gc\n    return gc.viz.basic\n",
        "gptcourse.sampling：第 {} 行 import gptcourse" + HIDDEN),
    "facade name via from-import": (
        "generate.py", "\n\ndef _s():\n    from gptcourse import setup\n    return setup\n",
        "gptcourse.generate：第 {} 行 from gptcourse import 门面的名字" + HIDDEN),
    "import_module outside entry points": (
        "generate.py",
        "\n\ndef _check():\n    import importlib\n    return importlib.import_module('gptcourse.check')\n",  # noqa: E501
        "gptcourse.generate：第 {} 行 importlib.import_module(…)" + HIDDEN),
    "__import__ outside entry points": (
        "model.py", "\n\ndef _viz():\n    return __import__('gptcourse.viz')\n",
        "gptcourse.model：第 {} 行 __import__(…)" + HIDDEN),
    "teaching → cli": (
        "viz/basic.py", "\n\ndef _main():\n    from ..cli import main\n    return main\n",
        "gptcourse.viz.basic → gptcourse.cli（教学模块只导入 L0–L6）"),
    "lazy upward import": (            # 也成了环（serve 导入 verse）：那几条也报
        "verse.py", "\n\ndef _up():\n    from .serve import params\n    return params\n",
        "gptcourse.verse（L1）→ gptcourse.serve（L6）"),
    "teaching in a dynamic import inside mistakes": (
        "mistakes/__init__.py",
        "\n\ndef _d():\n    import importlib\n    return importlib.import_module(f'{__name__}.demos')\n",  # noqa: E501
        "gptcourse.mistakes：第 {} 行 importlib.import_module(…)" + HIDDEN),
    "unregistered module": (
        "newthing.py", "import gptcourse.errors\n", "gptcourse.newthing 不在分层表里：请在 gptcourse.LAYERS 里登记它"),  # noqa: E501
}


@pytest.mark.parametrize("case", list(PLANTED))
def test_a_planted_import_is_caught(tmp_path, case):
    file, code, message = PLANTED[case]           # message：{} = 栽进去的那一行的行号
    pkg = tmp_path / "gptcourse"
    shutil.copytree(PKG, pkg, ignore=shutil.ignore_patterns("*.pyc", "__pycache__", "static",
                                                            "fonts", "assets"))
    target = pkg / file
    before = target.read_text(encoding="utf-8") if target.exists() else ""
    target.write_text(before + code, encoding="utf-8")
    marker = next((i for i, text in enumerate(code.split("\n"))
                  if re.search(r"import gptcourse|from gptcourse|import_module\(|__import__\(", text)  # noqa: E501
                  ), 0)
    found = violations(pkg)                       # 没栽之前是 []（test_the_package_keeps_its_layers）  # noqa: E501
    assert message.format(before.count("\n") + 1 + marker) in found, found


def test_running_the_kit_package_itself_lists_its_commands_in_one_line():
    """``python -m gptcourse_kit``：一行中文说出四个命令，退出码 2（以前是 Python 的英文 “No module
    named gptcourse_kit.__main__”，退出码 1）。"""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", KIT], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1
    assert all(f"python -m {KIT}.{t}" in r.stderr
               for t in ("classroom", "claims", "notebooks", "bench"))
