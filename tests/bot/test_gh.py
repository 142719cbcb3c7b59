"""PyGithubPort against the fake GitHub, over real HTTP and real git."""

from __future__ import annotations

import io
import os
import re
import subprocess
import zipfile
from pathlib import Path

import pytest

from bot.gh import (
    VERIFIER_CHECK,
    GitHubError,
    GitHubPort,
    GitRemote,
    NotFound,
    PyGithubPort,
)

GIT_ID = {"GIT_AUTHOR_NAME": "Bot", "GIT_AUTHOR_EMAIL": "bot@example.com",
          "GIT_COMMITTER_NAME": "Bot", "GIT_COMMITTER_EMAIL": "bot@example.com",
          "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}


def run_git(remote: GitRemote | None, *args: str, cwd: Path | None = None,
            check: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_ID)
    if remote is not None:
        env.update(remote.git_env())
    env["GIT_TERMINAL_PROMPT"] = "0"
    p = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=60, check=False)
    if check and p.returncode != 0:
        raise AssertionError(f"git {args}: {p.stderr}")
    return p


def push_branch(remote: GitRemote, workdir: Path, branch: str, files: dict[str, str]) -> str:
    """Clone (once), commit `files` on `branch`, push; returns the new head SHA."""
    clone = workdir / "clone"
    if not clone.exists():
        run_git(remote, "clone", "-q", remote.url, str(clone))
    run_git(remote, "checkout", "-q", "-B", branch, cwd=clone)
    for name, text in files.items():
        (clone / name).write_text(text)
    run_git(remote, "add", "-A", cwd=clone)
    run_git(remote, "commit", "-q", "-m", f"change on {branch}", cwd=clone)
    run_git(remote, "push", "-q", "origin", f"HEAD:refs/heads/{branch}", cwd=clone)
    return run_git(remote, "rev-parse", "HEAD", cwd=clone).stdout.strip()


@pytest.fixture
def seed(tmp_path: Path) -> Path:
    src = tmp_path / "seed"
    (src / ".github" / "workflows").mkdir(parents=True)
    (src / ".github" / "workflows" / "rsi-job.yml").write_text("on: workflow_dispatch\n")
    (src / ".rsi").mkdir()
    (src / ".rsi" / "config.toml").write_text("[objective]\nmetric = 'throughput'\n")
    (src / "README.md").write_text("# target\n")
    return src


# --------------------------------------------------------------------------- auth


def test_port_satisfies_the_protocol(gh):
    assert isinstance(gh, GitHubPort)


def test_app_auth_gets_one_installation_token_and_uses_it(fake_github, fake_app, fake_repo, gh):
    assert gh.bot_login() == "rsi-bot[bot]"
    assert gh.default_branch(fake_repo) == "main"
    assert gh.get_file_text(fake_repo, "README.md") == "# target\n"
    (app_call,) = fake_github.requests_to("GET", "/app")
    assert app_call.auth == f"app:{fake_app.id}"
    assert len(fake_github.requests_to("POST", re.compile(r"/app/installations/\d+/access_tokens"))) == 1
    repo_calls = fake_github.requests_to(path=re.compile(r"/repos/acme/target(/.*)?"))
    inst = fake_github.requests_to("GET", "/repos/acme/target/installation")[0]
    assert inst.auth.startswith("app:")
    assert {q.auth for q in repo_calls if q is not inst} == {
        f"installation:{fake_github.installation_id(fake_repo)}"}


def test_app_auth_picks_the_installation_of_each_repository(fake_github, fake_app, make_repo, gh):
    a = make_repo(full_name="acme/one")
    b = make_repo(full_name="other/two")
    gh.create_issue_comment(a, fake_github.open_issue(a, "x", by="acme"), "hi")
    gh.create_issue_comment(b, fake_github.open_issue(b, "y", by="other"), "hi")
    auths = {q.path.split("/")[3]: q.auth for q in fake_github.requests_to("POST")
             if q.path.endswith("/comments")}
    assert auths["one"] != auths["two"] and all(a.startswith("installation:") for a in auths.values())


