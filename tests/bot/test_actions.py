"""The ``actions`` executor: dispatch to the target's runner workflow, the
runner's ``rsi worker --job`` side, and ingestion on workflow_run.completed."""

from __future__ import annotations

import json

import pytest

from bot import render
from bot.executors.remote import execute
from harness.gitutil import git
from tests.bot.fakeharness import FakeHarness, target_tree

BOT = "rsi-bot[bot]"
CALLER = """\
name: rsi-job
run-name: rsi-job ${{ fromJSON(inputs.job).nonce }}
on:
  workflow_dispatch:
    inputs:
      job: {required: true, type: string}
      runner_labels: {required: true, type: string}
jobs:
  rsi:
    uses: rsi-bot/rsi-bot/.github/workflows/rsi-job.yml@v1
    with:
      job: ${{ inputs.job }}
      runner_labels: ${{ inputs.runner_labels }}
"""


@pytest.fixture
def target(make_repo, fake_github, tmp_path):
    tree = target_tree(tmp_path / "seed")
    (tree / ".github" / "workflows").mkdir(parents=True)
    (tree / ".github" / "workflows" / "rsi-job.yml").write_text(CALLER)
    repo = make_repo(tree)
    fake_github.set_role(repo, "alice", "write")
    return repo


def run_on_runner(fake_github, gh, repo, run, tmp_path, harness) -> dict:
    """What the reusable workflow does: check out (with rsi/* branches), run
    `rsi worker --job`, upload the result directory as the rsi-result artifact."""
    job = json.loads(run.inputs["job"])
    remote = gh.git_remote(repo)
    work = tmp_path / f"runner-{run.id}"
    git(tmp_path, "clone", "--quiet", remote.url, str(work), env=remote.git_env())
    git(work, "fetch", "--quiet", "origin", "+refs/heads/rsi/*:refs/heads/rsi/*",
        env=remote.git_env())
    out = tmp_path / f"out-{run.id}"
    result = execute(job, repo=work, out=out, state_dir=tmp_path / "runner-state",
                     harness=harness)
    files = {p.name: p.read_bytes() for p in out.iterdir()}
    return result, fake_github.complete_workflow_run(repo, run.id, artifacts={"rsi-result": files})


def test_dispatch_run_ingest(make_bot, fake_github, gh, target, tmp_path):
    bot = make_bot(FakeHarness(), executor="actions", runner_labels="self-hosted,npu")
    runner_harness = FakeHarness()
    n = fake_github.open_issue(target, "Faster", "x", by="alice")
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"))
    (run,) = fake_github.workflow_runs(target)
    assert run.workflow_file == "rsi-job.yml" and run.ref == "main"
    assert json.loads(run.inputs["runner_labels"]) == ["self-hosted", "npu"]
    job = json.loads(run.inputs["job"])
    assert job["kind"] == "run_task" and job["issue"] == n and job["task_id"] == str(n)
    assert "token" not in run.inputs["job"].lower()
    assert fake_github.pulls(target) == []  # nothing until the runner reports back

    result, wev = run_on_runner(fake_github, gh, target, run, tmp_path, runner_harness)
    assert "error" not in result, result.get("traceback")
    bot.deliver(wev)
    pulls = sorted(fake_github.pulls(target), key=lambda p: p.number)
    assert [p.pull.head_ref for p in pulls] == [f"rsi/{n}/1", f"rsi/{n}/2"]
    for p in pulls:
        assert fake_github.check_runs(target, p.pull.head_sha, "rsi/verifier")
        (report,) = [c.body for c in fake_github.comments(target, p.number)
                     if render.marker(render.REPORT) in c.body]
        assert f"[artifacts]({fake_github.url}/{target}/actions/runs/{run.id})" in report
        assert f"/{target}/compare/" in report and "rsi verify " in report
    assert bot.store.find_task(target, n).state == "finished"

    # /rsi rerun: dispatched too, its live check queued with the Actions run as details
    before = len(fake_github.check_runs(target, name="rsi/verifier"))
    bot.deliver(fake_github.comment(target, pulls[1].number, "/rsi rerun", by="alice"))
    run2 = fake_github.workflow_runs(target)[-1]
    assert json.loads(run2.inputs["job"])["kind"] == "reverify"
    (live,) = [c for c in fake_github.check_runs(target, pulls[1].pull.head_sha, "rsi/verifier")
               if c.status != "completed"]
    assert live.status == "queued" and live.details_url.endswith(f"/actions/runs/{run2.id}")
    assert "dispatched to runners self-hosted, npu" in live.output["title"]
    bot.deliver(fake_github.start_workflow_run(target, run2.id))
    assert live.status == "in_progress" and "runner" in live.output["title"]
    result, wev = run_on_runner(fake_github, gh, target, run2, tmp_path, runner_harness)
    bot.deliver(wev)
    assert len(fake_github.check_runs(target, name="rsi/verifier")) == before + 1
    assert live.status == "completed" and live.conclusion == "success"

    # merge: rebaseline dispatched; the runner rebases the other candidate
    bot.deliver(fake_github.merge_pull(target, pulls[0].number, by="alice"))
    run3 = fake_github.workflow_runs(target)[-1]
    assert json.loads(run3.inputs["job"])["kind"] == "rebaseline"
    old = str(pulls[1].pull.head_sha)
    result, wev = run_on_runner(fake_github, gh, target, run3, tmp_path, runner_harness)
    assert "error" not in result, result.get("traceback")
    bot.deliver(wev)
    new = fake_github.pull(target, pulls[1].number).pull.head_sha
    assert new != old and fake_github.check_runs(target, new, "rsi/verifier")
    assert not bot.store.jobs(state="failed")


