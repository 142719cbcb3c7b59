"""No delivery left behind, and fast answers under a stuck store (issue 23).

The fake GitHub sends webhooks to the bot over real HTTP and records every
attempt; the bot's sweep lists them through ``GET /app/hook/deliveries`` (App
JWT, PyGithub's requester) and asks for those it never stored through ``POST
/app/hook/deliveries/{id}/attempts``.
"""

from __future__ import annotations

import sqlite3
import time

import httpx

from bot.app import create_app
from bot.redeliver import Redeliverer
from bot.store import Store
from tests.bot._support import SECRET, LiveServer, free_port, wait_until


def test_sweep_asks_again_only_for_what_was_never_stored(bot_settings, fake_github, fake_repo,
                                                         gh):
    settings = bot_settings()
    store = Store(settings.database_url)
    port = free_port()
    fake_github.set_webhook(f"http://127.0.0.1:{port}/webhook", SECRET)
    fake_github.set_role(fake_repo, "alice", "write")
    n = fake_github.open_issue(fake_repo, "Faster", "x", by="alice")

    # the bot is down: GitHub gets no answer, and never tries again by itself
    lost = fake_github.send(fake_github.comment(fake_repo, n, "/rsi help", by="alice"))
    assert lost.status_code == 0
    with LiveServer(create_app(settings, store=store), port=port):
        ok = fake_github.send(fake_github.comment(fake_repo, n, "/rsi status", by="alice"))
        assert ok.status_code == 202
        # a delivery the bot refused (a bad signature): asking again would be refused again
        fake_github.set_webhook(f"http://127.0.0.1:{port}/webhook", "a-wrong-secret")
        refused = fake_github.send(fake_github.comment(fake_repo, n, "/rsi stop", by="alice"))
        assert refused.status_code == 401
        fake_github.set_webhook(f"http://127.0.0.1:{port}/webhook", SECRET)
        assert store.delivery(lost.guid) is None

        sweeper = Redeliverer(gh, store, lookback_s=3600, interval_s=60)
        first = sweeper.sweep()
        assert first.redelivered == [lost.guid] and first.seen == 3
        fake_github.wait_redeliveries()
        d = store.delivery(lost.guid)
        assert d is not None and d.payload["comment"]["body"] == "/rsi help"
        again = [a for a in fake_github.hook_deliveries if a.guid == lost.guid]
        assert [(a.redelivery, a.status_code) for a in again] == [(False, 0), (True, 202)]

        # a second sweep (and a second process's sweep) finds nothing more to ask for
        assert sweeper.sweep().redelivered == []
        assert Redeliverer(gh, store, lookback_s=3600).sweep().redelivered == []
    assert len([j for j in store.jobs(kind="event")]) == 2  # lost + ok, each once


def test_sweep_looks_back_only_so_far(bot_settings, fake_github, fake_repo, gh):
    settings = bot_settings()
    store = Store(settings.database_url)
    fake_github.set_webhook(f"http://127.0.0.1:{free_port()}/webhook", SECRET)
    fake_github.add_user("alice")
    n = fake_github.open_issue(fake_repo, "Faster", "x", by="alice")
    old = fake_github.send(fake_github.comment(fake_repo, n, "/rsi help", by="alice"))
    assert old.status_code == 0
    later = Redeliverer(gh, store, lookback_s=600, clock=lambda: time.time() + 601)
    assert later.sweep().seen == 0
    now = Redeliverer(gh, store, lookback_s=600)
    assert now.sweep().redelivered == [old.guid]


def test_paging_through_deliveries(fake_github, gh):
    """More attempts than one page: the sweep follows GitHub's cursor (``Link``)."""
    fake_github.set_webhook(f"http://127.0.0.1:{free_port()}/webhook", SECRET)
    from tests.fakegithub.server import WebhookEvent

    sent = [fake_github.send(WebhookEvent("ping", {"zen": str(i)})) for i in range(105)]
    got = gh.list_hook_deliveries(since=time.time() - 600)
    assert sorted(d.guid for d in got) == sorted(s.guid for s in sent)
    assert got[0].guid == sent[-1].guid  # newest first


