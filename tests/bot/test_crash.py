"""Crash test (issue 23): the service is killed with SIGKILL, its whole process
group, at chosen points between GitHub acting and the bot recording it, and
restarted; every effect on GitHub must happen exactly once and every delivery
be processed once.

The bot runs as ``rsi serve`` in its own process group, against the fake GitHub
over real HTTP (deliveries sent by the fake, as GitHub sends them, to the bot's
``POST /webhook``). Kill points are deterministic: ``RSI_CRASH_AT=<point>`` makes
the bot SIGKILL its own process group when the code reaches that point
(:mod:`bot.crash`), so nothing here depends on timing. The restart runs without
it: the killed job's lease runs out and it is claimed again, and the redelivery
sweep asks GitHub for what was never stored.

``RSI_CRASH_REPORT=<file>`` appends one JSON line per scenario (the closing
note's table).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from bot.store import Store
from tests.bot._support import free_port, wait_until
from tests.bot.fakeharness import target_tree
from tests.bot.test_actions import CALLER  # the target repo's job workflow, as in the actions tests

pytestmark = pytest.mark.slow

SECRET = "crash-test-webhook-secret"
BOT = "rsi-bot[bot]"


class BotProcess:
    """``rsi serve`` in its own process group (killed as a group, as a crash would)."""

    def __init__(self, env: dict[str, str], port: int, log: Path, processes: int = 1):
        self.env, self.port, self.log, self.processes = env, port, log, processes
        self.crash_file = log.with_suffix(".crash")
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None
        self.kills = 0
        self.starts = 0

    def arm(self, point: str) -> None:
        """The next time the running bot reaches ``point``, it kills its process group."""
        self.crash_file.write_text(point)

    def start(self) -> "BotProcess":
        env = dict(os.environ, **self.env)
        env.pop("RSI_CRASH_AT", None)
        self.crash_file.write_text("")
        env["RSI_CRASH_FILE"] = str(self.crash_file)
        cmd = [sys.executable, "-m", "bot.cli", "serve", "--port", str(self.port)]
        if self.processes > 1:
            cmd += ["--processes", str(self.processes)]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self.starts += 1
        wait_until(self._up, timeout=60, what=f"rsi serve on {self.port} ({self.log})")
        return self

    def _up(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"rsi serve exited {self.proc.returncode}: "
                                 + self.log.read_text()[-3000:])
        try:
            return httpx.get(self.url + "/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_dead(self, timeout: float = 30) -> None:
        """The process group killed itself at the crash point."""
        self.proc.wait(timeout)
        assert self.proc.returncode == -signal.SIGKILL, self.log.read_text()[-3000:]
        self.kills += 1

    def stop(self) -> None:
        """SIGKILL the whole group (orphaned children included, whether or not the
        master is still there)."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(30)


@pytest.fixture
def target(make_repo, fake_github, tmp_path):
    tree = target_tree(tmp_path / "seed")
    (tree / ".github" / "workflows").mkdir(parents=True)
    (tree / ".github" / "workflows" / "rsi-job.yml").write_text(CALLER)
    repo = make_repo(tree)
    fake_github.set_role(repo, "alice", "write")
    return repo


@pytest.fixture
def bot(fake_github, github_app_env, tmp_path):
    port = free_port()
    env = {
        **github_app_env,
        "RSI_WEBHOOK_SECRET": SECRET,
        "RSI_DATABASE_URL": f"sqlite:///{tmp_path}/bot.db",
        "RSI_STATE_DIR": str(tmp_path / "state"),
        "RSI_EXECUTOR": "actions",
        "RSI_WORKERS": "1",
        "RSI_LEASE_S": "1",  # a killed job is claimed again a second after the restart
        "RSI_POLL_S": "0.05",
        "RSI_BACKOFF_BASE_S": "0.05",
        "RSI_BACKOFF_MAX_S": "0.2",
        "RSI_GITHUB_THROTTLE": "false",
        "RSI_REDELIVER_INTERVAL_S": "1",
        "RSI_LOG_FORMAT": "json",
    }
    fake_github.set_webhook(f"http://127.0.0.1:{port}/webhook", SECRET)
    b = BotProcess(env, port, tmp_path / "bot.log")
    yield b
    b.stop()


