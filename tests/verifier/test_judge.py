"""verify() end to end on real benchmark runs (a timed sleep) in temporary checkouts."""

from __future__ import annotations

import math

import numpy as np

from verifier.calibrate import Calibration
from verifier.config import VerifyConfig
from verifier.fingerprint import collect
from verifier.judge import decide, verify
from verifier.stats import Design, judge_objective
from verifier.verdict import Decision

from .conftest import BASE_WORK, CONFIG


def _cfg(extra: str = "", base: str = CONFIG) -> VerifyConfig:
    return VerifyConfig.from_toml(base + extra)


#: CONFIG without the default guards, for tests about something else: the bench's
#: latency samples are 4 copies of its loop time, so the default p95 guard pools
#: them into what is nearly the slowest run of each arm, and one preempted run
#: on a shared machine decides it
NO_DEFAULT_GUARDS = CONFIG.replace("[verifier]\n", "[verifier]\ndefault_guards = false\n")
assert NO_DEFAULT_GUARDS != CONFIG
#: the accept's confirmation rule as configured by default (issue 29)
WILD_RULE = NO_DEFAULT_GUARDS.replace("accept_wild_rate = 0\n", "")
assert WILD_RULE != NO_DEFAULT_GUARDS


def test_b0_arm_and_quality_guards(checkout):
    extra = '\n[[quality]]\nkind = "wer"\noutput = "texts"\nmax = 0.0\n'
    base, b0 = checkout("base"), checkout("b0", work=int(BASE_WORK * 1.1))
    # an A/A calibration with this machine's usual spread (3%); a 30% one (as
    # this test had) is pooled into every look and, on a noisy spell (34%
    # measured on a CI run), left a real +33% undecided at the cap
    cal = Calibration.from_log_ratios(
        [0.03, -0.03, 0.025, -0.025, 0.03, -0.03], max_pairs=16, fingerprint=collect()
    )
    # 0.68x the work: +47%, as far (in log) from min_gain 5% as from the 2x review line
    v = verify(
        base, checkout("cand", work=int(BASE_WORK * 0.68)), _cfg(extra, WILD_RULE), b0=b0,
        calibration=cal,
    )
    assert v.decision == "accept", v.reason
    # the calibration's margin (bias only) bounds the verification's
    assert 0 <= v.objective.noise_margin <= cal.noise_margin + 1e-12
    assert not any("no calibration" in w for w in v.warnings)
    assert {g.against for g in v.guards if g.kind == "wer"} == {"bk", "b0"}
    # B0 does 1.1x the work, the candidate 0.68x: clearly better vs B0 too (the
    # comparison of the two gains would be a timed assertion on a shared machine)
    assert v.objective.gain_vs_b0 is not None and v.objective.gain_vs_b0 > 0.1
    # three arms, 1 warm-up each; then confirmation pairs of every arm (so
    # guards vs B0 stay paired) up to the 51 candidate runs an accept needs
    # (issue 29)
    o = v.objective
    assert o.candidate_runs == v.pairs + o.confirmation_pairs >= 51 and o.confirmation_pairs > 0
    assert v.runs == 3 * (1 + v.pairs + o.confirmation_pairs)  # confirmation: every arm
    assert any("confirmation pair(s) measured" in w for w in v.warnings), v.warnings
    assert "51 measured candidate runs" in v.reason, v.reason
    assert not any("wild-run rule off" in w for w in v.warnings), v.warnings
    garbled = verify(base, checkout("g", work=int(BASE_WORK * 0.75), mode="garbled"), _cfg(extra))
    assert garbled.decision == "reject" and "WER" in garbled.reason


def test_failed_requests_reject(checkout):
    v = verify(checkout("base"), checkout("cand", work=int(BASE_WORK * 0.75), mode="failed"), _cfg())
    assert v.decision == "reject" and "failed request" in v.reason


