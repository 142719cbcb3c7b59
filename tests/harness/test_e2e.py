"""End to end with the real verifier: real benchmark runs, real statistics.

In-process verification for the tuner run (fast); one run with every
calibration and verification in a fresh container (the production path)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.agents import ReplayAgent
from harness.ledger import Ledger
from harness.loop import run_task
from harness.spec import load_task

from .target import FASTER_SETTINGS, TRUNCATED_CORE, make_patch, make_target


def test_tuner_with_real_verifier_in_process(tmp_path: Path):
    repo = make_target(tmp_path, python=sys.executable)
    spec = load_task(repo, None, "e2e")
    events: list = []
    res = run_task(repo, spec, state_dir=tmp_path / "s", rounds=2, verifier="inprocess", on_event=events.append)
    assert res.status == "finished", res.reason
    c1, c2 = res.candidates
    assert c1.hypothesis.startswith("tuner: set delay = 18") and c1.decision == "accept", c1.reason
    assert c1.gain == pytest.approx(25 / 18 - 1, abs=0.12)
    assert c2.hypothesis.startswith("tuner: set delay = 25") and c2.decision == "reject", c2.reason
    assert res.bk_sha == c1.sha
    rec = Ledger(repo).records()[0]
    assert rec.verdict is not None and rec.verdict.decision == "accept" and rec.ratio_low > 1.0 and rec.guards
    cand = [e for e in events if e.kind == "candidate"][0]
    assert cand.verdict.pairs >= 6 and cand.verdict.shas["candidate"] == c1.sha
    assert any(e.kind == "progress" and e.phase == "measure" for e in events)


@pytest.mark.docker
def test_replay_with_real_verifier_in_containers(tmp_path: Path):
    repo = make_target(tmp_path, python="python3")  # the image's: nothing of the host is mounted
    p1 = make_patch(repo, tmp_path / "1.patch", "return only the first word", {"app/core.py": TRUNCATED_CORE})
    p2 = make_patch(repo, tmp_path / "2.patch", "lower the per-request delay", {"app/settings.toml": FASTER_SETTINGS})
    spec = load_task(repo, None, "box")
    events: list = []
    res = run_task(repo, spec, state_dir=tmp_path / "s", agent=ReplayAgent([p1, p2]), rounds=2, verifier="sandbox",
                   on_event=events.append)
    assert res.status == "finished", res.reason
    guard, fast = res.candidates
    assert guard.decision == "reject", guard.reason
    recs = Ledger(repo).records()
    failed = [g.name for g in recs[0].guards if g.status == "fail"]
    assert failed and all("transcripts" in n for n in failed), recs[0].guards
    assert fast.decision == "accept", fast.reason
    assert any(e.kind == "progress" and e.phase == "container" and e.candidate == 2 for e in events)
    v = recs[1].verdict
    assert v is not None and v.fingerprint is not None and v.fingerprint.cpu_count >= 1


@pytest.mark.docker
def test_candidate_cannot_touch_the_baselines_in_the_verifier_container(tmp_path: Path):
    """A candidate whose benchmark code tries to slow the baseline down by
    editing its tree: each run is its own container with only its own
    checkout, read-only, so it cannot."""
    repo = make_target(tmp_path, python="python3")  # the image's: nothing of the host is mounted
    spec = load_task(repo, None, "evil")
    from harness.verification import SandboxVerifier
    from harness.workspace import Workspace

    ws = Workspace(repo, tmp_path / "wts")
    bk = ws.export("bk", "main", for_sandbox=True)
    cand = ws.export("cand", "main", for_sandbox=True)
    (cand / "app" / "core.py").write_text(
        (cand / "app" / "core.py").read_text()
        + f"\ntry:\n    open({str(bk / 'app' / 'settings.toml')!r}, 'w').write('delay_ms = 500\\n')\n"
        "except OSError:\n    pass\n"
    )
    v = SandboxVerifier().verify(bk, cand, spec, b0=None, shas={}, calibration=None)
    assert (bk / "app" / "settings.toml").read_text().startswith("# speed settings\ndelay_ms = 25")
    assert v.decision != "accept", v.reason
