"""``run_task``: the task's rounds, and the candidates they recorded.

The loop's events drive the progress (the live check, the status comment).
What a candidate *is* comes from the ledger the loop wrote (and the run's
``TaskResult``): :func:`sync_candidates` is the one place that turns ledger
records into the store's candidates and queues their draft PRs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot import checks, render
from bot.context import Context, harness_task_id
from bot.harness_port import SpecError
from bot.payloads import PublishPayload, RunTaskPayload
from bot.status import refresh_status
from bot.store import Candidate, Task, stored_verdict
from bot.tasks.clone import ensure_clone, ledger, load_spec
from bot.tasks.common import best_effort, task_of
from bot.vocab import CandidateState, JobKind, TaskState
from bot.worker import JobRun, Permanent
from harness.ledger import CandidateStatus, LedgerRecord
from harness.verification import error_verdict
from verifier.verdict import Verdict

if TYPE_CHECKING:  # (imported when used: the web process never loads the loop's models)
    from harness.events import BaselineMeasured, LoopEvent, Progress, RoundStarted

log = logging.getLogger("rsi.bot.tasks")


class RunWatcher:
    """Turns the loop's events into progress: the live check, the task's row, status
    refreshes. A recorded candidate triggers ``sync`` (the ledger is the record).

    Called with live events (local executor) or events loaded from a runner's
    result (``actions``); ``finish`` records the run's outcome.
    """

    def __init__(self, ctx: Context, task: Task, gen: int, *, sync: Callable[[], None],
                 job_id: int | None = None):
        self.ctx, self.task, self.gen = ctx, task, gen
        self.sync = sync
        self.job_id = job_id  # its live check shows the progress
        self.note = ""
        self.round: int | None = None

    def _progress(self, ev: Progress | RoundStarted | BaselineMeasured) -> None:
        """Round i/N and the pairs measured so far, on the job's live check."""
        from harness.events import Progress, RoundStarted

        candidate, pairs = None, None
        if isinstance(ev, Progress):
            self.round = ev.round if ev.round is not None else self.round
            phase, candidate, pairs = ev.phase, ev.candidate, ev.pairs
        elif isinstance(ev, RoundStarted):
            self.round, phase, candidate = ev.round, "agent at work", ev.candidate
        else:
            phase = "baseline measured"
        t = self.ctx.store.task(self.task.id)
        text = render.check_progress_text(
            phase=phase, round_=self.round, rounds=t.budget if t else None,
            candidate=candidate, pairs=pairs)
        # (runs are left out: a PATCH per pair, not per benchmark run, is enough)
        checks.progress(self.ctx, self.job_id, text)

    def __call__(self, ev: LoopEvent) -> None:
        from harness.events import (
            BaselineMeasured,
            CandidateRecorded,
            Progress,
            Refused,
            RoundStarted,
        )

        ctx, task, gen = self.ctx, self.task, self.gen
        if isinstance(ev, (Progress, RoundStarted, BaselineMeasured)):
            self._progress(ev)
        if isinstance(ev, BaselineMeasured):
            t = ctx.store.existing_task(task.id)
            ctx.store.update_task(task.id, generation=gen, state=TaskState.RUNNING,
                                  b0_sha=t.b0_sha or ev.sha, bk_sha=t.bk_sha or ev.sha)
        elif isinstance(ev, RoundStarted):
            # rounds_done counts finished rounds; this one is under way
            ctx.store.update_task(task.id, generation=gen, rounds_done=ev.round - 1)
        elif isinstance(ev, CandidateRecorded):
            self.sync()
            ctx.store.update_task(task.id, generation=gen, rounds_done=ev.round)
        elif isinstance(ev, Refused):
            self.note = render.inert(ev.message or "refused", max_len=2000)
            ctx.store.update_task(task.id, generation=gen, state=TaskState.REFUSED)
        else:
            return
        best_effort(refresh_status, ctx, task.id, note=self.note)

    def finish(self, status: str, reason: str) -> str:
        ctx, task, gen = self.ctx, self.task, self.gen
        if status == "refused" or self.note:
            state = TaskState.REFUSED
            self.note = self.note or render.inert(reason, max_len=2000)
        elif status in ("stopped", "paused"):
            state = TaskState(status)
            if status == "paused":
                self.note = f"Paused: {render.inert(reason, max_len=2000)}. `/rsi resume` continues."
        else:
            state = TaskState.FINISHED
        t = ctx.store.existing_task(task.id)
        if t.stop and state == TaskState.FINISHED and t.budget and t.rounds_done < t.budget:
            state = TaskState.STOPPED
        ctx.store.update_task(task.id, generation=gen, state=state)
        best_effort(refresh_status, ctx, task.id, note=self.note)
        checks.finish_task_run(ctx, self.job_id, task, state)
        return state


