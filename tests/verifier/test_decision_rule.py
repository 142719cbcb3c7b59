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
    ``position_bias``; and the pairs' levels (sum of the two log values)."""
    sigma = math.sqrt(math.log1p(cv * cv))
    out: list[float] = []
    levels: list[float] = []
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
            levels.append(math.log(vals["b"] * vals["c"]))
    return np.array(out[:k]), np.array(levels[:k])


def _run(cv, gain, trials, seed, position_bias=0.0, cal_cv=None):
    """(decision, last look) of ``trials`` seeded verifications, each after its
    own A/A calibration at ``cal_cv`` (default: ``cv``, a fresh calibration)."""
    out = []
    for i in range(trials):
        rng = np.random.default_rng(seed + i)
        d, levels = _pairs(
            rng, V.calibration_pairs, cv if cal_cv is None else cal_cv, 0.0, 0, position_bias
        )
        cal = Calibration.from_log_ratios(d, levels=levels, max_pairs=V.max_pairs)
        drawn = [2 * V.calibration_pairs]

        def draw(k, rng=rng, drawn=drawn):
            got = _pairs(rng, k, cv, gain, drawn[0], position_bias)
            drawn[0] += 2 * k
            return got

        out.append(
            run_sequential(
                draw,
                min_gain=0.01,
                design=DESIGN,
                margin=cal.bias_margin(),
                prior_sd=cal.per_pair_sd,
                prior_df=cal.prior_df,
                prior_level_sd=cal.level_sd,
                prior_check_sd=cal.check_sd,
            )
        )
    return out


def _rates(cv: float, gain: float, trials: int, seed: int, position_bias: float = 0.0):
    res = _run(cv, gain, trials, seed, position_bias)
    accepts = sum(decision == "accept" for decision, _ in res)
    return accepts / trials, float(np.mean([look.n for _, look in res]))


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
    # CV 1%, +2%, min_gain 1%: every run counts in an accept (issue 29), so a
    # candidate run slowed 15-50% by the simulated machine (2% of runs) costs
    # this small gain its total-time margin for ~10 pairs: the only price of the
    # rule is more pairs (the old rule: 100% within 9.6 pairs); every trial not
    # accepted is held by the every-run gain, none by the interval
    res = _run(0.01, 0.02, 120, seed=40_000)
    rate = sum(decision == "accept" for decision, _ in res) / len(res)
    pairs = float(np.mean([look.n for _, look in res]))
    assert rate >= 0.85 and pairs <= 13, (rate, pairs)
    held = [look for decision, look in res if decision != "accept"]
    assert all(look.finding == "every" and look.every_gain < 0.01 for look in held)
    assert all(look.gain >= 0.01 for look in held)


def test_power_at_cv5_within_the_cap():
    # the quality table (500 trials) shows >= 80%; 120 trials carry ~4% of noise
    rate, pairs = _rates(0.05, 0.05, 120, seed=50_000)  # bound ~27 pairs
    assert rate >= 0.72 and pairs <= 24, (rate, pairs)


def test_false_accepts_at_cv5():
    rate, _ = _rates(0.05, 0.0, 500, seed=60_000)
    assert rate <= 0.01, rate


def test_a_machine_noisier_than_at_calibration_cannot_pass_an_identical_candidate():
    """Calibrated at CV 2%, verified at CV 8% (a neighbour came): the stale
    spread let 6% of these identical candidates through (24 of 400); each look
    now checks the runs' own noise against the calibration's and sets a stale
    spread aside."""
    # 400 trials: the bound sits between the old rule (~5% accepted) and the
    # target (<= 1%, measured on 1000+ trials in benchmarks/verifier_quality.py)
    res = _run(0.08, 0.0, 400, seed=70_000, cal_cv=0.02)
    accepts = sum(d == "accept" for d, _ in res) / len(res)
    slower = sum(look.finding == "slower" for _, look in res) / len(res)
    assert accepts <= 0.02 and slower <= 0.025, (accepts, slower)
    stale = [look for _, look in res if look.noise.stale]
    assert len(stale) > 0.9 * len(res)  # found, and said
    assert "noisier than at calibration" in stale[0].noise.note()


def test_an_identical_candidate_is_rarely_called_slower():
    """Harm is decided by the repeated interval (spent alpha), not by a fixed
    97.5% bound at every look (which called 7.5% of these identical
    candidates "clearly worse", and 12.5% after a stale calibration); the
    target is <= 5%."""
    res = _run(0.08, 0.0, 400, seed=80_000)
    accepts = sum(d == "accept" for d, _ in res) / len(res)
    slower = sum(look.finding == "slower" for _, look in res) / len(res)
    assert accepts <= 0.02 and slower <= 0.025, (accepts, slower)
