"""The task's clone of the target repo: made or fetched, pushed from, read.

The bot reaches git and the ledger of a clone here and through the harness
port (``ctx.harness``): nothing else in the bot runs git on a task's clone.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from bot.context import Context, harness_task_id
from bot.store import Task
from harness.gitutil import GitError, git, rev_parse
from harness.ledger import LedgerRecord
from harness.spec import TaskSpec

log = logging.getLogger("rsi.bot.tasks")


def ensure_clone(ctx: Context, task: Task) -> tuple[Path, str]:
    """The task's clone of the target repo, fetched; returns (path, default branch)."""
    remote = ctx.gh.git_remote(task.repo)
    env = remote.git_env()
    dest = ctx.clone_dir(task.repo, task.issue)
    if not (dest / ".git").is_dir():
        tmp = dest.with_name("clone.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        git(tmp.parent, "clone", "--quiet", remote.url, str(tmp), env=env)
        tmp.rename(dest)
    else:
        git(dest, "remote", "set-url", "origin", remote.url)
        git(dest, "fetch", "--quiet", "--prune", "origin", env=env)
    default = ctx.gh.default_branch(task.repo)
    git(dest, "checkout", "--quiet", "--force", "-B", default, f"origin/{default}")
    git(dest, "symbolic-ref", "refs/remotes/origin/HEAD", f"refs/remotes/origin/{default}")
    return dest, default


def fetch_branch(ctx: Context, task: Task, clone: Path, branch: str) -> str | None:
    """The branch as it is on GitHub now (a maintainer may have pushed to it): its head."""
    git(clone, "fetch", "--quiet", "origin", f"+refs/heads/{branch}:refs/heads/{branch}",
        env=ctx.gh.git_remote(task.repo).git_env())
    return head_of(clone, branch)


def fetch_public_branch(repo: Path, branch: str) -> None:
    """On a runner's checkout (no credentials): the branch from origin, when it is there."""
    git(repo, "fetch", "--quiet", "origin", f"+refs/heads/{branch}:refs/heads/{branch}",
        check=False)


def head_of(clone: Path, branch: str) -> str | None:
    return rev_parse(clone, f"refs/heads/{branch}")


def commit_of(clone: Path, ref: str) -> str | None:
    return rev_parse(clone, ref)


def push(ctx: Context, task: Task, clone: Path, branch: str, *, lease: str | None = None) -> None:
    """Push ``branch`` (forced; with ``lease`` only over that old head)."""
    remote = ctx.gh.git_remote(task.repo)
    args = ["push", "--quiet"]
    args.append(f"--force-with-lease={branch}:{lease}" if lease else "--force")
    git(clone, *args, "origin", f"refs/heads/{branch}:refs/heads/{branch}", env=remote.git_env())


def revert_branch(clone: Path, branch: str, merge_sha: str, onto: str) -> str | None:
    """Make ``branch`` in the clone: ``onto`` (the default branch now) plus a real
    ``git revert`` of ``merge_sha`` (``-m 1`` for a merge commit: back to its
    first parent). Returns the new head, or None when the revert conflicts
    (nothing is left behind then)."""
    wt = clone.parent / f"{clone.name}.revert"
    git(clone, "worktree", "remove", "--force", str(wt), check=False)
    git(clone, "worktree", "prune")
    git(clone, "worktree", "add", "--force", "--detach", str(wt), onto)
    try:
        parents = git(clone, "rev-list", "--parents", "-n", "1", merge_sha).split()[1:]
        args = ["revert", "--no-edit", *(["-m", "1"] if len(parents) > 1 else []), merge_sha]
        try:
            git(wt, *args)
        except GitError as e:
            log.info("reverting %s does not apply on %s: %s", merge_sha[:12], onto, e)
            git(wt, "revert", "--abort", check=False)
            return None
        sha = git(wt, "rev-parse", "HEAD")
        git(clone, "branch", "-f", branch, sha)
        return sha
    finally:
        git(clone, "worktree", "remove", "--force", str(wt), check=False)


def load_spec(ctx: Context, task: Task, clone: Path, default: str) -> TaskSpec:
    """The task as the repo's config at ``default`` and the approved proposal make it
    (``SpecError`` with every problem)."""
    text = ctx.harness.load_config(clone, default)
    files = ctx.harness.repo_files(clone, default)
    return ctx.harness.build_task(text, task.proposal, harness_task_id(task.issue, task.generation),
                                  title=f"#{task.issue}", repo_files=files)


def ledger(ctx: Context, clone: Path, task: Task) -> list[LedgerRecord]:
    """The task's ledger records in the clone ([] when there are none, or it cannot be read:
    a report still goes out without them)."""
    try:
        return ctx.harness.ledger(clone, harness_task_id(task.issue, task.generation))
    except Exception as e:  # noqa: BLE001 - the report still goes out without it
        log.info("no ledger for %s#%s: %s", task.repo, task.issue, e)
        return []
