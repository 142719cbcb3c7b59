"""The judge: measure a candidate against its baseline(s) and decide.

Flow of ``verify`` (each step a function below):

1. ``_preflight``: check the config, the hidden inputs and the fingerprint (a
   calibration or an expected fingerprint from elsewhere is refused:
   ``error``) and the checkouts, before any run.
2. ``_sequential``: ``setup`` once per checkout; ``warmup`` runs per arm, discarded.
3. ``_looks``: randomized ABBA blocks of Bk and the candidate (and B0 when given and a
   different checkout), ``initial_pairs`` first; at each look the objective
   is judged (``stats.judge_objective``) and every guard evaluated:
   - a guard that clearly fails, or a failed request: ``reject`` (stop);
   - objective's repeated interval wholly below 0 ("slower by X%") or below
     ``min_gain`` ("short of min_gain"): ``reject`` (stop);
   - objective accepted and every guard clear: stop; accepted on fewer
     candidate runs than ``[verifier] accept_wild_rate`` needs (or every run
     short by a little, or a guard unclear at the cap): confirmation pairs
     first (``Session.confirm_pairs``), then judged again;
   - otherwise add ``step`` pairs, up to ``max_pairs``.
   Guards pass or fail early only on a wide interval (``guard_interim_level``);
   at the last look on ``guard_level``; one whose interval still straddles its
   bound there stays unclear (``stats.bound_status``: never decided by its point).
4. ``_other_benchmark_guards``: guards naming other benchmarks are measured (``initial_pairs`` pairs) once
   the objective is accepted, and judged as at a last look.
5. ``_conclude`` / ``decide``: reject > review (the runs kept accept while the
   candidate is slower over every run, ``stats.capped_decision``) >
   inconclusive (objective unclear at the cap) > review (a guard still unclear
   at the cap when the objective is accepted, the guard named with what would
   decide it; a gain above 2x; above 10x the candidate is quarantined) > accept.
6. ``_matrix``: the other cells of a deployment matrix; a guard failed in a
   cell rejects, one unclear there makes an accept ``review``.

Anything that goes wrong (a crash, a timeout, a bad result, an exception in
here) is ``error`` with a ``RunError``: never a regression, never a zero.
"""

from __future__ import annotations

import math
import re
import secrets
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from .calibrate import Calibration
from .cells import (
    cell_bench,
    cell_isolation,
    cells_decision,
    cells_of,
    cpus_problem,
    measure_cell,
    primary_result,
    unmeasured,
)
from .config import BenchmarkConfig, Direction, VerifierSettings, VerifyConfig
from .fingerprint import FingerprintMismatch, collect, ensure_comparable
from .guards import Evaluator, derived_seed
from .isolation import Isolation, resolve_cpus
from .matrix import Cell
from .measure import ARM_STAGE, Progress, ProgressEvent, Session, hidden_env
from .noise import explain_runs
from .runner import RunRecord
from .stats import (
    CONFIRM_MIN,
    Design,
    ObjectiveLook,
    capped_decision,
    detectable_gain,
    judge_objective,
    log_ratios,
    pairs_for,
    value_warnings,
)
from .verdict import (
    Decision,
    Fingerprint,
    GuardResult,
    Interval,
    MetricComparison,
    ObjectiveResult,
    RunError,
    Verdict,
    arm_label,
)

__all__ = ["QUARANTINE_GAIN", "SUSPICIOUS_GAIN", "cross_check", "decide", "tradeoffs", "verify"]

SUSPICIOUS_GAIN = 1.0  # gain above 2x (gain > 100%): review
QUARANTINE_GAIN = 9.0  # above 10x: quarantined review


def verify(
    baseline: Path,
    candidate: Path,
    config: VerifyConfig,
    *,
    benchmark: str | None = None,
    b0: Path | None = None,
    shas: dict | None = None,
    calibration: Calibration | None = None,
    progress: Progress | None = None,
    fingerprint: Fingerprint | None = None,
    isolation: Isolation | None = None,
) -> Verdict:
    """Judge ``candidate`` against ``baseline`` (Bk) and optionally ``b0``.

    ``fingerprint``: the environment the caller expects (e.g. where B0 was
    measured); a different one here is an ``error``. ``isolation``: where
    every run happens (default: ``ProcessIsolation``; the harness uses
    ``ContainerIsolation``). Never raises.
    """
    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    shas = {str(k): str(v) for k, v in (shas or {}).items()}
    try:
        verdict = _verify(
            Path(baseline),
            Path(candidate),
            config,
            benchmark,
            Path(b0) if b0 else None,
            shas,
            calibration,
            progress,
            fingerprint,
            isolation,
        )
    except Exception as e:  # noqa: BLE001 - the verifier never turns an error into a verdict
        verdict = Verdict(
            decision=Decision.ERROR,
            reason=f"the verifier failed: {e!r}",
            benchmark=benchmark or "",
            shas=shas,
            error=RunError(
                stage="verifier", message=repr(e), stderr_tail=traceback.format_exc()[-4000:]
            ),
        )
    return verdict.model_copy(
        update={"started_at": started, "duration_s": time.perf_counter() - t0}
    )


def _error(err: RunError, **base: Any) -> Verdict:
    what = {"baseline": "the baseline", "candidate": "the candidate", "b0": "B0"}.get(
        err.stage, err.stage
    )
    return Verdict(decision=Decision.ERROR, reason=f"{what}: {err.message}", error=err, **base)


def _category(metric: str) -> str | None:
    if re.search(r"(^|_)p9\d(_|$)|tail", metric):
        return "Tail latency"
    if re.search(r"mem|rss|_mib$|_mb$", metric):
        return "Peak memory"
    if "startup" in metric:
        return "Startup time"
    return None


