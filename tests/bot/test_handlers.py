"""Handlers and jobs against the fake GitHub (real HTTP, PyGithub unmodified,
real git), with a scripted harness."""

from __future__ import annotations

import pytest

from bot import render
from tests.bot.fakeharness import FakeHarness, target_tree

BOT = "rsi-bot[bot]"


@pytest.fixture
def target(make_repo, fake_github, tmp_path):
    repo = make_repo(target_tree(tmp_path / "seed"))
    fake_github.set_role(repo, "alice", "write")
    fake_github.set_role(repo, "rita", "read")
    fake_github.set_role(repo, "mo", "maintain")
    return repo


def ours(fake_github, repo, number, kind):
    mark = render.marker(kind)
    return [c for c in fake_github.comments(repo, number)
            if c.user.login == BOT and mark in c.body]


def started(make_bot, fake_github, target, harness=None, body="Make it faster.", **settings):
    bot = make_bot(harness or FakeHarness(), **settings)
    n = fake_github.open_issue(target, "Faster TTS", body, by="alice")
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"))
    return bot, n


def test_label_by_writer_runs_rounds_and_opens_draft_prs(make_bot, fake_github, target):
    bot, n = started(make_bot, fake_github, target)
    (status,) = ours(fake_github, target, n, render.STATUS)
    assert "finished" in status.body and "| 1 | ✅ accepted" in status.body
    pulls = sorted(fake_github.pulls(target), key=lambda p: p.number)
    assert [p.pull.head_ref for p in pulls] == [f"rsi/{n}/1", f"rsi/{n}/2"]
    for p in pulls:
        assert p.pull.draft and p.pull.base_ref == "main"
        assert [u.login for u in p.pull.requested_reviewers] == ["alice"]
        assert f"#{n}" in p.body
        (report,) = ours(fake_github, target, p.number, render.REPORT)
        assert "accepted" in report.body.lower() and "| **throughput**" in report.body
        (check,) = fake_github.check_runs(target, p.pull.head_sha, "rsi/verifier")
        assert check.conclusion == "success"
        assert fake_github.branch_sha(target, p.pull.head_ref) == p.pull.head_sha
    task = bot.store.find_task(target, n)
    assert task.state == "finished" and task.rounds_done == 2 and task.labeler == "alice"
    assert not bot.store.jobs(state="failed")


def test_rejected_candidates_get_no_pr(make_bot, fake_github, target):
    bot, n = started(make_bot, fake_github, target, FakeHarness(["reject", "accept"]))
    assert [p.pull.head_ref for p in fake_github.pulls(target)] == [f"rsi/{n}/2"]
    (status,) = ours(fake_github, target, n, render.STATUS)
    assert "❌ rejected" in status.body


def test_label_by_reader_is_refused(make_bot, fake_github, target):
    bot = make_bot(FakeHarness())
    n = fake_github.open_issue(target, "Faster", "x", by="rita")
    d = bot.deliver(fake_github.label_issue(target, n, "rsi", by="rita"))
    assert bot.result_of(d).startswith("refused")
    (reply,) = fake_github.comments(target, n)
    assert "write, maintain or admin" in reply.body and "`read`" in reply.body
    assert bot.store.find_task(target, n) is None


def test_other_labels_and_opened_are_ignored(make_bot, fake_github, target):
    bot = make_bot(FakeHarness())
    n = fake_github.open_issue(target, "Faster", "x", by="alice")
    d1 = bot.deliver(fake_github.label_issue(target, n, "bug", by="alice"))
    d2 = bot.deliver(fake_github.issue_event(target, n, "opened", by="alice"))
    assert bot.result_of(d1).startswith("ignored") and bot.result_of(d2).startswith("ignored")
    assert fake_github.comments(target, n) == []


def test_invalid_proposal_lists_errors(make_bot, fake_github, target):
    body = "### Objective metric\n\nnot_a_metric\n\n### Budget (rounds)\n\nlots"
    bot, n = started(make_bot, fake_github, target, body=body)
    (status,) = ours(fake_github, target, n, render.STATUS)
    assert "proposal has problems" in status.body and "- " in status.body
    assert "rounds" in status.body
    assert bot.store.find_task(target, n).state == "invalid"
    assert fake_github.pulls(target) == []


def test_missing_repo_config(make_bot, fake_github, make_repo, tmp_path):
    repo = make_repo(full_name="acme/bare")
    fake_github.set_role(repo, "alice", "write")
    bot = make_bot(FakeHarness())
    n = fake_github.open_issue(repo, "Faster", "x", by="alice")
    bot.deliver(fake_github.label_issue(repo, n, "rsi", by="alice"))
    (status,) = ours(fake_github, repo, n, render.STATUS)
    assert ".rsi/config.toml" in status.body and "missing" in status.body


