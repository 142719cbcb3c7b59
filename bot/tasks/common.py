"""What every task job needs: the task and candidate rows, and best-effort status updates."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from bot import crash, obs
from bot.context import Context
from bot.gh import GitHubError
from bot.payloads import P, PayloadError, TaskPayload, model_of
from bot.store import Candidate, Task
from bot.worker import JobRun, Permanent

log = logging.getLogger("rsi.bot.tasks")


def task_of(ctx: Context, run: JobRun) -> Task:
    """The job's task (``Permanent`` when it is gone); binds its id to the log context."""
    try:
        args = run.args_as(model_of(run.job.kind))
    except PayloadError as e:
        raise Permanent(f"job {run.job.id}: {e}") from None
    if not isinstance(args, TaskPayload):
        raise Permanent(f"job {run.job.id} ({run.job.kind}) names no task")
    task_id = args.task_id
    task = ctx.store.task(task_id)
    if task is None:
        raise Permanent(f"task {task_id} does not exist")
    obs.bind_task(task.id)
    return task


def candidate_of(ctx: Context, task: Task, gen: int, n: int) -> Candidate:
    for c in ctx.store.candidates(task.id, generation=gen):
        if c.n == n:
            return c
    raise Permanent(f"candidate {n} of task {task.id} (generation {gen}) is unknown")


def best_effort(fn: Callable[..., Any], *args: Any, **kw: Any) -> None:
    """Cosmetic GitHub updates (status refreshes) must not abort a long run."""
    try:
        fn(*args, **kw)
    except GitHubError as e:
        log.warning("status update failed (will refresh later): %s", e)


def payload_of(job_doc: dict[str, Any], model: type[P]) -> P:
    """A dispatched job document's payload as ``model`` (``Permanent`` when it does not fit)."""
    try:
        return model.load(job_doc.get("payload"))
    except PayloadError as e:
        raise Permanent(str(e)) from None


class Saga:
    """A recorded sequence of effects (``store.Step``): each step runs once and
    records what it made; a job run again after a crash resumes at the first
    step not recorded (the steps before are read back, never made again).

    Each step's effect must also be findable on GitHub (a hidden marker, an
    ``external_id``, a branch of the bot's own): a kill after GitHub acted and
    before the record (the crash point ``<kind>.<step>``, :mod:`bot.crash`)
    makes the re-run find it instead of making a second one."""

    def __init__(self, ctx: Context, kind: str, key: str):
        self.ctx, self.kind = ctx, kind
        self.key = f"{kind}:{key}"
        self._done = {name: row.data for name, row in ctx.store.steps(self.key).items()}

    def done(self, step: str) -> bool:
        return step in self._done

    def data(self, step: str) -> Any:
        """What ``step`` recorded (None when it is not done)."""
        return self._done.get(step)

    def run(self, step: str, make: Callable[[], Any]) -> Any:
        """``make()`` unless ``step`` is recorded; returns the recorded data (JSON)."""
        if step in self._done:
            return self._done[step]
        value = make()
        crash.point(f"{self.kind}.{step}")
        row = self.ctx.store.record_step(self.key, step, value)
        self._done[step] = row.data
        return row.data
