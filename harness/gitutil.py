"""Thin, explicit wrappers around the git CLI (argv lists, no shell).

Every call passes ``-c safe.directory=*``: worktrees are shared with sandboxed
agents running as another uid, and git would otherwise refuse to read them.
Commits made by the harness carry a fixed identity so they never depend on the
user's git config.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

BOT_NAME = "rsi-bot"
BOT_EMAIL = "rsi-bot@users.noreply.github.com"


class GitError(RuntimeError):
    def __init__(self, args: list[str], code: int, stderr: str):
        self.args_ = args
        self.code = code
        self.stderr = stderr
        super().__init__(f"git {' '.join(args)} failed ({code}): {stderr.strip()[-2000:]}")


def bot_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        GIT_AUTHOR_NAME=BOT_NAME,
        GIT_AUTHOR_EMAIL=BOT_EMAIL,
        GIT_COMMITTER_NAME=BOT_NAME,
        GIT_COMMITTER_EMAIL=BOT_EMAIL,
        GIT_TERMINAL_PROMPT="0",
    )
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    env.pop("GIT_INDEX_FILE", None)
    if extra:
        env.update(extra)
    return env


def git(
    cwd: Path | str,
    *args: str,
    input: str | bytes | None = None,
    check: bool = True,
    env: dict[str, str] | None = None,
    text: bool = True,
) -> str:
    """Run git in ``cwd`` and return stdout (stripped of the final newline)."""
    argv = ["git", "-c", "safe.directory=*", "-c", "core.hooksPath=/dev/null", *args]
    proc = subprocess.run(  # noqa: PLW1510 - the return code is read below
        argv,
        cwd=str(cwd),
        input=input.encode() if (isinstance(input, str) and not text) else input,
        capture_output=True,
        text=text,
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
