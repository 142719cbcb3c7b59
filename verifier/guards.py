"""Guards and metric rows on one measurement session (``Evaluator``).

Each guard of the config is judged against every reference arm (Bk, and B0
when measured): a metric guard by a paired interval of the candidate vs the
reference (log ratios or deltas; pooled percentiles by a cluster bootstrap
over runs), failed requests by their count, a quality guard by
``quality.evaluate`` on the outputs of EVERY run: each candidate run against
the reference arm's run of the same index (its first run when it has fewer),
the worst run deciding. Outputs are snapshotted as each run ends, for every
arm, so also:

* repeatability (``flags``): when the reference arm's outputs are bit-exact
  across its runs (a deterministic server) and the candidate's differ between
  its own runs, the candidate is flagged (``judge`` turns an accept into
  ``review`` with that reason): a server honest in some runs only;
* visible changes (``output_changes``): when Bk is bit-exact across its runs,
  any change of the candidate's outputs vs Bk is a tradeoff line ("audio
  changed: 44.7 dB SNR vs Bk"), even when every guard passes;
* default waveform bounds: a waveform guard without ``min_snr_db`` is bound
  by Bk's own repeatability (its worst run-vs-run SNR less
  ``REPEATABILITY_MARGIN_DB``; ``EXACT_SNR_DB`` when Bk is bit-exact).

The metric rows (``MetricComparison``) are medians (or pooled percentiles)
with intervals of the ratios. ``judge`` decides from these.
"""

from __future__ import annotations

import math
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from .config import Direction, Guard, QualityGuard, VerifyConfig
from .measure import Session
from .outfiles import OutFileError
from .quality import evaluate, file_key, file_snr, snapshot, snapshot_digest
from .runner import RunRecord
from .stats import Estimate, bootstrap_ci, bound_status, clustered_percentile_ci, log_ratios
from .verdict import Against, GuardResult, Interval, MetricComparison

__all__ = [
    "EXACT_SNR_DB",
    "PERCENTILE_BOOT",
    "REPEATABILITY_MARGIN_DB",
    "Evaluator",
    "derived_seed",
]

PERCENTILE_BOOT = 2_000  # resamples for pooled-percentile intervals of guards and reports
#: Default waveform bound when Bk's audio is bit-exact across its runs: an
#: honest change (float rounding, a fused op) flips a few 16-bit LSBs, ~95-106
#: dB; 9-bit samples are ~45 dB.
EXACT_SNR_DB = 80.0
#: Default waveform bound otherwise: Bk's worst run-vs-run SNR less this.
REPEATABILITY_MARGIN_DB = 6.0


def derived_seed(base: int, *parts: str) -> int:
    """A seed for one comparison or session, derived from ``base`` and names."""
    return (base * 1_000_003 + zlib.crc32("/".join(parts).encode())) % (2**32)


