"""The web process: ``POST /webhook``, ``GET /healthz``, ``GET /metrics``.

The route only hands raw bytes to :func:`bot.webhook.parse` (sans I/O), claims
the delivery in the store (one transaction: delivery row + event job) and
answers 202. Everything else happens in workers (:mod:`bot.worker`), which
``create_app`` starts in the same process unless told not to.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily

from bot import webhook
from bot.settings import Settings
from bot.store import JOB_STATES, Store

log = logging.getLogger("rsi.bot.app")


class _StoreCollector:
    """Gauges read from the database at scrape time (so every process agrees)."""

    def __init__(self, store: Store):
        self.store = store

    def collect(self):
        try:
            counts = self.store.job_counts()
            age = self.store.oldest_queued_age()
            verdicts = self.store.verdict_counts()
        except Exception:  # a scrape must not fail because the database blinked
            log.exception("metrics: store unavailable")
            return
        jobs = GaugeMetricFamily("rsi_jobs", "Jobs by state", labels=["state"])
        for state in JOB_STATES:
            jobs.add_metric([state], counts.get(state, 0))
        yield jobs
        yield GaugeMetricFamily("rsi_queue_age_seconds",
                                "How long the oldest due job has waited", value=age)
        v = GaugeMetricFamily("rsi_verdicts", "Candidates by verdict decision",
                              labels=["decision"])
        for decision in ("accept", "review", "reject", "inconclusive", "error"):
            v.add_metric([decision], verdicts.get(decision, 0))
        yield v


class DeliveryBatcher:
    """Group commit: concurrent deliveries are stored by one writer thread in one
    transaction, and each is answered only once its transaction committed."""

    def __init__(self, store: Store, max_batch: int = 256):
        self.store = store
        self.max_batch = max_batch
        self.q: queue.SimpleQueue = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    async def submit(self, delivery_id: str, event: str, action: str | None,
                     body: str) -> int | None:
        with self.lock:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, daemon=True,
                                               name="rsi-delivery-writer")
                self.thread.start()
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.q.put(((delivery_id, event, action, body), fut, loop))
        return await fut

    def stop(self) -> None:
        if self.thread is not None:
            self.q.put(None)
            self.thread.join(10)

    def _run(self) -> None:
        while True:
            first = self.q.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < self.max_batch:
                try:
                    nxt = self.q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self.q.put(None)
                    break
                batch.append(nxt)
            try:
                results = self.store.record_deliveries([item for item, _, _ in batch])
            except Exception as exc:  # every waiter gets the error (-> 503)
                log.exception("storing %d deliveries failed", len(batch))
                for _, fut, loop in batch:
                    loop.call_soon_threadsafe(_settle, fut, None, exc)
                continue
            for (_, fut, loop), result in zip(batch, results, strict=True):
                loop.call_soon_threadsafe(_settle, fut, result, None)


def _settle(fut: asyncio.Future, result: Any, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)


async def _read_capped(request: Request, cap: int) -> bytes | None:
    """The raw body, or None as soon as it exceeds ``cap`` bytes."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > cap:
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(settings: Settings, *, store: Store | None = None,
               start_workers: Callable[[], Any] | None = None) -> FastAPI:
    """Build the web app.

    ``start_workers``: called at startup, returning an object with ``stop()``
    (e.g. a :class:`bot.worker.WorkerPool`); None runs no workers here.
    """
    store = store or Store(settings.database_url, max_attempts=settings.max_attempts)
    registry = CollectorRegistry(auto_describe=True)
    deliveries = Counter("rsi_webhook_deliveries", "Webhook deliveries by outcome",
                         ["event", "outcome"], registry=registry)
    registry.register(_StoreCollector(store))
    secrets = [s.encode() for s in settings.webhook_secret]
    cap = settings.max_body_bytes
    batcher = DeliveryBatcher(store)

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        pool = start_workers() if start_workers else None
        app.state.pool = pool
        try:
            yield
        finally:
            if pool is not None:
                await run_in_threadpool(pool.stop)
            await run_in_threadpool(batcher.stop)

    app = FastAPI(title="rsi-bot", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.store = store
    app.state.settings = settings
    app.state.registry = registry

    @app.post("/webhook")
    async def receive(request: Request) -> Response:
        body = await _read_capped(request, cap)
        if body is None:
            deliveries.labels("?", "too_large").inc()
            return JSONResponse({"error": f"body exceeds {cap} bytes"}, status_code=413)
        try:
            ev = webhook.parse(request.headers, body, secrets=secrets, max_bytes=cap)
        except webhook.WebhookError as e:
            deliveries.labels("?", "unauthorized" if e.status == 401 else "refused").inc()
            return JSONResponse({"error": e.message}, status_code=e.status)
        try:
            job_id = await batcher.submit(ev.delivery_id, ev.name, ev.action, ev.body)
        except Exception:
            log.exception("could not store delivery %s", ev.delivery_id)
            deliveries.labels(ev.name, "store_error").inc()
            # 503: GitHub shows it as failed and the delivery can be redelivered.
            return JSONResponse({"error": "could not store the delivery"}, status_code=503)
        outcome = "accepted" if job_id is not None else "duplicate"
        deliveries.labels(ev.name, outcome).inc()
        return JSONResponse({"delivery": ev.delivery_id, "event": ev.key, "outcome": outcome},
                            status_code=202)

    @app.get("/healthz")
    async def healthz() -> Response:
        return JSONResponse({"ok": True})

    @app.get("/metrics")
    async def metrics() -> Response:
        data = await run_in_threadpool(generate_latest, registry)
        return Response(data, media_type=CONTENT_TYPE_LATEST)

    return app
