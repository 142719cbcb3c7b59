"""The judge: measure a candidate against its baseline(s) and decide.

Flow of ``verify``:

1. Check the config, the hidden inputs and the fingerprint (a calibration or
   an expected fingerprint from elsewhere is refused: ``error``).
2. ``setup`` once per checkout; ``warmup`` runs per arm, discarded.
3. Randomized ABBA blocks of Bk and the candidate (and B0 when given and a
   different checkout), ``initial_pairs`` first; at each look the objective
   is judged (``stats.judge_objective``) and every guard evaluated:
   - a guard that clearly fails, or a failed request: ``reject`` (stop);
   - objective clearly worse / wholly below ``min_gain``: ``reject`` (stop);
   - objective accepted and every guard clear: stop;
   - otherwise add ``step`` pairs, up to ``max_pairs``.
   Guards pass or fail early only on a wide interval (``guard_interim_level``);
   at the last look one still unclear is decided by its point estimate
   (``stats.bound_status``), so that a real regression beyond the bound fails
   and no regression passes, each >= 95% of the time in the quality table.
4. Guards naming other benchmarks are measured (``initial_pairs`` pairs) once
   the objective is accepted, and judged as at a last look.
5. Decision: reject > inconclusive (objective unclear at the cap) > review
   (a guard still unclear when the objective is accepted, which the last-look
   rule leaves only to callers of ``_decide`` with interim results; a gain
   above 2x; above 10x the candidate is quarantined) > accept.

Anything that goes wrong (a crash, a timeout, a bad result, an exception in
here) is ``error`` with a ``RunError``: never a regression, never a zero.
"""

from __future__ import annotations

import math
import re
import time
import traceback
import zlib
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from .calibrate import Calibration
from .config import Direction, Guard, QualityGuard, VerifyConfig
from .fingerprint import FingerprintMismatch, collect, ensure_comparable
from .isolation import Isolation
from .measure import ARM_STAGE, Progress, ProgressEvent, Session, hidden_env
from .noise import explain_runs
from .quality import (
    QualityError,
    _texts,
    allclose,
    compare_files,
    corpus_wer,
    file_key,
    output_length,
    snapshot,
)
from .runner import RunRecord
from .stats import (
    Design,
    Estimate,
    bootstrap_ci,
    bound_status,
    clustered_percentile_ci,
    judge_objective,
    log_ratios,
    value_warnings,
)
from .verdict import (
    Fingerprint,
    GuardResult,
    Interval,
    MetricComparison,
    ObjectiveResult,
    RunError,
    Verdict,
)

__all__ = ["QUARANTINE_GAIN", "SUSPICIOUS_GAIN", "ProgressEvent", "verify"]

SUSPICIOUS_GAIN = 1.0  # gain above 2x (gain > 100%): review
QUARANTINE_GAIN = 9.0  # above 10x: quarantined review
PERCENTILE_BOOT = 2_000  # resamples for pooled-percentile intervals of guards and reports
REF_LABEL = {"bk": "Bk", "b0": "B0"}


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
            decision="error",
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
    return Verdict(decision="error", reason=f"{what}: {err.message}", error=err, **base)


def _seed(base: int, *parts: str) -> int:
    return (base * 1_000_003 + zlib.crc32("/".join(parts).encode())) % (2**32)


