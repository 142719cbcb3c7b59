"""Issue 22.3 (hear more than words: the ``spectral`` guard) and issue 21.3
(quality kinds in a registry: an unknown kind is an error at config time,
never judged as ``allclose``).

The audio is real tiny-tts output (tests/verifier/data/tiny-tts: Bk's, and the
same texts in other speakers' voices); honest changes are tiny numeric ones,
degraded ones are audible. Decided by the audio (a distance, a status, a
reason), never by a timing."""

from __future__ import annotations

import shutil
import sys
import typing
import wave
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from verifier.config import ConfigError, QualityGuard, VerifyConfig
from verifier.guards import Evaluator
from verifier.judge import verify
from verifier.protocol import BenchResult
from verifier.quality import KINDS, compare_files, evaluate, log_mel_distance, read_wav
from verifier.qualitykinds import QUALITY_KINDS, SPECTRAL_MAX_DB
from verifier.runner import RunRecord
from verifier.verdict import GuardResult

from .conftest import BASE_WORK, CONFIG, TIMED_SLEEP

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data" / "tiny-tts"
RATE = 16000
SPECTRAL = '\n[[quality]]\nkind = "spectral"\nfiles = "*.wav"\n'


def _audio(which: str) -> dict[str, np.ndarray]:
    return {p.name: read_wav(p.read_bytes())[0].astype(np.float64)
            for p in sorted((DATA / which).glob("*.wav"))}


def _q16(x: np.ndarray) -> np.ndarray:
    return np.round(np.clip(x, -1, 1) * 32767) / 32767


def _noise(x: np.ndarray, snr_db: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return _q16(x + rng.normal(0, np.sqrt(np.mean(x**2) / 10 ** (snr_db / 10)), x.size))


def _lowpass(x: np.ndarray, hz: float) -> np.ndarray:
    spec = np.fft.rfft(x)
    spec[np.fft.rfftfreq(x.size, 1 / RATE) > hz] = 0
    return _q16(np.fft.irfft(spec, n=x.size))


def _stretch(x: np.ndarray, r: float) -> np.ndarray:
    n = int(round(x.size * r))
    return _q16(np.interp(np.linspace(0, x.size - 1, n), np.arange(x.size), x))


def _drop_frames(x: np.ndarray) -> np.ndarray:
    keep = np.ones(x.size, bool)
    for s in range(1600, x.size, 3200):  # 20 ms of every 200 ms
        keep[s : s + 320] = False
    return x[keep]


HONEST: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "float16 round trip": lambda x: _q16(x.astype(np.float16).astype(np.float64)),
    "1e-4 noise": lambda x: _q16(x + np.random.default_rng(1).normal(0, 1e-4, x.size)),
    "one LSB on 0.5% of samples": lambda x: x + np.where(np.arange(x.size) % 200 == 0, 1 / 32767, 0),
    "gain x1.001": lambda x: _q16(x * 1.001),
}
DEGRADED: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "8-bit samples": lambda x: np.round(x * 128) / 128,
    "low-pass 4 kHz": lambda x: _lowpass(x, 4000),
    "noise at 30 dB SNR": lambda x: _noise(x, 30),
    "noise at 20 dB SNR": lambda x: _noise(x, 20),
    "time-stretch 5%": lambda x: _stretch(x, 1.05),
    "20 ms dropped every 200 ms": _drop_frames,
}


def _spectral(max_db: float | None = None) -> QualityGuard:
    return QualityGuard(kind="spectral", files="*.wav", max_db=max_db)


def _files(audio: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, int]]:
    return {n: (x, RATE) for n, x in audio.items()}


# ---- the spectral guard on real tiny-tts audio -------------------------------------------


