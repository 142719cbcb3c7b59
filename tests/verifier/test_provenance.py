"""Provenance, require_external, the cross-check, serving and evaluator config,
and the waveform / tensor guards on output files (fast: no Docker)."""

from __future__ import annotations

import io
import math
import os
import wave

import numpy as np
import pytest

from verifier.config import ConfigError, QualityGuard, VerifyConfig
from verifier.guards import Evaluator
from verifier.judge import cross_check
from verifier.measure import Session
from verifier.protocol import BenchResult
from verifier.quality import QualityError, compare_files, read_wav, resolve, snapshot, snr_db
from verifier.runner import RunRecord

SERVING = """
[benchmarks.tts]
serve = "python -m server"
client = "python bench/client.py"
ready_path = "/health"
evaluator = "python bench/evaluate.py"
evaluator_metrics = ["heard"]
[benchmarks.tts.metrics]
throughput = "higher"
heard = "higher"
[benchmarks.tts.samples]
latency_s = "lower"
[objective]
benchmark = "tts"
metric = "throughput"
min_gain = 0.05
[[guards]]
metric = "latency_p95_s"
max_ratio = 1.05
required = true
[verifier]
require_external = true
"""

IN_PROCESS = """
[benchmarks.loop]
command = "python bench.py"
ready_pattern = "READY"
[benchmarks.loop.metrics]
speed = "higher"
[objective]
benchmark = "loop"
metric = "speed"
min_gain = 0.05
"""


def _errors(text: str) -> str:
    with pytest.raises(ConfigError) as e:
        VerifyConfig.from_toml(text)
    return "\n".join(e.value.errors)


# ---- config: sources, require_external, serving shape ----------------------------


def test_sources_of_a_serving_benchmark():
    b = VerifyConfig.from_toml(SERVING).benchmark()
    assert b.serving and b.metric_source("throughput") == "client"
    assert b.metric_source("latency_p95_s") == "client"
    assert b.metric_source("heard") == "evaluator"
    for m in ("wall_s", "cpu_s", "peak_rss_mib", "startup_s"):
        assert b.metric_source(m) == "verifier"
    assert b.metric_source("device_peak_memory_mib") == "benchmark"


def test_require_external_refuses_a_self_reported_objective():
    text = IN_PROCESS + "[verifier]\nrequire_external = true\n"
    err = _errors(text)
    assert "objective: 'speed' of benchmark 'loop' is reported only by the candidate" in err
    # the same objective measured by the verifier is fine
    ok = text.replace('metric = "speed"', 'metric = "cpu_s"').replace("min_gain", "min_gain")
    assert VerifyConfig.from_toml(ok).objective.metric == "cpu_s"
    # without the option a self-reported objective stays allowed
    assert VerifyConfig.from_toml(IN_PROCESS).benchmark().metric_source("speed") == "benchmark"


def test_require_external_refuses_a_self_reported_required_guard_only():
    base = IN_PROCESS.replace('metric = "speed"', 'metric = "wall_s"') + (
        '[[guards]]\nmetric = "speed"\nmin_ratio = 0.9\n'
    )
    assert VerifyConfig.from_toml(base + "[verifier]\nrequire_external = true\n")
    err = _errors(
        base.replace("min_ratio = 0.9", "min_ratio = 0.9\nrequired = true")
        + "[verifier]\nrequire_external = true\n"
    )
    assert "required guard on 'speed'" in err


def test_serving_config_is_accepted_and_checked():
    cfg = VerifyConfig.from_toml(SERVING)
    assert cfg.benchmark().ready_path == "/health" and "startup_s" in cfg.benchmark().measured()
    both = SERVING.replace('serve = "python -m server"', 'serve = "s"\ncommand = "c"')
    assert "either command (in-process) or serve + client" in _errors(both)
    no_client = SERVING.replace('client = "python bench/client.py"\n', "")
    assert "give command (an in-process benchmark) or serve and client" in _errors(no_client)
    no_ready = SERVING.replace('ready_path = "/health"\n', "")
    assert "needs ready_path" in _errors(no_ready)
    bad_path = SERVING.replace('ready_path = "/health"', 'ready_path = "health"')
    assert "must start with '/'" in _errors(bad_path)
    no_eval = SERVING.replace('evaluator = "python bench/evaluate.py"\n', "")
    assert "evaluator_metrics needs an evaluator" in _errors(no_eval)
    undeclared = SERVING.replace('evaluator_metrics = ["heard"]', 'evaluator_metrics = ["x"]')
    assert "evaluator metric 'x' is not declared" in _errors(undeclared)
    nothing = IN_PROCESS.replace('command = "python bench.py"\n', "")
    assert "give command (an in-process benchmark)" in _errors(nothing)


