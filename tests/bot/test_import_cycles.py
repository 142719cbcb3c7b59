"""bot/ has no import cycles: every import counts, at module level or inside a
function (a lazy import is still a dependency), and importing ``a.b.c`` also
runs the ``__init__`` of each package above it that the importer is not inside.
Only imports under ``if TYPE_CHECKING:`` are left out (they never run)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _modules(package: str) -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _type_checking_only(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, name: str, is_pkg: bool) -> list[str]:
    """Every module ``name``'s code imports (dotted), wherever the import stands."""
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking_only(node):
            for stmt in node.orelse:
                visit(stmt)
            return
        if isinstance(node, ast.Import):
            found.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                pkg = pkg[:len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([base] if base else []))
            found.extend(f"{base}.{a.name}" for a in node.names)  # a module, or a name in base
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph(package: str = "bot") -> dict[str, set[str]]:
    mods = _modules(package)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        is_pkg = path.name == "__init__.py"
        mine = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 2)}
        for target in _imports(ast.parse(path.read_text()), name, is_pkg):
            while target and target not in mods:  # `from a import name`: the module a
                target = target.rpartition(".")[0]
            if not target:
                continue
            parts = target.split(".")
            for i in range(1, len(parts) + 1):  # the target and the packages above it
                dep = ".".join(parts[:i])
                if dep in mods and dep != name and (dep not in mine or dep == target):
                    graph[name].add(dep)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
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
            if len(comp) > 1 or v in graph[v]:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def test_the_graph_sees_lazy_imports_and_parent_packages():
    g = import_graph()
    assert "bot.executors.actions" in g["bot.handlers.workflow_run"]  # inside handle()
    assert "bot.tasks" in g["bot.executors.local"]
    assert "bot.handlers" in g["bot.service"]  # a lazy import, in build_context
    assert "bot.tasks" in g["bot.executors.actions"]  # `from bot.tasks.clone import` runs it
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_bot_has_no_import_cycles():
    found = cycles(import_graph("bot"))
    assert found == [], "import cycles in bot/: " + "; ".join(" <-> ".join(c) for c in found)
