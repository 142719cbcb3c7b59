"""What a candidate's crafted output files cost the quality guards (issue 30.3).

Each case writes one run's output files as a candidate could (a long file, a
header claiming giant sizes, a 1 Hz or 4 GHz sample rate, 65,535 channels,
a million chunks before the data, 10,000 files, an odd format), the same
files again as the reference arm's (hard links: what a comparison of Bk's
own runs reads), and judges a ``waveform`` and a ``spectral`` guard on them
in a fresh process: ``snapshot`` of both runs, then ``evaluate``, as
``guards.Evaluator`` does. It prints the growth of the process's peak RSS
over its RSS before the guards ran (``/proc/self/clear_refs`` resets the
peak), the CPU seconds, and the guard's outcome.

``--before DIR`` runs the same cases with another checkout's verifier too
(e.g. ``/work/main``: the code before the fix), each child under an address
space cap (``--cap-gib``, default 3) and a time limit (``--timeout``), so a
case that would take the host's memory ends as a MemoryError instead.

    .venv/bin/python benchmarks/untrusted_outputs.py [--before /work/main] [--only NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RATE = 16_000
sys.path.insert(0, str(ROOT))

from tests.verifier.wavcraft import pcm16  # noqa: E402
from tests.verifier.wavcraft import wav_bytes as wav

CHILD = r"""
import json, sys, time
from pathlib import Path
from verifier.config import QualityGuard
from verifier.quality import evaluate, snapshot

def kib(field):
    return next(int(ln.split()[1]) for ln in open("/proc/self/status") if ln.startswith(field + ":"))

kind, files, cand, ref, raised = sys.argv[1:6]
extra = {"max_samples": int(raised)} if raised != "0" else {}
g = QualityGuard(kind=kind, files=files, min_snr_db=40 if kind == "waveform" else None, **extra)
open("/proc/self/clear_refs", "w").write("5")
before = kib("VmRSS")
t0 = time.process_time()
try:
    key = f"files:{kind}:{files}"
    c, r = snapshot({}, [g], [Path(cand)]), snapshot({}, [g], [Path(ref)])
    res = evaluate(g, c, r, "bk")
    refused = c[key] if isinstance(c[key], ValueError) else None  # the candidate's side
    outcome = f"refused: {refused}" if refused else f"{res.status}: {res.detail}"
except MemoryError:
    outcome = "MemoryError (address space cap)"
print(json.dumps({"peak_mib": (kib("VmHWM") - before) / 1024, "cpu_s": time.process_time() - t0,
                  "outcome": outcome}))
