"""Live ``rsi/verifier`` check runs: queued -> in_progress (with progress) -> completed.

One check run per heavy job and commit (:class:`bot.store.LiveCheck`):

* ``run_task``: on the task's base commit (Bk, else the default branch's head),
  with "round i/N, pairs so far" while the rounds run, completed with a summary
  of the run (each candidate then gets its own completed check on its PR head);
* ``reverify`` (``/rsi rerun``, the Re-run button, a push to a bot PR): on the
  candidate's head, completed with the verdict by :func:`bot.tasks.reverify.apply_reverify`.

A check is created ``queued`` when its job is queued (or dispatched to Actions,
then with the Actions run as its details URL), marked ``in_progress`` when a
worker starts the job, and completed when the job ends (a job that gives up
completes it ``neutral``: an infrastructure problem is never a failure of the
change). ``/rsi stop`` cancels what is queued or dispatched (:func:`cancel_task`).

Check runs are cosmetic next to the job: a GitHub error here is logged, never
raised, so a failed PATCH never costs a measurement.
"""

from __future__ import annotations

import logging
from typing import Any

from bot import crash, render
from bot.context import Context, task_lane
from bot.gh import CheckRunInfo, GitHubError
from bot.payloads import TaskPayload
from bot.store import LiveCheck, Task
from bot.vocab import JobKind

log = logging.getLogger("rsi.bot.checks")


def details_url(ctx: Context, task: Task) -> str | None:
    """The service's own page for the task, when the page is served (``RSI_WEB_ENABLED``)."""
    base = ctx.settings.public_url
    if not base or not getattr(ctx.settings, "web_enabled", False):
        return None
    return f"{base.rstrip('/')}/tasks/{task.id}"


def base_sha(ctx: Context, task: Task) -> str | None:
    """The commit a task's run starts from: Bk, else the default branch's head."""
    if task.bk_sha:
        return task.bk_sha
    try:
        return ctx.gh.branch_sha(task.repo, ctx.gh.default_branch(task.repo))
    except GitHubError as e:
        log.warning("no base commit for the live check of task %s: %s", task.id, e)
        return None


def queue_job(ctx: Context, task: Task, payload: TaskPayload, *, key: str,
              head_sha: str | None = None, n: int | None = None) -> int | None:
    """Enqueue a heavy job (of ``payload``'s kind) in the task's lane and open its
    check run ``queued``. Returns the job id, or None when a job with this key was
    already queued."""
    job_id = ctx.store.enqueue_job(payload, lane=task_lane(task.id), key=key)
    if job_id is not None:
        open_check(ctx, task, job_id=job_id, head_sha=head_sha, n=n, what=_what(payload.kind),
                   fresh=True)
    return job_id


def _what(kind: str) -> str:
    """The job in the words of its check's title."""
    return "the task's rounds" if kind == JobKind.RUN_TASK else "re-verification"


def open_check(ctx: Context, task: Task, *, job_id: int | None, head_sha: str | None,
               n: int | None = None, what: str = "verification",
               fresh: bool = False) -> LiveCheck | None:
    """Open the job's check ``queued`` (``fresh``: the job was just queued, so no
    earlier run of it can have opened one)."""
    sha = head_sha or base_sha(ctx, task)
    if not sha:
        return None
    url = details_url(ctx, task)
    ext = f"{task.id}:{job_id or ''}"
    try:
        # a run killed after GitHub created the check and before it was recorded left
        # one behind: continue that check (found by its external id), never open a second
        info = find_check(ctx, task.repo, sha, ext) if job_id is not None and not fresh \
            else None
        if info is None:
            info = ctx.gh.create_check_run(task.repo, head_sha=sha, status="queued",
                                           details_url=url, external_id=ext,
                                           **render.check_queued(what, task.issue, n))
            crash.point("check_created")
    except GitHubError as e:
        log.warning("could not open the live check of task %s: %s", task.id, e)
        return None
    return ctx.store.add_live_check(task_id=task.id, generation=task.generation, repo=task.repo,
                                    head_sha=sha, check_run_id=info.id, job_id=job_id, n=n,
                                    details_url=url)


def find_check(ctx: Context, repo: str, sha: str, external_id: str) -> CheckRunInfo | None:
    """Our ``rsi/verifier`` check run on ``sha`` with that external id (the newest), if any."""
    found = [c for c in ctx.gh.list_check_runs(repo, sha) if c.external_id == external_id]
    return max(found, key=lambda c: c.id) if found else None


def complete_once(ctx: Context, repo: str, *, head_sha: str, external_id: str,
                  **payload: Any) -> CheckRunInfo:
    """A completed check run for ``external_id`` on ``head_sha``: the one a killed
    earlier run created is updated, else one is created."""
    found = find_check(ctx, repo, head_sha, external_id)
    if found is not None:
        return ctx.gh.update_check_run(repo, found.id, **{
            k: v for k, v in payload.items() if k in ("conclusion", "title", "summary",
                                                      "details_url", "status")})
    return ctx.gh.create_check_run(repo, head_sha=head_sha, external_id=external_id, **payload)


def _patch(ctx: Context, c: LiveCheck, **kw: Any) -> bool:
    try:
        ctx.gh.update_check_run(c.repo, c.check_run_id, **kw)
        return True
    except GitHubError as e:
        log.warning("could not update check run %s: %s", c.check_run_id, e)
        return False


def ensure(ctx: Context, task: Task, job_id: int, kind: str, *, head_sha: str | None = None,
           n: int | None = None) -> list[LiveCheck]:
    """The job's open checks; one is opened if the job was queued without one
    (e.g. by ``/rsi resume``, or its creation failed)."""
    checks = ctx.store.live_checks(job_id=job_id)
    if checks:
        return checks
    c = open_check(ctx, task, job_id=job_id, head_sha=head_sha, n=n, what=_what(kind))
    return [c] if c else []