class Evaluator:
    """Evaluates guards and metric comparisons on a measurement session."""

    def __init__(self, config: VerifyConfig, bench_name: str, arms: dict[str, Path]):
        self.config = config
        self.v = config.verifier
        self.bench_name = bench_name
        self.arms = arms
        self.refs = [a for a in ("bk", "b0") if a in arms]
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
        seed = _seed(self.v.seed, s.bench.name, metric, ref, "log" if log else "delta")
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

    def quality_guard(self, q: QualityGuard, ref: str) -> GuardResult:
        base = dict(name=q.label, kind=q.kind, metric=f"outputs.{q.output}", against=ref)
        cand, refs = self.snaps.get("candidate", {}), self.snaps.get(ref, {})
        rl = REF_LABEL[ref]
        if q.files:
            return self.file_guard(q, ref)
        need = [q.output] + ([q.reference] if q.reference else [])
        for key in need:
            if isinstance(refs.get(key), QualityError) or key not in refs:
                why = refs.get(key, "no snapshot")
                self.warnings.append(
                    f"quality guard {q.label}: {rl} lacks outputs.{key} ({why}); not checked"
                )
                return GuardResult(**base, status="skipped", detail=f"{rl}: {why}")
        if isinstance(cand.get(q.output), QualityError) or q.output not in cand:
            return GuardResult(
                **base, status="fail", detail=f"candidate: {cand.get(q.output, 'no outputs')}"
            )
        try:
            if q.kind == "wer":
                hyp = _texts(cand[q.output], f"candidate outputs.{q.output}")
                if q.reference:
                    truth = _texts(refs[q.reference], f"{rl} outputs.{q.reference}")
                    w_c = corpus_wer(truth, hyp)
                    w_r = corpus_wer(truth, _texts(refs[q.output], f"{rl} outputs.{q.output}"))
                    against_what = f"ground truth outputs.{q.reference}"
                else:
                    w_c = corpus_wer(_texts(refs[q.output], f"{rl} outputs.{q.output}"), hyp)
                    w_r = 0.0
                    against_what = f"{rl}'s outputs"
                delta = w_c - w_r
                bounds, fails = [], []
                if q.max is not None:
                    bounds.append(f"<= {q.max:.2%}")
                    if w_c > q.max:
                        fails.append(f"WER {w_c:.2%} > {q.max:.2%}")
                if q.max_delta is not None:
                    bounds.append(f"delta <= {q.max_delta:+.2%}")
                    if delta > q.max_delta:
                        fails.append(f"WER rose by {delta:+.2%} > {q.max_delta:+.2%}")
                detail = f"WER {w_c:.2%} against {against_what}" + (
                    f" ({rl} {w_r:.2%}, delta {delta:+.2%})" if q.reference else ""
                )
                if fails:
                    detail += ": " + "; ".join(fails)
                return GuardResult(
                    **base,
                    bound="; ".join(bounds),
                    value=w_c,
                    status="fail" if fails else "pass",
                    detail=detail,
                )
            if q.kind == "output_length":
                lc = output_length(cand[q.output])
                lr = output_length(refs[q.output])
                if lr == 0:
                    ok = lc == 0
                    change = 0.0 if ok else float("inf")
                else:
                    change = lc / lr - 1
                    ok = abs(change) <= q.max_change
                return GuardResult(
                    **base,
                    bound=f"within ±{q.max_change:.1%}",
                    value=change,
                    status="pass" if ok else "fail",
                    detail=f"length {lc:g} vs {rl} {lr:g} ({change:+.2%})",
                )
            ok, err, detail = allclose(cand[q.output], refs[q.output], q)
            return GuardResult(
                **base,
                bound="per-dtype tolerance",
                value=err,
                status="pass" if ok else "fail",
                detail=detail,
            )
        except QualityError as e:
            return GuardResult(**base, status="fail", detail=str(e))

    def file_guard(self, q: QualityGuard, ref: str) -> GuardResult:
        """waveform / tensor: the run's output files, matched by name."""
        key, rl = file_key(q), REF_LABEL[ref]
        base = dict(name=q.label, kind=q.kind, metric=f"files {q.files}", against=ref)
        base["bound"] = f">= {q.min_snr_db:g} dB" if q.kind == "waveform" else "per-dtype tolerance"
        cand = self.snaps.get("candidate", {}).get(key, QualityError("no candidate run"))
        refv = self.snaps.get(ref, {}).get(key, QualityError("no snapshot"))
        if isinstance(refv, QualityError):
            self.warnings.append(f"quality guard {q.label}: {rl}: {refv}; not checked")
            return GuardResult(**base, status="skipped", detail=f"{rl}: {refv}")
        if isinstance(cand, QualityError):
            return GuardResult(**base, status="fail", detail=f"candidate: {cand}")
        try:
            ok, value, detail = compare_files(cand, refv, q, rl)
        except QualityError as e:
            self.warnings.append(f"quality guard {q.label}: {e}; not checked")
            return GuardResult(**base, status="skipped", detail=str(e))
        value = value if math.isfinite(value) else None
        return GuardResult(**base, value=value, status="pass" if ok else "fail", detail=detail)

    # ---- reporting ------------------------------------------------------------------
    def metrics(self, s: Session) -> list[MetricComparison]:
        out = []
        for metric, d in s.directions().items():
            row: dict[str, Any] = dict(name=metric, direction=d, unit=_unit(metric))
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


