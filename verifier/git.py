"""Temporary git worktrees of refs, so each arm runs in its own clean checkout."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path


class GitError(RuntimeError):
    pass


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise GitError(
            f"git {' '.join(args)} failed in {repo}: {p.stderr.strip() or p.stdout.strip()}"
        )
    return p


def rev_parse(repo: Path, ref: str) -> str:
    """The commit SHA of ``ref``; GitError naming the ref when it does not exist."""
    p = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    if p.returncode != 0:
        raise GitError(f"unknown ref '{ref}' in {repo}")
    return p.stdout.strip()


def show_file(repo: Path, ref: str, path: str) -> str | None:
    """A file's text at ``ref`` (None when it does not exist there)."""
    p = _git(repo, "show", f"{ref}:{path}", check=False)
    return p.stdout if p.returncode == 0 else None


def add_worktree(repo: Path, ref: str, dest: Path | None = None) -> Path:
    sha = rev_parse(repo, ref)
    if dest is None:
        dest = Path(tempfile.mkdtemp(prefix="rsi-wt-")) / "checkout"
    _git(repo, "worktree", "add", "--detach", str(dest), sha)
    return dest


def remove_worktree(repo: Path, path: Path) -> None:
    _git(repo, "worktree", "remove", "--force", str(path), check=False)
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)
    parent = path.parent
    if parent.name.startswith("rsi-wt-"):
        shutil.rmtree(parent, ignore_errors=True)
    _git(repo, "worktree", "prune", check=False)


@contextlib.contextmanager
def worktrees(repo: Path, refs: dict[str, str]) -> Iterator[dict[str, Path]]:
    """Worktrees for several refs (name -> ref); identical SHAs share one."""
    made: dict[str, Path] = {}
    by_sha: dict[str, Path] = {}
    try:
        for name, ref in refs.items():
            sha = rev_parse(repo, ref)
            if sha not in by_sha:
                by_sha[sha] = add_worktree(repo, sha)
            made[name] = by_sha[sha]
        yield made
    finally:
        for path in by_sha.values():
            remove_worktree(repo, path)


@contextlib.contextmanager
def worktree(repo: Path, ref: str) -> Iterator[Path]:
    with worktrees(repo, {"ref": ref}) as w:
        yield w["ref"]
