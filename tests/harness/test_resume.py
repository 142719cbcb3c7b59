"""Resume after a kill: SIGKILL a real `python -m harness run` mid-round, rerun,
and check nothing is lost or duplicated."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.ledger import Ledger
from harness.loop import load_state

from .target import make_target, sh

ROOT = Path(__file__).resolve().parents[2]


def start(repo: Path, state: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RSI_FAKE_VERIFY_SLEEP": "1.5"}
    return subprocess.Popen(
        [sys.executable, "-m", "harness", "run", "--repo", str(repo), "--agent", "tuner", "--quiet",
         "--state-dir", str(state), "--verify", "tests.harness.fakes:factory", "--task-id", "k"],
        cwd=ROOT, env=env, stdout=open(log, "a"), stderr=subprocess.STDOUT, start_new_session=True,
    )


def wait_for(pred, proc: subprocess.Popen, timeout: float = 60) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return
        assert proc.poll() is None, "the run ended before the kill point"
        time.sleep(0.05)
    raise AssertionError("kill point not reached")


def stage(state: Path) -> tuple[int, str | None]:
    try:
        st = json.loads((state / "state.json").read_text())
    except (OSError, ValueError):
        return (0, None)
    ip = st.get("in_progress")
    return (st["rounds_done"], ip["stage"] if ip else None)


def test_kill_mid_verify_and_mid_record_then_resume(tmp_path: Path):
    repo = make_target(tmp_path, python=sys.executable)
    state = tmp_path / "state"
    log = tmp_path / "run.log"

    # kill 1: while round 1's candidate is being verified
    p = start(repo, state, log)
    wait_for(lambda: stage(state) == (0, "verify"), p)
    time.sleep(0.3)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    st = load_state(state)
    assert st.in_progress.stage == "verify" and st.in_progress.sha and Ledger(repo).records() == []
    sha1 = st.in_progress.sha

    # kill 2: during round 2's verification, after round 1 was recorded
    p = start(repo, state, log)
    wait_for(lambda: stage(state) == (1, "verify"), p)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    assert [r.id for r in Ledger(repo).records()] == ["k/1"]

    # run to the end
    p = start(repo, state, log)
    assert p.wait(timeout=120) == 0, log.read_text()

    text = log.read_text()
    assert text.count("[resumed]") == 2
    st = load_state(state)
    assert st.status == "exhausted" and st.in_progress is None
    assert [(c.n, c.decision) for c in st.candidates] == [(1, "accept"), (2, "reject"), (3, "reject")]
    assert st.candidates[0].sha == sha1  # the committed candidate was not made again
    recs = Ledger(repo).records()
    assert [r.id for r in recs] == ["k/1", "k/2", "k/3"]  # nothing lost, nothing twice
    branches = sh(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/rsi/k/").split()
    assert sorted(branches) == ["rsi/k/1", "rsi/k/2", "rsi/k/3", "rsi/k/best"]
    assert sh(repo, "rev-parse", "rsi/k/best") == sha1
    # no git worktree was ever made, and no export is left behind (a killed run's are redone and removed)
    wts = sh(repo, "worktree", "list", "--porcelain")
    assert wts.count("worktree ") == 1
    assert list((state / "worktrees").iterdir()) == []
