"""A deployment matrix: the settings a deployment varies, and their cells.

``[benchmarks.<name>.matrix]`` declares each setting as a list of values;
the cells are every combination::

    [benchmarks.tts.matrix]
    concurrency = [2, 4]          # a setting: its values
    cpus = ["0", "0-1"]           # the CPU set of every run (a cpuset list)
    pairs = 4                     # pairs per secondary cell (default 4)
    max_pairs = 12                # a guard still unclear after them: measured further, up to these
    primary = { concurrency = 2 } # optional; default: the first value of each setting

The primary cell decides the objective exactly as a benchmark without a matrix
does (the same sequential test). The other cells are measured afterwards,
only when the primary accepted, with ``pairs`` pairs each, and judged by the
same guards: a guard failing in any cell rejects, the cell named. A guard
whose interval still straddles its bound there is measured further, one ABBA
block at a time, up to ``max_pairs`` (default 3x ``pairs``); still unclear
then, the accept goes to review: never decided by its point.

How a setting reaches a run: every job of the run (server, client, evaluator,
in-process command, setup) gets ``RSI_MATRIX_<NAME>`` (``concurrency`` ->
``RSI_MATRIX_CONCURRENCY``); a setting of the same name in the benchmark's
``settings`` takes the cell's value (so ``RSI_SETTING_<NAME>`` follows it).
``cpus`` also pins every run: the container's cpuset (``cpuset_cpus``) with
container isolation, the processes' CPU affinity otherwise, and thread
variables for that many CPUs (``[verifier] threads`` wins).

Values are untrusted input (a proposal may carry them): they only ever
travel as environment values and a parsed cpuset, never into a command line,
and are checked at config time: names are lower-case identifiers, strings
are short and of a plain character set (no spaces, quotes or shell
characters, never a leading ``-``), numbers are finite, ``cpus`` is a cpuset
list, a setting has at most ``MAX_VALUES`` values and the matrix at most
``MAX_CELLS`` cells.

This module knows nothing of measurement (``verifier.cells`` measures cells).
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr

Value = StrictInt | StrictFloat | StrictStr
"""A setting's value (TOML booleans are refused: write 0/1 or a word)."""

MAX_CELLS = 16
"""Most cells a matrix may have (each secondary cell costs ``pairs`` pairs)."""
MAX_VALUES = 8
"""Most values one setting may list."""
MAX_SETTINGS = 4
RESERVED = ("pairs", "max_pairs", "primary")
CPUS = "cpus"
ENV_PREFIX = "RSI_MATRIX_"
NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,31}")
VALUE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+/-]{0,63}")
CPUSET_RE = re.compile(r"\d{1,4}(-\d{1,4})?(,\d{1,4}(-\d{1,4})?){0,63}")
MAX_INT = 2**31


class Matrix(BaseModel):
    """``[benchmarks.<name>.matrix]``: settings a deployment varies (each a
    list of values; the cells are every combination), ``pairs`` per
    secondary cell and, optionally, the ``primary`` cell."""

    model_config = ConfigDict(frozen=True, extra="allow")
    __pydantic_extra__: dict[str, list[Value]] = Field(init=False)

    pairs: int = Field(4, ge=2, le=30)
    """Pairs (ABBA: a multiple of 2 is whole blocks) measured in each cell but
    the primary; the primary cell runs the objective's sequential test."""
    max_pairs: int | None = Field(None, ge=2, le=60)
    """Most pairs a secondary cell is measured to while one of its guards is
    still unclear (its interval straddles the bound); default 3x ``pairs``
    (at most 30). ``max_pairs = pairs`` measures no further."""
    primary: dict[str, Value] | None = None
    """The cell that decides the objective (a value for some or all
    settings; the others take their first value). Default: the first value
    of every setting."""

    def cap(self) -> int:
        """The most pairs a secondary cell is measured to (``max_pairs``)."""
        return max(self.pairs, self.max_pairs if self.max_pairs is not None else min(3 * self.pairs, 30))

    def runs_after_accept(self, warmup: int, arms: int = 3, per_start: int = 1) -> int:
        """The most runs the cells but the primary take after an accept:
        each to its ``cap()`` pairs (of sessions of ``per_start`` runs), with
        its warm-ups, over ``arms`` arms."""
        return arms * (len(self.cells()) - 1) * (self.cap() * per_start + warmup)

    def settings(self) -> dict[str, list[Value]]:
        """Setting name -> its values, in the config's order."""
        return {str(k): list(v) for k, v in (self.model_extra or {}).items()}

    def problems(self, where: str) -> list[str]:
        """What is wrong with this matrix (empty: nothing); ``where`` names it."""
        out: list[str] = []
        settings = self.settings()
        if not settings:
            out.append(f"{where}: declare at least one setting and its values, e.g. "
                       "concurrency = [1, 4]")
        if len(settings) > MAX_SETTINGS:
            out.append(f"{where}: {len(settings)} settings; at most {MAX_SETTINGS}")
        for name, values in settings.items():
            out += _setting_problems(f"{where}.{name}", name, values)
        cells = math.prod(len(v) for v in settings.values()) if settings else 0
        if cells > MAX_CELLS:
            out.append(f"{where}: {cells} cells (every combination of the settings' values); "
                       f"at most {MAX_CELLS}: drop values or settings")
        if self.max_pairs is not None and self.max_pairs < self.pairs:
            out.append(f"{where}.max_pairs: {self.max_pairs} is below pairs = {self.pairs}; "
                       f"set max_pairs >= {self.pairs} (= {self.pairs}: measure no further)")
        for name, value in (self.primary or {}).items():
            if name not in settings:
                out.append(f"{where}.primary: '{name}' is not a setting of this matrix "
                           f"(settings: {', '.join(settings) or 'none'})")
            elif not any(type(v) is type(value) and v == value for v in settings[name]):
                shown = ", ".join(repr(v) for v in settings[name])
                out.append(f"{where}.primary.{name}: {value!r} is not one of its values ({shown})")
        return out

    def cells(self) -> list[Cell]:
        """Every cell, the primary first, then the others in the order of the
        settings' values (each setting's first value varying slowest)."""
        settings = self.settings()
        names = list(settings)
        chosen = {n: (self.primary or {}).get(n, settings[n][0]) for n in names}
        primary = Cell(tuple((n, chosen[n]) for n in names), primary=True)
        out = [primary]
        for combo in itertools.product(*(settings[n] for n in names)):
            values = tuple(zip(names, combo, strict=True))
            if values != primary.values:
                out.append(Cell(values))
        return out

    def primary_cell(self) -> Cell:
        return self.cells()[0]


