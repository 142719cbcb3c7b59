"""Issue 9: the bot acts only on what it dispatched, what a writer approved and
what the repo allows. Each attack, tried as an outsider would, against the fake
GitHub over real HTTP (PyGithub unmodified, real git)."""

from __future__ import annotations

import copy
import io
import json
import subprocess
import zipfile

import httpx
import pytest

from bot import render
from bot.app import create_app
from bot.executors.actions import import_bundle
from bot.store import Store
from harness.gitutil import git, rev_parse
from tests.bot._support import post_event, signed_headers
from tests.bot.fakeharness import FakeHarness, target_tree
from tests.bot.test_actions import CALLER, run_on_runner
from tests.fakegithub.server import WebhookEvent


@pytest.fixture
def target(make_repo, fake_github, tmp_path):
    tree = target_tree(tmp_path / "seed")
    (tree / ".github" / "workflows").mkdir(parents=True)
    (tree / ".github" / "workflows" / "rsi-job.yml").write_text(CALLER)
    repo = make_repo(tree)
    fake_github.set_role(repo, "alice", "write")
    fake_github.set_role(repo, "rita", "read")
    return repo


def results(bot) -> list[str]:
    return [j.result for j in bot.store.jobs(kind="event")]


def status_body(fake, repo, n) -> str:
    (c,) = [c for c in fake.comments(repo, n) if render.marker(render.STATUS) in c.body]
    return c.body


# ------------------------------------------------------------ 1. job results


def dispatched(make_bot, fake_github, target):
    bot = make_bot(FakeHarness(), executor="actions")
    n = fake_github.open_issue(target, "Faster", "x", by="alice")
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"))
    (run,) = fake_github.workflow_runs(target)
    return bot, n, run


def test_a_forks_run_is_not_ingested(make_bot, fake_github, gh, target, tmp_path):
    bot, n, run = dispatched(make_bot, fake_github, target)
    _result, wev = run_on_runner(fake_github, gh, target, run, tmp_path, FakeHarness())
    for mutate, why in [
        (lambda r: r.update(event="pull_request"), "triggered by 'pull_request'"),
        (lambda r: r["head_repository"].update(full_name="mallory/target"),
         "head repository 'mallory/target'"),
        (lambda r: r.update(head_branch="evil"), "ran on 'evil', not the default branch"),
        (lambda r: r["actor"].update(login="mallory"), "actor 'mallory' is not the bot"),
    ]:
        payload = copy.deepcopy(wev.payload)
        mutate(payload["workflow_run"])
        d = bot.deliver(WebhookEvent("workflow_run", payload))
        assert bot.result_of(d).startswith("ignored: not a run the bot dispatched"), why
        assert why in bot.result_of(d)
    assert fake_github.pulls(target) == []
    # only the task's live check, still queued on the base commit: nothing was judged
    assert [c.status for c in fake_github.check_runs(target)] == ["queued"]
    # the genuine run still goes through, once
    d = bot.deliver(wev)
    assert len(fake_github.pulls(target)) == 2, bot.result_of(d)


def test_a_replayed_or_forged_result_is_refused(make_bot, fake_github, gh, target, tmp_path):
    bot, n, run = dispatched(make_bot, fake_github, target)
    _result, wev = run_on_runner(fake_github, gh, target, run, tmp_path, FakeHarness())
    bot.deliver(wev)
    assert len(fake_github.pulls(target)) == 2
    artifact = fake_github.workflow_runs(target)[0].artifacts[0].data

    # the same run's event again (a new delivery, a body that differs in one byte)
    again = copy.deepcopy(wev.payload)
    again["workflow_run"]["display_title"] += " "
    d = bot.deliver(WebhookEvent("workflow_run", again))
    assert "was already ingested (a replay)" in bot.result_of(d)
    # the same result uploaded by another run (here one the bot dispatched itself)
    run_id = gh.dispatch_workflow(target, "rsi-job.yml", "main", {"job": "{}",
                                                                   "runner_labels": "[]"})
    wev2 = fake_github.complete_workflow_run(target, run_id, artifacts={"rsi-result": artifact})
    d = bot.deliver(wev2)
    assert f"the job was dispatched as run {run.id}, not {run_id}" in bot.result_of(d)

    # a forged result with a made-up nonce
    with zipfile.ZipFile(io.BytesIO(artifact)) as zf:
        files = {name: zf.read(name) for name in zf.namelist()}
    doc = json.loads(files["result.json"])
    doc["job"]["nonce"] = "0" * 32
    files["result.json"] = json.dumps(doc).encode()
    run_id = gh.dispatch_workflow(target, "rsi-job.yml", "main", {"job": "{}",
                                                                   "runner_labels": "[]"})
    d = bot.deliver(fake_github.complete_workflow_run(target, run_id,
                                                      artifacts={"rsi-result": files}))
    assert bot.result_of(d).startswith("refused: run"), bot.result_of(d)
    assert len(fake_github.pulls(target)) == 2