def test_repository_without_the_app_is_not_found(fake_github, make_repo, gh):
    repo = make_repo(full_name="acme/elsewhere", install=False)
    with pytest.raises(NotFound) as e:
        gh.default_branch(repo)
    assert e.value.status == 404 and not e.value.retryable


def test_wrong_app_key_is_a_clear_401(fake_github, fake_app, fake_repo):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption()).decode()
    port = PyGithubPort.from_app(fake_app.id, pem, base_url=fake_github.url, throttle=False,
                                 retry=None)
    with pytest.raises(GitHubError) as e:
        port.default_branch(fake_repo)
    assert e.value.status == 401 and not e.value.retryable
    assert "HTTP 401" in str(e.value)


def test_token_auth_for_development(fake_github, fake_repo, token_port):
    fake_github.set_role(fake_repo, "dev", "write")
    port = token_port("dev")
    assert port.bot_login() == "dev"
    n = fake_github.open_issue(fake_repo, "t", by="dev")
    assert port.create_issue_comment(fake_repo, n, "hello").user == "dev"
    url, token = port.git_remote(fake_repo)
    assert url == f"{fake_github.url}/acme/target.git" and token == fake_github.token_for("dev")
    # as on GitHub, check runs need a GitHub App
    sha = fake_github.branch_sha(fake_repo, "main")
    with pytest.raises(GitHubError, match="GitHub App") as e:
        port.create_check_run(fake_repo, head_sha=sha)
    assert e.value.status == 403


def test_constructor_refuses_ambiguous_credentials():
    with pytest.raises(ValueError):
        PyGithubPort()
    with pytest.raises(ValueError):
        PyGithubPort(token="t", app_id=1, private_key="k")
    with pytest.raises(ValueError):
        PyGithubPort(app_id=1)
    with pytest.raises(ValueError, match="private key"):
        PyGithubPort(app_id=1, private_key="-----BEGIN RSA PRIVATE KEY-----\nnope\n")


# --------------------------------------------------------------------------- issues, comments


def test_roles(fake_github, make_repo, gh):
    repo = make_repo()
    for login, role in [("w", "write"), ("m", "maintain"), ("t", "triage"), ("r", "read")]:
        fake_github.set_role(repo, login, role)
    fake_github.add_user("stranger")
    got = {u: gh.collaborator_role(repo, u) for u in ["acme", "w", "m", "t", "r", "stranger", "ghost"]}
    assert got == {"acme": "admin", "w": "write", "m": "maintain", "t": "triage", "r": "read",
                   "stranger": "read", "ghost": "none"}
    private = make_repo(full_name="acme/private", private=True)
    assert gh.collaborator_role(private, "stranger") == "none"


def test_issue_and_comments(fake_github, fake_repo, gh):
    n = fake_github.open_issue(fake_repo, "Make it faster", "## Goal\nthroughput", by="alice",
                               labels=["perf"])
    fake_github.label_issue(fake_repo, n, "rsi", by="alice")
    issue = gh.get_issue(fake_repo, n)
    assert (issue.number, issue.title, issue.body, issue.labels, issue.user,
            issue.is_pull_request) == (n, "Make it faster", "## Goal\nthroughput",
                                       ("perf", "rsi"), "alice", False)
    for k in range(34):
        fake_github.comment(fake_repo, n, f"comment {k}", by="alice")
    mine = gh.create_issue_comment(fake_repo, n, "<!-- rsi:status -->\nqueued")
    assert mine.user == "rsi-bot[bot]" and mine.user_type == "Bot"
    edited = gh.edit_issue_comment(fake_repo, mine.id, "<!-- rsi:status -->\nrunning")
    assert edited.id == mine.id and edited.body.endswith("running")
    comments = gh.list_issue_comments(fake_repo, n)
    assert [c.body for c in comments[:2]] == ["comment 0", "comment 1"]
    assert len(comments) == 35 and comments[-1].body.endswith("running")
    assert len(fake_github.requests_to("GET", f"/repos/{fake_repo}/issues/{n}/comments")) == 2
    assert fake_github.comments(fake_repo, n)[-1].body.endswith("running")
    with pytest.raises(NotFound):
        gh.get_issue(fake_repo, 999)


