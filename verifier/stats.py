"""Statistics for paired benchmark runs. Pure numpy/scipy, no I/O.

The unit of evidence is the per-pair log ratio ``d_i = log(candidate_i /
reference_i)`` of two runs taken next to each other in an ABBA block. Its
centre is a 20%-trimmed mean (robust to outlier runs; Wilcox's usual choice); its interval is a
seeded percentile bootstrap (>= 10,000 resamples, vectorized) widened by the
small-sample factor ``t_{n-1} / z * sqrt(n / (n - 1))`` (the "expanded
percentile" bootstrap), because a plain percentile bootstrap is too narrow for
the 10 to 30 pairs a verification uses. The paired test is the Wilcoxon
signed-rank test (scipy).

Percentile metrics (p95, p99) use the samples pooled over all runs of each arm;
their interval resamples whole runs per arm (a cluster bootstrap), so that
one preempted run is one event, not twenty slow requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as _st

TRIM = 0.20
N_BOOT = 10_000


@dataclass(frozen=True)
class Estimate:
    """A centre and its interval, in the same units (log ratio or delta)."""

    point: float
    low: float
    high: float
    level: float = 0.95


def log_ratios(candidate, reference) -> np.ndarray:
    c = np.asarray(candidate, dtype=float)
    r = np.asarray(reference, dtype=float)
    if c.shape != r.shape:
        raise ValueError(f"paired arrays differ in length: {c.shape} vs {r.shape}")
    if np.any(c <= 0) or np.any(r <= 0):
        raise ValueError("log ratios need positive values")
    return np.log(c) - np.log(r)


def trimmed_mean(x, trim: float = TRIM, axis: int = -1) -> np.ndarray | float:
    """Mean after dropping ``floor(trim * n)`` values at each end (vectorized)."""
    a = np.sort(np.asarray(x, dtype=float), axis=axis)
    n = a.shape[axis]
    k = int(math.floor(trim * n))
    sl = [slice(None)] * a.ndim
    sl[axis] = slice(k, n - k)
    return a[tuple(sl)].mean(axis=axis)


def _expansion(n: int, level: float) -> float:
    if n < 3:
        return 1.0
    z = _st.norm.ppf(0.5 + level / 2)
    t = _st.t.ppf(0.5 + level / 2, n - 1)
    return float(t / z * math.sqrt(n / (n - 1)))


def bootstrap_ci(
    x, *, seed: int = 0, n_boot: int = N_BOOT, level: float = 0.95, trim: float = TRIM
) -> Estimate:
    """Seeded bootstrap interval of the trimmed mean of ``x`` (paired values)."""
    x = np.asarray(x, dtype=float)
    n = x.size
    if n == 0:
        raise ValueError("no values")
    point = float(trimmed_mean(x, trim))
    if n == 1:
        return Estimate(point, -math.inf, math.inf, level)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n), dtype=np.int32)
    boots = trimmed_mean(x[idx], trim, axis=1)
    lo, hi = np.quantile(boots, [(1 - level) / 2, (1 + level) / 2])
    f = _expansion(n, level)
    return Estimate(point, float(point - f * (point - lo)), float(point + f * (hi - point)), level)


def robust_sd(x) -> float:
    """Standard deviation after winsorizing at 3 robust sds (1.4826 x MAD) around
    the median: near the classic sd on clean data, not inflated by one outlier."""
    x = np.asarray(x, dtype=float)
    if x.size < 2:
        return 0.0
    med = float(np.median(x))
    mad_sd = float(1.4826 * np.median(np.abs(x - med)))
    if mad_sd > 0:
        x = np.clip(x, med - 3 * mad_sd, med + 3 * mad_sd)
    return float(np.std(x, ddof=1))


def wilcoxon_p(d, alternative: str = "greater") -> float:
    """Paired signed-rank p-value of ``d`` (differences); 1.0 when undefined."""
    d = np.asarray(d, dtype=float)
    if d.size < 2 or np.all(d == 0):
        return 1.0
    try:
        res = _st.wilcoxon(d, alternative=alternative, zero_method="wilcox")
    except ValueError:
        return 1.0
    p = float(res.pvalue)
    return p if math.isfinite(p) else 1.0


def percentile_ratio_ci(
    candidate,
    reference,
    q: float,
    *,
    seed: int = 0,
    n_boot: int = N_BOOT,
    level: float = 0.95,
    log: bool = True,
    chunk: int = 500,
) -> Estimate:
    """log(p_q(candidate) / p_q(reference)) (or, with ``log=False``, the
    difference) with a bootstrap interval over pooled samples: each arm is
    resampled independently, in chunks to bound memory."""
    c = np.asarray(candidate, dtype=float)
    r = np.asarray(reference, dtype=float)
    if c.size == 0 or r.size == 0:
        raise ValueError("no samples")
    if log and (np.any(c <= 0) or np.any(r <= 0)):
        raise ValueError("percentile ratios need positive samples")
    f = np.log if log else (lambda v: v)
    point = float(f(np.percentile(c, q)) - f(np.percentile(r, q)))
    rng = np.random.default_rng(seed)
    out = np.empty(n_boot)
    done = 0
    # bound the temporary matrices to ~2M elements each
    chunk = max(1, min(chunk, 2_000_000 // max(c.size, r.size)))
    while done < n_boot:
        m = min(chunk, n_boot - done)
        ci = rng.integers(0, c.size, size=(m, c.size), dtype=np.int32)
        ri = rng.integers(0, r.size, size=(m, r.size), dtype=np.int32)
        pc = np.percentile(c[ci], q, axis=1)
        pr = np.percentile(r[ri], q, axis=1)
        out[done : done + m] = f(pc) - f(pr)
        done += m
    lo, hi = np.quantile(out, [(1 - level) / 2, (1 + level) / 2])
    return Estimate(point, float(lo), float(hi), level)


def _cluster_percentiles(runs: list[np.ndarray], q: float, rng, m: int) -> np.ndarray:
    """p_q of ``m`` bootstrap pools, each made of len(runs) runs drawn with replacement."""
    k = len(runs)
    idx = rng.integers(0, k, size=(m, k))
    sizes = {r.size for r in runs}
    if len(sizes) == 1:
        mat = np.stack(runs)  # (k, s)
        return np.percentile(mat[idx].reshape(m, -1), q, axis=1)
    return np.array([np.percentile(np.concatenate([runs[i] for i in row]), q) for row in idx])


def clustered_percentile_ci(
    candidate_runs,
    reference_runs,
    q: float,
    *,
    seed: int = 0,
    n_boot: int = 2_000,
    level: float = 0.95,
    log: bool = True,
) -> Estimate:
    """Like ``percentile_ratio_ci`` but resampling whole runs (each run's samples
    stay together), so that a slow run counts as one event, not as many
    independent slow requests. The point is the percentile of the pooled samples."""
    c_runs = [np.asarray(r, dtype=float) for r in candidate_runs if len(r)]
    r_runs = [np.asarray(r, dtype=float) for r in reference_runs if len(r)]
    if not c_runs or not r_runs:
        raise ValueError("no samples")
    c, r = np.concatenate(c_runs), np.concatenate(r_runs)
    if log and (np.any(c <= 0) or np.any(r <= 0)):
        raise ValueError("percentile ratios need positive samples")
    if len(c_runs) < 2 or len(r_runs) < 2:
        return percentile_ratio_ci(c, r, q, seed=seed, n_boot=n_boot, level=level, log=log)
    f = np.log if log else (lambda v: v)
    point = float(f(np.percentile(c, q)) - f(np.percentile(r, q)))
    rng = np.random.default_rng(seed)
    out = np.empty(n_boot)
    per = max(len(c), len(r))
    chunk = max(1, min(n_boot, 2_000_000 // per))
    done = 0
    while done < n_boot:
        m = min(chunk, n_boot - done)
        out[done : done + m] = f(_cluster_percentiles(c_runs, q, rng, m)) - f(
            _cluster_percentiles(r_runs, q, rng, m)
        )
        done += m
    lo, hi = np.quantile(out, [(1 - level) / 2, (1 + level) / 2])
    return Estimate(point, float(lo), float(hi), level)


# ---- the objective's sequential decision ---------------------------------


@dataclass(frozen=True)
class ObjectiveLook:
    """One look at the objective's paired evidence.

    ``gain`` is in the better direction (0.05 = 5% better); the interval is of
    the gain. ``decision`` is "accept", "reject" or "continue".
    """

    n: int
    gain: float
    gain_low: float
    gain_high: float
    log_gain: Estimate
    p_value: float
    decision: str
    reason: str


def judge_objective(
    log_gains,
    *,
    min_gain: float,
    noise_margin: float,
    seed: int = 0,
    n_boot: int = N_BOOT,
    level: float = 0.95,
    alpha: float = 0.01,
) -> ObjectiveLook:
    """Decide on the objective from per-pair log gains (positive = candidate better).

    accept:   the interval's low end clears the noise margin, the one-sided
              signed-rank test gives p < alpha, and the point gain >= min_gain;
    reject:   the interval lies wholly below 0 (clearly worse) or wholly below
              min_gain (no gain worth keeping);
    continue: anything else (the caller adds pairs or ends inconclusive).
    """
    g = np.asarray(log_gains, dtype=float)
    est = bootstrap_ci(g, seed=seed, n_boot=n_boot, level=level)
    p = wilcoxon_p(g, "greater")
    gain, lo, hi = math.expm1(est.point), math.expm1(est.low), math.expm1(est.high)
    n = g.size
    ci = f"{gain:+.2%} [{lo:+.2%}, {hi:+.2%}]"
    if hi < 0:
        return ObjectiveLook(
            n, gain, lo, hi, est, p, "reject", f"clearly worse: {ci} after {n} pairs"
        )
    if min_gain > 0 and hi < min_gain:
        return ObjectiveLook(
            n,
            gain,
            lo,
            hi,
            est,
            p,
            "reject",
            f"no gain worth keeping: {ci} lies below min_gain {min_gain:.2%} after {n} pairs",
        )
    if lo > noise_margin and p < alpha and gain >= min_gain:
        return ObjectiveLook(
            n,
            gain,
            lo,
            hi,
            est,
            p,
            "accept",
            f"gain {ci} clears the noise margin {noise_margin:.2%}, p={p:.2g}, after {n} pairs",
        )
    why = []
    if lo <= noise_margin:
        why.append(f"interval low end {lo:+.2%} does not clear the noise margin {noise_margin:.2%}")
    if p >= alpha:
        why.append(f"signed-rank p={p:.2g} >= {alpha:g}")
    if gain < min_gain:
        why.append(f"point gain {gain:+.2%} below min_gain {min_gain:.2%}")
    return ObjectiveLook(
        n, gain, lo, hi, est, p, "continue", f"unclear after {n} pairs: {ci}; " + "; ".join(why)
    )


def sequential_schedule(initial: int, step: int, max_pairs: int) -> list[int]:
    """Pair counts at which the judge looks: initial, initial+step, ..., max."""
    out = [min(initial, max_pairs)]
    while out[-1] < max_pairs:
        out.append(min(out[-1] + step, max_pairs))
    return out


def run_sequential(
    draw_pairs,
    *,
    min_gain: float,
    noise_margin,
    initial: int = 10,
    step: int = 10,
    max_pairs: int = 30,
    seed: int = 0,
    n_boot: int = N_BOOT,
    level: float = 0.95,
    alpha: float = 0.01,
) -> tuple[str, ObjectiveLook]:
    """The sequential design on its own, for simulations: ``draw_pairs(k)``
    returns k more per-pair log gains. Returns (decision, last look) with
    decision in accept | reject | inconclusive. ``noise_margin`` is a number or
    a function of the log gains so far (see ``Calibration.margin_with``)."""
    g = np.empty(0)
    look = None
    for target in sequential_schedule(initial, step, max_pairs):
        g = np.concatenate([g, np.asarray(draw_pairs(target - g.size), dtype=float)])
        margin = noise_margin(g) if callable(noise_margin) else noise_margin
        look = judge_objective(
            g,
            min_gain=min_gain,
            noise_margin=margin,
            seed=seed,
            n_boot=n_boot,
            level=level,
            alpha=alpha,
        )
        if look.decision != "continue":
            return look.decision, look
    return "inconclusive", look


# ---- descriptive warnings -------------------------------------------------


def bimodality_coefficient(x) -> float:
    """Sarle's bimodality coefficient; > 0.555 hints at two modes."""
    x = np.asarray(x, dtype=float)
    n = x.size
    if n < 8 or np.allclose(x, x[0]):
        return 0.0
    g = float(_st.skew(x, bias=False))
    k = float(_st.kurtosis(x, bias=False))
    return (g * g + 1) / (k + 3 * (n - 1) ** 2 / ((n - 2) * (n - 3)))


