"""Error rates of the objective's decision rule on fixed seeds (fast versions
of benchmarks/verifier_quality.py): the same calibration prior, design and
``run_sequential`` path that ``verifier.judge.verify`` uses."""

from __future__ import annotations

import math

import numpy as np
import pytest

from verifier.calibrate import Calibration
from verifier.config import VerifierSettings
from verifier.stats import Design, boundaries, run_sequential

V = VerifierSettings()
DESIGN = Design.from_schedule(
    V.initial_pairs, V.step, V.max_pairs, alpha=V.alpha, gamma=V.spending_gamma
)


def _pairs(rng, k: int, cv: float, gain: float, t0: int, position_bias: float = 0.0):
    """k per-pair log gains from ABBA blocks: lognormal run noise, +4% drift over
    80 runs, 2% outlier runs 15-50% slower, the second run of a pair slower by
    ``position_bias``."""
    sigma = math.sqrt(math.log1p(cv * cv))
    out: list[float] = []
    t = t0
    while len(out) < k:
        order = ("b", "c") if rng.random() < 0.5 else ("c", "b")
        for half in (order, order[::-1]):
            vals = {}
            for pos, arm in enumerate(half):
                x = (1 / (1 + gain) if arm == "c" else 1.0) * (1 + 0.04 * t / 80)
                x *= (1 + position_bias * pos) * math.exp(rng.normal(0, sigma))
                if rng.random() < 0.02:
                    x *= rng.uniform(1.15, 1.5)
                vals[arm] = x
                t += 1
            out.append(math.log(vals["b"] / vals["c"]))
    return np.array(out[:k])


def _rates(cv: float, gain: float, trials: int, seed: int, position_bias: float = 0.0):
    accepts, pairs = 0, []
    for i in range(trials):
        rng = np.random.default_rng(seed + i)
        cal = Calibration.from_log_ratios(
            _pairs(rng, V.calibration_pairs, cv, 0.0, 0, position_bias), max_pairs=V.max_pairs
        )
        drawn = [2 * V.calibration_pairs]

        def draw(k, rng=rng, drawn=drawn):
            d = _pairs(rng, k, cv, gain, drawn[0], position_bias)
            drawn[0] += 2 * k
            return d

        decision, look = run_sequential(
            draw,
            min_gain=0.01,
            design=DESIGN,
            margin=cal.bias_margin(),
            prior_sd=cal.per_pair_sd,
            prior_df=cal.prior_df,
        )
        accepts += decision == "accept"
        pairs.append(look.n)
    return accepts / trials, float(np.mean(pairs))


def test_boundaries_spend_alpha_exactly():
    looks = DESIGN.looks
    b = np.array(boundaries(looks, 0.01, V.spending_gamma))
    assert np.all(np.diff(b[1:]) < 0)  # the spending function lowers the bar as data grows
    paths = np.random.default_rng(0).normal(size=(200_000, looks[-1])).cumsum(axis=1)
    z = np.stack([paths[:, n - 1] / math.sqrt(n) for n in looks], axis=1)
    assert np.mean((z >= b).any(axis=1)) == pytest.approx(0.01, abs=0.0012)
    with pytest.raises(ValueError, match="not a planned look"):
        DESIGN.z_boundary(7)


def test_false_accepts_on_aa_with_drift_and_outliers():
    rate, pairs = _rates(0.03, 0.0, 500, seed=10_000)
    assert rate <= 0.01, rate
    assert pairs > 15  # no early stop on noise


def test_false_accepts_under_a_position_bias():
    rate, _ = _rates(0.03, 0.0, 250, seed=20_000, position_bias=0.03)
    assert rate <= 0.01, rate


def test_power_near_the_bound():
    rate, pairs = _rates(0.03, 0.05, 120, seed=30_000)  # bound ~9.8 pairs
    assert rate >= 0.90 and pairs <= 14, (rate, pairs)
    rate, pairs = _rates(0.01, 0.02, 120, seed=40_000)  # bound ~6.6 pairs
    assert rate >= 0.90 and pairs <= 10, (rate, pairs)


def test_power_at_cv5_within_the_cap():
    # the quality table (500 trials) shows >= 80%; 120 trials carry ~4% of noise
    rate, pairs = _rates(0.05, 0.05, 120, seed=50_000)  # bound ~27 pairs
    assert rate >= 0.72 and pairs <= 24, (rate, pairs)


def test_false_accepts_at_cv5():
    rate, _ = _rates(0.05, 0.0, 500, seed=60_000)
    assert rate <= 0.01, rate