def test_comment_too_long_is_refused(fake_github, fake_repo, gh):
    n = fake_github.open_issue(fake_repo, "t", by="alice")
    with pytest.raises(GitHubError) as e:
        gh.create_issue_comment(fake_repo, n, "x" * 65537)
    assert e.value.status == 422 and "too long" in str(e.value)


def test_reactions(fake_github, fake_repo, gh):
    n = fake_github.open_issue(fake_repo, "t", by="alice")
    event = fake_github.comment(fake_repo, n, "/rsi rerun", by="alice")
    cid = event.payload["comment"]["id"]
    gh.add_reaction(fake_repo, cid, "eyes")
    gh.add_reaction(fake_repo, cid, "eyes")  # idempotent, as on GitHub (200)
    gh.add_reaction(fake_repo, cid, "+1")
    (c,) = fake_github.comments(fake_repo, n)
    assert [(r.content, r.user.login) for r in c.reactions] == [
        ("eyes", "rsi-bot[bot]"), ("+1", "rsi-bot[bot]")]
    with pytest.raises(GitHubError) as e:
        gh.add_reaction(fake_repo, cid, "thumbsup")
    assert e.value.status == 422


# --------------------------------------------------------------------------- contents


def test_file_text_at_refs(fake_github, make_repo, gh, seed):
    repo = make_repo(seed, default_branch="trunk")
    assert gh.default_branch(repo) == "trunk"
    assert gh.get_file_text(repo, ".rsi/config.toml").startswith("[objective]")
    fake_github.commit_files(repo, "feature", {".rsi/config.toml": "changed\n"})
    assert gh.get_file_text(repo, ".rsi/config.toml", ref="feature") == "changed\n"
    sha = fake_github.branch_sha(repo, "trunk")
    assert gh.get_file_text(repo, ".rsi/config.toml", ref=sha).startswith("[objective]")
    assert gh.get_file_text(repo, "missing.txt") is None
    assert gh.get_file_text(repo, ".rsi") is None  # a directory
    assert gh.get_file_text(repo, "README.md", ref="no-such-branch") is None


# --------------------------------------------------------------------------- git, pulls


def test_clone_push_pull_review_merge(fake_github, fake_repo, gh, tmp_path):
    fake_github.set_role(fake_repo, "alice", "write")
    remote = gh.git_remote(fake_repo)
    assert remote.url == fake_github.clone_url(fake_repo)
    assert remote.token.startswith("ghs_")
    head = push_branch(remote, tmp_path, "rsi/7/1", {"speed.txt": "fast\n"})
    assert fake_github.branch_sha(fake_repo, "rsi/7/1") == head
    assert [(p.ref, p.after, p.pusher) for p in fake_github.pushes] == [
        ("refs/heads/rsi/7/1", head, "rsi-bot[bot]")]

    pr = gh.create_pull(fake_repo, title="rsi: faster", body="Refs #7", head="rsi/7/1",
                        base="main")
    assert (pr.state, pr.draft, pr.merged, pr.head_ref, pr.head_sha, pr.base_ref, pr.user,
            pr.head_repo_full_name) == ("open", True, False, "rsi/7/1", head, "main",
                                        "rsi-bot[bot]", fake_repo)
    gh.request_reviewers(fake_repo, pr.number, ["alice"])
    assert [u.login for u in fake_github.pull(fake_repo, pr.number).pull.requested_reviewers] == ["alice"]
    assert gh.get_issue(fake_repo, pr.number).is_pull_request

    # a second candidate, and a push onto the first moves its head
    push_branch(remote, tmp_path, "rsi/7/2", {"other.txt": "x\n"})
    pr2 = gh.create_pull(fake_repo, title="rsi: other", body="", head="rsi/7/2", base="main")
    head2 = push_branch(remote, tmp_path, "rsi/7/1", {"speed.txt": "faster\n"})
    assert gh.get_pull(fake_repo, pr.number).head_sha == head2
    assert [p.number for p in gh.list_pulls(fake_repo, head_prefix="rsi/7/")] == [pr.number, pr2.number]
    assert gh.list_pulls(fake_repo, head_prefix="rsi/8/") == []

    event = fake_github.merge_pull(fake_repo, pr.number, by="alice")
    assert event.event == "pull_request" and event.action == "closed"
    assert event.payload["pull_request"]["merged"] is True
    merged = gh.get_pull(fake_repo, pr.number)
    assert merged.merged and merged.state == "closed"
    assert merged.merge_commit_sha == fake_github.branch_sha(fake_repo, "main")
    assert fake_github.git(fake_repo, "show", f"{merged.merge_commit_sha}:speed.txt") == "faster"
    assert [p.number for p in gh.list_pulls(fake_repo, head_prefix="rsi/")] == [pr2.number]
    assert [p.number for p in gh.list_pulls(fake_repo, state="closed")] == [pr.number]