def test_status_comment_is_edited_in_place(make_bot, fake_github, target):
    bot, n = started(make_bot, fake_github, target)
    # someone pastes our marker: not ours, never edited
    fake_github.comment(target, n, render.marker(render.STATUS) + " fake", by="alice")
    for _ in range(3):
        bot.deliver(fake_github.comment(target, n, "/rsi status", by="alice"))
    assert len(ours(fake_github, target, n, render.STATUS)) == 1
    pasted = [c for c in fake_github.comments(target, n) if c.body.endswith(" fake")]
    assert len(pasted) == 1
    # the cached id is lost (a new bot database): found again by marker and login
    bot2 = make_bot(FakeHarness())
    bot2.store.start_task(target, n, labeler="alice", installation_id=None)
    bot2.deliver(fake_github.comment(target, n, "/rsi status", by="alice"))
    assert len(ours(fake_github, target, n, render.STATUS)) == 1


def test_rerun_by_writer_and_by_reader(make_bot, fake_github, target):
    harness = FakeHarness()
    bot, n = started(make_bot, fake_github, target, harness)
    pr = sorted(fake_github.pulls(target), key=lambda p: p.number)[0]
    before = len(fake_github.check_runs(target, name="rsi/verifier"))
    wev = fake_github.comment(target, pr.number, "Thanks!\n/rsi rerun", by="alice")
    bot.deliver(wev)
    assert ("reverify", pr.pull.head_ref) in harness.calls
    assert len(fake_github.check_runs(target, name="rsi/verifier")) == before + 1
    (report,) = ours(fake_github, target, pr.number, render.REPORT)
    assert "Re-verified" in report.body and "@alice" in report.body
    c = next(c for c in fake_github.comments(target, pr.number)
             if c.id == wev.payload["comment"]["id"])
    assert c.reaction_counts() == {"+1": 1}

    wev = fake_github.comment(target, pr.number, "/rsi rerun", by="rita")
    d = bot.deliver(wev)
    assert bot.result_of(d).startswith("refused")
    assert len(fake_github.check_runs(target, name="rsi/verifier")) == before + 1
    refusal = fake_github.comments(target, pr.number)[-1]
    assert refusal.user.login == BOT and "@rita" in refusal.body and "`read`" in refusal.body
    c = next(c for c in fake_github.comments(target, pr.number)
             if c.id == wev.payload["comment"]["id"])
    assert c.reaction_counts() == {"confused": 1}


def test_commands_in_code_or_quotes_do_nothing(make_bot, fake_github, target):
    bot, n = started(make_bot, fake_github, target)
    before = len(fake_github.comments(target, n))
    d = bot.deliver(fake_github.comment(target, n, "```\n/rsi stop\n```\n> /rsi stop", by="alice"))
    assert bot.result_of(d) == "ignored: no command"
    assert len(fake_github.comments(target, n)) == before + 1  # only the comment itself


def test_bots_and_ourselves_are_ignored(make_bot, fake_github, target):
    bot, n = started(make_bot, fake_github, target)
    fake_github.add_user("dependabot[bot]", type="Bot")
    d = bot.deliver(fake_github.comment(target, n, "/rsi stop", by="dependabot[bot]"))
    assert bot.result_of(d) == "ignored: bot"
    assert not bot.store.find_task(target, n).stop


def test_stop_resume_budget_help(make_bot, fake_github, target):
    harness = FakeHarness()
    bot, n = started(make_bot, fake_github, target, harness)
    d = bot.deliver(fake_github.comment(target, n, "/rsi budget 3\n/rsi help", by="mo"))
    assert bot.result_of(d) == "budget: done; help: done"
    # the budget grew past what was done: the rounds went on
    assert bot.store.find_task(target, n).rounds_done == 3
    assert "/rsi budget N" in fake_github.comments(target, n)[-1].body
    bot.deliver(fake_github.comment(target, n, "/rsi stop", by="alice"))
    t = bot.store.find_task(target, n)
    assert t.stop and t.state == "stopped"
    bot.deliver(fake_github.comment(target, n, "/rsi budget 4", by="alice"))
    assert bot.store.find_task(target, n).rounds_done == 3  # stopped: no more rounds
    bot.deliver(fake_github.comment(target, n, "/rsi resume", by="alice"))
    t = bot.store.find_task(target, n)
    assert not t.stop and t.rounds_done == 4 and t.state == "finished"
    d = bot.deliver(fake_github.comment(target, n, "/rsi budget lots", by="alice"))
    assert "refused" in bot.result_of(d)
    assert "whole number" in fake_github.comments(target, n)[-1].body


