"""The bot's jobs, one module per feature, and the one registry of them (:data:`JOBS`).

================  ===============================================  =========  =======
kind              what it does                                      module     heavy
================  ===============================================  =========  =======
``event``         route one stored webhook delivery to its handler  event      no
``run_task``      the task's rounds (agents, verifier)              run        yes
``publish``       push a candidate, open its draft PR, report       publish    no
``rebaseline``    new Bk after a merge; re-judge open candidates    rebaseline yes
``reverify``      judge one candidate PR's head again               reverify   yes
================  ===============================================  =========  =======

Heavy jobs need the task's clone and the harness: the service hands them to
its executor (``local``: :attr:`Job.run` here; ``actions``: dispatched to the
target's runners, where ``rsi worker --job`` calls :attr:`Job.on_runner`, and
the result is applied by :attr:`Job.ingest`). The service, both executors and
the runner's side all look jobs up here.

Every job is idempotent (a job may run twice after a crash): branches are
force-pushed to the same name, a PR is looked up by its head before one is
opened, sticky comments are edited in place, follow-up jobs are enqueued with
keys. ``run_task``, ``rebaseline`` and ``reverify`` share the task's lane (one
at a time per task); ``publish`` has its own lane so draft PRs appear while
the rounds go on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bot.tasks import publish as _publish
from bot.tasks import rebaseline as _rebaseline
from bot.tasks import reverify as _reverify
from bot.tasks import run as _run
from bot.tasks.event import handle_event
from bot.vocab import JobKind


@dataclass(frozen=True)
class Job:
    kind: JobKind
    run: Callable[..., str]
    """``run(ctx, job_run) -> outcome``: the job, in this process."""
    heavy: bool = False
    on_runner: Callable[..., dict[str, Any]] | None = None
    """``on_runner(harness, repo, spec, job_doc, *, state_dir, default, on_event)``: a
    heavy job on a runner's checkout; returns the result's fields."""
    ingest: Callable[..., str] | None = None
    """``ingest(ctx, task, clone, job_doc, result, *, heads, events, job_id)``: a
    runner's result, applied as the local run would have."""


JOBS: dict[JobKind, Job] = {job.kind: job for job in (
    Job(JobKind.EVENT, handle_event),
    Job(JobKind.PUBLISH, _publish.publish),
    Job(JobKind.RUN_TASK, _run.run_task, heavy=True, on_runner=_run.on_runner,
        ingest=_run.ingest),
    Job(JobKind.REBASELINE, _rebaseline.rebaseline, heavy=True,
        on_runner=_rebaseline.on_runner, ingest=_rebaseline.ingest),
    Job(JobKind.REVERIFY, _reverify.reverify, heavy=True, on_runner=_reverify.on_runner,
        ingest=_reverify.ingest),
)}


def job(kind: str) -> Job:
    """The registered job of ``kind`` (``KeyError`` names the known kinds)."""
    try:
        return JOBS[kind]
    except KeyError:
        raise KeyError(f"unknown job kind {kind!r} (known: {', '.join(JOBS)})") from None