def tradeoffs(metrics: list[MetricComparison]) -> list[str]:
    """Human sentences about tail latency, memory and startup, vs Bk (and B0)."""
    out = []
    for m in metrics:
        cat = _category(m.name)
        if cat is None or m.ratio_vs_bk is None or m.bk is None or m.candidate is None:
            continue
        change = m.ratio_vs_bk - 1
        better = (change < 0) == (m.direction == "lower")
        ci = m.ratio_vs_bk_ci
        clear = ci is not None and (ci.low > 1 or ci.high < 1)
        u = f" {m.unit}" if m.unit else ""
        word = ("better" if better else "worse") if clear else "no clear change"
        text = (
            f"{cat} ({m.name}): {m.bk:.4g}{u} -> {m.candidate:.4g}{u}, {change:+.1%} vs Bk ({word})"
        )
        if m.ratio_vs_b0 is not None:
            text += f", {m.ratio_vs_b0 - 1:+.1%} vs B0"
        out.append(text + ".")
    return out


def _verify(
    baseline: Path,
    candidate: Path,
    config: VerifyConfig,
    benchmark: str | None,
    b0: Path | None,
    shas: dict[str, str],
    calibration: Calibration | None,
    progress: Progress | None,
    expected_fp: Fingerprint | None,
    isolation: Isolation | None = None,
) -> Verdict:
    """``verify`` without the clock and the exception net: preflight, the
    sequential loop, the other benchmarks' guards, the decision."""
    plan = _preflight(baseline, candidate, config, benchmark, b0, shas, calibration, expected_fp)
    if isinstance(plan, Verdict):
        return plan
    found = _sequential(plan, progress, isolation)
    if isinstance(found, Verdict):
        return found
    objective = _objective(plan, found)
    if _other_benchmarks_due(plan, found):
        failed = _other_benchmark_guards(plan, found, objective, progress, isolation)
        if failed is not None:
            return failed
    verdict = _matrix(plan, found, _conclude(plan, found, objective, progress), progress, isolation)
    if verdict.decision != Decision.ERROR:
        _emit_done(progress, verdict.runs, verdict.pairs, plan.bench_name, verdict.decision)
    return verdict


@dataclass(frozen=True)
class _Plan:
    """What preflight settled before any measurement."""

    config: VerifyConfig
    bench_name: str
    bench: BenchmarkConfig
    base: dict[str, Any]
    """Fields of every verdict from here on: benchmark, shas, settings, fingerprint."""
    env: dict[str, str]  # hidden inputs added to the runs' environment
    drop: tuple[str, ...]  # environment names the runs must not see
    baseline: Path  # Bk's checkout
    measuring: Path  # B0's checkout (Bk's without B0): where a client and an evaluator run from
    arms: dict[str, Path]  # bk, candidate and (when a different checkout) b0
    seed: int  # the run order's and the bootstrap's: a per-verification secret unless set
    metric: str  # the objective's metric on this benchmark
    direction: Direction
    margin: float  # bias margin of the objective's test
    prior: dict[str, Any]  # the calibration's spread as the test's prior, if it applies
    calibration: Calibration | None
    warnings: list[str]  # the verdict's warnings so far; later steps append
    cell: Cell | None = None  # the matrix's primary cell (None: no matrix)


def _preflight(
    baseline: Path,
    candidate: Path,
    config: VerifyConfig,
    benchmark: str | None,
    b0: Path | None,
    shas: dict[str, str],
    calibration: Calibration | None,
    expected_fp: Fingerprint | None,
) -> _Plan | Verdict:
    """Check the benchmark, the fingerprints, the hidden inputs and the
    checkouts before any run, and settle the objective's test; an ``error``
    verdict for the first that fails."""
    bench_name = benchmark or config.objective.benchmark
    seed = config.verifier.seed
    seed = secrets.randbits(63) if seed is None else seed
    base: dict[str, Any] = dict(benchmark=bench_name, shas=shas, seed=seed)
    if bench_name not in config.benchmarks:
        declared = ", ".join(sorted(config.benchmarks))
        message = f"unknown benchmark '{bench_name}'; declared: {declared}"
        return _error(RunError(stage="config", message=message), **base)
    bench = config.benchmarks[bench_name]
    cell = cells_of(bench)[0] if bench.matrix is not None else None
    bench = cell_bench(bench, cell)  # the primary cell decides the objective
    base["settings"] = dict(bench.settings)
    if cpus_problem(bench):
        return _error(RunError(stage="config", message=cpus_problem(bench)), **base)
    fp = collect()
    base["fingerprint"] = fp
    try:
        if calibration is not None:
            ensure_comparable(calibration.fingerprint, fp, "this verification with its calibration")
        ensure_comparable(expected_fp, fp, "this verification with the expected environment")
    except FingerprintMismatch as e:
        return _error(RunError(stage="fingerprint", message=str(e)), **base)
    try:
        env, drop = hidden_env(config)
    except ValueError as e:
        return _error(RunError(stage="config", message=str(e)), **base)
    missing = _missing_checkout(baseline, candidate, b0)
    if missing is not None:
        return _error(missing, **base)
    metric, direction = _objective_metric(config, bench_name, bench)
    margin, prior, warnings = _test_settings(config, calibration, metric)
    if bench_name == config.objective.benchmark and (note := config.self_report_note()):
        warnings.insert(0, note)  # issue 29: a self-reported objective is said so in every verdict
    arms: dict[str, Path] = {"bk": baseline, "candidate": candidate}
    if b0 is not None and b0.resolve() != baseline.resolve():
        arms["b0"] = b0
    elif b0 is not None:
        warnings.append("B0 is the same checkout as Bk: the guards vs Bk cover B0")
    return _Plan(
        config=config,
        bench_name=bench_name,
        bench=bench,
        base=base,
        env=env,
        drop=drop,
        baseline=baseline,
        measuring=b0 if b0 is not None else baseline,
        arms=arms,
        seed=seed,
        metric=metric,
        direction=direction,
        margin=margin,
        prior=prior,
        calibration=calibration,
        warnings=warnings,
        cell=cell,
    )


