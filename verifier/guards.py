"""Guards and metric rows on one measurement session (``Evaluator``).

Each guard of the config is judged against every reference arm (Bk, and B0
when measured): a metric guard by a paired interval of the candidate vs the
reference (log ratios or deltas; pooled percentiles by a cluster bootstrap
over runs), failed requests by their count, a quality guard by
``quality.evaluate`` on the first run's outputs of each arm. The metric rows
(``MetricComparison``) are medians (or pooled percentiles) with intervals of
the ratios. ``judge`` decides from these.
"""

from __future__ import annotations

import math
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from .config import Direction, Guard, QualityGuard, VerifyConfig
from .measure import Session
from .quality import evaluate, snapshot
from .runner import RunRecord
from .stats import Estimate, bootstrap_ci, bound_status, clustered_percentile_ci, log_ratios
from .verdict import Against, GuardResult, Interval, MetricComparison

__all__ = ["PERCENTILE_BOOT", "Evaluator", "derived_seed"]

PERCENTILE_BOOT = 2_000  # resamples for pooled-percentile intervals of guards and reports


def derived_seed(base: int, *parts: str) -> int:
    """A seed for one comparison or session, derived from ``base`` and names."""
    return (base * 1_000_003 + zlib.crc32("/".join(parts).encode())) % (2**32)


