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

Each job carries its payload model (:mod:`bot.payloads`): every enqueue site
builds it, and :func:`claimed` validates a claimed job's payload against it
before the job runs (a payload that does not fit fails that job, never the
worker). The ``event`` job hands its delivery to ``ctx.route`` (the handlers,
wired by the service), so no job imports the handlers that queue it.

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

from bot.payloads import (
    EventPayload,
    JobPayload,
    PayloadError,
    PublishPayload,
    RebaselinePayload,
    ReverifyPayload,
    RunTaskPayload,
)
from bot.tasks import publish as _publish
from bot.tasks import rebaseline as _rebaseline
from bot.tasks import reverify as _reverify
from bot.tasks import run as _run
from bot.tasks.event import handle_event
from bot.vocab import JobKind
from bot.worker import JobRun, Permanent


@dataclass(frozen=True)
class Job:
    kind: JobKind
    payload: type[JobPayload]
    """The job's payload model: built at every enqueue, validated again at claim."""
    run: Callable[..., str]
    """``run(ctx, job_run) -> outcome``: the job, in this process."""
    heavy: bool = False
    on_runner: Callable[..., dict[str, Any]] | None = None
    """``on_runner(harness, repo, spec, job_doc, *, state_dir, default, on_event)``: a
    heavy job on a runner's checkout; returns the result's fields."""
    ingest: Callable[..., str] | None = None
    """``ingest(ctx, task, clone, job_doc, result, *, heads, events, job_id)``: a
    runner's result, applied as the local run would have."""

    def __post_init__(self) -> None:
        if self.payload.kind != self.kind:
            raise TypeError(f"job {self.kind} registered with {self.payload.__name__}, "
                            f"the payload of {self.payload.kind}")


JOBS: dict[JobKind, Job] = {job.kind: job for job in (
    Job(JobKind.EVENT, EventPayload, handle_event),
    Job(JobKind.PUBLISH, PublishPayload, _publish.publish),
    Job(JobKind.RUN_TASK, RunTaskPayload, _run.run_task, heavy=True, on_runner=_run.on_runner,
        ingest=_run.ingest),
    Job(JobKind.REBASELINE, RebaselinePayload, _rebaseline.rebaseline, heavy=True,
        on_runner=_rebaseline.on_runner, ingest=_rebaseline.ingest),
    Job(JobKind.REVERIFY, ReverifyPayload, _reverify.reverify, heavy=True,
        on_runner=_reverify.on_runner, ingest=_reverify.ingest),
)}


def job(kind: str) -> Job:
    """The registered job of ``kind`` (``KeyError`` names the known kinds)."""
    try:
        return JOBS[kind]  # type: ignore[index]  # a JobKind is its string
    except KeyError:
        raise KeyError(f"unknown job kind {kind!r} (known: {', '.join(JOBS)})") from None


def claimed(run: JobRun) -> Job:
    """The registered job of a claimed job, its payload validated against the job's
    model (``run.args``). An unknown kind or a payload that does not fit fails
    that job at once (:class:`Permanent`, with what is wrong), never the worker."""
    try:
        registered = job(run.job.kind)
    except KeyError as e:
        raise Permanent(f"job {run.job.id}: {e.args[0]}") from None
    try:
        run.args = registered.payload.load(run.job.payload)
    except PayloadError as e:
        raise Permanent(f"job {run.job.id}: {e}") from None
    return registered