def test_stuck_store_answers_503_inside_githubs_10_s(bot_settings, tmp_path, caplog):
    """Another process holds SQLite's write lock (its busy timeout is 30 s): the
    intake answers 503 after RSI_INTAKE_TIMEOUT_S, logs it and counts it in
    /metrics, and the delivery is stored once the lock is free."""
    settings = bot_settings(intake_timeout_s=0.5)
    store = Store(settings.database_url)
    from tests.bot._support import post_event

    holder = sqlite3.connect(settings.database_url.removeprefix("sqlite:///"),
                             isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the stuck writer
    try:
        with LiveServer(create_app(settings, store=store)) as server:
            t0 = time.time()
            r = post_event(server.url, "ping", {"zen": "stuck"}, delivery="stuck-1")
            took = time.time() - t0
            assert r.status_code == 503 and "busy" in r.json()["error"]
            assert took < 10  # GitHub's delivery timeout
            assert any("did not take delivery stuck-1" in r.getMessage() and r.levelname == "ERROR"
                       for r in caplog.records)
            metrics = httpx.get(server.url + "/metrics", timeout=30).text
            assert 'rsi_webhook_deliveries_total{event="ping",outcome="store_timeout"} 1.0' \
                in metrics
            assert "rsi_store_up 0.0" in metrics  # the scrape did not hang on the store
            holder.execute("ROLLBACK")
            wait_until(lambda: store.delivery("stuck-1") is not None, timeout=60,
                       what="the late commit")
            r2 = post_event(server.url, "ping", {"zen": "stuck"}, delivery="stuck-1")
            assert r2.status_code == 202 and r2.json()["outcome"] == "duplicate"
            assert "rsi_store_up 1.0" in httpx.get(server.url + "/metrics", timeout=30).text
    finally:
        holder.close()


def test_a_delivery_that_always_fails_is_given_up_after_bounded_asks(
        bot_settings, fake_github, fake_repo, gh):
    """Issue 30's low: the bot never answers one delivery (here: nothing listens), and
    each sweep found it failed again and asked again, every interval, without end. Now
    it is asked for ``MAX_ASKS`` times, then given up: once, said in /metrics."""
    from bot.redeliver import MAX_ASKS
    from bot.service import build_context, create_service

    settings = bot_settings(github_api_url=fake_github.url)
    store = Store(settings.database_url)
    fake_github.set_webhook(f"http://127.0.0.1:{free_port()}/webhook", SECRET)  # no one there
    fake_github.add_user("alice")
    n = fake_github.open_issue(fake_repo, "Faster", "x", by="alice")
    lost = fake_github.send(fake_github.comment(fake_repo, n, "/rsi help", by="alice"))
    assert lost.status_code == 0
    t = [time.time()]
    sweeper = Redeliverer(gh, store, lookback_s=86400, interval_s=300, clock=lambda: t[0])
    results = []
    for _ in range(MAX_ASKS + 4):  # a day's sweeps, compressed: one an interval apart
        results.append(sweeper.sweep())
        fake_github.wait_redeliveries()
        t[0] += 301
    asked = [r.redelivered for r in results]
    assert asked == [[lost.guid]] * MAX_ASKS + [[]] * 4, asked
    assert [r.gave_up for r in results] == [[]] * MAX_ASKS + [[lost.guid]] + [[]] * 3
    attempts = [a for a in fake_github.hook_deliveries if a.guid == lost.guid]
    assert [a.redelivery for a in attempts] == [False] + [True] * MAX_ASKS
    assert all(a.status_code == 0 for a in attempts)
    rec = store.redelivery(lost.guid)
    assert rec.asks == MAX_ASKS and rec.gave_up_at is not None

    ctx = build_context(settings, store=store, gh=gh)
    with LiveServer(create_service(settings, ctx=ctx, workers=0)) as server:
        metrics = httpx.get(server.url + "/metrics", timeout=30).text
    assert f"rsi_redeliver_asks_total {float(MAX_ASKS)}" in metrics, metrics
    assert "rsi_redeliver_gave_up 1.0" in metrics


def test_one_sweep_per_service_whatever_the_processes(bot_settings, fake_github, fake_repo, gh):
    """Two sweepers on one store (two web processes of ``rsi serve --processes 2``):
    only the one holding the store's lease sweeps, so a lost delivery is asked for
    once; when it stops, the other takes the lease over."""
    settings = bot_settings()
    store = Store(settings.database_url)
    fake_github.set_webhook(f"http://127.0.0.1:{free_port()}/webhook", SECRET)
    fake_github.add_user("alice")
    n = fake_github.open_issue(fake_repo, "Faster", "x", by="alice")
    lost = [fake_github.send(fake_github.comment(fake_repo, n, f"/rsi help {i}", by="alice"))
            for i in range(3)]
    a = Redeliverer(gh, store, lookback_s=3600, interval_s=0.2, owner="proc-a").start()
    b = Redeliverer(gh, store, lookback_s=3600, interval_s=0.2, owner="proc-b").start()
    try:
        wait_until(lambda: a.swept + b.swept >= 6, timeout=30, what="six sweeps")
        assert (a.swept == 0) != (b.swept == 0), (a.swept, b.swept)  # one of them only
        fake_github.wait_redeliveries()
        for d in lost:  # each asked for once (the ask is in flight for 60 s)
            assert len([x for x in fake_github.hook_deliveries
                        if x.guid == d.guid and x.redelivery]) == 1
        holder, other = (a, b) if a.swept else (b, a)
        before = other.swept
        holder.stop()  # drops the lease: the other process sweeps from now on
        wait_until(lambda: other.swept > before, timeout=30, what="the other sweeper")
    finally:
        a.stop()
        b.stop()