def test_pull_errors_are_validation_failures(fake_github, fake_repo, gh, tmp_path):
    remote = gh.git_remote(fake_repo)
    push_branch(remote, tmp_path, "rsi/1/1", {"a.txt": "a\n"})
    gh.create_pull(fake_repo, title="t", body="", head="rsi/1/1", base="main")
    with pytest.raises(GitHubError, match="already exists") as e:
        gh.create_pull(fake_repo, title="t", body="", head="rsi/1/1", base="main")
    assert e.value.status == 422 and not e.value.retryable
    with pytest.raises(GitHubError, match="head"):
        gh.create_pull(fake_repo, title="t", body="", head="nope", base="main")
    run_git(remote, "push", "-q", "origin", "origin/main:refs/heads/same", cwd=tmp_path / "clone")
    with pytest.raises(GitHubError, match="No commits"):
        gh.create_pull(fake_repo, title="t", body="", head="same", base="main")
    with pytest.raises(GitHubError, match="collaborators"):
        gh.request_reviewers(fake_repo, 1, ["stranger"])


def test_git_needs_a_valid_token_and_write_to_push(fake_github, fake_repo, tmp_path):
    fake_github.set_role(fake_repo, "reader", "read")
    reader = GitRemote(fake_github.clone_url(fake_repo), fake_github.token_for("reader"))
    run_git(reader, "clone", "-q", reader.url, str(tmp_path / "c"))  # reading is fine
    (tmp_path / "c" / "x.txt").write_text("x")
    run_git(reader, "add", "-A", cwd=tmp_path / "c")
    run_git(reader, "commit", "-qm", "x", cwd=tmp_path / "c")
    denied = run_git(reader, "push", "origin", "HEAD:refs/heads/evil", cwd=tmp_path / "c", check=False)
    assert denied.returncode != 0 and "403" in denied.stderr
    bad = GitRemote(reader.url, "ghs_not-a-token")
    p = run_git(bad, "push", "origin", "HEAD:refs/heads/evil", cwd=tmp_path / "c", check=False)
    assert p.returncode != 0
    assert fake_github.branch_sha(fake_repo, "evil") is None


# --------------------------------------------------------------------------- checks, actions


def test_check_runs(fake_github, fake_repo, gh):
    sha = fake_github.branch_sha(fake_repo, "main")
    run = gh.create_check_run(fake_repo, head_sha=sha, title="Verifying", summary="queued")
    assert (run.name, run.status, run.conclusion, run.head_sha) == (VERIFIER_CHECK, "in_progress", None, sha)
    done = gh.update_check_run(fake_repo, run.id, conclusion="neutral", title="Inconclusive",
                               summary="noise too high")
    assert (done.status, done.conclusion) == ("completed", "neutral")
    (stored,) = fake_github.check_runs(fake_repo, sha, VERIFIER_CHECK)
    assert stored.output == {"title": "Inconclusive", "summary": "noise too high", "text": None}
    once = gh.create_check_run(fake_repo, head_sha=sha, conclusion="failure", title="t", summary="s")
    assert once.status == "completed"
    with pytest.raises(GitHubError) as e:
        gh.update_check_run(fake_repo, run.id, summary="x" * 70_000)
    assert e.value.status == 422
    with pytest.raises(GitHubError):
        gh.create_check_run(fake_repo, head_sha="0" * 40)
    with pytest.raises(NotFound):
        gh.update_check_run(fake_repo, 424242, status="in_progress")