def _missing_checkout(baseline: Path, candidate: Path, b0: Path | None) -> RunError | None:
    """A RunError for the first checkout that is not a directory."""
    for name, path in (("baseline", baseline), ("candidate", candidate), ("b0", b0)):
        if path is not None and not path.is_dir():
            return RunError(stage=name, message=f"checkout {path} is not a directory")
    return None


def _objective_metric(
    config: VerifyConfig, bench_name: str, bench: BenchmarkConfig
) -> tuple[str, Direction]:
    """The objective's metric and direction on this benchmark: on another
    benchmark than the objective's, its metric when that one reports it, else
    ``wall_s``."""
    if bench_name == config.objective.benchmark:
        return config.objective.metric, bench.known_metrics()[config.objective.metric]
    known = bench.known_metrics()
    metric = config.objective.metric if config.objective.metric in known else "wall_s"
    return metric, known.get(metric, "lower")


def _test_settings(
    config: VerifyConfig, calibration: Calibration | None, metric: str
) -> tuple[float, dict[str, Any], list[str]]:
    """(bias margin, prior, warnings) of the objective's test. The margin covers
    only bias ABBA cannot cancel; the calibration's spread is a prior, used when
    the calibration succeeded on this metric (a failed one is a warning)."""
    v = config.verifier
    warnings: list[str] = []
    if calibration is None:
        return v.min_noise_margin, {}, warnings
    if calibration.error is not None:
        warnings.append(
            f"calibration failed ({calibration.error.message}); the test uses this "
            "verification's own spread only"
        )
        return v.min_noise_margin, {}, warnings
    margin = calibration.bias_margin(v.min_noise_margin)
    prior: dict[str, Any] = (
        dict(
            prior_sd=calibration.per_pair_sd,
            prior_df=calibration.prior_df,
            prior_level_sd=calibration.level_sd or None,
            prior_check_sd=calibration.check_sd or None,
        )
        if calibration.metric in ("", metric)
        else {}
    )
    return margin, prior, warnings


@dataclass
class _Found:
    """What the measurement found; the other benchmarks' guards add to it."""

    look: ObjectiveLook  # the last look at the objective
    guards: list[GuardResult]
    metrics: list[MetricComparison]
    runs: int
    pairs: int
    doubt: str | None  # the cross-check's reason for review, if any
    gain_vs_b0: float | None
    evaluator: Evaluator  # its warnings come after the other benchmarks'
    flags: list[str]  # reasons to review an accept: outputs that do not repeat
    changes: list[str]  # tradeoff lines: outputs changed vs a bit-exact Bk


def _cpuset(plan: _Plan, cpus: str | None) -> str | None:
    """The verification's CPU set: ``[verifier] cpus`` resolved once (``auto``:
    the least busy CPUs now), kept in the verdict's fingerprint
    (``extra["cpuset"]``) and reused by every later session of it."""
    fp = plan.base.get("fingerprint")
    if isinstance(fp, Fingerprint) and fp.extra.get("cpuset"):
        return fp.extra["cpuset"]
    resolved = resolve_cpus(cpus)
    if resolved and isinstance(fp, Fingerprint):
        plan.base["fingerprint"] = fp.model_copy(update={"extra": {**fp.extra, "cpuset": resolved}})
    return resolved


def _session(
    plan: _Plan,
    bench: BenchmarkConfig,
    *,
    seed: int,
    on_run: Callable[[str, RunRecord, int], None],
    progress: Progress | None,
    isolation: Isolation | None,
    run_offset: int = 0,
) -> Session:
    v = plan.config.verifier
    cpus = _cpuset(plan, v.cpus)
    return Session(
        bench,
        plan.arms,
        seed=seed,
        extra_env=plan.env,
        drop_env=plan.drop,
        progress=progress,
        on_run=on_run,
        run_offset=run_offset,
        isolation=cell_isolation(isolation, plan.cell) if bench is plan.bench else isolation,
        cpus=(plan.cell.cpus if plan.cell and bench is plan.bench else None) or cpus,
        threads=v.threads,
        base_checkout=plan.measuring,
    )


def _sequential(
    plan: _Plan, progress: Progress | None, isolation: Isolation | None
) -> _Found | Verdict:
    """Setup, warm-ups, then ABBA pairs look by look until the objective and
    every guard are clear, one fails, or the cap; an ``error`` verdict when a
    run fails."""
    config, v = plan.config, plan.config.verifier
    judge = Evaluator(config, plan.bench_name, plan.arms, seed=plan.seed)
    on_run = judge.on_run_for(config.quality_for(plan.bench_name), plan.arms)
    with _session(
        plan, plan.bench, seed=plan.seed, on_run=on_run, progress=progress, isolation=isolation
    ) as s:
        err = s.setup() or s.warmup(v.warmup)
        if err is not None:
            return _error(err, runs=s.runs, **plan.base)
        looked = _looks(plan, s, judge)
        if isinstance(looked, Verdict):
            return looked
        if s.k > 1:
            plan.warnings.append(
                f"runs_per_start = {s.k}: each server start of benchmark '{plan.bench.name}' "
                f"served {s.k} measured client runs (a session, each run with its own "
                f"RSI_SEED and judged on its own); the sequential test's unit is the session "
                f"pair ({s.pairs} session pairs, {len(s.all_records('candidate'))} candidate "
                "runs); startup_s is one sample per session"
            )
        look, guard_results = looked
        with s.every_run_scope():  # every measured run, confirmation pairs too
            doubt = _self_report_doubt(plan, s, look)
            plan.warnings.extend(_run_warnings(s, plan.metric))
            return _Found(
                look=look,
                guards=guard_results,
                metrics=judge.metrics(s),
                runs=s.runs,
                pairs=s.pairs,
                doubt=doubt,
                gain_vs_b0=_gain_vs_b0(s, plan.metric, plan.direction),
                evaluator=judge,
                flags=judge.flags(),
                changes=judge.output_changes(guard_results),
            )


