"""The web process: ``POST /webhook``, ``GET /healthz``, ``GET /metrics`` (with a
token, ``RSI_METRICS_TOKEN``, or from this machine only: :func:`metrics_allowed`).

The route only hands raw bytes to :func:`bot.webhook.parse` (sans I/O), claims
the delivery in the store (one transaction: delivery row + event job) and
answers 202. Everything else happens in workers (:mod:`bot.worker`), which
``create_app`` starts in the same process unless told not to.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily
from starlette.routing import Route

from bot import crash, obs, webhook
from bot.settings import Settings
from bot.store import JOB_STATES, Store

log = logging.getLogger("rsi.bot.app")


class _StoreCollector:
    """Gauges read from the database at scrape time (so every process agrees)."""

    def __init__(self, store: Store, timeout_s: float = 2.0):
        self.store = store
        self.timeout_s = timeout_s

    def collect(self):
        got: list = []

        def read() -> None:
            got.append((self.store.job_counts(), self.store.oldest_queued_age(),
                        self.store.verdict_counts()))

        reader = threading.Thread(target=read, daemon=True, name="rsi-metrics-read")
        reader.start()
        reader.join(self.timeout_s)  # a stuck store must not hang the scrape
        yield GaugeMetricFamily("rsi_store_up", "1 when the store answered this scrape in time",
                                value=1 if got else 0)
        if not got:
            log.error("metrics: the store did not answer within %.1f s", self.timeout_s)
            return
        counts, age, verdicts = got[0]
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


_PROXIED = ("forwarded", "x-forwarded-for", "x-real-ip", "x-forwarded-host")


def metrics_allowed(tokens: list[str], request: Request) -> bool:
    """``/metrics``: with tokens, a request carrying one (``Authorization: Bearer``,
    constant-time); without, only a loopback client that no proxy forwarded (a
    reverse proxy on this machine would look local: set a token behind one)."""
    if tokens:
        from bot.web import authorized

        auth = request.headers.get("authorization", "")
        bearer = auth[7:].strip() if auth.lower().startswith("bearer ") else None
        return authorized(tokens, bearer=bearer, cookie=None, query=None)
    host = request.client.host if request.client else ""
    local = host in ("127.0.0.1", "::1") or host.startswith("127.")
    return local and not any(h in request.headers for h in _PROXIED)


@dataclass
class WebState:
    """What the web process's routes share (``app.state.web``): built once by
    :func:`create_app`, read by the module-level route functions below."""

    settings: Settings
    store: Store
    registry: CollectorRegistry
    deliveries: Counter
    """``rsi_webhook_deliveries{event, outcome}``."""
    secrets: list[bytes]
    cap: int
    """The largest webhook body taken, in bytes."""
    batcher: DeliveryBatcher
    start_workers: Callable[[], Any] | None = None


def new_state(settings: Settings, store: Store,
              start_workers: Callable[[], Any] | None = None) -> WebState:
    registry = CollectorRegistry(auto_describe=True)
    deliveries = Counter("rsi_webhook_deliveries", "Webhook deliveries by outcome",
                         ["event", "outcome"], registry=registry)
    registry.register(_StoreCollector(store))
    return WebState(settings=settings, store=store, registry=registry, deliveries=deliveries,
                    secrets=[s.encode() for s in settings.webhook_secret],
                    cap=settings.max_body_bytes, batcher=DeliveryBatcher(store),
                    start_workers=start_workers)


def web_state(app: Any) -> WebState:
    state: WebState = app.state.web
    return state


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Start the workers (if any) with the app; stop them, then the delivery writer."""
    st = web_state(app)
    pool = st.start_workers() if st.start_workers else None
    app.state.pool = pool
    try:
        yield
    finally:
        if pool is not None:
            await run_in_threadpool(pool.stop)
        await run_in_threadpool(st.batcher.stop)