def _unit(metric: str) -> str:
    for suffix, unit in (("_s", "s"), ("_ms", "ms"), ("_mib", "MiB"), ("_mb", "MB")):
        if metric.endswith(suffix):
            return unit
    return ""


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
    v = config.verifier
    bench_name = benchmark or config.objective.benchmark
    base: dict[str, Any] = dict(benchmark=bench_name, shas=shas)
    if bench_name not in config.benchmarks:
        return _error(
            RunError(
                stage="config",
                message=(
                    f"unknown benchmark '{bench_name}'; declared: "
                    f"{', '.join(sorted(config.benchmarks))}"
                ),
            ),
            **base,
        )
    bench = config.benchmarks[bench_name]
    base["settings"] = dict(bench.settings)
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
    for name, path in (("baseline", baseline), ("candidate", candidate), ("b0", b0)):
        if path is not None and not path.is_dir():
            return _error(
                RunError(stage=name, message=f"checkout {path} is not a directory"), **base
            )

    # the objective on this benchmark
    if bench_name == config.objective.benchmark:
        metric, direction = config.objective.metric, bench.known_metrics()[config.objective.metric]
    else:
        known = bench.known_metrics()
        metric = config.objective.metric if config.objective.metric in known else "wall_s"
        direction = known.get(metric, "lower")
    min_gain = config.objective.min_gain
    warnings: list[str] = []
    use_cal = calibration is not None and calibration.error is None
    # the margin covers only bias ABBA cannot cancel; the calibration's spread is a prior
    margin = calibration.bias_margin(v.min_noise_margin) if use_cal else v.min_noise_margin
    prior = (
        dict(prior_sd=calibration.per_pair_sd, prior_df=calibration.prior_df)
        if use_cal and calibration.metric in ("", metric)
        else {}
    )
    if calibration is not None and not use_cal:
        warnings.append(
            f"calibration failed ({calibration.error.message}); the test uses this "
            "verification's own spread only"
        )

    arms: dict[str, Path] = {"bk": baseline, "candidate": candidate}
    if b0 is not None and b0.resolve() != baseline.resolve():
        arms["b0"] = b0
    elif b0 is not None:
        warnings.append("B0 is the same checkout as Bk: the guards vs Bk cover B0")
    judge = Evaluator(config, bench_name, arms)
    qguards = config.quality_for(bench_name)
    runs = 0
    with Session(
        bench,
        arms,
        seed=v.seed,
        extra_env=env,
        drop_env=drop,
        progress=progress,
        on_run=judge.on_run_for(qguards, arms),
        isolation=isolation,
        cpus=v.cpus,
        threads=v.threads,
        base_checkout=baseline,
    ) as s:
        err = s.setup() or s.warmup(v.warmup)
        if err is not None:
            return _error(err, runs=s.runs, **base)
        look = None
        guard_results: list[GuardResult] = []
        design = Design.from_schedule(
            v.initial_pairs, v.step, v.max_pairs, alpha=v.alpha, gamma=v.spending_gamma
        )
        for target in design.looks:
            err = s.add_pairs(target - s.pairs)
            if err is not None:
                return _error(err, runs=s.runs, pairs=s.pairs, **base)
            c, r = s.values("candidate", metric), s.values("bk", metric)
            for arm, vals in (("candidate", c), ("bk", r)):
                if np.isnan(vals).any() or np.any(vals <= 0):
                    return _error(
                        RunError(
                            stage=ARM_STAGE[arm],
                            message=(
                                f"objective metric '{metric}' is missing or not positive in "
                                "some runs: "
                                f"{[round(x, 6) for x in vals.tolist()]}"
                            ),
                        ),
                        runs=s.runs,
                        pairs=s.pairs,
                        **base,
                    )
            gains = log_ratios(c, r) * (1 if direction == "higher" else -1)
            look = judge_objective(gains, min_gain=min_gain, design=design, margin=margin, **prior)
            guard_results = judge.guards(s, final=target == design.max_pairs)
            if any(g.status == "fail" for g in guard_results) or look.decision == "reject":
                break
            if look.decision == "accept" and not any(g.status == "unclear" for g in guard_results):
                break
        runs = s.runs
        pairs = s.pairs
        metrics = judge.metrics(s)
        doubt = (
            cross_check(s, metric, direction, look.gain, min_gain, v.level)
            if v.cross_check and bench.metric_source(metric) == "benchmark"
            else None
        )
        for arm in s.names:
            warnings += value_warnings(f"{metric} ({_arm_label(arm)})", s.values(arm, metric))
            why = explain_runs(s.records[arm])
            if why:
                warnings.append(f"{_arm_label(arm)} runs: {why}")
        if "b0" in arms:
            cb0 = s.values("b0", metric)
            gain_vs_b0 = math.expm1(
                float(np.mean(log_ratios(s.values("candidate", metric), cb0)))
                * (1 if direction == "higher" else -1)
            )
        else:
            gain_vs_b0 = None
        base_failed = sum(rr.result.failed for rr in s.records["bk"] if rr.result is not None)
        if base_failed:
            warnings.append(f"the baseline itself had {base_failed} failed request(s)")

    assert look is not None
    sign = 1 if direction == "higher" else -1
    est = look.log_gain
    ratio_lo, ratio_hi = sorted((math.exp(sign * est.low), math.exp(sign * est.high)))
    objective = ObjectiveResult(
        benchmark=bench_name,
        metric=metric,
        direction=direction,
        ratio=math.exp(sign * est.point),
        ratio_ci=Interval(low=ratio_lo, high=ratio_hi, level=est.level),
        gain=look.gain,
        gain_ci=Interval(low=look.gain_low, high=look.gain_high, level=est.level),
        gain_vs_b0=gain_vs_b0,
        p_value=look.p_value,
        min_gain=min_gain,
        noise_margin=margin,
    )

    # guards on other benchmarks, once the objective is accepted
    other = sorted(
        {g.benchmark for g in config.guards if g.benchmark and g.benchmark != bench_name}
        | {q.benchmark for q in config.quality if q.benchmark and q.benchmark != bench_name}
    )
    if (
        look.decision == "accept"
        and not any(g.status == "fail" for g in guard_results)
        and bench_name == config.objective.benchmark
    ):
        for other_name in other:
            ob = config.benchmarks[other_name]
            oj = Evaluator(config, other_name, arms)
            with Session(
                ob,
                arms,
                seed=_seed(v.seed, other_name),
                extra_env=env,
                drop_env=drop,
                progress=progress,
                on_run=oj.on_run_for(config.quality_for(other_name), arms),
                run_offset=runs,
                isolation=isolation,
                cpus=v.cpus,
                threads=v.threads,
                base_checkout=baseline,
            ) as os_:
                err = os_.setup() or os_.warmup(v.warmup) or os_.add_pairs(v.initial_pairs)
                runs += os_.runs
                if err is not None:
                    return _error(err, runs=runs, pairs=pairs, objective=objective, **base)
                guard_results += oj.guards(os_, final=True)
                metrics += [
                    m.model_copy(update={"name": f"{other_name}.{m.name}"})
                    for m in oj.metrics(os_)
                    if _category(m.name)
                ]
                warnings += oj.warnings
    warnings += judge.warnings
    if calibration is None:
        warnings.append(
            "no calibration given: the test uses this verification's own spread only "
            f"(bias margin {margin:.1%})"
        )

    decision, reason, quarantined = _decide(look, guard_results, pairs, v.max_pairs)
    if doubt is not None and decision == "accept":
        decision, reason = "review", doubt
    elif doubt is not None:
        warnings.append(doubt)
    _emit_done(progress, runs, pairs, bench_name, decision)
    return Verdict(
        decision=decision,
        reason=reason,
        objective=objective,
        metrics=tuple(metrics),
        guards=tuple(guard_results),
        tradeoffs=tuple(tradeoffs(metrics)),
        warnings=tuple(dict.fromkeys(warnings)),
        pairs=pairs,
        runs=runs,
        quarantined=quarantined,
        **base,
    )


