"""Operations: structured logs and the metrics a scrape of ``/metrics`` adds.

Logs: :func:`configure_logging` makes every log line one JSON object (structlog,
``RSI_LOG_FORMAT=json``, the default; ``console`` for a terminal), for
structlog loggers and the standard library's alike. The ids of what is being
worked on are bound in context variables and land on every line logged while
they are bound: ``delivery_id`` (the webhook delivery), ``job_id`` and
``job_kind`` (the durable job), ``task_id`` (the bot's task), ``gh_event``
(``issues.labeled`` ...). :func:`job_context` binds them for a job;
:func:`bind_task` adds the task once a handler has found it.

Metrics (a registry of their own, :data:`REGISTRY`, served with the app's):
``rsi_job_duration_seconds`` (histogram by job kind and outcome) and, with a
GitHub port, ``rsi_github_rate_limit_remaining`` / ``_limit`` /
``_reset_timestamp`` (:class:`GitHubRateCollector`, read from the last
response's headers: a scrape never calls GitHub).
"""

from __future__ import annotations

import contextvars
import logging
import sys
import time
from contextlib import contextmanager
from typing import Any, Iterator

import structlog
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

REGISTRY = CollectorRegistry(auto_describe=True)
JOB_DURATION = Histogram(
    "rsi_job_duration_seconds", "How long a job took in a worker, by kind and outcome",
    ["kind", "outcome"], registry=REGISTRY,
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200,
             float("inf")))

_SHARED: list[Any] = [
    structlog.contextvars.merge_contextvars,
    structlog.processors.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]


def configure_logging(fmt: str = "json", level: int = logging.INFO, *,
                      stream: Any = None) -> None:
    """JSON lines on ``stream`` (stderr) for every logger (idempotent: replaces
    the root's handlers)."""
    renderer: Any = (structlog.processors.JSONRenderer() if fmt == "json"
                     else structlog.dev.ConsoleRenderer(colors=False))
    structlog.configure(
        processors=[*_SHARED, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.ExtraAdder(), *_SHARED],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info, renderer]))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error"):  # one format for the server's lines too
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True


def get_logger(name: str) -> Any:
    return structlog.stdlib.get_logger(name)


def job_ids(job: Any) -> dict[str, Any]:
    """The ids a job's log lines carry: job id and kind, its delivery, its task."""
    payload = getattr(job, "payload", None)
    if not isinstance(payload, dict):  # a payload that does not fit fails its job, not this
        payload = {}
    ids: dict[str, Any] = {"job_id": job.id, "job_kind": job.kind}
    if payload.get("delivery_id") is not None:
        ids["delivery_id"] = str(payload["delivery_id"])[:200]
    if isinstance(payload.get("task_id"), int):
        ids["task_id"] = payload["task_id"]
    return ids


_current_job: contextvars.ContextVar[int | None] = contextvars.ContextVar("rsi_job", default=None)


def current_job_id() -> int | None:
    """The id of the job this thread runs now (:func:`job_context`), if any."""
    return _current_job.get()


@contextmanager
def job_context(job: Any) -> Iterator[None]:
    """Bind the job's ids for everything logged while it runs, and time it into
    ``rsi_job_duration_seconds``. The ids stay bound afterwards (so the worker's
    own line about the outcome carries them) until the thread's next job."""
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(**job_ids(job))
    _current_job.set(job.id)
    start = time.perf_counter()
    outcome = "done"
    log = logging.getLogger("rsi.bot.jobs")
    log.info("job started", extra={"attempt": getattr(job, "attempts", None)})
    try:
        yield
    except BaseException as e:
        outcome = type(e).__name__
        raise
    finally:
        took = time.perf_counter() - start
        JOB_DURATION.labels(job.kind, outcome[:60]).observe(took)
        log.info("job ended", extra={"outcome": outcome, "duration_s": round(took, 3)})


def bind_task(task_id: int | None) -> None:
    """Add the task's id to the current context (a handler found the task)."""
    if task_id is not None:
        structlog.contextvars.bind_contextvars(task_id=task_id)


def bind_delivery(delivery_id: str, gh_event: str) -> None:
    """The delivery being handled (``gh_event``: its X-GitHub-Event and action)."""
    structlog.contextvars.bind_contextvars(delivery_id=delivery_id[:200], gh_event=gh_event[:100])


class GitHubRateCollector:
    """GitHub's rate limit as the port last saw it, at scrape time."""

    def __init__(self, gh: Any):
        self.gh = gh

    def collect(self):
        rate = None
        try:
            rate = self.gh.rate_limit()
        except Exception:  # noqa: BLE001 - a scrape never fails for this
            logging.getLogger("rsi.bot.obs").exception("metrics: rate limit unavailable")
        if rate is None:
            return
        yield GaugeMetricFamily("rsi_github_rate_limit_remaining",
                                "GitHub API requests left in this window (last response)",
                                value=rate.remaining)
        yield GaugeMetricFamily("rsi_github_rate_limit_limit",
                                "GitHub API requests allowed per window", value=rate.limit)
        yield GaugeMetricFamily("rsi_github_rate_limit_reset_timestamp",
                                "When the window resets (Unix time)", value=rate.reset_at)


class RedeliveryCollector:
    """The redelivery sweep's asks and give-ups (``bot.redeliver``), from the store, so
    every process of the service reports the one sweep's figures."""

    def __init__(self, store: Any):
        self.store = store

    def collect(self):
        try:
            asks, gave_up = self.store.redelivery_counts()
        except Exception:  # noqa: BLE001 - a scrape never fails for this
            logging.getLogger("rsi.bot.obs").exception("metrics: redelivery counts unavailable")
            return
        c = CounterMetricFamily("rsi_redeliver_asks", "Redeliveries the sweep asked GitHub for")
        c.add_metric([], asks)
        yield c
        yield GaugeMetricFamily("rsi_redeliver_gave_up",
                                "Deliveries the sweep gave up on after its bounded asks",
                                value=gave_up)
