"""包的分层（见 gptcourse/__init__.py 的说明）：一个模块只导入比它低的层
（同层可以，但不能成环），延迟导入（函数里的 import）也算。导入 ``a.b.c`` 会执行 ``a.b`` 的 ``__init__``，所以也算导入了 ``a.b``。"""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import gptcourse

PKG = Path(gptcourse.__file__).parent
LAYERS = {                                   # 顶层名字 → 层号；T（教学）= 10，X（工具）= 20
    "runtime": 0, "errors": 0, "config": 0,
    "verse": 1, "tokenizer": 1, "bpe": 1, "data": 1, "titled": 1,
    "rope": 2, "model": 2,
    "precision": 3, "distributed": 3, "objectives": 3, "train": 3, "checkpoint": 3,
    "sampling": 4, "constraints": 4, "generate": 4, "evaluate": 4, "acceptance": 4, "quantize": 4,
    "rhyme_probe": 4,
    "release": 5, "serve": 6, "cli": 7, "__main__": 7,
    "walkthrough": 10, "viz": 10, "mistakes": 10, "check": 10,
    "bench": 20, "notebooks": 20, "classroom": 20,
}
TEACHING, TOOLS = 10, 20


def modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
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
    return graph


def layer(module: str) -> int:
    top = module.split(".")[1]
    assert top in LAYERS, f"{module} 不在分层表里：请在 tests/test_layers.py 的 LAYERS 里登记它"
    return LAYERS[top]


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


def test_every_module_has_a_layer():
    for name in modules():
        if name != "gptcourse":
            layer(name)


def test_no_import_cycles():
    assert strongly_connected(import_graph()) == []


def test_no_upward_imports():
    bad = []
    for src, deps in import_graph().items():
        if src == "gptcourse":
            continue                               # 门面：按需导入任何子模块
        for dep in deps:
            s, d = layer(src), layer(dep)
            if s == TOOLS:
                continue                           # 工具可以导入任何模块
            if d >= TEACHING and s < TEACHING:
                bad.append(f"{src} → {dep}（库与入口不导入教学和工具模块）")
            elif s == TEACHING and d == TOOLS:
                bad.append(f"{src} → {dep}（教学模块不导入工具）")
            elif s < TEACHING and d > s:
                bad.append(f"{src}（L{s}）→ {dep}（L{d}）")
    assert bad == [], "\n".join(sorted(bad))


def test_argparse_only_in_entry_points():
    users = sorted(name for name, path in modules().items()
                   if "argparse" in path.read_text(encoding="utf-8")
                   and name != "gptcourse" and layer(name) not in (LAYERS["cli"], TOOLS))
    assert users == []


def test_facade_lists_real_modules():
    names = {n.split(".")[1] for n in modules() if n.count(".") == 1}
    assert set(gptcourse.MODULES) <= names
    assert set(gptcourse.MODULES) <= set(dir(gptcourse))
