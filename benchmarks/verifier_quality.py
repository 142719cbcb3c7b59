"""How good is the verifier's decision rule? A table of its error rates.

Synthetic part: per-run times drawn as lognormal noise (CV 1%, 3%, 5%) with a
linear drift (+4% across the run sequence) and outliers (2% of runs 15-50%
slower), run in the same randomized ABBA blocks the judge uses, fed to the
judge's own sequential decision (``verifier.stats.run_sequential``) with a
noise margin from a simulated 6-pair A/A calibration refined by the
verification's own pairs, exactly as in
``verifier.judge.verify``. Reported per row:

* false-accept rate on A/A (true gain 0; target <= 1%);
* power: acceptance rate for true gains of +2% and +5% (target >= 90% for +5%
  at CV 3%);
* mean pairs used by the sequential design versus the fixed-n design (always
  ``max_pairs``), and the fixed-n design's own acceptance rate.

Real part: ``verifier.judge.verify`` end to end on a CPU loop benchmark in two
temporary checkouts (A/A and a candidate doing 15% less work), a few trials.

Usage: python benchmarks/verifier_quality.py [--trials-aa 500] [--trials 200] [--real 3]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from verifier.calibrate import Calibration
from verifier.stats import judge_objective, run_sequential

INITIAL, STEP, MAX_PAIRS = 10, 10, 30
MIN_GAIN = 0.01
DRIFT = 0.04
OUTLIER_P, OUTLIER_LO, OUTLIER_HI = 0.02, 1.15, 1.5
CAL_PAIRS = 6


class Simulator:
    """Draws paired runs of a lower-is-better time in ABBA blocks."""

    def __init__(self, rng: np.random.Generator, cv: float, gain: float, total_runs: int):
        self.rng = rng
        self.sigma = math.sqrt(math.log1p(cv * cv))
        self.cand_factor = 1 / (1 + gain)  # candidate time = base / (1 + gain)
        self.total = total_runs
        self.t = 0

    def _run(self, factor: float) -> float:
        drift = 1 + DRIFT * self.t / self.total
        self.t += 1
        x = factor * drift * math.exp(self.rng.normal(0, self.sigma))
        if self.rng.random() < OUTLIER_P:
            x *= self.rng.uniform(OUTLIER_LO, OUTLIER_HI)
        return x

    def pairs(self, k: int, cand_factor: float | None = None) -> np.ndarray:
        """k per-pair log gains (log(base / cand): positive = candidate faster)."""
        cf = self.cand_factor if cand_factor is None else cand_factor
        out = []
        while len(out) < k:
            first_base = self.rng.random() < 0.5
            order = ["b", "c"] if first_base else ["c", "b"]
            for half in (order, order[::-1]) if k - len(out) >= 2 else (order,):
                vals = {arm: self._run(1.0 if arm == "b" else cf) for arm in half}
                out.append(math.log(vals["b"]) - math.log(vals["c"]))
        return np.array(out[:k])


def trial(seed: int, cv: float, gain: float) -> tuple[str, int, bool, float]:
    rng = np.random.default_rng(seed)
    # 1 warm-up per arm + calibration + verification
    sim = Simulator(rng, cv, gain, total_runs=2 * (CAL_PAIRS + MAX_PAIRS + 1))
    cal = Calibration.from_log_ratios(sim.pairs(CAL_PAIRS, cand_factor=1.0), max_pairs=MAX_PAIRS)
    margins: list[float] = []

    def margin_fn(g: np.ndarray) -> float:
        margins.append(cal.margin_with(g, MAX_PAIRS))
        return margins[-1]

    drawn: list[np.ndarray] = []

    def draw(k: int) -> np.ndarray:
        d = sim.pairs(k)
        drawn.append(d)
        return d

    decision, look = run_sequential(
        draw,
        min_gain=MIN_GAIN,
        noise_margin=margin_fn,
        initial=INITIAL,
        step=STEP,
        max_pairs=MAX_PAIRS,
        seed=seed,
    )
    used = int(sum(d.size for d in drawn))
    # the fixed-n design: all MAX_PAIRS pairs, one look (same noise stream continued)
    full = np.concatenate(drawn + ([sim.pairs(MAX_PAIRS - used)] if used < MAX_PAIRS else []))[
        :MAX_PAIRS
    ]
    fixed = (
        judge_objective(
            full, min_gain=MIN_GAIN, noise_margin=cal.margin_with(full, MAX_PAIRS), seed=seed
        ).decision
        == "accept"
    )
    return decision, used, fixed, margins[-1]


def synthetic(trials_aa: int, trials: int) -> list[dict]:
    rows = []
    for cv in (0.01, 0.03, 0.05):
        for gain, n in ((0.0, trials_aa), (0.02, trials), (0.05, trials)):
            t0 = time.perf_counter()
            res = [
                trial(10_000 * int(cv * 100) + int(gain * 1000) * 7919 + i, cv, gain)
                for i in range(n)
            ]
            dec = [r[0] for r in res]
            rows.append(
                {
                    "cv": cv,
                    "gain": gain,
                    "trials": n,
                    "accept": dec.count("accept") / n,
                    "reject": dec.count("reject") / n,
                    "inconclusive": dec.count("inconclusive") / n,
                    "pairs": float(np.mean([r[1] for r in res])),
                    "fixed_accept": float(np.mean([r[2] for r in res])),
                    "margin": float(np.mean([r[3] for r in res])),
                    "secs": time.perf_counter() - t0,
                }
            )
            print(
                f"  cv {cv:.0%} gain {gain:+.0%}: {rows[-1]['secs']:.1f}s",
                file=sys.stderr,
                flush=True,
            )
    return rows


BENCH = r"""
import json, os, time
n = int(open("work.txt").read())
t = time.process_time()
s = 0
for i in range(n):
    s += i * i
