"""``rebaseline``: a merge made a new Bk; every open candidate is judged again on it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot import render, sticky
from bot.context import Context, task_lane
from bot.harness_port import SpecError
from bot.payloads import RebaselinePayload, RunTaskPayload
from bot.status import refresh_status
from bot.store import Candidate, Task
from bot.tasks.clone import commit_of, ensure_clone, load_spec, push
from bot.tasks.common import best_effort, payload_of, task_of
from bot.tasks.publish import post_report, verdict_of
from bot.vocab import DEAD_ENDS, REVERIFIABLE, CandidateState, TaskState
from bot.worker import JobRun, Permanent

if TYPE_CHECKING:
    from harness.loop import RebaselineResult

log = logging.getLogger("rsi.bot.tasks")


def rebaseline(ctx: Context, run: JobRun) -> str:
    """Measure the merge commit (or the default branch) as the new Bk; the harness
    then re-verifies every open candidate on top of it (cherry-picked; a conflict
    is reported, not hidden). Each result is pushed and reported on its PR."""
    task = task_of(ctx, run)
    state_dir = ctx.harness_dir(task.repo, task.issue, task.generation)
    if not (state_dir / "state.json").exists():
        best_effort(refresh_status, ctx, task.id,
                    note="Nothing to rebaseline yet: the baseline has not been measured.")
        return "no task state yet"
    clone, default = ensure_clone(ctx, task)
    p = run.args_as(RebaselinePayload)
    ref = p.ref or f"origin/{default}"
    sha = commit_of(clone, ref)
    if sha is None:
        raise Permanent(f"{ref} is not a commit of {task.repo}")
    try:
        spec = load_spec(ctx, task, clone, default)
    except SpecError as e:
        ctx.store.update_task(task.id, state=TaskState.INVALID)
        refresh_status(ctx, task.id, errors=e.errors)
        return "invalid"
    ctx.store.update_task(task.id, state=TaskState.REBASELINING)
    best_effort(refresh_status, ctx, task.id)
    old_shas = {c.n: c.sha for c in ctx.store.candidates(task.id, generation=task.generation)}
    result = ctx.harness.rebaseline(clone, spec, sha, state_dir=state_dir)
    return apply_rebaseline(ctx, task, clone, sha, p.merged_pr, result, old_shas)


def apply_rebaseline(ctx: Context, task: Task, clone: Path, sha: str, merged_pr: int | None,
                     result: RebaselineResult, old_shas: dict[int, str | None], *,
                     heads: dict[str, str] | None = None) -> str:
    """Publish a rebaseline's re-verifications: push moved branches, update reports.
    ``heads`` (a runner's bundle): a re-verified candidate's own branch (the stored
    one, never the branch the runner names) must be taken from the bundle at the
    outcome's new head."""
    by_n = {c.n: c for c in ctx.store.candidates(task.id, generation=task.generation)}
    ctx.store.update_task(task.id, bk_sha=sha)
    task = ctx.store.task(task.id)
    note = render.reverified_note(sha, merged_pr)
    counts: dict[str, int] = {}
    for out in result.candidates:
        cand = by_n.get(out.n)
        what = out.outcome
        own = cand.branch if cand is not None else None
        if what == "reverified" and heads is not None and (
                out.branch != own or heads.get(own) != out.new_sha):
            log.warning("dropping the re-verification of #%s (%s@%s): not its own branch "
                        "taken from the bundle", out.n, out.branch, out.new_sha[:12])
            continue
        counts[what] = counts.get(what, 0) + 1
        if cand is None or not cand.pr_number or cand.state not in REVERIFIABLE:
            continue
        if what == "merged":
            continue  # its change is in Bk (usually: this is the PR that merged)
        if what == "conflict":
            _report_conflict(ctx, task, cand, merged_pr, out.reason)
            continue
        new_sha = out.new_sha
        if new_sha and new_sha != old_shas.get(out.n):
            push(ctx, task, clone, cand.branch, lease=old_shas.get(out.n))
        verdict = out.verdict
        if verdict is None:
            continue
        cand = ctx.store.upsert_candidate(
            task.id, cand.n, generation=cand.generation, sha=new_sha or cand.sha,
            decision=verdict.decision, state=CandidateState.OPEN,
            verdict=verdict.model_dump(mode="json", by_alias=True))
        post_report(ctx, task, cand, verdict, clone, note=note)
    t = ctx.store.task(task.id)
    more = (not t.stop and t.budget is not None and t.rounds_done < t.budget
            and t.state not in DEAD_ENDS)
    if more:
        ctx.store.enqueue_job(RunTaskPayload(task_id=t.id, generation=t.generation),
                              lane=task_lane(t.id), key=f"run:{t.id}:{t.generation}:bk:{sha}")
    ctx.store.update_task(task.id, state=TaskState.QUEUED if more else (
        TaskState.STOPPED if t.stop else TaskState.FINISHED))
    summary = render.inert(", ".join(f"{k}: {v}" for k, v in sorted(counts.items())),
                           one_line=True, max_len=300) or "none open"
    best_effort(refresh_status, ctx, task.id,
                note=f"Bk is now `{render.short_sha(sha)}`" + (f" (#{merged_pr} merged)" if merged_pr else "")
                + f". Open candidates re-verified ({summary}).")
    return f"bk={render.short_sha(sha)} ({summary})"


def _report_conflict(ctx: Context, task: Task, cand: Candidate, merged_pr: int | None,
                     detail: str) -> None:
    cand = ctx.store.upsert_candidate(task.id, cand.n, generation=cand.generation,
                                      state=CandidateState.CONFLICT)
    text = render.conflict_note(merged_pr, detail)
    old = verdict_of(cand)
    body = (render.report_comment(old, pr_note=text) if old
            else render.with_marker(text, render.REPORT))
    sticky.upsert(ctx.gh, ctx.store, task.repo, cand.pr_number, render.REPORT, body,
                  login=ctx.login())
    ctx.gh.create_check_run(task.repo, head_sha=cand.sha, conclusion="neutral",
                            title="conflicts with the new baseline", summary=text)


# ------------------------------------------------------------ on a runner (actions)


def on_runner(harness: Any, repo: Path, spec: Any, job: dict[str, Any], *, state_dir: Path,
              default: str, on_event: Callable[[Any], None]) -> dict[str, Any]:
    ref = payload_of(job, RebaselinePayload).ref or f"origin/{default}"
    res = harness.rebaseline(repo, spec, ref, state_dir=state_dir, on_event=on_event)
    return {"rebaseline": res.model_dump(mode="json", by_alias=True)}


def ingest(ctx: Context, task: Task, clone: Path, job: dict[str, Any], result: dict[str, Any], *,
           heads: dict[str, str], events: list[Any], job_id: int | None) -> str:
    from harness.loop import RebaselineResult

    try:
        res = RebaselineResult.model_validate(result.get("rebaseline"))
    except ValueError as e:
        raise Permanent(f"the runner's result has no valid rebaseline: {str(e)[:300]}") from None
    p = payload_of(job, RebaselinePayload)
    sha = p.ref or res.bk_sha
    if not isinstance(sha, str) or not commit_of(clone, sha):
        raise Permanent(f"the rebaseline result names an unknown commit {str(sha)[:40]!r}")
    old = {c.n: c.sha for c in ctx.store.candidates(task.id, generation=task.generation)}
    return apply_rebaseline(ctx, task, clone, sha, p.merged_pr, res, old,
                            heads=heads)
