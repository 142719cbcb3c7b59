"""What judging every run costs the verifier, per run (issue 17).

Two costs are new per run:

* the fresh export of the arm's checkout each run sees
  (``verifier.export.fresh_export`` + its removal), on the example repos;
* the quality judging of every run (``guards.Evaluator``): the snapshot and
  digest of the run's outputs as it ends, and each quality guard on each
  candidate run vs Bk and B0 (once: cached across looks), on outputs shaped
  like tiny-tts's (24 utterances of 2 s, 16 kHz WAVs, transcripts, lengths;
  the shipped config's three quality guards).

Both are compared with a tiny-tts run (server + client + evaluator, ~5 s on
two cores; ``examples/tiny-tts/.rsi/config.toml``).

    .venv/bin/python benchmarks/verifier_per_run.py [--runs 20]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import wave
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from verifier.config import VerifyConfig  # noqa: E402
from verifier.export import fresh_export  # noqa: E402
from verifier.guards import Evaluator  # noqa: E402
from verifier.protocol import BenchResult  # noqa: E402
from verifier.runner import RunRecord  # noqa: E402

TINY_TTS_RUN_S = 5.0
UTTERANCES, SECONDS, RATE = 24, 2.0, 16_000


def export_cost(src: Path, runs: int, tmp: Path) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        d = fresh_export(src, tmp)
        shutil.rmtree(d)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _outputs(d: Path, rng: np.random.Generator, flip: bool) -> dict:
    t = np.arange(int(SECONDS * RATE)) / RATE
    d.mkdir(parents=True)
    for k in range(UTTERANCES):
        pcm = np.round(9000 * np.sin(2 * np.pi * (150 + 10 * k) * t))
        if flip:
            pcm[::200] += 1
        with wave.open(str(d / f"{k:02d}.wav"), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(RATE)
            w.writeframes(pcm.astype("<i2").tobytes())
    texts = [f"the quick brown fox number {k}" for k in range(UTTERANCES)]
    return {"transcripts": texts, "references": texts, "audio_samples": [t.size] * UTTERANCES}


def evaluator_cost(runs: int, tmp: Path) -> tuple[float, float]:
    """(seconds per run as it ends: snapshot + digest; seconds per candidate
    run for every quality guard vs Bk and B0)."""
    cfg = VerifyConfig.from_toml((ROOT / "examples/tiny-tts/.rsi/config.toml").read_text())
    arms = {"b0": tmp, "bk": tmp, "candidate": tmp}
    ev = Evaluator(cfg, "tts", arms)
    on_run = ev.on_run_for(cfg.quality_for("tts"), arms)
    rng = np.random.default_rng(0)
    snap_times = []
    for i in range(runs):
        for arm in arms:
            d = tmp / f"{arm}-{i}"
            res = BenchResult(metrics={"throughput": 1.0}, outputs=_outputs(d, rng, arm == "candidate"))
            rec = RunRecord(ok=True, result=res, output_dir=str(d))
            t0 = time.perf_counter()
            on_run(arm, rec, i)
            snap_times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    for q in cfg.quality_for("tts"):
        for ref in ("bk", "b0"):
            ev.quality_guard(q, ref)
    judge_per_run = (time.perf_counter() - t0) / runs
    return statistics.median(snap_times), judge_per_run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rsi-per-run-") as tmp:
        work = Path(tmp)
        rows = [
            (f"fresh export of {name} + removal", export_cost(ROOT / path, args.runs, work))
            for name, path in (("examples/tiny-tts", "examples/tiny-tts"),
                               ("tests/adversarial/target", "tests/adversarial/target"))
        ]  # fmt: skip
        snap, judge = evaluator_cost(args.runs, work)
    rows += [
        ("quality snapshot + digest of one run (24 WAVs of 2 s)", snap),
        ("quality guards on one candidate run vs Bk and B0 (3 guards)", judge),
    ]
    w = max(len(n) for n, _ in rows) + 2
    print(f"verifier cost per run (median of {args.runs}; share of a {TINY_TTS_RUN_S:g} s tiny-tts run)\n")
    print(f"{'what':<{w}}{'ms':>9}{'% of run':>10}")
    for name, v in rows:
        print(f"{name:<{w}}{v * 1000:>9.1f}{v / TINY_TTS_RUN_S * 100:>9.2f}%")
    # per pair of three arms: three exports + three snapshots + one candidate judged
    pair = 3 * rows[0][1] + 3 * snap + judge
    print(f"\nper pair (3 arms: 3 exports, 3 snapshots, 1 candidate run judged): {pair * 1000:.0f} ms "
          f"vs {3 * TINY_TTS_RUN_S:g} s of runs ({pair / (3 * TINY_TTS_RUN_S) * 100:.1f}%)")


if __name__ == "__main__":
    main()