def _has_gap(x) -> bool:
    """Two clusters: the largest gap between sorted values splits them into
    groups of >= 25% each and is > 3x the larger within-group spread."""
    a = np.sort(np.asarray(x, dtype=float))
    n = a.size
    if n < 8:
        return False
    lo, hi = n // 4, n - n // 4
    gaps = np.diff(a)
    i = lo - 1 + int(np.argmax(gaps[lo - 1 : hi]))
    left, right = a[: i + 1], a[i + 1 :]
    within = max(np.ptp(left), np.ptp(right), 1e-12)
    return gaps[i] > 3 * within and gaps[i] > 0.02 * abs(np.median(a))


def value_warnings(name: str, values, *, cv_limit: float = 0.05, far: float = 0.5) -> list[str]:
    """Warnings about one arm's per-run values: high spread, multimodality,
    min/max far from the median."""
    x = np.asarray(values, dtype=float)
    out: list[str] = []
    if x.size < 3:
        return out
    med = float(np.median(x))
    if med == 0:
        return out
    mean = float(np.mean(x))
    cv = float(np.std(x, ddof=1) / abs(mean)) if mean else 0.0
    if cv > cv_limit:
        out.append(f"{name}: high run-to-run spread (CV {cv:.1%})")
    if _has_gap(x) or bimodality_coefficient(x) > 0.555 and x.size >= 10 and cv > 0.02:
        out.append(f"{name}: values look multimodal (two clusters of runs)")
    lo, hi = float(np.min(x)), float(np.max(x))
    if hi > med * (1 + far) or lo < med * (1 - far / (1 + far)):
        out.append(f"{name}: min/max far from the median ({lo:.4g} .. {hi:.4g}, median {med:.4g})")
    return out
