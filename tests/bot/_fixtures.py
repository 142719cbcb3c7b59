"""The bot's own fixtures (re-exported by conftest.py): settings, store, a
live service on a random loopback port, and a fake harness."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from bot.settings import Settings, load_settings
from bot.store import Store
from tests.bot._support import OLD_SECRET, SECRET, LiveServer


@pytest.fixture
def bot_settings(tmp_path: Path) -> Callable[..., Settings]:
    """``bot_settings(**overrides)``: valid settings over a fresh SQLite file."""

    def make(**overrides: Any) -> Settings:
        env = {
            "RSI_WEBHOOK_SECRET": f"{SECRET},{OLD_SECRET}",
            "RSI_GITHUB_TOKEN": "unused-token",
            "RSI_DATABASE_URL": f"sqlite:///{tmp_path}/bot.db",
            "RSI_STATE_DIR": str(tmp_path / "state"),
            "RSI_BOT_LOGIN": "rsi-bot[bot]",
            "RSI_WORKERS": "0",
            "RSI_POLL_S": "0.05",
            "RSI_BACKOFF_BASE_S": "0.05",
            "RSI_BACKOFF_MAX_S": "0.2",
        }
        return load_settings(env, **overrides)

    return make


@pytest.fixture
def bot_store(bot_settings) -> Iterator[Store]:
    store = Store(bot_settings().database_url)
    yield store
    store.close()


@pytest.fixture
def live_app() -> Callable[[Any], LiveServer]:
    """``with live_app(app) as server:`` -> uvicorn on 127.0.0.1:<random>, ``server.url``."""
    return LiveServer


class BotDriver:
    """The bot's handlers and jobs over a store, driven synchronously: ``deliver``
    stores a webhook event as the front door would and runs the queue dry."""

    def __init__(self, ctx):
        from bot.service import job_handler
        from bot.worker import Worker

        self.ctx = ctx
        self.store = ctx.store
        self.worker = Worker(ctx.store, job_handler(ctx), owner="test-worker", lease_s=30,
                             poll_s=0.01, backoff_base_s=0.01, backoff_max_s=0.05)
        self._n = 0

    def deliver(self, wev, *, drain: bool = True) -> str:
        import uuid

        delivery = str(uuid.uuid4())
        self.store.record_delivery(delivery, wev.event, wev.payload.get("action"), wev.payload)
        if drain:
            self.drain()
        return delivery

    def drain(self, max_jobs: int = 200) -> int:
        import time

        done = 0
        idle_since = None
        while done < max_jobs:
            if self.worker.run_once():
                done += 1
                idle_since = None
                continue
            # retries with backoff: wait for them to come due
            if not self.store.jobs(state="queued"):
                break
            idle_since = idle_since or time.time()
            if time.time() - idle_since > 5:
                break
            time.sleep(0.02)
        return done

    def result_of(self, delivery: str):
        for j in self.store.jobs(kind="event"):
            if j.payload.get("delivery_id") == delivery:
                return j.result
        return None


@pytest.fixture
def make_bot(bot_settings, fake_github, gh):
    """``make_bot(harness, **settings)`` -> BotDriver wired to the fake GitHub."""
    from bot.context import Context

    def make(harness, **overrides) -> BotDriver:
        overrides.setdefault("bot_login", None)
        settings = bot_settings(github_api_url=fake_github.url, **overrides)
        ctx = Context(settings=settings, gh=gh, harness=harness,
                      store=Store(settings.database_url, max_attempts=settings.max_attempts))
        return BotDriver(ctx)

    return make
