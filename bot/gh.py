"""The bot's narrow port in front of GitHub.

`GitHubPort` lists exactly the GitHub calls the bot makes (STYLE.md item 2);
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
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

ROLES = ("admin", "maintain", "write", "triage", "read", "none")
Role = Literal["admin", "maintain", "write", "triage", "read", "none"]
CheckStatus = Literal["queued", "in_progress", "completed"]
CheckConclusion = Literal["success", "failure", "neutral", "cancelled", "skipped", "timed_out",
                          "action_required"]
ReactionContent = Literal["+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"]

VERIFIER_CHECK = "rsi/verifier"


# --------------------------------------------------------------------------- errors


class GitHubError(Exception):
    """A GitHub call failed. `status` is the HTTP status (None: no response at all).

    `retryable` is True for what a later retry may fix (no response, 5xx, 429,
    rate-limit 403); False for what it will not (404, 422, 401...).
    """

    def __init__(self, message: str, *, status: int | None = None, method: str = "",
                 path: str = "", retryable: bool | None = None):
        self.status = status
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
                         summary: str | None = None) -> CheckRunInfo: ...

    def dispatch_workflow(self, repo: str, workflow_file: str, ref: str,
                          inputs: Mapping[str, str]) -> None:
        """`workflow_dispatch` of `.github/workflows/<workflow_file>` on `ref`."""
        ...

    def list_run_artifacts(self, repo: str, run_id: int) -> list[ArtifactInfo]: ...

    def download_artifact(self, repo: str, artifact_id: int) -> bytes:
        """The artifact's zip archive, as bytes."""
        ...