def store_of(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path}/bot.db", create=False)


def jobs_settled(store: Store) -> bool:
    return not store.jobs(state="queued") and not store.jobs(state="running")


def report(row: dict) -> None:
    path = os.environ.get("RSI_CRASH_REPORT")
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps(row) + "\n")


def ours(comments) -> list:
    return [c for c in comments if c.user.login == BOT]


def processed_once(store: Store, guids: list[str]) -> None:
    """Each delivery stored once, its event job run to done once."""
    events = [j for j in store.jobs(kind="event")]
    for g in guids:
        assert store.delivery(g) is not None, f"delivery {g} lost"
        mine = [j for j in events if j.payload.get("delivery_id") == g]
        assert len(mine) == 1 and mine[0].state == "done", [(j.state, j.last_error)
                                                            for j in mine]


# ------------------------------------------------------------------ checks, dispatches


@pytest.mark.parametrize("point", ["check_created", "dispatched"])
def test_label_check_and_dispatch_once(point, bot, fake_github, target, tmp_path):
    """The trigger label: one ``rsi/verifier`` check and one Actions run, killed
    after GitHub created the check (not yet recorded) or took the dispatch (its
    run id not yet recorded); `/rsi stop` then cancels that one run."""
    n = fake_github.open_issue(target, "Faster", "x", by="alice")
    bot.start().arm(point)
    sent = fake_github.send(fake_github.label_issue(target, n, "rsi", by="alice"))
    assert sent.status_code == 202
    bot.wait_dead()
    killed = time.time()
    bot.start()
    store = store_of(tmp_path)
    wait_until(lambda: jobs_settled(store) and any(d.run_id for d in store.dispatches_of(1)),
               timeout=60,
               what="the run_task job dispatched and recorded after the restart")
    recovered = time.time() - killed
    runs = fake_github.workflow_runs(target)
    checks = fake_github.check_runs(target, name="rsi/verifier")
    report({"scenario": f"label, killed at {point}", "kills": bot.kills, "deliveries": 1,
            "jobs": len(store.jobs()), "lost": int(not store.delivery(sent.guid)),
            "duplicated": max(0, len(runs) - 1) + max(0, len(checks) - 1),
            "recovery_s": round(recovered, 2)})
    assert len(runs) == 1, runs
    assert len(checks) == 1, [(c.id, c.external_id, c.status) for c in checks]
    (d,) = store.dispatches_of(1)
    assert d.run_id == runs[0].id and d.nonce in runs[0].display_title
    assert checks[0].details_url.endswith(f"/actions/runs/{runs[0].id}")

    stop = fake_github.send(fake_github.comment(target, n, "/rsi stop", by="alice"))
    assert stop.status_code == 202
    wait_until(lambda: store.delivery(stop.guid) and jobs_settled(store), timeout=60,
               what="the stop handled")
    assert runs[0].status == "completed" and runs[0].conclusion == "cancelled"
    assert checks[0].conclusion == "cancelled"
    processed_once(store, [sent.guid, stop.guid])


# ------------------------------------------------------------------ many kills in a row


POINTS = ["intake", "stored", "reply_posted", "reacted", "handled"]


