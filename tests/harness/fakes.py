"""A deterministic stand-in for the verifier, for tests of the loop's logic.

It reads the synthetic target's settings instead of timing it: the
throughput ratio is delay(baseline) / delay(candidate); a transcript cut
short fails the output-length guard. Optional ``RSI_FAKE_VERIFY_SLEEP``
seconds per verification give a kill test time to strike.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from verifier.calibrate import Calibration
from verifier.verdict import GuardResult, Interval, ObjectiveResult, Verdict

CALLS: list[tuple[str, str, str]] = []


def delay(tree: Path) -> float:
    m = re.search(r"^delay_ms\s*=\s*(\d+)", (Path(tree) / "app" / "settings.toml").read_text(), re.MULTILINE)
    return float(m.group(1))


def speed(tree: Path) -> float:
    """Requests per second the tree would serve: 1/delay, 20% more with app/boost.txt."""
    return (1.2 if (Path(tree) / "app" / "boost.txt").exists() else 1.0) / delay(tree)


def truncated(tree: Path) -> bool:
    return "WORDS[0]" in (Path(tree) / "app" / "core.py").read_text()


class FakeVerifier:
    name = "fake"

    def calibrate(self, ref, spec, *, progress=None):
        pairs = spec.verify.verifier.calibration_pairs
        CALLS.append(("calibrate", str(ref), f"pairs={pairs}"))
        # RSI_FAKE_NOISY=1: always too noisy; =<n>: too noisy with fewer than n A/A pairs
        flag = os.environ.get("RSI_FAKE_NOISY", "")
        noisy = flag == "1" or (flag.isdigit() and int(flag) > 1 and pairs < int(flag))
        sd = 0.2 if noisy else 0.005
        cal = Calibration.from_log_ratios([sd, -sd, sd / 2], max_pairs=8, benchmark="speed", metric="throughput")
        return cal

    def verify(self, baseline, candidate, spec, *, b0, shas, calibration, progress=None):
        CALLS.append(("verify", str(baseline), str(candidate)))
        if progress:
            progress("measuring", {"phase": "measure"})
        time.sleep(float(os.environ.get("RSI_FAKE_VERIFY_SLEEP", "0")))
        ratio = speed(candidate) / speed(baseline)
        gain = ratio - 1
        b0_gain = (speed(candidate) / speed(b0) - 1) if b0 else gain
        guard_ok = not truncated(candidate)
        guards = (
            GuardResult(name="length(transcripts)", kind="output_length", against="bk",
                        value=1.0 if guard_ok else 0.5, status="pass" if guard_ok else "fail"),
        )
        if not guard_ok:
            decision, reason = "reject", "guard failed: length(transcripts) changed by -50%"
        elif gain >= spec.min_gain:
            decision, reason = "accept", f"throughput {gain:+.1%}"
        else:
            decision, reason = "reject", f"throughput {gain:+.1%} below min_gain {spec.min_gain:.0%}"
        return Verdict(
            decision=decision,
            reason=reason,
            benchmark="speed",
            objective=ObjectiveResult(
                benchmark="speed", metric="throughput", direction="higher", ratio=ratio,
                ratio_ci=Interval(low=ratio * 0.98, high=ratio * 1.02), gain=gain, gain_vs_b0=b0_gain,
                min_gain=spec.min_gain,
            ),
            guards=guards,
            shas=shas,
        )


def factory() -> FakeVerifier:
    return FakeVerifier()
