"""Workspaces: git worktrees of B0, Bk and each candidate, under a state dir.

The user's own worktree, index and checked-out branch are never touched: every
workspace is a detached worktree under ``<state_dir>/worktrees/``, and
candidates become commits on ``rsi/<task>/<n>`` branches made inside their own
worktree (the commit message's subject is the agent's hypothesis).
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from harness.gitutil import GitError, git, rev_parse


def candidate_branch(task_id: str, n: int) -> str:
    return f"rsi/{task_id}/{n}"


class Workspace:
    def __init__(self, repo: Path | str, root: Path | str):
        self.repo = Path(repo).resolve()
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, name: str) -> Path:
        return self.root / name

    def checkout(self, name: str, ref: str, *, writable_by_others: bool = False) -> Path:
        """A fresh detached worktree of ``ref`` at ``<root>/<name>`` (an old one is
        removed first). ``writable_by_others`` opens it to the sandbox's uid."""
        path = self.path(name)
        self.remove(name)
        sha = rev_parse(self.repo, ref)
        if sha is None:
            raise GitError(["rev-parse", ref], 128, f"unknown ref {ref}")
        git(self.repo, "worktree", "add", "--detach", "--force", str(path), sha)
        if writable_by_others:
            open_tree(path)
        return path

    def ensure(self, name: str, ref: str) -> Path:
        """Reuse the worktree at ``<root>/<name>`` when it is clean and at ``ref``
        (a new one is opened to the sandbox's uid: benchmarks may write in it)."""
        path = self.path(name)
        sha = rev_parse(self.repo, ref)
        if path.is_dir() and (path / ".git").exists():
            try:
                head = git(path, "rev-parse", "HEAD")
                dirty = git(path, "status", "--porcelain", "--untracked-files=no")
                if head == sha and not dirty:
                    return path
            except GitError:
                pass
        return self.checkout(name, ref, writable_by_others=True)

    def remove(self, name: str) -> None:
        path = self.path(name)
        if path.exists():
            try:
                git(self.repo, "worktree", "remove", "--force", "--force", str(path))
            except GitError:
                pass
            if path.exists():
                shutil.rmtree(path, ignore_errors=True)
        git(self.repo, "worktree", "prune")

    def collect(self, path: Path) -> str:
        """Stage everything the agent changed in worktree ``path`` and return the
        diff against its HEAD (binary-safe, renames off so every path shows)."""
        git(path, "add", "-A")
        return git(path, "diff", "--cached", "--binary", "--no-color", "--no-ext-diff", "--no-renames", "HEAD")

    def commit(self, path: Path, branch: str, hypothesis: str, body: str = "") -> str:
        """Commit the staged change in ``path`` and point ``branch`` at it."""
        subject = " ".join((hypothesis or "candidate").split())[:200]
        msg = subject + ("\n\n" + body.strip() if body.strip() else "") + "\n"
        git(path, "commit", "-q", "--no-verify", "--allow-empty", "-F", "-", input=msg)
        sha = git(path, "rev-parse", "HEAD")
        git(self.repo, "update-ref", f"refs/heads/{branch}", sha)
        return sha

    def patch_id(self, base: str, sha: str) -> str:
        diff = git(self.repo, "diff", "--no-color", "--no-ext-diff", base, sha)
        if not diff.strip():
            return ""
        out = git(self.repo, "patch-id", "--stable", input=diff + "\n")
        return out.split()[0] if out else ""


def open_tree(path: Path) -> None:
    """Make a worktree writable for the sandbox's non-root user (uid 1000)."""
    for dirpath, dirnames, filenames in os.walk(path):
        for d in dirnames:
            p = os.path.join(dirpath, d)
            if not os.path.islink(p):
                os.chmod(p, os.stat(p).st_mode | stat.S_IRWXU | stat.S_IRWXG | stat.S_IRWXO)
        for f in filenames:
            p = os.path.join(dirpath, f)
            if not os.path.islink(p) and f != ".git":
                os.chmod(p, os.stat(p).st_mode | stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IWGRP | stat.S_IROTH | stat.S_IWOTH)
    os.chmod(path, os.stat(path).st_mode | stat.S_IRWXU | stat.S_IRWXG | stat.S_IRWXO)