def started(ctx: Context, task: Task, job_id: int, kind: str, *, head_sha: str | None = None,
            n: int | None = None) -> list[LiveCheck]:
    """A worker here took the job: its checks go ``in_progress``."""
    checks = ensure(ctx, task, job_id, kind, head_sha=head_sha, n=n)
    for c in checks:
        text = render.check_progress_text(phase="starting")
        if _patch(ctx, c, status="in_progress", **render.check_progress(text)):
            ctx.store.update_live_check(c.id, state="in_progress", progress=text)
    return checks


def progress(ctx: Context, job_id: int | None, text: str) -> None:
    """New progress text for the job's checks (sent only when it changed)."""
    if job_id is None:
        return
    for c in ctx.store.live_checks(job_id=job_id):
        if c.progress == text:
            continue
        if _patch(ctx, c, status="in_progress", **render.check_progress(text)):
            ctx.store.update_live_check(c.id, state="in_progress", progress=text)


def dispatched(ctx: Context, repo: str, job_id: int, run_id: int | None,
               runner_labels: list[str]) -> None:
    """The job went to GitHub Actions: its checks stay ``queued`` and link the run."""
    url = None
    if run_id:
        try:
            url = ctx.gh.workflow_run(repo, run_id).html_url or None
        except GitHubError as e:
            log.warning("no URL for Actions run %s: %s", run_id, e)
    text = render.check_progress_text(phase=f"dispatched to runners {', '.join(runner_labels)}")
    for c in ctx.store.live_checks(job_id=job_id):
        kw = {"details_url": url} if url else {}
        if _patch(ctx, c, status="queued", **kw, **render.check_progress(text)):
            ctx.store.update_live_check(c.id, state="queued", progress=text, run_id=run_id,
                                        details_url=url or c.details_url)


def run_started(ctx: Context, run_id: int) -> int:
    """A runner picked the Actions run up (``workflow_run.in_progress``)."""
    n = 0
    for c in ctx.store.live_checks(run_id=run_id):
        text = render.check_progress_text(phase="running on a self-hosted runner")
        if _patch(ctx, c, status="in_progress", **render.check_progress(text)):
            ctx.store.update_live_check(c.id, state="in_progress", progress=text)
            n += 1
    return n


def run_ended(ctx: Context, run_id: int, conclusion: str | None) -> None:
    """An Actions run ended without a result (failed, cancelled): its checks end too."""
    cancelled = conclusion == "cancelled"
    for c in ctx.store.live_checks(run_id=run_id):
        payload = ({"conclusion": "cancelled", "title": "the Actions run was cancelled",
                    "summary": "The run was cancelled before it reported a result."}
                   if cancelled else render.check_run_error(
                       f"the Actions run ended {conclusion or 'without a conclusion'} without a "
                       "result (runner or workflow error)"))
        if _patch(ctx, c, **payload):
            ctx.store.update_live_check(c.id, state="completed")


def finish(ctx: Context, job_id: int | None, *, conclusion: str, title: str, summary: str,
           head_sha: str | None = None) -> bool:
    """Complete the job's open checks (only the one on ``head_sha`` when given).
    False when there was none to complete (the caller then creates a completed one)."""
    if job_id is None:
        return False
    done = False
    for c in ctx.store.live_checks(job_id=job_id):
        if head_sha and c.head_sha != head_sha:
            continue
        if _patch(ctx, c, conclusion=conclusion, title=title, summary=summary):
            ctx.store.update_live_check(c.id, state="completed")
            done = True
    return done


def finish_task_run(ctx: Context, job_id: int | None, task: Task, state: str) -> None:
    t = ctx.store.task(task.id) or task
    cands = ctx.store.candidates(t.id, generation=t.generation)
    finish(ctx, job_id, **render.task_check(state, rounds_done=t.rounds_done, budget=t.budget,
                                            candidates=cands))


def fail_job(ctx: Context, job_id: int | None, message: str) -> None:
    """A job gave up: its checks end ``neutral`` (infrastructure, not a verdict)."""
    finish(ctx, job_id, **render.check_run_error(message))


def supersede(ctx: Context, task: Task) -> None:
    """A newer trigger started the task again: checks of older generations end."""
    for c in ctx.store.live_checks(task_id=task.id):
        if c.generation < task.generation and _patch(
                ctx, c, conclusion="neutral", title="superseded by a newer trigger",
                summary="The task was started again; its new run has its own check."):
            ctx.store.update_live_check(c.id, state="completed")


def cancel_task(ctx: Context, task: Task) -> list[str]:
    """``/rsi stop``: cancel the task's Actions runs not yet ingested and mark its
    queued or running checks cancelled. Returns what was cancelled, in words."""
    done: list[str] = []
    for d in ctx.store.dispatches_of(task.id):
        if d.run_id is None:
            continue
        try:
            if ctx.gh.cancel_workflow_run(task.repo, d.run_id):
                done.append(f"Actions run {d.run_id}")
                ctx.store.consume_dispatch(d.nonce)  # a late result is not ingested
        except GitHubError as e:
            log.warning("could not cancel Actions run %s: %s", d.run_id, e)
    for c in ctx.store.live_checks(task_id=task.id):
        if c.state == "in_progress" and c.run_id is None:
            continue  # a job running here stops after its current step and completes it
        if _patch(ctx, c, conclusion="cancelled", title="stopped by /rsi stop",
                  summary="A maintainer stopped the task with `/rsi stop`; `/rsi resume` "
                          "continues."):
            ctx.store.update_live_check(c.id, state="completed")
    return done