#: The least share of a run that the benchmark's own timed window is taken to
#: be: the whole run (``wall_s``), or, with a ready pattern printed just before
#: the timed part, the window after it.
CROSS_CHECK_SHARE = 0.2
CROSS_CHECK_SHARE_READY = 0.5


def cross_check(
    s: Session, metric: str, direction: str, claimed: float | None, min_gain: float, level: float
) -> str | None:
    """A reason for ``review`` when a gain the benchmark reports itself does not
    show on the verifier's own clock, else None.

    The verifier's clock: per-run ``wall_s``, or the window after the ready
    pattern (``wall_s - startup_s``) when the benchmark declares one, per pair
    (log ratio). An honest speedup of the timed work shortens that window; the
    part of the window outside the benchmark's own timer only dilutes it. So
    the clock must show at least the time saved had the benchmark's timed part
    been a share of the window (``CROSS_CHECK_SHARE_READY`` after a ready
    pattern, ``CROSS_CHECK_SHARE`` of the whole run without one): with a
    claimed gain g, a saving of ``share * g / (1 + g)``. The burden is on the
    claim: the median per-pair saving must reach that, at any number of pairs
    (a check that needs many pairs would be skipped by an early accept). A
    claim the clock does not see (a slowed timer, an edited result) goes to
    ``review``; a benchmark that times a small part of a long run should print
    its ready pattern just before its timed part.
    """
    if claimed is None or claimed <= max(min_gain, 0.0):
        return None
    clock, ref = _clock(s, "candidate"), _clock(s, "bk")
    after_ready = bool(s.bench.ready_pattern and not s.bench.serving)
    label = "run time after the ready pattern" if after_ready else "wall time"
    if clock is None or ref is None or np.any(clock <= 0) or np.any(ref <= 0):
        return None
    d = -log_ratios(clock, ref)  # > 0: the candidate's runs were shorter
    share = CROSS_CHECK_SHARE_READY if after_ready else CROSS_CHECK_SHARE
    need = -math.log1p(-share * claimed / (1 + claimed))
    seen = float(np.median(d))
    if seen >= need:
        return None
    return (
        f"the benchmark reports {metric} {claimed:+.1%} better, but the verifier's own clock "
        f"({label}, measured outside the candidate) shows the candidate's runs "
        f"{math.expm1(seen):.1%} shorter (median of {d.size} pairs), where an honest "
        f"gain of that size would make them at least {math.expm1(need):.1%} shorter: a "
        "self-reported gain the clock does not confirm (a tampered timer or result?); "
        "a human must look"
    )