def test_dispatch_and_artifacts(fake_github, make_repo, gh, seed):
    repo = make_repo(seed)
    run_id = gh.dispatch_workflow(repo, "rsi-job.yml", "main", {"job": "42", "labels": "gpu"})
    (run,) = fake_github.workflow_runs(repo)
    assert run.id == run_id and run.inputs == {"job": "42", "labels": "gpu"}
    assert run.ref == "main" and run.status == "queued"
    assert gh.list_run_artifacts(repo, run_id) == []
    event = fake_github.complete_workflow_run(
        repo, run_id, artifacts={"rsi-result": {"result.json": '{"ok": true}'}})
    assert event.event == "workflow_run" and event.payload["workflow_run"]["id"] == run_id
    assert event.payload["workflow_run"]["conclusion"] == "success"
    (art,) = gh.list_run_artifacts(repo, run_id)
    assert art.name == "rsi-result" and not art.expired
    data = gh.download_artifact(repo, art.id)
    assert zipfile.ZipFile(io.BytesIO(data)).read("result.json") == b'{"ok": true}'
    # the archive is a 302 to storage, fetched without our token
    (redirect,) = fake_github.requests_to("GET", f"/repos/{repo}/actions/artifacts/{art.id}/zip")
    assert redirect.status == 302
    with pytest.raises(NotFound):
        gh.dispatch_workflow(repo, "missing.yml", "main", {})
    with pytest.raises(GitHubError, match="No ref"):
        gh.dispatch_workflow(repo, "rsi-job.yml", "no-branch", {})
    with pytest.raises(NotFound):
        gh.download_artifact(repo, 999999)


def test_dispatch_without_run_details(fake_github, make_repo, gh, seed):
    repo = make_repo(seed)
    fake_github.fail_next("POST", f"/repos/{repo}/actions/workflows/rsi-job.yml/dispatches",
                          status=422, body={"message": "Invalid request.\n\n"
                                            "return_run_details is not a permitted key."})
    assert gh.dispatch_workflow(repo, "rsi-job.yml", "main", {"job": "1"}) is None
    assert len(fake_github.workflow_runs(repo)) == 1


# --------------------------------------------------------------------------- failures, records


def test_injected_failures_surface_as_github_errors(fake_github, fake_repo, gh):
    n = fake_github.open_issue(fake_repo, "t", by="alice")
    path = f"/repos/{fake_repo}/issues/{n}/comments"
    fake_github.fail_next("POST", path, status=502)
    with pytest.raises(GitHubError) as e:
        gh.create_issue_comment(fake_repo, n, "hello")
    assert e.value.status == 502 and e.value.retryable and path in str(e.value)
    assert fake_github.comments(fake_repo, n) == []
    gh.create_issue_comment(fake_repo, n, "hello")  # only the next one failed
    assert [c.body for c in fake_github.comments(fake_repo, n)] == ["hello"]
    posted = fake_github.requests_to("POST", path)
    assert [(q.status, q.json) for q in posted] == [(502, {"body": "hello"}), (201, {"body": "hello"})]

    fake_github.fail_next("GET", re.compile(r"/repos/.*/pulls/\d+"), status=None)  # no answer
    with pytest.raises(GitHubError) as e:
        gh.get_pull(fake_repo, 1)
    assert e.value.status is None and e.value.retryable

    fake_github.fail_next("GET", f"/repos/{fake_repo}/issues/{n}", status=403,
                          body={"message": "API rate limit exceeded for installation ID 1."},
                          headers={"X-RateLimit-Remaining": "0", "Retry-After": "42"})
    with pytest.raises(GitHubError) as e:
        gh.get_issue(fake_repo, n)
    assert (e.value.status, e.value.retryable, e.value.retry_after) == (403, True, 42.0)

    fake_github.fail_next("GET", f"/repos/{fake_repo}/issues/{n}", status=403,
                          body={"message": "Resource not accessible by integration"})
    with pytest.raises(GitHubError) as e:
        gh.get_issue(fake_repo, n)
    assert (e.value.status, e.value.retryable) == (403, False)