class Evaluator:
    """Evaluates guards and metric comparisons on a measurement session."""

    def __init__(
        self, config: VerifyConfig, bench_name: str, arms: dict[str, Path], seed: int | None = None
    ):
        """``seed``: the verification's (default: ``[verifier] seed``, else 0)."""
        self.config = config
        self.v = config.verifier
        self.seed = seed if seed is not None else (self.v.seed or 0)
        self.bench_name = bench_name
        self.arms = arms
        both: tuple[Against, ...] = ("bk", "b0")
        self.refs: list[Against] = [a for a in both if a in arms]
        self.snaps: dict[str, list[dict[str, Any]]] = {}
        """arm -> one quality snapshot per measured run, in run order."""
        self.digests: dict[str, list[dict[str, str]]] = {}
        """arm -> per run: snapshot key -> digest of its content."""
        self.warnings: list[str] = []
        self._judged: dict[tuple, GuardResult] = {}
        self._self_snrs: dict[tuple[str, str], tuple[int, float]] = {}
        """(file key, arm) -> (runs compared with the first, worst SNR so far)."""

    # ---- quality snapshots ----------------------------------------------
    def on_run_for(self, qguards: list[QualityGuard], checkouts: dict[str, Path]):
        """The session's ``on_run``: a snapshot of every run of every arm (read
        at once, before a later run can overwrite anything)."""

        def on_run(arm: str, rec: RunRecord, index: int) -> None:
            if not qguards or rec.result is None:
                return
            bases = [Path(rec.output_dir)] + [
                Path(b) for b in rec.output_bases if b != rec.output_dir
            ]
            where = Path(rec.checkout) if rec.checkout else Path(checkouts[arm])
            snap = snapshot(dict(rec.result.outputs), qguards, [*bases, where])
            self.snaps.setdefault(arm, []).append(snap)
            self.digests.setdefault(arm, []).append(snapshot_digest(snap))

        return on_run

    # ---- comparisons --------------------------------------------------------
    def compare(
        self, s: Session, metric: str, ref: str, *, log: bool = True, level: float | None = None
    ) -> tuple[Estimate, str] | None:
        """Candidate vs ``ref`` on ``metric``: (estimate in log-ratio or delta units, source)."""
        level = level or self.v.level
        seed = derived_seed(self.seed, s.bench.name, metric, ref, "log" if log else "delta")
        src = s.percentile_source(metric)
        if src is not None:
            series, q = src
            c, r = s.pooled("candidate", series), s.pooled(ref, series)
            if c.size and r.size and (not log or (np.all(c > 0) and np.all(r > 0))):
                return clustered_percentile_ci(
                    _clusters(s, s.per_run("candidate", series)),
                    _clusters(s, s.per_run(ref, series)),
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
        d = s.by_session(d)  # runs_per_start K > 1: one value per session pair
        est = bootstrap_ci(d, seed=seed, n_boot=self.v.bootstrap, level=level)
        return est, s.source(metric)

    # ---- guards ------------------------------------------------------------------
    def guards(self, s: Session, *, final: bool = False) -> list[GuardResult]:
        """Every guard on this session; ``final``: the last look (no more pairs
        will come): a metric guard still unclear there stays unclear (the judge
        makes an accept ``review``), its detail saying what would decide it."""
        out: list[GuardResult] = []
        runs = s.all_records("candidate")  # confirmation pairs too: every run counts
        failed = sum(r.result.failed for r in runs if r.result is not None)
        requests = sum(
            r.result.counts.get("requests", 0)
            for r in runs
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
                    f"{failed} failed request(s) in {len(runs)} candidate runs"
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
        base: dict[str, Any] = dict(
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
            detail += (
                f" (the {est.level:.0%} interval still straddles the bound after {s.pairs} "
                "pairs, the last look: undecided, never decided by its point; more pairs "
                "or a steadier measurement would decide it)"
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
        """``q`` on every candidate run: each against ``ref``'s run of the same
        index (its first when it has fewer); the first failing run decides,
        else the worst one."""
        cands, refs = self.snaps.get("candidate", []), self.snaps.get(ref, [])
        q, note = self._bound(q)
        if not cands or not refs:
            return evaluate(q, cands[0] if cands else {}, refs[0] if refs else {}, ref,
                            self.warnings.append)  # fmt: skip
        results = [self._judge_run(q, ref, i) for i in range(len(cands))]
        failed = [i for i, r in enumerate(results) if r.status == "fail"]
        i = failed[0] if failed else max(range(len(results)), key=lambda k: _badness(results[k]))
        worst = results[i]
        where = f"candidate run {i + 1} of {len(results)}"
        if failed:
            where += f" ({len(failed)} run(s) failed: {', '.join(str(k + 1) for k in failed[:8])})"
        detail = f"{where}: {worst.detail}" if len(results) > 1 else worst.detail
        return worst.model_copy(update={"detail": detail + note})

    def _judge_run(self, q: QualityGuard, ref: Against, i: int) -> GuardResult:
        """``q`` on candidate run ``i`` vs ``ref``'s run ``i`` (its first when it
        has fewer), once: a run's result never changes at later looks."""
        refs = self.snaps[ref]
        j = i if i < len(refs) else 0
        key = (q, ref, i, j)
        if key not in self._judged:
            cand = self.snaps["candidate"][i]
            self._judged[key] = evaluate(q, cand, refs[j], ref, self.warnings.append)
        return self._judged[key]

    def _bound(self, q: QualityGuard) -> tuple[QualityGuard, str]:
        """A waveform guard without ``min_snr_db`` gets Bk's repeatability as its
        bound (with a note for the detail); every other guard as it is."""
        if q.kind != "waveform" or q.min_snr_db is not None:
            return q, ""
        own = self._self_snr(q, "bk")
        if own is None or math.isinf(own):
            bound, why = EXACT_SNR_DB, "Bk's audio is bit-exact across its runs"
        else:  # never below 0 dB (as much noise as signal), whatever Bk does
            bound = max(own - REPEATABILITY_MARGIN_DB, 0.0)
            why = f"Bk's own runs differ by {own:.1f} dB SNR, less {REPEATABILITY_MARGIN_DB:g} dB"
        return q.model_copy(update={"min_snr_db": bound}), f" (default bound {bound:.1f} dB: {why})"

    def _self_snr(self, q: QualityGuard, arm: str) -> float | None:
        """The worst SNR of ``arm``'s later runs vs its first (inf: identical;
        None: fewer than two readable runs). Each run is compared once (the
        files are streamed from disk: a look re-reads only the runs new since
        the last one)."""
        files: list[dict[str, Any]] = [
            f for s in self.snaps.get(arm, []) if isinstance(f := s.get(file_key(q)), dict)
        ]
        if len(files) < 2:
            return None
        key = (file_key(q), arm)
        done, worst = self._self_snrs.get(key, (1, math.inf))
        for other in files[done:]:
            for name, first in files[0].items():
                b = other.get(name)
                worst = min(worst, -math.inf if b is None else _snr(b, first))
        self._self_snrs[key] = (len(files), worst)
        return worst

    # ---- repeatability and visible changes ----------------------------------------
    def _exact(self, arm: str) -> bool:
        """``arm``'s outputs are bit-exact across its runs (two or more); with
        ``runs_per_start`` K > 1, across its runs of the same index in their
        sessions (each index has its own request texts)."""
        d = self.digests.get(arm, [])
        k = self._per_start
        return len(d) >= 2 * k and all(x == d[i % k] for i, x in enumerate(d))

    @property
    def _per_start(self) -> int:
        b = self.config.benchmarks.get(self.bench_name)
        return b.per_start if b is not None else 1

    def flags(self) -> list[str]:
        """Reasons to send an accept to ``review``: the reference arm's outputs
        are bit-exact across its runs, the candidate's differ between its own."""
        d = self.digests.get("candidate", [])
        per = self._per_start
        if not self._exact("bk") or len(d) < 2 * per or self._exact("candidate"):
            return []
        first_diff = next(i for i, x in enumerate(d) if x != d[i % per])
        one = d[first_diff % per]
        keys = sorted(
            k for k in one if any(x.get(k) != d[i % per].get(k) for i, x in enumerate(d))
        )
        return [
            f"the candidate's outputs differ between its own runs (run {first_diff % per + 1} "
            f"vs run {first_diff + 1}, "
            f"in {', '.join(_key_text(k) for k in keys[:4])}) while Bk's are bit-exact across "
            f"all {len(self.digests['bk'])} of its runs: a deterministic server that does not "
            "repeat itself (honest in some runs only?); a human must look"
        ]

    def output_changes(self, guards: list[GuardResult]) -> list[str]:
        """Tradeoff lines: when Bk's outputs are bit-exact across its runs, each
        quality output of the candidate that differs from Bk's, with the
        guard's own measure of the change (``guards``: this session's results)."""
        cand, bk = self.digests.get("candidate", []), self.digests.get("bk", [])
        if not self._exact("bk") or not cand:
            return []
        out = []
        for q in self.config.quality_for(self.bench_name):
            key = file_key(q) if q.files else q.output
            per = self._per_start
            if all(c.get(key) == bk[i % per].get(key) for i, c in enumerate(cand)):
                continue
            metric = f"files {q.files}" if q.files else f"outputs.{q.output}"
            g = next(
                (
                    r
                    for r in guards
                    if r.kind == q.kind and r.metric == metric and r.against == "bk"
                ),
                None,
            )
            out.append(_change_line(q, g))
        return out

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


def _snr(cand: Any, ref: Any) -> float:
    """``file_snr``, a file that changed since its run being -inf (no bound from it)."""
    try:
        return file_snr(cand, ref)
    except OutFileError:
        return -math.inf


def _badness(g: GuardResult) -> float:
    """How far a quality result is from perfect (larger: worse). A waveform's
    value is its SNR (None: identical files); others grow with the change."""
    if g.value is None:
        return -math.inf if g.kind == "waveform" else 0.0
    if g.kind == "waveform":
        return -g.value
    return abs(g.value) if math.isfinite(g.value) else math.inf


def _key_text(key: str) -> str:
    return key.split(":", 2)[2] if key.startswith("files:") else f"outputs.{key}"


def _change_line(q: QualityGuard, g: GuardResult | None) -> str:
    """The tradeoff line, e.g. "Audio changed: 44.7 dB SNR vs Bk (...)"."""
    if q.kind == "waveform":
        measure = (
            f"{g.value:.1f} dB SNR vs Bk" if g is not None and g.value is not None else "vs Bk"
        )
        return f"Audio changed: {measure} (files {q.files}, worst candidate run; Bk's audio is bit-exact across its runs)."
    if q.kind == "spectral":
        measure = (
            f"{g.value:.2f} dB log-mel distance vs Bk" if g is not None and g.value is not None
            else "vs Bk"
        )
        return f"Audio changed: {measure} (files {q.files}, worst candidate run and file; Bk's audio is bit-exact across its runs)."
    what = f"files {q.files}" if q.files else f"outputs.{q.output}"
    detail = f": {g.detail}" if g is not None and g.detail else ""
    return f"Outputs changed ({what}) vs Bk, whose outputs are bit-exact across its runs{detail}."


def _clusters(s: Session, runs: list[np.ndarray]) -> list[np.ndarray]:
    """A cluster bootstrap's clusters: a run each, or with ``runs_per_start``
    K > 1 a session each (its K runs' samples together)."""
    if s.k <= 1:
        return runs
    return [np.concatenate(runs[i : i + s.k]) for i in range(0, len(runs) // s.k * s.k, s.k)]
