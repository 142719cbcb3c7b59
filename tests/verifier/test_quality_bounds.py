"""Issue 30.3: the quality guards' work on untrusted output files is bounded.

Each crafted file below is what a candidate can write into its output dir: a
header claiming a giant size, a sample rate of 1 Hz or 4 GHz, 65,535
channels, thousands of chunks before the data, odd formats, a file longer
than the guard's ``max_samples``. Before, the guards decoded every file
whole and kept it for the session (~1 GiB of host memory per candidate run
at the size caps; one 1 Hz file cost ~136 s of CPU; a 4 GHz one asked numpy
for a 32 GiB filterbank). Now a file is described (header checked, samples
counted, payload digested) and compared block by block: a file past a bound
is an error naming the file and the bound, and a comparison's memory does
not grow with the file (measured in a fresh process below; the table of
every crafted file, before and after: benchmarks/untrusted_outputs.py)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from verifier.config import ConfigError, QualityGuard, VerifyConfig
from verifier.outfiles import (
    DEFAULT_MAX_SAMPLES,
    MAX_CHANNELS,
    MAX_CHUNKS,
    MAX_RATE,
    MEMORY_BOUND_MIB,
    MIN_RATE,
    OutFile,
)
from verifier.quality import (
    QualityError,
    compare_files,
    evaluate,
    log_mel_distance,
    read_wav,
    snapshot,
    snapshot_digest,
    snr_db,
)

from .conftest import CONFIG
from .wavcraft import pcm16, wav_bytes

ROOT = Path(__file__).resolve().parents[2]
KEY = "files:{kind}:*.wav"


def tone(n: int = 16000, f: float = 440.0, rate: int = 16000) -> np.ndarray:
    return 0.5 * np.sin(2 * np.pi * f * np.arange(n) / rate)


def _snap(kind: str, d: Path, **kw) -> object:
    g = QualityGuard(kind=kind, files="*.wav", **kw)
    return snapshot({}, [g], [d])[KEY.format(kind=kind)]


def _write(d: Path, name: str, data: bytes) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)
    return d / name


CRAFTED = {
    "a sample rate of 1 Hz (one spectral frame per sample)": (
        dict(rate=1), f"sample rate of 1 Hz, outside the {MIN_RATE}-{MAX_RATE} Hz"),
    "a sample rate of 4 GHz (a 2^27-point FFT)": (
        dict(rate=4_000_000_000), "sample rate of 4000000000 Hz, outside"),
    "65,535 channels": (dict(channels=65535, bits=8), f"65535 channels; the verifier reads 1 to {MAX_CHANNELS}"),
    "64-bit samples": (dict(bits=64), "64-bit samples: 8, 16, 24 or 32-bit PCM only"),
    "float samples (format tag 3)": (dict(tag=3, bits=32), "format tag 3; write 8-32 bit integer PCM"),
    "thousands of chunks before the data": (
        dict(junk_chunks=5000), f"no data chunk within its first {MAX_CHUNKS} chunks"),
}


@pytest.mark.parametrize("case", list(CRAFTED))
@pytest.mark.parametrize("kind", ["waveform", "spectral"])
def test_a_crafted_header_is_an_error_naming_the_file_and_the_bound(tmp_path, case, kind):
    kw, message = CRAFTED[case]
    _write(tmp_path, "evil.wav", wav_bytes(pcm16(tone(1600)), **kw))
    snap = _snap(kind, tmp_path)
    assert isinstance(snap, QualityError), snap
    assert "output file 'evil.wav'" in str(snap) and message in str(snap), str(snap)
    # and a guard judged on it fails, never passes
    ref = tmp_path / "ref"
    _write(ref, "evil.wav", wav_bytes(pcm16(tone(1600))))
    g = QualityGuard(kind=kind, files="*.wav", min_snr_db=40 if kind == "waveform" else None)
    r = evaluate(g, {KEY.format(kind=kind): snap}, {KEY.format(kind=kind): _snap(kind, ref)}, "bk")
    assert r.status == "fail" and "evil.wav" in r.detail and message in r.detail, r


@pytest.mark.parametrize("kind", ["waveform", "spectral"])
def test_not_a_wav_is_an_error(tmp_path, kind):
    _write(tmp_path, "a.wav", b"RIFF\x00\x00\x00\x00JUNK")
    assert "not a PCM WAV file (no RIFF/WAVE header)" in str(_snap(kind, tmp_path))
    _write(tmp_path, "a.wav", b"RIFF" + struct.pack("<I", 12) + b"WAVEdata" + struct.pack("<I", 4) + b"\0" * 4)
    assert "data before fmt" in str(_snap(kind, tmp_path))


def test_a_header_claiming_4_gib_holds_only_what_is_there(tmp_path):
    """The data chunk claims 4 GiB; the file has one second: it is read as
    the second it holds (never an allocation of the claim), and compares as
    that audio."""
    x = tone()
    _write(tmp_path / "cand", "a.wav", wav_bytes(pcm16(x), claim=2**32 - 1))
    _write(tmp_path / "ref", "a.wav", wav_bytes(pcm16(x)))
    cand = _snap("waveform", tmp_path / "cand")
    ref = _snap("waveform", tmp_path / "ref")
    assert isinstance(cand, dict) and cand["a.wav"].size == x.size
    ok, snr, detail = compare_files(cand, ref, QualityGuard(kind="waveform", files="*.wav", min_snr_db=40), "Bk")
    assert ok and snr == np.inf and detail == "1 files identical to Bk"


@pytest.mark.parametrize("kind", ["waveform", "spectral"])
def test_a_file_past_max_samples_is_an_error_naming_it_and_the_key_that_raises_it(tmp_path, kind):
    n = 4000
    _write(tmp_path, "long.wav", wav_bytes(pcm16(tone(n))))
    err = _snap(kind, tmp_path, max_samples=n - 1)
    assert isinstance(err, QualityError)
    text = str(err)
    assert f"output file 'long.wav' holds {n} samples (frames x channels), over the bound of " \
           f"{n - 1} per file" in text, text
    assert "raise max_samples in this guard's [[quality]] table" in text
    ok = _snap(kind, tmp_path, max_samples=n)
    assert isinstance(ok, dict) and ok["long.wav"].size == n
    # the default bound: DEFAULT_MAX_SAMPLES; the header is enough to refuse (nothing read)
    _write(tmp_path, "long.wav", wav_bytes(b"", bits=8, claim=DEFAULT_MAX_SAMPLES + 1) + b"\x80" * (DEFAULT_MAX_SAMPLES + 1))
    assert f"over the bound of {DEFAULT_MAX_SAMPLES} per file" in str(_snap(kind, tmp_path))


def test_max_samples_is_a_key_of_the_audio_kinds_only():
    cfg = VerifyConfig.from_toml(CONFIG + '\n[[quality]]\nkind = "spectral"\nfiles = "*.wav"\n'
                                 'max_samples = 100000000\n')
    assert cfg.quality[0].max_samples == 100_000_000
    for bad, message in (
        ('kind = "wer"\noutput = "t"\nmax_samples = 10\n', "'max_samples' is not a parameter of kind 'wer'"),
        ('kind = "waveform"\nfiles = "*.wav"\nmax_samples = 0\n', "max_samples"),
        ('kind = "waveform"\nfiles = "*.wav"\nmax_samples = 300000000\n', "max_samples"),
    ):
        with pytest.raises(ConfigError) as e:
            VerifyConfig.from_toml(CONFIG + "\n[[quality]]\n" + bad)
        assert message in "\n".join(e.value.errors)


def test_a_snapshot_holds_descriptions_not_samples_and_digests_the_payload(tmp_path):
    x = tone()
    for d in ("a", "b", "c"):
        _write(tmp_path / d, "x.wav", wav_bytes(pcm16(x if d != "c" else x * 0.99)))
    snaps = [{KEY.format(kind="waveform"): _snap("waveform", tmp_path / d)} for d in "abc"]
    f = snaps[0][KEY.format(kind="waveform")]["x.wav"]
    assert isinstance(f, OutFile) and (f.rate, f.channels, f.width, f.size) == (16000, 1, 2, x.size)
    da, db, dc = (snapshot_digest(s) for s in snaps)
    assert da == db and da != dc  # bit-exact copies agree; one changed sample set does not


def test_a_file_changed_after_its_run_fails_the_guard_naming_it(tmp_path):
    x = tone()
    p = _write(tmp_path / "cand", "x.wav", wav_bytes(pcm16(x)))
    _write(tmp_path / "ref", "x.wav", wav_bytes(pcm16(x)))
    cand, ref = _snap("waveform", tmp_path / "cand"), _snap("waveform", tmp_path / "ref")
    p.write_bytes(wav_bytes(pcm16(x * 0.5)))  # same size, other samples
    ok, _v, detail = compare_files(cand, ref, QualityGuard(kind="waveform", files="*.wav", min_snr_db=40), "Bk")
    assert not ok and detail == "output file 'x.wav' changed after its run ended", detail


def test_streamed_values_equal_the_whole_array_values(tmp_path):
    """Block by block (several blocks here) gives the one-pass numbers."""
    import verifier.outfiles as outfiles

    rng = np.random.default_rng(0)
    x = tone(600_000)
    y = x + rng.normal(0, 1e-2, x.size)
    _write(tmp_path / "c", "a.wav", wav_bytes(pcm16(y)))
    _write(tmp_path / "r", "a.wav", wav_bytes(pcm16(x)))
    c = _snap("spectral", tmp_path / "c")["a.wav"]  # type: ignore[index]
    r = _snap("spectral", tmp_path / "r")["a.wav"]  # type: ignore[index]
    yc, xr = (read_wav((tmp_path / d / "a.wav").read_bytes())[0].astype(np.float64) for d in "cr")
    assert outfiles.BLOCK_SAMPLES < x.size
    assert snr_db(c, r) == pytest.approx(snr_db(yc, xr), rel=1e-9)
    assert log_mel_distance(c, r, 16000) == pytest.approx(log_mel_distance(yc, xr, 16000), rel=1e-9)


MEASURE = r"""
import json, sys
from pathlib import Path
from verifier.config import QualityGuard
from verifier.quality import evaluate, snapshot