def test_workflow_runs_are_ignored_with_the_local_executor(make_bot, fake_github, gh, target,
                                                           tmp_path):
    bot, n, run = dispatched(make_bot, fake_github, target)
    _result, wev = run_on_runner(fake_github, gh, target, run, tmp_path, FakeHarness())
    local = make_bot(FakeHarness(), executor="local")
    d = local.deliver(wev)
    assert local.result_of(d) == "ignored: the executor is not actions"


def test_bundle_refs_must_be_expected_and_descend_from_bk(tmp_path):
    def sh(cwd, *a):
        return subprocess.run(["git", *a], cwd=cwd, check=True, capture_output=True,
                              text=True).stdout.strip()

    runner = tmp_path / "runner"
    runner.mkdir()
    sh(runner, "init", "-q", "-b", "main")
    (runner / "f").write_text("1")
    sh(runner, "add", "-A")
    sh(runner, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    base = sh(runner, "rev-parse", "HEAD")
    clone = tmp_path / "clone"
    sh(tmp_path, "clone", "-q", str(runner), str(clone))
    for branch, parent in [("rsi/7/1", base), ("rsi/8/1", base), ("rsi/7/x", base),
                           ("rsi/7/2", None)]:
        sh(runner, "checkout", "-q", "--orphan" if parent is None else "-b", branch,
           *([] if parent is None else [base]))
        (runner / "f").write_text(branch)
        sh(runner, "add", "-A")
        sh(runner, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", branch)
    sh(runner, "bundle", "create", str(tmp_path / "b.bundle"), "--branches=rsi/*")
    taken = import_bundle(clone, (tmp_path / "b.bundle").read_bytes(), "7", base)
    assert list(taken) == ["rsi/7/1"]  # rsi/8/1: another task; rsi/7/x: not a candidate;
    assert rev_parse(clone, "refs/heads/rsi/7/2") is None  # rsi/7/2: does not descend from Bk
    assert git(clone, "for-each-ref", "refs/rsi-incoming/") == ""  # quarantine emptied


# ------------------------------------------------------------ 2. what a writer approved


PROPOSAL = "### Minimum gain\n\n5%\n\n### What to try\n\nFewer copies.\n"
EDITED = "### Minimum gain\n\n5%\n\n```toml\n[verifier]\nalpha = 0.2\n```\n"


def test_an_edit_after_the_label_is_shown_not_run(make_bot, fake_github, target):
    harness = FakeHarness()
    bot = make_bot(harness)
    n = fake_github.open_issue(target, "Faster", PROPOSAL, by="alice")
    ev = fake_github.label_issue(target, n, "rsi", by="alice")
    fake_github.issue(target, n).body = EDITED  # edited before the worker got to it
    bot.deliver(ev)
    assert harness.proposals and set(harness.proposals) == {PROPOSAL}
    task = bot.store.find_task(target, n)
    assert task.proposal == PROPOSAL and task.state in ("finished", "queued", "running")

    # the edit's own event: shown, with the difference, not run
    before = len(harness.proposals)
    bot.deliver(fake_github.issue_event(target, n, "edited", by="alice",
                                        changes={"body": {"from": PROPOSAL}}))
    assert len(harness.proposals) == before
    body = status_body(fake_github, target, n)
    assert "edited after the label" in body and "/rsi rerun" in body
    assert "+alpha = 0.2" in body and "-Fewer copies." in body
    # a reader's rerun does not approve it
    bot.deliver(fake_github.comment(target, n, "/rsi rerun", by="rita"))
    assert bot.store.find_task(target, n).proposal == PROPOSAL
    # a writer's rerun runs the edit (here: refused, it loosens alpha)
    bot.deliver(fake_github.comment(target, n, "/rsi rerun", by="alice"))
    task = bot.store.find_task(target, n)
    assert task.proposal == EDITED and task.edited_proposal is None
    assert task.state == "invalid" and "alpha = 0.2 would loosen" in status_body(
        fake_github, target, n)


V1 = "### Minimum gain\n\n6%\n\n### What to try\n\nFewer copies.\n"
V2 = "### Minimum gain\n\n5%\n\n### What to try\n\nFewer copies; and add a sleep in the benchmark.\n"


def edit(fake, bot, repo, n, body, *, by="alice"):
    old = fake.issue(repo, n).body
    fake.issue(repo, n).body = body
    bot.deliver(fake.issue_event(repo, n, "edited", by=by, changes={"body": {"from": old}}))


def test_a_rerun_runs_the_edit_the_writer_saw_not_a_later_one(make_bot, fake_github, target):
    """Issue 18: the writer reads edit v1 and comments /rsi rerun; the author edits
    to v2 while the command waits (its edited event handled first). v1 runs, v2 is
    held, as any edit after an approval."""
    harness = FakeHarness()
    bot = make_bot(harness)
    n = fake_github.open_issue(target, "Faster", PROPOSAL, by="alice")
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"))
    edit(fake_github, bot, target, n, V1, by="mallory")
    shown = status_body(fake_github, target, n)
    command = fake_github.comment(target, n, "/rsi rerun", by="alice")  # the issue reads v1
    edit(fake_github, bot, target, n, V2, by="mallory")                 # while it waits
    bot.deliver(command)
    task = bot.store.find_task(target, n)
    assert task.proposal == V1 and harness.proposals[-1] == V1
    assert task.edited_proposal == V2  # held, shown, not run
    body = status_body(fake_github, target, n)
    assert "edited after the label" in body and render.proposal_digest(V2) in body
    assert f"Proposal digest `{render.proposal_digest(V1)}`" in body  # the text that runs
    assert "+Fewer copies; and add a sleep in the benchmark." in body
    assert f"/rsi rerun {render.proposal_digest(V1)}" in shown  # what the writer read


def test_a_rerun_with_a_digest_runs_that_text_or_nothing(make_bot, fake_github, target):
    harness = FakeHarness()
    bot = make_bot(harness)
    n = fake_github.open_issue(target, "Faster", PROPOSAL, by="alice")
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"))
    edit(fake_github, bot, target, n, V1, by="mallory")
    seen = render.proposal_digest(V1)  # what the writer read in the status comment
    edit(fake_github, bot, target, n, V2, by="mallory")  # before the writer commented
    runs = len(harness.proposals)
    bot.deliver(fake_github.comment(target, n, f"/rsi rerun {seen}", by="alice"))
    task = bot.store.find_task(target, n)
    assert task.proposal == PROPOSAL and task.edited_proposal == V2
    assert len(harness.proposals) == runs
    assert any("is not the digest of the proposal" in c.body
               for c in fake_github.comments(target, n))
    # the digest of the edit held now runs exactly it
    bot.deliver(fake_github.comment(target, n, f"/rsi rerun {render.proposal_digest(V2)}",
                                    by="alice"))
    task = bot.store.find_task(target, n)
    assert task.proposal == V2 and task.edited_proposal is None and harness.proposals[-1] == V2


def test_a_label_runs_its_events_body_and_a_later_edit_stays_held(make_bot, fake_github,
                                                                  target):
    """The label binds the body in its event; an edit handled before it (v2) is
    neither run nor dropped from the status comment."""
    harness = FakeHarness()
    bot = make_bot(harness)
    n = fake_github.open_issue(target, "Faster", PROPOSAL, by="alice")
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"))
    edit(fake_github, bot, target, n, V1, by="mallory")
    relabel = fake_github.label_issue(target, n, "rsi", by="alice")  # the writer read v1
    edit(fake_github, bot, target, n, V2, by="mallory")
    bot.deliver(relabel)
    task = bot.store.find_task(target, n)
    assert task.proposal == V1 and harness.proposals[-1] == V1 and task.edited_proposal == V2
    assert render.proposal_digest(V2) in status_body(fake_github, target, n)


def test_a_long_edit_says_how_much_is_hidden_and_links_the_whole_diff(
        make_bot, fake_github, target, live_app):
    """Padding cannot push a change out of sight: the status comment counts the
    hidden lines and links the task page, which shows every line of the diff."""
    from tests.bot._support import free_port

    port = free_port()
    bot = make_bot(FakeHarness(), public_url=f"http://127.0.0.1:{port}", web_enabled=True,
                   web_token="page-token-0123456789")
    n = fake_github.open_issue(target, "Faster", PROPOSAL, by="alice")
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"))
    padded = PROPOSAL + "".join(f"pad {i}\n" for i in range(400)) + "```toml\n[verifier]\nalpha = 0.3\n```\n"
    edit(fake_github, bot, target, n, padded, by="mallory")
    body = status_body(fake_github, target, n)
    task = bot.store.find_task(target, n)
    diff = render.proposal_diff(PROPOSAL, padded)
    shown = render.EDIT_DIFF_LINES
    assert "alpha = 0.3" not in body
    assert f"**{len(diff) - shown:,} more line(s) of this diff" in body
    link = f"http://127.0.0.1:{port}/tasks/{task.id}#edit"
    assert link in body
    with live_app(create_app(bot.ctx.settings, store=bot.store), port=port) as server:
        page = httpx.get(link.split("#")[0], headers={
            "Authorization": "Bearer page-token-0123456789"}).text
        assert server.url
    assert "+alpha = 0.3" in page and render.proposal_digest(padded) in page


# ------------------------------------------------------------ 3. proposals only tighten


@pytest.mark.parametrize("block, expect", [
    ("[verifier]\ndefault_guards = false", "default_guards: a proposal may only set it to true"),
    ("[verifier]\nalpha = 0.49", "alpha = 0.49 would loosen"),
    ("[policy]\nmax_changed_lines = 1e9", "max_changed_lines must be a whole number"),
    ("[agent]\nkind = 'claude-code'", "the repo config allows 'replay', 'tuner'"),
    ("[runner]\nprofile = 'gpu'", "profile 'gpu' is not declared"),
])
def test_a_loosening_proposal_is_refused_with_a_reason(make_bot, fake_github, target, block,
                                                       expect):
    bot = make_bot(FakeHarness())
    n = fake_github.open_issue(target, "Looser", f"```toml\n{block}\n```\n", by="alice")
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"))
    assert bot.store.find_task(target, n).state == "invalid"
    assert expect in status_body(fake_github, target, n)
    assert not bot.store.jobs(kind="run_task")


# ------------------------------------------------------------ 4. injection


INJECTIONS = [
    "x`@org/team`",
    "@octocat please look",
    "<img src=x onerror=alert(1)> <details open>",
    "[click](https://evil.example/phish) ![i](http://e/x.png) www.evil.example",
    "a | b | c\n| --- |\n# heading",
    "``` \n@org/team\n```",
    "see #1 and acme/target#2",
]


def assert_inert(text: str) -> None:
    import re

    text = text.replace("@alice", "").replace("@rita", "")  # the bot's own mentions
    assert not re.search(r"@(?=[A-Za-z0-9])", text), text  # no live mention
    assert "<img" not in text and "<details open" not in text, text
    # the only links are the bot's own (commits, compare views on the fake GitHub)
    assert not re.search(r"\]\(https?://(?!127\.0\.0\.1:\d+/acme/target/)", text), text
    assert "https://evil" not in text and "www.evil" not in text, text
    assert "see #1" not in text and "target#2" not in text, text  # no injected reference


@pytest.mark.parametrize("evil", INJECTIONS)
def test_injected_text_is_inert_everywhere(make_bot, fake_github, target, evil):
    harness = FakeHarness(["accept", "reject"])
    harness.hypothesis = evil
    harness.reason = evil
    bot = make_bot(harness)
    n = fake_github.open_issue(target, "Faster", "x", by="alice")
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"))
    (pr,) = fake_github.pulls(target)
    assert_inert(pr.title)
    assert_inert(pr.body or "")
    for c in fake_github.comments(target, pr.number) + fake_github.comments(target, n):
        assert_inert(c.body)
    for check in fake_github.check_runs(target):
        assert_inert(check.output.get("title", ""))
        assert_inert(check.output.get("summary", ""))
    # a reader's command, and a writer's malformed one
    bot.deliver(fake_github.comment(target, n, f"/rsi {evil.splitlines()[0]}", by="rita"))
    bot.deliver(fake_github.comment(target, n, f"/rsi {evil.splitlines()[0]}", by="alice"))
    replies = [c.body for c in fake_github.comments(target, n) if "was not run" in c.body]
    assert len(replies) == 2
    for r in replies:
        assert_inert(r)


# ------------------------------------------------------------ 5. webhook


def test_webhook_replays_nesting_shapes_and_foreign_repos(bot_settings, live_app, fake_github,
                                                          target):
    settings = bot_settings(allowed_repos="acme/*")
    store = Store(settings.database_url)
    ev = fake_github.label_issue(target, fake_github.open_issue(target, "x", "y", by="alice"),
                                 "bug", by="alice")
    body = ev.body()
    with live_app(create_app(settings, store=store)) as server, httpx.Client(timeout=30) as c:
        url = f"{server.url}/webhook"
        first = c.post(url, content=body, headers=signed_headers("issues", body))
        assert first.json()["outcome"] == "accepted"
        # a captured signed body under a fresh delivery id: refused
        again = c.post(url, content=body, headers=signed_headers("issues", body))
        assert again.status_code == 202 and again.json()["outcome"] == "duplicate"
        # ... or under another event name: it does not fit that event
        other = c.post(url, content=body, headers=signed_headers("workflow_run", body))
        assert other.status_code == 400 and "does not fit event" in other.json()["error"]
        # deeply nested JSON: 400, never a 500
        for depth in (100, 100_000):
            deep = b'{"a":' * depth + b"1" + b"}" * depth
            r = c.post(url, content=deep, headers=signed_headers("issues", deep))
            assert r.status_code == 400, (depth, r.text)
        # an issue_comment without its comment
        bad = json.dumps({"action": "created", "issue": {}, "repository": {"full_name": "a/b"},
                          "sender": {}}).encode()
        assert c.post(url, content=bad,
                      headers=signed_headers("issue_comment", bad)).status_code == 400
        # a repository this bot does not serve: acknowledged, not stored
        foreign = copy.deepcopy(ev.payload)
        foreign["repository"]["full_name"] = "mallory/target"
        r = post_event(server.url, "issues", foreign, client=c)
        assert r.json()["outcome"] == "ignored" and "RSI_ALLOWED_REPOS" in r.json()["reason"]
    assert store.count_deliveries() == 1
    store.close()


def test_installation_allow_list_and_suspension(make_bot, fake_github, target):
    inst = fake_github.installation_id(target)
    bot = make_bot(FakeHarness(), allowed_installations=str(inst + 1))
    n = fake_github.open_issue(target, "Faster", "x", by="alice")
    d = bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"))
    assert f"installation {inst} is not in RSI_ALLOWED_INSTALLATIONS" in bot.result_of(d)

    bot = make_bot(FakeHarness())
    bot.store.set_installation(inst, account="acme", suspended=True)
    n = fake_github.open_issue(target, "Faster still", "x", by="alice")
    d = bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"))
    assert bot.result_of(d) == f"ignored: installation {inst} is suspended"
    assert bot.store.find_task(target, n) is None
    # an unsuspend event still reaches its handler, and then the bot serves again
    unsuspend = {"action": "unsuspend", "installation": {"id": inst, "account": {"login": "acme"}},
                 "sender": {"login": "acme", "type": "User"}}
    bot.deliver(WebhookEvent("installation", unsuspend))
    assert not bot.store.installation(inst).suspended
    n = fake_github.open_issue(target, "Faster again", "x", by="alice")
    bot.deliver(fake_github.label_issue(target, n, "rsi", by="alice"))
    assert bot.store.find_task(target, n) is not None


# ------------------------------------------------------------ issue 18: /metrics


def _own_address() -> str | None:
    """A non-loopback address of this machine (none on a loopback-only host)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks a route
            addr = s.getsockname()[0]
        except OSError:
            return None
    return None if addr.startswith("127.") else addr


def test_metrics_answer_only_this_machine_or_a_token(bot_settings, live_app):
    import threading
    import time

    import uvicorn

    from tests.bot._support import free_port

    settings = bot_settings()
    store = Store(settings.database_url)
    with live_app(create_app(settings, store=store)) as server:
        assert httpx.get(f"{server.url}/metrics").status_code == 200  # this machine
        # a reverse proxy on this machine forwarding the world: not local
        assert httpx.get(f"{server.url}/metrics",
                         headers={"X-Forwarded-For": "203.0.113.9"}).status_code == 401
    token = "metrics-token-0123456789"
    with live_app(create_app(settings.model_copy(update={"metrics_token": [token]}),
                             store=store)) as server:
        assert httpx.get(f"{server.url}/metrics").status_code == 401
        assert httpx.get(f"{server.url}/metrics",
                         headers={"Authorization": "Bearer wrong-token-0123456789"}
                         ).status_code == 401
        r = httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200 and "rsi_jobs" in r.text
    addr = _own_address()
    if addr is None:
        return
    # a client on another address (this machine's own, not loopback): refused
    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(create_app(settings, store=store), host="0.0.0.0",
                                        port=port, log_level="warning", access_log=False))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    try:
        deadline = time.time() + 20
        while not srv.started and time.time() < deadline and thread.is_alive():
            time.sleep(0.02)
        r = httpx.get(f"http://{addr}:{port}/metrics")
        assert r.status_code == 401 and "rsi_jobs" not in r.text
    finally:
        srv.should_exit = True
        thread.join(20)