def test_file_quality_guards_are_validated():
    wav = '[[quality]]\nkind = "waveform"\nfiles = "*.wav"\nmin_snr_db = 40\n'
    cfg = VerifyConfig.from_toml(IN_PROCESS + wav)
    assert cfg.quality[0].label == "waveform(*.wav) SNR >= 40 dB"
    default = VerifyConfig.from_toml(IN_PROCESS + wav.replace("min_snr_db = 40\n", ""))
    assert default.quality[0].label == "waveform(*.wav) SNR >= Bk's repeatability"
    assert "give files" in _errors(IN_PROCESS + '[[quality]]\nkind = "tensor"\n')
    assert "files is for the kinds that read output files (waveform, tensor, spectral)" in _errors(
        IN_PROCESS + '[[quality]]\nkind = "wer"\noutput = "t"\nmax = 0.1\nfiles = "*.x"\n'
    )
    assert "give output" in _errors(IN_PROCESS + '[[quality]]\nkind = "wer"\nmax = 0.1\n')


# ---- provenance in the verdict's rows ------------------------------------------------


def _session(cfg_text: str, arms: dict[str, dict], n: int = 10, seed: int = 1) -> Session:
    """Fabricated runs. arm -> {"claim": metric factor, "wall": wall factor,
    "startup": seconds before the timed window}."""
    cfg = VerifyConfig.from_toml(cfg_text)
    s = Session(cfg.benchmark(), {a: f"/nonexistent/{a}" for a in arms}, seed=seed)
    rng = np.random.default_rng(seed)
    for arm, spec in arms.items():
        for _ in range(n):
            noise = float(np.exp(rng.normal(0, 0.02)))
            start = spec.get("startup", 0.0)
            window = 1.0 * spec.get("wall", 1.0) * noise
            s.records[arm].append(
                RunRecord(
                    ok=True,
                    wall_s=start + window,
                    startup_s=start * noise if "startup" in spec else None,
                    cpu_s=window,
                    peak_rss_mib=100 * noise,
                    result=BenchResult(
                        metrics={"speed": 10 * spec.get("claim", 1.0) * noise},
                        samples={"latency_s": (0.1, 0.2)},
                    ),
                    sources={"speed": "benchmark"},
                )
            )
    return s


def test_each_metric_row_says_who_measured_it():
    cfg = IN_PROCESS.replace('ready_pattern = "READY"\n', "") + (
        '[benchmarks.loop.samples]\nlatency_s = "lower"\n'
    )
    s = _session(cfg, {"bk": {}, "candidate": {"claim": 1.3, "wall": 0.77}})
    with s:
        rows = {
            m.name: m for m in Evaluator(VerifyConfig.from_toml(cfg), "loop", s.arms).metrics(s)
        }
        guards = Evaluator(VerifyConfig.from_toml(cfg), "loop", s.arms).guards(s)
    assert rows["speed"].source == "benchmark"
    assert rows["wall_s"].source == rows["cpu_s"].source == "verifier"
    assert rows["latency_p99_s"].source == "benchmark"
    assert {g.source for g in guards if g.metric == "peak_rss_mib"} == {"verifier"}


def test_session_source_sees_an_evaluator_metric():
    s = _session(IN_PROCESS, {"bk": {}, "candidate": {}})
    for r in s.records["candidate"]:
        r.sources["speed"] = "evaluator"
    with s:
        assert s.source("speed") == "evaluator" and s.source("wall_s") == "verifier"


# ---- the cross-check of a self-reported objective ----------------------------------------


def _gain(s: Session) -> float:
    c, r = s.values("candidate", "speed"), s.values("bk", "speed")
    return float(np.exp(np.mean(np.log(c / r))) - 1)


