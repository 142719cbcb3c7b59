"""The fake GitHub's state: plain mutable records, guarded by the server's lock."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROLE_RANK = {"none": 0, "read": 1, "triage": 2, "write": 3, "maintain": 4, "admin": 5}


def now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(eq=False)
class User:
    login: str
    id: int
    type: str = "User"  # "User" | "Bot" | "Organization"


@dataclass(eq=False)
class App:
    id: int
    slug: str
    owner: User
    public_key_pem: bytes
    private_key_pem: str
    bot: User
    permissions: dict[str, str]
    events: list[str]
    installations: dict[int, Installation] = field(default_factory=dict)
    created_at: datetime = field(default_factory=now)


@dataclass(eq=False)
class Installation:
    id: int
    app: App
    account: User
    repos: set[str] = field(default_factory=set)


@dataclass(eq=False)
class Token:
    value: str
    user: User
    installation: Installation | None = None
    expires_at: datetime | None = None


@dataclass(eq=False)
class PullState:
    head_ref: str
    head_sha: str
    base_ref: str
    base_sha: str
    draft: bool
    requested_reviewers: list[User] = field(default_factory=list)
    merged_at: datetime | None = None
    merge_commit_sha: str | None = None
    merged_by: User | None = None
    head_repo: str | None = None
    """A fork's ``owner/name`` when the head branch lives in a fork (None: this repository)."""


@dataclass(eq=False)
class Issue:
    number: int
    id: int
    title: str
    body: str | None
    user: User
    labels: list[str] = field(default_factory=list)
    state: str = "open"
    pull: PullState | None = None
    created_at: datetime = field(default_factory=now)
    updated_at: datetime = field(default_factory=now)
    closed_at: datetime | None = None


@dataclass(eq=False)
class Reaction:
    id: int
    content: str
    user: User
    created_at: datetime = field(default_factory=now)


@dataclass(eq=False)
class Comment:
    id: int
    issue_number: int
    body: str
    user: User
    reactions: list[Reaction] = field(default_factory=list)
    created_at: datetime = field(default_factory=now)
    updated_at: datetime = field(default_factory=now)

    def reaction_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.reactions:
            counts[r.content] = counts.get(r.content, 0) + 1
        return counts


@dataclass(eq=False)
class CheckRun:
    id: int
    name: str
    head_sha: str
    status: str
    conclusion: str | None
    output: dict[str, Any]
    app_id: int | None
    app_slug: str | None
    details_url: str | None = None
    external_id: str | None = None
    started_at: datetime | None = field(default_factory=now)
    completed_at: datetime | None = None


@dataclass(eq=False)
class Artifact:
    id: int
    name: str
    data: bytes
    run_id: int
    head_branch: str
    head_sha: str
    expired: bool = False
    created_at: datetime = field(default_factory=now)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass(eq=False)
class WorkflowRun:
    """A dispatched run: `inputs` are what the bot sent; complete it with a test helper."""

    id: int
    workflow_id: int
    workflow_file: str
    ref: str
    inputs: dict[str, Any]
    head_branch: str
    head_sha: str
    actor: User
    run_number: int
    display_title: str
    status: str = "queued"
    conclusion: str | None = None
    artifacts: list[Artifact] = field(default_factory=list)
    created_at: datetime = field(default_factory=now)
    updated_at: datetime = field(default_factory=now)


@dataclass(eq=False)
class Push:
    repo: str
    ref: str
    before: str | None
    after: str | None
    pusher: str


@dataclass(eq=False)
class Repo:
    owner: User
    name: str
    id: int
    bare: Path
    default_branch: str
    private: bool = False
    roles: dict[str, str] = field(default_factory=dict)
    issues: dict[int, Issue] = field(default_factory=dict)
    comments: dict[int, Comment] = field(default_factory=dict)
    labels: dict[str, int] = field(default_factory=dict)
    label_meta: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Labels made with POST /repos/{o}/{r}/labels: name -> (color, description)."""
    check_runs: dict[int, CheckRun] = field(default_factory=dict)
    workflow_ids: dict[str, int] = field(default_factory=dict)
    runs: dict[int, WorkflowRun] = field(default_factory=dict)
    created_at: datetime = field(default_factory=now)

    @property
    def full_name(self) -> str:
        return f"{self.owner.login}/{self.name}"

    def open_issues(self) -> int:
        return sum(1 for i in self.issues.values() if i.state == "open")

    def comments_of(self, number: int) -> list[Comment]:
        return [c for c in self.comments.values() if c.issue_number == number]

    def label_id(self, name: str) -> int:
        if name not in self.labels:
            self.labels[name] = 4_000_000 + len(self.labels) + 1000 * self.id
        return self.labels[name]

    def role(self, login: str) -> str:
        if login == self.owner.login:
            return "admin"
        return self.roles.get(login, "none" if self.private else "read")

    def association(self, login: str) -> str:
        if login == self.owner.login:
            return "OWNER"
        return "COLLABORATOR" if login in self.roles else "NONE"


@dataclass(eq=False)
class Request:
    """One request the fake received (recorded before any failure injection)."""

    method: str
    path: str
    query: dict[str, str]
    json: Any
    auth: str  # "token:<login>", "app:<id>", "installation:<id>", "basic:<login>" or ""
    status: int = 0


@dataclass(eq=False)
class Failure:
    method: str
    path: str | Any  # exact path (no query) or a compiled regex
    status: int | None  # None: drop the connection without an answer
    body: Any
    headers: dict[str, str]
    times: int


@dataclass(eq=False)
class HookDelivery:
    """One attempt to deliver a webhook to the App (``GET /app/hook/deliveries``)."""

    id: int
    guid: str
    delivered_at: datetime
    status_code: int  # 0: no answer (refused, reset, timed out)
    event: str
    action: str | None
    redelivery: bool
    installation_id: int | None
    body: bytes
    duration: float