def test_commands_without_a_task(make_bot, fake_github, target):
    bot = make_bot(FakeHarness())
    n = fake_github.open_issue(target, "Other", "x", by="alice")
    bot.deliver(fake_github.comment(target, n, "/rsi status", by="alice"))
    assert "add the `rsi` label" in fake_github.comments(target, n)[-1].body


def test_merge_rebaselines_and_reverifies_the_other_candidate(make_bot, fake_github, target):
    harness = FakeHarness()
    bot, n = started(make_bot, fake_github, target, harness)
    first, second = sorted(fake_github.pulls(target), key=lambda p: p.number)
    old_head = second.pull.head_sha
    d = bot.deliver(fake_github.merge_pull(target, first.number, by="alice"))
    assert bot.result_of(d).startswith("merged")
    merge_sha = fake_github.pull(target, first.number).pull.merge_commit_sha
    assert ("rebaseline", merge_sha) in harness.calls
    task = bot.store.find_task(target, n)
    assert task.bk_sha == merge_sha
    # the other candidate was rebased onto the merge, pushed, and judged again
    new_head = fake_github.pull(target, second.number).pull.head_sha
    assert new_head != old_head
    (check,) = fake_github.check_runs(target, new_head, "rsi/verifier")
    assert check.conclusion == "success"
    (report,) = ours(fake_github, target, second.number, render.REPORT)
    assert f"Re-verified against Bk `{merge_sha[:12]}`" in report.body
    assert f"#{first.number} merged" in report.body
    states = {c.n: c.state for c in bot.store.candidates(task.id)}
    assert states == {1: "merged", 2: "open"}


def test_merge_conflict_is_reported(make_bot, fake_github, target):
    harness = FakeHarness(same_file=True)
    bot, n = started(make_bot, fake_github, target, harness)
    first, second = sorted(fake_github.pulls(target), key=lambda p: p.number)
    bot.deliver(fake_github.merge_pull(target, first.number, by="alice"))
    (report,) = ours(fake_github, target, second.number, render.REPORT)
    assert "conflicts" in report.body
    checks = fake_github.check_runs(target, second.pull.head_sha, "rsi/verifier")
    assert checks[-1].conclusion == "neutral"
    task = bot.store.find_task(target, n)
    assert {c.n: c.state for c in bot.store.candidates(task.id)}[2] == "conflict"


def test_closed_without_merge(make_bot, fake_github, target):
    bot, n = started(make_bot, fake_github, target)
    first = sorted(fake_github.pulls(target), key=lambda p: p.number)[0]
    d = bot.deliver(fake_github.close_pull(target, first.number, by="alice"))
    assert bot.result_of(d) == "closed without merge"


def test_newer_label_supersedes(make_bot, fake_github, target):
    harness = FakeHarness()
    bot, n = started(make_bot, fake_github, target, harness)
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="mo"))
    task = bot.store.find_task(target, n)
    assert task.generation == 2 and task.labeler == "mo"
    heads = sorted(p.pull.head_ref for p in fake_github.pulls(target))
    assert f"rsi/{n}.2/1" in heads and f"rsi/{n}/1" in heads
    assert len(ours(fake_github, target, n, render.STATUS)) == 1


def test_github_outage_is_retried(make_bot, fake_github, target):
    bot = make_bot(FakeHarness())
    n = fake_github.open_issue(target, "Faster", "x", by="alice")
    fake_github.fail_next("POST", f"/repos/{target}/issues/{n}/comments", status=502, times=2)
    fake_github.fail_next("POST", f"/repos/{target}/pulls", status=None)
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"))
    assert len(ours(fake_github, target, n, render.STATUS)) == 1
    assert len(fake_github.pulls(target)) == 2
    assert not bot.store.jobs(state="failed")


def test_installation_events(make_bot, fake_github, target):
    from tests.bot._support import load_payload
    from tests.fakegithub.server import WebhookEvent

    bot = make_bot(FakeHarness())
    p = load_payload("installation", "created")
    bot.deliver(WebhookEvent("installation", p))
    inst = bot.store.installation(p["installation"]["id"])
    assert inst is not None and inst.repos
    bot.deliver(WebhookEvent("installation", {**load_payload("installation", "suspend")}))
    p2 = load_payload("installation", "deleted")
    bot.deliver(WebhookEvent("installation", p2))
    assert bot.store.installation(p2["installation"]["id"]) is None


