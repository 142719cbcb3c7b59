"""The bot's narrow port in front of GitHub.

`GitHubPort` lists exactly the GitHub calls the bot makes (docs/architecture.md, habit 2);
everything else in bot/ talks to GitHub only through it. Results are small
frozen dataclasses, so callers never touch PyGithub objects, and every failure
is a `GitHubError` (with `status` and `retryable`), never a PyGithub exception.

`PyGithubPort` implements it with PyGithub, authenticated either by a token
(development) or as a GitHub App (app id + private key -> installation tokens
through `Auth.AppAuth(...).get_installation_auth(...)`). `base_url` points it at
GitHub Enterprise or at the fake GitHub of the tests. No business logic here.

Repositories are named `"owner/name"` everywhere.
"""

from __future__ import annotations

import base64
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

ROLES = ("admin", "maintain", "write", "triage", "read", "none")

VERIFIER_CHECK = "rsi/verifier"


# --------------------------------------------------------------------------- errors


class GitHubError(Exception):
    """A GitHub call failed. `status` is the HTTP status (None: no response at all).

    `retryable` is True for what a later retry may fix (no response, 5xx, 429,
    rate-limit 403); False for what it will not (404, 422, 401...). `retry_after`:
    seconds GitHub asked us to wait (Retry-After, or until the rate limit resets), if any.
    """

    def __init__(self, message: str, *, status: int | None = None, method: str = "",
                 path: str = "", retryable: bool | None = None,
                 retry_after: float | None = None):
        self.status = status
        self.retry_after = retry_after
        self.method = method
        self.path = path
        if retryable is None:
            retryable = status is None or status >= 500 or status == 429
        self.retryable = retryable
        where = f" ({method} {path})" if method or path else ""
        code = f"HTTP {status}: " if status is not None else ""
        super().__init__(f"GitHub {code}{message}{where}")


class NotFound(GitHubError):
    """404: no such repository, issue, pull, comment, file, artifact..."""


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class IssueInfo:
    number: int
    title: str
    body: str
    labels: tuple[str, ...]
    user: str
    is_pull_request: bool
    state: str = "open"
    html_url: str = ""


@dataclass(frozen=True)
class CommentInfo:
    id: int
    body: str
    user: str
    user_type: str = "User"  # "User" | "Bot" | "Organization"
    html_url: str = ""


@dataclass(frozen=True)
class PullInfo:
    number: int
    state: str  # "open" | "closed"
    draft: bool
    merged: bool
    merge_commit_sha: str | None
    head_ref: str
    head_sha: str
    head_repo_full_name: str | None  # None when the fork was deleted
    base_ref: str
    user: str
    body: str
    title: str = ""
    html_url: str = ""


@dataclass(frozen=True)
class CheckRunInfo:
    id: int
    name: str
    head_sha: str
    status: str
    conclusion: str | None
    html_url: str = ""
    external_id: str = ""


@dataclass(frozen=True)
class WorkflowRunInfo:
    id: int
    status: str  # queued | in_progress | completed ...
    conclusion: str | None
    html_url: str = ""
    display_title: str = ""  # the workflow's ``run-name`` (rsi-job's carries the nonce)


@dataclass(frozen=True)
class HookDelivery:
    """One attempt GitHub made to deliver a webhook to the App (``GET /app/hook/deliveries``).
    ``guid`` is the ``X-GitHub-Delivery`` header; a redelivery keeps it."""

    id: int
    guid: str
    delivered_at: float
    status_code: int
    event: str
    action: str | None
    redelivery: bool


@dataclass(frozen=True)
class RateLimit:
    """GitHub's core rate limit as of the last response (no request is made to read it)."""

    remaining: int
    limit: int
    reset_at: float


@dataclass(frozen=True)
class ArtifactInfo:
    id: int
    name: str
    size_in_bytes: int
    expired: bool


class GitRemote(NamedTuple):
    """Where to clone and push a repository over HTTPS, and the token to do it.

    Unpacks as `(url, token)`. Git authenticates with HTTP basic auth, user
    `x-access-token`, password the token; `git_env()` passes it as a header
    through `GIT_CONFIG_*` so it never lands in a URL, a `.git/config` or argv.
    """

    url: str
    token: str

    def basic_auth_header(self) -> str:
        raw = base64.b64encode(f"x-access-token:{self.token}".encode()).decode()
        return f"Authorization: Basic {raw}"

    def git_env(self) -> dict[str, str]:
        """Environment for `git clone/fetch/push <url>` (merge into os.environ)."""
        return {
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": "http.extraHeader",
            "GIT_CONFIG_VALUE_0": self.basic_auth_header(),
            "GIT_TERMINAL_PROMPT": "0",
        }


