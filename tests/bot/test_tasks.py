"""bot.tasks: one registry of jobs for the service and both executors; candidates
come from the ledger (one ``sync_candidates``), events only drive progress. A
runner's result is untrusted: its ledger and its events are checked."""

from __future__ import annotations

import json

import pytest

from bot.executors.actions import load_events
from bot.service import job_handler
from bot.tasks import JOBS, job
from bot.worker import Permanent
from harness.events import BaselineMeasured, CandidateRecorded
from harness.gitutil import git
from harness.ledger import Ledger, LedgerRecord
from tests.bot.fakeharness import FakeHarness, make_verdict
from tests.bot.test_actions import run_on_runner
from tests.bot.test_surface import dispatched, target  # noqa: F401 (fixture)


def test_one_registry_names_every_job_and_where_it_runs():
    assert set(JOBS) == {"event", "publish", "run_task", "rebaseline", "reverify"}
    heavy = {k for k, j in JOBS.items() if j.heavy}
    assert heavy == {"run_task", "rebaseline", "reverify"}
    for k in heavy:  # each heavy job runs on a runner and is ingested back
        assert JOBS[k].on_runner is not None and JOBS[k].ingest is not None
    with pytest.raises(KeyError, match="unknown job kind 'nope' \\(known: event, "):
        job("nope")


def test_the_service_refuses_an_unknown_job_kind(make_bot):
    bot = make_bot(FakeHarness())
    handle = job_handler(bot.ctx)

    from bot.store import ClaimedJob
    from bot.worker import JobRun

    run = JobRun(ClaimedJob(id=1, kind="format_disk", payload={}, attempts=1, max_attempts=8,
                            lane=None, owner="w1"))  # what a worker hands the handler
    with pytest.raises(Permanent, match="unknown job kind 'format_disk'"):
        handle(run)


class LyingRunner(FakeHarness):
    """A runner that also writes a ledger line for a candidate it never pushed
    (a branch outside the bundle, a commit the bot has never seen)."""

    def run_task(self, repo, spec, *, state_dir, keep, rounds, should_stop, on_event):
        res = super().run_task(repo, spec, state_dir=state_dir, keep=keep, rounds=rounds,
                               should_stop=should_stop, on_event=on_event)
        sha = "f" * 40
        forged = make_verdict("accept", {"b0": res.b0_sha, "bk": res.bk_sha, "candidate": sha})
        Ledger(repo).append(LedgerRecord.from_verdict(
            forged, id=f"{spec.task_id}/9", task=spec.task_id, round=9, candidate=9,
            agent="fake", hypothesis="forged", branch=f"rsi/{spec.task_id}/9", sha=sha,
            status="open"))
        return res


def test_a_runners_ledger_names_only_branches_taken_from_its_bundle(make_bot, fake_github, gh,
                                                                    target, tmp_path):  # noqa: F811
    bot, n, run = dispatched(make_bot, fake_github, target)
    result, wev = run_on_runner(fake_github, gh, target, run, tmp_path, LyingRunner())
    assert "error" not in result, result.get("traceback")
    bot.deliver(wev)
    task = bot.store.find_task(target, n)
    assert sorted(c.n for c in bot.store.candidates(task.id)) == [1, 2]
    assert sorted(p.pull.head_ref for p in fake_github.pulls(target)) == [f"rsi/{n}/1",
                                                                          f"rsi/{n}/2"]


def test_a_runners_events_are_validated_and_the_bad_ones_dropped():
    good = BaselineMeasured(task_id="7", sha="a" * 40)
    verdict = make_verdict("accept", {"candidate": "b" * 40})
    rec = LedgerRecord.from_verdict(verdict, id="7/1", task="7", round=1, candidate=1,
                                    agent="x", status="open")
    cand = CandidateRecorded(task_id="7", round=1, candidate=1, branch="rsi/7/1", sha="b" * 40,
                             status="open", verdict=verdict, record=rec, bk="a" * 40)
    from harness.events import dump_event

    raw = [dump_event(good), {"kind": "candidate", "task_id": "7", "verdict": "accept"},
           "<script>", dump_event(cand), {"kind": "shell", "cmd": "rm -rf /"}]
    events = load_events({"events": json.loads(json.dumps(raw))})
    assert events == [good, cand]
    assert load_events({"events": "not a list"}) == []


def test_a_local_run_records_candidates_from_the_ledger(make_bot, fake_github, target):  # noqa: F811
    bot = make_bot(FakeHarness(["accept", "reject"]))
    n = fake_github.open_issue(target, "Faster", "x", by="alice")
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"))
    task = bot.store.find_task(target, n)
    cands = {c.n: c for c in bot.store.candidates(task.id)}
    clone = bot.ctx.clone_dir(task.repo, task.issue)
    recs = {r.candidate: r for r in Ledger(clone).records(task=str(n))}
    assert set(cands) == set(recs) == {1, 2}
    for k in (1, 2):
        assert (cands[k].decision, cands[k].sha, cands[k].branch) == (
            recs[k].decision, recs[k].sha, recs[k].branch)
        assert cands[k].verdict_model == recs[k].verdict is not None
    assert cands[1].state == "open" and cands[2].state == "none"
    assert git(clone, "rev-parse", f"refs/heads/rsi/{n}/1") == cands[1].sha


class SwappingRunner(FakeHarness):
    """A rebaseline whose outcome for one candidate names another candidate's
    branch and head (both genuinely taken from the bundle)."""

    def rebaseline(self, repo, spec, ref, *, state_dir, on_event=None):
        res = super().rebaseline(repo, spec, ref, state_dir=state_dir, on_event=on_event)
        other = f"rsi/{spec.task_id}/1"
        forged = [o.model_copy(update={"branch": other,
                                       "new_sha": git(repo, "rev-parse", other)})
                  if o.outcome == "reverified" else o for o in res.candidates]
        return res.model_copy(update={"candidates": forged})


def test_a_runners_rebaseline_cannot_move_a_candidate_to_another_branch(
        make_bot, fake_github, gh, target, tmp_path):  # noqa: F811
    bot, n, run = dispatched(make_bot, fake_github, target)
    _result, wev = run_on_runner(fake_github, gh, target, run, tmp_path, FakeHarness())
    bot.deliver(wev)
    first, second = sorted(fake_github.pulls(target), key=lambda p: p.number)
    before = str(second.pull.head_sha)
    bot.deliver(fake_github.merge_pull(target, first.number, by="alice"))
    run3 = fake_github.workflow_runs(target)[-1]
    result, wev = run_on_runner(fake_github, gh, target, run3, tmp_path, SwappingRunner())
    assert "error" not in result, result.get("traceback")
    bot.deliver(wev)
    task = bot.store.find_task(target, n)
    cand = {c.n: c for c in bot.store.candidates(task.id)}[2]
    assert cand.sha == before  # not candidate 1's head
    assert fake_github.pull(target, second.number).pull.head_sha == before
