"""Calibration: A/A pairs of one ref, to learn the benchmark's noise.

Definitions (objective metric, per-pair log ratios d of A/A pairs):

* ``per_pair_sd``: the standard deviation of d winsorized at 3 robust sds
  (1.4826 x MAD), so one preempted run does not inflate it; about sqrt(2) x
  the run-to-run CV;
* ``spread``: how far a full verification's ratio wanders when a ref is
  compared with itself: ``per_pair_sd / sqrt(max_pairs)``; an observed A/A
  offset larger than its own noise (a bias the ABBA design failed to cancel)
  is added to it, with a warning;
* ``noise_margin = max(1%, 2 x spread)``: an accepted gain's interval must
  clear it; the judge refines the spread with each verification's own pairs
  (``margin_with``: pooled variance), since 6 pairs estimate it only roughly;
* ``min_detectable_gain``: the smallest true gain the judge accepts with about
  90% probability within ``max_pairs`` pairs:
  ``margin + (z_{0.975} + z_{0.90}) * per_pair_sd / sqrt(max_pairs)``.

``ok_for(min_gain)`` refuses a task whose ``min_gain`` is below that, saying
what would make it feasible.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict
from scipy import stats as _st

from .config import ConfigError, Direction, VerifyConfig
from .fingerprint import collect
from .measure import Progress, Session, hidden_env
from .stats import log_ratios, robust_sd
from .verdict import Fingerprint, RunError

POWER = 0.90


class Calibration(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    benchmark: str = ""
    metric: str = ""
    direction: Direction = "higher"
    pairs: int = 0
    max_pairs: int = 30
    level: float = 0.95
    floor: float = 0.01
    per_pair_sd: float = 0.0
    aa_gain: float = 0.0
    bias: float = 0.0
    spread: float = 0.0
    noise_margin: float = 0.01
    min_detectable_gain: float = 0.0
    fingerprint: Fingerprint | None = None
    error: RunError | None = None
    warnings: tuple[str, ...] = ()

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
        floor: float = 0.01,
        fingerprint: Fingerprint | None = None,
        warnings: tuple[str, ...] = (),
    ) -> Calibration:
        d = np.asarray(d, dtype=float)
        if d.size < 2:
            raise ValueError("calibration needs at least 2 A/A pairs")
        med = float(np.median(d))
        sd = robust_sd(d)
        offset = abs(med)  # the median: one outlier run is not a bias
        bias = offset if offset > 3.0 * sd / math.sqrt(d.size) else 0.0
        if bias:
            note = (
                f"A/A offset {math.expm1(offset):+.2%} exceeds its noise: the two positions "
                "of an ABBA "
                f"block differ systematically (caching? thermal?); it is added to the noise margin"
            )
            warnings = (*warnings, note)
        spread = sd / math.sqrt(max_pairs) + bias
        margin = max(floor, 2 * spread)
        return cls(
            benchmark=benchmark,
            metric=metric,
            direction=direction,
            pairs=int(d.size),
            max_pairs=max_pairs,
            level=level,
            floor=floor,
            per_pair_sd=sd,
            aa_gain=math.expm1(offset),
            bias=bias,
            spread=math.expm1(spread),
            noise_margin=margin,
            min_detectable_gain=_mdg(sd, max_pairs, margin, level),
            fingerprint=fingerprint,
            warnings=warnings,
        )

    def margin_at(self, max_pairs: int, floor: float | None = None) -> float:
        """The noise margin for a verification with a different pair budget."""
        floor = self.floor if floor is None else floor
        spread = self.per_pair_sd / math.sqrt(max_pairs) + self.bias
        return max(floor, 2 * spread)

    def margin_with(self, log_gains, max_pairs: int, floor: float | None = None) -> float:
        """The noise margin with the A/A spread refined by a verification's own
        pairs: their residual spread (``robust_sd``) is pooled with the
        calibration's by degrees of freedom. Six calibration pairs estimate a
        spread only to about +-30%; the pooled estimate is what the margin
        then uses. A candidate noisier than its baseline raises the margin."""
        floor = self.floor if floor is None else floor
        g = np.asarray(log_gains, dtype=float)
        df_c, df_v = max(self.pairs - 1, 1), g.size - 1
        if df_v < 2:
            return self.margin_at(max_pairs, floor)
        sd_v = robust_sd(g)
        sd = math.sqrt((df_c * self.per_pair_sd**2 + df_v * sd_v**2) / (df_c + df_v))
        bias = self.bias if self.bias > 3.0 * sd / math.sqrt(max(self.pairs, 1)) else 0.0
        return max(floor, 2 * (sd / math.sqrt(max_pairs) + bias))

    def ok_for(self, min_gain: float) -> tuple[bool, str]:
        if self.error is not None:
            return False, f"calibration failed ({self.error.stage}): {self.error.message}"
        mdg = self.min_detectable_gain
        noise = (
            f"A/A per-pair spread {self.per_pair_sd:.2%} over {self.pairs} pairs, "
            f"noise margin {self.noise_margin:.2%}"
        )
        if min_gain >= mdg:
            return True, (
                f"ok: min_gain {min_gain:.2%} is detectable (smallest detectable gain "
                f"{mdg:.2%} with {self.max_pairs} pairs; {noise})"
            )
        need = self.pairs_needed(min_gain)
        how = f"raise [verifier] max_pairs to {need}, " if need is not None else ""
        return False, (
            f"benchmark '{self.benchmark}' is too noisy for min_gain {min_gain:.2%}: with up to "
            f"{self.max_pairs} pairs it can only detect gains of {mdg:.2%} or more ({noise}). "
            f"Raise min_gain to at least {math.ceil(mdg * 1000) / 1000:.1%}, {how}or make the "
            "benchmark "
            f"steadier (longer runs, pinned threads, fewer background jobs)."
        )

    def pairs_needed(self, min_gain: float, cap: int = 1000) -> int | None:
        n = max(self.max_pairs, 2)
        while n <= cap:
            margin = self.margin_at(n)
            if _mdg(self.per_pair_sd, n, margin, self.level) <= min_gain:
                return n
            n += 10
        return None


def _mdg(sd: float, n: int, margin: float, level: float) -> float:
    z = _st.norm.ppf(0.5 + level / 2) + _st.norm.ppf(POWER)
    return math.expm1(math.log1p(margin) + z * sd / math.sqrt(n))


def calibrate(
    ref: Path,
    config: VerifyConfig,
    *,
    benchmark: str | None = None,
    pairs: int | None = None,
    progress: Progress | None = None,
) -> Calibration:
    """Run A/A pairs of one checkout; never raises on benchmark failure
    (the result then has ``error`` set and ``ok_for`` refuses)."""
    v = config.verifier
    name = benchmark or config.objective.benchmark
    fp = collect()
    metric = config.objective.metric if name == config.objective.benchmark else "wall_s"
    base = dict(
        benchmark=name,
        metric=metric,
        max_pairs=v.max_pairs,
        level=v.level,
        floor=v.min_noise_margin,
        fingerprint=fp,
    )
    try:
        bench = config.benchmark(name)
        env, drop = hidden_env(config)
    except (ConfigError, ValueError) as e:
        return Calibration(**base, error=RunError(stage="config", message=str(e)))
    direction = bench.known_metrics().get(metric, "lower")
    n = pairs or v.calibration_pairs
    ref = Path(ref)
    try:
        with Session(
            bench,
            {"a": ref, "b": ref},
            seed=v.seed,
            extra_env=env,
            drop_env=drop,
            progress=progress,
        ) as s:
            err = s.setup() or s.warmup(v.warmup) or s.add_pairs(n)
            if err is not None:
                return Calibration(**base, direction=direction, error=err)
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
            d = log_ratios(b, a)
            warnings = []
            from .stats import value_warnings

            for arm, vals in (("A", a), ("A'", b)):
                warnings += value_warnings(f"{metric} ({arm})", vals)
            return Calibration.from_log_ratios(
                d, direction=direction, warnings=tuple(warnings), **base
            )
    except Exception as e:  # noqa: BLE001 - never raise on a benchmark's behalf
        return Calibration(
            **base, direction=direction, error=RunError(stage="calibration", message=repr(e))
        )