def run_task(ctx: Context, run: JobRun) -> str:
    task = task_of(ctx, run)
    gen = run.args_as(RunTaskPayload).generation
    if task.generation != gen:
        return "superseded"
    if task.stop:
        ctx.store.update_task(task.id, generation=gen, state=TaskState.STOPPED)
        best_effort(refresh_status, ctx, task.id)
        return "stopped before start"
    clone, default = ensure_clone(ctx, task)
    checks.started(ctx, task, run.job.id, JobKind.RUN_TASK)
    try:
        spec = load_spec(ctx, task, clone, default)
    except SpecError as e:
        ctx.store.update_task(task.id, generation=gen, state=TaskState.INVALID)
        refresh_status(ctx, task.id, errors=e.errors)
        checks.finish_task_run(ctx, run.job.id, task, "invalid")
        return f"invalid: {len(e.errors)} error(s)"

    def sync() -> None:
        sync_candidates(ctx, task, gen, ledger(ctx, clone, task))

    sync()  # a crash between the loop's record and ours: nothing is missed
    ctx.store.update_task(task.id, generation=gen, state=TaskState.RUNNING if task.b0_sha else TaskState.BASELINE)
    best_effort(refresh_status, ctx, task.id)
    watcher = RunWatcher(ctx, task, gen, sync=sync, job_id=run.job.id)

    def should_stop() -> bool:
        t = ctx.store.task(task.id)
        return (run.cancelled() or t is None or t.generation != gen or t.stop
                or (t.budget is not None and t.rounds_done >= t.budget))

    result = ctx.harness.run_task(clone, spec, state_dir=ctx.harness_dir(task.repo, task.issue, gen),
                                  keep="propose", rounds=task.budget, should_stop=should_stop,
                                  on_event=watcher)
    t = ctx.store.existing_task(task.id)
    if t.generation != gen:
        return "superseded"
    if run.cancelled():
        return "lease lost"
    sync()  # the loop swallows a watcher's errors: make sure no candidate was missed
    return f"{watcher.finish(result.status, result.reason)}: {result.reason}"


def sync_candidates(ctx: Context, task: Task, gen: int, records: list[LedgerRecord], *,
                    heads: dict[str, str] | None = None) -> list[Candidate]:
    """Store the task's candidates that the ledger has and the store does not, and
    queue the draft PR of each one open for review (verdict ``accept``, or
    ``review``: a human must look, and a draft PR is where humans look). Then
    queue again the PRs a crash left unopened.

    ``heads`` (a runner's bundle): a record whose branch is not one taken from
    the bundle at exactly that commit is left out. Returns what was added."""
    tid = harness_task_id(task.issue, task.generation)
    known = {c.n for c in ctx.store.candidates(task.id, generation=gen)}
    added = []
    for rec in records:
        if rec.event != "candidate" or rec.task != tid or rec.candidate in known:
            continue
        if heads is not None and rec.branch and heads.get(rec.branch) != rec.sha:
            log.warning("ledger record %s names %s@%s: not a branch head taken from the bundle",
                        rec.id, rec.branch, rec.sha[:12])
            continue
        added.append(_record(ctx, task, gen, rec))
        known.add(rec.candidate)
    _republish(ctx, task)
    return added


def _verdict_of(rec: LedgerRecord) -> Verdict | None:
    """The record's verdict (checked when the ledger was read: a runner's ledger is
    untrusted, and ``harness.ledger.load_record`` refuses a verdict that is not
    one); an agent's error round gets the error verdict the loop gave it."""
    if rec.verdict is not None:
        return rec.verdict
    if rec.decision == "error":
        return error_verdict("agent", rec.reason)
    return None


def _record(ctx: Context, task: Task, gen: int, rec: LedgerRecord) -> Candidate:
    publishable = rec.status == CandidateStatus.OPEN and bool(rec.branch) and bool(rec.sha)
    cand = ctx.store.upsert_candidate(
        task.id, rec.candidate, generation=gen, branch=rec.branch or None, sha=rec.sha or None,
        decision=rec.decision, hypothesis=rec.hypothesis, verdict=stored_verdict(_verdict_of(rec)),
        round=rec.round, agent=rec.agent,
        state=CandidateState.PENDING if publishable else CandidateState.NONE)
    if publishable:
        _enqueue_publish(ctx, task, gen, rec.candidate, rec.sha)
    return cand


def _enqueue_publish(ctx: Context, task: Task, gen: int, n: int, sha: str | None) -> None:
    ctx.store.enqueue_job(PublishPayload(task_id=task.id, generation=gen, n=n),
                          lane=f"publish:{task.id}", key=f"publish:{task.id}:{gen}:{n}:{sha}")


def _republish(ctx: Context, task: Task) -> None:
    """After a crash between a candidate and its PR: queue the missing PRs again."""
    for c in ctx.store.candidates(task.id, generation=task.generation, state=CandidateState.PENDING):
        _enqueue_publish(ctx, task, task.generation, c.n, c.sha)


# ------------------------------------------------------------ on a runner (actions)


def on_runner(harness: Any, repo: Path, spec: Any, job: dict[str, Any], *, state_dir: Path,
              default: str, on_event: Callable[[LoopEvent], None]) -> dict[str, Any]:
    """The rounds on a runner's checkout (``rsi worker --job``): the result's fields."""
    res = harness.run_task(repo, spec, state_dir=state_dir, keep="propose",
                           rounds=job.get("budget"), should_stop=lambda: False, on_event=on_event)
    return {"result": res.model_dump(mode="json")}


def ingest(ctx: Context, task: Task, clone: Path, job: dict[str, Any], result: dict[str, Any], *,
           heads: dict[str, str], events: list[LoopEvent], job_id: int | None) -> str:
    """A runner's rounds, applied as a local run would have: the candidates from the
    ledger it pushed (only branches taken from its bundle), then its events' progress."""
    from harness.loop import TaskResult

    try:
        res = TaskResult.model_validate(result.get("result"))
    except ValueError as e:
        raise Permanent(f"the runner's result has no valid task result: {str(e)[:300]}") from None
    gen = task.generation
    sync_candidates(ctx, task, gen, ledger(ctx, clone, task), heads=heads)
    watcher = RunWatcher(ctx, task, gen, sync=lambda: None, job_id=job_id)
    for ev in events:
        watcher(ev)
    return watcher.finish(res.status, res.reason)
