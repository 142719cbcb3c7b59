"""Where a benchmark's run-to-run noise comes from: the machine or the benchmark.

Calibration runs the same checkout in both arms (A/A), so any spread is noise.
Per run the verifier has, measured from outside the benchmark: ``wall_s``,
``cpu_s`` (user + system), involuntary and voluntary context switches,
throttled time (containers), and ``probe_s``: the time of a fixed piece of
CPU work (``machine_probe``) done by the verifier itself right after the run.
``classify`` reads them:

* ``steady``: the objective's A/A per-pair spread is below ``STEADY_SD``;
* ``machine``: the machine's speed or availability varies: wall time varies
  while CPU time does not (the runs waited: preempted, throttled, I/O), or
  slow runs are the ones with many involuntary context switches (preempted)
  or throttled time, or the verifier's own fixed probe varies with the runs
  or by at least half the benchmark's spread (the CPU itself ran slower:
  other load, frequency, a VM's stolen time);
* ``benchmark``: none of that: CPU time varies as much as wall time while the
  machine probe stays steady, so the benchmark's own work varies (random
  inputs, warm-up, garbage collection, thread scheduling inside it);
* ``unknown``: too few readings to tell.

Pure functions over arrays; no I/O except ``machine_probe``.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass

import numpy as np
from scipy import stats as _st

STEADY_SD = 0.01  # per-pair spread of log ratios below which noise does not matter
WAIT_SHARE = 0.5  # CPU-time spread below this share of the wall spread: the runs waited
CORR = 0.5  # a rank correlation with wall time above this explains the noise
THROTTLED_SHARE = 0.01  # throttled for more than 1% of a run
_PROBE = bytes(1 << 21)


def machine_probe(rounds: int = 4) -> float:
    """Seconds of a fixed CPU-bound piece of work (hashing 8 MiB, ~10-20 ms)."""
    t0 = time.perf_counter()
    for _ in range(rounds):
        hashlib.blake2b(_PROBE).digest()
    return time.perf_counter() - t0


@dataclass(frozen=True)
class NoiseReading:
    """Per-run readings of one calibration, in run order (both arms)."""

    wall: np.ndarray
    cpu: np.ndarray | None = None
    involuntary: np.ndarray | None = None
    throttled: np.ndarray | None = None
    probe: np.ndarray | None = None


def _pair_sd(x: np.ndarray) -> float:
    """Per-pair spread of consecutive runs' log ratios (run i vs i+1, like A/A pairs)."""
    lx = np.log(x)
    d = lx[1::2][: lx[0::2].size] - lx[0::2][: lx[1::2].size]
    if d.size < 2:
        return math.nan
    med = np.median(d)
    return float(1.4826 * np.median(np.abs(d - med))) or float(np.std(d, ddof=1))


def _corr(a: np.ndarray | None, b: np.ndarray) -> float:
    if a is None or a.size != b.size or a.size < 6 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return math.nan
    return float(_st.spearmanr(a, b).statistic)


def classify(objective_sd: float, r: NoiseReading) -> tuple[str, str]:
    """(source, explanation) for an A/A calibration: see the module docstring."""
    if objective_sd <= STEADY_SD:
        return "steady", f"A/A per-pair spread {objective_sd:.2%}: steady"
    wall = np.asarray(r.wall, dtype=float)
    if wall.size < 6 or np.any(wall <= 0):
        return "unknown", "too few runs to tell where the noise comes from"
    found = []
    wall_sd = _pair_sd(wall)
    cpu_sd = math.nan
    if r.cpu is not None and r.cpu.size == wall.size and np.all(r.cpu > 0):
        cpu_sd = _pair_sd(r.cpu)
        if cpu_sd < WAIT_SHARE * wall_sd:
            found.append(
                f"wall time varies ({wall_sd:.1%} per pair) while CPU time is steady "
                f"({cpu_sd:.1%}): the runs waited (preempted, throttled or I/O)"
            )
    c = _corr(r.involuntary, wall)
    if c > CORR:
        found.append(
            f"slow runs had more involuntary context switches (rank corr {c:.2f}): preempted"
        )
    if r.throttled is not None and r.throttled.size == wall.size:
        share = float(np.max(r.throttled / wall))
        if share > THROTTLED_SHARE:
            found.append(f"runs were CPU-throttled (up to {share:.0%} of a run): a CPU quota")
    p = _corr(r.probe, wall)
    probe_sd = _pair_sd(r.probe) if r.probe is not None and r.probe.size >= 4 else math.nan
    if p > CORR or probe_sd >= WAIT_SHARE * objective_sd:
        found.append(
            f"a fixed piece of CPU work timed by the verifier after each run varies by "
            f"{probe_sd:.1%} per pair (rank corr with the runs {p:.2f}): the machine's speed "
            "varies (other load, frequency scaling, a VM's stolen time)"
        )
    if found:
        return "machine", "noisy machine: " + "; ".join(found) + (
            ". Pin CPUs ([verifier] cpus), stop background jobs, or use a quieter runner"
        )
    what = f"CPU time varies like wall time ({cpu_sd:.1%} vs {wall_sd:.1%} per pair)"
    if math.isnan(cpu_sd):
        what = f"wall time varies ({wall_sd:.1%} per pair)"
    return "benchmark", (
        f"noisy benchmark: {what}, with no sign of preemption, throttling or a slower "
        "machine: its own work varies between runs. Make it steadier (fixed inputs and "
        "seeds, more work per run, warm-up outside the timed part)"
    )


def _column(records, get) -> np.ndarray | None:
    try:
        arr = np.asarray([get(r) for r in records], dtype=float)
    except (TypeError, ValueError, KeyError):
        return None
    return None if arr.size == 0 or np.isnan(arr).any() else arr


def explain_runs(records) -> str | None:
    """Why one arm's runs (same checkout) varied, when the machine explains it:
    the ``classify`` note for consecutive runs of that arm, else None."""
    wall = _column(records, lambda r: r.wall_s)
    if wall is None or wall.size < 6 or np.any(wall <= 0):
        return None
    reading = NoiseReading(
        wall=wall,
        cpu=_column(records, lambda r: r.cpu_s if r.cpu_s else math.nan),
        involuntary=_column(records, lambda r: r.extra.get("involuntary_switches", math.nan)),
        throttled=_column(records, lambda r: r.extra.get("throttled_s", math.nan)),
    )
    source, note = classify(_pair_sd(wall), reading)
    return note if source == "machine" else None