@pytest.mark.parametrize("change", list(HONEST))
def test_tiny_numeric_changes_pass_far_below_the_bound(change):
    bk = _audio("bk")
    cand = {n: HONEST[change](x) for n, x in bk.items()}
    ok, worst, detail = compare_files(_files(cand), _files(bk), _spectral(), "Bk")
    assert ok and worst < SPECTRAL_MAX_DB / 5, (change, worst, detail)  # measured <= 0.015 dB
    assert detail.startswith("worst log-mel distance") and "over 4 files vs Bk" in detail


@pytest.mark.parametrize("change", [*DEGRADED, "another speaker"])
def test_audible_changes_fail_well_above_the_bound(change):
    bk = _audio("bk")
    cand = _audio("other-speaker") if change == "another speaker" else {
        n: DEGRADED[change](x) for n, x in bk.items()}
    ok, worst, detail = compare_files(_files(cand), _files(bk), _spectral(), "Bk")
    assert not ok and worst > 2 * SPECTRAL_MAX_DB, (change, worst, detail)
    assert detail.endswith(f"above {SPECTRAL_MAX_DB:g} dB")


def test_the_distance_is_zero_on_identical_audio_and_counts_missing_audio():
    x = _audio("bk")["req-000.wav"]
    assert log_mel_distance(x, x, RATE) == 0.0
    assert log_mel_distance(x[: x.size // 2], x, RATE) > 10  # half the utterance is silence
    assert log_mel_distance(np.zeros(0), np.zeros(0), RATE) == 0.0  # two empty files
    # another sample rate is a failure, not a distance
    bk = _files(_audio("bk"))
    other = {n: (x, 22050) for n, (x, _r) in bk.items()}
    ok, _worst, detail = compare_files(other, bk, _spectral(), "Bk")
    assert not ok and "sample rate 22050 vs Bk 16000" in detail


def test_long_files_are_measured_in_blocks_with_the_same_result(monkeypatch):
    """A candidate's file is untrusted (up to 256 MiB): frames are taken in
    blocks (and fewer per block at high rates), so memory stays bounded, and
    the distance is the one-pass value."""
    import verifier.quality as quality

    bk = np.concatenate(list(_audio("bk").values()) * 12)  # 24 s: more than one block
    cand = _noise(bk, 30)
    assert quality._frame_count(bk.size, RATE) > quality._BLOCK_FRAMES
    blocked = log_mel_distance(cand, bk, RATE)
    monkeypatch.setattr(quality, "_BLOCK_FRAMES", 10**9)
    monkeypatch.setattr(quality, "SPECTRAL_BLOCK_ELEMENTS", 10**12)  # one block: the one-pass value
    assert abs(log_mel_distance(cand, bk, RATE) - blocked) < 1e-9 and blocked > 2 * SPECTRAL_MAX_DB


def test_every_candidate_run_is_judged_and_the_first_failing_run_decides(tmp_path):
    """Through the Evaluator: the reference arm's run of the same index, the
    first failing run named; an honest change is a visible tradeoff line."""
    bk = _audio("bk")
    honest = {n: HONEST["float16 round trip"](x) for n, x in bk.items()}
    noisy = {n: DEGRADED["noise at 30 dB SNR"](x) for n, x in bk.items()}
    ev = _evaluator(tmp_path, {"bk": [bk, bk, bk], "candidate": [honest, noisy, honest]})
    g = ev.quality_guard(ev.config.quality[0], "bk")
    assert g.kind == "spectral" and g.status == "fail" and g.bound == f"<= {SPECTRAL_MAX_DB:g} dB"
    assert g.detail.startswith("candidate run 2 of 3 (1 run(s) failed: 2)"), g.detail
    ev = _evaluator(tmp_path / "h", {"bk": [bk, bk], "candidate": [honest, honest]})
    g = ev.quality_guard(ev.config.quality[0], "bk")
    assert g.status == "pass" and g.value is not None and 0 < g.value < SPECTRAL_MAX_DB / 5
    (line,) = ev.output_changes([g])
    assert line.startswith(f"Audio changed: {g.value:.2f} dB log-mel distance vs Bk")


def _write_wav(path: Path, x: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(np.round(np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())


def _evaluator(tmp_path: Path, runs: dict[str, list[dict[str, np.ndarray]]]) -> Evaluator:
    cfg = VerifyConfig.from_toml(CONFIG + SPECTRAL)
    ev = Evaluator(cfg, "loop", {a: tmp_path for a in runs})
    on_run = ev.on_run_for(cfg.quality_for("loop"), ev.arms)
    for arm, sets in runs.items():
        for i, audio in enumerate(sets):
            d = tmp_path / f"{arm}-{i}"
            for name, x in audio.items():
                _write_wav(d / name, x)
            rec = RunRecord(ok=True, result=BenchResult(metrics={"loop_s": 1.0}), output_dir=str(d))
            on_run(arm, rec, i)
    return ev


# ---- through the real verifier ------------------------------------------------------------

# The benchmark: the timed sleep of conftest's bench after READY (its time is
# the objective), then the checkout's audio/*.wav copied to $RSI_OUTPUT_DIR:
# what this checkout's "server" says. The candidate does 0.75x the work:
# faster, so only the audio can reject it.
AUDIO_BENCH = (
    'import json, os, pathlib, shutil, time\nprint("READY", flush=True)\n'
    + TIMED_SLEEP
    + r"""out = pathlib.Path(os.environ["RSI_OUTPUT_DIR"])
for f in sorted(pathlib.Path("audio").glob("*.wav")):
    shutil.copyfile(f, out / f.name)
json.dump({"metrics": {"loop_s": el}}, open(os.environ["RSI_RESULT"], "w"))
"""
)


def _audio_checkout(checkout, name: str, audio: dict[str, np.ndarray], work: int) -> Path:
    d = checkout(name, work=work)
    (d / "bench.py").write_text(AUDIO_BENCH)
    for n, x in audio.items():
        _write_wav(d / "audio" / n, x)
    return d


def test_the_verifier_rejects_a_faster_candidate_whose_audio_sounds_different(checkout):
    bk = _audio("bk")
    base = _audio_checkout(checkout, "base", bk, BASE_WORK)
    noisy = {n: DEGRADED["noise at 30 dB SNR"](x) for n, x in bk.items()}
    cand = _audio_checkout(checkout, "cand", noisy, int(BASE_WORK * 0.75))
    v = verify(base, cand, VerifyConfig.from_toml(CONFIG + SPECTRAL))
    assert v.decision == "reject", (v.decision, v.reason)
    (g,) = [g for g in v.guards if g.kind == "spectral" and g.against == "bk"]
    assert g.status == "fail" and g.value is not None and g.value > 2 * SPECTRAL_MAX_DB, g
    assert "candidate run 1 of" in g.detail and "above 0.1 dB" in g.detail
    assert "spectral(*.wav)" in v.reason, v.reason


def test_the_verifier_passes_tiny_numeric_change_in_the_audio(checkout):
    bk = _audio("bk")
    base = _audio_checkout(checkout, "base", bk, BASE_WORK)
    honest = {n: HONEST["float16 round trip"](x) for n, x in bk.items()}
    cand = _audio_checkout(checkout, "cand", honest, int(BASE_WORK * 0.75))
    v = verify(base, cand, VerifyConfig.from_toml(CONFIG + SPECTRAL))
    (g,) = [g for g in v.guards if g.kind == "spectral" and g.against == "bk"]
    assert g.status == "pass" and g.value is not None and g.value < SPECTRAL_MAX_DB / 5, g
    assert "spectral" not in v.reason, v.reason
    assert any(t.startswith("Audio changed:") and "log-mel distance" in t for t in v.tradeoffs)


def test_tiny_tts_guards_the_sound_beside_wer_and_the_waveform():
    cfg = VerifyConfig.from_toml((ROOT / "examples/tiny-tts/.rsi/config.toml").read_text())
    kinds = [q.kind for q in cfg.quality]
    assert {"wer", "waveform", "spectral"} <= set(kinds)
    (sp,) = [q for q in cfg.quality if q.kind == "spectral"]
    assert sp.files == "*.wav" and sp.max_db == SPECTRAL_MAX_DB


# ---- the registry: an unknown kind is a config error, never another kind -----------------


def test_every_declared_kind_has_its_comparator_and_a_verdict_kind():
    assert set(KINDS) == set(QUALITY_KINDS)
    verdict_kinds = set(typing.get_args(GuardResult.model_fields["kind"].annotation))
    assert set(QUALITY_KINDS) <= verdict_kinds
    for name, k in KINDS.items():
        assert (k.files is not None) == (k.decl.reads == "files"), name
        assert (k.outputs is not None) == (k.decl.reads == "outputs"), name


def _errors(toml: str) -> str:
    with pytest.raises(ConfigError) as e:
        VerifyConfig.from_toml(CONFIG + toml)
    return "\n".join(e.value.errors)


def test_an_unknown_kind_is_refused_at_config_load_with_did_you_mean():
    err = _errors('\n[[quality]]\nkind = "spectrall"\nfiles = "*.wav"\n')
    assert "quality[0].kind: unknown quality kind 'spectrall'; did you mean 'spectral'?" in err
    assert "known kinds: wer, output_length, allclose, waveform, tensor, spectral" in err
    err = _errors('\n[[quality]]\nkind = "bleu"\noutput = "texts"\n')
    assert "unknown quality kind 'bleu' (known kinds:" in err
    with pytest.raises(ValidationError, match="did you mean 'waveform'"):
        QualityGuard(kind="wavefrom", files="*.wav")


def test_a_key_the_kind_does_not_take_is_refused():
    err = _errors('\n[[quality]]\nkind = "wer"\noutput = "texts"\nmax = 0.1\nmin_snr_db = 40\n')
    assert "quality[0] (wer): 'min_snr_db' is not a parameter of kind 'wer'" in err
    err = _errors(SPECTRAL + "max_change = 0.1\n")
    assert "'max_change' is not a parameter of kind 'spectral'" in err and "files, max_db" in err
    assert "max_db" in _errors(SPECTRAL + "max_db = 0\n")  # a bound of 0 dB: nothing passes


def test_a_guard_built_around_the_config_check_is_never_judged_as_allclose():
    """The old dispatch judged any kind it did not name by allclose: a
    waveform guard without files passed on equal outputs."""
    same = {"": [1.0, 2.0]}
    wf = QualityGuard(kind="waveform")  # no files: the config refuses it, a constructor does not
    r = evaluate(wf, same, same, "bk")
    assert r.status == "fail" and "reads output files" in r.detail, r
    bogus = QualityGuard.model_construct(kind="bleu", output="t", files=None)
    with pytest.raises(ValueError, match="unknown quality kind 'bleu'"):
        evaluate(bogus, {"t": [1.0]}, {"t": [1.0]}, "bk")


def test_config_check_prints_the_unknown_kind_at_its_line(tmp_path):
    from harness.configcheck import check_config

    repo = tmp_path / "tts"
    shutil.copytree(ROOT / "examples" / "tiny-tts", repo, ignore=shutil.ignore_patterns("__pycache__"))
    toml = (repo / ".rsi" / "config.toml").read_text()
    assert 'kind = "spectral"' in toml
    (repo / ".rsi" / "config.toml").write_text(toml.replace('kind = "spectral"', 'kind = "spectrum"'))
    (p,) = [p for p in check_config(repo) if not p.warning]
    line = toml.splitlines().index(next(ln for ln in toml.splitlines() if ln.startswith('kind = "spectral"'))) + 1
    assert p.line == line and "did you mean 'spectral'?" in p.message, (p, line)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
