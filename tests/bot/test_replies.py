"""Idempotent replies (issue 23): a job that runs again (a retry after a 5xx on a
later call, or a re-run after a kill) writes its replies once."""

from __future__ import annotations

import re

import pytest

from bot import render
from bot.replies import reply_kind
from tests.bot.fakeharness import FakeHarness

BOT = "rsi-bot[bot]"


def ours(fake, repo, n):
    return [c for c in fake.comments(repo, n) if c.user.login == BOT]


def test_a_retry_after_a_5xx_on_the_reaction_replies_once(make_bot, fake_github, fake_repo):
    bot = make_bot(FakeHarness())
    fake_github.set_role(fake_repo, "alice", "write")
    n = fake_github.open_issue(fake_repo, "Faster", "x", by="alice")
    fake_github.fail_next("POST", re.compile(r".*/issues/comments/\d+/reactions$"), status=502)
    wev = fake_github.comment(fake_repo, n, "/rsi help\n/rsi budget x", by="alice")
    bot.deliver(wev)
    (job,) = bot.store.jobs(kind="event")
    assert job.state == "done" and job.attempts == 2  # the 502, then the retry
    replies = ours(fake_github, fake_repo, n)
    assert len(replies) == 2  # the help text and the refused budget, each once
    assert "whole number" in replies[1].body
    (cmd,) = [c for c in fake_github.comments(fake_repo, n) if c.user.login == "alice"]
    assert [r.content for r in cmd.reactions] == ["confused"]


def test_a_refusal_retried_is_posted_once(make_bot, fake_github, fake_repo):
    bot = make_bot(FakeHarness())
    fake_github.add_user("mallory")
    n = fake_github.open_issue(fake_repo, "Faster", "x", by="mallory")
    fake_github.fail_next("POST", re.compile(r".*/issues/comments/\d+/reactions$"), status=503)
    bot.deliver(fake_github.comment(fake_repo, n, "/rsi stop", by="mallory"))
    (reply,) = ours(fake_github, fake_repo, n)
    assert "write, maintain or admin" in reply.body


def test_a_pasted_marker_is_not_ours(make_bot, fake_github, fake_repo):
    """Anyone can paste a marker: only a comment our login wrote is reused."""
    bot = make_bot(FakeHarness())
    fake_github.set_role(fake_repo, "alice", "write")
    n = fake_github.open_issue(fake_repo, "Faster", "x", by="alice")
    wev = fake_github.comment(fake_repo, n, "/rsi help", by="alice")
    fake_github.comment(fake_repo, n, render.marker(reply_kind("d-1", "cmd1")), by="alice")
    bot.store.record_delivery("d-1", wev.event, "created", wev.payload)
    bot.drain()
    (reply,) = ours(fake_github, fake_repo, n)
    assert "/rsi" in reply.body


def test_reply_kinds_stay_inside_the_marker():
    assert reply_kind("8c78f120-8b27-42df-974e-72eff0afcff8", "cmd1") == \
        "reply:8c78f120-8b27-42df-974e-72eff0afcff8:cmd1"
    odd = reply_kind("x --> <script>", "refusal")
    assert re.fullmatch(r"reply:h[0-9a-f]{32}:refusal", odd)
    render.marker(odd)  # a valid marker
    with pytest.raises(ValueError):
        reply_kind("d", "no spaces")
