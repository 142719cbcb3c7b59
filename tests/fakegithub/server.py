"""A fake GitHub speaking GitHub's REST (and git smart HTTP) over real HTTP.

PyGithub runs against it unmodified (`base_url=fake.url`), and `git clone/push`
work against `fake.clone_url(repo)` through `git http-backend` on a real bare
repository, so branches, PR heads and merges are real commits.

The fake records every request (`fake.requests`), can fail on demand
(`fake.fail_next(...)`, like bedevere's FakeGH), and has helpers for tests:
users and roles, issues, labels and comments made by people (returning the
webhook payload GitHub would send), merging a PR in git, completing a
dispatched workflow run with artifacts. See README.md.
"""

from __future__ import annotations

import base64
import io
import itertools
import json
import re
import secrets
import shutil
import socket
import tempfile
import threading
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from . import git, shapes
from .state import (
    ROLE_RANK,
    App,
    Artifact,
    CheckRun,
    Comment,
    Failure,
    HookDelivery,
    Installation,
    Issue,
    PullState,
    Push,
    Reaction,
    Repo,
    Request,
    Token,
    User,
    WorkflowRun,
    now,
)

REACTIONS = {"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"}
CHECK_STATUSES = {"queued", "in_progress", "completed", "waiting", "requested", "pending"}
CHECK_CONCLUSIONS = {"action_required", "cancelled", "failure", "neutral", "success", "skipped",
                     "stale", "timed_out"}
MAX_BODY = 65536  # comment, issue and PR bodies
MAX_SUMMARY = 65535  # check run output.summary / text
DOCS = "https://docs.github.com/rest"


