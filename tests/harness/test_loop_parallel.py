"""Several agents at once (harness.parallel) with real git, the replay agent and
the deterministic verifier stand-in: agents overlap, measurement never does,
the ledger stays in candidate order, the digest reaches later rounds, a
candidate made on an older Bk is moved onto the current one (or rejected when
it no longer applies), and a killed run resumes."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from harness.agents import ReplayAgent
from harness.agents.base import AgentContext, AgentOutcome
from harness.ledger import Ledger
from harness.loop import load_state, run_task
from harness.spec import load_task

from . import fakes
from .target import FASTER_SETTINGS, make_patch, make_target, sh

SLOWER_EDIT = '# speed settings\ndelay_ms = 12\nmode = "plain"\n'  # the same line as FASTER_SETTINGS
CORE_NOTE = 'WORDS = ["the", "cat", "sat", "on", "the", "mat"]\n# words of the fixture\n\n\n' \
            'def transcribe(i):\n    return " ".join(WORDS)\n'


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    return make_target(tmp_path, python=sys.executable)


class Together:
    """Replay's agent, whose first rounds wait until ``parties`` agents run at
    once (a barrier): the test passes only if the agents overlap. Records the
    ledger each round saw."""

    name = "replay"

    def __init__(self, inner: ReplayAgent, barrier: threading.Barrier, seen: list):
        self.inner, self.barrier, self.seen = inner, barrier, seen

    def for_worker(self, k: int, n: int) -> Together:
        return Together(self.inner.for_worker(k, n), self.barrier, self.seen)

    def run(self, ctx: AgentContext) -> AgentOutcome:
        self.seen.append((ctx.candidate, [r.candidate for r in ctx.ledger]))
        if ctx.round <= self.barrier.parties:
            self.barrier.wait(timeout=30)
        return self.inner.run(ctx)


class OneAtATime(fakes.FakeVerifier):
    """The stand-in verifier, counting verifications that overlap."""

    def __init__(self) -> None:
        self.inside, self.most, self.lock = 0, 0, threading.Lock()

    def verify(self, *args, **kw):
        with self.lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
        try:
            time.sleep(0.05)
            return super().verify(*args, **kw)
        finally:
            with self.lock:
                self.inside -= 1


def test_agents_overlap_measurement_does_not_and_the_ledger_stays_ordered(repo: Path, tmp_path: Path):
    fast = make_patch(repo, tmp_path / "1.patch", "lower the delay", {"app/settings.toml": FASTER_SETTINGS})
    clash = make_patch(repo, tmp_path / "2.patch", "lower the delay more", {"app/settings.toml": SLOWER_EDIT})
    note = make_patch(repo, tmp_path / "3.patch", "note the words", {"app/core.py": CORE_NOTE})
    boost = make_patch(repo, tmp_path / "4.patch", "boost", {"app/boost.txt": "on\n"})
    seen: list = []
    agent = Together(ReplayAgent([fast, clash, note, boost]), threading.Barrier(3), seen)
    backend = OneAtATime()
    events: list = []
    spec = load_task(repo, None, "t")
    res = run_task(repo, spec, state_dir=tmp_path / "state", agent=agent, verifier=backend, rounds=6,
                   agents=3, keep="advance", on_event=events.append)
    assert backend.most == 1  # one measuring lane
    assert [c.n for c in res.candidates] == [1, 2, 3, 4]
    recs = Ledger(repo).records(task="t")
    assert [r.candidate for r in recs] == [1, 2, 3, 4]  # appended in candidate order
    by_n = {c.n: c for c in res.candidates}
    assert (by_n[1].decision, by_n[1].status) == ("accept", "kept")
    # made on B0 beside #1, it changes the line #1 changed: not applicable on the new Bk
    assert by_n[2].decision == "reject" and "does not apply on the current Bk" in by_n[2].reason
    # made on B0 too, it applies on top of #1: judged there (against #1, not B0)
    assert by_n[3].base_sha == by_n[1].sha and by_n[3].decision == "reject"
    assert "below min_gain" in by_n[3].reason
    assert sh(repo, "rev-parse", f"{by_n[3].branch}^") == by_n[1].sha
    # the fourth round started after some candidate was recorded: its TASK.md had it
    fourth = next(ledger for n, ledger in seen if n == 4)
    assert fourth and set(fourth) <= {1, 2, 3}
    assert by_n[4].decision == "accept" and res.bk_sha == by_n[4].sha
    assert res.status == "exhausted"
    started = [e.message for e in events if e.kind == "round_started"]
    assert any("agent 3 of 3" in m for m in started)
    st = load_state(tmp_path / "state")
    assert st is not None and st.in_flight == [] and {"replay", "replay@2", "replay@3"} <= set(st.agent_state)


def test_a_killed_parallel_run_resumes_its_rounds_in_flight(repo: Path, tmp_path: Path):
    fast = make_patch(repo, tmp_path / "1.patch", "lower the delay", {"app/settings.toml": FASTER_SETTINGS})
    boost = make_patch(repo, tmp_path / "2.patch", "boost", {"app/boost.txt": "on\n"})
    spec = load_task(repo, None, "t")

    class Crash(fakes.FakeVerifier):
        def verify(self, *args, **kw):
            raise KeyboardInterrupt  # the process killed mid-verification

    with pytest.raises(KeyboardInterrupt):
        run_task(repo, spec, state_dir=tmp_path / "state", agent=ReplayAgent([fast, boost]), verifier=Crash(),
                 rounds=4, agents=2, keep="advance")
    st = load_state(tmp_path / "state")
    assert st is not None and st.in_flight and not st.candidates
    res = run_task(repo, spec, state_dir=tmp_path / "state", agent=ReplayAgent([fast, boost]),
                   verifier=fakes.FakeVerifier(), rounds=4, agents=2, keep="advance")
    assert [c.n for c in res.candidates] == [1, 2]
    assert [c.decision for c in res.candidates] == ["accept", "accept"]
    assert [r.candidate for r in Ledger(repo).records(task="t")] == [1, 2]  # none twice
    assert load_state(tmp_path / "state").in_flight == []


def test_the_tuner_is_not_split(repo: Path, tmp_path: Path):
    spec = load_task(repo, None, "t")
    with pytest.raises(ValueError, match="one knob at a time"):
        run_task(repo, spec, state_dir=tmp_path / "state", verifier=fakes.FakeVerifier(), agents=2)