# --------------------------------------------------------------------------- the port


@runtime_checkable
class GitHubPort(Protocol):
    """The GitHub calls the bot makes. Every method raises `GitHubError` on failure."""

    def bot_login(self) -> str:
        """Our own login (`<app-slug>[bot]` for an App), to ignore our own comments."""
        ...

    def collaborator_role(self, repo: str, user: str) -> str:
        """`role_name`: admin | maintain | write | triage | read | none (also for non-collaborators)."""
        ...

    def get_issue(self, repo: str, number: int) -> IssueInfo: ...

    def list_issue_comments(self, repo: str, number: int) -> list[CommentInfo]:
        """All comments of an issue or PR, oldest first (every page)."""
        ...

    def create_issue_comment(self, repo: str, number: int, body: str) -> CommentInfo: ...

    def edit_issue_comment(self, repo: str, comment_id: int, body: str) -> CommentInfo: ...

    def add_reaction(self, repo: str, comment_id: int, content: str) -> None:
        """React to an issue comment (`+1`, `eyes`, `rocket`, `confused`...)."""
        ...

    def get_file_text(self, repo: str, path: str, ref: str | None = None) -> str | None:
        """A file's text at `ref` (default branch when None); None when it does not exist."""
        ...

    def default_branch(self, repo: str) -> str: ...

    def git_remote(self, repo: str) -> GitRemote:
        """HTTPS clone URL and a token valid for clone and push right now."""
        ...

    def create_pull(self, repo: str, *, title: str, body: str, head: str, base: str,
                    draft: bool = True) -> PullInfo: ...

    def request_reviewers(self, repo: str, number: int, reviewers: Sequence[str]) -> None: ...

    def ensure_label(self, repo: str, name: str, *, color: str, description: str) -> None:
        """The repository has label `name` (created with `color` and `description` if not)."""
        ...

    def add_labels(self, repo: str, number: int, labels: Sequence[str]) -> None:
        """Add `labels` to issue/PR `number` (existing ones stay)."""
        ...

    def get_pull(self, repo: str, number: int) -> PullInfo: ...

    def list_pulls(self, repo: str, *, head_prefix: str = "", state: str = "open") -> list[PullInfo]:
        """Pulls in `state` whose head branch starts with `head_prefix` (every page)."""
        ...

    def create_check_run(self, repo: str, *, head_sha: str, name: str = VERIFIER_CHECK,
                         status: str = "in_progress", conclusion: str | None = None,
                         title: str | None = None, summary: str | None = None,
                         details_url: str | None = None,
                         external_id: str | None = None) -> CheckRunInfo:
        """Create a check run; pass `conclusion` (status then "completed") to finish at once."""
        ...

    def update_check_run(self, repo: str, check_run_id: int, *, status: str | None = None,
                         conclusion: str | None = None, title: str | None = None,
                         summary: str | None = None,
                         details_url: str | None = None) -> CheckRunInfo: ...

    def branch_sha(self, repo: str, branch: str) -> str | None:
        """The commit a branch points at; None when there is no such branch."""
        ...

    def workflow_run(self, repo: str, run_id: int) -> WorkflowRunInfo: ...

    def cancel_workflow_run(self, repo: str, run_id: int) -> bool:
        """Ask GitHub to cancel a run; False when it already finished (409)."""
        ...

    def rate_limit(self) -> RateLimit | None:
        """The lowest remaining core rate limit seen on any client (None: no response yet)."""
        ...

    def dispatch_workflow(self, repo: str, workflow_file: str, ref: str,
                          inputs: Mapping[str, str]) -> int | None:
        """`workflow_dispatch` of `.github/workflows/<workflow_file>` on `ref`; returns the
        run's id where GitHub reports it (`return_run_details`), else None (older GHE)."""
        ...

    def list_run_artifacts(self, repo: str, run_id: int) -> list[ArtifactInfo]: ...

    def download_artifact(self, repo: str, artifact_id: int) -> bytes:
        """The artifact's zip archive, as bytes."""
        ...

    def list_check_runs(self, repo: str, sha: str, name: str = VERIFIER_CHECK
                        ) -> list[CheckRunInfo]:
        """Every check run named `name` on commit `sha` (not only the latest), with
        its `external_id`."""
        ...

    def list_workflow_runs(self, repo: str, workflow_file: str, *,
                           created_since: float | None = None) -> list[WorkflowRunInfo]:
        """`workflow_dispatch` runs of a workflow, newest first (created at or after
        `created_since`, a Unix time, when given)."""
        ...

    def list_hook_deliveries(self, *, since: float) -> list[HookDelivery]:
        """The App's webhook delivery attempts since `since` (Unix time), newest first
        (App JWT; needs a GitHub App)."""
        ...

    def redeliver(self, delivery_id: int) -> None:
        """Ask GitHub to deliver that attempt's webhook again (same guid)."""
        ...