class ApiError(Exception):
    def __init__(self, status: int, message: str, errors: list | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.errors, self.headers = status, message, errors, headers


def not_found() -> ApiError:
    return ApiError(404, "Not Found")


def invalid(resource: str, field: str, code: str = "invalid", message: str | None = None) -> ApiError:
    err: dict[str, Any] = {"resource": resource, "field": field, "code": code}
    if message:
        err["message"] = message
    return ApiError(422, "Validation Failed", [err])


@dataclass(frozen=True)
class WebhookEvent:
    """What GitHub would deliver: `X-GitHub-Event: <event>` and this JSON payload."""

    event: str
    payload: dict[str, Any]

    @property
    def action(self) -> str | None:
        return self.payload.get("action")

    def body(self) -> bytes:
        return json.dumps(self.payload).encode()


@dataclass
class Ctx:
    method: str
    path: str
    query: dict[str, str]
    json: Any
    ident: Token | App | None
    match: re.Match
    headers: Mapping[str, str]

    def __getitem__(self, key: str) -> str:
        return unquote(self.match.group(key))


_ROUTES: list[tuple[str, re.Pattern, str]] = []


def route(method: str, pattern: str) -> Callable:
    rx = re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", pattern) + "$")

    def deco(fn: Callable) -> Callable:
        _ROUTES.append((method, rx, fn.__name__))
        return fn

    return deco


class FakeGitHub:
    """Start with `FakeGitHub().start()` (or the `fake_github` fixture); `stop()` at the end."""

    def __init__(self, root: Path | None = None):
        self._tmp = None if root else tempfile.mkdtemp(prefix="fakegithub-")
        self.root = Path(root or self._tmp)
        self.git_root = self.root / "git"
        self.git_root.mkdir(parents=True, exist_ok=True)
        self.lock = threading.RLock()
        self.users: dict[str, User] = {}
        self.repos: dict[str, Repo] = {}
        self.apps: dict[int, App] = {}
        self.installations: dict[int, Installation] = {}
        self.tokens: dict[str, Token] = {}
        self.blobs: dict[str, bytes] = {}
        self.requests: list[Request] = []
        self.pushes: list[Push] = []
        self.failures: list[Failure] = []
        self.oauth_codes: dict[str, tuple[int, str, str]] = {}  # code -> (app id, login, redirect)
        self.rate_limit = 5000
        self.api_calls = 0  # each REST answer counts against X-RateLimit-Remaining
        self.manifest_codes: dict[str, tuple[dict[str, Any], str]] = {}
        self.manifest_apps: dict[int, dict[str, Any]] = {}
        self._ids = itertools.count(1001)
        self.hook_url: str | None = None  # the App's webhook URL (set_webhook)
        self.hook_secret: str = ""
        self.hook_deliveries: list[HookDelivery] = []  # every attempt, oldest first
        self._senders: list[threading.Thread] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    # ------------------------------------------------------------ lifecycle

    def start(self) -> FakeGitHub:
        fake = self

        class Handler(_Handler):
            pass

        Handler.fake = fake
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="fakegithub",
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> FakeGitHub:  # noqa: PYI034
        return self.start() if self._server is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _id(self) -> int:
        return next(self._ids)

    # ------------------------------------------------------------ test helpers: people

    def add_user(self, login: str, *, type: str | None = None) -> str:
        """Create (or get) a user; returns a personal token for it."""
        with self.lock:
            u = self._user(login, type)
            for t in self.tokens.values():
                if t.user is u and t.installation is None:
                    return t.value
            value = "ghp_" + secrets.token_hex(18)
            self.tokens[value] = Token(value, u)
            return value

    def token_for(self, login: str) -> str:
        return self.add_user(login)

    def _user(self, login: str, type: str | None = None) -> User:
        u = self.users.get(login)
        if u is None:
            type = type or ("Bot" if login.endswith("[bot]") else "User")
            u = self.users[login] = User(login, self._id(), type)
        return u

    def set_role(self, repo: str, login: str, role: str) -> None:
        """Make `login` a collaborator with role admin|maintain|write|triage|read (none: remove)."""
        if role not in ROLE_RANK:
            raise ValueError(f"unknown role {role!r}")
        with self.lock:
            r = self.repo(repo)
            self._user(login)
            if role == "none":
                r.roles.pop(login, None)
            else:
                r.roles[login] = role

    # ------------------------------------------------------------ test helpers: apps

    def register_app(self, slug: str = "rsi-bot", *, owner: str = "rsi-org",
                     app_id: int | None = None) -> App:
        """A GitHub App with a fresh RSA key; `app.private_key_pem` is what the bot is given."""
        from cryptography.hazmat.primitives import serialization

        key = _test_key()
        private_pem = key.private_bytes(serialization.Encoding.PEM,
                                        serialization.PrivateFormat.TraditionalOpenSSL,
                                        serialization.NoEncryption()).decode()
        public_pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                                   serialization.PublicFormat.SubjectPublicKeyInfo)
        with self.lock:
            aid = app_id or self._id()
            a = App(id=aid, slug=slug, owner=self._user(owner, "Organization"),
                    public_key_pem=public_pem, private_key_pem=private_pem,
                    bot=self._user(f"{slug}[bot]", "Bot"),
                    permissions={"issues": "write", "pull_requests": "write",
                                 "contents": "write", "checks": "write", "actions": "write",
                                 "metadata": "read"},
                    events=["issues", "issue_comment", "pull_request", "workflow_run"])
            self.apps[aid] = a
            return a

    def install_app(self, app: App | int, repos: Iterable[str]) -> int:
        """Install the app on these repositories (one installation per account); returns its id."""
        with self.lock:
            a = app if isinstance(app, App) else self.apps[app]
            repos = list(repos)
            account = self.repo(repos[0]).owner if repos else a.owner
            inst = next((i for i in a.installations.values() if i.account is account), None)
            if inst is None:
                inst = Installation(self._id(), a, account)
                a.installations[inst.id] = inst
                self.installations[inst.id] = inst
            for name in repos:
                inst.repos.add(self.repo(name).full_name)
            return inst.id

    def uninstall_app(self, installation_id: int) -> None:
        """Delete an installation: its tokens stop working at once."""
        with self.lock:
            inst = self.installations.pop(installation_id)
            del inst.app.installations[installation_id]
            for value in [v for v, t in self.tokens.items() if t.installation is inst]:
                del self.tokens[value]

    def installation_id(self, repo: str) -> int | None:
        """The id of the app installation covering `repo` (None: not installed)."""
        with self.lock:
            inst = self._installation_of(self.repo(repo))
            return inst.id if inst else None

    def installation_token(self, installation_id: int) -> str:
        """A valid installation token, as if issued by POST .../access_tokens."""
        with self.lock:
            return self._issue_installation_token(self.installations[installation_id]).value

    def _issue_installation_token(self, inst: Installation) -> Token:
        value = "ghs_" + secrets.token_hex(18)
        t = Token(value, inst.app.bot, inst, now() + timedelta(hours=1))
        self.tokens[value] = t
        return t

    # ------------------------------------------------------------ test helpers: repos

    def create_repo(self, full_name: str, source: Path | str | None = None, *,
                    default_branch: str = "main", private: bool = False,
                    message: str = "Initial commit") -> Repo:
        """A repository backed by a bare git repo, its default branch seeded with `source`."""
        owner, _, name = full_name.partition("/")
        with self.lock:
            if full_name in self.repos:
                raise ValueError(f"{full_name} exists")
            bare = self.git_root / owner / f"{name}.git"
            git.init_bare(bare, default_branch)
            r = Repo(owner=self._user(owner), name=name, id=self._id(), bare=bare,
                     default_branch=default_branch, private=private)
            self.repos[full_name] = r
        if source is not None:
            git.commit_dir(bare, default_branch, Path(source), message)
        return r

    def repo(self, full_name: str) -> Repo:
        try:
            return self.repos[full_name]
        except KeyError:
            raise KeyError(f"no repository {full_name} in the fake") from None

    def clone_url(self, repo: str) -> str:
        return f"{self.url}/{repo}.git"

    def git(self, repo: str, *args: str) -> str:
        """Run git in the bare repository; returns stdout."""
        return git.out(self.repo(repo).bare, *args)

    def branch_sha(self, repo: str, branch: str) -> str | None:
        return git.resolve(self.repo(repo).bare, f"refs/heads/{branch}")

    def branches(self, repo: str) -> dict[str, str]:
        return git.branches(self.repo(repo).bare)

    def commit_files(self, repo: str, branch: str, files: Mapping[str, str | bytes], *,
                     message: str = "Update files") -> str:
        """Commit these files on top of `branch` (created from the default branch if new)."""
        r = self.repo(repo)
        base = git.resolve(r.bare, f"refs/heads/{branch}") or git.resolve(
            r.bare, f"refs/heads/{r.default_branch}")
        with tempfile.TemporaryDirectory() as tmp:
            index = Path(tmp) / "index"
            env = {"GIT_INDEX_FILE": str(index)}
            if base:
                git.git(r.bare, "read-tree", base, env=env)
            for path, content in files.items():
                data = content.encode() if isinstance(content, str) else content
                sha = git.git(r.bare, "hash-object", "-w", "--stdin", input=data).stdout.decode().strip()
                git.git(r.bare, "update-index", "--add", "--cacheinfo", f"100644,{sha},{path}", env=env)
            tree = git.git(r.bare, "write-tree", env=env).stdout.decode().strip()
        sha = git.out(r.bare, "commit-tree", tree, "-m", message, *(["-p", base] if base else []))
        git.update_ref(r.bare, f"refs/heads/{branch}", sha)
        return sha

    def open_fork_pull(self, repo: str, branch: str, files: Mapping[str, str | bytes], *,
                       by: str, title: str = "From my fork") -> int:
        """A PR from ``branch`` of ``by``'s fork (``by/<name>``): its head commit lives
        in this repository only as ``refs/pull/<n>/head``, as on GitHub; no branch
        ``branch`` is made here. Returns its number."""
        r = self.repo(repo)
        base = git.resolve(r.bare, f"refs/heads/{r.default_branch}")
        assert base is not None
        with tempfile.TemporaryDirectory() as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            git.git(r.bare, "read-tree", base, env=env)
            for path, content in files.items():
                data = content.encode() if isinstance(content, str) else content
                blob = git.git(r.bare, "hash-object", "-w", "--stdin", input=data).stdout.decode().strip()
                git.git(r.bare, "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=env)
            tree = git.git(r.bare, "write-tree", env=env).stdout.decode().strip()
        sha = git.out(r.bare, "commit-tree", tree, "-m", title, "-p", base)
        with self.lock:
            i = Issue(self._next_number(r), self._id(), title, "", self._user(by),
                      pull=PullState(branch, sha, r.default_branch, base, False,
                                     head_repo=f"{by}/{r.name}"))
            r.issues[i.number] = i
        git.update_ref(r.bare, f"refs/pull/{i.number}/head", sha)
        return i.number

    # ------------------------------------------------------------ test helpers: issues

    def open_issue(self, repo: str, title: str, body: str = "", *, by: str,
                   labels: Iterable[str] = ()) -> int:
        """An issue opened by `by`; returns its number (see `issue_event` for the payload)."""
        with self.lock:
            r = self.repo(repo)
            i = Issue(self._next_number(r), self._id(), title, body, self._user(by),
                      labels=list(labels))
            r.issues[i.number] = i
            return i.number

    def _next_number(self, r: Repo) -> int:
        return max(r.issues, default=0) + 1

    def issue_event(self, repo: str, number: int, action: str, *, by: str,
                    **extra: Any) -> WebhookEvent:
        r = self.repo(repo)
        with self.lock:
            i = r.issues[number]
            kind = "pull_request" if i.pull else "issues"
            body = shapes.pull(self.url, r, i) if i.pull else shapes.issue(self.url, r, i)
            payload = {"action": action, ("pull_request" if i.pull else "issue"): body,
                       **({"number": number} if i.pull else {}), **extra}
            return self._event(kind, r, by, payload)

    def label_issue(self, repo: str, number: int, label: str, *, by: str) -> WebhookEvent:
        """`by` adds a label; returns the `issues.labeled` (or `pull_request.labeled`) event."""
        with self.lock:
            r = self.repo(repo)
            i = r.issues[number]
            if label not in i.labels:
                i.labels.append(label)
            return self.issue_event(repo, number, "labeled", by=by,
                                    label=shapes.label(self.url, r, label))

    def comment(self, repo: str, number: int, body: str, *, by: str) -> WebhookEvent:
        """`by` comments on an issue or PR; returns the `issue_comment.created` event
        (`event.payload["comment"]["id"]` is the comment's id)."""
        with self.lock:
            r = self.repo(repo)
            c = self._add_comment(r, number, body, self._user(by))
            payload = {"action": "created",
                       "issue": shapes.issue(self.url, r, r.issues[number]),
                       "comment": shapes.comment(self.url, r, c)}
            return self._event("issue_comment", r, by, payload)

    def _add_comment(self, r: Repo, number: int, body: str, u: User) -> Comment:
        if number not in r.issues:
            raise not_found()
        c = Comment(self._id(), number, body, u)
        r.comments[c.id] = c
        r.issues[number].updated_at = now()
        return c

    def comments(self, repo: str, number: int) -> list[Comment]:
        with self.lock:
            return list(self.repo(repo).comments_of(number))

    def issue(self, repo: str, number: int) -> Issue:
        return self.repo(repo).issues[number]

    def _event(self, event: str, r: Repo, sender: str, payload: dict[str, Any]) -> WebhookEvent:
        payload["repository"] = shapes.repo(self.url, r)
        payload["sender"] = shapes.user(self.url, self._user(sender))
        inst = self._installation_of(r)
        if inst is not None:
            payload["installation"] = {"id": inst.id, "node_id": shapes.node_id("Installation", inst.id)}
        return WebhookEvent(event, payload)

    def _installation_of(self, r: Repo) -> Installation | None:
        return next((i for i in self.installations.values() if r.full_name in i.repos), None)

    # ------------------------------------------------------------ test helpers: pulls

    def pull(self, repo: str, number: int) -> Issue:
        """The PR (an Issue record with `.pull`); its head SHA is refreshed from git."""
        with self.lock:
            r = self.repo(repo)
            i = r.issues[number]
            if i.pull is None:
                raise KeyError(f"#{number} is an issue, not a pull request")
            self._refresh_pull(r, i)
            return i

    def pulls(self, repo: str, state: str = "open") -> list[Issue]:
        with self.lock:
            r = self.repo(repo)
            return [self.pull(repo, i.number) for i in r.issues.values()
                    if i.pull and (state == "all" or i.state == state)]

    def _refresh_pull(self, r: Repo, i: Issue) -> None:
        p = i.pull
        if p is not None and i.state == "open":
            p.head_sha = git.resolve(r.bare, f"refs/heads/{p.head_ref}") or p.head_sha
            p.base_sha = git.resolve(r.bare, f"refs/heads/{p.base_ref}") or p.base_sha

    def merge_pull(self, repo: str, number: int, *, by: str, method: str = "merge") -> WebhookEvent:
        """Really merge the PR in git (`merge` or `squash`); returns `pull_request.closed`.

        Raises `git.GitError` on a conflict (nothing changes then)."""
        with self.lock:
            r = self.repo(repo)
            i = self.pull(repo, number)
            p = i.pull
            assert p is not None
            if i.state != "open":
                raise ValueError(f"#{number} is not open")
            base = git.resolve(r.bare, f"refs/heads/{p.base_ref}")
            assert base is not None
            if method == "squash":
                msg = f"{i.title} (#{number})"
            else:
                msg = f"Merge pull request #{number} from {r.owner.login}/{p.head_ref}\n\n{i.title}"
            sha = git.merge(r.bare, base, p.head_sha, msg, squash=method == "squash")
            git.update_ref(r.bare, f"refs/heads/{p.base_ref}", sha, base)
            self.pushes.append(Push(r.full_name, f"refs/heads/{p.base_ref}", base, sha, by))
            p.merged_at, p.merge_commit_sha, p.merged_by = now(), sha, self._user(by)
            i.state, i.closed_at, i.updated_at = "closed", now(), now()
            return self.issue_event(repo, number, "closed", by=by)

    def close_pull(self, repo: str, number: int, *, by: str) -> WebhookEvent:
        with self.lock:
            i = self.pull(repo, number)
            i.state, i.closed_at, i.updated_at = "closed", now(), now()
            return self.issue_event(repo, number, "closed", by=by)

    # ------------------------------------------------------------ test helpers: checks, actions

    def check_runs(self, repo: str, sha: str | None = None, name: str | None = None) -> list[CheckRun]:
        with self.lock:
            return [c for c in self.repo(repo).check_runs.values()
                    if (sha is None or c.head_sha == sha) and (name is None or c.name == name)]

    def workflow_runs(self, repo: str) -> list[WorkflowRun]:
        """Every dispatched run, oldest first: `.inputs`, `.ref`, `.workflow_file`, `.status`."""
        with self.lock:
            return list(self.repo(repo).runs.values())

    dispatches = workflow_runs

    def complete_workflow_run(self, repo: str, run_id: int, *,
                              artifacts: Mapping[str, bytes | Mapping[str, str | bytes]] = {},
                              conclusion: str = "success") -> WebhookEvent:
        """Finish a dispatched run with artifacts (a zip's bytes, or {path: content} to zip);
        returns the `workflow_run.completed` event."""
        with self.lock:
            r = self.repo(repo)
            w = r.runs[run_id]
            for name, content in artifacts.items():
                data = content if isinstance(content, bytes) else make_zip(content)
                w.artifacts.append(Artifact(self._id(), name, data, w.id, w.head_branch,
                                            w.head_sha))
            w.status, w.conclusion, w.updated_at = "completed", conclusion, now()
            payload = {"action": "completed",
                       "workflow": shapes.workflow(self.url, r, w.workflow_id, w.workflow_file),
                       "workflow_run": shapes.workflow_run(self.url, r, w)}
            return self._event("workflow_run", r, w.actor.login, payload)

    # ------------------------------------------------------------ test helpers: webhooks

    def set_webhook(self, url: str | None, secret: str = "") -> None:
        """The App's webhook URL and secret: :meth:`send` delivers there."""
        self.hook_url, self.hook_secret = url, secret

    def send(self, wev: WebhookEvent, *, guid: str | None = None,
             timeout: float = 10.0) -> HookDelivery:
        """Deliver ``wev`` to the App's webhook as GitHub does (signed, ``X-GitHub-Delivery``),
        and record the attempt with the answer's status (0: no answer within ``timeout``)."""
        import uuid

        body = wev.body()
        return self._deliver(guid or str(uuid.uuid4()), wev.event, wev.action, body,
                             redelivery=False, installation_id=(
                                 wev.payload.get("installation") or {}).get("id"),
                             timeout=timeout)

    def _deliver(self, guid: str, event: str, action: str | None, body: bytes, *,
                 redelivery: bool, installation_id: int | None,
                 timeout: float = 10.0) -> HookDelivery:
        import hashlib
        import hmac
        import urllib.error
        import urllib.request

        if not self.hook_url:
            raise RuntimeError("no webhook URL: call set_webhook(url, secret) first")
        sig = "sha256=" + hmac.new(self.hook_secret.encode(), body, hashlib.sha256).hexdigest()
        req = urllib.request.Request(self.hook_url, data=body, method="POST", headers={
            "X-GitHub-Event": event, "X-GitHub-Delivery": guid, "X-Hub-Signature-256": sig,
            "Content-Type": "application/json", "User-Agent": "GitHub-Hookshot/fake"})
        started = now()
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                code = resp.status
        except urllib.error.HTTPError as e:
            code = e.code
        except (OSError, ValueError):
            code = 0  # refused, reset, or timed out: GitHub shows "failed to connect"
        d = HookDelivery(self._id(), guid, started, code, event, action, redelivery,
                         installation_id, body,
                         (now() - started).total_seconds())
        with self.lock:
            self.hook_deliveries.append(d)
        return d

    def wait_redeliveries(self, timeout: float = 30.0) -> None:
        """Wait until the redeliveries asked for so far were sent."""
        for t in list(self._senders):
            t.join(timeout)

    # ------------------------------------------------------------ test helpers: OAuth

    def oauth_client(self, app: App) -> tuple[str, str]:
        """(client id, client secret) of the App's user login (as the manifest flow gives)."""
        return f"Iv1.{app.id}", f"cs-{app.id}"

    def oauth_consent(self, authorize_url: str, *, by: str) -> str:
        """`by` approves the App on github.com's authorize page (`authorize_url` is where
        the bot sent the browser); returns the redirect back, with `code` and `state`."""
        q = dict(parse_qsl(urlsplit(authorize_url).query))
        with self.lock:
            app = next(a for a in self.apps.values() if self.oauth_client(a)[0] == q["client_id"])
            code = "oc_" + secrets.token_hex(10)
            self.oauth_codes[code] = (app.id, by, q.get("redirect_uri", ""))
            self._user(by)
        sep = "&" if "?" in q["redirect_uri"] else "?"
        return q["redirect_uri"] + sep + urlencode({"code": code, "state": q.get("state", "")})

    def start_workflow_run(self, repo: str, run_id: int) -> WebhookEvent:
        """A runner picked the run up: `workflow_run.in_progress`."""
        with self.lock:
            r = self.repo(repo)
            w = r.runs[run_id]
            w.status, w.updated_at = "in_progress", now()
            payload = {"action": "in_progress",
                       "workflow": shapes.workflow(self.url, r, w.workflow_id, w.workflow_file),
                       "workflow_run": shapes.workflow_run(self.url, r, w)}
            return self._event("workflow_run", r, w.actor.login, payload)

    def rerequest_check_run(self, repo: str, check_run_id: int, *, by: str) -> WebhookEvent:
        """`by` clicks "Re-run" on a check run: `check_run.rerequested` (sent to its app)."""
        with self.lock:
            r = self.repo(repo)
            c = r.check_runs[check_run_id]
            body = shapes.check_run(self.url, r, c)
            heads = {p.head_sha: i for i in r.issues.values()
                     if (p := i.pull) is not None and i.state == "open"}
            if c.head_sha in heads:
                i = heads[c.head_sha]
                body["pull_requests"] = [{"number": i.number, "id": i.id,
                                          "head": {"ref": i.pull.head_ref, "sha": i.pull.head_sha},
                                          "base": {"ref": i.pull.base_ref}}]
            return self._event("check_run", r, by, {"action": "rerequested", "check_run": body})

    def push_to_pull(self, repo: str, number: int, files: Mapping[str, str | bytes], *,
                     by: str, message: str = "Maintainer fix") -> WebhookEvent:
        """`by` pushes a commit to the PR's head branch: `pull_request.synchronize`."""
        with self.lock:
            i = self.pull(repo, number)
            before = i.pull.head_sha
            after = self.commit_files(repo, i.pull.head_ref, files, message=message)
            self.pushes.append(Push(repo, f"refs/heads/{i.pull.head_ref}", before, after, by))
            i = self.pull(repo, number)
            return self.issue_event(repo, number, "synchronize", by=by, before=before,
                                    after=after)

    # ------------------------------------------------------------ failure injection, records

    def fail_next(self, method: str, path: str | re.Pattern, *, status: int | None = 502,
                  body: Any = None, times: int = 1, headers: Mapping[str, str] | None = None) -> None:
        """The next `times` requests matching `method` and `path` (exact, without the query,
        or a compiled regex) get `status` with `body` (default GitHub's error shape);
        `status=None` drops the connection without an answer."""
        with self.lock:
            self.failures.append(Failure(method.upper(), path, status, body, dict(headers or {}),
                                         times))

    def requests_to(self, method: str | None = None, path: str | re.Pattern | None = None) -> list[Request]:
        with self.lock:
            return [q for q in self.requests if (method is None or q.method == method.upper())
                    and (path is None or _path_matches(path, q.path))]

    def clear_requests(self) -> None:
        with self.lock:
            self.requests.clear()

    def _take_failure(self, method: str, path: str) -> Failure | None:
        with self.lock:
            for f in self.failures:
                if f.method == method and _path_matches(f.path, path):
                    f.times -= 1
                    if f.times <= 0:
                        self.failures.remove(f)
                    return f
        return None

    # ------------------------------------------------------------ authentication

    def authenticate(self, header: str | None) -> Token | App | None:
        """Token (user or installation) or App (JWT); None when absent. Raises 401 when bad."""
        if not header:
            return None
        scheme, _, cred = header.partition(" ")
        scheme = scheme.lower()
        cred = cred.strip()
        if scheme == "basic":
            try:
                _, _, cred = base64.b64decode(cred).decode().partition(":")
            except ValueError:  # binascii.Error, UnicodeDecodeError
                raise ApiError(401, "Bad credentials") from None
        elif scheme not in ("token", "bearer"):
            raise ApiError(401, "Bad credentials")
        with self.lock:
            t = self.tokens.get(cred)
            if t is not None:
                if t.expires_at is not None and t.expires_at < now():
                    raise ApiError(401, "Bad credentials")
                return t
        if cred.count(".") == 2:
            return self._verify_jwt(cred)
        raise ApiError(401, "Bad credentials")

    def _verify_jwt(self, token: str) -> App:
        import jwt

        try:
            claims = jwt.decode(token, options={"verify_signature": False})
            app = self.apps[int(claims["iss"])]
            jwt.decode(token, app.public_key_pem, algorithms=["RS256"],
                       options={"require": ["exp", "iat", "iss"]}, leeway=5)
        except (jwt.PyJWTError, KeyError, ValueError, TypeError) as e:
            raise ApiError(401, f"A JSON web token could not be decoded ({e})") from None
        if claims["exp"] - claims["iat"] > 660:
            raise ApiError(401, "'Expiration time' claim ('exp') is too far in the future")
        return app

    # ------------------------------------------------------------ request dispatch

    def handle_api(self, method: str, path: str, query: dict[str, str], body: bytes,
                   headers: Mapping[str, str]) -> tuple[int, Any, dict[str, str]]:
        data: Any = None
        with self.lock:
            self.api_calls += 1
        if body:
            try:
                data = json.loads(body)
            except ValueError:
                return 400, {"message": "Problems parsing JSON", "documentation_url": DOCS}, {}
        ident: Any = None
        auth_desc = ""
        try:
            ident = self.authenticate(headers.get("Authorization"))
            auth_desc = _describe(ident)
        except ApiError:
            auth_desc = "bad"
            ident = "bad"
        req = Request(method, path, dict(query), data, auth_desc)
        with self.lock:
            self.requests.append(req)
        failure = self._take_failure(method, path)
        if failure is not None:
            if failure.status is None:
                raise _Drop()
            req.status = failure.status
            body_out = failure.body if failure.body is not None else {
                "message": f"injected failure ({failure.status})", "documentation_url": DOCS}
            return failure.status, body_out, failure.headers
        try:
            if ident == "bad":
                raise ApiError(401, "Bad credentials")
            route_path = path.rstrip("/") or "/"
            for m, rx, name in _ROUTES:
                match = rx.match(route_path)
                if match and m == method:
                    ctx = Ctx(method, route_path, query, data, ident, match, headers)
                    if ident is None and not name.startswith("public_"):
                        raise ApiError(401, "Requires authentication")
                    with self.lock:
                        status, out, extra = getattr(self, name)(ctx)
                    break
            else:
                raise not_found()
        except ApiError as e:
            status, extra = e.status, dict(e.headers or {})
            out = {"message": e.message, "documentation_url": DOCS, "status": str(e.status)}
            if e.errors:
                out["errors"] = e.errors
        req.status = status
        return status, out, extra

    def handle_git(self, method: str, owner: str, name: str, rest: str, query: str,
                   body: bytes, headers: Mapping[str, str]) -> tuple[int, list[tuple[str, str]], bytes]:
        full = f"{owner}/{name}"
        push = "git-receive-pack" in rest or "service=git-receive-pack" in query
        req = Request(method, f"/{full}.git/{rest}", dict(parse_qsl(query)), None, "")
        with self.lock:
            self.requests.append(req)
        failure = self._take_failure(method, req.path)
        if failure is not None:
            if failure.status is None:
                raise _Drop()
            req.status = failure.status
            return failure.status, [("Content-Type", "text/plain")], b"injected failure\n"
        challenge = [("WWW-Authenticate", 'Basic realm="GitHub"'), ("Content-Type", "text/plain")]
        try:
            ident = self.authenticate(headers.get("Authorization"))
        except ApiError:
            ident = None
        req.auth = _describe(ident)
        with self.lock:
            r = self.repos.get(full)
            if r is None:
                req.status = 404
                return 404, [("Content-Type", "text/plain")], b"Repository not found.\n"
            if not isinstance(ident, Token):
                if push or r.private:
                    req.status = 401
                    return 401, challenge, b"Authentication required\n"
                user = "anonymous"
            else:
                user = ident.user.login
                need = "write" if push else "read"
                if not self._allowed(ident, r, need):
                    req.status = 403
                    return 403, [("Content-Type", "text/plain")], (
                        f"Permission to {full}.git denied to {user}.\n".encode())
            before = git.refs(r.bare) if push and method == "POST" else None
        status, out_headers, payload = git.http_backend(
            self.git_root, f"/{owner}/{name}.git/{rest}", method, query,
            headers.get("Content-Type", ""), body, user, dict(headers))
        if before is not None:
            after = git.refs(r.bare)
            with self.lock:
                for ref in sorted(set(before) | set(after)):
                    if before.get(ref) != after.get(ref):
                        self.pushes.append(Push(full, ref, before.get(ref), after.get(ref), user))
        req.status = status
        return status, out_headers, payload

    # ------------------------------------------------------------ authorization

    def _allowed(self, ident: Token | App | None, r: Repo, need: str) -> bool:
        if isinstance(ident, Token):
            if ident.installation is not None:
                # the app's permissions cover everything the bot does
                return r.full_name in ident.installation.repos
            return ROLE_RANK[r.role(ident.user.login)] >= ROLE_RANK[need]
        return False

    def _repo_for(self, ctx: Ctx, need: str = "read") -> Repo:
        r = self.repos.get(f"{ctx['owner']}/{ctx['repo']}")
        if r is None:
            raise not_found()
        if isinstance(ctx.ident, App):
            raise ApiError(403, "A JSON web token cannot be used to access this resource; "
                                "use an installation token")
        if isinstance(ctx.ident, Token) and ctx.ident.installation is not None:
            if r.full_name not in ctx.ident.installation.repos:
                raise not_found()
            return r
        if need == "read" and not r.private:
            return r
        if not self._allowed(ctx.ident, r, need):
            if r.private and not self._allowed(ctx.ident, r, "read"):
                raise not_found()
            raise ApiError(403, "Resource not accessible by personal access token"
                           if isinstance(ctx.ident, Token) else "Must have admin rights to Repository.")
        return r

    def _me(self, ctx: Ctx) -> User:
        if isinstance(ctx.ident, Token):
            return ctx.ident.user
        raise ApiError(403, "Resource not accessible by integration")

    def _need_app(self, ctx: Ctx) -> App:
        if not isinstance(ctx.ident, App):
            raise ApiError(401, "A JSON web token could not be decoded")
        return ctx.ident

    # ------------------------------------------------------------ pagination

    def _page(self, ctx: Ctx, items: list, wrap: str | None = None,
              total: int | None = None) -> tuple[int, Any, dict[str, str]]:
        try:
            per_page = max(1, min(100, int(ctx.query.get("per_page", 30))))
            page = max(1, int(ctx.query.get("page", 1)))
        except ValueError:
            raise ApiError(422, "Invalid pagination") from None
        last = max(1, -(-len(items) // per_page))
        chunk = items[(page - 1) * per_page: page * per_page]
        links = []

        def link(p: int, rel: str) -> str:
            q = dict(ctx.query, per_page=str(per_page), page=str(p))
            qs = "&".join(f"{k}={quote(str(v), safe='')}" for k, v in q.items())
            return f'<{self.url}{ctx.path}?{qs}>; rel="{rel}"'

        if page < last:
            links += [link(page + 1, "next"), link(last, "last")]
        if page > 1:
            links += [link(1, "first"), link(page - 1, "prev")]
        headers = {"Link": ", ".join(links)} if links else {}
        body = {"total_count": len(items) if total is None else total, wrap: chunk} if wrap else chunk
        return 200, body, headers

    # ------------------------------------------------------------ routes: meta, users, apps

    @route("GET", "/")
    def public_root(self, ctx: Ctx):
        return 200, {"current_user_url": f"{self.url}/user"}, {}

    # The App manifest flow (bot/setup_flow.py): `manifest_code` stands for the
    # user creating the App on github.com, which redirects with this code.
    def manifest_code(self, manifest: dict[str, Any], *, owner: str = "rsi-org") -> str:
        code = f"mfc{self._id()}"
        with self.lock:
            self.manifest_codes[code] = (dict(manifest), owner)
        return code

    @route("POST", "/app-manifests/{code}/conversions")
    def public_manifest_conversion(self, ctx: Ctx):
        with self.lock:
            found = self.manifest_codes.pop(ctx["code"], None)  # one use, as on GitHub
        if found is None:
            raise not_found()
        manifest, owner = found
        a = self.register_app(str(manifest.get("name", "rsi-bot")).lower(), owner=owner)
        a.permissions = dict(manifest.get("default_permissions") or {})
        a.events = list(manifest.get("default_events") or [])
        self.manifest_apps[a.id] = manifest
        out = {**shapes.app(self.url, a), "pem": a.private_key_pem,
               "webhook_secret": f"whsec-{a.id}-" + "x" * 24,
               "client_id": f"Iv1.{a.id}", "client_secret": f"cs-{a.id}"}
        return 201, out, {}

    @route("POST", "/login/oauth/access_token")
    def public_oauth_access_token(self, ctx: Ctx):
        """The web flow's code for a user token (GitHub answers 200 with an `error`)."""
        d = ctx.json or {}
        found = self.oauth_codes.pop(str(d.get("code")), None)  # one use
        if found is None:
            return 200, {"error": "bad_verification_code"}, {}
        app_id, login, _redirect = found
        if (d.get("client_id"), d.get("client_secret")) != self.oauth_client(self.apps[app_id]):
            return 200, {"error": "incorrect_client_credentials"}, {}
        value = "ghu_" + secrets.token_hex(18)
        self.tokens[value] = Token(value, self._user(login))
        return 200, {"access_token": value, "token_type": "bearer", "scope": ""}, {}

    def _readable(self, ident: Any, full_name: str) -> bool:
        r = self.repos.get(full_name)
        return r is not None and (not r.private or self._allowed(ident, r, "read"))

    @route("GET", "/user/installations")
    def user_installations(self, ctx: Ctx):
        self._me(ctx)
        items = [{"id": i.id, "app_id": i.app.id, "account": shapes.user(self.url, i.account)}
                 for i in self.installations.values()
                 if any(self._readable(ctx.ident, n) for n in i.repos)]
        return self._page(ctx, items, "installations")

    @route("GET", "/user/installations/{id}/repositories")
    def user_installation_repos(self, ctx: Ctx):
        self._me(ctx)
        inst = self.installations.get(int(ctx["id"]))
        if inst is None:
            raise not_found()
        names = sorted(n for n in inst.repos if self._readable(ctx.ident, n))
        return self._page(ctx, [shapes.repo(self.url, self.repos[n]) for n in names],
                          "repositories")

    @route("GET", "/user")
    def get_user(self, ctx: Ctx):
        return 200, shapes.user(self.url, self._me(ctx)), {}

    @route("GET", "/users/{login}")
    def get_named_user(self, ctx: Ctx):
        u = self.users.get(ctx["login"])
        if u is None:
            raise not_found()
        return 200, shapes.user(self.url, u), {}

    @route("GET", "/app")
    def get_app(self, ctx: Ctx):
        return 200, shapes.app(self.url, self._need_app(ctx)), {}

    @route("GET", "/app/hook/deliveries")
    def list_hook_deliveries(self, ctx: Ctx):
        """Newest first; ``per_page`` (max 100) and ``cursor`` (from the ``Link`` header),
        ``status=success|failure``; a JSON array, as GitHub answers."""
        self._need_app(ctx)
        try:
            per_page = max(1, min(100, int(ctx.query.get("per_page", 30))))
            cursor = int(ctx.query["cursor"]) if "cursor" in ctx.query else None
        except ValueError:
            raise ApiError(422, "Invalid pagination") from None
        with self.lock:
            items = [d for d in reversed(self.hook_deliveries)
                     if cursor is None or d.id < cursor]
        want = ctx.query.get("status")
        if want in ("success", "failure"):
            items = [d for d in items if (200 <= d.status_code < 300) == (want == "success")]
        chunk = items[:per_page]
        headers = {}
        if len(items) > per_page:
            q = dict(ctx.query, per_page=str(per_page), cursor=str(chunk[-1].id))
            qs = "&".join(f"{k}={quote(str(v), safe='')}" for k, v in q.items())
            headers["Link"] = f'<{self.url}{ctx.path}?{qs}>; rel="next"'
        return 200, [shapes.hook_delivery(d) for d in chunk], headers

    @route("GET", "/app/hook/deliveries/{id}")
    def get_hook_delivery(self, ctx: Ctx):
        self._need_app(ctx)
        d = next((d for d in self.hook_deliveries if d.id == int(ctx["id"])), None)
        if d is None:
            raise not_found()
        return 200, shapes.hook_delivery(d, full=True), {}

    @route("POST", "/app/hook/deliveries/{id}/attempts")
    def redeliver_hook(self, ctx: Ctx):
        """202, then the same body is delivered again under the same guid (in the
        background, as on GitHub: the answer does not wait for the delivery)."""
        self._need_app(ctx)
        d = next((d for d in self.hook_deliveries if d.id == int(ctx["id"])), None)
        if d is None:
            raise not_found()
        t = threading.Thread(target=self._deliver, args=(d.guid, d.event, d.action, d.body),
                             kwargs={"redelivery": True, "installation_id": d.installation_id},
                             daemon=True, name=f"redeliver-{d.id}")
        self._senders.append(t)
        t.start()
        return 202, {}, {}

    @route("GET", "/app/installations")
    def list_installations(self, ctx: Ctx):
        a = self._need_app(ctx)
        items = [shapes.installation(self.url, a, i.id, i.account) for i in a.installations.values()]
        return self._page(ctx, items)

    @route("GET", "/app/installations/{id}")
    def get_installation(self, ctx: Ctx):
        a = self._need_app(ctx)
        inst = a.installations.get(int(ctx["id"]))
        if inst is None:
            raise not_found()
        return 200, shapes.installation(self.url, a, inst.id, inst.account), {}

    @route("POST", "/app/installations/{id}/access_tokens")
    def create_access_token(self, ctx: Ctx):
        a = self._need_app(ctx)
        inst = a.installations.get(int(ctx["id"]))
        if inst is None:
            raise not_found()
        t = self._issue_installation_token(inst)
        return 201, {"token": t.value, "expires_at": shapes.iso(t.expires_at),
                     "permissions": dict(a.permissions), "repository_selection": "selected"}, {}

    @route("GET", "/repos/{owner}/{repo}/installation")
    def get_repo_installation(self, ctx: Ctx):
        a = self._need_app(ctx)
        full = f"{ctx['owner']}/{ctx['repo']}"
        inst = next((i for i in a.installations.values() if full in i.repos), None)
        if inst is None:
            raise not_found()
        return 200, shapes.installation(self.url, a, inst.id, inst.account), {}

    @route("GET", "/installation/repositories")
    def list_installation_repos(self, ctx: Ctx):
        if not (isinstance(ctx.ident, Token) and ctx.ident.installation):
            raise ApiError(403, "This endpoint requires an installation token")
        items = [shapes.repo(self.url, self.repos[n]) for n in sorted(ctx.ident.installation.repos)]
        return self._page(ctx, items, "repositories")

    # ------------------------------------------------------------ routes: repos, contents, git data

    @route("GET", "/repos/{owner}/{repo}")
    def get_repo(self, ctx: Ctx):
        return 200, shapes.repo(self.url, self._repo_for(ctx)), {}

    @route("GET", "/repos/{owner}/{repo}/collaborators/{user}/permission")
    def get_permission(self, ctx: Ctx):
        r = self._repo_for(ctx)
        u = self.users.get(ctx["user"])
        if u is None:
            raise ApiError(404, f"{ctx['user']} is not a user")
        role = r.role(u.login)
        legacy = {"admin": "admin", "maintain": "write", "write": "write", "triage": "read",
                  "read": "read", "none": "none"}[role]
        return 200, {"permission": legacy, "role_name": role,
                     "user": shapes.user(self.url, u)}, {}

    @route("GET", "/repos/{owner}/{repo}/branches/{branch}")
    def get_branch(self, ctx: Ctx):
        r = self._repo_for(ctx)
        sha = git.resolve(r.bare, f"refs/heads/{ctx['branch']}")
        if sha is None:
            raise ApiError(404, "Branch not found")
        return 200, {"name": ctx["branch"], "protected": False,
                     "commit": self._commit_json(r, sha),
                     "_links": {"self": f"{self.url}/repos/{r.full_name}/branches/{ctx['branch']}",
                                "html": f"{self.url}/{r.full_name}/tree/{ctx['branch']}"}}, {}

    @route("GET", "/repos/{owner}/{repo}/git/ref/(?P<ref>.+)")
    def get_git_ref(self, ctx: Ctx):
        r = self._repo_for(ctx)
        ref = "refs/" + ctx["ref"]
        sha = git.resolve(r.bare, ref) if ref in git.refs(r.bare) else None
        if sha is None:
            raise not_found()
        return 200, {"ref": ref, "node_id": shapes.node_id("Ref", r.id),
                     "url": f"{self.url}/repos/{r.full_name}/git/{ref}",
                     "object": {"sha": sha, "type": "commit",
                                "url": f"{self.url}/repos/{r.full_name}/git/commits/{sha}"}}, {}

    @route("GET", "/repos/{owner}/{repo}/commits/{ref}")
    def get_commit(self, ctx: Ctx):
        r = self._repo_for(ctx)
        sha = git.resolve(r.bare, ctx["ref"])
        if sha is None:
            raise ApiError(422, f"No commit found for SHA: {ctx['ref']}")
        return 200, self._commit_json(r, sha), {}

    def _commit_json(self, r: Repo, sha: str) -> dict[str, Any]:
        fmt = "%T%n%P%n%an%n%ae%n%aI%n%B"
        tree, parents, an, ae, at, *msg = git.out(r.bare, "show", "-s", f"--format={fmt}", sha).split("\n")
        api = f"{self.url}/repos/{r.full_name}"
        return {"sha": sha, "node_id": shapes.node_id("Commit", r.id),
                "url": f"{api}/commits/{sha}", "html_url": f"{self.url}/{r.full_name}/commit/{sha}",
                "commit": {"message": "\n".join(msg).strip(), "url": f"{api}/git/commits/{sha}",
                           "tree": {"sha": tree, "url": f"{api}/git/trees/{tree}"},
                           "author": {"name": an, "email": ae, "date": at},
                           "committer": {"name": an, "email": ae, "date": at}},
                "parents": [{"sha": p, "url": f"{api}/commits/{p}"} for p in parents.split()],
                "author": None, "committer": None}

    @route("GET", "/repos/{owner}/{repo}/contents")
    def get_root_contents(self, ctx: Ctx):
        return self._contents(ctx, "")

    @route("GET", "/repos/{owner}/{repo}/contents/(?P<path>.+)")
    def get_contents(self, ctx: Ctx):
        return self._contents(ctx, ctx["path"].strip("/"))

    def _contents(self, ctx: Ctx, path: str):
        r = self._repo_for(ctx)
        ref = ctx.query.get("ref") or r.default_branch
        commit = git.resolve(r.bare, ref)
        if commit is None:
            raise ApiError(404, f"No commit found for the ref {ref}")
        kind = git.object_type(r.bare, f"{commit}:{path}") if path else "tree"
        api = f"{self.url}/repos/{r.full_name}/contents"

        def entry(p: str, typ: str, sha: str, size: int) -> dict[str, Any]:
            url = f"{api}/{p}?ref={quote(ref, safe='')}"
            html = f"{self.url}/{r.full_name}/{'blob' if typ == 'file' else 'tree'}/{ref}/{p}"
            git_url = f"{self.url}/repos/{r.full_name}/git/{'blobs' if typ == 'file' else 'trees'}/{sha}"
            return {"type": typ, "size": size, "name": p.rsplit("/", 1)[-1], "path": p,
                    "sha": sha, "url": url, "git_url": git_url, "html_url": html,
                    "download_url": f"{self.url}/raw/{r.full_name}/{ref}/{p}" if typ == "file" else None,
                    "_links": {"self": url, "git": git_url, "html": html}}

        if kind == "blob":
            data = git.read_blob(r.bare, f"{commit}:{path}")
            sha = git.out(r.bare, "rev-parse", f"{commit}:{path}")
            d = entry(path, "file", sha, len(data))
            if len(data) > 1_000_000:
                d.update(content="", encoding="none")
            else:
                b64 = base64.b64encode(data).decode()
                d.update(content="\n".join(b64[i:i + 60] for i in range(0, len(b64), 60)) + "\n",
                         encoding="base64")
            return 200, d, {}
        if kind == "tree":
            rows = git.ls_tree(r.bare, commit, path + "/" if path else "")
            items = [entry(f"{path}/{n}" if path else n, "file" if t == "blob" else "dir", s, size)
                     for _, t, s, size, n in rows]
            return 200, items, {}
        raise not_found()

    @route("GET", "/repos/{owner}/{repo}/git/blobs/{sha}")
    def get_blob(self, ctx: Ctx):
        r = self._repo_for(ctx)
        if git.object_type(r.bare, ctx["sha"]) != "blob":
            raise not_found()
        data = git.read_blob(r.bare, ctx["sha"])
        return 200, {"sha": ctx["sha"], "node_id": shapes.node_id("Blob", r.id), "size": len(data),
                     "url": f"{self.url}/repos/{r.full_name}/git/blobs/{ctx['sha']}",
                     "content": base64.b64encode(data).decode(), "encoding": "base64"}, {}

    # ------------------------------------------------------------ routes: issues, comments, labels

    def _issue_for(self, r: Repo, number: str) -> Issue:
        i = r.issues.get(int(number))
        if i is None:
            raise not_found()
        return i

    @route("GET", "/repos/{owner}/{repo}/issues/{number}")
    def get_issue(self, ctx: Ctx):
        r = self._repo_for(ctx)
        i = self._issue_for(r, ctx["number"])
        self._refresh_pull(r, i)
        return 200, shapes.issue(self.url, r, i), {}

    @route("POST", "/repos/{owner}/{repo}/issues")
    def create_issue(self, ctx: Ctx):
        r = self._repo_for(ctx)
        d = ctx.json or {}
        if not d.get("title"):
            raise invalid("Issue", "title", "missing_field")
        _check_body(d.get("body"))
        i = Issue(self._next_number(r), self._id(), d["title"], d.get("body"), self._actor(ctx),
                  labels=list(d.get("labels") or []))
        r.issues[i.number] = i
        return 201, shapes.issue(self.url, r, i), {}

    @route("PATCH", "/repos/{owner}/{repo}/issues/{number}")
    def edit_issue(self, ctx: Ctx):
        r = self._repo_for(ctx, "triage")
        i = self._issue_for(r, ctx["number"])
        d = ctx.json or {}
        if "title" in d:
            i.title = d["title"]
        if "body" in d:
            _check_body(d["body"])
            i.body = d["body"]
        if "labels" in d:
            i.labels = [x if isinstance(x, str) else x["name"] for x in d["labels"]]
        if d.get("state") in ("open", "closed") and d["state"] != i.state:
            i.state = d["state"]
            i.closed_at = now() if i.state == "closed" else None
        i.updated_at = now()
        return 200, shapes.issue(self.url, r, i), {}

    @route("GET", "/repos/{owner}/{repo}/issues/{number}/comments")
    def list_comments(self, ctx: Ctx):
        r = self._repo_for(ctx)
        self._issue_for(r, ctx["number"])
        items = [shapes.comment(self.url, r, c) for c in r.comments_of(int(ctx["number"]))]
        return self._page(ctx, items)

    @route("POST", "/repos/{owner}/{repo}/issues/{number}/comments")
    def create_comment(self, ctx: Ctx):
        r = self._repo_for(ctx)
        self._issue_for(r, ctx["number"])
        body = (ctx.json or {}).get("body")
        if not isinstance(body, str) or not body:
            raise invalid("IssueComment", "body", "missing_field")
        _check_body(body)
        c = self._add_comment(r, int(ctx["number"]), body, self._actor(ctx))
        return 201, shapes.comment(self.url, r, c), {}

    def _comment_for(self, r: Repo, cid: str) -> Comment:
        c = r.comments.get(int(cid))
        if c is None:
            raise not_found()
        return c

    @route("GET", "/repos/{owner}/{repo}/issues/comments/{id}")
    def get_comment(self, ctx: Ctx):
        r = self._repo_for(ctx)
        return 200, shapes.comment(self.url, r, self._comment_for(r, ctx["id"])), {}

    @route("PATCH", "/repos/{owner}/{repo}/issues/comments/{id}")
    def edit_comment(self, ctx: Ctx):
        r = self._repo_for(ctx)
        c = self._comment_for(r, ctx["id"])
        me = self._actor(ctx)
        if c.user is not me and not self._allowed(ctx.ident, r, "write"):
            raise ApiError(403, "You cannot edit this comment")
        body = (ctx.json or {}).get("body")
        if not isinstance(body, str) or not body:
            raise invalid("IssueComment", "body", "missing_field")
        _check_body(body)
        c.body, c.updated_at = body, now()
        return 200, shapes.comment(self.url, r, c), {}

    @route("DELETE", "/repos/{owner}/{repo}/issues/comments/{id}")
    def delete_comment(self, ctx: Ctx):
        r = self._repo_for(ctx)
        c = self._comment_for(r, ctx["id"])
        if c.user is not self._actor(ctx) and not self._allowed(ctx.ident, r, "write"):
            raise ApiError(403, "You cannot delete this comment")
        del r.comments[c.id]
        return 204, None, {}

    @route("GET", "/repos/{owner}/{repo}/issues/comments/{id}/reactions")
    def list_reactions(self, ctx: Ctx):
        r = self._repo_for(ctx)
        c = self._comment_for(r, ctx["id"])
        items = [shapes.reaction(self.url, x.id, x.content, x.user, x.created_at) for x in c.reactions
                 if "content" not in ctx.query or x.content == ctx.query["content"]]
        return self._page(ctx, items)

    @route("POST", "/repos/{owner}/{repo}/issues/comments/{id}/reactions")
    def create_reaction(self, ctx: Ctx):
        r = self._repo_for(ctx)
        c = self._comment_for(r, ctx["id"])
        content = (ctx.json or {}).get("content")
        if content not in REACTIONS:
            raise invalid("Reaction", "content", "invalid")
        me = self._actor(ctx)
        for x in c.reactions:
            if x.user is me and x.content == content:
                return 200, shapes.reaction(self.url, x.id, x.content, x.user, x.created_at), {}
        x = Reaction(self._id(), content, me)
        c.reactions.append(x)
        return 201, shapes.reaction(self.url, x.id, x.content, x.user, x.created_at), {}

    @route("GET", "/repos/{owner}/{repo}/labels/{name}")
    def get_repo_label(self, ctx: Ctx):
        r = self._repo_for(ctx)
        if ctx["name"] not in r.labels and ctx["name"] not in r.label_meta:
            raise not_found()
        return 200, shapes.label(self.url, r, ctx["name"]), {}

    @route("POST", "/repos/{owner}/{repo}/labels")
    def create_repo_label(self, ctx: Ctx):
        r = self._repo_for(ctx, "write")
        d = ctx.json if isinstance(ctx.json, dict) else {}
        name = d.get("name")
        if not isinstance(name, str) or not name:
            raise ApiError(422, "Validation Failed")
        if name in r.labels or name in r.label_meta:
            raise ApiError(422, "Validation Failed: already_exists")
        r.label_meta[name] = (str(d.get("color") or "ededed"), str(d.get("description") or ""))
        return 201, shapes.label(self.url, r, name), {}

    @route("GET", "/repos/{owner}/{repo}/issues/{number}/labels")
    def list_labels(self, ctx: Ctx):
        r = self._repo_for(ctx)
        i = self._issue_for(r, ctx["number"])
        return self._page(ctx, [shapes.label(self.url, r, n) for n in i.labels])

    @route("POST", "/repos/{owner}/{repo}/issues/{number}/labels")
    def add_labels(self, ctx: Ctx):
        r = self._repo_for(ctx, "triage")
        i = self._issue_for(r, ctx["number"])
        d = ctx.json
        names = d.get("labels", []) if isinstance(d, dict) else (d or [])
        for n in names:
            n = n if isinstance(n, str) else n["name"]
            if n not in i.labels:
                i.labels.append(n)
        return 200, [shapes.label(self.url, r, n) for n in i.labels], {}

    @route("PUT", "/repos/{owner}/{repo}/issues/{number}/labels")
    def set_labels(self, ctx: Ctx):
        r = self._repo_for(ctx, "triage")
        i = self._issue_for(r, ctx["number"])
        d = ctx.json
        names = d.get("labels", []) if isinstance(d, dict) else (d or [])
        i.labels = [n if isinstance(n, str) else n["name"] for n in names]
        return 200, [shapes.label(self.url, r, n) for n in i.labels], {}

    @route("DELETE", "/repos/{owner}/{repo}/issues/{number}/labels/{name}")
    def remove_label(self, ctx: Ctx):
        r = self._repo_for(ctx, "triage")
        i = self._issue_for(r, ctx["number"])
        if ctx["name"] not in i.labels:
            raise ApiError(404, "Label does not exist")
        i.labels.remove(ctx["name"])
        return 200, [shapes.label(self.url, r, n) for n in i.labels], {}

    def _actor(self, ctx: Ctx) -> User:
        if isinstance(ctx.ident, Token):
            return ctx.ident.user
        raise ApiError(403, "Resource not accessible by integration")

    # ------------------------------------------------------------ routes: pulls

    def _pull_for(self, r: Repo, number: str) -> Issue:
        i = r.issues.get(int(number))
        if i is None or i.pull is None:
            raise not_found()
        self._refresh_pull(r, i)
        return i

    @route("GET", "/repos/{owner}/{repo}/pulls")
    def list_pulls(self, ctx: Ctx):
        r = self._repo_for(ctx)
        state = ctx.query.get("state", "open")
        head = ctx.query.get("head")
        base = ctx.query.get("base")
        items = []
        for i in r.issues.values():
            if i.pull is None or (state != "all" and i.state != state):
                continue
            self._refresh_pull(r, i)
            owner = i.user.login if i.pull.head_repo else r.owner.login
            if head and f"{owner}:{i.pull.head_ref}" != head:
                continue
            if base and i.pull.base_ref != base:
                continue
            items.append(i)
        sort = ctx.query.get("sort", "created")
        key = (lambda i: i.updated_at) if sort in ("updated", "long-running") else (lambda i: i.created_at)
        items.sort(key=lambda i: (key(i), i.number),
                   reverse=ctx.query.get("direction", "desc") == "desc")
        return self._page(ctx, [shapes.pull(self.url, r, i) for i in items])

    @route("POST", "/repos/{owner}/{repo}/pulls")
    def create_pull(self, ctx: Ctx):
        r = self._repo_for(ctx)
        d = ctx.json or {}
        for f in ("title", "head", "base"):
            if not d.get(f):
                raise invalid("PullRequest", f, "missing_field")
        head = d["head"].split(":", 1)[-1]
        if ":" in d["head"] and d["head"].split(":", 1)[0] != r.owner.login:
            raise invalid("PullRequest", "head", "invalid")  # forks are not modelled
        base = d["base"]
        if not self._allowed(ctx.ident, r, "read"):
            raise not_found()
        head_sha = git.resolve(r.bare, f"refs/heads/{head}")
        base_sha = git.resolve(r.bare, f"refs/heads/{base}")
        if base_sha is None:
            raise invalid("PullRequest", "base", "invalid")
        if head_sha is None:
            raise invalid("PullRequest", "head", "invalid")
        for i in r.issues.values():
            if (i.pull and i.state == "open" and i.pull.head_ref == head and i.pull.base_ref == base
                    and i.pull.head_repo is None):
                raise ApiError(422, "Validation Failed", [{
                    "resource": "PullRequest", "code": "custom",
                    "message": f"A pull request already exists for {r.owner.login}:{head}."}])
        if git.is_ancestor(r.bare, head_sha, base_sha):
            raise ApiError(422, "Validation Failed", [{
                "resource": "PullRequest", "code": "custom",
                "message": f"No commits between {base} and {head}"}])
        _check_body(d.get("body"))
        i = Issue(self._next_number(r), self._id(), d["title"], d.get("body"), self._actor(ctx),
                  pull=PullState(head, head_sha, base, base_sha, bool(d.get("draft", False))))
        r.issues[i.number] = i
        return 201, shapes.pull(self.url, r, i), {}

    @route("GET", "/repos/{owner}/{repo}/pulls/{number}")
    def get_pull(self, ctx: Ctx):
        r = self._repo_for(ctx)
        return 200, shapes.pull(self.url, r, self._pull_for(r, ctx["number"])), {}

    @route("PATCH", "/repos/{owner}/{repo}/pulls/{number}")
    def edit_pull(self, ctx: Ctx):
        r = self._repo_for(ctx)
        i = self._pull_for(r, ctx["number"])
        if i.user is not self._actor(ctx) and not self._allowed(ctx.ident, r, "write"):
            raise ApiError(403, "Resource not accessible")
        d = ctx.json or {}
        if "title" in d:
            i.title = d["title"]
        if "body" in d:
            _check_body(d["body"])
            i.body = d["body"]
        if d.get("state") in ("open", "closed") and i.pull.merged_at is None:
            i.state = d["state"]
            i.closed_at = now() if i.state == "closed" else None
        i.updated_at = now()
        return 200, shapes.pull(self.url, r, i), {}

    @route("GET", "/repos/{owner}/{repo}/pulls/{number}/requested_reviewers")
    def list_requested_reviewers(self, ctx: Ctx):
        r = self._repo_for(ctx)
        i = self._pull_for(r, ctx["number"])
        return 200, {"users": [shapes.user(self.url, u) for u in i.pull.requested_reviewers],
                     "teams": []}, {}

    @route("POST", "/repos/{owner}/{repo}/pulls/{number}/requested_reviewers")
    def request_reviewers(self, ctx: Ctx):
        r = self._repo_for(ctx, "triage")
        i = self._pull_for(r, ctx["number"])
        logins = (ctx.json or {}).get("reviewers") or []
        for login in logins:
            u = self.users.get(login)
            if u is None or (login not in r.roles and login != r.owner.login):
                raise ApiError(422, "Reviews may only be requested from collaborators. One or "
                               f"more of the users or teams you specified is not a collaborator "
                               f"of the {r.full_name} repository.")
            if u is i.user:
                raise ApiError(422, "Review cannot be requested from pull request author.")
        for login in logins:
            u = self.users[login]
            if u not in i.pull.requested_reviewers:
                i.pull.requested_reviewers.append(u)
        return 201, shapes.pull(self.url, r, i), {}

    # ------------------------------------------------------------ routes: check runs

    @route("POST", "/repos/{owner}/{repo}/check-runs")
    def create_check_run(self, ctx: Ctx):
        r = self._repo_for(ctx, "write")
        inst = self._need_installation(ctx)
        d = ctx.json or {}
        if not d.get("name"):
            raise invalid("CheckRun", "name", "missing_field")
        sha = d.get("head_sha") or ""
        if not re.fullmatch(r"[0-9a-f]{40}", sha) or git.object_type(r.bare, sha) != "commit":
            raise ApiError(422, "No commit found for SHA: " + sha)
        c = CheckRun(self._id(), d["name"], sha, "queued", None, {}, inst.app.id, inst.app.slug)
        self._apply_check(c, d)
        r.check_runs[c.id] = c
        return 201, shapes.check_run(self.url, r, c), {}

    @route("GET", "/repos/{owner}/{repo}/check-runs/{id}")
    def get_check_run(self, ctx: Ctx):
        r = self._repo_for(ctx)
        c = r.check_runs.get(int(ctx["id"]))
        if c is None:
            raise not_found()
        return 200, shapes.check_run(self.url, r, c), {}

    @route("PATCH", "/repos/{owner}/{repo}/check-runs/{id}")
    def update_check_run(self, ctx: Ctx):
        r = self._repo_for(ctx, "write")
        inst = self._need_installation(ctx)
        c = r.check_runs.get(int(ctx["id"]))
        if c is None:
            raise not_found()
        if c.app_id != inst.app.id:
            raise ApiError(403, f"Invalid app_id `{inst.app.id}` - check run can only be "
                                "modified by the GitHub App that created it.")
        self._apply_check(c, ctx.json or {})
        return 200, shapes.check_run(self.url, r, c), {}

    @route("GET", "/repos/{owner}/{repo}/commits/{ref}/check-runs")
    def list_check_runs(self, ctx: Ctx):
        r = self._repo_for(ctx)
        sha = git.resolve(r.bare, ctx["ref"])
        if sha is None:
            raise ApiError(422, f"No commit found for SHA: {ctx['ref']}")
        runs = [c for c in r.check_runs.values() if c.head_sha == sha
                and ("check_name" not in ctx.query or c.name == ctx.query["check_name"])]
        if ctx.query.get("filter", "latest") == "latest":
            latest: dict[str, CheckRun] = {}
            for c in runs:
                latest[c.name] = c
            runs = list(latest.values())
        return self._page(ctx, [shapes.check_run(self.url, r, c) for c in runs], "check_runs")

    def _need_installation(self, ctx: Ctx) -> Installation:
        if isinstance(ctx.ident, Token) and ctx.ident.installation is not None:
            return ctx.ident.installation
        raise ApiError(403, "You must authenticate via a GitHub App.")

    def _apply_check(self, c: CheckRun, d: Mapping[str, Any]) -> None:
        status = d.get("status")
        conclusion = d.get("conclusion")
        if status is not None and status not in CHECK_STATUSES:
            raise invalid("CheckRun", "status", "invalid")
        if conclusion is not None and conclusion not in CHECK_CONCLUSIONS:
            raise invalid("CheckRun", "conclusion", "invalid")
        if status == "completed" and conclusion is None and c.conclusion is None:
            raise ApiError(422, "Invalid request.\n\nNo subschema in \"anyOf\" matched.\n"
                                "\"conclusion\" wasn't supplied.")
        output = d.get("output")
        if output is not None:
            if not isinstance(output, dict) or "title" not in output or "summary" not in output:
                raise ApiError(422, "Invalid request.\n\n\"title\", \"summary\" weren't supplied.")
            for key in ("summary", "text"):
                if len(output.get(key) or "") > MAX_SUMMARY:
                    raise ApiError(422, "Invalid request.\n\nOnly 65535 characters are allowed; "
                                        f"{len(output[key])} were supplied.")
            c.output = {k: output.get(k) for k in ("title", "summary", "text")}
        for key in ("name", "details_url", "external_id"):
            if key in d:
                setattr(c, key, d[key])
        if conclusion is not None:
            c.conclusion, c.status, c.completed_at = conclusion, "completed", now()
        elif status is not None:
            c.status = status

    # ------------------------------------------------------------ routes: actions

    def _workflow(self, r: Repo, file: str, ref: str | None = None) -> tuple[int, str]:
        """(id, file name) of a workflow named by file name or id; 404 unless the file exists."""
        by_id = {str(i): f for f, i in r.workflow_ids.items()}
        file = by_id.get(file, file)
        commit = git.resolve(r.bare, ref or r.default_branch)
        path = f".github/workflows/{file}"
        if commit is None or git.object_type(r.bare, f"{commit}:{path}") != "blob":
            raise not_found()
        if file not in r.workflow_ids:
            r.workflow_ids[file] = self._id()
        return r.workflow_ids[file], file

    @route("GET", "/repos/{owner}/{repo}/actions/workflows/{file}")
    def get_workflow(self, ctx: Ctx):
        r = self._repo_for(ctx)
        wid, file = self._workflow(r, ctx["file"])
        return 200, shapes.workflow(self.url, r, wid, file), {}

    @route("POST", "/repos/{owner}/{repo}/actions/workflows/{file}/dispatches")
    def dispatch_workflow(self, ctx: Ctx):
        r = self._repo_for(ctx, "write")
        d = ctx.json or {}
        ref = d.get("ref")
        if not ref:
            raise ApiError(422, "Invalid request.\n\n\"ref\" wasn't supplied.")
        sha = git.resolve(r.bare, ref)
        if sha is None:
            raise ApiError(422, f"No ref found for: {ref}")
        wid, file = self._workflow(r, ctx["file"], ref)
        inputs = d.get("inputs") or {}
        if not isinstance(inputs, dict) or len(inputs) > 25:
            raise ApiError(422, "inputs must be an object of at most 25 properties")
        for k, v in inputs.items():
            if not isinstance(v, (str, bool, int, float)):
                raise ApiError(422, f"Invalid value for input '{k}'")
        branch = ref.removeprefix("refs/heads/")
        actor = ctx.ident.user if isinstance(ctx.ident, Token) else self._user("ghost")
        text = git.read_blob(r.bare, f"{sha}:.github/workflows/{file}").decode(errors="replace")
        w = WorkflowRun(self._id(), wid, file, ref, dict(inputs), branch, sha, actor,
                        run_number=len(r.runs) + 1,
                        display_title=_run_name(text, inputs) or file.rsplit(".", 1)[0])
        r.runs[w.id] = w
        if d.get("return_run_details"):
            return 200, {"workflow_run_id": w.id,
                         "run_url": f"{self.url}/repos/{r.full_name}/actions/runs/{w.id}",
                         "html_url": f"{self.url}/{r.full_name}/actions/runs/{w.id}"}, {}
        return 204, None, {}

    @route("GET", "/repos/{owner}/{repo}/actions/workflows/{file}/runs")
    def list_workflow_runs(self, ctx: Ctx):
        """Newest first; ``event``, ``status``, ``branch`` and ``created`` (``>=DATE``) filters."""
        r = self._repo_for(ctx)
        wid, _file = self._workflow(r, ctx["file"])
        q = ctx.query
        since = None
        if q.get("created", "").startswith(">="):
            since = datetime.fromisoformat(q["created"][2:].replace("Z", "+00:00"))
        runs = [w for w in sorted(r.runs.values(), key=lambda w: w.id, reverse=True)
                if w.workflow_id == wid
                and q.get("event", "workflow_dispatch") == "workflow_dispatch"
                and q.get("status", w.status) in (w.status, w.conclusion)
                and q.get("branch", w.head_branch) == w.head_branch
                and (since is None or w.created_at >= since)]
        return self._page(ctx, [shapes.workflow_run(self.url, r, w) for w in runs],
                          "workflow_runs")

    @route("GET", "/repos/{owner}/{repo}/actions/runs/{id}")
    def get_workflow_run(self, ctx: Ctx):
        r = self._repo_for(ctx)
        w = r.runs.get(int(ctx["id"]))
        if w is None:
            raise not_found()
        return 200, shapes.workflow_run(self.url, r, w), {}

    @route("POST", "/repos/{owner}/{repo}/actions/runs/{id}/cancel")
    def cancel_workflow_run(self, ctx: Ctx):
        r = self._repo_for(ctx, "write")
        w = r.runs.get(int(ctx["id"]))
        if w is None:
            raise not_found()
        if w.status == "completed":
            raise ApiError(409, "Cannot cancel a workflow run that is completed.")
        w.status, w.conclusion, w.updated_at = "completed", "cancelled", now()
        return 202, {}, {}

    @route("GET", "/repos/{owner}/{repo}/actions/runs/{id}/artifacts")
    def list_run_artifacts(self, ctx: Ctx):
        r = self._repo_for(ctx)
        w = r.runs.get(int(ctx["id"]))
        if w is None:
            raise not_found()
        items = [shapes.artifact(self.url, r, a) for a in w.artifacts
                 if "name" not in ctx.query or a.name == ctx.query["name"]]
        return self._page(ctx, items, "artifacts")

    def _artifact(self, r: Repo, aid: str) -> Artifact:
        for w in r.runs.values():
            for a in w.artifacts:
                if a.id == int(aid):
                    return a
        raise not_found()

    @route("GET", "/repos/{owner}/{repo}/actions/artifacts/{id}")
    def get_artifact(self, ctx: Ctx):
        r = self._repo_for(ctx)
        return 200, shapes.artifact(self.url, r, self._artifact(r, ctx["id"])), {}

    @route("GET", "/repos/{owner}/{repo}/actions/artifacts/{id}/{format}")
    def download_artifact(self, ctx: Ctx):
        r = self._repo_for(ctx)
        a = self._artifact(r, ctx["id"])
        if ctx["format"] != "zip":
            raise not_found()
        if a.expired:
            raise ApiError(410, "Artifact has expired")
        key = secrets.token_urlsafe(16)
        self.blobs[key] = a.data
        return 302, None, {"Location": f"{self.url}/_blobs/{key}?sig={secrets.token_hex(8)}"}


class _Drop(Exception):
    """Close the connection without answering (failure injection)."""


def _describe(ident: Any) -> str:
    if isinstance(ident, App):
        return f"app:{ident.id}"
    if isinstance(ident, Token):
        if ident.installation is not None:
            return f"installation:{ident.installation.id}"
        return f"token:{ident.user.login}"
    return ""


def _path_matches(pattern: str | re.Pattern, path: str) -> bool:
    if isinstance(pattern, re.Pattern):
        return pattern.fullmatch(path) is not None
    return pattern.rstrip("/") == path.rstrip("/")


def _check_body(body: Any) -> None:
    if isinstance(body, str) and len(body) > MAX_BODY:
        raise invalid("Issue", "body", "custom",
                      f"body is too long (maximum is {MAX_BODY} characters)")


def make_zip(files: Mapping[str, str | bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, content in files.items():
            z.writestr(name, content)
    return buf.getvalue()


_KEY = None
_KEY_LOCK = threading.Lock()


def _test_key() -> Any:
    """One RSA key per test process (generating one costs ~50 ms)."""
    global _KEY
    with _KEY_LOCK:
        if _KEY is None:
            from cryptography.hazmat.primitives.asymmetric import rsa

            _KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        return _KEY


_RUN_NAME = re.compile(r"^run-name:\s*(.+?)\s*$", re.M)
_EXPR = re.compile(r"\$\{\{\s*(?:inputs\.(\w+)|fromJSON\(inputs\.(\w+)\)\.(\w+))\s*\}\}")


def _run_name(workflow: str, inputs: Mapping[str, Any]) -> str | None:
    """A workflow's ``run-name`` with ``${{ inputs.X }}`` and ``${{ fromJSON(inputs.X).Y }}``
    evaluated (the subset of GitHub's expressions the bot's workflow uses)."""
    m = _RUN_NAME.search(workflow)
    if not m:
        return None
    text = m[1].strip().strip("'\"")

    def value(e: re.Match) -> str:
        if e[1]:
            return str(inputs.get(e[1], ""))
        try:
            doc = json.loads(str(inputs.get(e[2], "")))
        except ValueError:
            return ""
        return str(doc.get(e[3], "")) if isinstance(doc, dict) else ""

    return _EXPR.sub(value, text)


_GIT_PATH = re.compile(r"^/(?P<owner>[^/]+)/(?P<name>[^/]+)\.git/(?P<rest>.*)$")


class _Handler(BaseHTTPRequestHandler):
    fake: FakeGitHub
    protocol_version = "HTTP/1.1"
    server_version = "FakeGitHub/1.0"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _serve(self) -> None:
        parts = urlsplit(self.path)
        path, query = parts.path, parts.query
        body = self._body()
        try:
            m = _GIT_PATH.match(path)
            if m and not path.startswith("/repos/"):
                status, headers, payload = self.fake.handle_git(
                    self.command, m["owner"], m["name"], m["rest"], query, body, self.headers)
                self._send(status, headers, payload)
                return
            if path.startswith("/_blobs/"):
                data = self.fake.blobs.get(path[len("/_blobs/"):])
                if data is None:
                    self._send(404, [("Content-Type", "text/plain")], b"expired\n")
                else:
                    self._send(200, [("Content-Type", "application/zip")], data)
                return
            q = dict(parse_qsl(query, keep_blank_values=True))
            status, out, extra = self.fake.handle_api(self.command, path, q, body, self.headers)
        except _Drop:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        except Exception as e:  # noqa: BLE001  (a bug in the fake: answer 500, loudly)
            import traceback

            traceback.print_exc()
            status, out, extra = 500, {"message": f"fake GitHub crashed: {e!r}"}, {}
        remaining = max(0, self.fake.rate_limit - self.fake.api_calls)
        headers = [("X-RateLimit-Limit", str(self.fake.rate_limit)),
                   ("X-RateLimit-Remaining", str(remaining)),
                   ("X-RateLimit-Reset", "4102444800"), ("X-GitHub-Request-Id", secrets.token_hex(8))]
        override = {k.lower() for k in extra}
        headers = [h for h in headers if h[0].lower() not in override] + list(extra.items())
        if out is None:
            self._send(status, headers, b"")
        else:
            headers.append(("Content-Type", "application/json; charset=utf-8"))
            self._send(status, headers, json.dumps(out).encode())

    def _send(self, status: int, headers: list[tuple[str, str]], payload: bytes) -> None:
        self.send_response(status)
        for k, v in headers:
            if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = do_HEAD = _serve