def test_quarantine_of_an_implausible_gain(checkout):
    v = verify(checkout("base", work=BASE_WORK * 4), checkout("cand", work=BASE_WORK // 8), _cfg())
    assert v.decision == "review" and v.quarantined and "QUARANTINED" in v.reason


def test_candidate_crash_is_an_error_not_a_regression(checkout):
    v = verify(checkout("base"), checkout("cand", mode="crash"), _cfg())
    assert v.decision == "error" and v.error.stage == "candidate"
    assert "exited with status 3" in v.error.message and "something broke" in v.error.stderr_tail
    assert v.objective is None


def test_bad_result_and_timeout_are_errors(checkout):
    v = verify(checkout("base", mode="badjson"), checkout("cand"), _cfg())
    assert (
        v.decision == "error"
        and v.error.stage == "baseline"
        and "not valid JSON" in v.error.message
    )
    cfg = _cfg(base=CONFIG.replace("timeout_s = 30", "timeout_s = 1"))
    v = verify(checkout("b2"), checkout("c2", mode="hang"), cfg)
    assert v.decision == "error" and "timed out" in v.error.message


def test_setup_failure_and_missing_hidden_seed(checkout, monkeypatch):
    cfg = _cfg(base=CONFIG.replace("timeout_s = 30", 'timeout_s = 30\nsetup = "exit 5"'))
    v = verify(checkout("base"), checkout("cand"), cfg)
    assert v.decision == "error" and "setup" in v.error.message
    monkeypatch.delenv("RSI_TEST_HIDDEN_SEED", raising=False)
    v = verify(
        checkout("b2"), checkout("c2"), _cfg('\n[hidden]\nseed_env = "RSI_TEST_HIDDEN_SEED"\n')
    )
    assert (
        v.decision == "error"
        and v.error.stage == "config"
        and "RSI_TEST_HIDDEN_SEED" in v.error.message
    )


def test_unknown_benchmark_and_missing_checkout(checkout, tmp_path):
    v = verify(checkout("base"), checkout("cand"), _cfg(), benchmark="nope")
    assert v.decision == "error" and "unknown benchmark 'nope'" in v.reason
    v = verify(checkout("b2"), tmp_path / "missing", _cfg())
    assert v.decision == "error" and v.error.stage == "candidate"


def test_guards_on_another_benchmark_run_after_acceptance(checkout):
    extra = NO_DEFAULT_GUARDS.replace(
        "[objective]",
        """[benchmarks.again]
command = "{cmd}"
timeout_s = 30
[benchmarks.again.metrics]
loop_s = "lower"

[objective]""".format(cmd=CONFIG.split('command = "')[1].split('"')[0]),
    )
    extra += '\n[[guards]]\nbenchmark = "again"\nmetric = "loop_s"\nmax_ratio = 1.05\n'
    v = verify(
        checkout("base"), checkout("cand", work=int(BASE_WORK * 0.75)), VerifyConfig.from_toml(extra)
    )
    assert v.decision == "accept", v.reason
    # the wild-run rule is off in this config: the verdict says what that lets through
    off = v.warnings[0]
    assert "with the wild-run rule off ([verifier] accept_wild_rate = 0)" in off, v.warnings
    assert "the default rule measures the 51 runs" in off
    assert f"accepted on {v.pairs} candidate run(s)" in off and f"{0.9 ** v.pairs:.0%} of the time" in off
    g = next(g for g in v.guards if g.name.startswith("loop_s <= 1.05x (again)"))
    assert g.status == "pass" and g.value < 0.9
    assert v.runs == 2 * (1 + v.pairs) + 2 * (
        1 + 8
    )  # the guard's benchmark: 1 warm-up + initial 8 pairs
    assert any(m.name.startswith("again.") for m in v.metrics)


def test_an_exception_inside_the_verifier_is_an_error_verdict(checkout, monkeypatch):
    import verifier.judge as judge

    def boom():
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(judge, "collect", boom)
    v = verify(checkout("base"), checkout("cand"), _cfg())
    assert (
        v.decision == "error" and v.error.stage == "verifier" and "disk on fire" in v.error.message
    )
    assert "Traceback" in v.error.stderr_tail


def test_decide_sends_a_candidate_slower_over_every_run_to_review_at_the_cap():
    """Issue 29: the kept pairs show +12%, every run together shows a loss (one
    run in ten 5x slower): at the cap a human looks, with both numbers."""
    rng = np.random.default_rng(7)
    n = 20
    b, c = rng.normal(0, 0.03, n), rng.normal(-math.log(1.12), 0.03, n)
    c[[3, 13]] += math.log(5.0)
    look = judge_objective(b - c, min_gain=0.05, design=Design.from_schedule(6, 2, n),
                           levels=b + c, prior_level_sd=0.03 * math.sqrt(2))
    assert look.finding == "every" and look.every_gain < 0 < look.gain
    decision, reason, quarantined = decide(look, [], n, min_gain=0.05)
    assert decision == Decision.REVIEW and not quarantined
    assert reason.startswith("the candidate is slower over every run: -")
    assert f"the cap of {n}" in reason and "never counts toward an accept" in reason