def test_a_kill_at_each_point_in_turn(bot, fake_github, target, tmp_path):
    """One `/rsi help` per kill point: the bot is killed there (its whole process
    group), restarted, and recovers before the next point is armed (so each kill
    lands where it is meant to). Then: every delivery stored and handled once,
    one reply and one reaction per command, and GitHub asked to redeliver only
    the delivery that was never stored."""
    store = store_of(tmp_path)
    bot.start()
    rows, sent, issues = [], [], []
    for point in POINTS:
        n = fake_github.open_issue(target, f"Faster at {point}", "x", by="alice")
        issues.append(n)
        bot.arm(point)
        d = fake_github.send(fake_github.comment(target, n, "/rsi help", by="alice"))
        sent.append(d)
        # killed before the answer (GitHub records a failure), or after the 202
        assert d.status_code == (0 if point in ("intake", "stored") else 202), point
        bot.wait_dead()
        killed = time.time()
        bot.start()
        wait_until(lambda n=n, d=d: store.delivery(d.guid) and jobs_settled(store)
                   and ours(fake_github.comments(target, n)), timeout=60,
                   what=f"recovery from the kill at {point}")
        rows.append((point, time.time() - killed))
    time.sleep(2.5)  # more sweeps (1 s apart) find nothing more to ask for
    fake_github.wait_redeliveries()
    seen = []
    for (point, took), n, d in zip(rows, issues, sent, strict=True):
        replies = ours(fake_github.comments(target, n))
        (cmd,) = [c for c in fake_github.comments(target, n) if c.user.login == "alice"]
        redelivered = [a for a in fake_github.hook_deliveries if a.guid == d.guid and a.redelivery]
        events = [j for j in store.jobs(kind="event") if j.payload.get("delivery_id") == d.guid]
        report({"scenario": f"/rsi help, killed at {point}", "kills": 1, "deliveries": 1,
                "lost": int(not events), "duplicated": max(0, len(replies) - 1)
                + max(0, len(cmd.reactions) - 1) + max(0, len(events) - 1),
                "redelivered": len(redelivered), "recovery_s": round(took, 2)})
        seen.append((point, replies, cmd, redelivered))
    for point, replies, cmd, redelivered in seen:
        assert len(replies) == 1 and "/rsi" in replies[0].body, point
        assert [(r.user.login, r.content) for r in cmd.reactions] == [(BOT, "+1")], point
        assert [a.status_code for a in redelivered] == ([202] if point == "intake" else []), point
    processed_once(store, [d.guid for d in sent])


# ------------------------------------------------------------------ rsi serve --processes


def test_web_workers_die_with_their_master(fake_github, github_app_env, tmp_path):
    """`rsi serve --processes 2`: SIGKILL of the master alone ends its web
    workers (they would keep serving and hold the port), and a restart on the
    same port works."""
    port = free_port()
    env = {**github_app_env, "RSI_WEBHOOK_SECRET": SECRET,
           "RSI_DATABASE_URL": f"sqlite:///{tmp_path}/bot.db",
           "RSI_STATE_DIR": str(tmp_path / "state"), "RSI_WORKERS": "0",
           "RSI_REDELIVER_INTERVAL_S": "0"}
    b = BotProcess(env, port, tmp_path / "serve.log", processes=2)
    children: list[int] = []
    try:
        b.start()
        children = _children(b.proc.pid)
        assert len(children) >= 2, children
        os.kill(b.proc.pid, signal.SIGKILL)  # the master only, not its group
        killed = time.time()
        b.proc.wait(10)
        wait_until(lambda: not any(_alive(c) for c in children), timeout=30,
                   what="the web workers to exit")
        gone = time.time() - killed
        with socket.socket() as s:  # the port is free again
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
        b.processes = 1  # the restart on the same port (one process starts faster)
        b.start()
        assert httpx.get(b.url + "/healthz", timeout=5).status_code == 200
        report({"scenario": "rsi serve --processes 2, master SIGKILLed alone", "kills": 1,
                "children": len(children), "orphans": 0, "workers_gone_s": round(gone, 2),
                "restart_to_healthy_s": round(time.time() - killed, 2)})
    finally:
        b.stop()
        for c in children:  # orphans, had they survived (this test then failed)
            try:
                os.kill(c, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True,
                         text=True).stdout
    return [int(x) for x in out.split()]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[-1][:1] != "Z"
    except FileNotFoundError:
        return False


