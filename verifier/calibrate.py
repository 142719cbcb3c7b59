"""Calibration: A/A pairs of one ref, to learn the benchmark's noise.

Definitions (objective metric, per-pair log ratios d of A/A pairs):

* ``per_pair_sd``: the spread of d as the judge measures its own
  (``stats.robust_location``: outlier pairs set aside, classic standard
  deviation of the rest), about sqrt(2) x the run-to-run CV; the judge pools it with
  each verification's own spread (``prior_df`` degrees of freedom), which
  makes its early looks far sharper;
* ``bias``: an A/A offset larger than its own noise (|t| above the 99.9%
  point): a bias between arms that the ABBA design failed to cancel (caching
  tied to a checkout, carry-over). It is the only margin an accepted gain's
  interval must clear: ``noise_margin = max(floor, bias)``. Noise itself is
  not added again: the sequential test already accounts for it;
* ``check_sd`` and ``level_sd``: the A/A gains' spread and the pairs'
  levels' spread (sum of a pair's two log values, after a linear trend),
  each after far outliers: what every look of a verification checks its own
  noise against (``stats.noise_check``), so a machine that got noisier after
  calibration is judged by the noise it shows, never by this one;
* ``spread``: the A/A ratio's standard error at ``max_pairs`` pairs (shown);
* ``min_detectable_gain``: the smallest true gain the judge accepts with
  probability ``power`` (``[verifier] feasibility_power``, 90% by default)
  within ``max_pairs`` pairs:
  ``margin + (t_final + z_power) * per_pair_sd / sqrt(max_pairs)``, with
  ``t_final`` the design's critical value at its last look.

``ok_for(min_gain)`` refuses a task whose ``min_gain`` is below that, saying
what would make it feasible and where the noise comes from: ``noise_source``
(``steady``, ``machine``, ``benchmark``) and ``noise_note``, from the per-run
CPU time, context switches, throttled time and a fixed machine probe
(``verifier.noise``).
"""

from __future__ import annotations

import math
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict
from scipy import stats as _st

from .cells import cell_bench, cell_isolation, cells_of
from .config import ConfigError, Direction, VerifyConfig
from .fingerprint import collect
from .isolation import Isolation, resolve_cpus
from .measure import Progress, Session, hidden_env
from .noise import NoiseReading, classify, machine_probe
from .stats import (
    POOL_MIN_PAIRS,
    Design,
    check_spread,
    huber_location,
    level_keep,
    level_spread,
    log_ratios,
    robust_location,
)
from .verdict import Fingerprint, RunError

POWER = 0.90
BIAS_T = 3.3  # |t| of an A/A offset beyond which it is a bias (two-sided ~0.1%)