def test_runner_failure_is_infrastructure(make_bot, fake_github, gh, target, tmp_path):
    bot = make_bot(FakeHarness(), executor="actions")
    n = fake_github.open_issue(target, "Faster", "x", by="alice")
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"))
    (run,) = fake_github.workflow_runs(target)

    class Broken(FakeHarness):
        def run_task(self, *a, **kw):
            raise RuntimeError("NPU driver not loaded")

    result, wev = run_on_runner(fake_github, gh, target, run, tmp_path, Broken())
    assert "NPU driver not loaded" in result["error"]
    d = bot.deliver(wev)
    assert bot.result_of(d).startswith("runner error")
    status = [c for c in fake_github.comments(target, n) if render.marker(render.STATUS) in c.body]
    assert "infrastructure" in status[0].body
    assert fake_github.pulls(target) == []


def test_other_workflows_are_ignored(make_bot, fake_github, target):
    from tests.bot._support import load_payload
    from tests.fakegithub.server import WebhookEvent

    bot = make_bot(FakeHarness(), executor="actions")
    d = bot.deliver(WebhookEvent("workflow_run", load_payload("workflow_run", "completed")))
    assert bot.result_of(d) == "ignored: not an rsi job run"


def _run_again(store, job_id: int) -> None:
    """What a kill after the job acted does: the job is claimed again."""
    from sqlalchemy import update

    from bot.store import Job

    with store.tx() as s:
        s.execute(update(Job).where(Job.id == job_id).values(state="queued", next_run_at=0))


def test_a_rerun_job_never_dispatches_twice(make_bot, fake_github, target):
    """Killed after GitHub took the dispatch and before its run id was recorded: the
    re-run finds the run by the nonce in its title (run-name), records it, and
    dispatches nothing (issue 23)."""
    bot = make_bot(FakeHarness(), executor="actions")
    n = fake_github.open_issue(target, "Faster", "x", by="alice")
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"))
    (run,) = fake_github.workflow_runs(target)
    (d,) = bot.store.dispatches_of(1)
    assert d.run_id == run.id and d.nonce in run.display_title and d.job_id is not None
    bot.store.set_dispatch_run(d.nonce, None)  # the kill: the run id never recorded
    _run_again(bot.store, d.job_id)
    bot.drain()
    assert fake_github.workflow_runs(target) == [run]
    assert bot.store.dispatch(d.nonce).run_id == run.id  # so /rsi stop can cancel it
    bot.deliver(fake_github.comment(target, n, "/rsi stop", by="alice"))
    assert run.status == "completed" and run.conclusion == "cancelled"


def test_a_run_github_does_not_list_is_dispatched_again_with_the_same_nonce(
        make_bot, fake_github, target):
    """No run carries the nonce (GitHub did not take the dispatch): the re-run
    dispatches again, with the same nonce, so only one result can be ingested."""
    bot = make_bot(FakeHarness(), executor="actions")
    n = fake_github.open_issue(target, "Faster", "x", by="alice")
    fake_github.fail_next("POST", f"/repos/{target}/actions/workflows/rsi-job.yml/dispatches",
                          status=502)
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"))
    (run,) = fake_github.workflow_runs(target)  # the retry after the 502
    (d,) = bot.store.dispatches_of(1, pending=False)
    assert json.loads(run.inputs["job"])["nonce"] == d.nonce and d.run_id == run.id


OLD_CALLER = CALLER.replace("run-name: rsi-job ${{ fromJSON(inputs.job).nonce }}\n", "")


def test_an_old_workflow_gets_the_line_proposed_and_is_never_dispatched_twice(
        make_bot, fake_github, make_repo, tmp_path):
    """A job workflow from before the ``run-name`` line: its runs carry no nonce. The
    first dispatch proposes the one-line update as a PR (once); a job killed after
    GitHub took its dispatch is refused on its re-run, with why and what to do,
    instead of being dispatched a second time (2 runs, same nonce, before)."""
    from bot.executors.actions import RUN_NAME, RUN_NAME_BRANCH

    tree = target_tree(tmp_path / "seed")
    (tree / ".github" / "workflows").mkdir(parents=True)
    (tree / ".github" / "workflows" / "rsi-job.yml").write_text(OLD_CALLER)
    target = make_repo(tree)
    fake_github.set_role(target, "alice", "write")
    bot = make_bot(FakeHarness(), executor="actions")
    n = fake_github.open_issue(target, "Faster", "x", by="alice")
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"))
    (run,) = fake_github.workflow_runs(target)
    (pr,) = [p for p in fake_github.pulls(target) if p.pull.head_ref == RUN_NAME_BRANCH]
    assert pr.user.login == BOT and pr.pull.base_ref == "main"
    diff = fake_github.git(target, "diff", "main", RUN_NAME_BRANCH).splitlines()
    assert [x for x in diff if x[:1] in "+-" and x[:3] not in ("+++", "---")] == ["+" + RUN_NAME]

    (d,) = bot.store.dispatches_of(1)
    bot.store.set_dispatch_run(d.nonce, None)  # the kill: the run id never recorded
    _run_again(bot.store, d.job_id)
    bot.drain()
    assert fake_github.workflow_runs(target) == [run]  # not dispatched a second time
    job = bot.store.job(d.job_id)
    assert job.state == "failed" and "not dispatched again (it would run twice)" in job.last_error
    assert RUN_NAME in job.last_error and f"(#{pr.number} does)" in job.last_error
    # proposed once, however often it dispatches
    assert len([p for p in fake_github.pulls(target, state="all")
                if p.pull.head_ref == RUN_NAME_BRANCH]) == 1
