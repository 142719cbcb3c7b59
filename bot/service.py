"""Composition root: settings -> store, GitHub port, harness, executor, workers, app.

The only place that turns settings into live objects (docs/architecture.md, habit 3); tests
call the same functions with fakes in place of the port or the harness.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from bot import obs
from bot.app import create_app
from bot.context import Context
from bot.executors import Executor, make_executor
from bot.gh import GitHubPort, PyGithubPort
from bot.harness_port import HarnessPort, RealHarness
from bot.settings import Settings
from bot.store import Store
from bot.tasks import claimed
from bot.vocab import JobKind, TaskState
from bot.worker import Handler, JobRun, WorkerPool

log = logging.getLogger("rsi.bot")


def build_port(settings: Settings) -> GitHubPort:
    kw: dict[str, Any] = {"base_url": settings.github_api_url,
                          "throttle": settings.github_throttle}
    if settings.uses_app:  # settings refuse an App without its id and key
        return PyGithubPort.from_app(settings.github_app_id or "", settings.github_private_key or "",
                                     installation_id=settings.github_installation_id, **kw)
    return PyGithubPort.from_token(settings.github_token or "", **kw)


def build_context(settings: Settings, *, store: Store | None = None,
                  gh: GitHubPort | None = None, harness: HarnessPort | None = None) -> Context:
    from bot import handlers

    store = store or Store(settings.database_url, max_attempts=settings.max_attempts)
    return Context(settings=settings, store=store, gh=gh or build_port(settings),
                   harness=harness or RealHarness(), route=handlers.route)


def job_handler(ctx: Context, executor: Executor | None = None) -> Handler:
    """What a worker does with each job kind (:data:`bot.tasks.JOBS`): heavy jobs
    through the executor, the others here."""
    from bot import handlers

    executor = executor or make_executor(ctx.settings.executor)
    if ctx.route is None:  # a Context built by hand (tests): events go to the handlers
        ctx.route = handlers.route

    def handle(run: JobRun) -> Any:
        with obs.job_context(run.job):  # ids on every log line, duration histogram
            job = claimed(run)  # unknown kind, or a payload that does not fit: Permanent
            return executor.run(ctx, run) if job.heavy else job.run(ctx, run)

    return handle


def job_failed(ctx: Context):
    """When a task's job gives up: say so on the issue (infrastructure, not a verdict)."""

    def report(job: Any, error: str) -> None:
        task_id = job.payload.get("task_id") if isinstance(job.payload, dict) else None
        if not isinstance(task_id, int) or isinstance(task_id, bool):
            return  # an event, or a payload that did not fit (its error is the job's)
        from bot import render
        from bot.status import refresh_status

        last = (error.strip().splitlines() or ["unknown error"])[-1][:300]
        if job.kind in (JobKind.RUN_TASK, JobKind.REBASELINE):
            ctx.store.update_task(task_id, state=TaskState.FAILED)
        refresh_status(ctx, task_id, note=(
            f"⚠️ The `{job.kind}` job failed after {job.attempts} attempt(s): "
            f"{render.inert(last, one_line=True)}. This is "
            "an infrastructure problem, not a verdict on any change; `/rsi resume` or "
            "`/rsi rerun` tries again."))

    return report


def make_pool(ctx: Context, n: int | None = None, *, executor: Executor | None = None,
              kinds: list[str] | None = None) -> WorkerPool:
    s = ctx.settings
    return WorkerPool(ctx.store, job_handler(ctx, executor), s.workers if n is None else n,
                      lease_s=s.lease_s, poll_s=s.poll_s, backoff_base_s=s.backoff_base_s,
                      backoff_max_s=s.backoff_max_s, kinds=kinds, on_failed=job_failed(ctx))


def create_service(settings: Settings, *, ctx: Context | None = None, workers: int | None = None):
    """The web app with its worker pool (``settings.workers`` threads) started at startup."""
    ctx = ctx or build_context(settings)
    n = settings.workers if workers is None else workers
    sweep = settings.redeliver_interval_s > 0 and settings.uses_app

    def start() -> _Started:
        from bot.redeliver import Redeliverer

        parts: list[Any] = [make_pool(ctx, n).start()] if n > 0 else []
        if sweep:  # no delivery left behind: at start, then on a schedule
            parts.append(Redeliverer(ctx.gh, ctx.store, lookback_s=settings.redeliver_lookback_s,
                                     interval_s=settings.redeliver_interval_s).start())
        return _Started(parts)

    app = create_app(settings, store=ctx.store, start_workers=start if n > 0 or sweep else None)
    app.state.ctx = ctx
    app.state.registry.register(obs.GitHubRateCollector(ctx.gh))
    app.state.registry.register(obs.RedeliveryCollector(ctx.store))
    return app


class _Started:
    """What the service started (worker pool, redelivery sweep): stopped together."""

    def __init__(self, parts: list[Any]):
        self.parts = parts

    def stop(self) -> None:
        for p in self.parts:
            p.stop()


def app_from_env():
    """uvicorn factory for ``rsi serve --processes N`` (each process builds its own).
    The death signal was set at the worker's first instruction (``bot.serve_entry``);
    here the parent-pid watch is added (for systems without ``PR_SET_PDEATHSIG``)."""
    from bot.settings import load_settings

    settings = load_settings()
    obs.configure_logging(settings.log_format)  # each uvicorn process configures its own
    master = os.environ.pop("RSI_MASTER_WATCH", "")  # set by bot.serve_entry in a worker
    if master.isdigit():
        die_with_master(int(master))
    return create_service(settings)


def die_with_master(master: int, *, poll_s: float = 0.5) -> None:
    """A web worker of ``rsi serve --processes N`` ends when its master does, even
    when the master was killed with SIGKILL (no chance to stop its children):
    ``PR_SET_PDEATHSIG`` on Linux, and a parent-pid watch everywhere (the master
    may also have died before this ran). Otherwise orphans keep serving and hold
    the port, and a restart fails with "address in use"."""
    import signal
    import threading

    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG (Linux; else no-op)
    except (OSError, AttributeError):
        pass

    def watch() -> None:
        while True:
            if os.getppid() != master:
                log.error("the master process %s is gone: this web worker exits", master)
                os._exit(1)
            time.sleep(poll_s)

    if os.getppid() != master:
        os._exit(1)
    threading.Thread(target=watch, daemon=True, name="rsi-master-watch").start()
