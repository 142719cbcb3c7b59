"""Issue 12, live checks: ``rsi/verifier`` queued -> in progress (round i/N, pairs)
-> completed, with a details URL; the Re-run button; a maintainer's push to a
bot PR; ``/rsi stop`` cancelling a dispatched run; runner labels per profile.
Against the fake GitHub over real HTTP (PyGithub unmodified, real git)."""

from __future__ import annotations

import json
import re

import pytest

from tests.bot.fakeharness import CONFIG, FakeHarness, target_tree
from tests.bot.test_actions import CALLER

CHECK = "rsi/verifier"
TOKEN = "page-token-0123456789"


@pytest.fixture
def target(make_repo, fake_github, tmp_path):
    tree = target_tree(tmp_path / "seed")
    (tree / ".github" / "workflows").mkdir(parents=True)
    (tree / ".github" / "workflows" / "rsi-job.yml").write_text(CALLER)
    repo = make_repo(tree)
    fake_github.set_role(repo, "alice", "write")
    fake_github.set_role(repo, "rita", "read")
    return repo


def patches(fake_github, check_id: int) -> list[dict]:
    """Every PATCH the bot sent to one check run, in order."""
    return [q.json for q in fake_github.requests_to("PATCH", re.compile(rf".*/check-runs/{check_id}$"))]


def web_bot(make_bot, harness, **kw):
    return make_bot(harness, public_url="https://rsi.example.com", web_enabled=True,
                    web_token=TOKEN, **kw)


def test_task_check_goes_queued_in_progress_completed(make_bot, fake_github, target):
    bot = web_bot(make_bot, FakeHarness())
    base = fake_github.branch_sha(target, "main")
    n = fake_github.open_issue(target, "Faster", "x", by="alice")
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"), drain=False)
    assert bot.worker.run_once()  # the event only: run_task is queued behind it
    (queued,) = fake_github.check_runs(target, base, CHECK)
    assert queued.status == "queued" and queued.output["title"].startswith("queued")
    task = bot.store.find_task(target, n)
    assert queued.details_url == f"https://rsi.example.com/tasks/{task.id}"

    bot.drain()
    sent = patches(fake_github, queued.id)
    titles = [p["output"]["title"] for p in sent if "output" in p]
    assert sent[0]["status"] == "in_progress"
    assert "round 1/2 · candidate 1 · measure · 2 pairs so far" in titles
    assert "round 2/2 · candidate 2 · measure · 4 pairs so far" in titles
    assert len(titles) == len(set(titles))  # only changes are sent
    assert queued.status == "completed" and queued.conclusion == "success"
    assert queued.output["title"] == "🏁 finished: 2 round(s) of 2, 2 candidate(s), 2 kept"
    for pr in fake_github.pulls(target):  # each candidate's own completed check
        (c,) = fake_github.check_runs(target, pr.pull.head_sha, CHECK)
        assert c.conclusion == "success" and c.details_url == queued.details_url


def test_rerun_button_reverifies_the_candidate(make_bot, fake_github, target):
    harness = FakeHarness()
    bot = make_bot(harness)
    n = fake_github.open_issue(target, "Faster", "x", by="alice")
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"))
    pr = sorted(fake_github.pulls(target), key=lambda p: p.number)[0]
    (check,) = fake_github.check_runs(target, pr.pull.head_sha, CHECK)
    # a reader cannot re-run it, the bot ignores its own clicks
    d = bot.deliver(fake_github.rerequest_check_run(target, check.id, by="rita"))
    assert bot.result_of(d).startswith("refused: rita is read")
    assert ("reverify", pr.pull.head_ref) not in harness.calls

    d = bot.deliver(fake_github.rerequest_check_run(target, check.id, by="alice"))
    assert bot.result_of(d).startswith("re-verifying candidate 1")
    assert ("reverify", pr.pull.head_ref) in harness.calls
    runs = fake_github.check_runs(target, pr.pull.head_sha, CHECK)
    assert len(runs) == 2 and all(c.status == "completed" for c in runs)
    first = patches(fake_github, runs[1].id)
    assert first[0]["status"] == "in_progress"  # queued -> in progress -> completed
    assert runs[1].conclusion == "success" and "Re-verified" in runs[1].output["summary"]


def test_rerun_button_on_a_foreign_check_is_ignored(make_bot, fake_github, target, gh):
    bot = make_bot(FakeHarness())
    sha = fake_github.branch_sha(target, "main")
    other = gh.create_check_run(target, head_sha=sha, name=CHECK, conclusion="neutral",
                                title="t", summary="s")
    d = bot.deliver(fake_github.rerequest_check_run(target, other.id, by="alice"))
    assert bot.result_of(d) == "ignored: not a check run of ours"


