"""Measuring a deployment matrix's cells (``verifier.matrix``).

``verify`` (``verifier.judge``) decides the objective on the primary cell and
then, when the primary accepted, measures every other cell here with the
matrix's ``pairs`` and the same guards. ``measure_matrix`` measures every cell
(or every cell but the primary) of a matrix for a pair of checkouts on its
own: what a watch after merge re-measures.

A cell's run is the benchmark with the cell's environment (``cell_bench``) on
the cell's CPU set (``cell_isolation``); everything else (the hidden inputs,
ABBA blocks in a secret order, quality snapshots of every run, the guards
against Bk and B0) is the verification's.
"""

from __future__ import annotations

import copy
import math
import os
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .config import BenchmarkConfig, VerifyConfig
from .guards import Evaluator, derived_seed
from .isolation import Isolation, parse_cpus
from .matrix import Cell
from .measure import Progress, Session, hidden_env
from .verdict import (
    CellResult,
    Decision,
    GuardResult,
    Interval,
    MetricComparison,
    RunError,
    arm_label,
)

__all__ = [
    "MATRIX_HEADER",
    "CellRun",
    "MatrixRun",
    "cell_bench",
    "cell_isolation",
    "cell_row",
    "cells_decision",
    "cells_of",
    "column_metrics",
    "cpus_problem",
    "failed_cells_reason",
    "gain_text",
    "matrix_sentence",
    "measure_cell",
    "measure_matrix",
    "metric_text",
    "primary_result",
    "unclear_cells_reason",
    "unmeasured",
]


def cells_of(bench: BenchmarkConfig) -> list[Cell]:
    """The benchmark's cells, the primary first (none without a matrix)."""
    return bench.matrix.cells() if bench.matrix is not None else []


def cell_bench(bench: BenchmarkConfig, cell: Cell | None) -> BenchmarkConfig:
    """``bench`` as run in ``cell``: ``RSI_MATRIX_<NAME>`` for every setting in
    its ``env``, and a fixed setting of the same name replaced by the cell's
    value (so ``RSI_SETTING_<NAME>`` follows it)."""
    if cell is None:
        return bench
    values = cell.as_dict()
    settings = {k: (values[k] if k in values else v) for k, v in bench.settings.items()}
    return bench.model_copy(update={"env": {**bench.env, **cell.env()}, "settings": settings})


def cell_isolation(isolation: Isolation | None, cell: Cell | None) -> Isolation | None:
    """The isolation a cell's session pins (``Session`` pins what it is
    given, in place): a copy of ``isolation`` when the cell has its own CPU
    set, so one cell's cpuset and thread settings never leak into another's
    (or into the caller's isolation); else ``isolation`` itself."""
    if isolation is None or cell is None or cell.cpus is None:
        return isolation
    iso = copy.copy(isolation)
    for attr in ("base", "env", "pinned_env"):
        value = getattr(iso, attr, None)
        if isinstance(value, dict):
            setattr(iso, attr, dict(value))
    return iso


def cpus_problem(bench: BenchmarkConfig) -> str:
    """Why a cell's CPU set cannot be used on this machine, or ''."""
    have = set(os.sched_getaffinity(0))
    for cell in cells_of(bench):
        if cell.cpus is None:
            continue
        missing = sorted(set(parse_cpus(cell.cpus)) - have)
        if missing:
            return (
                f"benchmarks.{bench.name}.matrix: cell {cell.label} pins CPU(s) {missing}, "
                f"which this runner does not have (it has {sorted(have)}); list CPU sets "
                "the runners have"
            )
    return ""


def _gain(m: MetricComparison | None) -> tuple[float | None, Interval | None]:
    """The objective's gain vs Bk and its interval, from its comparison row."""
    if m is None or m.ratio_vs_bk is None or m.ratio_vs_bk <= 0:
        return None, None
    ci = m.ratio_vs_bk_ci
    if m.direction == "higher":
        gain = m.ratio_vs_bk - 1
        interval = Interval(low=ci.low - 1, high=ci.high - 1, level=ci.level) if ci else None
    else:
        gain = 1 / m.ratio_vs_bk - 1
        interval = (
            Interval(low=1 / ci.high - 1, high=1 / ci.low - 1, level=ci.level)
            if ci and ci.low > 0
            else None
        )
    return gain, interval