def test_default_retry_repeats_reads_not_posts(fake_github, fake_app, fake_repo):
    port = PyGithubPort.from_app(fake_app.id, fake_app.private_key_pem, base_url=fake_github.url,
                                 throttle=False)
    n = fake_github.open_issue(fake_repo, "t", by="alice")
    fake_github.fail_next("GET", f"/repos/{fake_repo}/issues/{n}", status=503)
    assert port.get_issue(fake_repo, n).title == "t"
    fake_github.fail_next("POST", f"/repos/{fake_repo}/issues/{n}/comments", status=503)
    with pytest.raises(GitHubError):
        port.create_issue_comment(fake_repo, n, "once")
    assert len(fake_github.requests_to("POST", f"/repos/{fake_repo}/issues/{n}/comments")) == 1
    port.close()


def test_webhook_events_from_the_fake(fake_github, fake_app, fake_repo):
    n = fake_github.open_issue(fake_repo, "Faster", "body", by="alice")
    labeled = fake_github.label_issue(fake_repo, n, "rsi", by="alice")
    assert (labeled.event, labeled.action) == ("issues", "labeled")
    p = labeled.payload
    assert p["label"]["name"] == "rsi" and p["issue"]["number"] == n
    assert p["sender"]["login"] == "alice" and p["repository"]["full_name"] == fake_repo
    assert p["installation"]["id"] == fake_github.installation_id(fake_repo)
    assert [lbl["name"] for lbl in p["issue"]["labels"]] == ["rsi"]
    c = fake_github.comment(fake_repo, n, "/rsi status", by="alice")
    assert c.event == "issue_comment" and c.payload["comment"]["body"] == "/rsi status"
    assert "pull_request" not in c.payload["issue"]
    assert c.payload["sender"]["type"] == "User"
    bot = fake_github.comment(fake_repo, n, "/rsi stop", by="dependabot[bot]")
    assert bot.payload["sender"]["type"] == "Bot"
    mine = fake_github.comment(fake_repo, n, "status", by=fake_app.bot.login)
    assert mine.payload["comment"]["user"] == mine.payload["sender"]
    assert mine.payload["sender"]["login"] == "rsi-bot[bot]"


def test_port_is_safe_to_share_between_threads(fake_github, fake_repo, gh):
    from concurrent.futures import ThreadPoolExecutor

    numbers = [fake_github.open_issue(fake_repo, f"issue {k}", by="alice") for k in range(12)]
    with ThreadPoolExecutor(6) as pool:
        titles = list(pool.map(lambda n: gh.get_issue(fake_repo, n).title, numbers))
    assert titles == [f"issue {k}" for k in range(12)]


def test_the_service_builds_the_port_from_settings(fake_github, fake_app, fake_repo,
                                                   github_app_env):
    from bot.service import build_port
    from bot.settings import load_settings

    base = {"RSI_WEBHOOK_SECRET": "s3cret-one", "RSI_GITHUB_THROTTLE": "false"}
    app = load_settings({**base, **github_app_env, "RSI_GITHUB_INSTALLATION_ID":
                         str(fake_github.installation_id(fake_repo))})
    port = build_port(app)
    assert port.default_branch(fake_repo) == "main"
    assert not fake_github.requests_to("GET", f"/repos/{fake_repo}/installation")  # given
    port.close()
    dev = load_settings({**base, "RSI_GITHUB_API_URL": fake_github.url,
                         "RSI_GITHUB_TOKEN": fake_github.token_for("dev")})
    port = build_port(dev)
    assert port.bot_login() == "dev"
    port.close()


def test_reinstalled_app_is_found_again(fake_github, fake_app, fake_repo, gh):
    assert gh.default_branch(fake_repo) == "main"
    fake_github.uninstall_app(fake_github.installation_id(fake_repo))
    with pytest.raises(GitHubError) as e:
        gh.default_branch(fake_repo)  # the cached token is revoked
    assert e.value.status == 401
    with pytest.raises(NotFound):
        gh.default_branch(fake_repo)  # not installed any more
    fake_github.install_app(fake_app, [fake_repo])
    assert gh.default_branch(fake_repo) == "main"  # the new installation, a new token