def test_a_maintainers_push_to_a_bot_pr_is_verified(make_bot, fake_github, target):
    harness = FakeHarness()
    bot = make_bot(harness)
    n = fake_github.open_issue(target, "Faster", "x", by="alice")
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"))
    pr = sorted(fake_github.pulls(target), key=lambda p: p.number)[0]
    old = pr.pull.head_sha
    wev = fake_github.push_to_pull(target, pr.number, {"src/tweak.txt": "x\n"}, by="alice")
    new = wev.payload["after"]
    assert new != old
    d = bot.deliver(wev)
    assert bot.result_of(d) == f"re-verifying candidate 1 at {new[:12]}"
    (c,) = fake_github.check_runs(target, new, CHECK)
    assert c.status == "completed" and c.conclusion == "success"
    task, cand = bot.store.candidate_by_pr(target, pr.number)
    assert cand.sha == new
    # the same push seen again (another delivery) queues nothing new
    wev.payload["sender"] = dict(wev.payload["sender"], id=wev.payload["sender"]["id"])
    wev.payload["x-redelivered"] = True  # a new body, so not a replay, same head
    d = bot.deliver(wev)
    assert bot.result_of(d).startswith("already queued")
    assert len(fake_github.check_runs(target, new, CHECK)) == 1
    # a reader's push is not verified
    wev = fake_github.push_to_pull(target, pr.number, {"src/more.txt": "y\n"}, by="rita")
    assert bot.result_of(bot.deliver(wev)) == "ignored: rita is read"


def test_our_own_push_is_not_reverified(make_bot, fake_github, target):
    bot = make_bot(FakeHarness())
    n = fake_github.open_issue(target, "Faster", "x", by="alice")
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"))
    pr = fake_github.pulls(target)[0]
    wev = fake_github.push_to_pull(target, pr.number, {"src/x.txt": "x\n"}, by="rsi-bot[bot]")
    assert bot.result_of(bot.deliver(wev)) == "ignored: our own push"


def test_stop_cancels_a_dispatched_run(make_bot, fake_github, target):
    bot = make_bot(FakeHarness(), executor="actions")
    n = fake_github.open_issue(target, "Faster", "x", by="alice")
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"))
    (run,) = fake_github.workflow_runs(target)
    (check,) = fake_github.check_runs(target, name=CHECK)
    assert check.status == "queued" and check.details_url.endswith(f"/actions/runs/{run.id}")
    d = bot.deliver(fake_github.comment(target, n, "/rsi stop", by="alice"))
    assert bot.result_of(d) == "stop: done"
    assert fake_github.requests_to("POST", f"/repos/{target}/actions/runs/{run.id}/cancel")
    assert run.status == "completed" and run.conclusion == "cancelled"
    assert check.status == "completed" and check.conclusion == "cancelled"
    reply = fake_github.comments(target, n)[-1].body
    assert f"cancelled Actions run {run.id}" in reply
    # GitHub then reports the run cancelled: nothing is ingested, nothing fails
    wev = fake_github.complete_workflow_run(target, run.id, conclusion="cancelled")
    assert "without a result" in bot.result_of(bot.deliver(wev))
    assert not bot.store.jobs(state="failed") and fake_github.pulls(target) == []


GPU_PROFILE = """
[runner]
profile = "gpu"

[runner.profiles.gpu]
device = "cuda"
devices = ["0"]
runs_on = ["self-hosted", "linux", "a100"]

[runner.profiles.npu]
device = "npu"
devices = ["0"]
"""


@pytest.mark.parametrize("extra, proposal, labels", [
    (GPU_PROFILE, "x", ["self-hosted", "linux", "a100"]),
    (GPU_PROFILE.replace('profile = "gpu"', 'profile = "gpu"\nallowed_profiles = ["gpu", "npu"]'),
     "```toml\n[runner]\nprofile = \"npu\"\n```", ["self-hosted", "npu"]),
    ("", "x", ["self-hosted", "fallback"]),
])
def test_runner_labels_come_from_the_profile(make_bot, make_repo, fake_github, tmp_path, extra,
                                             proposal, labels):
    tree = target_tree(tmp_path / "seed", CONFIG + extra)
    (tree / ".github" / "workflows").mkdir(parents=True)
    (tree / ".github" / "workflows" / "rsi-job.yml").write_text(CALLER)
    repo = make_repo(tree)
    fake_github.set_role(repo, "alice", "write")
    bot = make_bot(FakeHarness(), executor="actions", runner_labels="self-hosted,fallback")
    n = fake_github.open_issue(repo, "Faster", proposal, by="alice")
    bot.deliver(fake_github.label_issue(repo, n, "rsi", by="alice"))
    (run,) = fake_github.workflow_runs(repo)
    assert json.loads(run.inputs["runner_labels"]) == labels
    assert json.loads(run.inputs["job"])["runner_labels"] == labels


def test_a_newer_label_supersedes_the_queued_check(make_bot, fake_github, target):
    bot = make_bot(FakeHarness())
    n = fake_github.open_issue(target, "Faster", "x", by="alice")
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"), drain=False)
    assert bot.worker.run_once()  # the label's event: run_task queued with its check
    (old,) = fake_github.check_runs(target, name=CHECK)
    assert old.status == "queued"
    from bot.service import job_handler
    from bot.worker import Worker

    events_only = Worker(bot.store, job_handler(bot.ctx), kinds=["event"], poll_s=0.01)
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"), drain=False)
    assert events_only.run_once()  # the newer label, before the older run starts
    assert old.status == "completed" and old.conclusion == "neutral"
    assert old.output["title"] == "superseded by a newer trigger"
    assert bot.store.find_task(target, n).generation == 2
    bot.drain()  # the older run stops at once; the newer one completes its own check
    runs = fake_github.check_runs(target, old.head_sha, CHECK)
    assert [c.conclusion for c in runs] == ["neutral", "success"]
