"""Ledger: JSON lines on rsi/ledger via git plumbing, never touching the worktree."""

from __future__ import annotations

import json
import logging
import sys
import threading
from pathlib import Path

import pytest

from harness.gitutil import git
from harness.ledger import BRANCH, FILE, REF, CandidateStatus, Ledger, LedgerRecord, load_record
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
    assert back[0].guards[0].status == "pass" and back[0].verdict == verdict  # the Verdict itself
    assert back[0].schema_ == "rsi.ledger/2" and back[1].verdict is None
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


V1 = Path(__file__).with_name("fixtures") / "ledger_v1.jsonl"
"""Real rsi.ledger/1 lines, written by the loop of 7e80d97 (fixtures/make_ledger_v1.py)."""


def _commit_ledger(repo: Path, text: str) -> None:
    """``text`` as the whole of ``ledger.jsonl`` on rsi/ledger (the plumbing ``append`` uses)."""
    blob = git(repo, "hash-object", "-w", "--stdin", input=text)
    tree = git(repo, "mktree", input=f"100644 blob {blob}\t{FILE}\n")
    git(repo, "update-ref", REF, git(repo, "commit-tree", tree, "-m", "old ledger"))


def test_old_ledger_lines_read_back_typed(tmp_path: Path):
    """A ledger written by the previous schema (verdicts as dicts) reads back as
    records of this one, each verdict a ``Verdict``; new lines append after them."""
    repo = make_target(tmp_path, python=sys.executable)
    raw = [json.loads(line) for line in V1.read_text().splitlines()]
    assert {r["schema"] for r in raw} == {"rsi.ledger/1"} and len(raw) == 9
    _commit_ledger(repo, V1.read_text())
    ledger = Ledger(repo)
    back = ledger.records()
    assert [r.id for r in back] == [r["id"] for r in raw]  # none skipped
    for r, old in zip(back, raw, strict=True):
        assert r.schema_ == "rsi.ledger/2" and r.status == old["status"]
        assert isinstance(r.status, CandidateStatus)
        if old.get("verdict") is None:
            assert r.verdict is None
        else:  # the same verdict, typed: its JSON is the JSON the old line held
            assert isinstance(r.verdict, Verdict)
            now = json.loads(r.verdict.to_json())
            if now.get("objective") and old["verdict"].get("objective"):
                # fields added to the objective since (issue 29) hold their defaults
                added = set(now["objective"]) - set(old["verdict"]["objective"])
                assert {k: now["objective"].pop(k) for k in added} == {
                    "candidate_runs": None, "confirmation_pairs": 0}
            assert {k: now[k] for k in old["verdict"]} == old["verdict"]
            # fields added to Verdict since hold their defaults (no matrix cells)
            assert {k: now[k] for k in set(now) - set(old["verdict"])} == {"cells": []}
    first = back[0].verdict.objective if back[0].verdict is not None else None
    assert first is not None and first.gain == back[0].gain and back[0].usage is not None
    assert [r.status for r in back if r.event == "reverify"] == ["conflict", "open"]
    assert ledger.append(rec(9, "new")) and [r.id for r in ledger.records()][-2:] == [
        "t/3/reverify/17c628246718", "new/9"]
    assert ledger.append(LedgerRecord.model_validate(raw[0] | {"schema": "rsi.ledger/2"})) is False


def test_an_old_line_whose_verdict_no_longer_reads_keeps_the_rest(caplog):
    """A /1 line whose verdict dict is of a layout ``Verdict`` refuses: the record
    stays (the bot stored such candidates without a verdict), the verdict is
    dropped with a warning. A /2 line with such a verdict is refused whole."""
    old = json.loads(V1.read_text().splitlines()[0])
    old["verdict"]["unheard_of"] = 1
    with caplog.at_level(logging.WARNING, logger="harness.ledger"):
        r = load_record(old)
    assert r.id == "tune/1" and r.decision == "accept" and r.ratio and r.verdict is None
    assert "does not read as a Verdict" in caplog.text
    with pytest.raises(ValueError, match="unheard_of"):
        load_record(old | {"schema": "rsi.ledger/2"})
    with pytest.raises(ValueError, match="unknown ledger schema 'rsi.ledger/9'"):
        load_record(old | {"schema": "rsi.ledger/9"})
    with pytest.raises(ValueError, match="JSON object"):
        load_record([old])


def test_a_line_with_a_forged_verdict_is_skipped_with_a_warning(tmp_path: Path, caplog):
    """A runner's ledger is untrusted: a current line whose verdict is not a
    ``Verdict`` is not a record (the bot stores no candidate from it), and says so."""
    repo = make_target(tmp_path, python=sys.executable)
    good = rec(1).to_line()
    forged = json.loads(rec(2).to_line()) | {"verdict": {"decision": "accept", "reason": "trust me",
                                                         "admin": True}}
    _commit_ledger(repo, good + "\n" + json.dumps(forged) + "\n" + "not json\n")
    with caplog.at_level(logging.WARNING, logger="harness.ledger"):
        assert [r.id for r in Ledger(repo).records()] == ["t1/1"]
    assert caplog.text.count("skipped") == 2 and "admin" in caplog.text