def test_fake_serves_more_of_pygithub_than_the_port_uses(fake_github, fake_app, make_repo, seed):
    """Endpoints other bot code or tests may reach through PyGithub directly."""
    import github

    repo = make_repo(seed)
    inst = fake_github.installation_id(repo)
    gi = github.GithubIntegration(auth=github.Auth.AppAuth(fake_app.id, fake_app.private_key_pem),
                                  base_url=fake_github.url)
    assert [i.id for i in gi.get_installations()] == [inst]
    r = gi.get_github_for_installation(inst).get_repo(repo)
    main = fake_github.branch_sha(repo, "main")
    assert r.get_branch("main").commit.sha == r.get_git_ref("heads/main").object.sha == main
    assert {c.path for c in r.get_contents("")} == {".github", ".rsi", "README.md"}
    i = r.create_issue("t", body="b", labels=["x"])
    i.edit(title="t2")
    i.add_to_labels("y")
    i.remove_from_labels("x")
    assert [lbl.name for lbl in r.get_issue(i.number).get_labels()] == ["y"]
    fake_github.commit_files(repo, "feat", {"a.txt": "a"})
    p = r.create_pull(title="p", body="", head="feat", base="main", draft=True)
    p.edit(body="new")
    assert r.get_pull(p.number).body == "new"
    r.create_check_run("rsi/verifier", p.head.sha, status="queued")
    assert [c.name for c in r.get_commit(p.head.sha).get_check_runs()] == ["rsi/verifier"]
    assert r.get_workflow("rsi-job.yml").create_dispatch("main", {"a": "b"})
    (run,) = fake_github.workflow_runs(repo)
    fake_github.complete_workflow_run(repo, run.id, artifacts={"x": b"PK\x05\x06" + b"\0" * 18})
    wr = r.get_workflow_run(run.id)
    assert (wr.status, wr.conclusion) == ("completed", "success")
    assert [a.name for a in wr.get_artifacts()] == ["x"]
    assert r.get_pulls(state="all", head=f"{repo.split('/')[0]}:feat").totalCount == 1
    assert not [q for q in fake_github.requests if q.status >= 400]


def test_run_url_cancel_branch_and_rate_limit(fake_github, make_repo, gh, seed):
    from bot.gh import web_root

    repo = make_repo(seed)
    assert gh.rate_limit() is None or gh.rate_limit().limit == 5000
    run_id = gh.dispatch_workflow(repo, "rsi-job.yml", "main", {"job": "1"})
    info = gh.workflow_run(repo, run_id)
    assert info.status == "queued" and info.html_url.endswith(f"/{repo}/actions/runs/{run_id}")
    assert gh.cancel_workflow_run(repo, run_id) is True
    (run,) = fake_github.workflow_runs(repo)
    assert run.status == "completed" and run.conclusion == "cancelled"
    assert gh.cancel_workflow_run(repo, run_id) is False  # 409: already completed
    with pytest.raises(NotFound):
        gh.cancel_workflow_run(repo, 424242)
    assert gh.branch_sha(repo, "main") == fake_github.branch_sha(repo, "main")
    assert gh.branch_sha(repo, "no-such-branch") is None
    sha = fake_github.branch_sha(repo, "main")
    c = gh.create_check_run(repo, head_sha=sha, status="queued", title="q", summary="s")
    gh.update_check_run(repo, c.id, status="in_progress", details_url="https://x.example/t/1")
    (rec,) = fake_github.check_runs(repo, sha)
    assert rec.status == "in_progress" and rec.details_url == "https://x.example/t/1"
    rate = gh.rate_limit()
    assert rate.limit == 5000 and 0 < rate.remaining < 5000 and rate.reset_at > 0
    assert web_root("https://api.github.com") == "https://github.com"
    assert web_root("https://ghe.example.com/api/v3/") == "https://ghe.example.com"