def _clock(s: Session, arm: str) -> np.ndarray | None:
    wall = s.values(arm, "wall_s")
    if s.bench.ready_pattern and not s.bench.serving:
        start = s.values(arm, "startup_s")
        if start.size != wall.size or np.isnan(start).any():
            return None
        wall = wall - start
    return wall if wall.size else None


def _arm_label(arm: str) -> str:
    return {"bk": "Bk", "b0": "B0", "candidate": "candidate"}.get(arm, arm)


def _emit_done(progress: Progress | None, runs: int, pairs: int, bench: str, decision: str) -> None:
    if progress is None:
        return
    try:
        progress(ProgressEvent("done", runs, runs, "", pairs, bench, decision))
    except Exception:  # noqa: BLE001
        pass


def _decide(look, guards: list[GuardResult], pairs: int, max_pairs: int) -> tuple[str, str, bool]:
    failed = [g for g in guards if g.status == "fail"]
    unclear = [g for g in guards if g.status == "unclear"]
    if failed:
        names = "; ".join(
            f"{g.name} vs {REF_LABEL.get(g.against, g.against)}: {g.detail}" for g in failed
        )
        if look.decision == "reject":
            return "reject", f"objective {look.reason}; guard failed too: {names}", False
        return "reject", f"guard failed: {names}", False
    if look.decision == "reject":
        return "reject", f"objective {look.reason}", False
    if look.decision != "accept":
        return (
            "inconclusive",
            f"objective still {look.reason} (cap of {max_pairs} pairs reached)",
            False,
        )
    if look.gain > QUARANTINE_GAIN:
        return (
            "review",
            (
                f"QUARANTINED: gain {look.gain:+.0%} is more than 10x; such gains are almost "
                "always a broken "
                "benchmark or skipped work. A human must inspect the candidate before "
                "anything else."
            ),
            True,
        )
    if unclear:
        names = "; ".join(
            f"{g.name} vs {REF_LABEL.get(g.against, g.against)}: {g.detail}" for g in unclear
        )
        return (
            "review",
            f"objective accepted ({look.reason}) but a guard is unclear: {names}",
            False,
        )
    if look.gain > SUSPICIOUS_GAIN:
        return (
            "review",
            f"suspicious gain {look.gain:+.0%} (more than 2x): accepted only after a human looks",
            False,
        )
    return "accept", look.reason, False