def _setting_problems(where: str, name: str, values: list[Value]) -> list[str]:
    out: list[str] = []
    if not NAME_RE.fullmatch(name):
        out.append(f"{where}: a setting's name is a lower-case identifier of at most 32 "
                   "characters (letters, digits, _), e.g. concurrency")
    if name in RESERVED:
        out.append(f"{where}: '{name}' is reserved")
    if not values:
        out.append(f"{where}: give at least one value")
    if len(values) > MAX_VALUES:
        out.append(f"{where}: {len(values)} values; at most {MAX_VALUES}")
    if len({(type(v), v) for v in values}) != len(values):
        out.append(f"{where}: a value is listed twice")
    for v in values:
        if isinstance(v, str) and not VALUE_RE.fullmatch(v):
            out.append(f"{where}: {v[:80]!r} is not a plain value: at most 64 characters of "
                       "letters, digits and . _ : + / -, starting with a letter or digit")
        elif isinstance(v, float) and not math.isfinite(v):
            out.append(f"{where}: {v!r} is not a finite number")
        elif isinstance(v, int) and not -MAX_INT <= v < MAX_INT:
            out.append(f"{where}: {v} is out of range (a 32-bit integer)")
    if name == CPUS:
        for v in values:
            problem = cpuset_problem(v)
            if problem:
                out.append(f"{where}: {problem}")
    return out


def cpuset_problem(value: Value) -> str:
    """Why ``value`` is not a cpuset list (``"0"``, ``"0-1"``, ``"2,4-5"``), or ''."""
    text = str(value) if isinstance(value, int) else value
    if not isinstance(text, str) or not CPUSET_RE.fullmatch(text):
        return (f"{str(value)[:80]!r} is not a CPU set: write a cpuset list such as \"0\", "
                "\"0-1\" or \"2,4-5\"")
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if hi and int(hi) < int(lo):
            return f"{text!r}: the range {part} runs backwards"
    return ""


def env_name(setting: str) -> str:
    """The environment variable a setting reaches every job of a run by."""
    return ENV_PREFIX + setting.upper()


@dataclass(frozen=True)
class Cell:
    """One combination of the matrix's settings."""

    values: tuple[tuple[str, Value], ...]
    primary: bool = False

    @property
    def label(self) -> str:
        """``concurrency=4, cpus=0-1``."""
        return ", ".join(f"{k}={v}" for k, v in self.values)

    def as_dict(self) -> dict[str, Value]:
        return dict(self.values)

    def env(self) -> dict[str, str]:
        """``RSI_MATRIX_<NAME>`` for every setting."""
        return {env_name(k): str(v) for k, v in self.values}

    @property
    def cpus(self) -> str | None:
        """The cell's CPU set, when the matrix varies ``cpus``."""
        for k, v in self.values:
            if k == CPUS:
                return str(v)
        return None