def primary_result(
    cell: Cell,
    metric: str,
    gain: float | None,
    gain_ci: Interval | None,
    pairs: int,
    guards: Iterable[GuardResult],
    metrics: Iterable[MetricComparison],
) -> CellResult:
    """The primary cell's row, from the verification's own result."""
    return CellResult(
        setting=cell.as_dict(),
        primary=True,
        pairs=pairs,
        metric=metric,
        gain=gain,
        gain_ci=gain_ci,
        guards=tuple(guards),
        metrics=tuple(m for m in metrics if "." not in m.name),
        note="primary: decided the objective",
    )


def unmeasured(cell: Cell, why: str) -> CellResult:
    return CellResult(setting=cell.as_dict(), measured=False, note=why)


@dataclass
class CellRun:
    """One cell's measurement: its result, or the run error that stopped it."""

    result: CellResult | None
    runs: int
    error: RunError | None = None
    flags: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def measure_cell(
    config: VerifyConfig,
    bench_name: str,
    cell: Cell,
    arms: dict[str, Path],
    *,
    pairs: int,
    seed: int,
    env: dict[str, str],
    drop: tuple[str, ...],
    base_checkout: Path,
    isolation: Isolation | None = None,
    progress: Progress | None = None,
    run_offset: int = 0,
    warmup: int | None = None,
    max_pairs: int | None = None,
) -> CellRun:
    """Measure ``cell`` of ``bench_name`` over ``arms`` (``bk``, ``candidate``,
    optionally ``b0``): setup, warm-ups, ``pairs`` pairs in ABBA blocks, and
    every guard judged; while a guard is unclear (its interval straddles its
    bound), one ABBA block more, up to ``max_pairs`` (default ``pairs``: no
    further). Never raises."""
    v = config.verifier
    t0 = time.perf_counter()
    bench = cell_bench(config.benchmark(bench_name), cell)
    cell_seed = derived_seed(seed, bench_name, "cell", cell.label)
    judge = Evaluator(config, bench_name, arms, seed=cell_seed)
    on_run = judge.on_run_for(config.quality_for(bench_name), arms)
    try:
        session = Session(
            bench,
            arms,
            seed=cell_seed,
            extra_env=env,
            drop_env=drop,
            progress=progress,
            on_run=on_run,
            run_offset=run_offset,
            isolation=cell_isolation(isolation, cell),
            cpus=cell.cpus or v.cpus,
            threads=v.threads,
            base_checkout=base_checkout,
        )
    except ValueError as e:  # a CPU set this runner lacks
        return CellRun(None, 0, RunError(stage="config", message=f"cell {cell.label}: {e}"))
    with session as s:
        n_warm = v.warmup if warmup is None else warmup
        err = s.setup() or s.warmup(n_warm) or s.add_pairs(pairs)
        if err is not None:
            err = err.model_copy(update={"message": f"cell {cell.label}: {err.message}"})
            return CellRun(None, s.runs, err)
        # A cell has few pairs: a guard fails there only when its interval lies
        # wholly beyond the bound (a clear loss); a close call stays unclear,
        # never decided by a point that this machine's noise can move (the
        # judge makes an accept ``review`` for it).
        guards = judge.guards(s, final=False)
        cap = max(pairs, max_pairs or pairs)
        while s.pairs < cap and any(g.status == "unclear" for g in guards):
            # measured further, never decided by a point: a block more, the
            # same secret order, the guard judged again on every pair so far
            err = s.add_pairs(min(2, cap - s.pairs))
            if err is not None:
                err = err.model_copy(update={"message": f"cell {cell.label}: {err.message}"})
                return CellRun(None, s.runs, err)
            guards = judge.guards(s, final=False)
        metrics = judge.metrics(s)
        metric = config.objective.metric if bench_name == config.objective.benchmark else "wall_s"
        gain, gain_ci = _gain(next((m for m in metrics if m.name == metric), None))
        result = CellResult(
            setting=cell.as_dict(),
            primary=cell.primary,
            pairs=s.pairs,
            metric=metric,
            gain=gain,
            gain_ci=gain_ci,
            guards=tuple(guards),
            metrics=tuple(metrics),
            duration_s=time.perf_counter() - t0,
        )
        flags = [f"at {cell.label}: {f}" for f in judge.flags()]
        return CellRun(result, s.runs, None, flags, [f"at {cell.label}: {w}" for w in judge.warnings])


def failed_cells_reason(cells: Iterable[CellResult]) -> str:
    """The reject reason for guards failed in ``cells`` ('' when none):
    each guard named with its cell, "latency_p95_s <= 1.05x at concurrency=4
    vs Bk: ..."."""
    parts = [
        f"{g.name} at {c.label} vs {arm_label(g.against)}: {g.detail}"
        for c in cells
        for g in c.failed
    ]
    return "guard failed: " + "; ".join(parts) if parts else ""