"""


def speech_like(n: int, seed: int = 0) -> np.ndarray:
    """A tone with a slow envelope and a little noise, in [-1, 1]."""
    t = np.arange(n, dtype=np.float64)
    x = 0.4 * np.sin(2 * np.pi * 220 * t / RATE) * (0.6 + 0.4 * np.sin(2 * np.pi * t / RATE))
    return x + np.random.default_rng(seed).normal(0, 1e-3, n)


def pcm8(n: int) -> bytes:
    return (128 + np.round(100 * np.sin(np.arange(n, dtype=np.float64) * 0.05))).astype(np.uint8).tobytes()


def _one(name: str, data: Callable[[], bytes]) -> Callable[[Path], None]:
    return lambda d: (d / name).write_bytes(data())


def _many(count: int, seconds: float) -> Callable[[Path], None]:
    def write(d: Path) -> None:
        body = wav(pcm16(speech_like(int(seconds * RATE))))
        for i in range(count):
            (d / f"req-{i:05d}.wav").write_bytes(body)
    return write


MIB = 1 << 20
CASES: list[tuple[str, str, Callable[[Path], None], int]] = [
    # (name, what, writer, max_samples raised to (0: the default))
    ("honest", "24 files of 2 s, 16 kHz 16-bit (tiny-tts-like)", _many(24, 2.0), 0),
    ("long-16bit", "2^25 samples (the default bound), 16-bit 16 kHz: 64 MiB",
     _one("a.wav", lambda: wav(pcm16(speech_like(1 << 25)))), 0),
    ("long-384khz", "2^25 samples (the default bound), 16-bit at 384 kHz: 64 MiB",
     _one("a.wav", lambda: wav(pcm16(speech_like(1 << 25)), rate=384_000)), 0),
    ("long-8bit", "64 Mi samples, 8-bit: 64 MiB, over the default bound",
     _one("a.wav", lambda: wav(pcm8(64 * MIB), bits=8)), 0),
    ("long-8bit-raised", "the same with max_samples = 2^28 (after only)",
     _one("a.wav", lambda: wav(pcm8(64 * MIB), bits=8)), 1 << 28),
    ("rate-1hz", "4 MiB of 8-bit samples at 1 Hz (a spectral frame per sample)",
     _one("a.wav", lambda: wav(pcm8(4 * MIB), rate=1, bits=8)), 0),
    ("rate-4ghz", "16 KiB of samples at 4 GHz (a 2^27-point FFT)",
     _one("a.wav", lambda: wav(pcm16(speech_like(8192)), rate=4_000_000_000)), 0),
    ("channels-65535", "65,535 channels of 8-bit, 16 MiB",
     _one("a.wav", lambda: wav(pcm8(16 * MIB), channels=65535, bits=8)), 0),
    ("claims-4gib", "a data chunk claiming 4 GiB, holding 1 s",
     _one("a.wav", lambda: wav(pcm16(speech_like(RATE)), claim=2**32 - 1)), 0),
    ("chunks-1m", "a million empty chunks before the data (8 MiB)",
     _one("a.wav", lambda: wav(pcm16(speech_like(RATE)), junk_chunks=1_000_000)), 0),
    ("files-10000", "10,000 files of 0.1 s", _many(10_000, 0.1), 0),
    ("float32", "32-bit float samples (format tag 3)",
     _one("a.wav", lambda: wav(np.zeros(RATE, "<f4").tobytes(), tag=3, bits=32)), 0),
]


def measure(code_root: Path, kind: str, cand: Path, ref: Path, raised: int, cap_gib: float,
            timeout: float) -> dict:
    def limit() -> None:
        cap = int(cap_gib * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    env = {**os.environ, "PYTHONPATH": str(code_root), "OPENBLAS_NUM_THREADS": "1",
           "OMP_NUM_THREADS": "1"}
    try:
        out = subprocess.run([sys.executable, "-c", CHILD, kind, "*.wav", str(cand), str(ref), str(raised)],
                             env=env, capture_output=True, text=True, timeout=timeout,
                             preexec_fn=limit, cwd=tempfile.gettempdir())
    except subprocess.TimeoutExpired:
        return {"peak_mib": None, "cpu_s": None, "outcome": f"killed after {timeout:g} s"}
    if out.returncode != 0 or not out.stdout.strip():
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        return {"peak_mib": None, "cpu_s": None, "outcome": f"crashed: {last[:80]}"}
    return json.loads(out.stdout)


def cell(r: dict | None) -> str:
    if r is None:
        return "n/a | n/a | n/a"
    peak = "-" if r["peak_mib"] is None else f"{r['peak_mib']:.0f}"
    cpu = "-" if r["cpu_s"] is None else f"{r['cpu_s']:.2f}"
    outcome = r["outcome"].replace("|", "/")
    return f"{peak} | {cpu} | {outcome[:110]}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, help="another checkout's root (e.g. /work/main)")
    ap.add_argument("--only", action="append", help="run only these cases (repeatable)")
    ap.add_argument("--kinds", default="waveform,spectral")
    ap.add_argument("--cap-gib", type=float, default=3.0)
    ap.add_argument("--timeout", type=float, default=300.0)
    args = ap.parse_args()
    roots = ([("before", args.before)] if args.before else []) + [("after", ROOT)]
    print(f"peak: growth of the peak RSS (MiB) while both runs are snapshot and one guard judged; "
          f"CPU: seconds; children capped at {args.cap_gib:g} GiB of address space, "
          f"{args.timeout:g} s\n")
    print("| case | what | guard | code | peak MiB | CPU s | outcome |")
    print("|---|---|---|---|---:|---:|---|")
    with tempfile.TemporaryDirectory(prefix="rsi-untrusted-") as tmp:
        for name, what, write, raised in CASES:
            if args.only and name not in args.only:
                continue
            cand, ref = Path(tmp, name, "cand"), Path(tmp, name, "ref")
            cand.mkdir(parents=True)
            ref.mkdir()
            write(cand)
            for f in cand.iterdir():
                os.link(f, ref / f.name)
            for kind in args.kinds.split(","):
                for label, root in roots:
                    r = None if (raised and label == "before") else measure(
                        root, kind, cand, ref, raised, args.cap_gib, args.timeout)
                    print(f"| {name} | {what} | {kind} | {label} | {cell(r)} |", flush=True)
            for d in (cand, ref):
                for f in d.iterdir():
                    f.unlink()


if __name__ == "__main__":
    main()