def test_cross_check_passes_an_honest_gain_whose_window_is_most_of_the_run():
    # 30% faster timed work; the timed window is 70% of each run (0.43 s setup)
    cfg = IN_PROCESS.replace('ready_pattern = "READY"\n', "")
    s = _session(cfg, {"bk": {"startup": 0.43}, "candidate": {"startup": 0.43, "claim": 1.3,
                                                             "wall": 1 / 1.3}})  # fmt: skip
    with s:
        assert cross_check(s, "speed", "higher", _gain(s), 0.05, 0.95) is None


def test_cross_check_passes_an_honest_gain_in_a_window_after_the_ready_pattern():
    # the timed window is only a fifth of the run, but it follows the ready pattern
    s = _session(IN_PROCESS, {"bk": {"startup": 4.0}, "candidate": {"startup": 4.0,
                                                                   "claim": 1.3, "wall": 1 / 1.3}})  # fmt: skip
    with s:
        assert cross_check(s, "speed", "higher", _gain(s), 0.05, 0.95) is None


def test_cross_check_flags_a_claim_the_clock_does_not_see():
    # a slowed timer: the benchmark reports 30% more speed, the runs take as long
    cfg = IN_PROCESS.replace('ready_pattern = "READY"\n', "")
    s = _session(cfg, {"bk": {"startup": 0.43}, "candidate": {"startup": 0.43, "claim": 1.3}})
    with s:
        why = cross_check(s, "speed", "higher", _gain(s), 0.05, 0.95)
    assert why is not None
    assert (
        "reports speed +29.0% better" in why and "wall time" in why and "a human must look" in why
    )
    # both numbers: the claim and the clock's change with its interval
    assert why.count("%") >= 3 and "over all" in why and "total time" in why


def test_cross_check_ignores_claims_below_min_gain():
    s = _session(IN_PROCESS, {"bk": {}, "candidate": {"claim": 1.01}})
    with s:
        assert cross_check(s, "speed", "higher", 0.01, 0.05, 0.95) is None


# ---- waveform and tensor guards on files ----------------------------------------------------


def _wav(path, samples: np.ndarray, rate: int = 16000) -> None:
    pcm = np.clip(np.round(samples * 32767), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())


def _tone(n: int = 8000, f: float = 440.0) -> np.ndarray:
    return 0.5 * np.sin(2 * np.pi * f * np.arange(n) / 16000)


def test_snr_and_wav_reading():
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(np.array([0, 16384, -16384], dtype="<i2").tobytes())
    a, rate = read_wav(buf.getvalue())
    assert rate == 8000 and np.allclose(a, [0, 0.5, -0.5])
    t = _tone()
    assert snr_db(t, t) == math.inf
    assert snr_db(t * 1.01, t) == pytest.approx(40.0, abs=0.01)
    assert snr_db(t[:4000], t) == pytest.approx(3.0, abs=0.1)  # half missing: ~3 dB
    with pytest.raises(QualityError, match="not a PCM WAV"):
        read_wav(b"RIFFnot a wav")


def _guard(kind: str, **kw) -> QualityGuard:
    return QualityGuard(kind=kind, **kw)


def test_waveform_guard_passes_rounding_and_fails_silence_and_missing_files(tmp_path):
    g = _guard("waveform", files="*.wav", min_snr_db=40)
    ref_dir, good, silent, fewer = (tmp_path / n for n in ("ref", "good", "silent", "fewer"))
    for d in (ref_dir, good, silent, fewer):
        d.mkdir()
    for i in range(3):
        _wav(ref_dir / f"{i}.wav", _tone(f=300 + 100 * i))
        _wav(good / f"{i}.wav", _tone(f=300 + 100 * i) + 1e-4)
        _wav(silent / f"{i}.wav", np.zeros(8000))
        if i < 2:
            _wav(fewer / f"{i}.wav", _tone(f=300 + 100 * i))
    snap = {
        d.name: snapshot({}, [g], [d])["files:waveform:*.wav"]
        for d in (ref_dir, good, silent, fewer)
    }
    ok, worst, detail = compare_files(snap["good"], snap["ref"], g, "Bk")
    assert ok and worst > 60 and "3 files" in detail
    ok, worst, detail = compare_files(snap["silent"], snap["ref"], g, "Bk")
    assert not ok and worst == pytest.approx(0.0, abs=0.01) and "below 40 dB" in detail
    ok, _, detail = compare_files(snap["fewer"], snap["ref"], g, "B0")
    assert not ok and "missing 2.wav" in detail and "of B0" in detail


