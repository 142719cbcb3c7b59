"""The loop with real git and the deterministic verifier stand-in (fakes.py):
tuner search, replay, policy and guard rejects, pause, refuse, stop,
propose + rebaseline, reverify."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.agents import ReplayAgent
from harness.ledger import Ledger
from harness.loop import load_state, rebaseline, reverify, run_task
from harness.spec import load_task

from . import fakes
from .target import FASTER_SETTINGS, TRUNCATED_CORE, make_patch, make_target, sh


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    return make_target(tmp_path, python=sys.executable)


def run(repo: Path, tmp_path: Path, task="t", agent=None, events=None, state="state", **kw):
    spec = load_task(repo, kw.pop("proposal", None), task)
    return run_task(
        repo, spec, state_dir=tmp_path / state, agent=agent, verifier=fakes.FakeVerifier(),
        on_event=(events.append if events is not None else None), **kw,
    )


def test_tuner_advance_run(repo: Path, tmp_path: Path):
    main = sh(repo, "rev-parse", "main")
    events: list = []
    res = run(repo, tmp_path, events=events)
    assert res.status == "exhausted", res.reason
    assert [(c.n, c.decision, c.status) for c in res.candidates] == [
        (1, "accept", "kept"), (2, "reject", "rolled_back"), (3, "reject", "rolled_back")]
    assert [c.hypothesis for c in res.candidates] == [
        "tuner: set delay = 18 (was 25) in app/settings.toml",
        "tuner: set delay = 25 (was 18) in app/settings.toml",
        "tuner: set delay = 32 (was 18) in app/settings.toml",
    ]
    assert res.bk_sha == res.candidates[0].sha != res.b0_sha == main
    assert res.gain_vs_b0 == pytest.approx(25 / 18 - 1)
    # candidates are commits on rsi/<task>/<n> with the hypothesis as subject
    assert sh(repo, "log", "-1", "--format=%s", "rsi/t/1") == res.candidates[0].hypothesis
    assert sh(repo, "rev-parse", "rsi/t/1") == res.candidates[0].sha
    assert sh(repo, "rev-parse", "rsi/t/best") == res.bk_sha
    # round 2 and 3 were made on the new Bk
    assert res.candidates[1].base_sha == res.candidates[2].base_sha == res.bk_sha
    # the user's branch and worktree are untouched
    assert sh(repo, "rev-parse", "main") == main and sh(repo, "status", "--porcelain") == ""
    # ledger: one line per candidate
    recs = Ledger(repo).records()
    assert [(r.id, r.decision, r.status) for r in recs] == [
        ("t/1", "accept", "kept"), ("t/2", "reject", "rolled_back"), ("t/3", "reject", "rolled_back")]
    assert recs[0].files == ["app/settings.toml"] and recs[0].lines_added == 1 and recs[0].ratio > 1.3
    kinds = [e.kind for e in events if e.kind != "progress"]
    assert kinds[0] == "baseline" and kinds[-1] == "finished"
    assert kinds.count("candidate") == 3 and kinds.count("round_started") == 4
    cand = [e for e in events if e.kind == "candidate"][0]
    assert cand.branch == "rsi/t/1" and cand.verdict.decision == "accept" and cand.record.id == "t/1"
    # agent trees and verification exports are removed after each use; no git worktree was made
    assert sorted(p.name for p in (tmp_path / "state" / "worktrees").iterdir()) == []
    assert sh(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_next_task_reads_the_ledger_and_does_not_retry(repo: Path, tmp_path: Path):
    run(repo, tmp_path, task="t")
    res = run(repo, tmp_path, task="t2", state="state2")
    assert res.status == "exhausted" and res.candidates == []


def test_replay_guard_and_policy_rejects(repo: Path, tmp_path: Path):
    p1 = make_patch(repo, tmp_path / "1.patch", "return only the first word", {"app/core.py": TRUNCATED_CORE})
    p2 = make_patch(repo, tmp_path / "2.patch", "tune the benchmark", {"bench/run.py": "print('fast')\n"})
    p3 = make_patch(repo, tmp_path / "3.patch", "lower the per-request delay", {"app/settings.toml": FASTER_SETTINGS})
    fakes.CALLS.clear()
    res = run(repo, tmp_path, agent=ReplayAgent([p1, p2, p3]), rounds=5)
    assert [(c.decision, c.status) for c in res.candidates] == [
        ("reject", "rolled_back"), ("reject", "rolled_back"), ("accept", "kept")]
    assert "guard failed: length(transcripts)" in res.candidates[0].reason
    assert res.candidates[1].reason == "edit policy: bench/run.py: protected path (matches 'bench/run.py')"
    assert res.status == "exhausted"
    recs = Ledger(repo).records()
    assert recs[1].violations == ["bench/run.py: protected path (matches 'bench/run.py')"]
    assert recs[1].verdict is None  # never measured
    assert len([c for c in fakes.CALLS if c[0] == "verify"]) == 2


def test_agent_error_is_recorded(repo: Path, tmp_path: Path):
    bad = tmp_path / "bad.patch"
    bad.write_text("--- a/app/missing.py\n+++ b/app/missing.py\n@@ -1 +1 @@\n-a\n+b\n")
    res = run(repo, tmp_path, agent=ReplayAgent([bad]), rounds=1)
    (c,) = res.candidates
    assert c.decision == "error" and "does not apply on Bk" in c.reason and c.sha == ""


def test_pause_after_straight_rejections_then_resume(repo: Path, tmp_path: Path):
    patches = [make_patch(repo, tmp_path / f"{i}.patch", f"cut output {i}", {"app/core.py": TRUNCATED_CORE + "#" * i + "\n"})
               for i in range(4)]
    events: list = []
    res = run(repo, tmp_path, agent=ReplayAgent(patches), rounds=10, events=events)
    assert res.status == "paused" and res.reason == "3 straight rejections (limit 3)"
    assert len(res.candidates) == 3 and events[-1].kind == "paused"
    res = run(repo, tmp_path, agent=ReplayAgent(patches), rounds=10)
    assert len(res.candidates) == 4 and res.candidates[-1].n == 4  # resumed, patch 4 next


def test_refuses_a_task_too_noisy_for_min_gain(repo: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("RSI_FAKE_NOISY", "1")
    events: list = []
    res = run(repo, tmp_path, events=events)
    assert res.status == "refused" and "too noisy for min_gain 10.00%" in res.reason
    assert res.candidates == [] and [e.kind for e in events if e.kind != "progress"] == ["refused"]
    assert Ledger(repo).records() == []


def test_a_noisy_calibration_is_measured_once_more_with_twice_the_pairs(repo: Path, tmp_path: Path, monkeypatch):
    spec = load_task(repo, None, "t")
    pairs = spec.verify.verifier.calibration_pairs
    # too noisy with the configured pairs, fine with twice as many: the task goes on
    monkeypatch.setenv("RSI_FAKE_NOISY", str(2 * pairs))
    fakes.CALLS.clear()
    events: list = []
    res = run(repo, tmp_path, events=events)
    assert res.status != "refused" and res.candidates, res.reason
    cals = [c[2] for c in fakes.CALLS if c[0] == "calibrate"]
    assert cals[:2] == [f"pairs={pairs}", f"pairs={2 * pairs}"]
    assert any("measuring it again with" in e.message for e in events if e.kind == "progress")
    assert load_state(tmp_path / "state").calibration.per_pair_sd < 0.05  # the second calibration stands
    # still too noisy: refused after that one retry, never a third
    monkeypatch.setenv("RSI_FAKE_NOISY", "1")
    fakes.CALLS.clear()
    res = run(repo, tmp_path, task="t2", state="state2")
    assert res.status == "refused" and "too noisy" in res.reason
    assert [c[2] for c in fakes.CALLS if c[0] == "calibrate"] == [f"pairs={pairs}", f"pairs={2 * pairs}"]


def test_should_stop(repo: Path, tmp_path: Path):
    calls = iter([False, True])
    res = run(repo, tmp_path, should_stop=lambda: next(calls))
    assert res.status == "stopped" and len(res.candidates) == 1


def test_propose_rebaseline_merged_conflict_reverified(repo: Path, tmp_path: Path):
    p1 = make_patch(repo, tmp_path / "1.patch", "delay 17", {"app/settings.toml": FASTER_SETTINGS})
    p2 = make_patch(repo, tmp_path / "2.patch", "delay 16", {"app/settings.toml": FASTER_SETTINGS.replace("17", "16")})
    p3 = make_patch(repo, tmp_path / "3.patch", "boost", {"app/boost.txt": "on\n"})
    res = run(repo, tmp_path, agent=ReplayAgent([p1, p2, p3]), keep="propose", rounds=3)
    assert [c.status for c in res.candidates] == ["open", "open", "open"]
    assert res.bk_sha == res.b0_sha  # Bk moves only on rebaseline
    old3 = res.candidates[2].sha
    # a maintainer merges candidate 1
    sh(repo, "merge", "-q", "--no-ff", "-m", "Merge rsi/t/1", "rsi/t/1")
    merged = sh(repo, "rev-parse", "main")
    spec = load_task(repo, None, "t")
    events: list = []
    rb = rebaseline(repo, spec, "main", state_dir=tmp_path / "state", verifier=fakes.FakeVerifier(),
                    on_event=events.append)
    assert rb.bk_sha == merged
    assert [(o.n, o.outcome) for o in rb.candidates] == [(1, "merged"), (2, "conflict"), (3, "reverified")]
    assert rb.candidates[2].decision == "accept"
    new3 = sh(repo, "rev-parse", "rsi/t/3")
    assert new3 != old3 and sh(repo, "rev-parse", "rsi/t/3^") == merged
    st = load_state(tmp_path / "state")
    assert st.bk_sha == merged and [c.status for c in st.candidates] == ["merged", "conflict", "open"]
    recs = [r for r in Ledger(repo).records() if r.event == "reverify"]
    assert [(r.candidate, r.status) for r in recs] == [(2, "conflict"), (3, "open")]
    events = [e for e in events if e.kind != "progress"]
    assert events[0].kind == "rebaseline" and {e.kind for e in events[1:]} == {"reverified"}
    # reverify one branch directly: judged against the new Bk
    v = reverify(repo, spec, "rsi/t/3", state_dir=tmp_path / "state", verifier=fakes.FakeVerifier())
    assert v.decision == "accept" and v.shas["bk"] == merged and v.objective.ratio == pytest.approx(1.2)


@pytest.mark.docker
def test_command_agent_in_the_loop(repo: Path, tmp_path: Path):
    from .test_agents import stand_in

    res = run(repo, tmp_path, agent=stand_in("faster"), rounds=1)
    (c,) = res.candidates
    assert c.decision == "accept" and c.hypothesis == "cut the per-request delay from 25 to 16 ms"
    n = len((repo / ".rsi" / "config.toml").read_text().splitlines())  # the stand-in writes one line over them all
    res = run(repo, tmp_path, agent=stand_in("protected"), rounds=2)
    c = res.candidates[-1]
    assert c.decision == "reject"
    assert c.reason == ("edit policy: .rsi/config.toml: protected path (matches '.rsi/**'); "
                        f"{n + 1} changed lines (+1 -{n}) exceed the cap of 50")
    log = (tmp_path / "state" / "rounds" / "1" / "agent.log").read_text()
    assert "read TASK.md" in log and "sk-fake" not in log


def test_cli_run_with_progress_display(repo: Path, tmp_path: Path):
    from typer.testing import CliRunner

    from harness.cli import app

    patch = make_patch(repo, tmp_path / "1.patch", "lower the per-request delay", {"app/settings.toml": FASTER_SETTINGS})
    r = CliRunner().invoke(app, ["run", "--repo", str(repo), "--agent", "replay", "--patch", str(patch),
                                 "--rounds", "3", "--verify", "tests.harness.fakes:factory"])
    assert r.exit_code == 0, r.output
    assert "lower the per-request delay" in r.output and "accept" in r.output and "exhausted" in r.output
    assert "+47.1%" in r.output  # 25 ms -> 17 ms
    state = Path(sh(repo, "rev-parse", "--absolute-git-dir")) / "rsi" / "local" / "state.json"
    assert state.exists()


def test_one_task_several_agents_in_turn(repo: Path, tmp_path: Path):
    """The demo's pattern: the tuner until it is exhausted, then replayed patches."""
    res = run(repo, tmp_path, rounds=10)
    assert res.status == "exhausted" and len(res.candidates) == 3
    p = make_patch(repo, tmp_path / "b.patch", "boost", {"app/boost.txt": "on\n"})
    res = run(repo, tmp_path, agent=ReplayAgent([p]), rounds=10)
    assert [(c.n, c.agent, c.decision) for c in res.candidates][3:] == [(4, "replay", "accept")]
    st = load_state(tmp_path / "state")
    assert set(st.agent_state) == {"tuner", "replay"} and st.agent_state["replay"] == {"next": 1}
    assert [r.agent for r in Ledger(repo).records()] == ["tuner", "tuner", "tuner", "replay"]