def cells_decision(
    decision: Decision, reason: str, cells: Iterable[CellResult], flags: list[str], *,
    pairs: int, bench_name: str, per_start: int = 1,
) -> tuple[Decision, str, list[str]]:
    """(decision, reason, warnings) of a verdict whose primary cell decided
    ``decision`` / ``reason``, given the other ``cells`` and their ``flags``:
    a guard failed in a cell rejects (the cell named); one whose interval
    still straddles its bound at the cell's most ``pairs`` makes an accept ``review``,
    never decided by its point (issue 29), the reason naming the guard, the
    cell and what would decide it; a flag makes an accept ``review``;
    ``per_start``: the runs of a session pair (``runs_per_start``). Pure."""
    cells = list(cells)
    failed = failed_cells_reason(cells)
    unclear = unclear_cells_reason(cells)
    most = f"{pairs} pairs" if per_start <= 1 else (
        f"{pairs} session pairs ({pairs * per_start} runs of each arm)")
    undecided = unclear and (
        f"{unclear}: measured to {most} in the cell, and a guard whose interval "
        f"straddles its bound is never decided by its point; raise [benchmarks.{bench_name}"
        ".matrix] max_pairs to decide it, or a human decides"
    )
    if failed:
        decision, reason = Decision.REJECT, failed
    elif undecided and decision == Decision.ACCEPT:
        decision, reason = Decision.REVIEW, undecided
    elif flags and decision == Decision.ACCEPT:
        decision, reason = Decision.REVIEW, flags[0]
    warnings = [f for f in flags if f != reason]
    if undecided and undecided != reason:
        warnings.append(undecided)
    return decision, reason, warnings


def unclear_cells_reason(cells: Iterable[CellResult]) -> str:
    parts = [
        f"{g.name} at {c.label} vs {arm_label(g.against)}: {g.detail}"
        for c in cells
        for g in c.guards
        if g.status == "unclear"
    ]
    return "a guard is unclear in a matrix cell: " + "; ".join(parts) if parts else ""


@dataclass
class MatrixRun:
    """Every measured cell of a matrix (or the run error that stopped it)."""

    cells: list[CellResult]
    runs: int
    seed: int
    error: RunError | None = None
    flags: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[CellResult]:
        return [c for c in self.cells if c.failed]


def measure_matrix(
    baseline: Path,
    candidate: Path,
    config: VerifyConfig,
    *,
    benchmark: str | None = None,
    b0: Path | None = None,
    pairs: int | None = None,
    include_primary: bool = True,
    isolation: Isolation | None = None,
    progress: Progress | None = None,
    seed: int | None = None,
) -> MatrixRun:
    """Measure every cell of ``benchmark``'s matrix (default: the objective's)
    for ``candidate`` against ``baseline`` (Bk) and ``b0``, each with
    ``pairs`` pairs (default: the matrix's ``pairs``), judged by the config's
    guards; ``include_primary=False`` skips the primary cell. A benchmark
    without a matrix is one cell: its plain settings. The hidden inputs are
    the config's (``[hidden]``: a fresh seed in the runner's environment is a
    fresh draw). Stops at the first run error (``error``). Never raises."""
    if seed is None:
        seed = config.verifier.seed if config.verifier.seed is not None else secrets.randbits(63)
    name = benchmark or config.objective.benchmark
    try:
        bench = config.benchmark(name)
        env, drop = hidden_env(config)
    except ValueError as e:
        return MatrixRun([], 0, seed, RunError(stage="config", message=str(e)))
    problem = cpus_problem(bench)
    if problem:
        return MatrixRun([], 0, seed, RunError(stage="config", message=problem))
    cells = cells_of(bench) or [Cell((), primary=True)]
    if not include_primary:
        cells = [c for c in cells if not c.primary]
    arms = {"bk": Path(baseline), "candidate": Path(candidate)}
    if b0 is not None and Path(b0).resolve() != Path(baseline).resolve():
        arms["b0"] = Path(b0)
    n = pairs or (bench.matrix.pairs if bench.matrix else config.verifier.initial_pairs)
    most = bench.matrix.cap() if bench.matrix and not pairs else n  # measure_cell keeps >= n
    out = MatrixRun([], 0, seed)
    for cell in cells:
        run = measure_cell(
            config, name, cell, arms, pairs=n, seed=seed, env=env, drop=drop,
            base_checkout=Path(b0 or baseline), isolation=isolation, progress=progress,
            run_offset=out.runs, max_pairs=most,
        )  # fmt: skip
        out.runs += run.runs
        out.flags += run.flags
        out.warnings += run.warnings
        if run.error is not None or run.result is None:
            out.error = run.error
            return out
        out.cells.append(run.result)
    return out


