"""What every task job needs: the task and candidate rows, and best-effort status updates."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from bot import obs
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