class Evaluator:
    """Evaluates guards and metric comparisons on a measurement session."""

    def __init__(self, config: VerifyConfig, bench_name: str, arms: dict[str, Path]):
        self.config = config
        self.v = config.verifier
        self.bench_name = bench_name
        self.arms = arms
        self.refs: list[Against] = [a for a in ("bk", "b0") if a in arms]
        self.snaps: dict[str, dict[str, Any]] = {}
        self.warnings: list[str] = []

    # ---- quality snapshots ----------------------------------------------
    def on_run_for(self, qguards: list[QualityGuard], checkouts: dict[str, Path]):
        def on_run(arm: str, rec: RunRecord, index: int) -> None:
            if index == 0 and qguards and rec.result is not None and arm not in self.snaps:
                bases = [Path(rec.output_dir)] + [
                    Path(b) for b in rec.output_bases if b != rec.output_dir
                ]
                self.snaps[arm] = snapshot(
                    dict(rec.result.outputs), qguards, [*bases, Path(checkouts[arm])]
                )

        return on_run

    # ---- comparisons --------------------------------------------------------
    def compare(
        self, s: Session, metric: str, ref: str, *, log: bool = True, level: float | None = None
    ) -> tuple[Estimate, str] | None:
        """Candidate vs ``ref`` on ``metric``: (estimate in log-ratio or delta units, source)."""
        level = level or self.v.level
        seed = derived_seed(self.v.seed, s.bench.name, metric, ref, "log" if log else "delta")
        src = s.percentile_source(metric)
        if src is not None:
            series, q = src
            c, r = s.pooled("candidate", series), s.pooled(ref, series)
            if c.size and r.size and (not log or (np.all(c > 0) and np.all(r > 0))):
                return clustered_percentile_ci(
                    s.per_run("candidate", series),
                    s.per_run(ref, series),
                    q,
                    seed=seed,
                    n_boot=PERCENTILE_BOOT,
                    level=level,
                    log=log,
                ), s.source(metric)
        c, r = s.values("candidate", metric), s.values(ref, metric)
        if c.size == 0 or np.isnan(c).any() or np.isnan(r).any():
            return None
        if log:
            if np.any(c <= 0) or np.any(r <= 0):
                return None
            d = log_ratios(c, r)
        else:
            d = c - r
        est = bootstrap_ci(d, seed=seed, n_boot=self.v.bootstrap, level=level)
        return est, s.source(metric)

    # ---- guards ------------------------------------------------------------------
    def guards(self, s: Session, *, final: bool = False) -> list[GuardResult]:
        """Every guard on this session; ``final``: the last look (no more pairs
        will come), where a metric guard still unclear is decided by its point."""
        out: list[GuardResult] = []
        failed = sum(r.result.failed for r in s.records["candidate"] if r.result is not None)
        requests = sum(
            r.result.counts.get("requests", 0)
            for r in s.records["candidate"]
            if r.result is not None
        )
        out.append(
            GuardResult(
                name=f"failed requests ({s.bench.name})",
                kind="failed_requests",
                metric="counts.failed",
                bound="== 0",
                value=float(failed),
                status="fail" if failed else "pass",
                detail=(
                    f"{failed} failed request(s) in {len(s.records['candidate'])} candidate runs"
                    + (f" ({requests} requests)" if requests else "")
                ),
            )
        )
        directions = s.directions()
        for g in self.config.guards_for(s.bench.name, directions):
            for ref in self.refs:
                out.append(self.metric_guard(s, g, ref, directions, final=final))
        for q in self.config.quality_for(s.bench.name):
            for ref in self.refs:
                out.append(self.quality_guard(q, ref))
        return out

    def metric_guard(
        self,
        s: Session,
        g: Guard,
        ref: str,
        directions: dict[str, Direction],
        *,
        final: bool = False,
    ) -> GuardResult:
        label = g.label + (
            "" if s.bench.name == self.config.objective.benchmark else f" ({s.bench.name})"
        )
        base = dict(
            name=label + (" [default]" if g.default else ""),
            kind=g.kind,
            metric=g.metric,
            against=ref,
            bound=g.bound_text,
            source=s.source(g.metric),
        )
        if g.metric not in directions:
            return GuardResult(
                **base,
                status="skipped",
                detail=f"'{g.metric}' was not reported by every run; cannot check it",
            )
        level = self.v.guard_level if final else self.v.guard_interim_level
        est_src = self.compare(s, g.metric, ref, log=g.kind == "ratio", level=level)
        if est_src is None:
            return GuardResult(
                **base,
                status="skipped",
                detail=f"'{g.metric}' has non-positive or missing values; cannot form ratios",
            )
        est, _src = est_src
        if g.kind == "ratio":
            point, lo, hi = math.exp(est.point), math.exp(est.low), math.exp(est.high)
        else:
            point, lo, hi = est.point, est.low, est.high
        upper = g.max_ratio if g.max_ratio is not None else g.max_delta
        lower = g.min_ratio if g.min_ratio is not None else g.min_delta
        status = bound_status(lo, hi, upper=upper, lower=lower)
        fmt = (lambda v: f"{v:.3f}x") if g.kind == "ratio" else (lambda v: f"{v:+.4g}")
        detail = f"{fmt(point)} [{fmt(lo)}, {fmt(hi)}], bound {g.bound_text}"
        if status == "unclear" and final:
            status = bound_status(lo, hi, upper=upper, lower=lower, point=point)
            detail += (
                f" (interval straddles the bound at the last look: decided by the point, {status})"
            )
        elif status == "unclear":
            detail += " (interval straddles the bound)"
        return GuardResult(
            **base,
            value=point,
            ci=Interval(low=lo, high=hi, level=est.level),
            status=status,
            detail=detail,
        )

    def quality_guard(self, q: QualityGuard, ref: Against) -> GuardResult:
        """``q`` on the first run's outputs of the candidate and of ``ref``."""
        snaps = self.snaps
        return evaluate(
            q, snaps.get("candidate", {}), snaps.get(ref, {}), ref, self.warnings.append
        )

    # ---- reporting ------------------------------------------------------------------
    def metrics(self, s: Session) -> list[MetricComparison]:
        out = []
        for metric, d in s.directions().items():
            row: dict[str, Any] = dict(name=metric, direction=d, unit=s.bench.unit_of(metric))
            src = s.percentile_source(metric)
            for arm in ("b0", "bk", "candidate"):
                if arm not in s.records:
                    continue
                if src is not None:
                    pooled = s.pooled(arm, src[0])
                    row[arm] = float(np.percentile(pooled, src[1])) if pooled.size else None
                else:
                    row[arm] = float(np.median(s.values(arm, metric)))
            for ref in self.refs:
                est_src = self.compare(s, metric, ref)
                if est_src is None:
                    continue
                est, _source = est_src
                row[f"ratio_vs_{ref}"] = math.exp(est.point)
                row[f"ratio_vs_{ref}_ci"] = Interval(
                    low=math.exp(est.low), high=math.exp(est.high), level=est.level
                )
            row["source"] = s.source(metric)
            out.append(MetricComparison(**row))
        return out

