"""Metric units, declared in the repo config and parsed with pint.

A metric's unit is declared (``[benchmarks.<name>.units]``), or known because
the verifier measures the metric itself (``MEASURED_UNITS``); it is never
guessed from the metric's name (``tokens_per_s`` ends in ``_s`` and is a rate,
not a time). pint is imported on first use, so importing the verifier stays
cheap.

    canonical("seconds") -> "s"      canonical("tokens/s") -> "token/s"
    scale_for_display("s", [0.02, 0.03]) -> ("ms", 1000.0)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

#: Units of the metrics the verifier measures itself.
MEASURED_UNITS: dict[str, str] = {
    "wall_s": "s",
    "cpu_s": "s",
    "startup_s": "s",
    "peak_rss_mib": "MiB",
    "device_peak_memory_mib": "MiB",
}

#: Counting units an inference benchmark reports, defined on top of pint's
#: registry so that "tokens/s" or "requests/s" parse and keep their word.
COUNT_UNITS = ("token", "request", "sample", "frame", "word", "character", "utterance", "image")

EXAMPLES = '"s", "ms", "1/s", "token/s", "MiB"'


@lru_cache(maxsize=1)
def _registry() -> Any:
    import pint

    ureg: Any = pint.UnitRegistry()
    for name in COUNT_UNITS:
        ureg.define(f"{name} = [{name}] = _ = {name}s")
    return ureg


@lru_cache(maxsize=256)
def canonical(text: str) -> str:
    """The short form of a unit (``"seconds"`` -> ``"s"``; ``""`` for a plain
    number), or ``ValueError`` saying what is wrong and what to write."""
    if not isinstance(text, str) or len(text) > 64:
        raise ValueError(f"a unit is a short string such as {EXAMPLES}")
    if text.strip() in ("", "1"):
        return ""
    try:
        unit = _registry().parse_units(text.strip())
    except Exception as exc:  # pint raises several types (UndefinedUnitError, syntax errors)
        raise ValueError(f"unit {text!r} is not a unit pint knows ({type(exc).__name__}); "
                         f"write one such as {EXAMPLES}") from None
    short = f"{unit:~P}"
    return "" if short in ("", "dimensionless") else short


_TIME_STEPS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6))


def scale_for_display(unit: str, values: Iterable[float | None]) -> tuple[str, float]:
    """(unit shown, factor) for every value of one metric: a time whose values
    are all below one of its unit is shown in the largest of s, ms, µs that
    keeps them at or above 1, so a row never mixes ms and s."""
    vals = [abs(v) for v in values if v is not None and not math.isnan(v)]
    if not unit or not vals or max(vals) >= 1 or max(vals) == 0:
        return unit, 1.0
    try:
        ureg = _registry()
        q = ureg.Quantity(1.0, unit)
        if q.dimensionality != ureg.second.dimensionality:
            return unit, 1.0
        seconds = q.to("s").magnitude
    except Exception:
        return unit, 1.0
    for shown, size in _TIME_STEPS:
        if max(vals) * seconds >= size:
            return shown, round(seconds / size, 12)
    return "µs", round(seconds / 1e-6, 12)
