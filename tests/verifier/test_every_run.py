"""Issue 17 (trust, round 2), the verifier's side: every candidate run is
judged; no run can tell which run it is (a fresh export per run, a secret run
order recorded in the verdict); output changes are visible even when they
pass; the measuring code runs from B0; a self-reported objective is never
accepted on its own word. Decided by mechanism (a reason, a count, a byte)."""

from __future__ import annotations

import math
import os
import stat
import sys
import wave
from pathlib import Path

import numpy as np
import pytest

from verifier.config import VerifyConfig
from verifier.export import EXPORT_MTIME, fresh_export
from verifier.guards import EXACT_SNR_DB, Evaluator
from verifier.isolation import ProcessIsolation
from verifier.judge import cross_check, verify
from verifier.measure import ProgressEvent, Session
from verifier.protocol import BenchResult
from verifier.runner import RunRecord

from .conftest import BASE_WORK, CONFIG, TIMED_SLEEP
from .test_provenance import IN_PROCESS, _gain
from .test_provenance import _session as fabricated_session

ROOT = Path(__file__).resolve().parents[2]

# ---- a fresh export per run ------------------------------------------------------------


def test_fresh_export_copies_the_tree_with_timestamps_that_say_nothing(tmp_path):
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("print(1)\n")
    (src / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(src / "run.sh", 0o755)
    (src / "link").symlink_to("/etc/hostname")
    os.mkfifo(src / "fifo")
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    os.utime(src / "pkg" / "a.py", (1_700_000_000, 1_700_000_000))
    out = tmp_path / "out"
    out.mkdir()
    a, b = fresh_export(src, out), fresh_export(src, out)
    assert a != b and a.parent == out
    for d in (a, b):
        assert stat.S_IMODE(os.stat(d / "run.sh").st_mode) == 0o755
        assert os.readlink(d / "link") == "/etc/hostname"  # copied as a link, never followed
        assert not (d / "fifo").exists() and not (d / ".git").exists()
        for p in (d, d / "pkg", d / "pkg" / "a.py", d / "run.sh"):
            assert os.stat(p).st_mtime == EXPORT_MTIME and os.stat(p).st_atime == EXPORT_MTIME
        assert (d / "pkg" / "a.py").read_text() == "print(1)\n"
        assert os.lstat(d / "link").st_mtime == EXPORT_MTIME
    # new files: nothing one run does to its copy reaches another's
    assert os.stat(a / "pkg" / "a.py").st_ino != os.stat(b / "pkg" / "a.py").st_ino
    (a / "pkg" / "a.py").write_text("changed")
    assert (b / "pkg" / "a.py").read_text() == "print(1)\n"
    assert (src / "pkg" / "a.py").read_text() == "print(1)\n"


# What a run can read about its checkout and the runs before it: the page cache
# of a file (mincore; it evicts the pages afterwards with posix_fadvise, as a
# cheat marking "a run has happened" would), its mtime (it touches the file
# afterwards), a file a previous run left.
PROBE = r"""
import ctypes, json, mmap, os, pathlib
fd = os.open("pad.bin", os.O_RDONLY)
n = os.fstat(fd).st_size
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
addr = libc.mmap(None, n, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
vec = ctypes.create_string_buffer((n + 4095) // 4096)
assert libc.mincore(ctypes.c_void_p(addr), n, vec) == 0, ctypes.get_errno()
resident = sum(b & 1 for b in vec.raw)
os.fsync(fd)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
seen = {"resident_pages": resident, "pad_mtime": os.stat("pad.bin").st_mtime,
        "other_atime": os.stat("other.txt").st_atime,
        "left_by_a_run": os.path.exists("left-by-a-run")}
pathlib.Path("left-by-a-run").write_text("x")
os.utime("pad.bin")
json.dump({"metrics": {"m": 1.0}, "outputs": {"seen": seen}}, open(os.environ["RSI_RESULT"], "w"))
"""


def test_no_run_can_tell_which_run_it_is(tmp_path):
    cfg = VerifyConfig.from_toml(
        f'[benchmarks.p]\ncommand = "{sys.executable} probe.py"\n[benchmarks.p.metrics]\n'
        'm = "lower"\n[objective]\nbenchmark = "p"\nmetric = "m"\n'
    )
    arms = {}
    for arm in ("bk", "candidate"):
        d = tmp_path / arm
        d.mkdir()
        (d / "probe.py").write_text(PROBE)
        (d / "pad.bin").write_bytes(os.urandom(64 * 4096))
        (d / "other.txt").write_text("never read")
        arms[arm] = d
    with Session(cfg.benchmark(), arms, seed=None, isolation=ProcessIsolation()) as s:
        assert s.warmup(1) is None and s.add_pairs(2) is None
        seen = [r.result.outputs["seen"] for arm in arms for r in s.records[arm]]
    assert len(seen) == 4
    assert all(x == seen[0] for x in seen), seen  # every run of every arm: the same
    assert seen[0]["pad_mtime"] == EXPORT_MTIME and not seen[0]["left_by_a_run"]
    # the checkouts themselves are untouched (runs see copies)
    assert not (arms["candidate"] / "left-by-a-run").exists()


# ---- every candidate run judged --------------------------------------------------------

# Honest in its first two runs (its warm-up and its first measured run, under
# the old fixed order), wrong afterwards; the counter lives outside the
# checkout (process isolation shares the host), the way a cheat in a container
# would use any state that survives between runs.
FIRST_RUNS_HONEST = (
    'import json, os, pathlib, time\nprint("READY", flush=True)\n'
    + TIMED_SLEEP
    + r"""texts = ["the cat sat on the mat", "hello world"]
if os.path.exists("counter.txt"):
    counter = pathlib.Path(open("counter.txt").read().strip())
    n = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(n + 1))
    if n >= 2:
        texts = ["the cat sat on a mat", "hello world"]
json.dump({"metrics": {"loop_s": el}, "outputs": {"texts": texts}},
          open(os.environ["RSI_RESULT"], "w"))
"""
)

WER = '\n[[quality]]\nkind = "wer"\noutput = "texts"\nmax = 0.0\n'


def test_a_candidate_honest_in_its_first_runs_only_is_rejected_by_a_later_run(checkout, tmp_path):
    base = checkout("base")
    cand = checkout("cand", work=int(BASE_WORK * 0.6))
    for d in (base, cand):
        (d / "bench.py").write_text(FIRST_RUNS_HONEST)
    (cand / "counter.txt").write_text(str(tmp_path / "runs-so-far"))
    v = verify(base, cand, VerifyConfig.from_toml(CONFIG + WER))
    assert v.decision == "reject", v.reason
    wer = next(g for g in v.guards if g.kind == "wer")
    assert wer.status == "fail" and "candidate run 2 of" in wer.detail, wer.detail
    assert "WER(texts)" in v.reason and "run(s) failed" in v.reason
    assert int((tmp_path / "runs-so-far").read_text()) == 1 + v.pairs  # a warm-up + each pair


def _texts_session(cfg: VerifyConfig, outs: dict[str, list[list[str]]]):
    """An Evaluator fed real snapshots of runs that output ``outs[arm][i]``."""
    ev = Evaluator(cfg, cfg.objective.benchmark, {a: Path("/nonexistent") for a in outs})
    on_run = ev.on_run_for(cfg.quality_for(cfg.objective.benchmark), ev.arms)
    for arm, runs in outs.items():
        for i, texts in enumerate(runs):
            rec = RunRecord(ok=True, result=BenchResult(metrics={"loop_s": 1.0},
                                                        outputs={"texts": texts}))  # fmt: skip
            on_run(arm, rec, i)
    return ev


def test_outputs_that_do_not_repeat_where_bk_does_are_flagged():
    cfg = VerifyConfig.from_toml(
        CONFIG + '\n[[quality]]\nkind = "wer"\noutput = "texts"\nmax = 0.5\n'
    )
    same = ["the cat sat on the mat", "hello world"]
    odd = ["the cat sat on a mat", "hello world"]
    ev = _texts_session(cfg, {"bk": [same] * 3, "candidate": [same, odd, same]})
    (flag,) = ev.flags()
    assert "differ between its own runs (run 1 vs run 2, in outputs.texts)" in flag
    assert "bit-exact across all 3 of its runs" in flag
    # a consistent change is no flag, but a tradeoff line (it passes WER <= 50%)
    ev = _texts_session(cfg, {"bk": [same] * 3, "candidate": [odd] * 3})
    assert ev.flags() == []
    (line,) = ev.output_changes([ev.quality_guard(cfg.quality[0], "bk")])
    assert line.startswith("Outputs changed (outputs.texts) vs Bk") and "WER 12.50%" in line
    # Bk that does not repeat itself: neither (its changes are its noise)
    ev = _texts_session(cfg, {"bk": [same, odd, same], "candidate": [same, odd, odd]})
    assert ev.flags() == [] and ev.output_changes([]) == []


def test_a_flag_turns_an_accept_into_review(checkout, tmp_path):
    base = checkout("base")
    cand = checkout("cand", work=int(BASE_WORK * 0.6))
    for d in (base, cand):
        (d / "bench.py").write_text(FIRST_RUNS_HONEST)
    (cand / "counter.txt").write_text(str(tmp_path / "runs-so-far"))
    loose = '\n[[quality]]\nkind = "wer"\noutput = "texts"\nmax = 0.5\n'
    v = verify(base, cand, VerifyConfig.from_toml(CONFIG + loose))
    assert any("differ between its own runs" in x for x in (v.reason, *v.warnings)), v
    assert v.decision != "accept"


# ---- waveforms: changes visible, bounds from Bk's repeatability --------------------------


def _wav(path: Path, samples: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(np.clip(samples, -32768, 32767).astype("<i2").tobytes())


def _audio_eval(tmp_path: Path, guard_toml: str, runs: dict[str, list[np.ndarray]]) -> Evaluator:
    cfg = VerifyConfig.from_toml(CONFIG + guard_toml)
    q = cfg.quality_for("loop")
    ev = Evaluator(cfg, "loop", {a: tmp_path for a in runs})
    on_run = ev.on_run_for(q, ev.arms)
    for arm, waves in runs.items():
        for i, pcm in enumerate(waves):
            d = tmp_path / f"{arm}-{i}"
            _wav(d / "utt0.wav", pcm)
            result = BenchResult(metrics={"loop_s": 1.0})
            on_run(arm, RunRecord(ok=True, result=result, output_dir=str(d)), i)
    return ev


def _speech(seed: int = 0) -> np.ndarray:
    t = np.arange(16000) / 16000
    rng = np.random.default_rng(seed)
    return np.round(12000 * np.sin(2 * np.pi * 220 * t) + rng.normal(0, 2000, t.size))


def test_tiny_tts_bound_fails_9_bit_audio_and_passes_honest_rounding(tmp_path):
    toml = (ROOT / "examples/tiny-tts/.rsi/config.toml").read_text()
    wf = next(q for q in VerifyConfig.from_toml(toml).quality if q.kind == "waveform")
    ref = _speech()
    honest = ref.copy()
    honest[::200] += 1  # a float change that flips the last bit of 0.5% of the samples
    nine_bit = np.round(ref / 128) * 128  # 9-bit samples, as 16-bit
    guard = f'\n[[quality]]\nkind = "waveform"\nfiles = "*.wav"\nmin_snr_db = {wf.min_snr_db}\n'
    ev = _audio_eval(tmp_path / "h", guard, {"bk": [ref, ref], "candidate": [honest, honest]})
    ok = ev.quality_guard(ev.config.quality[0], "bk")
    assert ok.status == "pass" and ok.value > 95, ok.detail
    (line,) = ev.output_changes([ok])
    assert line.startswith(f"Audio changed: {ok.value:.1f} dB SNR vs Bk")
    ev = _audio_eval(tmp_path / "9", guard, {"bk": [ref, ref], "candidate": [nine_bit] * 2})
    bad = ev.quality_guard(ev.config.quality[0], "bk")
    assert bad.status == "fail" and 40 < bad.value < 60, bad.detail


def test_default_waveform_bound_follows_bks_repeatability(tmp_path):
    guard = '\n[[quality]]\nkind = "waveform"\nfiles = "*.wav"\n'
    ref = _speech()
    nine_bit = np.round(ref / 128) * 128
    ev = _audio_eval(tmp_path / "a", guard, {"bk": [ref, ref], "candidate": [nine_bit] * 2})
    g = ev.quality_guard(ev.config.quality[0], "bk")
    assert g.status == "fail" and f">= {EXACT_SNR_DB:g} dB" in g.bound
    assert "Bk's audio is bit-exact across its runs" in g.detail
    # a Bk whose own runs differ by ~40 dB: the same 9-bit audio is within its noise
    noisy = ref + np.random.default_rng(1).normal(0, 60, ref.size)
    ev = _audio_eval(tmp_path / "b", guard, {"bk": [ref, np.round(noisy)], "candidate": [nine_bit]})
    g = ev.quality_guard(ev.config.quality[0], "bk")
    own = float(g.bound.split()[1])
    assert g.status == "pass" and own < g.value and math.isfinite(own), g
    assert "Bk's own runs differ by" in g.detail and ev.output_changes([g]) == []


# ---- the run order: a per-verification secret, replayable --------------------------------


def test_run_order_is_a_secret_recorded_in_the_verdict_and_replays(checkout):
    base, cand = checkout("base"), checkout("cand", work=int(BASE_WORK * 0.6))
    cfg = CONFIG.replace("max_pairs = 16", "max_pairs = 8")  # one look: 8 pairs

    def run(text: str):
        order: list[str] = []

        def progress(e: ProgressEvent) -> None:
            if e.phase in ("warmup", "measure"):
                order.append(e.arm)

        return verify(base, cand, VerifyConfig.from_toml(text), progress=progress), order

    one, order1 = run(cfg)
    two, _ = run(cfg)
    assert one.seed is not None and two.seed is not None and one.seed != two.seed
    replay, order3 = run(cfg + f"seed = {one.seed}\n")
    assert replay.seed == one.seed and order3 == order1 and len(order1) == 2 * (1 + 8)
    # the CLI replays it too (--seed), and says which seed a verification drew
    from typer.testing import CliRunner

    from verifier.cli import app

    (base / ".rsi" / "config.toml").write_text(cfg)
    out = CliRunner().invoke(app, ["verify-dirs", str(base), str(cand), "--seed", str(one.seed)])
    said = " ".join(out.output.split())
    assert f'"seed": {one.seed}' in said and f"run order seed {one.seed}" in said, said


# ---- the measuring code from B0 ---------------------------------------------------------

EVALUATE = r"""
import json, os
json.dump({"metrics": {"judge_id": float(open("who.txt").read())}}, open(os.environ["RSI_RESULT"], "w"))
"""


def test_the_evaluator_runs_from_b0_never_from_bk_or_the_candidate(checkout):
    cfg = CONFIG.replace(
        "timeout_s = 30\n",
        f'timeout_s = 30\nevaluator = "{sys.executable} evaluate.py"\n'
        'evaluator_metrics = ["judge_id"]\n',
    ).replace('loop_s = "lower"', 'loop_s = "lower"\njudge_id = "higher"')
    cfg = cfg.replace("initial_pairs = 8", "initial_pairs = 2").replace(
        "max_pairs = 16", "max_pairs = 8"
    )
    arms = {}
    for name, who in (("b0", "1"), ("bk", "2"), ("cand", "3")):
        arms[name] = checkout(name, config=cfg)
        (arms[name] / "evaluate.py").write_text(EVALUATE)
        (arms[name] / "who.txt").write_text(who)
    v = verify(arms["bk"], arms["cand"], VerifyConfig.from_toml(cfg), b0=arms["b0"])
    row = next(m for m in v.metrics if m.name == "judge_id")
    assert (row.b0, row.bk, row.candidate) == (1.0, 1.0, 1.0), row
    assert row.source == "evaluator"


# ---- a self-reported objective is never accepted on its own word --------------------------


def test_a_real_speedup_below_min_gain_under_a_slowed_timer_is_not_corroborated():
    # the runs really are 20% faster (after the ready pattern), the timer claims +40%:
    # enough clock for the claim's share, but below min_gain = 30% on the clock
    s = fabricated_session(
        IN_PROCESS,
        {"bk": {"startup": 0.2}, "candidate": {"startup": 0.2, "claim": 1.4, "wall": 1 / 1.2}},
    )
    with s:
        assert cross_check(s, "speed", "higher", _gain(s), 0.05, 0.95) is None
        why = cross_check(s, "speed", "higher", _gain(s), 0.30, 0.95)
    assert why is not None and "below min_gain 30.0%" in why and "on its own word" in why


def test_a_self_reported_objective_without_the_cross_check_goes_to_review(checkout):
    v = verify(
        checkout("base"),
        checkout("cand", work=int(BASE_WORK * 0.6)),
        VerifyConfig.from_toml(CONFIG + "cross_check = false\n"),
    )
    assert v.decision != "accept", v.reason
    if v.objective is not None and v.objective.gain > 0.05:  # a claim worth keeping: a human looks
        said = [x for x in (v.reason, *v.warnings) if "never accepted on its own word" in x]
        assert said and (v.decision != "review" or said[0] == v.reason), v


@pytest.mark.parametrize("b0", [False, True])
def test_session_measures_from_b0_by_default(tmp_path, b0):
    cfg = VerifyConfig.from_toml(CONFIG)
    arms = {"bk": tmp_path / "bk", "candidate": tmp_path / "c"} | (
        {"b0": tmp_path / "b0"} if b0 else {}
    )
    with Session(cfg.benchmark(), arms, seed=0) as s:
        assert s.base_checkout == arms["b0" if b0 else "bk"]


# ---- the cross-check counts every run and is not a coin flip on a busy machine (issue 29) ----


def _clock_session(claims: dict[str, list[float]], windows: dict[str, list[float]]) -> Session:
    """Runs with the given claimed speeds and clock windows (after READY), per arm."""
    cfg = VerifyConfig.from_toml(IN_PROCESS)
    s = Session(cfg.benchmark(), {a: f"/nonexistent/{a}" for a in claims}, seed=1)
    for arm in claims:
        for claim, window in zip(claims[arm], windows[arm], strict=True):
            s.records[arm].append(
                RunRecord(ok=True, wall_s=0.2 + window, startup_s=0.2, cpu_s=window,
                          peak_rss_mib=100.0,
                          result=BenchResult(metrics={"speed": 10 * claim}),
                          sources={"speed": "benchmark"})
            )  # fmt: skip
    return s


def test_an_honest_small_gain_is_not_sent_to_review_by_a_clock_blurred_by_load():
    """An honest +2% (min_gain 1%): its timed part 2% shorter, and each window
    after READY also holds the run's exit, which a busy machine stretches by a
    variable amount (here 0-25 ms on a 100 ms window, in both arms alike).
    Compared as a point, the clock's median fell below min_gain on a third of
    these seeds (the review the issue saw); judged by its spread, the clock
    contradicts none of them, while it still contradicts a slowed timer."""
    old_flags = new_flags = timer_flags = 0
    for seed in range(60):
        rng = np.random.default_rng(seed)
        n = 10
        exit_c, exit_b = rng.uniform(0, 0.025, n), rng.uniform(0, 0.025, n)
        claims = {"bk": list(1 + rng.normal(0, 0.003, n)),
                  "candidate": list(1.02 * (1 + rng.normal(0, 0.003, n)))}
        windows = {"bk": list(0.1 + exit_b), "candidate": list(0.1 / 1.02 + exit_c)}
        s = _clock_session(claims, windows)
        with s:
            gain = _gain(s)
            d = np.log(np.array(windows["bk"]) / np.array(windows["candidate"]))
            old_flags += math.expm1(float(np.median(d))) < 0.01  # the old point rule
            new_flags += cross_check(s, "speed", "higher", gain, 0.01, 0.95) is not None
        # the same blur, a slowed timer: claims +30%, the runs as long as Bk's
        timer = {"bk": claims["bk"], "candidate": [1.3 * c for c in claims["bk"]]}
        s = _clock_session(timer, {"bk": windows["bk"], "candidate": list(0.1 + exit_c)})
        with s:
            timer_flags += cross_check(s, "speed", "higher", _gain(s), 0.01, 0.95) is not None
    assert old_flags >= 12, old_flags  # the mechanism: a point on a blurred, diluted clock
    assert new_flags <= 3, new_flags
    assert timer_flags >= 57, timer_flags


def test_the_cross_check_counts_a_wild_run_in_full():
    """The benchmark reports +12% in every run, while one run in ten really
    took 5x as long on the verifier's clock: the median of the pairs would not
    see it; the total time of every run does."""
    n = 10
    claims = {"bk": [1.0] * n, "candidate": [1.12] * n}
    windows = {"bk": [0.1] * n, "candidate": [0.1 / 1.12] * n}
    windows["candidate"][4] = 0.5 / 1.12
    s = _clock_session(claims, windows)
    with s:
        why = cross_check(s, "speed", "higher", _gain(s), 0.05, 0.95)
    assert why is not None and "over all 10 pairs (total time" in why, why
    assert "saving -" in why, why  # slower over every run
