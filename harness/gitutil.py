"""Thin, explicit wrappers around the git CLI (argv lists, no shell).

Host git only ever runs in host-owned repositories (the target clone, its
host-made worktrees, exports), never in a tree an agent wrote: candidates are
exported from the agent's tree as plain files first (``harness.workspace``).
Every call still runs hardened, as defence in depth:

* no ``safe.directory=*``: git's own guard against repositories owned by
  another user (an agent's uid) stays on;
* ``core.fsmonitor=false`` and ``core.hooksPath=/dev/null``: no configured
  command runs on reads or commits; ``submodule.recurse=false`` and
  ``--no-recurse-submodules`` wherever a command takes it: submodules are
  never followed;
* ``GIT_CONFIG_NOSYSTEM=1`` and a clean environment: only ``PATH``, ``HOME``,
  ``LANG``/``LC_ALL``, the fixed commit identity and what the caller passes
  (e.g. ``bot.gh`` remote auth for a push); never the bot's own secrets
  (``RSI_*``, ``GITHUB_*``, ``*_KEY``, ``*_TOKEN``, ``*_SECRET``...).

Commits made by the harness carry a fixed identity so they never depend on the
user's git config.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Literal, overload

BOT_NAME = "rsi-bot"
BOT_EMAIL = "rsi-bot@users.noreply.github.com"

HARDENING = (
    "-c", "core.fsmonitor=false",
    "-c", "core.hooksPath=/dev/null",
    "-c", "submodule.recurse=false",
    "-c", "fetch.recurseSubmodules=false",
    "-c", "core.untrackedCache=false",
    "-c", "protocol.ext.allow=never",
)
"""``-c`` options put before every git command this project runs."""

PASSED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ")
"""The only variables of the caller's environment that git sees."""

SECRET_NAME = re.compile(r"^(RSI_|GITHUB_|GH_)|(_KEY|_TOKEN|_SECRET|_PASSWORD|_PASS|_CREDENTIALS?)$", re.IGNORECASE)


class GitError(RuntimeError):
    def __init__(self, args: list[str], code: int, stderr: str):
        self.args_ = args
        self.code = code
        self.stderr = stderr
        super().__init__(f"git {' '.join(args)} failed ({code}): {stderr.strip()[-2000:]}")


def is_secret_name(name: str) -> bool:
    """True for names of variables that must never reach a subprocess we do
    not need them in (the bot's App key, webhook secret, API tokens)."""
    return bool(SECRET_NAME.search(name))


def bot_env(extra: dict[str, str] | None = None, *, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a git call: a clean one, never ``os.environ``.
    ``extra`` (the caller's own, e.g. a push's auth header) is added last."""
    source = os.environ if environ is None else environ
    env = {k: source[k] for k in PASSED_ENV if source.get(k)}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(
        GIT_AUTHOR_NAME=BOT_NAME,
        GIT_AUTHOR_EMAIL=BOT_EMAIL,
        GIT_COMMITTER_NAME=BOT_NAME,
        GIT_COMMITTER_EMAIL=BOT_EMAIL,
        GIT_TERMINAL_PROMPT="0",
        GIT_CONFIG_NOSYSTEM="1",
    )
    if extra:
        env.update(extra)
    return env


@overload
def git(cwd: Path | str, *args: str, input: str | bytes | None = None, check: bool = True,
        env: dict[str, str] | None = None, text: Literal[True] = True) -> str: ...


@overload
def git(cwd: Path | str, *args: str, input: str | bytes | None = None, check: bool = True,
        env: dict[str, str] | None = None, text: Literal[False]) -> bytes: ...


def git(
    cwd: Path | str,
    *args: str,
    input: str | bytes | None = None,
    check: bool = True,
    env: dict[str, str] | None = None,
    text: bool = True,
) -> str | bytes:
    """Run git in ``cwd`` and return stdout (stripped of the final newline)."""
    argv = ["git", *HARDENING, *args]
    proc = subprocess.run(  # noqa: PLW1510 - the return code is read below
        argv,
        cwd=str(cwd),
        input=input.encode() if (isinstance(input, str) and not text) else input,
        capture_output=True,
        text=text,
        encoding="utf-8" if text else None,
        errors="replace" if text else None,  # an agent's file in a diff may be any bytes
        env=bot_env(env),
    )
    if check and proc.returncode != 0:
        err = proc.stderr if text else proc.stderr.decode(errors="replace")
        raise GitError(list(args), proc.returncode, err)
    out = proc.stdout
    if text and out.endswith("\n"):
        out = out[:-1]
    return out


def git_ok(cwd: Path | str, *args: str) -> bool:
    try:
        git(cwd, *args)
        return True
    except GitError:
        return False


def rev_parse(repo: Path | str, ref: str) -> str | None:
    try:
        return git(repo, "rev-parse", "-q", "--verify", ref + "^{commit}")
    except GitError:
        return None


def default_branch(repo: Path | str) -> str:
    """The branch a repo config is read from: origin's HEAD, else main, master,
    else the checked-out branch."""
    try:
        ref = git(repo, "symbolic-ref", "--short", "refs/remotes/origin/HEAD")
        name = ref.split("/", 1)[1] if "/" in ref else ref
        if rev_parse(repo, f"refs/heads/{name}"):
            return name
        return ref
    except GitError:
        pass
    for name in ("main", "master"):
        if rev_parse(repo, f"refs/heads/{name}"):
            return name
    try:
        return git(repo, "symbolic-ref", "--short", "HEAD")
    except GitError:
        return "HEAD"