def test_rebaseline_command(make_bot, fake_github, target):
    harness = FakeHarness()
    bot, n = started(make_bot, fake_github, target, harness)
    fake_github.commit_files(target, "main", {"README.md": "a human's change\n"},
                             message="Unrelated change")
    main = fake_github.branch_sha(target, "main")
    bot.deliver(fake_github.comment(target, n, "/rsi rebaseline", by="alice"))
    assert ("rebaseline", main) in harness.calls
    task = bot.store.find_task(target, n)
    assert task.bk_sha == main
    for p in fake_github.pulls(target):
        assert fake_github.check_runs(target, p.pull.head_sha, "rsi/verifier")[-1].conclusion \
            == "success"
        assert git_is_ancestor(fake_github, target, main, p.pull.head_sha)


def git_is_ancestor(fake_github, repo, a, b) -> bool:
    import subprocess

    return subprocess.run(["git", "-C", str(fake_github.repo(repo).bare), "merge-base",
                           "--is-ancestor", a, b]).returncode == 0


def test_stop_while_running(make_bot, fake_github, target):
    import threading

    harness = FakeHarness()
    harness.gate = threading.Event()
    bot = make_bot(harness)
    n = fake_github.open_issue(target, "Faster", "x", by="alice")
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"), drain=False)
    bot.worker.run_once()  # the label event: queues run_task
    runner = threading.Thread(target=bot.worker.run_once)  # run_task, held in round 1
    runner.start()
    from tests.bot._support import wait_until

    wait_until(lambda: bot.store.find_task(target, n).state == "running", 30)
    from bot.service import job_handler
    from bot.worker import Worker

    other = Worker(bot.store, job_handler(bot.ctx), owner="w2", poll_s=0.01)
    bot.store.record_delivery("stop-1", "issue_comment", "created",
                              fake_github.comment(target, n, "/rsi stop", by="alice").payload)
    assert other.run_once()
    harness.gate.set()
    runner.join(30)
    t = bot.store.find_task(target, n)
    assert t.stop and t.state == "stopped" and t.rounds_done == 1


def test_a_job_that_gives_up_says_so(make_bot, fake_github, target):
    from bot.service import job_failed

    class Exploding(FakeHarness):
        def run_task(self, *a, **kw):
            raise OSError("disk full")

    bot = make_bot(Exploding(), max_attempts=2)
    bot.worker.on_failed = job_failed(bot.ctx)
    n = fake_github.open_issue(target, "Faster", "x", by="alice")
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"))
    (status,) = ours(fake_github, target, n, render.STATUS)
    assert "disk full" in status.body and "not a verdict" in status.body
    assert bot.store.find_task(target, n).state == "failed"


def test_rebaseline_before_any_run(make_bot, fake_github, target):
    bot = make_bot(FakeHarness())
    n = fake_github.open_issue(target, "Faster", "x", by="alice")
    task = bot.store.start_task(target, n, labeler="alice", installation_id=None)
    bot.store.update_task(task.id, state="queued")
    bot.deliver(fake_github.comment(target, n, "/rsi rebaseline", by="alice"))
    assert [j.result for j in bot.store.jobs(kind="rebaseline")] == ["no task state yet"]
    assert not bot.store.jobs(state="failed")


@pytest.mark.postgres
def test_full_cycle_on_postgresql(make_bot, fake_github, target):
    """Label -> PRs -> rerun -> merge -> rebaseline with the store on PostgreSQL."""
    import os

    from bot.store import Base, Store

    url = os.environ["RSI_TEST_POSTGRES_URL"]
    s = Store(url, create=False)
    Base.metadata.drop_all(s.engine)
    s.close()
    harness = FakeHarness()
    bot, n = started(make_bot, fake_github, target, harness, database_url=url)
    first, second = sorted(fake_github.pulls(target), key=lambda p: p.number)
    bot.deliver(fake_github.comment(target, second.number, "/rsi rerun", by="alice"))
    bot.deliver(fake_github.merge_pull(target, first.number, by="alice"))
    task = bot.store.find_task(target, n)
    assert task.bk_sha == fake_github.pull(target, first.number).pull.merge_commit_sha
    assert {c.n: c.state for c in bot.store.candidates(task.id)} == {1: "merged", 2: "open"}
    assert not bot.store.jobs(state="failed")
    assert bot.store.engine.dialect.name == "postgresql"


def test_publish_retry_after_the_pr_was_opened(make_bot, fake_github, target):
    bot = make_bot(FakeHarness(["accept"]), max_attempts=5)
    n = fake_github.open_issue(target, "Faster", "x", by="alice")
    import re as _re

    fake_github.fail_next("POST", _re.compile(r".*/requested_reviewers$"), status=503)
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"))
    pulls = fake_github.pulls(target)
    assert len(pulls) == 2  # one PR per candidate, none doubled by the retry
    for p in pulls:
        assert [u.login for u in p.pull.requested_reviewers] == ["alice"]
        assert ours(fake_github, target, p.number, render.REPORT)