el = time.process_time() - t
json.dump({"metrics": {"loop_cpu_s": el}}, open(os.environ["RSI_RESULT"], "w"))
"""


def real(trials: int) -> list[dict]:
    from verifier.config import VerifyConfig
    from verifier.judge import verify

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base, fast = Path(tmp, "base"), Path(tmp, "fast")
        for d, work in ((base, 400_000), (fast, 340_000)):
            d.mkdir()
            (d / "bench.py").write_text(BENCH)
            (d / "work.txt").write_text(str(work))
        cfg = VerifyConfig.from_dict(
            {
                "benchmarks": {
                    "loop": {
                        "command": f"{sys.executable} bench.py",
                        "timeout_s": 60,
                        "metrics": {"loop_cpu_s": "lower"},
                    }
                },
                "objective": {"benchmark": "loop", "metric": "loop_cpu_s", "min_gain": 0.05},
                "verifier": {"default_guards": False},
            }
        )
        for label, cand in (("A/A", base), ("-15% work (true gain +17.6%)", fast)):
            decisions, pairs, gains, secs = [], [], [], []
            for i in range(trials):
                cfg_i = cfg.model_copy(
                    update={"verifier": cfg.verifier.model_copy(update={"seed": i})}
                )
                t0 = time.perf_counter()
                v = verify(base, cand, cfg_i)
                secs.append(time.perf_counter() - t0)
                decisions.append(v.decision)
                pairs.append(v.pairs)
                gains.append(
                    v.objective.gain
                    if v.objective and v.objective.gain is not None
                    else float("nan")
                )
            rows.append(
                {
                    "case": label,
                    "decisions": decisions,
                    "pairs": float(np.mean(pairs)),
                    "gain": float(np.nanmean(gains)),
                    "secs": float(np.mean(secs)),
                }
            )
            print(f"  real {label}: {decisions}", file=sys.stderr, flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials-aa", type=int, default=500)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--real", type=int, default=3, help="trials per real case (0: skip)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = synthetic(args.trials_aa, args.trials)
    print()
    print(
        f"Synthetic: lognormal noise, drift +{DRIFT:.0%} over the sequence, {OUTLIER_P:.0%} "
        "outlier runs "
        f"x{OUTLIER_LO}-{OUTLIER_HI}; ABBA; {CAL_PAIRS}-pair A/A calibration; min_gain "
        f"{MIN_GAIN:.0%}; "
        f"pairs {INITIAL}+{STEP}..{MAX_PAIRS}; 10,000 bootstrap resamples per look"
    )
    hdr = (
        f"{'CV':>4} {'true gain':>9} {'trials':>6} {'accept':>7} {'reject':>7} {'inconcl.':>8} "
        f"{'mean pairs':>10} {'fixed-n pairs':>13} {'fixed-n accept':>14} {'margin':>7}"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        what = "FALSE-ACCEPT" if r["gain"] == 0 else "power"
        print(
            f"{r['cv']:>4.0%} {r['gain']:>+9.0%} {r['trials']:>6} {r['accept']:>7.1%} "
            f"{r['reject']:>7.1%} "
            f"{r['inconclusive']:>8.1%} {r['pairs']:>10.1f} {MAX_PAIRS:>13} "
            f"{r['fixed_accept']:>14.1%} "
            f"{r['margin']:>7.2%}  <- {what}"
        )
    aa = [r for r in rows if r["gain"] == 0]
    p5 = next(r for r in rows if r["cv"] == 0.03 and r["gain"] == 0.05)
    print()
    print(
        "targets: A/A false accepts <= 1%: "
        f"{'MET' if all(r['accept'] <= 0.01 for r in aa) else 'MISSED'} "
        f"(max {max(r['accept'] for r in aa):.1%}); power for +5% at CV 3% >= 90%: "
        f"{'MET' if p5['accept'] >= 0.90 else 'MISSED'} ({p5['accept']:.1%})"
    )
    if args.real:
        print()
        rr = real(args.real)
        print(
            "Real CPU workload (verifier.judge.verify, process-time loop, min_gain 5%, "
            "default pairs):"
        )
        for r in rr:
            print(
                f"  {r['case']:<30} decisions {', '.join(r['decisions'])}; mean gain "
                f"{r['gain']:+.1%}; "
                f"mean pairs {r['pairs']:.0f}; {r['secs']:.1f}s per verification"
            )
    print(f"\n(total {time.perf_counter() - t0:.0f}s)")


if __name__ == "__main__":
    main()