# --------------------------------------------------------------------------- PyGithub


def _default_retry() -> Any:
    """Retry reads and idempotent writes a little; never a POST (it would duplicate a
    comment or a PR). Longer outages are the durable queue's business."""
    from github.GithubRetry import GithubRetry

    return GithubRetry(total=3, backoff_factor=0.5,
                       allowed_methods=frozenset({"GET", "HEAD", "PUT", "PATCH", "DELETE"}))


class PyGithubPort:
    """`GitHubPort` over PyGithub. Build it with `from_token` or `from_app`."""

    def __init__(self, *, token: str | None = None, app_id: int | str | None = None,
                 private_key: str | None = None, installation_id: int | None = None,
                 base_url: str | None = None, timeout: int = 30,
                 retry: Any = "default", throttle: bool = True,
                 user_agent: str = "rsi-bot"):
        """Either `token`, or `app_id` + `private_key` (PEM) with an optional
        `installation_id` (default: looked up per repository, then cached).

        `throttle=False` drops PyGithub's pacing of writes (1 s apart), for tests.
        """
        import github
        from github import Consts

        if (token is None) == (app_id is None):
            raise ValueError("give either a token or a GitHub App id and private key")
        if app_id is not None and not private_key:
            raise ValueError("a GitHub App needs its private key")
        self._base_url = (base_url or Consts.DEFAULT_BASE_URL).rstrip("/")
        self._kwargs: dict[str, Any] = {
            "base_url": self._base_url, "timeout": timeout, "user_agent": user_agent,
            "retry": _default_retry() if retry == "default" else retry}
        if not throttle:
            self._kwargs.update(seconds_between_requests=None, seconds_between_writes=None)
        self._lock = threading.Lock()
        self._io_lock = threading.RLock()
        self._clients: dict[int | None, Any] = {}  # installation id (None: token) -> Github
        self._lazy: dict[int | None, Any] = {}
        self._auths: dict[int | None, Any] = {}
        self._installation_of: dict[str, int] = {}
        self._installation_id = installation_id
        self._login: str | None = None
        if token is not None:
            auth = github.Auth.Token(token)
            self._auths[None] = auth
            self._clients[None] = github.Github(auth=auth, **self._kwargs)
            self._app_auth = None
            self._integration = None
        else:
            assert app_id is not None and private_key  # checked above
            self._app_auth = github.Auth.AppAuth(app_id, private_key)
            try:  # fail fast on a key that cannot sign
                self._app_auth.create_jwt()
            except Exception as e:  # noqa: BLE001  (PyJWT and cryptography raise many kinds)
                raise ValueError(f"the GitHub App private key cannot sign a JWT: {e}") from None
            self._integration = github.GithubIntegration(auth=self._app_auth, **self._kwargs)

    @classmethod
    def from_token(cls, token: str, *, base_url: str | None = None, **kw: Any) -> PyGithubPort:
        return cls(token=token, base_url=base_url, **kw)

    @classmethod
    def from_app(cls, app_id: int | str, private_key: str, *, installation_id: int | None = None,
                 base_url: str | None = None, **kw: Any) -> PyGithubPort:
        return cls(app_id=app_id, private_key=private_key, installation_id=installation_id,
                   base_url=base_url, **kw)

    def close(self) -> None:
        for client in [*self._clients.values(), *self._lazy.values()]:
            client.close()
        if self._integration is not None:
            self._integration.close()

    # ---------------------------------------------------------------- plumbing

    def _call(self, method: str, path: str, fn: Any) -> Any:
        """One call at a time: a PyGithub Requester is not safe to share between threads
        (its connection object holds the pending request), and GitHub asks integrations to
        make requests serially rather than concurrently (secondary rate limits)."""
        with self._io_lock:
            try:
                return _call(method, path, fn)
            except GitHubError as e:
                if self._app_auth is not None and e.status in (401, 404):
                    self._forget(path, drop_token=e.status == 401)
                raise

    def _forget(self, path: str, *, drop_token: bool) -> None:
        """After a 404 or 401, look the repository's installation up again next time (the
        App may have been reinstalled); after a 401, also fetch a new installation token."""
        m = re.match(r"/repos/([^/]+/[^/]+)", path)
        with self._lock:
            inst = self._installation_of.pop(m[1], None) if m else None
            if drop_token:
                inst = inst if inst is not None else self._installation_id
                for cache in (self._clients, self._lazy):
                    client = cache.pop(inst, None)
                    if client is not None:
                        client.close()
                self._auths.pop(inst, None)

    def _installation(self, repo: str) -> int | None:
        if self._app_auth is None:
            return None
        if self._installation_id is not None:
            return self._installation_id
        with self._lock:
            if repo in self._installation_of:
                return self._installation_of[repo]
        owner, name = _split(repo)
        integration = self._integration
        assert integration is not None  # made with the App's auth
        inst = self._call("GET", f"/repos/{repo}/installation",
                     lambda: integration.get_repo_installation(owner, name).id)
        with self._lock:
            self._installation_of[repo] = inst
        return inst

    def _client(self, repo: str | None, *, lazy: bool = True) -> Any:
        import github

        inst = self._installation(repo) if repo is not None else (
            None if self._app_auth is None else self._installation_id)
        with self._lock:
            client = self._clients.get(inst)
            if client is None:
                if inst is None:
                    raise GitHubError("a GitHub App port needs a repository (or an installation "
                                      "id) to choose its installation", retryable=False)
                assert self._app_auth is not None  # only an App port has installations
                auth = self._app_auth.get_installation_auth(inst)
                client = github.Github(auth=auth, **self._kwargs)
                self._auths[inst] = auth
                self._clients[inst] = client
            lazy_client = self._lazy.get(inst)
            if lazy_client is None:  # same auth (and token cache), objects made without a GET
                lazy_client = self._lazy[inst] = client.withLazy(True)
        return lazy_client if lazy else client

    def _repo(self, repo: str, *, lazy: bool = True) -> Any:
        _split(repo)
        return self._client(repo, lazy=lazy).get_repo(repo)

    def _token(self, repo: str) -> str:
        inst = self._installation(repo)
        self._client(repo)
        return self._call("POST", f"/app/installations/{inst}/access_tokens",
                     lambda: self._auths[inst].token)

    # ---------------------------------------------------------------- the port

    def bot_login(self) -> str:
        if self._login is None:
            if self._app_auth is None:
                self._login = self._call("GET", "/user", lambda: self._clients[None].get_user().login)
            else:
                integration = self._integration
                assert integration is not None  # made with the App's auth
                slug = self._call("GET", "/app", lambda: integration.get_app().slug)
                self._login = f"{slug}[bot]"
        return self._login

    def collaborator_role(self, repo: str, user: str) -> str:
        path = f"/repos/{repo}/collaborators/{user}/permission"
        try:
            role = self._call("GET", path, lambda: self._repo(repo).get_collaborator_role_name(user))
        except NotFound:
            return "none"  # not a user at all
        return role if role in ROLES else "none"

    def get_issue(self, repo: str, number: int) -> IssueInfo:
        def go() -> IssueInfo:
            i = self._repo(repo).get_issue(number)
            _ = i.title  # complete the lazy object (GET) inside the error mapping
            return _issue(i)

        return self._call("GET", f"/repos/{repo}/issues/{number}", go)

    def list_issue_comments(self, repo: str, number: int) -> list[CommentInfo]:
        return self._call("GET", f"/repos/{repo}/issues/{number}/comments",
                     lambda: [_comment(c) for c in self._repo(repo).get_issue(number).get_comments()])

    def create_issue_comment(self, repo: str, number: int, body: str) -> CommentInfo:
        return self._call("POST", f"/repos/{repo}/issues/{number}/comments",
                     lambda: _comment(self._repo(repo).get_issue(number).create_comment(body)))

    def edit_issue_comment(self, repo: str, comment_id: int, body: str) -> CommentInfo:
        def go() -> CommentInfo:
            c = self._comment_obj(repo, comment_id)
            c.edit(body)
            return _comment(c)

        return self._call("PATCH", f"/repos/{repo}/issues/comments/{comment_id}", go)

    def add_reaction(self, repo: str, comment_id: int, content: str) -> None:
        self._call("POST", f"/repos/{repo}/issues/comments/{comment_id}/reactions",
              lambda: self._comment_obj(repo, comment_id).create_reaction(content))

    def _comment_obj(self, repo: str, comment_id: int) -> Any:
        from github.IssueComment import IssueComment

        r = self._repo(repo)
        return IssueComment(r.requester, url=f"{r.url}/issues/comments/{int(comment_id)}")

    def get_file_text(self, repo: str, path: str, ref: str | None = None) -> str | None:
        from github.GithubObject import NotSet

        def go() -> str | None:
            f = self._repo(repo).get_contents(path.lstrip("/"), ref=NotSet if ref is None else ref)
            if isinstance(f, list) or f.type != "file":
                return None
            if f.encoding == "none" or f.content is None:  # over 1 MB: read the blob
                blob = self._repo(repo).get_git_blob(f.sha)
                return base64.b64decode(blob.content).decode("utf-8")
            return f.decoded_content.decode("utf-8")

        try:
            return self._call("GET", f"/repos/{repo}/contents/{path}", go)
        except NotFound:
            return None

    def default_branch(self, repo: str) -> str:
        return self._call("GET", f"/repos/{repo}",
                     lambda: self._repo(repo, lazy=False).default_branch)

    def git_remote(self, repo: str) -> GitRemote:
        url = self._call("GET", f"/repos/{repo}", lambda: self._repo(repo, lazy=False).clone_url)
        if self._app_auth is None:
            return GitRemote(url, self._auths[None].token)
        return GitRemote(url, self._token(repo))

    def create_pull(self, repo: str, *, title: str, body: str, head: str, base: str,
                    draft: bool = True) -> PullInfo:
        return self._call("POST", f"/repos/{repo}/pulls", lambda: _pull(self._repo(repo).create_pull(
            title=title, body=body, head=head, base=base, draft=draft)))

    def request_reviewers(self, repo: str, number: int, reviewers: Sequence[str]) -> None:
        if isinstance(reviewers, str):
            raise TypeError("reviewers is a list of logins")
        self._call("POST", f"/repos/{repo}/pulls/{number}/requested_reviewers",
              lambda: self._repo(repo).get_pull(number).create_review_request(
                  reviewers=list(reviewers)))

    def ensure_label(self, repo: str, name: str, *, color: str, description: str) -> None:
        try:
            self._call("GET", f"/repos/{repo}/labels/{name}",
                       lambda: self._repo(repo).get_label(name).color)  # complete the lazy object
        except GitHubError as e:
            if e.status != 404:
                raise
            try:
                self._call("POST", f"/repos/{repo}/labels", lambda: self._repo(repo).create_label(
                    name=name, color=color, description=description))
            except GitHubError as e2:
                if e2.status != 422:  # 422: made meanwhile ("already_exists")
                    raise

    def add_labels(self, repo: str, number: int, labels: Sequence[str]) -> None:
        if isinstance(labels, str):
            raise TypeError("labels is a list of names")
        self._call("POST", f"/repos/{repo}/issues/{number}/labels",
                   lambda: self._repo(repo).get_issue(number).add_to_labels(*labels))

    def get_pull(self, repo: str, number: int) -> PullInfo:
        def go() -> PullInfo:
            p = self._repo(repo).get_pull(number)
            _ = p.title  # complete the lazy object (GET)
            return _pull(p)

        return self._call("GET", f"/repos/{repo}/pulls/{number}", go)

    def list_pulls(self, repo: str, *, head_prefix: str = "", state: str = "open") -> list[PullInfo]:
        def go() -> list[PullInfo]:
            pulls = self._repo(repo).get_pulls(state=state, sort="created", direction="asc")
            return [_pull(p) for p in pulls if p.head.ref.startswith(head_prefix)]

        return self._call("GET", f"/repos/{repo}/pulls", go)

    def create_check_run(self, repo: str, *, head_sha: str, name: str = VERIFIER_CHECK,
                         status: str = "in_progress", conclusion: str | None = None,
                         title: str | None = None, summary: str | None = None,
                         details_url: str | None = None,
                         external_id: str | None = None) -> CheckRunInfo:
        kw: dict[str, Any] = {"status": "completed" if conclusion else status}
        if conclusion:
            kw["conclusion"] = conclusion
        if title is not None or summary is not None:
            kw["output"] = {"title": title or name, "summary": summary or ""}
        if details_url:
            kw["details_url"] = details_url
        if external_id:
            kw["external_id"] = external_id
        return self._call("POST", f"/repos/{repo}/check-runs", lambda: _check(
            self._repo(repo).create_check_run(name=name, head_sha=head_sha, **kw)))

    def update_check_run(self, repo: str, check_run_id: int, *, status: str | None = None,
                         conclusion: str | None = None, title: str | None = None,
                         summary: str | None = None,
                         details_url: str | None = None) -> CheckRunInfo:
        from github.CheckRun import CheckRun

        kw: dict[str, Any] = {}
        if details_url:
            kw["details_url"] = details_url
        if status:
            kw["status"] = status
        if conclusion:
            kw["conclusion"] = conclusion
            kw["status"] = "completed"
        if title is not None or summary is not None:
            kw["output"] = {"title": title or VERIFIER_CHECK, "summary": summary or ""}

        def go() -> CheckRunInfo:
            r = self._repo(repo)
            run = CheckRun(r.requester, url=f"{r.url}/check-runs/{int(check_run_id)}")
            run.edit(**kw)
            return _check(run)

        return self._call("PATCH", f"/repos/{repo}/check-runs/{check_run_id}", go)

    def dispatch_workflow(self, repo: str, workflow_file: str, ref: str,
                          inputs: Mapping[str, str]) -> int | None:
        path = f"/repos/{repo}/actions/workflows/{workflow_file}/dispatches"

        def go(details: bool) -> int | None:
            run = self._repo(repo).get_workflow(workflow_file).create_dispatch(
                ref=ref, inputs=dict(inputs), throw=True, return_run_details=details)
            return run.id if details and not isinstance(run, bool) else None

        try:
            return self._call("POST", path, lambda: go(True))
        except GitHubError as e:
            if e.status in (400, 422) and "return_run_details" in str(e):
                return self._call("POST", path, lambda: go(False))  # a server without it
            raise

    def branch_sha(self, repo: str, branch: str) -> str | None:
        try:
            return self._call("GET", f"/repos/{repo}/branches/{branch}",
                              lambda: self._repo(repo).get_branch(branch).commit.sha)
        except NotFound:
            return None

    def workflow_run(self, repo: str, run_id: int) -> WorkflowRunInfo:
        def go() -> WorkflowRunInfo:
            w = self._repo(repo).get_workflow_run(int(run_id))
            return WorkflowRunInfo(id=w.id, status=w.status or "", conclusion=w.conclusion,
                                   html_url=w.html_url or "")

        return self._call("GET", f"/repos/{repo}/actions/runs/{run_id}", go)

    def cancel_workflow_run(self, repo: str, run_id: int) -> bool:
        def go() -> bool:
            r = self._repo(repo)
            r.requester.requestJsonAndCheck("POST", f"{r.url}/actions/runs/{int(run_id)}/cancel")
            return True

        try:
            return self._call("POST", f"/repos/{repo}/actions/runs/{run_id}/cancel", go)
        except GitHubError as e:
            if e.status == 409:  # "Cannot cancel a workflow run that is completed."
                return False
            raise

    def rate_limit(self) -> RateLimit | None:
        seen = []
        with self._lock:
            clients = [*self._clients.values(), *self._lazy.values()]
        for client in clients:
            req = client.requester
            remaining, limit = req.rate_limiting
            if limit >= 0:
                seen.append(RateLimit(remaining, limit, float(req.rate_limiting_resettime)))
        return min(seen, key=lambda r: r.remaining) if seen else None

    def list_run_artifacts(self, repo: str, run_id: int) -> list[ArtifactInfo]:
        from github.Artifact import Artifact
        from github.PaginatedList import PaginatedList

        def go() -> list[ArtifactInfo]:
            r = self._repo(repo)
            items = PaginatedList(Artifact, r.requester,
                                  f"{r.url}/actions/runs/{int(run_id)}/artifacts", None,
                                  list_item="artifacts")
            return [ArtifactInfo(id=a.id, name=a.name, size_in_bytes=a.size_in_bytes,
                                 expired=bool(a.expired)) for a in items]

        return self._call("GET", f"/repos/{repo}/actions/runs/{run_id}/artifacts", go)

    def download_artifact(self, repo: str, artifact_id: int) -> bytes:
        """GET .../zip answers 302 to short-lived storage: follow it without our token."""
        import requests

        path = f"/repos/{repo}/actions/artifacts/{int(artifact_id)}/zip"
        token = self._token(repo) if self._app_auth is not None else self._auths[None].token

        def go() -> bytes:
            headers = {"Authorization": f"token {token}", "Accept": "application/vnd.github+json",
                       "User-Agent": self._kwargs["user_agent"]}
            resp = requests.get(self._base_url + path, headers=headers, allow_redirects=False,
                                timeout=self._kwargs["timeout"])
            if resp.status_code in (301, 302, 303, 307, 308):
                resp = requests.get(resp.headers["Location"], timeout=self._kwargs["timeout"],
                                    headers={"User-Agent": self._kwargs["user_agent"]})
            if resp.status_code != 200:
                raise _http_error(resp.status_code, _message(resp), "GET", path)
            return resp.content

        return self._call("GET", path, go)


    def list_check_runs(self, repo: str, sha: str, name: str = VERIFIER_CHECK
                        ) -> list[CheckRunInfo]:
        def go() -> list[CheckRunInfo]:
            commit = self._repo(repo).get_commit(sha)
            return [_check(r) for r in commit.get_check_runs(check_name=name, filter="all")]

        return self._call("GET", f"/repos/{repo}/commits/{sha}/check-runs", go)

    def list_workflow_runs(self, repo: str, workflow_file: str, *,
                           created_since: float | None = None) -> list[WorkflowRunInfo]:
        from github.GithubObject import NotSet, Opt

        created: Opt[str] = NotSet
        if created_since is not None:
            created = ">=" + time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created_since))

        def go() -> list[WorkflowRunInfo]:
            runs = self._repo(repo).get_workflow(workflow_file).get_runs(
                event="workflow_dispatch", created=created)
            return [WorkflowRunInfo(id=w.id, status=w.status or "", conclusion=w.conclusion,
                                    html_url=w.html_url or "",
                                    display_title=w.display_title or "") for w in runs]

        return self._call("GET", f"/repos/{repo}/actions/workflows/{workflow_file}/runs", go)

    def _app_requester(self) -> Any:
        if self._integration is None:
            raise GitHubError("listing the App's webhook deliveries needs a GitHub App",
                              retryable=False)
        return self._integration.requester

    def list_hook_deliveries(self, *, since: float) -> list[HookDelivery]:
        """Pages through ``GET /app/hook/deliveries`` (cursor in the ``Link`` header)
        until an attempt older than ``since``."""
        from datetime import datetime

        def go() -> list[HookDelivery]:
            req = self._app_requester()
            out: list[HookDelivery] = []
            params: dict[str, Any] = {"per_page": 100}
            for _ in range(100):  # at most 10 000 attempts per sweep
                headers, data = req.requestJsonAndCheck("GET", "/app/hook/deliveries",
                                                        parameters=params)
                older = False
                for d in data or []:
                    at = datetime.fromisoformat(str(d.get("delivered_at")).replace(
                        "Z", "+00:00")).timestamp()
                    if at < since:
                        older = True
                        continue
                    out.append(HookDelivery(
                        id=int(d["id"]), guid=str(d.get("guid") or ""), delivered_at=at,
                        status_code=int(d.get("status_code") or 0),
                        event=str(d.get("event") or ""), action=d.get("action"),
                        redelivery=bool(d.get("redelivery"))))
                m = re.search(r"[?&]cursor=([^&>]+)[^>]*>;\s*rel=\"next\"",
                              (headers or {}).get("link", ""))
                if older or not data or not m:
                    break
                params = {"per_page": 100, "cursor": m[1]}
            return out

        return self._call("GET", "/app/hook/deliveries", go)

    def redeliver(self, delivery_id: int) -> None:
        path = f"/app/hook/deliveries/{int(delivery_id)}/attempts"
        self._call("POST", path, lambda: self._app_requester().requestJsonAndCheck("POST", path))