def test_a_web_worker_has_its_death_signal_before_any_heavy_import():
    """The mechanism, in a web worker's own terms: spawn runs ``bot.serve_entry`` as
    the worker's main module first; right after it, the death signal is SIGKILL and
    nothing of the bot, uvicorn, FastAPI or SQLAlchemy is imported yet. A worker
    whose master is already gone (its parent is not the master) exits at once."""
    probe = ("import ctypes, os, runpy, sys\n"
             "runpy.run_module('bot.serve_entry', run_name='__mp_main__')\n"
             "v = ctypes.c_int()\n"
             "ctypes.CDLL(None).prctl(2, ctypes.byref(v), 0, 0, 0)\n"  # PR_GET_PDEATHSIG
             "heavy = [m for m in ('bot.service', 'bot.cli', 'uvicorn', 'fastapi', 'sqlalchemy')"
             " if m in sys.modules]\n"
             "print(v.value, heavy, os.environ.get('RSI_MASTER_PID'), "
             "os.environ.get('RSI_MASTER_WATCH') == str(os.getppid()))\n")
    env = dict(os.environ, RSI_MASTER_PID=str(os.getpid()))  # this test is its master
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["9", "[]", "None", "True"], out.stdout
    gone = dict(os.environ, RSI_MASTER_PID="1")  # its master is not its parent: gone
    out = subprocess.run([sys.executable, "-c", probe], env=gone, capture_output=True,
                         text=True, timeout=60)
    assert (out.returncode, out.stdout) == (1, ""), (out.returncode, out.stdout, out.stderr)


def test_web_workers_still_starting_die_with_their_master(fake_github, github_app_env, tmp_path):
    """`rsi serve --processes 2`, the master SIGKILLed as soon as its web workers
    exist (they are still importing, long before they could serve): they end, none
    ever answers, and the port is free."""
    port = free_port()
    env = dict(os.environ, **github_app_env, RSI_WEBHOOK_SECRET=SECRET,
               RSI_DATABASE_URL=f"sqlite:///{tmp_path}/bot.db",
               RSI_STATE_DIR=str(tmp_path / "state"), RSI_WORKERS="0",
               RSI_REDELIVER_INTERVAL_S="0")
    log = tmp_path / "serve.log"
    with log.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "bot.cli", "serve", "--port", str(port),
                                 "--processes", "2"], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    children: list[int] = []
    try:
        wait_until(lambda: len(_children(proc.pid)) >= 2, timeout=60, interval=0.01,
                   what="the web workers spawned")
        children = _children(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)  # the master only
        killed = time.time()
        proc.wait(10)
        wait_until(lambda: not any(_alive(c) for c in children), timeout=30,
                   what="the web workers to exit")
        gone = time.time() - killed
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
        report({"scenario": "rsi serve --processes 2, master SIGKILLed while workers start",
                "kills": 1, "children": len(children), "orphans": 0,
                "workers_gone_s": round(gone, 3)})
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for c in children:
            try:
                os.kill(c, signal.SIGKILL)
            except ProcessLookupError:
                pass


# ------------------------------------------------------------------ every recorded step a kill point
#
# Each job kind runs once uninterrupted (the reference), then once per kill point
# on a repository of its own: the bot (its queue drained in a forked child with
# RSI_CRASH_AT=<point>) SIGKILLs itself there, the job's lease runs out, and the
# bot runs the queue again. The final GitHub state (the fake's, read directly:
# issues and PRs with their labels and review requests, our comments by marker,
# check runs by name and external id, workflow runs) must equal the reference's:
# nothing missing, nothing doubled.

STEP_POINTS = {
    "publish": ["publish.pushed", "publish.pr_opened", "publish.review_requested",
                "publish.reported"],
    "rebaseline (conflict)": ["rebaseline.start", "rebaseline.measured", "conflict.stored",
                              "conflict.reported", "conflict.check", "watch.result",
                              "watch.finished"],
    "watch (failed: revert PR)": ["watch.result", "watch.revert_pr", "watch.label",
                                  "watch.review", "watch.comment", "watch.finished"],
    "actions ingest": ["ingest.claimed", "ingest.applied", "publish.pr_opened"],
}

_SHA = re.compile(r"\b[0-9a-f]{7,40}\b")
_MARK = re.compile(r"<!-- rsi-bot:([^>]*?) -->")