def gain_text(cell: CellResult) -> str:
    """``+35.2% (95% CI +20.1% .. +50.3%)``, or '—'."""
    if cell.gain is None or not math.isfinite(cell.gain):
        return "—"
    text = f"{cell.gain:+.1%}"
    if cell.gain_ci is not None:
        ci = cell.gain_ci
        text += f" ({ci.level:.0%} CI {ci.low:+.1%} .. {ci.high:+.1%})"
    return text


def _pick(cell: CellResult, want: Iterable[str]) -> MetricComparison | None:
    by_name = {m.name: m for m in cell.metrics}
    return next((by_name[n] for n in want if n in by_name), None)


def column_metrics(cell: CellResult) -> dict[str, MetricComparison | None]:
    """The cell table's metric columns: ``p95`` (a latency's p95, not TTFA's
    or a stall's), ``ttfa`` (its median, else its p95) and ``memory`` (the
    device's peak, else the peak RSS)."""
    names = [m.name for m in cell.metrics]
    p95 = sorted(
        (n for n in names if "p95" in n and not n.startswith(("ttfa", "stall"))),
        key=lambda n: (not n.startswith("latency"), n),
    )
    ttfa = sorted(
        (n for n in names if n.startswith("ttfa") and ("p50" in n or "p95" in n)),
        key=lambda n: ("p50" not in n, n),
    )
    return {
        "p95": _pick(cell, p95),
        "ttfa": _pick(cell, ttfa),
        "memory": _pick(cell, ["device_peak_memory_mib", "peak_rss_mib"]),
    }


def metric_text(m: MetricComparison | None) -> str:
    """``0.412 s (+3% vs Bk)``, or '—'."""
    if m is None or m.candidate is None:
        return "—"
    unit = f" {m.unit}" if m.unit else ""
    text = f"{m.candidate:.3g}{unit}"
    if m.ratio_vs_bk is not None:
        text += f" ({m.ratio_vs_bk - 1:+.0%} vs Bk)"
    return text


MATRIX_HEADER = ("setting", "gain vs Bk", "p95", "TTFA", "memory")


def cell_row(cell: CellResult) -> tuple[str, str, str, str, str]:
    """One row of the cell table (``MATRIX_HEADER``), plain text."""
    label = cell.label or "(default)"
    if cell.primary:
        label += " (primary)"
    if not cell.measured:
        return (label, "not measured", "—", "—", "—")
    cols = column_metrics(cell)
    gain = gain_text(cell)
    if cell.failed:
        gain += "; guard failed: " + ", ".join(dict.fromkeys(g.name for g in cell.failed))
    return (label, gain, metric_text(cols["p95"]), metric_text(cols["ttfa"]),
            metric_text(cols["memory"]))


def matrix_sentence(cells: Iterable[CellResult]) -> str:
    """One sentence in words: where the gain holds and where it does not."""
    cells = list(cells)
    if not cells:
        return ""
    holds, lost, unclear, skipped = [], [], [], []
    for c in cells:
        if not c.measured:
            skipped.append(c.label)
        elif c.failed:
            names = ", ".join(dict.fromkeys(g.name for g in c.failed))
            lost.append(f"{c.label} ({names} failed)")
        elif c.gain_ci is not None and c.gain_ci.low > 0 and c.gain is not None:
            holds.append(f"{c.label} ({c.gain:+.0%})")
        elif c.gain_ci is not None and c.gain_ci.high < 0 and c.gain is not None:
            lost.append(f"{c.label} (a loss: {c.gain:+.0%})")
        else:
            gain = f"{c.gain:+.0%}" if c.gain is not None else "no reading"
            unclear.append(f"{c.label} ({gain}, interval spans 0)")
    parts = []
    if holds:
        parts.append("the gain holds at " + _join(holds))
    if lost:
        parts.append("it does not hold at " + _join(lost))
    if unclear:
        parts.append("it is not clear at " + _join(unclear))
    if skipped:
        parts.append("the other cells (" + _join(skipped) + ") were not measured, since the "
                     "primary cell did not accept the candidate")
    text = "; ".join(parts)
    return text[:1].upper() + text[1:] + "."


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
