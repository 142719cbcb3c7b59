"""What handlers and jobs get: settings, store, GitHub port, harness port.

Everything with I/O is a field, so tests pass fakes (docs/architecture.md, habit 6).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from bot.command_table import WRITERS
from bot.gh import GitHubPort
from bot.harness_port import HarnessPort
from bot.settings import Settings
from bot.store import Store
from bot.webhook import Event

TRUSTED_ROLES = WRITERS  # who may add the label or run a command


@dataclass
class Context:
    settings: Settings
    store: Store
    gh: GitHubPort
    harness: HarnessPort
    clock: Callable[[], float] = time.time
    route: Callable[[Context, Event], str] | None = None
    """Hands a webhook event to its handler (:func:`bot.handlers.route`, wired by
    :mod:`bot.service`; the ``event`` job calls it, so the jobs never import the
    handlers, which queue the jobs)."""
    _login: str | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def login(self) -> str:
        """Our own login (from settings, else asked once from GitHub)."""
        with self._lock:
            if self._login is None:
                self._login = self.settings.bot_login or self.gh.bot_login()
            return self._login

    def is_us(self, login: str | None) -> bool:
        return login is not None and login != "" and login.lower() == self.login().lower()

    def task_dir(self, repo: str, issue: int) -> Path:
        owner, _, name = repo.partition("/")
        return Path(self.settings.state_dir).resolve() / "repos" / f"{owner}__{name}" / f"issue-{issue}"

    def clone_dir(self, repo: str, issue: int) -> Path:
        return self.task_dir(repo, issue) / "clone"

    def harness_dir(self, repo: str, issue: int, generation: int) -> Path:
        return self.task_dir(repo, issue) / f"gen-{generation}"


def sender_of(payload: dict[str, Any]) -> tuple[str, str]:
    """(login, type) of an event's sender."""
    s = payload.get("sender") or {}
    return s.get("login") or "", s.get("type") or "User"


def our_candidate_pr(ctx: Context, repo: str, pr: dict[str, Any], number: int) -> tuple[Any, Any] | str:
    """(task, candidate) of a pull request that is one of our candidates, opened by
    us; else the "ignored: ..." reason. Binds the task id to the log context."""
    from bot import obs

    found = ctx.store.candidate_by_pr(repo, int(number))
    if found is None:
        return "ignored: not one of our candidates"
    obs.bind_task(found[0].id)
    author = (pr.get("user") or {}).get("login")
    if author and not ctx.is_us(author):
        return f"ignored: PR opened by {author}, not by us"
    return found


def task_lane(task_id: int) -> str:
    return f"task:{task_id}"


def harness_task_id(issue: int, generation: int) -> str:
    """The harness's task id, which names branches ``rsi/<task id>/<n>``: the issue
    number, with the generation after a superseding trigger (``rsi/12.2/1``)."""
    return str(issue) if generation <= 1 else f"{issue}.{generation}"
