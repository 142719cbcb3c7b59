"""Workers: take jobs from the durable queue, run them, record the outcome.

A worker claims a job with a lease, renews it from a heartbeat thread while
the job runs, and records ``done``, a retry with backoff, or ``failed``. A
worker that dies leaves a lease that runs out; another worker (or the same bot
after a restart) claims the job again. Jobs must therefore be idempotent:
every side effect is keyed (PR per branch, sticky comment per marker,
enqueue per key) so running one twice does no harm.

Outcomes: return normally -> done. Raise :class:`Retry` or a retryable
``GitHubError`` or any unexpected exception -> retried with backoff until
``max_attempts``. Raise :class:`Permanent` or a non-retryable ``GitHubError``
-> failed at once.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import traceback
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from bot import crash
from bot.gh import GitHubError
from bot.payloads import JobPayload, P, PayloadError
from bot.store import ClaimedJob, Store

log = logging.getLogger("rsi.bot.worker")


class Retry(Exception):
    """Try this job again later (with backoff)."""


class Permanent(Exception):
    """This job cannot succeed; do not retry."""


@dataclass
class JobRun:
    """A claimed job while it runs: the handler can ask whether it still owns it."""

    job: ClaimedJob
    lost: threading.Event = field(default_factory=threading.Event)
    args: JobPayload | None = None
    """The payload as its job's model, once validated at claim (``bot.service.job_handler``)."""

    @property
    def payload(self) -> dict:
        """The payload's stored JSON (read the typed :meth:`args_as` instead)."""
        return self.job.payload

    def args_as(self, model: type[P]) -> P:
        """The payload as ``model`` (validated at claim, or here); a payload that
        does not fit fails the job at once (:class:`Permanent`), never retried."""
        if isinstance(self.args, model):
            return self.args
        try:
            self.args = model.load(self.job.payload)
        except PayloadError as e:
            raise Permanent(f"job {self.job.id}: {e}") from None
        return self.args

    def cancelled(self) -> bool:
        return self.lost.is_set()


Handler = Callable[[JobRun], Any]


def worker_id(prefix: str = "w") -> str:
    return f"{prefix}:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Worker:
    def __init__(self, store: Store, handle: Handler, *, owner: str | None = None,
                 lease_s: float = 60.0, poll_s: float = 0.5, backoff_base_s: float = 2.0,
                 backoff_max_s: float = 600.0, kinds: list[str] | None = None,
                 on_failed: Callable[[ClaimedJob, str], None] | None = None):
        self.store = store
        self.on_failed = on_failed
        self.handle = handle
        self.owner = owner or worker_id()
        self.lease_s = lease_s
        self.poll_s = poll_s
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.kinds = kinds

    def run_once(self) -> bool:
        """Run one job if one is due; False when the queue had nothing for us."""
        job = self.store.claim(self.owner, lease_s=self.lease_s, kinds=self.kinds)
        if job is None:
            return False
        run = JobRun(job)
        stop_beat = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(run, stop_beat), daemon=True,
                                name=f"heartbeat-{job.id}")
        beat.start()
        try:
            result = self.handle(run)
        except BaseException as exc:  # noqa: BLE001 - every outcome is recorded
            retry, msg = _classify(exc)
            state = self.store.fail(job, msg, retry=retry, backoff_base_s=self.backoff_base_s,
                                    backoff_max_s=self.backoff_max_s)
            log.warning("job %s (%s) attempt %s -> %s: %s", job.id, job.kind, job.attempts,
                        state, msg.splitlines()[-1] if msg else "")
            if state == "failed" and self.on_failed is not None:
                try:
                    self.on_failed(job, msg)
                except Exception:  # reporting a failure must not kill the worker
                    log.exception("on_failed hook for job %s", job.id)
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
        else:
            crash.point("handled")  # tests: killed after the job acted, before it is recorded
            if not self.store.finish(job, _jsonable(result)):
                log.warning("job %s finished after losing its lease", job.id)
        finally:
            stop_beat.set()
            beat.join(5)
        return True

    def _heartbeat(self, run: JobRun, stop: threading.Event) -> None:
        interval = max(self.lease_s / 3, 0.05)
        while not stop.wait(interval):
            try:
                if not self.store.heartbeat(run.job, lease_s=self.lease_s):
                    run.lost.set()
                    return
            except Exception:  # the database blinked: try again next beat
                log.exception("heartbeat of job %s failed", run.job.id)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                busy = self.run_once()
            except Exception:
                log.exception("worker %s: claim failed", self.owner)
                busy = False
            if not busy:
                stop.wait(self.poll_s)


def _classify(exc: BaseException) -> tuple[bool, str]:
    text = "".join(traceback.format_exception(exc))[-4000:]
    if isinstance(exc, Permanent):
        return False, f"{exc}\n{text}"
    if isinstance(exc, GitHubError):
        return exc.retryable, f"{exc}\n{text}"
    return True, text


def _jsonable(result: Any) -> Any:
    if result is None or isinstance(result, (str, int, float, bool, list, dict)):
        return result
    return str(result)


class WorkerPool:
    """``n`` worker threads over one store; ``stop()`` waits for running jobs."""

    def __init__(self, store: Store, handle: Handler, n: int, **kw: Any):
        self.stop_event = threading.Event()
        self.workers = [Worker(store, handle, **kw) for _ in range(n)]
        self.threads = [threading.Thread(target=w.run, args=(self.stop_event,), daemon=True,
                                         name=f"rsi-worker-{i}")
                        for i, w in enumerate(self.workers)]

    def start(self) -> "WorkerPool":
        for t in self.threads:
            t.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout)


def job_exit_code(result: dict[str, Any]) -> int:
    """``rsi worker --job``'s exit status: 1 when the dispatched job failed
    (``error`` in its result), so the Actions run shows red; 0 otherwise. A
    refused or rejected task is an outcome, not a failure. The result is
    written (and uploaded by the workflow's ``if: always()`` step) either way."""
    return 1 if result.get("error") else 0
