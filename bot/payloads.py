"""Job payloads, typed: one model per job kind (:class:`bot.vocab.JobKind`).

Each job in :data:`bot.tasks.JOBS` carries its model (``Job.payload``). A payload
is built as its model at every enqueue site and stored as its JSON
(:meth:`bot.store.Store.enqueue_job`, which validates it again), and it is
validated again when a worker claims the job (:meth:`JobPayload.load`): a
payload that does not fit fails that one job with an error that says which
field is wrong, and the worker goes on with the next job.

Rows written before the payloads were typed still load: the fields they
carried that no job ever read (``legacy``: ``reverify``'s ``rebase`` and
``reason``, ``rebaseline``'s ``requested_by``) are dropped on load; any other
unknown field is an error.

This module sits low (pydantic and :mod:`bot.vocab` only), so the store, the
check runs and every handler can build payloads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from bot.vocab import JobKind

P = TypeVar("P", bound="JobPayload")


class PayloadError(ValueError):
    """A payload that does not fit its job kind's model (the message says why)."""


class JobPayload(BaseModel):
    """The base of every job's payload: strict (no ``"1"`` for ``1``), closed (no
    unknown fields), immutable."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    kind: ClassVar[JobKind]
    legacy: ClassVar[frozenset[str]] = frozenset()
    """Fields older bots wrote that nothing reads: dropped when a stored row loads."""

    @classmethod
    def load(cls: type[P], raw: object) -> P:
        """The payload of a stored (or dispatched) job; :class:`PayloadError` says
        what is wrong with it."""
        if not isinstance(raw, Mapping):
            raise PayloadError(f"the {cls.kind} job's payload ({cls.__name__}) is "
                               f"{type(raw).__name__}, not a JSON object")
        data = {k: v for k, v in raw.items() if k not in cls.legacy}
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise PayloadError(f"the {cls.kind} job's payload does not fit {cls.__name__}: "
                               + _problems(e)) from None

    def dump(self) -> dict[str, Any]:
        """The JSON object stored in the job row (validated once more on the way)."""
        data = self.model_dump(mode="json")
        type(self).load(data)  # a model_construct()ed or otherwise forged instance fails here
        return data


def _problems(e: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(x) for x in err['loc']) or '(payload)'}: {err['msg']}"
                     for err in e.errors()[:10])


class EventPayload(JobPayload):
    """``event``: one stored webhook delivery (queued by the store with the delivery)."""

    kind: ClassVar[JobKind] = JobKind.EVENT
    delivery_id: str


class TaskPayload(JobPayload):
    """A job of one task (every kind but ``event``)."""

    task_id: int


class RunTaskPayload(TaskPayload):
    """``run_task``: the rounds of one generation of a task."""

    kind: ClassVar[JobKind] = JobKind.RUN_TASK
    generation: int


class PublishPayload(TaskPayload):
    """``publish``: push candidate ``n`` of a generation and open its draft PR."""

    kind: ClassVar[JobKind] = JobKind.PUBLISH
    generation: int
    n: int


class RebaselinePayload(TaskPayload):
    """``rebaseline``: measure ``ref`` (None: the default branch) as the new Bk;
    ``merged_pr``: the merge that made it, for the notes; ``watch``: it was one of
    our PRs, so the watch after merge checks its claim."""

    kind: ClassVar[JobKind] = JobKind.REBASELINE
    legacy: ClassVar[frozenset[str]] = frozenset({"requested_by"})
    ref: str | None = None
    merged_pr: int | None = None
    watch: bool = False  # a merge of our own PR: also the watch after merge (harness/watch.py)


class ReverifyPayload(TaskPayload):
    """``reverify``: judge candidate ``n``'s PR head again; ``generation`` None is
    the task's current one; ``requested_by`` is named in the report's note."""

    kind: ClassVar[JobKind] = JobKind.REVERIFY
    legacy: ClassVar[frozenset[str]] = frozenset({"rebase", "reason"})
    n: int
    generation: int | None = None
    requested_by: str | None = None


PAYLOADS: tuple[type[JobPayload], ...] = (EventPayload, RunTaskPayload, PublishPayload,
                                          RebaselinePayload, ReverifyPayload)
"""Every job kind's model (``bot.tasks.JOBS`` registers each with its job)."""


def model_of(kind: str) -> type[JobPayload]:
    """The payload model of a job kind (:class:`PayloadError` for an unknown kind)."""
    for m in PAYLOADS:
        if m.kind == kind:
            return m
    raise PayloadError(f"unknown job kind {kind!r} (known: {', '.join(m.kind for m in PAYLOADS)})")
