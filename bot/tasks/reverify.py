"""``reverify``: judge a candidate PR's head again (``/rsi rerun``, Re-run, a push to it)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot import checks, render
from bot.context import Context
from bot.harness_port import SpecError
from bot.payloads import ReverifyPayload
from bot.status import refresh_status
from bot.store import Candidate, Task
from bot.tasks.clone import ensure_clone, fetch_branch, fetch_public_branch, head_of, load_spec
from bot.tasks.common import best_effort, candidate_of, payload_of, task_of
from bot.tasks.publish import post_report
from bot.vocab import REVERIFIABLE, CandidateState
from bot.worker import JobRun, Permanent
from verifier.verdict import Verdict


def reverify(ctx: Context, run: JobRun) -> str:
    """Judge the PR's head again against the current Bk and B0."""
    task = task_of(ctx, run)
    p = run.args_as(ReverifyPayload)
    cand = candidate_of(ctx, task, task.generation if p.generation is None else p.generation, p.n)
    if cand.state not in REVERIFIABLE or not cand.pr_number:
        return f"candidate {cand.n} is {cand.state}"
    if not cand.branch:
        raise Permanent(f"candidate {cand.n} has no branch to re-verify")
    branch = cand.branch
    clone, default = ensure_clone(ctx, task)
    # the PR head may have moved (a maintainer pushed to it): verify what is there
    head = fetch_branch(ctx, task, clone, branch)
    checks.started(ctx, task, run.job.id, "reverify", head_sha=head, n=cand.n)
    try:
        spec = load_spec(ctx, task, clone, default)
    except SpecError as e:
        refresh_status(ctx, task.id, errors=e.errors)
        checks.fail_job(ctx, run.job.id, "the task's proposal or repo config has errors: "
                                         "see the status comment on the issue")
        return "invalid"
    verdict = ctx.harness.reverify(clone, spec, branch,
                                   state_dir=ctx.harness_dir(task.repo, task.issue,
                                                             task.generation))
    return apply_reverify(ctx, task, cand, verdict, head, clone, p.requested_by,
                          job_id=run.job.id)


def apply_reverify(ctx: Context, task: Task, cand: Candidate, verdict: Verdict, head: str | None,
                   clone: Path | None, requested_by: str | None, *,
                   job_id: int | None = None) -> str:
    if not verdict.shas.get("candidate") and head:
        verdict = verdict.model_copy(update={"shas": {**verdict.shas, "candidate": head}})
    head = verdict.shas.get("candidate") or head
    cand = ctx.store.upsert_candidate(task.id, cand.n, generation=cand.generation, sha=head,
                                      decision=verdict.decision, state=CandidateState.OPEN,
                                      verdict=verdict.model_dump(mode="json", by_alias=True))
    note = render.reverified_note(verdict.shas.get("bk")) + (
        f" Requested by @{requested_by}." if requested_by else "")
    post_report(ctx, task, cand, verdict, clone, note=note, job_id=job_id)
    best_effort(refresh_status, ctx, task.id)
    return f"reverified {cand.n}: {verdict.decision}"


# ------------------------------------------------------------ on a runner (actions)


def on_runner(harness: Any, repo: Path, spec: Any, job: dict[str, Any], *, state_dir: Path,
              default: str, on_event: Callable[[Any], None]) -> dict[str, Any]:
    branch = job["branch"]
    fetch_public_branch(repo, branch)
    verdict = harness.reverify(repo, spec, branch, state_dir=state_dir)
    return {"verdict": verdict.model_dump(mode="json", by_alias=True)}


def ingest(ctx: Context, task: Task, clone: Path, job: dict[str, Any], result: dict[str, Any], *,
           heads: dict[str, str], events: list[Any], job_id: int | None) -> str:
    p = payload_of(job, ReverifyPayload)
    cand = candidate_of(ctx, task, task.generation if p.generation is None else p.generation, p.n)
    try:
        verdict = Verdict.model_validate(result.get("verdict"))
    except ValueError as e:
        raise Permanent(f"the runner's result has no valid verdict: {str(e)[:300]}") from None
    head = (head_of(clone, cand.branch) if cand.branch else None) or job.get("sha")
    return apply_reverify(ctx, task, cand, verdict, head, clone, p.requested_by, job_id=job_id)