# --------------------------------------------------------------------------- helpers


def web_root(api_url: str | None) -> str:
    """GitHub's web address for a REST base URL: https://github.com for
    api.github.com, https://HOST for GHE's https://HOST/api/v3 (the fake GitHub
    serves both at one root)."""
    api = (api_url or "").rstrip("/")
    if api in ("https://api.github.com", ""):
        return "https://github.com"
    return api.removesuffix("/api/v3")


def _split(repo: str) -> tuple[str, str]:
    owner, sep, name = repo.partition("/")
    if not sep or not owner or not name or "/" in name:
        raise ValueError(f"repository must be 'owner/name', not {repo!r}")
    return owner, name


def _message(resp: Any) -> str:
    try:
        return str(resp.json().get("message", resp.reason))
    except (ValueError, AttributeError):
        return str(resp.reason or "")


def _http_error(status: int, message: str, method: str, path: str) -> GitHubError:
    cls = NotFound if status == 404 else GitHubError
    return cls(message, status=status, method=method, path=path)


def _call(method: str, path: str, fn: Any) -> Any:
    """Run a PyGithub call, turning every failure into a GitHubError."""
    import requests
    import urllib3
    from github import GithubException, RateLimitExceededException

    try:
        return fn()
    except GitHubError:
        raise
    except RateLimitExceededException as e:
        raise GitHubError(f"rate limited: {_data_message(e)}", status=e.status, method=method,
                          path=path, retryable=True, retry_after=_retry_after(e.headers)) from e
    except GithubException as e:
        err = _http_error(e.status, _data_message(e), method, path)
        err.retry_after = _retry_after(e.headers)
        raise err from e
    except (requests.RequestException, urllib3.exceptions.HTTPError, ConnectionError,
            TimeoutError) as e:
        raise GitHubError(f"no response: {e}", method=method, path=path) from e


