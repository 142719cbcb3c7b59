"""``publish``: push a candidate's branch, open its draft PR, post its report.

Also the report and the completed ``rsi/verifier`` check that every job
posting a verdict uses (:func:`post_report`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from bot import checks, crash, render, sticky
from bot.context import Context, harness_task_id
from bot.gh import GitHubError, web_root
from bot.payloads import PublishPayload
from bot.status import refresh_status
from bot.store import Candidate, Task
from bot.tasks.clone import head_of, ledger, push
from bot.tasks.common import best_effort, candidate_of, task_of
from bot.vocab import CandidateState
from bot.worker import JobRun, Permanent
from verifier.verdict import Verdict

log = logging.getLogger("rsi.bot.tasks")


def verdict_of(c: Candidate) -> Verdict | None:
    return c.verdict_model


def publish(ctx: Context, run: JobRun) -> str:
    """Push ``rsi/<issue>/<n>``, open its draft PR, ask the labeler to review,
    post the report and the ``rsi/verifier`` check run."""
    task = task_of(ctx, run)
    p = run.args_as(PublishPayload)
    gen, n = p.generation, p.n
    cand = candidate_of(ctx, task, gen, n)
    verdict = verdict_of(cand)
    clone = ctx.clone_dir(task.repo, task.issue)
    branch = cand.branch
    if not branch:
        raise Permanent(f"candidate {n} has no branch to publish")
    if not cand.pr_number:  # (a retry after the PR was opened skips to the rest)
        if not head_of(clone, branch):
            raise Permanent(f"branch {branch} is missing from the task's clone")
        push(ctx, task, clone, branch)
        default = ctx.gh.default_branch(task.repo)
        # ours: this repository's branch, opened by the bot (a fork's PR from a
        # branch of the same name is not, whoever it names)
        pulls = [p for p in ctx.gh.list_pulls(task.repo, head_prefix=branch)
                 if p.head_ref == branch and p.head_repo_full_name == task.repo
                 and ctx.is_us(p.user)]
        crash.point("publish.pushed")
        pr = pulls[0] if pulls else ctx.gh.create_pull(
            task.repo, title=render.pr_title(task.issue, n, cand.hypothesis),
            body=render.pr_body(issue=task.issue, n=n, hypothesis=cand.hypothesis,
                                verdict=verdict, labeler=task.labeler),
            head=branch, base=default, draft=True)
        crash.point("publish.pr_opened")
        cand = ctx.store.upsert_candidate(task.id, n, generation=gen, pr_number=pr.number,
                                          state=CandidateState.OPEN)
    if task.labeler and not ctx.is_us(task.labeler) and cand.pr_number:
        try:
            ctx.gh.request_reviewers(task.repo, cand.pr_number, [task.labeler])
        except GitHubError as e:
            if e.retryable:
                raise
            log.warning("review request on #%s failed: %s", cand.pr_number, e)
    crash.point("publish.review_requested")
    if verdict is not None:
        post_report(ctx, task, cand, verdict, clone)
        crash.point("publish.reported")
    best_effort(refresh_status, ctx, task.id)
    return f"published #{cand.pr_number}"


def post_report(ctx: Context, task: Task, cand: Candidate, verdict: Verdict, clone: Path | None,
                *, note: str = "", job_id: int | None = None) -> None:
    """The PR's sticky report and its completed ``rsi/verifier`` check (the job's
    live check on that commit when there is one, else a new one)."""
    if cand.pr_number is None:
        raise ValueError(f"candidate {cand.n} has no PR to report on")
    records = ledger(ctx, clone, task) if clone else []
    links = report_links(ctx, task, cand)
    history = render.candidate_history(ctx.store.candidates(task.id, generation=task.generation))
    body = render.report_comment(verdict, pr_note=note, history=history, ledger=records,
                                 links=links)
    sticky.upsert(ctx.gh, ctx.store, task.repo, cand.pr_number, render.REPORT, body,
                  login=ctx.login())
    head = verdict.shas.get("candidate") or cand.sha
    if not head:
        raise ValueError(f"candidate {cand.n} has no commit to put the check on")
    payload = render.check_run(verdict, note=note, links=links)
    if not checks.finish(ctx, job_id, head_sha=head, **payload):
        checks.complete_once(ctx, task.repo, head_sha=head,
                             external_id=f"{task.id}:{cand.generation}:{cand.n}",
                             details_url=checks.details_url(ctx, task), **payload)
    # a check left on an older head (the branch moved while queued) ends too
    checks.finish(ctx, job_id, conclusion="neutral", title="superseded: the branch moved",
                  summary=f"The verdict is on the branch's newer head `{render.short_sha(head)}`.")


def report_links(ctx: Context, task: Task, cand: Candidate) -> Any:
    """Links for the report: commits, compare views, the ledger file, the task page."""
    from harness.report import ReportLinks

    web = web_root(ctx.settings.github_api_url)
    runs = [d.run_id for d in ctx.store.dispatches_of(task.id, pending=False) if d.run_id]
    return ReportLinks(
        repo_url=f"{web}/{task.repo}" if web else "", page_url=checks.details_url(ctx, task) or "",
        branch=cand.branch or "", ledger_ref="rsi/ledger",
        artifacts_url=f"{web}/{task.repo}/actions/runs/{runs[-1]}" if runs else "",
        task_id=harness_task_id(task.issue, task.generation))
