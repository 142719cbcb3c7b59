"""Raise the coverage floor to the last measured total; never lower it.

After `make test` (whose serial half leaves `.coverage`), run

    .venv/bin/python scripts/raise_coverage_floor.py

It reads the total of that data (``coverage report --format=total``), and when
its whole percent is above ``fail_under`` in pyproject.toml's
``[tool.coverage.report]``, writes it there; commit that with the change that
raised it. A lower total leaves the floor as it is (and `make test` fails on it).
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_FLOOR = re.compile(r"(?m)^(\[tool\.coverage\.report\][^\[]*?^fail_under[ \t]*=[ \t]*)(\d+)[ \t]*$")


def floor_of(text: str) -> int:
    """The ``fail_under`` of ``[tool.coverage.report]`` in pyproject.toml's text."""
    m = _FLOOR.search(text)
    if m is None:
        raise ValueError("pyproject.toml has no 'fail_under = N' under [tool.coverage.report]")
    return int(m.group(2))


def raised(text: str, total: float) -> tuple[str, int]:
    """(the text with the floor raised to ``total`` rounded down, the new floor);
    the text unchanged when that is not above the floor now."""
    old, new = floor_of(text), math.floor(total)
    if new <= old:
        return text, old
    return _FLOOR.sub(lambda m: f"{m.group(1)}{new}", text, count=1), new


def main() -> int:
    out = subprocess.run([sys.executable, "-m", "coverage", "report", "--format=total", "--precision=2"],
                         cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0 or not out.stdout.strip():
        print(f"no coverage total (run make test first): {out.stderr.strip()}", file=sys.stderr)
        return 2
    total = float(out.stdout.strip())
    path = ROOT / "pyproject.toml"
    text = path.read_text(encoding="utf-8")
    new_text, floor = raised(text, total)
    if new_text == text:
        print(f"coverage {total:.2f}%: the floor stays at {floor}%")
    else:
        path.write_text(new_text, encoding="utf-8")
        print(f"coverage {total:.2f}%: the floor goes up from {floor_of(text)}% to {floor}% "
              "(pyproject.toml; commit it)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
