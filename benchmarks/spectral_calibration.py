"""The ``spectral`` quality guard's values on honest and audibly degraded
tiny-tts audio: the table behind its default bound (``SPECTRAL_MAX_DB``,
docs/configuration.md#spectral).

::

    python benchmarks/spectral_calibration.py [--out /tmp/spectral] [--requests 12]

Needs torch (it runs examples/tiny-tts's server). Serves Bk (examples/tiny-tts
as it is), Bk again, every good demo patch alone and all together, the
``threads`` / ``rope_variant`` knobs, and each bad patch on top of the good
ones, with the same request texts and speakers (drawn from bench/vocab.py
with seed 3), plus Bk's texts with other speakers; then measures each set's
files against Bk's with ``verifier.quality.log_mel_distance`` (and SNR), and
Bk's files under synthetic changes: honest ones (float16 round trip, 1e-4
noise, +0.1% gain, one LSB) and audible ones (fewer bits, low-pass, noise at
40/30/20 dB SNR, time stretch, dropped or zeroed frames, -6 dB). Prints a
markdown table, best first.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import urllib.request
import wave
from collections.abc import Callable
from pathlib import Path

import numpy as np

from verifier.quality import log_mel_distance, read_wav, snr_db

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "tiny-tts"
PATCHES = ROOT / "examples" / "demo-patches"
RATE = 16000


def _serve(repo: Path, out: Path, reqs: list[tuple[str, int]]) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "tiny_tts.server", "--host", "127.0.0.1",
                             "--port", "0"], cwd=repo, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("READY"):
            raise SystemExit(f"{repo.name}: no READY line ({line!r})")
        url = line.split()[1]
        out.mkdir(parents=True, exist_ok=True)
        for i, (text, style) in enumerate(reqs):
            body = json.dumps({"text": text, "style": style}).encode()
            req = urllib.request.Request(url + "/synthesize", data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=120) as r:
                pcm = r.read()
            with wave.open(str(out / f"req-{i:03d}.wav"), "wb") as w:
                w.setnchannels(1)
                w.setsampwidth(2)
                w.setframerate(RATE)
                w.writeframes(pcm)
    finally:
        proc.terminate()
        proc.wait()


def _checkout(work: Path, name: str, patches: list[Path], settings: str | None = None) -> Path:
    dst = work / "repos" / name
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(EXAMPLE, dst, ignore=shutil.ignore_patterns("__pycache__"))
    for p in patches:
        subprocess.run(["git", "apply", "--whitespace=nowarn", str(p)], cwd=dst, check=True)
    if settings is not None:
        (dst / "tiny_tts" / "settings.toml").write_text(settings)
    return dst


def generate(work: Path, n: int) -> None:
    sys.path.insert(0, str(EXAMPLE / "bench"))
    import vocab  # examples/tiny-tts/bench/vocab.py

    reqs = list(zip(vocab.prompts(n, seed=3), vocab.styles(n, seed=3), strict=True))
    good = sorted(PATCHES.glob("0*.patch"))
    sets: list[tuple[str, list[Path], str | None, list[tuple[str, int]]]] = [
        ("bk", [], None, reqs),
        ("honest: Bk again", [], None, reqs),
        ("degraded: another speaker", [], None, [(t, (s + 12345) % 2**31) for t, s in reqs]),
        *[(f"honest: patch {p.stem}", [p], None, reqs) for p in good],
        ("honest: all good patches", good, None, reqs),
        ("honest: threads = 2", [], 'threads = 2\nrope_variant = "eager"\n', reqs),
        ("honest: rope_variant = fused", [], 'threads = 1\nrope_variant = "fused"\n', reqs),
        *[(f"degraded: bad patch {p.stem}", [*good, p], None, reqs)
          for p in sorted(PATCHES.glob("9*.patch"))],
    ]
    for i, (name, patches, settings, rq) in enumerate(sets):
        _serve(_checkout(work, f"r{i}", patches, settings), work / "audio" / name, rq)
        print(f"served {name}", file=sys.stderr, flush=True)


def _q16(x: np.ndarray) -> np.ndarray:
    return np.round(np.clip(x, -1, 1) * 32767) / 32767


def _bits(x: np.ndarray, b: int) -> np.ndarray:
    s = 2 ** (b - 1)
    return np.round(x * s) / s


def _lowpass(x: np.ndarray, hz: float) -> np.ndarray:
    spec = np.fft.rfft(x)
    spec[np.fft.rfftfreq(x.size, 1 / RATE) > hz] = 0
    return _q16(np.fft.irfft(spec, n=x.size))


def _noise(rng: np.random.Generator, x: np.ndarray, snr: float) -> np.ndarray:
    return _q16(x + rng.normal(0, np.sqrt(np.mean(x**2) / 10 ** (snr / 10)), x.size))


def _stretch(x: np.ndarray, r: float) -> np.ndarray:
    n = int(round(x.size * r))
    return _q16(np.interp(np.linspace(0, x.size - 1, n), np.arange(x.size), x))


def _gaps(x: np.ndarray, drop: bool, every_ms: int = 200, ms: int = 20) -> np.ndarray:
    keep = np.ones(x.size, bool)
    step, w = every_ms * RATE // 1000, ms * RATE // 1000
    for s in range(step // 2, x.size, step):
        keep[s : s + w] = False
    return x[keep] if drop else np.where(keep, x, 0.0)


def _lsb(x: np.ndarray) -> np.ndarray:
    y = x.copy()
    y[::200] += 1 / 32767
    return y


def synthetic(rng: np.random.Generator) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    return {
        "honest: float16 round trip": lambda x: _q16(x.astype(np.float16).astype(np.float64)),
        "honest: 1e-4 gaussian noise": lambda x: _q16(x + rng.normal(0, 1e-4, x.size)),
        "honest: 1 LSB on 0.5% of samples": _lsb,
        "honest: gain x1.001": lambda x: _q16(x * 1.001),
        "(inaudible) 12-bit samples": lambda x: _bits(x, 12),
        "degraded: 8-bit samples": lambda x: _bits(x, 8),
        "degraded: low-pass 6 kHz": lambda x: _lowpass(x, 6000),
        "degraded: low-pass 4 kHz": lambda x: _lowpass(x, 4000),
        "degraded: noise 40 dB SNR": lambda x: _noise(rng, x, 40),
        "degraded: noise 30 dB SNR": lambda x: _noise(rng, x, 30),
        "degraded: noise 20 dB SNR": lambda x: _noise(rng, x, 20),
        "degraded: time-stretch 2%": lambda x: _stretch(x, 1.02),
        "degraded: time-stretch 5%": lambda x: _stretch(x, 1.05),
        "degraded: 20 ms dropped every 200 ms": lambda x: _gaps(x, drop=True),
        "degraded: 20 ms zeroed every 200 ms": lambda x: _gaps(x, drop=False),
        "degraded: gain x0.5 (-6 dB)": lambda x: _q16(x * 0.5),
    }


def _load(d: Path) -> dict[str, np.ndarray]:
    return {p.name: read_wav(p.read_bytes())[0].astype(np.float64) for p in sorted(d.glob("*.wav"))}


def table(work: Path) -> str:
    audio = work / "audio"
    bk = _load(audio / "bk")
    rows = []

    def row(name: str, files: dict[str, np.ndarray]) -> None:
        d = [log_mel_distance(files[n], bk[n], RATE) for n in bk]
        s = [snr_db(files[n], bk[n]) for n in bk]
        rows.append((name, max(d), float(np.mean(d)), min(d), min(s)))

    for d in sorted(p for p in audio.iterdir() if p.name != "bk"):
        row(d.name, _load(d))
    for name, change in synthetic(np.random.default_rng(0)).items():
        row(name, {n: change(x) for n, x in bk.items()})
    lines = [f"| audio vs Bk ({len(bk)} tiny-tts requests) | worst file (dB) | mean (dB) "
             "| best file (dB) | worst SNR (dB) |", "|---|---:|---:|---:|---:|"]
    for name, worst, mean, best, snr in sorted(rows, key=lambda r: r[1]):
        lines.append(f"| {name} | {worst:.4f} | {mean:.4f} | {best:.4f} | {snr:.1f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/spectral-calibration"))
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--reuse", action="store_true", help="measure the audio already in --out")
    args = ap.parse_args()
    if not args.reuse:
        generate(args.out, args.requests)
    print(table(args.out))


if __name__ == "__main__":
    main()