class Calibration(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    benchmark: str = ""
    metric: str = ""
    direction: Direction = "higher"
    pairs: int = 0
    max_pairs: int = 30
    level: float = 0.95
    floor: float = 0.0
    alpha: float = 0.01
    power: float = POWER
    """The power at ``min_gain`` that ``ok_for`` demands ([verifier] feasibility_power)."""
    per_pair_sd: float = 0.0
    check_sd: float = 0.0
    level_sd: float = 0.0
    """``check_sd``: the A/A gains' spread as ``stats.check_spread`` measures it;
    ``level_sd``: the spread of the A/A pairs' levels (sum of a pair's two log
    values, after a linear trend). What each verification checks its own
    noise against (``stats.noise_check``); 0 in older calibrations."""
    aa_gain: float = 0.0
    bias: float = 0.0
    spread: float = 0.0
    noise_margin: float = 0.0
    min_detectable_gain: float = 0.0
    noise_source: str = "unknown"
    """steady | machine | benchmark | unknown (``verifier.noise.classify``)."""
    noise_note: str = ""
    fingerprint: Fingerprint | None = None
    error: RunError | None = None
    warnings: tuple[str, ...] = ()
    cost_note: str = ""
    """A serving benchmark that spends most of its wall time starting servers:
    its measured share and the ``runs_per_start`` that would raise it
    (``session_hint``); '' otherwise."""

    @classmethod
    def from_log_ratios(
        cls,
        d,
        *,
        max_pairs: int,
        benchmark: str = "",
        metric: str = "",
        direction: Direction = "higher",
        level: float = 0.95,
        floor: float = 0.0,
        alpha: float = 0.01,
        power: float = POWER,
        fingerprint: Fingerprint | None = None,
        warnings: tuple[str, ...] = (),
        levels=None,
    ) -> Calibration:
        """From the A/A pairs' log ratios ``d`` (and their ``levels``: each
        pair's sum of log values, in pair order)."""
        d = np.asarray(d, dtype=float)
        if d.size < 2:
            raise ValueError("calibration needs at least 2 A/A pairs")
        loc = huber_location(d)
        lv = np.asarray(levels if levels is not None else [], dtype=float)
        # the judge's looks set aside pairs whose level shows a slowed run
        # (``level_keep``) before they measure a spread: so does the
        # calibration, and its level spread is the kept pairs' (like with like)
        keep = level_keep(lv, d.size)
        if keep.sum() < POOL_MIN_PAIRS:
            keep[:] = True
        kept = d[keep]
        level_sd = level_spread(lv[keep] if lv.size == d.size else lv) if lv.size >= 4 else 0.0
        sd = robust_location(kept).scale  # the same spread the judge's own looks use
        offset = abs(loc.point)
        bias = offset if loc.se > 0 and offset > BIAS_T * loc.se else 0.0
        if bias:
            note = (
                f"A/A offset {math.expm1(offset):+.2%} exceeds its noise: the two arms "
                "of an ABBA block differ systematically (caching? carry-over?); it becomes "
                "the bias margin an accepted gain must clear"
            )
            warnings = (*warnings, note)
        margin = max(floor, math.expm1(bias))
        return cls(
            benchmark=benchmark,
            metric=metric,
            direction=direction,
            pairs=int(d.size),
            max_pairs=max_pairs,
            level=level,
            floor=floor,
            alpha=alpha,
            per_pair_sd=sd,
            check_sd=check_spread(kept),
            level_sd=level_sd,
            aa_gain=math.expm1(offset),
            bias=bias,
            spread=math.expm1(sd / math.sqrt(max_pairs)),
            noise_margin=margin,
            min_detectable_gain=_mdg(sd, max_pairs, margin, alpha, d.size, power),
            power=power,
            fingerprint=fingerprint,
            warnings=warnings,
        )

    @property
    def prior_df(self) -> int:
        """Degrees of freedom the calibration's spread adds to a verification's."""
        return max(self.pairs - 1, 0) if self.error is None else 0

    def bias_margin(self, floor: float | None = None) -> float:
        """The margin an accepted gain's interval must clear: the A/A bias, or the floor."""
        floor = self.floor if floor is None else floor
        return max(floor, math.expm1(self.bias))

    def ok_for(self, min_gain: float) -> tuple[bool, str]:
        if self.error is not None:
            return False, f"calibration failed ({self.error.stage}): {self.error.message}"
        mdg = self.min_detectable_gain
        noise = (
            f"A/A per-pair spread {self.per_pair_sd:.2%} over {self.pairs} pairs, "
            f"bias margin {self.noise_margin:.2%}"
        )
        if min_gain >= mdg:
            return True, (
                f"ok: min_gain {min_gain:.2%} is detectable (smallest gain accepted with "
                f"{self.power:.0%} probability: {mdg:.2%} with {self.max_pairs} pairs; {noise})"
            )
        need = self.pairs_needed(min_gain)
        how = f"raise [verifier] max_pairs to {need}, " if need is not None else ""
        return False, (
            f"benchmark '{self.benchmark}' is too noisy for min_gain {min_gain:.2%}: with up to "
            f"{self.max_pairs} pairs it can only detect gains of {mdg:.2%} or more ({noise}). "
            f"Raise min_gain to at least {math.ceil(mdg * 1000) / 1000:.1%}, {how}or make the "
            "benchmark "
            f"steadier (longer runs, pinned threads, fewer background jobs)."
            + (f" Where the noise comes from: {self.noise_note}." if self.noise_note else "")
        )

    def pairs_needed(self, min_gain: float, cap: int = 1000) -> int | None:
        n = max(self.max_pairs, 2)
        while n <= cap:
            mdg = _mdg(self.per_pair_sd, n, self.noise_margin, self.alpha, self.pairs, self.power)
            if mdg <= min_gain:
                return n
            n += 10
        return None


@lru_cache(maxsize=8)
def _final_z(alpha: float) -> float:
    """The default design's z boundary at its last look (4, 6, ..., 30 pairs); it
    varies little with the number of looks, so it stands in for any budget."""
    return Design.from_schedule(4, 2, 30, alpha=alpha).z_boundary(30)


def _mdg(
    sd: float, n: int, margin: float, alpha: float, cal_pairs: int, power: float = POWER
) -> float:
    """Smallest gain accepted with ~90% power at the last look of ``n`` pairs."""
    df = n - 1 + max(cal_pairs - 1, 0)
    crit = float(_st.t.isf(_st.norm.sf(_final_z(alpha)), df))
    z = crit + _st.norm.ppf(power)
    return math.expm1(math.log1p(margin) + z * sd / math.sqrt(n))


def _probe_after_run(arm: str, rec, index: int) -> None:
    """The machine's speed right after each run (``noise.machine_probe``)."""
    rec.extra["probe_s"] = machine_probe()


def noise_reading(s: Session) -> NoiseReading:
    """Per-run readings of an A/A session, interleaved pair by pair (a_i, b_i)."""

    def col(get) -> np.ndarray | None:
        try:
            vals = [[get(r) for r in s.records[arm]] for arm in ("a", "b")]
            arr = np.asarray(vals, dtype=float).T.ravel()
        except (TypeError, ValueError):
            return None
        return None if np.isnan(arr).any() else arr

    def ext(key):
        return lambda r: float(r.extra[key]) if key in r.extra else math.nan

    wall = col(lambda r: r.wall_s)
    return NoiseReading(
        wall=np.empty(0) if wall is None else wall,  # too few runs: classify says "unknown"
        cpu=col(lambda r: r.cpu_s if r.cpu_s else math.nan),
        involuntary=col(ext("involuntary_switches")),
        throttled=col(ext("throttled_s")),
        probe=col(ext("probe_s")),
    )


SHARE_TARGET = 0.7
"""The measured share ``session_hint`` sizes ``runs_per_start`` for."""


def session_hint(bench, records: list, k: int, wall_s: float) -> str:
    """How much of a serving benchmark's measuring wall time was its client
    windows, and, when starting servers took most of it, the
    ``runs_per_start`` K that would measure ``SHARE_TARGET`` of it: with a
    start S, a window w and the rest c of each run, a session of K runs
    measures K w / (S + K (w + c)). '' when starting servers took less than
    half the wall time, the benchmark is not serving, or a run had no
    ``startup_s``."""
    if not bench.serving or not records or wall_s <= 0:
        return ""
    windows = [r.wall_s for r in records]
    first = [r for r in records if not r.extra.get("session_run")]  # one start per session
    if any(r.startup_s is None for r in first) or not first:
        return ""
    w = sum(windows) / len(windows)
    start = sum(r.startup_s for r in first) / len(first)
    if start * len(first) < 0.5 * wall_s:  # starting servers is not most of it
        return ""
    c = max(0.0, (wall_s - sum(windows) - start * len(first)) / len(records))
    t = SHARE_TARGET
    said = (f"measured share {sum(windows) / wall_s:.0%}: starting the server took {start:.1f} s a start, a client "
            f"window {w:.2f} s (runs_per_start = {k})")
    room = w - t * (w + c)
    if room <= 0:
        return (f"{said}; each run's window is too short for {t:.0%} at any runs_per_start "
                f"(the rest of a run takes {c:.2f} s): make a client run longer")
    want = min(math.ceil(t * start / room), 64)
    if want <= k:
        return ""
    return (f"{said}; runs_per_start = {want} would measure about "
            f"{want * w / (start + want * (w + c)):.0%} of the time "
            "(needs hidden inputs: docs/configuration.md, runs_per_start)")


def calibrate(
    ref: Path,
    config: VerifyConfig,
    *,
    benchmark: str | None = None,
    pairs: int | None = None,
    progress: Progress | None = None,
    isolation: Isolation | None = None,
) -> Calibration:
    """Run A/A pairs of one checkout; never raises on benchmark failure
    (the result then has ``error`` set and ``ok_for`` refuses). ``isolation``:
    where every run happens (see ``verifier.isolation``)."""
    v = config.verifier
    name = benchmark or config.objective.benchmark
    fp = collect()
    metric = config.objective.metric if name == config.objective.benchmark else "wall_s"
    base: dict[str, Any] = dict(
        benchmark=name,
        metric=metric,
        max_pairs=v.max_pairs,
        level=v.level,
        floor=v.min_noise_margin,
        alpha=v.alpha,
        power=v.feasibility_power,
        fingerprint=fp,
    )
    try:
        bench = config.benchmark(name)
        env, drop = hidden_env(config)
        cell = cells_of(bench)[0] if bench.matrix is not None else None
        bench = cell_bench(bench, cell)  # A/A at the primary cell: where the objective is decided
        isolation = cell_isolation(isolation, cell)
    except (ConfigError, ValueError) as e:
        return Calibration(**base, error=RunError(stage="config", message=str(e)))
    direction = bench.known_metrics().get(metric, "lower")
    n = pairs or v.calibration_pairs
    ref = Path(ref)
    try:
        cpus = resolve_cpus(v.cpus)
        if cpus:  # the CPU set it measured on ("auto": the least busy ones now)
            base["fingerprint"] = fp.model_copy(update={"extra": {**fp.extra, "cpuset": cpus}})
        with Session(
            bench,
            {"a": ref, "b": ref},
            seed=v.seed,
            extra_env=env,
            drop_env=drop,
            progress=progress,
            on_run=_probe_after_run,
            isolation=isolation,
            cpus=(cell.cpus if cell else None) or cpus,
            threads=v.threads,
        ) as s:
            err = s.setup() or s.warmup(v.warmup)
            t_pairs = time.perf_counter()
            err = err or s.add_pairs(n)
            if err is not None:
                return Calibration(**base, direction=direction, error=err)
            hint = session_hint(bench, [*s.records["a"], *s.records["b"]], s.k,
                                time.perf_counter() - t_pairs)
            a, b = s.values("a", metric), s.values("b", metric)
            if np.any(a <= 0) or np.any(b <= 0) or np.isnan(a).any() or np.isnan(b).any():
                return Calibration(
                    **base,
                    direction=direction,
                    error=RunError(
                        stage="calibration",
                        message=f"metric '{metric}' must be positive in every run",
                    ),
                )
            d = s.by_session(log_ratios(b, a))  # runs_per_start K > 1: A/A session pairs
            warnings = []
            from .stats import value_warnings

            for arm, vals in (("A", a), ("A'", b)):
                warnings += value_warnings(f"{metric} ({arm})", vals)
            cal = Calibration.from_log_ratios(
                d,
                direction=direction,
                warnings=tuple(warnings),
                levels=s.by_session(np.log(a) + np.log(b)),
                **base,
            )
            source, note = classify(cal.per_pair_sd, noise_reading(s))
            return cal.model_copy(update={"noise_source": source, "noise_note": note,
                                          "cost_note": hint})
    except Exception as e:  # noqa: BLE001 - never raise on a benchmark's behalf
        return Calibration(
            **base, direction=direction, error=RunError(stage="calibration", message=repr(e))
        )