def kib(field):
    return next(int(ln.split()[1]) for ln in open("/proc/self/status") if ln.startswith(field + ":"))

kind, cand, ref = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
g = QualityGuard(kind=kind, files="*.wav", min_snr_db=40 if kind == "waveform" else None)
open("/proc/self/clear_refs", "w").write("5")  # the peak (VmHWM) restarts from the RSS now
before = kib("VmRSS")
r = evaluate(g, snapshot({}, [g], [cand]), snapshot({}, [g], [ref]), "bk")
print(json.dumps({"grew_mib": (kib("VmHWM") - before) / 1024, "status": r.status, "detail": r.detail}))
"""


@pytest.mark.parametrize("kind", ["waveform", "spectral"])
def test_comparing_two_long_files_stays_within_the_memory_bound(tmp_path, kind):
    """Two 16 MiB files (8.4 M samples each; decoded whole they were 32 MiB
    as float32 each, and 4 x 64 MiB float64 while compared): the process's
    peak memory grows less than MEMORY_BOUND_MIB while both are snapshot and
    compared. Decided by the peak RSS of a fresh process, not by time."""
    n = 1 << 23
    x = np.sin(np.arange(n) * 0.05) * 0.4
    _write(tmp_path / "c", "long.wav", wav_bytes(pcm16(x)))  # the same audio: every sample compared
    _write(tmp_path / "r", "long.wav", wav_bytes(pcm16(x)))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", MEASURE, kind, str(tmp_path / "c"), str(tmp_path / "r")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout)
    assert res["status"] == "pass", res
    assert 0 < res["grew_mib"] < MEMORY_BOUND_MIB, res


def test_npy_outputs_are_described_and_streamed_never_quoting_their_path(tmp_path):
    """Tensor files (the ``tensor`` kind's files and ``allclose`` outputs
    naming .npy paths) are checked and read block by block too: an object
    array or a Fortran-ordered one is an error that never quotes the path a
    candidate chose."""
    hidden = "HIDDEN-EVAL-sentence"
    out = tmp_path / "out"
    out.mkdir()
    np.save(out / f"{hidden}.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.save(out / "f.npy", np.asfortranarray(np.ones((3, 4))))
    x = np.linspace(0, 1, 300_000)
    np.save(out / "x.npy", x)
    g = QualityGuard(kind="allclose", output="t")
    for path, message in ((f"{hidden}.npy", "numbers only"), ("f.npy", "Fortran order")):
        snap = snapshot({"t": path}, [g], [out])["t"]
        assert isinstance(snap, QualityError) and message in str(snap), snap
        assert "HIDDEN" not in str(snap) and "output file 'tensor 0'" in str(snap)
    snap = snapshot({"t": ["x.npy"]}, [g], [out])
    (t,) = snap["t"]
    assert isinstance(t, OutFile) and t.shape == (300_000,) and t.dtype == "<f8"
    ref = {"t": [(x + 1e-3, "fp64")]}
    r = evaluate(g, snap, ref, "bk")
    assert r.status == "fail" and "300000/300000 elements outside" in r.detail, r
    assert evaluate(g, snap, {"t": [(x.copy(), "fp64")]}, "bk").status == "pass"
