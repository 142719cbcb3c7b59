"""harness.demo: the target is prepared as a fresh repo, the loop runs the tuner
then the replay of the demo patches, and the reports are written.

The fast tests use a stand-in verifier backend (no benchmark runs, no torch) so
that they check the demo's orchestration; the slow one runs a reduced demo for
real (in-process verification of one good and one bad patch)."""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

import pytest
from rich.console import Console

from harness.demo import PATCHES, hidden_seed, prepare_target, run_demo
from verifier.verdict import (
    Fingerprint,
    GuardResult,
    Interval,
    MetricComparison,
    ObjectiveResult,
    Verdict,
)

GOOD = sorted(PATCHES.glob("0*.patch"))
BAD = sorted(PATCHES.glob("9*.patch"))


def _throughput(tree: Path) -> tuple[float, bool]:
    """A stand-in measurement: 4 req/s, x1.25 per overhead removed; and
    whether the tree emits less audio than it should."""
    src = (tree / "tiny_tts" / "pipeline.py").read_text()
    fixes = sum(marker in src for marker in (
        "self._events.get(timeout=0.1)",     # 01
        'getattr(self, "_spk", None)',        # 02
        "all frames in one call",             # 03
        "clamp_(-1.0, 1.0)",                  # 04
    ))
    short = "FRAMES_PER_WORD - 1" in src or "[:MAX_FRAMES]" in src
    return 4.0 * 1.25 ** fixes * (1.3 if short else 1.0), short


class StandInVerifier:
    """Implements harness.verification.VerifierBackend without running anything."""

    name = "stand-in"

    def __init__(self):
        self.calls: list[tuple[str, str]] = []

    def calibrate(self, ref, spec, *, progress=None):
        self.calls.append(("calibrate", str(ref)))
        return None

    def verify(self, baseline, candidate, spec, *, b0, shas, calibration, progress=None):
        self.calls.append(("verify", str(candidate)))
        if progress:
            progress("measuring", {"phase": "measure", "run": 3, "total": 6, "arm": "candidate"})
        bk, _ = _throughput(Path(baseline))
        b0v, _ = _throughput(Path(b0)) if b0 else (bk, False)
        cand, short = _throughput(Path(candidate))
        ratio = cand / bk
        guards = [GuardResult(name="length(audio_samples) within ±1%", kind="output_length",
                              metric="outputs.audio_samples", against=ref, bound="within ±1.0%",
                              value=-0.25 if short else 0.0, status="fail" if short else "pass",
                              detail="length 3 vs 4 (-25.00%)" if short else "")
                  for ref in (["bk", "b0"] if b0 else ["bk"])]
        if short:
            decision, reason = "reject", "guard failed: length(audio_samples) within ±1% vs Bk: -25%"
        elif ratio > 1.03:
            decision, reason = "accept", f"gain {ratio - 1:+.1%}"
        else:
            decision, reason = "reject", "objective wholly below min_gain"
        ci = Interval(low=ratio * 0.98, high=ratio * 1.02)
        return Verdict(
            decision=decision, reason=reason, benchmark="tts",
            objective=ObjectiveResult(benchmark="tts", metric="throughput", direction="higher", ratio=ratio,
                                      ratio_ci=ci, gain=ratio - 1, gain_ci=Interval(low=ci.low - 1, high=ci.high - 1),
                                      gain_vs_b0=cand / b0v - 1 if b0 else None, p_value=0.004, min_gain=0.03),
            metrics=(MetricComparison(name="throughput", direction="higher", b0=b0v if b0 else None, bk=bk,
                                      candidate=cand, ratio_vs_bk=ratio, ratio_vs_bk_ci=ci,
                                      ratio_vs_b0=cand / b0v if b0 else None),),
            guards=tuple(guards), shas=shas, pairs=8, runs=24, fingerprint=Fingerprint(cpu_count=2),
        )


def _console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=160, force_terminal=False), buf


def test_prepare_target_is_a_fresh_repo_without_patches(tmp_path):
    target = tmp_path / "target"
    sha = prepare_target(target, overrides={"verifier": {"initial_pairs": 6}})
    log = subprocess.run(["git", "log", "--format=%H %s"], cwd=target, check=False, capture_output=True, text=True).stdout
    assert log.split()[0] == sha and len(log.strip().splitlines()) == 1
    assert subprocess.run(["git", "status", "--porcelain"], cwd=target, check=False, capture_output=True, text=True).stdout == ""
    assert not list(target.rglob("*.patch")) and not list(target.rglob("__pycache__"))
    cfg = (target / ".rsi" / "config.toml").read_text()
    assert "initial_pairs = 6" in cfg and cfg.startswith("# rsi demo: overridden settings: [verifier] initial_pairs=6")
    prepare_target(target)  # again: starts over
    assert "initial_pairs = 4" in (target / ".rsi" / "config.toml").read_text()


