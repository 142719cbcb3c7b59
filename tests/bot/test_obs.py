"""Issue 12, operations: JSON log lines carrying the delivery, job and task ids;
job-duration histograms and the GitHub rate-limit gauge in /metrics."""

from __future__ import annotations

import io
import json
import logging

import httpx
import pytest
import structlog

from bot import obs
from bot.service import create_service
from tests.bot.fakeharness import FakeHarness, target_tree


@pytest.fixture
def json_logs():
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    out = io.StringIO()
    obs.configure_logging("json", stream=out)

    def lines() -> list[dict]:
        text = out.getvalue()
        assert all(x.startswith("{") for x in text.splitlines()), text[:500]  # JSON only
        return [json.loads(x) for x in text.splitlines()]

    yield lines
    root.handlers[:], _ = saved[0], root.setLevel(saved[1])
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()


def test_every_line_is_json_with_the_ids(json_logs, make_bot, make_repo, fake_github, tmp_path):
    repo = make_repo(target_tree(tmp_path / "seed"))
    fake_github.set_role(repo, "alice", "write")
    bot = make_bot(FakeHarness())
    n = fake_github.open_issue(repo, "Faster", "x", by="alice")
    delivery = bot.deliver(fake_github.label_issue(repo, n, "rsi", by="alice"))
    task = bot.store.find_task(repo, n)
    lines = json_logs()
    assert lines and all({"timestamp", "level", "event", "logger"} <= set(x) for x in lines)
    jobs = [x for x in lines if x.get("job_id") is not None]
    assert {x["job_kind"] for x in jobs} >= {"event", "run_task", "publish"}
    handled = [x for x in lines if x["event"] == "event handled"]
    assert handled and all(x["delivery_id"] == delivery and x["gh_event"] == "issues.labeled"
                           and x["task_id"] == task.id for x in handled)
    for x in jobs:
        if x["job_kind"] in ("run_task", "publish"):
            assert x["task_id"] == task.id, x
            assert "delivery_id" not in x  # the previous job's ids never leak
    ended = [x for x in jobs if x["event"] == "job ended"]
    assert ended and all(x["outcome"] == "done" and x["duration_s"] >= 0 for x in ended)


def test_metrics_job_durations_and_rate_limit(make_bot, make_repo, fake_github, tmp_path,
                                              live_app):
    repo = make_repo(target_tree(tmp_path / "seed"))
    fake_github.set_role(repo, "alice", "write")
    bot = make_bot(FakeHarness())
    n = fake_github.open_issue(repo, "Faster", "x", by="alice")
    before = obs.JOB_DURATION.labels("run_task", "done")._sum.get()
    bot.deliver(fake_github.label_issue(repo, n, "rsi", by="alice"))
    assert obs.JOB_DURATION.labels("run_task", "done")._sum.get() > before
    app = create_service(bot.ctx.settings, ctx=bot.ctx, workers=0)
    with live_app(app) as server:
        text = httpx.get(f"{server.url}/metrics").text
    assert 'rsi_job_duration_seconds_bucket{kind="run_task",le="+Inf",outcome="done"}' in text
    assert 'rsi_job_duration_seconds_count{kind="publish",outcome="done"}' in text
    remaining = next(float(x.split()[1]) for x in text.splitlines()
                     if x.startswith("rsi_github_rate_limit_remaining "))
    assert 0 < remaining < fake_github.rate_limit  # as the fake's last answer said
    assert remaining >= fake_github.rate_limit - fake_github.api_calls  # seen, not fetched
    assert "rsi_github_rate_limit_limit 5000.0" in text