def github_state(fake, repo: str) -> Counter:
    """What GitHub shows of ``repo``, without what differs between two equal runs
    (commit ids, times, measured numbers): one entry per effect, counted."""
    r = fake.repo(repo)
    seen: Counter = Counter()
    for num, i in sorted(r.issues.items()):
        pull = None
        if i.pull is not None:
            pull = (i.pull.head_ref, i.pull.head_repo, i.pull.draft,
                    tuple(sorted(u.login for u in i.pull.requested_reviewers)))
        seen[("pr" if pull else "issue", num, i.user.login, i.state, tuple(sorted(i.labels)),
              pull)] += 1
        for c in fake.comments(repo, num):
            marks = tuple(_SHA.sub("<sha>", m) for m in _MARK.findall(c.body)) or ("(text)",)
            seen[("comment", num, c.user.login, marks)] += 1
            for rx in c.reactions:
                seen[("reaction", num, marks, rx.user.login, rx.content)] += 1
    for c in fake.check_runs(repo):
        seen[("check", c.name, _SHA.sub("<sha>", c.external_id or ""), c.status,
              c.conclusion)] += 1
    for w in fake.workflow_runs(repo):
        seen[("workflow run", w.status, w.conclusion)] += 1
    return seen


def drain_killed_at(bot, point: str, fake_github, fake_app) -> bool:
    """Run the queue in a forked child (its own process group, its own GitHub
    connections and database connections) that SIGKILLs itself at ``point``;
    True when it died there."""
    import dataclasses

    from bot.gh import PyGithubPort
    from tests.bot._fixtures import BotDriver

    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 0
        try:
            os.setpgid(0, 0)
            os.environ["RSI_CRASH_AT"] = point
            bot.ctx.store.engine.dispose(close=False)
            gh = PyGithubPort.from_app(fake_app.id, fake_app.private_key_pem,
                                       base_url=fake_github.url, throttle=False, retry=None)
            BotDriver(dataclasses.replace(bot.ctx, gh=gh)).drain()
        except BaseException:  # noqa: BLE001 - any way out but the kill is a failure
            code = 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def leases_run_out(store: Store) -> None:
    """What time does to a killed worker's jobs: their leases run out."""
    from sqlalchemy import update

    from bot.store import Job

    with store.tx() as s:
        s.execute(update(Job).where(Job.state == "running").values(lease_until=0))


def kill_table(kind: str, run_scenario, points: list[str]) -> list[dict]:
    """The reference run, then one killed run per point; a row per point."""
    reference = run_scenario("ref", None)
    rows = []
    for i, point in enumerate(points):
        got, killed, took, failed = run_scenario(f"k{i}", point)
        missing = reference[0] - got
        doubled = got - reference[0]
        rows.append({"kind": kind, "point": point, "killed": killed,
                     "missing": sum(missing.values()), "doubled": sum(doubled.values()),
                     "recovery_s": round(took, 2), "failed_jobs": failed,
                     "detail": [str(k) for k in (missing + doubled)][:6]})
    lines = [f"{'job kind':26} {'kill point':26} {'missing':>7} {'doubled':>7} {'recovery':>9}"]
    for r in rows:
        report({"scenario": f"{r['kind']}, killed at {r['point']}", "kills": int(r["killed"]),
                "lost": r["missing"], "duplicated": r["doubled"], "recovery_s": r["recovery_s"]})
        lines.append(f"{r['kind']:26} {r['point']:26} {r['missing']:7} {r['doubled']:7} "
                     f"{r['recovery_s']:8.2f}s")
    print("\n" + "\n".join(lines))
    return rows


def assert_clean(rows: list[dict]) -> None:
    for r in rows:
        assert r["killed"], f"{r['kind']}: the kill point {r['point']} was never reached"
        assert (r["missing"], r["doubled"], r["failed_jobs"]) == (0, 0, []), r