def test_hidden_seed_is_drawn_once_kept_private_and_removed_after(tmp_path, monkeypatch):
    monkeypatch.delenv("TTS_EVAL_SEED", raising=False)
    with hidden_seed(tmp_path, "TTS_EVAL_SEED"):
        first = os.environ["TTS_EVAL_SEED"]
    assert "TTS_EVAL_SEED" not in os.environ and first.isdigit()
    kept = tmp_path / "hidden-seed"
    assert kept.read_text().strip() == first and kept.stat().st_mode & 0o777 == 0o600
    with hidden_seed(tmp_path, "TTS_EVAL_SEED"):  # --resume: the same texts
        assert os.environ["TTS_EVAL_SEED"] == first
    monkeypatch.setenv("TTS_EVAL_SEED", "77")  # the runner's own secret wins
    with hidden_seed(tmp_path, "TTS_EVAL_SEED"):
        assert os.environ["TTS_EVAL_SEED"] == "77"
    assert os.environ["TTS_EVAL_SEED"] == "77"
    with hidden_seed(tmp_path / "none", None):  # no hidden seed declared: nothing to do
        pass


def test_demo_runs_tuner_then_replay_and_writes_reports(tmp_path):
    console, buf = _console()
    backend = StandInVerifier()
    res = run_demo(tmp_path / "rsi-demo", verify=backend, console=console, live=False, tuner_rounds=2)
    out = buf.getvalue()

    hyps = [c.hypothesis for c in res.candidates]
    assert hyps[0].startswith("tuner: set threads = 2") and hyps[1].startswith("tuner: set rope_variant = fused")
    assert hyps[2:] == [
        "speak 3 codec frames per word instead of 4",
        "vocode each chunk in one call instead of one call per codec frame",
        "keep tensors between stages (no Python lists)",
        "stats worker: block on the queue instead of spinning",
        "compute the speaker embedding once, not per streamed chunk",
    ]
    assert [c.status for c in res.candidates] == ["rolled_back"] * 3 + ["kept"] * 4
    assert res.gain_ratio == pytest.approx(1.25 ** 4)
    assert len(res.guard_rejections) == 1
    assert all(res.targets.values())

    md = (tmp_path / "rsi-demo" / "report.md").read_text()
    assert md == res.report_md.read_text() and len(md) < 65_536
    assert "✅ **Accepted**" in md and "+144.1% vs B0 (2.44x)" in md
    assert "B0 → Bk 2.44x (last kept: compute the speaker embedding once, not per streamed chunk)" in md
    assert "<details><summary>Ledger (7 records) and fingerprint</summary>" in md
    assert "```mermaid" in md and ('x-axis ["#1 rolled back", "#2 rolled back", "#3 rolled back", '
                                   '"#4 kept", "#5 kept", "#6 kept", "#7 kept"]') in md
    html = (tmp_path / "rsi-demo" / "report.html").read_text()
    assert "<svg" in html and "<script" not in html

    assert "verified gain B0 → final Bk: 2.44x" in out
    assert "✓ a candidate rejected by a guard" in out
    assert "final Bk vs B0" in out
    assert backend.calls[0][0] == "calibrate" and [c[0] for c in backend.calls].count("verify") == 7

    # the target's history: B0 commit only on main; candidates on rsi/<task>/<n> branches; a ledger branch
    target = tmp_path / "rsi-demo" / "target"
    branches = subprocess.run(["git", "branch", "--format=%(refname:short)"], cwd=target, check=False, capture_output=True,
                              text=True).stdout.split()
    assert "rsi/ledger" in branches and any(b.startswith("rsi/tiny-tts-demo/") for b in branches)


def test_demo_with_only_a_bad_patch_misses_the_gain_target(tmp_path):
    console, buf = _console()
    res = run_demo(tmp_path / "d", verify=StandInVerifier(), console=console, live=False,
                   patches=BAD[:1], tuner_rounds=0)
    assert [c.decision for c in res.candidates] == ["reject"]
    assert res.gain_ratio is None
    t = res.targets
    assert not t["verified gain >= 1.3x"] and t["a candidate rejected by a guard"]
    assert "✗ verified gain >= 1.3x" in buf.getvalue()
    assert res.report_md is not None and "❌ **Rejected**" in res.report_md.read_text()


@pytest.mark.torch
@pytest.mark.docker
@pytest.mark.slow
def test_reduced_demo_for_real(tmp_path):
    """One overhead fix and one bad patch, measured as the demo measures them
    (the verifier on the host, every server, client and evaluator run in its own
    container) with few pairs: the bad patch is rejected by the output-length
    guard whatever the noise."""
    console, _ = _console()
    res = run_demo(tmp_path / "d", verify="sandbox", console=console, live=False,
                   patches=[GOOD[2], BAD[0]], tuner_rounds=0,
                   overrides={"verifier": {"initial_pairs": 2, "step": 2, "max_pairs": 2, "calibration_pairs": 2,
                                           "alpha": 0.3},
                              "objective": {"min_gain": 50.0}})  # whatever the noise: no refusal
    assert [c.hypothesis for c in res.candidates][1] == "speak 3 codec frames per word instead of 4"
    bad = res.candidates[1]
    assert bad.decision == "reject" and "length(audio_samples)" in bad.reason, bad.reason
    assert res.report_md.exists() and res.report_html.exists()


def test_live_display_renders_on_a_terminal(tmp_path):
    buf = io.StringIO()
    console = Console(file=buf, width=120, force_terminal=True)
    res = run_demo(tmp_path / "d", verify=StandInVerifier(), console=console, live=True,
                   patches=GOOD[:1] + BAD[:1], tuner_rounds=1)
    out = buf.getvalue()
    assert "rsi demo: tiny-tts" in out  # the live panel
    assert "stats worker: block on the queue" in out
    assert [c.decision for c in res.candidates] == ["reject", "accept", "reject"]