def test_tensor_guard_uses_the_dtype_table(tmp_path):
    g = _guard("tensor", files="*.npy")
    a, b, c = (tmp_path / n for n in "abc")
    for d in (a, b, c):
        d.mkdir()
    x = np.linspace(0, 1, 100, dtype=np.float32)
    np.save(a / "x.npy", x)
    np.save(b / "x.npy", x + np.float32(1e-7))
    np.save(c / "x.npy", x + np.float32(1e-3))
    key = "files:tensor:*.npy"
    ref, near, far = (snapshot({}, [g], [d])[key] for d in (a, b, c))
    assert compare_files(near, ref, g, "Bk")[0]
    ok, err, detail = compare_files(far, ref, g, "Bk")
    assert not ok and "outside rtol" in detail and err == pytest.approx(1e-3, rel=0.01)


def test_file_guards_refuse_symlinks_and_fifos(tmp_path):
    g = _guard("waveform", files="*.wav", min_snr_db=40)
    secret = tmp_path / "secret.wav"
    _wav(secret, _tone())
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(secret, out / "a.wav")
    snap = snapshot({}, [g], [out])["files:waveform:*.wav"]
    assert isinstance(snap, QualityError) and "not a regular file" in str(snap)
    out2 = tmp_path / "out2"
    out2.mkdir()
    os.mkfifo(out2 / "a.wav")
    snap = snapshot({}, [g], [out2])["files:waveform:*.wav"]
    assert isinstance(snap, QualityError) and "not a regular file" in str(snap)


def test_output_paths_stay_inside_the_run(tmp_path):
    out = tmp_path / "out"
    (out / "d").mkdir(parents=True)
    np.save(out / "d" / "x.npy", np.zeros(3))
    assert resolve("d/x.npy", [out]) == out / "d" / "x.npy"
    assert resolve("/rsi/run/outputs/d/x.npy", [out]) == out / "d" / "x.npy"
    with pytest.raises(QualityError, match="leaves the output dir"):
        resolve("../out/d/x.npy", [out])
    with pytest.raises(QualityError, match="not found"):
        resolve("/etc/passwd", [out])
    os.symlink(tmp_path, out / "link")
    with pytest.raises(QualityError, match="symlink or not a directory"):
        resolve("link/out/d/x.npy", [out])
    os.symlink("/etc/passwd", out / "p.npy")
    snap = snapshot({"t": "p.npy"}, [_guard("allclose", output="t")], [out])
    assert isinstance(snap["t"], QualityError) and "symlink" in str(snap["t"])


# ---- the cross-check through the judge (process isolation, real runs) ----------------------

TIMED = r"""
import json, os, sys, time
work, report = float(sys.argv[1]), float(sys.argv[2])
print("READY", flush=True)  # the timed part starts here: the verifier's clock too
t = time.perf_counter()
time.sleep(work)
el = time.perf_counter() - t
json.dump({"metrics": {"speed": 1 / (el * report)}}, open(os.environ["RSI_RESULT"], "w"))
"""


def _timed_config(cmd: str) -> str:
    return f"""
[benchmarks.t]
command = "{cmd}"
timeout_s = 30
ready_pattern = "READY"
[benchmarks.t.metrics]
speed = "higher"
[objective]
benchmark = "t"
metric = "speed"
min_gain = 0.1
[verifier]
warmup = 0
initial_pairs = 8
step = 2
max_pairs = 10
default_guards = false
"""


@pytest.mark.parametrize(
    "candidate, decision",
    [("0.36 1.0", "accept"), ("0.6 0.6", "review")],
    ids=["honest-speedup", "tampered-timer"],
)
def test_cross_check_in_a_real_verification(tmp_path, candidate, decision):
    import sys

    from verifier.judge import verify

    base, cand = tmp_path / "base", tmp_path / "cand"
    for d, args in ((base, "0.6 1.0"), (cand, candidate)):
        d.mkdir()
        (d / "timed.py").write_text(TIMED)
        (d / "args").write_text(args)
    cfg = VerifyConfig.from_toml(_timed_config(f"{sys.executable} timed.py $(cat args)"))
    v = verify(base, cand, cfg)
    assert v.decision == decision, v.reason
    assert {m.name: m.source for m in v.metrics}["speed"] == "benchmark"
    if decision == "review":
        assert "reports speed +6" in v.reason and "verifier's own clock" in v.reason
        assert "after the ready pattern" in v.reason
