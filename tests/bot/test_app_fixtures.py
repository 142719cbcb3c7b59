"""Every recorded GitHub payload, posted over real HTTP to a running server."""

from __future__ import annotations

import json
import uuid

import httpx

from bot.app import create_app
from bot.context import Context
from bot.service import job_handler
from bot.store import Store
from bot.worker import Worker
from tests.bot._support import OLD_SECRET, fixture_files, post_event, signed_headers


class NoGitHub:
    """Recorded payloads are about repos we do not serve: any GitHub call is a bug here."""

    def __getattr__(self, name):
        raise AssertionError(f"unexpected GitHub call: {name}")


def _event_name(path) -> str:
    return path.parent.name


def test_every_payload_is_acknowledged_and_handled(bot_settings, live_app):
    settings = bot_settings(onboarding=False)  # the recorded repos are not ours to onboard
    store = Store(settings.database_url)
    files = fixture_files()
    assert len(files) > 250
    with live_app(create_app(settings, store=store)) as server, httpx.Client(timeout=30) as c:
        for i, path in enumerate(files):
            body = path.read_bytes()
            event = _event_name(path)
            # refused first: a bad, missing or sha1-only signature is a 401, and stores nothing
            forged = [dict(secret="not-our-secret"), dict(secret=None), dict(sha1=True)]
            r = post_event(server.url, event, body, client=c, **forged[i % 3])
            assert r.status_code == 401, (path, r.status_code)
            r = post_event(server.url, event, body, client=c)
            assert r.status_code == 202, (path, r.status_code, r.text)
    assert store.count_deliveries() == len(files)
    # ... and every one goes through the handlers without an error
    ctx = Context(settings=settings, store=store, gh=NoGitHub(), harness=None)
    worker = Worker(store, job_handler(ctx), poll_s=0.01)
    while worker.run_once():
        pass
    counts = store.job_counts()
    failed = [(j.payload, j.last_error) for j in store.jobs(state="failed")]
    queued = [(j.payload, j.last_error) for j in store.jobs(state="queued")]
    assert not failed and not queued, (failed or queued)[:3]
    assert counts["done"] == len(files)
    results = {store.delivery(j.payload["delivery_id"]).event + "." + str(
        store.delivery(j.payload["delivery_id"]).action): j.result for j in store.jobs()}
    assert results["issues.labeled"].startswith("ignored")  # label "bug", not "rsi"
    assert results["issue_comment.created"].startswith("ignored")
    assert results["installation.created"].startswith("installation")


def test_signatures_over_http(bot_settings, live_app):
    settings = bot_settings()
    store = Store(settings.database_url)
    body = json.dumps({"zen": "Keep it logically awesome.", "hook_id": 1}).encode()
    with live_app(create_app(settings, store=store)) as server, httpx.Client(timeout=30) as c:
        url = f"{server.url}/webhook"
        assert post_event(server.url, "ping", body, client=c).status_code == 202
        body2 = body.replace(b'"hook_id": 1', b'"hook_id": 2')
        assert post_event(server.url, "ping", body2, secret=OLD_SECRET, client=c).status_code == 202
        assert post_event(server.url, "ping", body, secret="wrong-secret", client=c).status_code == 401
        assert post_event(server.url, "ping", body, secret=None, client=c).status_code == 401
        assert post_event(server.url, "ping", body, sha1=True, client=c).status_code == 401
        h = signed_headers("ping", body)
        assert c.post(url, content=body + b" ", headers=h).status_code == 401
        bad = b"{not json"
        assert c.post(url, content=bad, headers=signed_headers("ping", bad)).status_code == 400
        assert c.get(f"{server.url}/healthz").json() == {"ok": True}
    assert store.count_deliveries() == 2


def test_size_cap_is_413(bot_settings, live_app):
    settings = bot_settings(max_body_bytes=1000)
    body = json.dumps({"pad": "x" * 2000}).encode()
    with live_app(create_app(settings, store=Store(settings.database_url))) as server:
        assert post_event(server.url, "ping", body).status_code == 413
        # chunked, without a Content-Length: still capped
        h = signed_headers("ping", body)
        r = httpx.post(f"{server.url}/webhook", content=iter([body[:600], body[600:]]), headers=h)
        assert r.status_code == 413


def test_redelivery_is_processed_once(bot_settings, live_app):
    settings = bot_settings()
    store = Store(settings.database_url)
    body = json.dumps({"zen": "z", "hook_id": 2}).encode()
    delivery = str(uuid.uuid4())
    with live_app(create_app(settings, store=store)) as server, httpx.Client(timeout=30) as c:
        outcomes = [post_event(server.url, "ping", body, delivery=delivery, client=c).json()
                    ["outcome"] for _ in range(3)]
    assert outcomes == ["accepted", "duplicate", "duplicate"]
    seen = []
    worker = Worker(store, lambda run: seen.append(run.payload["delivery_id"]), poll_s=0.01)
    while worker.run_once():
        pass
    assert seen == [delivery]


def test_metrics(bot_settings, live_app):
    settings = bot_settings()
    store = Store(settings.database_url)
    with live_app(create_app(settings, store=store)) as server:
        post_event(server.url, "ping", b'{"zen": "z"}')
        post_event(server.url, "ping", b'{"zen": "z"}', secret="nope-nope")
        text = httpx.get(f"{server.url}/metrics").text
    assert 'rsi_webhook_deliveries_total{event="ping",outcome="accepted"} 1.0' in text
    assert 'outcome="unauthorized"' in text
    assert 'rsi_jobs{state="queued"} 1.0' in text
    assert "rsi_queue_age_seconds" in text
    assert 'rsi_verdicts{decision="accept"} 0.0' in text