def _retry_after(headers: Mapping[str, str] | None) -> float | None:
    h = {k.lower(): v for k, v in (headers or {}).items()}
    try:
        if "retry-after" in h:
            return max(0.0, float(h["retry-after"]))
        if h.get("x-ratelimit-remaining") == "0" and "x-ratelimit-reset" in h:
            return max(0.0, float(h["x-ratelimit-reset"]) - time.time())
    except ValueError:
        return None
    return None


def _data_message(e: Any) -> str:
    data = e.data
    if isinstance(data, dict):
        msg = str(data.get("message", ""))
        errors = data.get("errors")
        if errors:
            msg += f" {errors}"
        return msg or str(data)
    return str(data or "")


def _issue(i: Any) -> IssueInfo:
    return IssueInfo(number=i.number, title=i.title or "", body=i.body or "",
                     labels=tuple(lbl.name for lbl in i.labels), user=i.user.login,
                     is_pull_request=i.pull_request is not None, state=i.state,
                     html_url=i.html_url or "")


def _comment(c: Any) -> CommentInfo:
    return CommentInfo(id=c.id, body=c.body or "", user=c.user.login,
                       user_type=c.user.type or "User", html_url=c.html_url or "")


def _pull(p: Any) -> PullInfo:
    head_repo = p.head.repo
    return PullInfo(number=p.number, state=p.state, draft=bool(p.draft),
                    merged=p.merged_at is not None, merge_commit_sha=p.merge_commit_sha,
                    head_ref=p.head.ref, head_sha=p.head.sha,
                    head_repo_full_name=head_repo.full_name if head_repo is not None else None,
                    base_ref=p.base.ref, user=p.user.login, body=p.body or "",
                    title=p.title or "", html_url=p.html_url or "")


def _check(r: Any) -> CheckRunInfo:
    return CheckRunInfo(id=r.id, name=r.name, head_sha=r.head_sha, status=r.status,
                        conclusion=r.conclusion, html_url=r.html_url or "",
                        external_id=r.external_id or "")
