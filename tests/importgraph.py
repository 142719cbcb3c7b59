"""The import graph of our own packages, and the circles in it.

A reusable helper for the "no import cycles" tests (tests/test_import_cycles.py
for harness/, verifier/ and kernels/; bot/'s test uses it too). Read from the
source with :mod:`ast`, nothing is imported:

* every ``import`` and ``from ... import`` counts, at module level and inside
  functions alike (a function-level import is still a dependency: it only
  hides the circle until the function runs);
* imports under ``if TYPE_CHECKING:`` do not count (they never run);
* an import names the most specific module of ours it reaches:
  ``from harness import sandbox`` is ``harness.sandbox`` (a module),
  ``from harness.egress import discard`` is ``harness.egress`` (a name in it),
  relative imports are resolved against the importing module's package;
* a package's ``__init__.py`` is the node of the package's name, and importing
  ``a.b.c`` also depends on the packages above it (``a.b``: their ``__init__``
  runs first), except those the importer is inside (already loaded);

:func:`cycles` returns each strongly connected component of more than one
module (or a module that imports itself), with one concrete circle through it
from :func:`circle`, so a failing test says what to break.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""The repository root (the packages lie directly under it)."""

Graph = dict[str, set[str]]


def modules(packages: Iterable[str], root: Path = ROOT) -> dict[str, Path]:
    """Every module of ``packages`` (top-level package names under ``root``),
    by dotted name."""
    out: dict[str, Path] = {}
    for pkg in packages:
        base = root / pkg
        if not (base / "__init__.py").is_file():
            raise ValueError(f"{base} is not a package (no __init__.py)")
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement in ``tree`` at any depth, except under
    ``if TYPE_CHECKING:``."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _resolve(name: str, known: Mapping[str, Path]) -> str | None:
    """The longest prefix of dotted ``name`` that is one of ``known``."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in known:
            return candidate
    return None


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool,
             known: Mapping[str, Path]) -> set[str]:
    """The modules of ours one import statement reaches."""
    out: set[str] = set()
    if isinstance(node, ast.Import):
        for alias in node.names:
            hit = _resolve(alias.name, known)
            if hit is not None:
                out.add(hit)
        return out
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join(package + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    for alias in node.names:
        if f"{base}.{alias.name}" in known:  # from pkg import module
            out.add(f"{base}.{alias.name}")
        else:  # from module import name
            hit = _resolve(base, known)
            if hit is not None:
                out.add(hit)
    return out


def _parents(targets: set[str], importer: str, known: Mapping[str, Path]) -> set[str]:
    """The packages above ``targets`` whose ``__init__`` importing them runs:
    those ``importer`` is not inside (its own are loaded already)."""
    out: set[str] = set()
    for target in targets:
        parts = target.split(".")
        for n in range(1, len(parts)):
            pkg = ".".join(parts[:n])
            if pkg in known and not (importer == pkg or importer.startswith(pkg + ".")):
                out.add(pkg)
    return out


def import_graph(packages: Iterable[str], root: Path = ROOT) -> Graph:
    """Module -> the modules of ``packages`` it imports (anywhere in its code)."""
    known = modules(packages, root)
    graph: Graph = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        deps: set[str] = set()
        for node in _imports(tree):
            deps |= _targets(node, name, is_package, known)
        graph[name] = deps | _parents(deps, name, known)
    return graph


def _components(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.append(member)
                    if member == node:
                        break
                out.append(sorted(comp))
    return out


def circle(graph: Mapping[str, set[str]], members: Iterable[str]) -> list[str]:
    """One concrete circle through the first of ``members`` (a component):
    ``[a, b, ..., a]``, by breadth-first search inside the component."""
    inside = set(members)
    start = min(inside)
    if start in graph.get(start, set()):
        return [start, start]
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt: list[str] = []
        for node in frontier:
            for child in sorted(graph.get(node, set()) & inside):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [*reversed(path), start]
                if child not in prev:
                    prev[child] = node
                    nxt.append(child)
        frontier = nxt
    return [start]


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """A circle (``[a, b, ..., a]``) for each group of modules that import each
    other, directly or through others; empty when the graph has none."""
    out = []
    for comp in _components(graph):
        if len(comp) > 1 or comp[0] in graph.get(comp[0], set()):
            out.append(circle(graph, comp))
    return sorted(out)


def describe(found: list[list[str]]) -> str:
    """The circles as lines ``a -> b -> a``, for a test's failure message."""
    return "\n".join(" -> ".join(c) for c in found)
