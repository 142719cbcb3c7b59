"""The coverage floor only goes up (scripts/raise_coverage_floor.py)."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("raise_coverage_floor", ROOT / "scripts" / "raise_coverage_floor.py")
assert _spec is not None and _spec.loader is not None
floor = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(floor)

PYPROJECT = (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def test_the_script_reads_the_floor_make_test_enforces():
    assert floor.floor_of(PYPROJECT) == tomllib.loads(PYPROJECT)["tool"]["coverage"]["report"]["fail_under"]


def test_a_higher_total_raises_the_floor_to_its_whole_percent_and_nothing_else():
    now = floor.floor_of(PYPROJECT)
    text, new = floor.raised(PYPROJECT, now + 2.97)
    assert new == now + 2 and floor.floor_of(text) == now + 2
    assert text.replace(f"fail_under = {now + 2}", f"fail_under = {now}") == PYPROJECT


@pytest.mark.parametrize("delta", [0.0, 0.99, -0.5, -10])
def test_a_total_not_a_whole_percent_higher_leaves_it(delta):
    now = floor.floor_of(PYPROJECT)
    assert floor.raised(PYPROJECT, now + delta) == (PYPROJECT, now)


def test_a_fail_under_elsewhere_is_not_the_floor():
    text = "[tool.other]\nfail_under = 99\n\n[tool.coverage.report]\nskip_covered = true\nfail_under = 40\n"
    assert floor.floor_of(text) == 40
    assert floor.raised(text, 55.2)[0].endswith("fail_under = 55\n") and "fail_under = 99" in floor.raised(text, 55.2)[0]
    with pytest.raises(ValueError, match="no 'fail_under = N' under"):
        floor.floor_of("[tool.coverage.report]\nskip_covered = true\n")