def _looks(
    plan: _Plan, s: Session, judge: Evaluator
) -> tuple[ObjectiveLook, list[GuardResult]] | Verdict:
    """Add pairs up to each look of the design and judge the objective and the
    guards there; stop at a failed guard, a rejected objective, or an accepted
    one with every guard clear. The last look and its guards, or an ``error``
    verdict (a failed run, an objective value missing or not positive)."""
    v = plan.config.verifier
    look = None
    guard_results: list[GuardResult] = []
    design = Design.from_schedule(
        v.initial_pairs, v.step, v.max_pairs, alpha=v.alpha, gamma=v.spending_gamma
    )
    for target in design.looks:
        err = s.add_pairs(target - s.pairs) or _objective_values_error(s, plan.metric)
        if err is not None:
            return _error(err, runs=s.runs, pairs=s.pairs, **plan.base)
        final = target == design.max_pairs
        while True:
            look = _judge_look(plan, s, design)
            more = look.more if look.finding == "runs" else 0
            more = -(-more // s.k)  # runs -> (session) pairs
            if not more:
                room = _guard_room(plan, s, look, final) // s.k  # within accept_max_runs
                with s.every_run_scope():  # the confirmation pairs count in the guards too
                    # while room is left at the cap, the interim level: a guard
                    # passes or fails only when clear, else it is measured further
                    guard_results = judge.guards(s, final=final and not room)
                fail = any(g.status == "fail" for g in guard_results)
                if room and not fail and any(g.status == "unclear" for g in guard_results):
                    more = room
            if not more:
                break
            # the pairs accept on fewer of the candidate's runs than an accept
            # needs, every run falls short by a little, or a guard is unclear
            # at the cap: confirmation pairs (every arm, so guards stay paired)
            err = s.confirm_pairs(more) or _objective_values_error(s, plan.metric)
            if err is not None:
                return _error(err, runs=s.runs, pairs=s.pairs, **plan.base)
        if any(g.status == "fail" for g in guard_results) or look.decision == "reject":
            break
        if look.decision == "accept" and not any(g.status == "unclear" for g in guard_results):
            break
        if look.finding == "wild":  # slow runs no count within accept_max_runs rules out
            break
    assert look is not None
    return look, guard_results


def _guard_room(plan: _Plan, s: Session, look: ObjectiveLook, final: bool) -> int:
    """Confirmation pairs an accept's guards may still take at the cap before
    one left unclear (its interval straddling the bound) makes it ``review``:
    half as many again as measured (at least ``CONFIRM_MIN``), up to
    ``[verifier] accept_max_runs`` candidate runs; 0 before the cap, without
    an accept, with the rule off, or with the budget spent. While room is
    left the guards are judged at their interim level (pass or fail only
    when clear), so more looks do not make a regression at the bound pass
    more often (issue 29: undecided is not decided, but measured further
    where the budget allows)."""
    v = plan.config.verifier
    if not final or look.decision != "accept" or v.accept_wild_rate <= 0:
        return 0
    runs = len(s.all_records("candidate"))
    return max(0, min(v.accept_max_runs, runs + max(CONFIRM_MIN, runs // 2)) - runs)


def _judge_look(plan: _Plan, s: Session, design: Design) -> ObjectiveLook:
    """The objective at this look (``stats.judge_objective``): the design's
    pairs, with the confirmation pairs counted in the gain over every run and
    in the count of slow runs."""
    v = plan.config.verifier
    sign = 1 if plan.direction == "higher" else -1
    c, r = s.design_values("candidate", plan.metric), s.design_values("bk", plan.metric)
    ce, re_ = s.confirm_values("candidate", plan.metric), s.confirm_values("bk", plan.metric)
    k = min(ce.size, re_.size) // s.k * s.k  # whole confirmation pairs only
    ce, re_ = ce[:k], re_[:k]
    gains, extra = log_ratios(c, r) * sign, log_ratios(ce, re_) * sign
    # in cost orientation (a run's time per unit of work), which the
    # every-run gain needs; the screen and the spreads use |levels|
    levels, extra_levels = (np.log(c) + np.log(r)) * -sign, (np.log(ce) + np.log(re_)) * -sign
    runs: dict = {}
    if s.k > 1:  # the unit is the session pair: the mean of its K index-matched runs
        runs = dict(run_gains=np.concatenate([gains, extra]),
                    run_levels=np.concatenate([levels, extra_levels]))  # fmt: skip
        gains, extra = s.by_session(gains), s.by_session(extra)
        levels, extra_levels = s.by_session(levels), s.by_session(extra_levels)
    return judge_objective(
        gains,
        min_gain=plan.config.objective.min_gain,
        design=design,
        margin=plan.margin,
        levels=levels,
        extra_gains=extra,
        extra_levels=extra_levels,
        **runs,
        wild_rate=v.accept_wild_rate,
        confidence=v.accept_confidence,
        max_runs=v.accept_max_runs,
        **plan.prior,
    )


def _self_report_doubt(plan: _Plan, s: Session, look: ObjectiveLook) -> str | None:
    """Why a self-reported objective (source ``benchmark``: the candidate's own
    process reports it) about to be accepted must go to ``review`` instead, or
    None: it is never accepted on its own word, only when the verifier's own
    clock corroborates it (``cross_check``); with ``cross_check = false``
    nothing does."""
    v, min_gain = plan.config.verifier, plan.config.objective.min_gain
    if plan.bench.metric_source(plan.metric) != "benchmark":
        return None
    if not v.cross_check:
        if look.gain is None or look.gain <= max(min_gain, 0.0):
            return None
        return (
            f"the benchmark reports {plan.metric} {look.gain:+.1%} better, but only the "
            "candidate's own process reports it and [verifier] cross_check = false: nothing "
            "the verifier measured corroborates it, and a self-reported gain is never accepted "
            "on its own word; a human must look (or measure it outside the candidate: "
            "serve + client or an evaluator, and require_external = true)"
        )
    return cross_check(s, plan.metric, plan.direction, look.gain, min_gain, v.level)


def _objective_values_error(s: Session, metric: str) -> RunError | None:
    """A RunError when the objective's metric is missing or not positive in a
    run of the candidate or of Bk (the candidate's checked first)."""
    for arm in ("candidate", "bk"):
        vals = np.concatenate([s.design_values(arm, metric), s.confirm_values(arm, metric)])
        if np.isnan(vals).any() or np.any(vals <= 0):
            return RunError(
                stage=ARM_STAGE[arm],
                message=(
                    f"objective metric '{metric}' is missing or not positive in some runs: "
                    f"{[round(x, 6) for x in vals.tolist()]}"
                ),
            )
    return None


def _run_warnings(s: Session, metric: str) -> list[str]:
    """Per arm: odd values of the objective's metric, and what the machine says
    about the runs' noise; then failed requests of the baseline itself."""
    warnings: list[str] = []
    for arm in s.names:
        warnings += value_warnings(f"{metric} ({arm_label(arm)})", s.values(arm, metric))
        why = explain_runs(s.all_records(arm))
        if why:
            warnings.append(f"{arm_label(arm)} runs: {why}")
    base_failed = sum(rr.result.failed for rr in s.all_records("bk") if rr.result is not None)
    if base_failed:
        warnings.append(f"the baseline itself had {base_failed} failed request(s)")
    return warnings


def _gain_vs_b0(s: Session, metric: str, direction: Direction) -> float | None:
    """The candidate's mean gain over B0 on the objective's metric (None without B0)."""
    if "b0" not in s.records:
        return None
    cb0 = s.values("b0", metric)
    return math.expm1(
        float(np.mean(log_ratios(s.values("candidate", metric), cb0)))
        * (1 if direction == "higher" else -1)
    )


def _objective(plan: _Plan, found: _Found) -> ObjectiveResult:
    """The objective's result at the last look, as ratios and gains."""
    look = found.look
    sign = 1 if plan.direction == "higher" else -1
    est = look.log_gain
    ratio_lo, ratio_hi = sorted((math.exp(sign * est.low), math.exp(sign * est.high)))
    return ObjectiveResult(
        benchmark=plan.bench_name,
        metric=plan.metric,
        direction=plan.direction,
        ratio=math.exp(sign * est.point),
        ratio_ci=Interval(low=ratio_lo, high=ratio_hi, level=est.level),
        gain=look.gain,
        gain_ci=Interval(low=look.gain_low, high=look.gain_high, level=est.level),
        gain_vs_b0=found.gain_vs_b0,
        p_value=look.p_value,
        min_gain=plan.config.objective.min_gain,
        noise_margin=plan.margin,
        candidate_runs=look.n + look.confirmed,
        confirmation_pairs=look.confirmed,
    )


def _other_benchmarks_due(plan: _Plan, found: _Found) -> bool:
    """Guards on other benchmarks are measured only once the objective is
    accepted on its own benchmark with no guard failed."""
    return (
        found.look.decision == "accept"
        and not any(g.status == "fail" for g in found.guards)
        and plan.bench_name == plan.config.objective.benchmark
    )


def _other_benchmark_guards(
    plan: _Plan,
    found: _Found,
    objective: ObjectiveResult,
    progress: Progress | None,
    isolation: Isolation | None,
) -> Verdict | None:
    """Measure every other benchmark a guard names (``initial_pairs`` pairs,
    judged as at a last look): its guards and tradeoff metrics go to ``found``,
    its warnings to ``plan``; an ``error`` verdict when a run fails."""
    config, v = plan.config, plan.config.verifier
    other = sorted(
        {g.benchmark for g in config.guards if g.benchmark and g.benchmark != plan.bench_name}
        | {q.benchmark for q in config.quality if q.benchmark and q.benchmark != plan.bench_name}
    )
    for other_name in other:
        seed = derived_seed(plan.seed, other_name)
        oj = Evaluator(config, other_name, plan.arms, seed=seed)
        on_run = oj.on_run_for(config.quality_for(other_name), plan.arms)
        bench = config.benchmarks[other_name]
        with _session(
            plan,
            bench,
            seed=seed,
            on_run=on_run,
            progress=progress,
            isolation=isolation,
            run_offset=found.runs,
        ) as os_:
            err = os_.setup() or os_.warmup(v.warmup) or os_.add_pairs(v.initial_pairs)
            found.runs += os_.runs
            if err is not None:
                return _error(
                    err, runs=found.runs, pairs=found.pairs, objective=objective, **plan.base
                )
            other_guards = oj.guards(os_, final=True)
            found.guards += other_guards
            found.flags += oj.flags()
            found.changes += oj.output_changes(other_guards)
            found.metrics += [
                m.model_copy(update={"name": f"{other_name}.{m.name}"})
                for m in oj.metrics(os_)
                if _category(m.name)
            ]
            plan.warnings.extend(oj.warnings)
    return None


def _conclude(
    plan: _Plan, found: _Found, objective: ObjectiveResult, progress: Progress | None
) -> Verdict:
    """The decision (``decide``; an accept the cross-check doubts is a
    review), the last warnings, and the verdict."""
    warnings = plan.warnings + found.evaluator.warnings
    if plan.calibration is None:
        warnings.append(
            "no calibration given: the test uses this verification's own spread only "
            f"(bias margin {plan.margin:.1%})"
        )
    v = plan.config.verifier
    if found.look.noise.stale:
        warnings.append(found.look.noise.note())
    if found.look.screened:
        warnings.append(
            f"{found.look.screened} of {found.look.n} pairs set aside: their level (the sum of "
            "the pair's two runs) lay far from the other pairs' (a run slowed or sped up by "
            "something else); the objective was judged without them"
        )
    if found.look.confirmed:
        warnings.append(_confirmed_note(found.look))
    too_noisy = _calibration_too_noisy(plan)
    if too_noisy:
        warnings.append(too_noisy)
    decision, reason, quarantined = decide(
        found.look,
        found.guards,
        v.max_pairs,
        min_gain=plan.config.objective.min_gain,
        power=v.feasibility_power,
    )
    if too_noisy:
        reason = f"{reason}. Note: {too_noisy}"
    if found.doubt is not None and decision == Decision.ACCEPT:
        decision, reason = Decision.REVIEW, found.doubt
    elif found.doubt is not None:
        warnings.append(found.doubt)
    if found.flags and decision == Decision.ACCEPT:
        decision, reason = Decision.REVIEW, found.flags[0]
    warnings += [f for f in found.flags if f != reason]
    if decision == Decision.ACCEPT and (off := _wild_rule_off(plan, found.look)):
        warnings.insert(0, off)
    return Verdict(
        decision=decision,
        reason=reason,
        objective=objective,
        metrics=tuple(found.metrics),
        guards=tuple(found.guards),
        tradeoffs=tuple(tradeoffs(found.metrics) + found.changes),
        warnings=tuple(dict.fromkeys(warnings)),
        pairs=found.pairs,
        runs=found.runs,
        quarantined=quarantined,
        **plan.base,
    )


def _matrix(
    plan: _Plan,
    found: _Found,
    verdict: Verdict,
    progress: Progress | None,
    isolation: Isolation | None,
) -> Verdict:
    """The deployment matrix: the primary cell's row from the verdict; every
    other cell measured with the matrix's ``pairs`` and judged by the same
    guards, only when the primary accepted (``accept`` or ``review``); a guard
    clearly failed in a cell (its interval wholly beyond the bound) rejects,
    the cell named; one unclear there (its interval straddles the bound on the
    cell's few pairs) makes an accept ``review``, naming the guard, the cell and
    what would decide it. Without a matrix: the verdict as it is."""
    if plan.cell is None or plan.bench.matrix is None:
        return verdict
    cells = cells_of(plan.bench)
    obj = verdict.objective
    rows = [
        primary_result(
            cells[0],
            plan.metric,
            obj.gain if obj else None,
            obj.gain_ci if obj else None,
            verdict.pairs,
            verdict.guards,
            verdict.metrics,
        )
    ]
    others = cells[1:]
    if verdict.decision not in (Decision.ACCEPT, Decision.REVIEW):
        why = f"not measured: the primary cell ({cells[0].label}) did not accept the candidate"
        rows += [unmeasured(c, why) for c in others]
        note = (
            f"deployment matrix: the other cells ({', '.join(c.label for c in others)}) were "
            f"not measured, since the candidate was not accepted at the primary cell "
            f"({cells[0].label})"
        )
        kept = (*verdict.warnings, note) if others else verdict.warnings
        return verdict.model_copy(update={"cells": tuple(rows), "warnings": kept})
    runs, warnings, flags = verdict.runs, list(verdict.warnings), list[str]()
    for cell in others:
        run = measure_cell(
            plan.config, plan.bench_name, cell, plan.arms,
            pairs=plan.bench.matrix.pairs, seed=plan.seed, env=plan.env, drop=plan.drop,
            base_checkout=plan.measuring, isolation=isolation, progress=progress,
            run_offset=runs, max_pairs=plan.bench.matrix.cap(),
        )  # fmt: skip
        runs += run.runs
        if run.error is not None or run.result is None:
            err = run.error or RunError(stage="verifier", message=f"cell {cell.label}: no result")
            return _error(
                err, runs=runs, pairs=verdict.pairs, objective=obj, cells=tuple(rows),
                **plan.base,
            )  # fmt: skip
        rows.append(run.result)
        warnings += run.warnings
        flags += run.flags
    decision, reason, more = cells_decision(
        verdict.decision, verdict.reason, rows[1:], flags,
        pairs=plan.bench.matrix.cap(), bench_name=plan.bench_name,
        per_start=plan.bench.per_start,
    )  # fmt: skip
    warnings += more
    lines = [*verdict.tradeoffs] + [
        f"At {c.label}: " + t[0].lower() + t[1:]
        for c in rows[1:]
        for t in tradeoffs(list(c.metrics))
    ]
    return verdict.model_copy(
        update={
            "decision": decision,
            "reason": reason,
            "cells": tuple(rows),
            "runs": runs,
            "warnings": tuple(dict.fromkeys(warnings)),
            "tradeoffs": tuple(lines),
        }
    )


def _confirmed_note(look: ObjectiveLook) -> str:
    """Why the verifier measured confirmation pairs after the design's."""
    wc = look.wild
    why = (
        f"{look.confirmed} confirmation pair(s) measured after the {look.n} pairs of the "
        f"test, so that every run counts in an accept: the candidate's {look.n + look.confirmed} "
        f"runs show a gain over every run of {look.every_gain:+.1%}"
    )
    if wc is not None:
        why += f"; {wc.why()}"
    return why


def _wild_rule_off(plan: _Plan, look: ObjectiveLook) -> str:
    """What an accept made under a wild-run rule looser than the default
    (``[verifier] accept_wild_rate`` 0 or above 0.1, or a lower
    ``accept_confidence``) cannot rule out, said in the verdict as a
    self-reported objective is ('' when the accept measured at least the
    candidate runs the default rule needs): the maintainer's choice is
    visible on every pull request it lets through."""
    v = plan.config.verifier
    default = VerifierSettings().accept_runs_needed()
    runs = look.n + look.confirmed
    if v.accept_runs_needed() >= default or runs >= default:
        return ""
    rule = (
        "the wild-run rule off ([verifier] accept_wild_rate = 0)"
        if v.accept_wild_rate <= 0
        else f"a looser wild-run rule ([verifier] accept_wild_rate = {v.accept_wild_rate:g}, "
        f"accept_confidence = {v.accept_confidence:g})"
    )
    return (
        f"accepted on {runs} candidate run(s) with {rule}: a candidate slow in one run of "
        f"ten shows none of them in {runs} runs {0.9 ** runs:.0%} of the time; the default "
        f"rule measures the {default} runs after which it would have shown"
    )


def _calibration_too_noisy(plan: _Plan) -> str:
    """The calibration's own "too noisy for this min_gain", when it said so ('' else)."""
    cal = plan.calibration
    if cal is None or cal.error is not None:
        return ""
    ok, why = cal.ok_for(plan.config.objective.min_gain)
    if ok:
        return ""
    return "the calibration said: " + why.split(". Raise min_gain")[0]


#: The least share of a run that the benchmark's own timed window is taken to
#: be: the whole run (``wall_s``), or, with a ready pattern printed just before
#: the timed part, the window after it.
CROSS_CHECK_SHARE = 0.2
CROSS_CHECK_SHARE_READY = 0.5


#: One-sided level at which the verifier's clock must CONTRADICT a
#: self-reported claim before the verdict says so (see ``cross_check``).
CROSS_CHECK_Z = 1.645


def cross_check(
    s: Session, metric: str, direction: str, claimed: float | None, min_gain: float, level: float
) -> str | None:
    """A reason for ``review`` when a gain the benchmark reports itself does not
    show on the verifier's own clock, else None.

    The verifier's clock: per-run ``wall_s``, or the window after the ready
    pattern (``wall_s - startup_s``) when the benchmark declares one. An honest
    speedup of the timed work shortens that window; the part of the window
    outside the benchmark's own timer only dilutes it. So the clock must show
    at least the time saved had the benchmark's timed part been a share of the
    window (``CROSS_CHECK_SHARE_READY`` after a ready pattern,
    ``CROSS_CHECK_SHARE`` of the whole run without one): with a claimed gain g,
    a saving of ``share * g / (1 + g)``; and the runs at least ``min_gain``
    faster (a real speedup of untimed work under a slowed timer passes the
    share test, but not this one). A self-reported gain is never accepted on
    its own word.

    What the clock shows is the saving over EVERY run (total time of the
    candidate's runs against Bk's: a run made slow counts in full, as in the
    objective's accept), and it fails a test when it lies below the test's
    line by more than ``CROSS_CHECK_Z`` standard errors of the pairs' robust
    spread (MAD), so that the untimed part of each window, which a busy
    machine stretches and blurs (an interpreter's start and exit wait for a
    CPU), cannot turn an honest claim into a review by chance: a median
    compared with the line as a point did, for an honest +2% at min_gain 1%
    under load. A clock with no spread (identical runs) is compared as it is.
    ``level`` is unused (kept for callers)."""
    if claimed is None or claimed <= max(min_gain, 0.0):
        return None
    clock, ref = _clock(s, "candidate"), _clock(s, "bk")
    after_ready = bool(s.bench.ready_pattern and not s.bench.serving)
    label = "run time after the ready pattern" if after_ready else "wall time"
    if (
        clock is None
        or ref is None
        or clock.size != ref.size
        or np.any(clock <= 0)
        or np.any(ref <= 0)
    ):
        return (
            f"the benchmark reports {metric} {claimed:+.1%} better, but the verifier's own "
            f"clock ({label}) could not be read in every run: a self-reported gain the "
            "verifier cannot corroborate is never accepted on its own word; a human must look"
        )
    d = -log_ratios(clock, ref)  # > 0: the candidate's runs were shorter
    share = CROSS_CHECK_SHARE_READY if after_ready else CROSS_CHECK_SHARE
    need = -math.log1p(-share * claimed / (1 + claimed))
    seen = math.log(float(ref.sum()) / float(clock.sum()))  # every run, none set aside
    spread = 1.4826 * float(np.median(np.abs(d - np.median(d))))
    allow = CROSS_CHECK_Z * spread / math.sqrt(d.size)
    shown = (
        f"saving {math.expm1(seen):+.1%} of their time over all {d.size} pairs (total time; "
        f"within {math.expm1(allow):.1%} by the pairs' spread)"
    )
    if seen + allow >= need and math.expm1(seen + allow) >= min_gain:
        return None
    if seen + allow >= need:
        return (
            f"the benchmark reports {metric} {claimed:+.1%} better, but the verifier's own clock "
            f"({label}, measured outside the candidate) shows the candidate's runs only "
            f"{shown}: below min_gain {min_gain:.1%}: a self-reported gain the verifier cannot "
            "corroborate is never accepted on its own word; a human must look (a benchmark "
            "that times a small part of its run should print its ready pattern just before "
            "the timed part, or be measured outside the candidate)"
        )
    return (
        f"the benchmark reports {metric} {claimed:+.1%} better, but the verifier's own clock "
        f"({label}, measured outside the candidate) shows the candidate's runs {shown}, "
        f"where an honest gain of that size would make them at least {math.expm1(need):.1%} "
        "shorter: a self-reported gain the clock does not confirm (a tampered timer or "
        "result?); a human must look"
    )


def _clock(s: Session, arm: str) -> np.ndarray | None:
    wall = s.values(arm, "wall_s")
    if s.bench.ready_pattern and not s.bench.serving:
        start = s.values(arm, "startup_s")
        if start.size != wall.size or np.isnan(start).any():
            return None
        wall = wall - start
    return wall if wall.size else None


def _emit_done(
    progress: Progress | None, runs: int, pairs: int, bench: str, decision: Decision
) -> None:
    """The last progress event (its message: the decision); a failing callback is ignored."""
    if progress is None:
        return
    try:
        progress(ProgressEvent("done", runs, runs, "", pairs, bench, decision.value))
    except Exception:  # noqa: BLE001
        pass


def _undecided(look: ObjectiveLook, max_pairs: int, min_gain: float | None, power: float) -> str:
    """Why the cap left the objective open, and what would decide it: the
    smallest gain this test detects at the noise measured, and the pairs
    ``min_gain`` would need at that noise."""
    why = f"objective undecided after {look.n} pairs (the cap of {max_pairs}): {look.reason}"
    if not math.isfinite(look.scale) or look.scale <= 0 or not math.isfinite(look.critical):
        return why
    mdg = detectable_gain(look.scale, look.n, crit=look.critical, margin=look.margin, power=power)
    why += (
        f". At the noise measured (per-pair spread {look.scale:.2%}) the smallest gain this "
        f"test detects within {look.n} pairs is {mdg:.1%}"
    )
    if min_gain is not None and min_gain > look.margin and mdg > min_gain:
        need = pairs_for(look.scale, min_gain, crit=look.critical, margin=look.margin, power=power)
        why += (
            f"; to decide min_gain {min_gain:.1%} here it needs about {need} pairs "
            "([verifier] max_pairs), or a steadier measurement: longer runs, or a quieter machine"
        )
    else:
        why += "; more pairs ([verifier] max_pairs) would decide it"
    if look.noise.stale:
        why += f"; {look.noise.note()}"
    return why


def _slower_over_every_run(look: ObjectiveLook, max_pairs: int) -> str:
    """Why the cap sends a candidate whose kept runs show a gain, and whose
    every run together shows a loss, to a human."""
    return (
        f"the candidate is slower over every run: {look.every_gain:+.1%} (total time of all "
        f"its runs vs the baseline's, after {look.n} pairs, the cap of {max_pairs}), while "
        f"the runs the interval kept show {look.gain:+.1%}: {look.reason}. A run or pair "
        "set aside as an outlier never counts toward an accept (the candidate controls "
        "which of its runs look like outliers); a human must look"
    )


def decide(
    look: ObjectiveLook,
    guards: list[GuardResult],
    max_pairs: int,
    *,
    min_gain: float | None = None,
    power: float = 0.90,
) -> tuple[Decision, str, bool]:
    """(decision, reason, quarantined) from the objective's last look and every
    guard: reject > inconclusive > review (quarantined above 10x, a guard
    unclear, a gain above 2x) > accept. The objective's reject says which
    bound decided it ("slower by X%", "short of min_gain"); an inconclusive
    one says what gain the noise measured allows and what would decide
    ``min_gain`` (``power``: as the calibration's feasibility)."""
    failed = [g for g in guards if g.status == "fail"]
    unclear = [g for g in guards if g.status == "unclear"]
    if failed:
        names = "; ".join(f"{g.name} vs {arm_label(g.against)}: {g.detail}" for g in failed)
        if look.decision == "reject":
            return Decision.REJECT, f"objective {look.reason}; guard failed too: {names}", False
        return Decision.REJECT, f"guard failed: {names}", False
    if look.decision == "reject":
        return Decision.REJECT, f"objective {look.reason}", False
    if look.decision != "accept" and capped_decision(look) == "review":
        return Decision.REVIEW, _slower_over_every_run(look, max_pairs), False
    if look.decision != "accept":
        return Decision.INCONCLUSIVE, _undecided(look, max_pairs, min_gain, power), False
    if look.gain > QUARANTINE_GAIN:
        return (
            Decision.REVIEW,
            (
                f"QUARANTINED: gain {look.gain:+.0%} is more than 10x; such gains are almost "
                "always a broken "
                "benchmark or skipped work. A human must inspect the candidate before "
                "anything else."
            ),
            True,
        )
    if unclear:
        names = "; ".join(f"{g.name} vs {arm_label(g.against)}: {g.detail}" for g in unclear)
        return (
            Decision.REVIEW,
            f"objective accepted ({look.reason}) but a guard is undecided at the cap: {names}. "
            f"A guard whose interval straddles its bound is never decided by its point; "
            f"raise [verifier] max_pairs (now {max_pairs}) or steady the measurement to "
            "decide it, or a human decides",
            False,
        )
    if look.gain > SUSPICIOUS_GAIN:
        return (
            Decision.REVIEW,
            f"suspicious gain {look.gain:+.0%} (more than 2x): accepted only after a human looks",
            False,
        )
    return Decision.ACCEPT, look.reason, False
