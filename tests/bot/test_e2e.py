"""End to end: a running bot (uvicorn + workers), the fake GitHub, a small real
target repo, the real harness with the ``replay`` agent and the in-process
verifier. Label -> baseline -> rounds -> draft PRs with report and check run
-> /rsi rerun (writer: done; reader: refused) -> merge -> rebaseline -> the
other candidate re-verified. Then the same with the bot killed mid-run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from bot import render
from bot.context import Context
from bot.harness_port import RealHarness
from bot.service import create_service
from bot.store import Store
from tests.bot._support import SECRET, free_port, post_event, wait_until
from tests.bot.e2e_target import make_target_tree

BOT = "rsi-bot[bot]"
pytestmark = pytest.mark.slow


def ours(fake, repo, number, kind):
    return [c for c in fake.comments(repo, number)
            if c.user.login == BOT and render.marker(kind) in c.body]


def send(url, wev):
    r = post_event(url, wev.event, wev.body())
    assert r.status_code == 202, r.text
    return r


@pytest.fixture
def target(make_repo, fake_github, tmp_path):
    repo = make_repo(make_target_tree(tmp_path / "seed"))
    fake_github.set_role(repo, "alice", "write")
    fake_github.set_role(repo, "rita", "read")
    return repo


def run_flow(fake, repo, url, store, *, on_running=None):
    try:
        return _flow(fake, repo, url, store, on_running=on_running)
    except AssertionError:
        for j in store.jobs():
            print(j.id, j.kind, j.state, j.attempts, j.payload, j.result,
                  (j.last_error or "")[-1500:])
        for t in store.tasks():
            print("task", t.issue, t.state, t.rounds_done, t.budget)
            for c in store.candidates(t.id):
                print("  candidate", c.n, c.decision, c.state, c.pr_number,
                      (c.verdict or {}).get("reason"))
        raise


def _flow(fake, repo, url, store, *, on_running=None):
    n = fake.open_issue(repo, "Make the speed benchmark faster",
                        "### Idea\n\nReplay the two patches.", by="alice")
    send(url, fake.label_issue(repo, n, "rsi", by="alice"))
    if on_running is not None:
        wait_until(lambda: (t := store.find_task(repo, n)) is not None
                   and t.state in ("running", "baseline") and t.b0_sha, 120, what="baseline")
        url = on_running()
    wait_until(lambda: len(fake.pulls(repo)) == 2, 240, what="two draft PRs")
    wait_until(lambda: store.find_task(repo, n).state == "finished", 120, what="finished")
    first, second = sorted(fake.pulls(repo), key=lambda p: p.number)
    assert first.pull.head_ref == f"rsi/{n}/1" and second.pull.head_ref == f"rsi/{n}/2"
    for p in (first, second):
        wait_until(lambda p=p: ours(fake, repo, p.number, render.REPORT)
                   and fake.check_runs(repo, p.pull.head_sha, "rsi/verifier"), 60,
                   what="report and check run")
        assert p.pull.draft
        assert [u.login for u in p.pull.requested_reviewers] == ["alice"]
        (report,) = ours(fake, repo, p.number, render.REPORT)
        assert "comparing" in report.body, report.body
        checks = fake.check_runs(repo, p.pull.head_sha, "rsi/verifier")
        # accept -> success; a timing-noise "review" (suspicious gain) -> neutral
        assert [c.conclusion for c in checks] in (["success"], ["neutral"])
    assert len(ours(fake, repo, n, render.STATUS)) == 1

    # /rsi rerun by a writer: done
    before = len(fake.check_runs(repo, second.pull.head_sha, "rsi/verifier"))  # noqa
    wev = fake.comment(repo, second.number, "/rsi rerun", by="alice")
    send(url, wev)
    wait_until(lambda: len(fake.check_runs(repo, second.pull.head_sha, "rsi/verifier"))
               == before + 1, 120, what="rerun check run")
    cid = wev.payload["comment"]["id"]
    wait_until(lambda: any(c.id == cid and c.reaction_counts().get("+1") for c in
                           fake.comments(repo, second.number)), 30, what="+1 reaction")
    # ... by a reader: refused, with the reason
    send(url, fake.comment(repo, second.number, "/rsi rerun", by="rita"))
    wait_until(lambda: any("@rita" in c.body and "`read`" in c.body
                           for c in fake.comments(repo, second.number)), 30, what="refusal")

    # merge the first: rebaseline at the merge commit, the second re-verified on it
    old_head = str(second.pull.head_sha)  # (fake records are live objects)
    send(url, fake.merge_pull(repo, first.number, by="alice"))
    merge_sha = fake.pull(repo, first.number).pull.merge_commit_sha
    wait_until(lambda: store.find_task(repo, n).bk_sha == merge_sha, 120, what="rebaseline")
    new_head = wait_until(lambda: (h := fake.pull(repo, second.number).pull.head_sha)
                          != old_head and h, 120, what="rebased head")
    wait_until(lambda: fake.check_runs(repo, new_head, "rsi/verifier"), 120,
               what="check run on the rebased head")
    (report,) = ours(fake, repo, second.number, render.REPORT)
    assert f"Bk `{merge_sha[:12]}`" in report.body
    wait_until(lambda: store.find_task(repo, n).state == "finished", 60, what="idle")
    assert not store.jobs(state="failed"), [j.last_error for j in store.jobs(state="failed")]
    return n


def test_end_to_end_in_process(fake_github, gh, target, bot_settings, live_app, monkeypatch):
    monkeypatch.setenv("RSI_VERIFY_MODE", "inprocess")
    settings = bot_settings(github_api_url=fake_github.url, bot_login=None, workers=2)
    ctx = Context(settings=settings, store=Store(settings.database_url), gh=gh,
                  harness=RealHarness())
    with live_app(create_service(settings, ctx=ctx)) as server:
        run_flow(fake_github, target, server.url, ctx.store)


class BotProcess:
    """``rsi serve`` in a real subprocess, killable with SIGKILL."""

    def __init__(self, env: dict[str, str], port: int, log: Path):
        self.env, self.port, self.log = env, port, log
        self.proc: subprocess.Popen | None = None
        self.url = f"http://127.0.0.1:{port}"

    def start(self) -> "BotProcess":
        fh = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bot.service_cli", "serve", "--port", str(self.port)],
            env=self.env, stdout=fh, stderr=subprocess.STDOUT,
            cwd=str(Path(__file__).resolve().parents[2]))
        wait_until(lambda: self._up(), 60, what="bot process up")
        return self

    def _up(self) -> bool:
        assert self.proc.poll() is None, self.log.read_text()[-3000:]
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def test_end_to_end_killed_and_restarted(fake_github, fake_app, target, tmp_path):
    env = {**os.environ,
           "RSI_WEBHOOK_SECRET": SECRET,
           "RSI_GITHUB_APP_ID": str(fake_app.id),
           "RSI_GITHUB_PRIVATE_KEY": fake_app.private_key_pem,
           "RSI_GITHUB_API_URL": fake_github.url,
           "RSI_GITHUB_THROTTLE": "false",
           "RSI_DATABASE_URL": f"sqlite:///{tmp_path}/bot.db",
           "RSI_STATE_DIR": str(tmp_path / "state"),
           "RSI_WORKERS": "2",
           "RSI_LEASE_S": "3",
           "RSI_POLL_S": "0.1",
           "RSI_BACKOFF_BASE_S": "0.2",
           "RSI_BACKOFF_MAX_S": "2",
           "RSI_VERIFY_MODE": "inprocess",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    store = Store(env["RSI_DATABASE_URL"])
    bot = BotProcess(env, free_port(), tmp_path / "bot.log").start()
    restarts = []

    def kill_and_restart() -> str:
        bot.kill()  # mid-run: the baseline is measured, rounds under way
        restarts.append(store.job_counts())
        bot.proc = None
        bot.port = free_port()
        bot.url = f"http://127.0.0.1:{bot.port}"
        bot.start()
        return bot.url

    try:
        n = run_flow(fake_github, target, bot.url, store, on_running=kill_and_restart)
    finally:
        bot.stop()
    assert restarts and restarts[0]["running"] >= 1, restarts
    # nothing lost, nothing doubled
    assert len(ours(fake_github, target, n, render.STATUS)) == 1
    heads = [p.pull.head_ref for p in fake_github.pulls(target, state="all")]
    assert sorted(heads) == [f"rsi/{n}/1", f"rsi/{n}/2"]
