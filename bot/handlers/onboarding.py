"""The onboarding PR: when the App is installed on a repository that has no
``.rsi/config.toml``, open one pull request with the files ``rsi init`` writes
(as Renovate does), so that merging it is all a maintainer needs to start.

Called by :mod:`bot.handlers.installation` for ``installation.created`` and
``installation_repositories.added``. Per repository, and idempotent:

* a config on the default branch, or any PR (open or closed) from
  ``rsi/onboarding``: nothing to do (a closed one means "no, thanks");
* else: a shallow clone, :func:`harness.onboard.detect` on its git tree (reads
  only regular blobs from git, never the checkout: a committed symlink, to a
  file or a directory, is never followed), the files committed on
  ``rsi/onboarding`` (force-pushed: a rerun makes the same branch) and a PR.

A repository that cannot be reached is skipped with the reason; transient
GitHub errors propagate so the job is retried.
"""

from __future__ import annotations

import fnmatch
import logging
import tempfile
from pathlib import Path
from typing import Any

from bot.context import Context
from bot.gh import GitHubError, NotFound
from harness.gitutil import GitError, git
from harness.onboard import (
    FILES,
    Detected,
    InitAnswers,
    InitError,
    default_objective,
    detect,
    render_files,
    source_examples,
    write_files,
)
from harness.spec import CONFIG_PATH

log = logging.getLogger("rsi.bot.onboarding")

BRANCH = "rsi/onboarding"
MAX_REPOS = 20
"""At most this many onboarding PRs per event (an org-wide install may add hundreds)."""
PLACEHOLDER_COMMAND = "python bench/run.py"
TITLE = "Set up rsi-bot"


def added_repos(event: Any) -> list[str]:
    p = event.payload
    if event.key == "installation.created":
        items = p.get("repositories") or []
    elif event.key == "installation_repositories.added":
        items = p.get("repositories_added") or []
    else:
        return []
    return [r["full_name"] for r in items if isinstance(r, dict) and
            isinstance(r.get("full_name"), str)]


def handle(ctx: Context, event: Any) -> str:
    repos = added_repos(event)
    if not repos or not ctx.settings.onboarding:
        return ""
    outcomes = [onboard(ctx, r) for r in repos[:MAX_REPOS]]
    if len(repos) > MAX_REPOS:
        outcomes.append(f"{len(repos) - MAX_REPOS} more not onboarded (at most {MAX_REPOS})")
    return "onboarding: " + "; ".join(outcomes)


def served(ctx: Context, repo: str) -> bool:
    """``RSI_ALLOWED_REPOS`` (installation events carry no repository, so the
    front door cannot filter them): the same patterns as ``webhook.admitted``."""
    pats = ctx.settings.allowed_repos
    return not pats or any(fnmatch.fnmatchcase(repo.lower(), p.lower()) for p in pats)


def onboard(ctx: Context, repo: str) -> str:
    if not served(ctx, repo):
        return f"{repo}: not in RSI_ALLOWED_REPOS"
    try:
        if ctx.gh.get_file_text(repo, CONFIG_PATH) is not None:
            return f"{repo}: has {CONFIG_PATH}"
        if ctx.gh.list_pulls(repo, head_prefix=BRANCH, state="all"):
            return f"{repo}: onboarding PR exists"
        base = ctx.gh.default_branch(repo)
        found = _push_branch(ctx, repo, base)
        pr = ctx.gh.create_pull(repo, title=TITLE, body=pr_body(found), head=BRANCH,
                                base=base, draft=False)
    except NotFound as e:
        return f"{repo}: skipped ({e})"
    except GitHubError as e:
        if e.retryable:
            raise
        return f"{repo}: skipped ({e})"
    except InitError as e:  # e.g. .github is a symbolic link in that repository
        return f"{repo}: skipped ({e})"
    except GitError as e:  # e.g. an empty repository: nothing to branch from
        log.info("onboarding %s: git failed: %s", repo, e)
        return f"{repo}: skipped (git: {str(e).splitlines()[0][:120]})"
    return f"{repo}: opened #{pr.number}"


def _answers(found: Detected, examples: list[str]) -> InitAnswers:
    """What ``rsi init --yes`` would answer on the same tree (the onboarding PR
    carries exactly the files the CLI writes)."""
    metrics = found.metrics or {"throughput": "higher"}
    return InitAnswers(command=found.command or PLACEHOLDER_COMMAND, metrics=metrics,
                       objective=default_objective(metrics, found.client), samples=found.samples,
                       outputs=list(found.outputs), client=found.client, examples=examples)


def _push_branch(ctx: Context, repo: str, base: str) -> Detected:
    remote = ctx.gh.git_remote(repo)
    env = remote.git_env()
    with tempfile.TemporaryDirectory(prefix="rsi-onboard-") as tmp:
        clone = Path(tmp) / "clone"
        git(tmp, "clone", "--quiet", "--depth", "1", "--branch", base, remote.url, str(clone),
            env=env)
        found = detect(clone, ref="HEAD")  # the git tree: no link in it is followed
        git(clone, "checkout", "--quiet", "-B", BRANCH)
        write_files(clone, render_files(_answers(found, source_examples(clone, ref="HEAD"))),
                    force=True)
        git(clone, "add", "--", *FILES)
        git(clone, "commit", "--quiet", "--no-verify", "-m", "Set up rsi-bot (rsi init)")
        git(clone, "push", "--quiet", "--force", "origin", f"HEAD:refs/heads/{BRANCH}", env=env)
    return found


def pr_body(found: Detected) -> str:
    if found.command:
        guess = (f"The benchmark command `{found.command}` was detected from {found.source}"
                 + (f", with metrics {', '.join(f'`{m}`' for m in found.metrics)}."
                    if found.metrics else "; declare its metrics."))
    else:
        guess = (f"No benchmark was found: replace the placeholder `{PLACEHOLDER_COMMAND}` and "
                 "the metric `throughput` with your own.")
    return f"""rsi-bot is installed on this repository. Merging this PR turns it on.

It adds what `rsi init` writes:

| file | what |
|---|---|
| `{CONFIG_PATH}` | the benchmark, the objective, guards, edit policy and runner profile |
| `.github/workflows/rsi-job.yml` | the workflow rsi-bot dispatches to your self-hosted runners |
| `.github/workflows/rsi-config-check.yml` | `rsi config check` whenever the config changes |
| `.github/ISSUE_TEMPLATE/rsi-proposal.yml` | the proposal form |

{guess} Check it locally with `rsi config check` (or push to this branch: the
config check workflow runs on it).

Then open an issue with the **rsi optimization proposal** form and add the `rsi`
label. Close this PR to decline: rsi-bot will not open it again.

Docs: https://github.com/rsi-bot/rsi-bot/blob/main/docs/getting-started.md
"""
