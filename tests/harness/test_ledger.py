"""Ledger: JSON lines on rsi/ledger via git plumbing, never touching the worktree."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

from harness.ledger import BRANCH, Ledger, LedgerRecord
from verifier.verdict import GuardResult, Interval, ObjectiveResult, Verdict

from .target import make_target, sh


def rec(i: int, task: str = "t1", **kw) -> LedgerRecord:
    base = dict(id=f"{task}/{i}", task=task, round=i, candidate=i, agent="tuner", decision="reject", reason="slow")
    base.update(kw)
    return LedgerRecord(**base)


def test_round_trip_and_worktree_untouched(tmp_path: Path):
    repo = make_target(tmp_path, python=sys.executable)
    (repo / "app" / "dirty.txt").write_text("user's uncommitted work\n")
    head = sh(repo, "rev-parse", "HEAD")
    status = sh(repo, "status", "--porcelain")
    ledger = Ledger(repo)
    assert ledger.records() == []
    verdict = Verdict(
        decision="accept",
        reason="throughput +20%",
        objective=ObjectiveResult(
            benchmark="speed", metric="throughput", direction="higher", ratio=1.2,
            ratio_ci=Interval(low=1.15, high=1.25), gain=0.2, gain_vs_b0=0.2,
        ),
        guards=(GuardResult(name="latency_p95_s <= 1.5x", kind="ratio", metric="latency_p95_s", value=0.8),),
    )
    r1 = LedgerRecord.from_verdict(
        verdict, id="t1/1", task="t1", round=1, candidate=1, agent="tuner", hypothesis="h",
        files=["app/settings.toml"], lines_added=1, lines_removed=1, status="kept",
        change={"kind": "knob", "knob": "delay", "value": "18"},
    )
    assert ledger.append(r1) is True
    assert ledger.append(rec(2)) is True
    assert ledger.append(rec(2)) is False  # idempotent by id
    back = ledger.records()
    assert [r.id for r in back] == ["t1/1", "t1/2"]
    assert back[0].ratio == 1.2 and back[0].ratio_low == 1.15 and back[0].gain == 0.2
    assert back[0].guards[0].status == "pass" and back[0].verdict["decision"] == "accept"
    # user's branch, index and worktree are as they were
    assert sh(repo, "rev-parse", "HEAD") == head
    assert sh(repo, "status", "--porcelain") == status
    assert sh(repo, "symbolic-ref", "--short", "HEAD") == "main"
    # reviewable like any branch: one commit per line, JSON lines in ledger.jsonl
    assert sh(repo, "rev-list", "--count", BRANCH) == "2"
    lines = sh(repo, "show", f"{BRANCH}:ledger.jsonl").splitlines()
    assert [json.loads(x)["id"] for x in lines] == ["t1/1", "t1/2"]


def test_read_back_across_tasks_and_skips_foreign_lines(tmp_path: Path):
    repo = make_target(tmp_path, python=sys.executable)
    ledger = Ledger(repo)
    ledger.append(rec(1, "a"))
    ledger.append(rec(1, "b"))
    assert [r.task for r in Ledger(repo).records()] == ["a", "b"]
    assert [r.id for r in ledger.records(task="b")] == ["b/1"]


def test_concurrent_appends_lose_nothing(tmp_path: Path):
    repo = make_target(tmp_path, python=sys.executable)
    ledger = Ledger(repo)
    errors = []

    def worker(k: int):
        try:
            for i in range(3):
                Ledger(repo).append(rec(i, f"w{k}"))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(ledger.records()) == 9
