"""Helpers for the bot's tests: a live uvicorn server, signed webhook posts,
the recorded payloads. Fixtures built on them live in ``conftest.py``."""

from __future__ import annotations

import copy
import json
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from bot.webhook import sign

SECRET = "test-webhook-secret-1"
OLD_SECRET = "test-webhook-secret-0"
FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "github-webhooks"


def fixture_files() -> list[Path]:
    root = FIXTURES if FIXTURES.is_dir() else (
        Path(__file__).resolve().parents[1] / "fixtures" / "github-webhooks")
    return sorted(p for p in root.rglob("*.json") if p.is_file())


def load_payload(event: str, name: str = "payload") -> dict:
    """A copy of a recorded payload, e.g. ``load_payload("issues", "labeled")``."""
    root = fixture_files()[0].parents[1]
    path = root / event / f"{name}.payload.json"
    return copy.deepcopy(json.loads(path.read_text()))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """uvicorn serving ``app`` on a random loopback port, in a thread."""

    def __init__(self, app, *, port: int | None = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on",
            access_log=False))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "LiveServer":
        self.thread.start()
        deadline = time.time() + 20
        while not self.server.started:
            if time.time() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(20)


def signed_headers(event: str, body: bytes, *, secret: str | None = SECRET,
                   delivery: str | None = None, sha1: bool = False) -> dict[str, str]:
    headers = {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/test",
    }
    if sha1:
        import hashlib
        import hmac

        headers["X-Hub-Signature"] = "sha1=" + hmac.new(
            (secret or SECRET).encode(), body, hashlib.sha1).hexdigest()
    elif secret is not None:
        headers["X-Hub-Signature-256"] = sign(body, secret)
    return headers


def post_event(base_url: str, event: str, payload: Any, *, secret: str | None = SECRET,
               delivery: str | None = None, client: httpx.Client | None = None,
               **kw) -> httpx.Response:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    headers = signed_headers(event, body, secret=secret, delivery=delivery, **kw)
    if client is not None:
        return client.post(f"{base_url}/webhook", content=body, headers=headers)
    return httpx.post(f"{base_url}/webhook", content=body, headers=headers, timeout=30)


def wait_until(pred, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.time() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def stored_candidates(*cands: dict[str, Any]) -> list[Any]:
    """Real ``bot.store.Candidate`` rows, as the store returns them, from keyword
    sets of ``Store.upsert_candidate`` (``n`` required; a ``verdict`` is a real
    ``Verdict``, stored as the bot stores it). One in-memory SQLite store."""
    from bot.store import Store, stored_verdict

    store = Store("sqlite://")
    task = store.start_task("o/r", 1, labeler="alice", installation_id=None)
    for c in cands:
        fields = dict(c)
        n = fields.pop("n")
        if "verdict" in fields:
            fields["verdict"] = stored_verdict(fields["verdict"])
        store.upsert_candidate(task.id, n, **fields)
    return store.candidates(task.id)
