"""No circles in the import graph of harness/, verifier/ and kernels/.

Function-level imports count as much as module-level ones (a circle hidden
in a function is still a circle: it only waits for the function to run);
imports under ``if TYPE_CHECKING:`` do not. bot/'s test uses the same helper,
tests/importgraph.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.importgraph import cycles, describe, import_graph


def test_harness_verifier_kernels_have_no_import_circles():
    found = cycles(import_graph(["harness", "verifier", "kernels"]))
    assert not found, "import circles (break each by moving what both need into a module below them):\n" + describe(found)


def _package(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.mark.parametrize("b_text, expected", [
    # a function-level import closes the circle as much as a module-level one
    ("def f():\n    from pkg.a import x\n", [["pkg.a", "pkg.b", "pkg.a"]]),
    # relative imports, from-package-import-module
    ("from . import a\n", [["pkg.a", "pkg.b", "pkg.a"]]),
    ("from .a import x\n", [["pkg.a", "pkg.b", "pkg.a"]]),
    # a type-only import never runs: no circle
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import x\n", []),
    # an import of something not ours, or of a sibling that imports nothing back
    ("import json\nfrom pkg import c\n", []),
])
def test_the_helper_finds_circles_through_every_kind_of_import(tmp_path, b_text, expected):
    _package(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "from pkg.b import y\nx = 1\n",
                        "pkg/b.py": b_text + "y = 2\n", "pkg/c.py": "import os\n"})
    assert cycles(import_graph(["pkg"], root=tmp_path)) == expected


def test_the_helper_names_one_circle_per_tangle(tmp_path):
    _package(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "import pkg.b\n",
                        "pkg/b.py": "import pkg.c\n", "pkg/c.py": "def f():\n    import pkg.a\n",
                        "pkg/d.py": "import pkg.d\n"})
    found = cycles(import_graph(["pkg"], root=tmp_path))
    assert found == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"], ["pkg.d", "pkg.d"]]
    assert describe(found) == "pkg.a -> pkg.b -> pkg.c -> pkg.a\npkg.d -> pkg.d"


def test_the_helper_counts_the_packages_above_an_import(tmp_path):
    """``from pkg.sub.leaf import f`` runs ``pkg/sub/__init__.py`` first: a circle
    through that ``__init__`` is a circle (the importer's own packages are not)."""
    _package(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "def f():\n    from pkg.sub.leaf import g\n",
                        "pkg/sub/__init__.py": "from pkg.sub import b\n", "pkg/sub/leaf.py": "g = 1\n",
                        "pkg/sub/b.py": "from pkg.a import f\n"})
    assert cycles(import_graph(["pkg"], root=tmp_path)) == [["pkg.a", "pkg.sub", "pkg.sub.b", "pkg.a"]]