def _scenario(make_bot, make_repo, fake_github, fake_app, tmp_path, harness_of, tree_of,
              setup, **settings):
    """run(name, point) -> (GitHub state, killed, recovery seconds, failed jobs):
    a repository and a bot (store, state) of its own; ``setup`` queues the jobs."""

    def run(name: str, point: str | None):
        repo = make_repo(tree_of(tmp_path / f"seed-{name}"), f"acme/{name}")
        fake_github.set_role(repo, "alice", "write")
        bot = make_bot(harness_of(), database_url=f"sqlite:///{tmp_path}/{name}.db",
                       state_dir=str(tmp_path / f"state-{name}"), **settings)
        setup(bot, repo)
        killed, took = False, 0.0
        if point is not None:
            killed = drain_killed_at(bot, point, fake_github, fake_app)
            leases_run_out(bot.store)
        t0 = time.time()
        bot.drain()
        took = time.time() - t0
        failed = [(j.kind, (j.last_error or "")[-200:]) for j in bot.store.jobs(state="failed")]
        return github_state(fake_github, repo), killed, took, failed

    return run


def _labelled(fake_github):
    def setup(bot, repo):
        n = fake_github.open_issue(repo, "Faster", "Make it faster.", by="alice")
        bot.deliver(fake_github.label_issue(repo, n, "rsi", by="alice"), drain=False)
    return setup


def _merged_first(fake_github):
    def setup(bot, repo):
        _labelled(fake_github)(bot, repo)
        bot.drain()
        first = min(fake_github.pulls(repo), key=lambda p: p.number)
        bot.deliver(fake_github.merge_pull(repo, first.number, by="alice"), drain=False)
    return setup


def test_publish_killed_at_each_step(make_bot, make_repo, fake_github, fake_app, tmp_path):
    from tests.bot.fakeharness import FakeHarness

    run = _scenario(make_bot, make_repo, fake_github, fake_app, tmp_path, FakeHarness,
                    target_tree, _labelled(fake_github))
    assert_clean(kill_table("publish", run, STEP_POINTS["publish"]))


def test_rebaseline_conflict_killed_at_each_step(make_bot, make_repo, fake_github, fake_app,
                                                 tmp_path):
    from tests.bot.fakeharness import FakeHarness

    run = _scenario(make_bot, make_repo, fake_github, fake_app, tmp_path,
                    lambda: FakeHarness(same_file=True), target_tree, _merged_first(fake_github))
    assert_clean(kill_table("rebaseline (conflict)", run, STEP_POINTS["rebaseline (conflict)"]))


def test_failed_watch_killed_at_each_step(make_bot, make_repo, fake_github, fake_app, tmp_path,
                                          monkeypatch):
    from tests.bot.test_watch import WatchedHarness
    from tests.bot.test_watch import target_tree as watch_tree

    monkeypatch.setenv("RSI_VERIFY_MODE", "inprocess")
    run = _scenario(make_bot, make_repo, fake_github, fake_app, tmp_path,
                    lambda: WatchedHarness(faster=False), watch_tree, _merged_first(fake_github))
    assert_clean(kill_table("watch (failed: revert PR)", run,
                            STEP_POINTS["watch (failed: revert PR)"]))


def test_actions_ingest_killed_at_each_step(make_bot, make_repo, fake_github, fake_app, gh,
                                            tmp_path):
    from tests.bot.fakeharness import FakeHarness
    from tests.bot.test_actions import run_on_runner

    def tree(root: Path) -> Path:
        t = target_tree(root)
        (t / ".github" / "workflows").mkdir(parents=True)
        (t / ".github" / "workflows" / "rsi-job.yml").write_text(CALLER)
        return t

    def setup(bot, repo):
        _labelled(fake_github)(bot, repo)
        bot.drain()
        (run,) = fake_github.workflow_runs(repo)
        runner = tmp_path / f"runner-{repo.split('/')[1]}"
        runner.mkdir()
        _, done = run_on_runner(fake_github, gh, repo, run, runner, FakeHarness())
        bot.deliver(done, drain=False)

    run = _scenario(make_bot, make_repo, fake_github, fake_app, tmp_path, FakeHarness, tree,
                    setup, executor="actions")
    assert_clean(kill_table("actions ingest", run, STEP_POINTS["actions ingest"]))