async def deliver(st: WebState, headers: Any, body: bytes | None) -> tuple[int, dict[str, Any]]:
    """The whole of POST /webhook, given the raw headers and body (None: too large)."""
    settings, deliveries = st.settings, st.deliveries
    if body is None:
        deliveries.labels("?", "too_large").inc()
        return 413, {"error": f"body exceeds {st.cap} bytes"}
    try:
        ev = webhook.parse(headers, body, secrets=st.secrets, max_bytes=st.cap)
    except webhook.WebhookError as e:
        deliveries.labels("?", "unauthorized" if e.status == 401 else "refused").inc()
        return e.status, {"error": e.message}
    why = webhook.admitted(ev, repos=settings.allowed_repos,
                           installations=settings.allowed_installations)
    if why is not None:
        deliveries.labels(ev.name, "not_served").inc()
        return 202, {"delivery": ev.delivery_id, "event": ev.key, "outcome": "ignored",
                     "reason": why}
    obs.bind_delivery(ev.delivery_id, ev.key)  # this request's task only (asyncio copies)
    crash.point("intake")  # tests: killed before the delivery is stored
    try:
        job_id = await asyncio.wait_for(
            st.batcher.submit(ev.delivery_id, ev.name, ev.action, ev.body),
            settings.intake_timeout_s)
        crash.point("stored")  # tests: killed after the commit, before the 202
    except asyncio.TimeoutError:
        # a stuck store (a held lock, a slow disk): answer well inside GitHub's 10 s; the
        # delivery fails on GitHub and is redelivered (bot.redeliver), or is stored late
        log.error("the store did not take delivery %s within %.1f s: answering 503",
                  ev.delivery_id, settings.intake_timeout_s)
        deliveries.labels(ev.name, "store_timeout").inc()
        return 503, {"error": "the store is busy; the delivery can be redelivered"}
    except Exception:
        log.exception("could not store delivery %s", ev.delivery_id)
        deliveries.labels(ev.name, "store_error").inc()
        # 503: GitHub shows it as failed and the delivery can be redelivered.
        return 503, {"error": "could not store the delivery"}
    outcome = "accepted" if job_id is not None else "duplicate"
    deliveries.labels(ev.name, outcome).inc()
    log.info("delivery %s", outcome, extra={"job_id": job_id})
    return 202, {"delivery": ev.delivery_id, "event": ev.key, "outcome": outcome}


class _Disconnected(Exception):
    """The client went away before its whole body arrived."""


async def read_body(headers: dict[str, str], receive: Any, cap: int) -> bytes | None:
    """The request's body, or None when it is (or says it is) larger than ``cap``."""
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        return None
    chunks, size, more = [], 0, True
    while more:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            raise _Disconnected
        chunk = msg.get("body", b"")
        size += len(chunk)
        if size > cap:
            return None
        chunks.append(chunk)
        more = msg.get("more_body", False)
    return b"".join(chunks)


class WebhookEndpoint:
    """POST /webhook as a bare ASGI app: no request object, no dependency
    injection; bytes in, bytes out (this route is the hot path)."""

    def __init__(self, st: WebState):
        self.st = st

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            body = await read_body(headers, receive, self.st.cap)
        except _Disconnected:
            return
        status, doc = await deliver(self.st, headers, body)
        payload = json.dumps(doc).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(payload)).encode())]})
        await send({"type": "http.response.body", "body": payload})


async def healthz() -> Response:
    return JSONResponse({"ok": True})


async def metrics(request: Request) -> Response:
    st = web_state(request.app)
    if not metrics_allowed(st.settings.metrics_token, request):
        return JSONResponse({"error": "/metrics needs Authorization: Bearer <RSI_METRICS_TOKEN>"
                             " (without a token it answers only this machine)"},
                            status_code=401, headers={"WWW-Authenticate": "Bearer"})
    data = await run_in_threadpool(generate_latest, st.registry)
    ops = await run_in_threadpool(generate_latest, obs.REGISTRY)  # job durations
    return Response(data + ops, media_type=CONTENT_TYPE_LATEST)


def mount_task_pages(app: FastAPI, settings: Settings, store: Store) -> None:
    """The read-only task pages (``RSI_WEB_ENABLED``; the DB only, never GitHub)."""
    from bot import web
    from bot.gh import web_root

    oauth = (web.OAuth(settings.web_oauth_client_id, settings.web_oauth_client_secret,
                       web_root(settings.github_api_url), settings.github_api_url,
                       settings.public_url or "")
             if settings.web_oauth_client_id and settings.web_oauth_client_secret else None)
    web.mount(app, store=store, tokens=settings.web_token,
              web_root=web_root(settings.github_api_url), oauth=oauth,
              secure_cookie=(settings.public_url or "").startswith("https://"))


def create_app(settings: Settings, *, store: Store | None = None,
               start_workers: Callable[[], Any] | None = None) -> FastAPI:
    """Build the web app: its state, routes and lifespan, wired.

    ``start_workers``: called at startup, returning an object with ``stop()``
    (e.g. a :class:`bot.worker.WorkerPool`); None runs no workers here.
    """
    from bot import setup_flow

    store = store or Store(settings.database_url, max_attempts=settings.max_attempts)
    st = new_state(settings, store, start_workers)
    app = FastAPI(title="rsi-bot", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.web = st
    app.state.store = store
    app.state.settings = settings
    app.state.registry = st.registry
    app.router.routes.insert(0, Route("/webhook", WebhookEndpoint(st), methods=["POST"]))
    setup_flow.mount(app, settings)  # GET /setup: a status page (the flow is `rsi setup`)
    if settings.web_enabled:
        mount_task_pages(app, settings, store)
    app.add_api_route("/healthz", healthz, methods=["GET"])
    app.add_api_route("/metrics", metrics, methods=["GET"])
    return app
