"""``rebaseline``: a merge made a new Bk; every open candidate is judged again on it.

After a merge of one of our PRs (payload ``watch``), the watch after merge
(``harness.watch``) measures the merge commit against its parent again, with a
fresh hidden-input draw and more requests; when the PR's claim does not hold,
the bot comments on the merged PR with both reports and, per ``[bot]
on_failed_watch``, opens a PR reverting the merge (label ``rsi:revert``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot import checks, crash, render, replies, sticky
from bot.context import Context, harness_task_id, task_lane
from bot.gh import GitHubError, PullInfo
from bot.harness_port import SpecError
from bot.payloads import RebaselinePayload, RunTaskPayload
from bot.status import refresh_status
from bot.store import Candidate, Task
from bot.tasks.clone import commit_of, ensure_clone, load_spec, push, revert_branch
from bot.tasks.common import Saga, best_effort, payload_of, task_of
from bot.tasks.publish import post_report, verdict_of
from bot.vocab import DEAD_ENDS, REVERIFIABLE, CandidateState, TaskState
from bot.worker import JobRun, Permanent

if TYPE_CHECKING:
    from harness.loop import RebaselineResult
    from harness.spec import TaskSpec
    from harness.watch import WatchResult
    from verifier.verdict import Verdict

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
    result = _measured(ctx, run.job.id, task, clone, spec, sha, state_dir)
    watched: WatchResult | str | None = None
    if wants_watch(ctx, task, spec, p, sha):
        watched = _recorded_watch(ctx, task.repo, p.merged_pr, sha)
        if watched is None:
            try:
                watched = ctx.harness.watch(clone, spec, sha, state_dir=state_dir)
            except (ValueError, OSError) as e:  # git could not resolve it: said, not a failure
                watched = f"the watch could not run: {e}"
    done = apply_rebaseline(ctx, task, clone, sha, p.merged_pr, result, old_shas)
    return done + apply_watch(ctx, task, clone, default, spec, p.merged_pr, watched, sha)


def _measured(ctx: Context, job_id: int, task: Task, clone: Path, spec: TaskSpec, sha: str,
              state_dir: Path) -> RebaselineResult:
    """The harness's rebaseline, recorded once per job (step ``measured``): a job run
    again after a crash applies the recorded outcomes (a conflict the harness
    already recorded is reported, not lost) instead of measuring again."""
    from harness.loop import RebaselineResult

    saga = Saga(ctx, "rebaseline", f"job-{job_id}")
    if not saga.done("measured"):
        crash.point("rebaseline.start")
    data = saga.run("measured", lambda: _with_ledger_conflicts(
        ctx, task, clone, sha, ctx.harness.rebaseline(clone, spec, sha, state_dir=state_dir)
    ).model_dump(mode="json", by_alias=True))
    return RebaselineResult.model_validate(data)


def _with_ledger_conflicts(ctx: Context, task: Task, clone: Path, sha: str,
                           result: RebaselineResult) -> RebaselineResult:
    """Add the conflicts the harness recorded on ``sha`` (its ledger) for open
    candidates it did not report this time: a run killed after the harness saved a
    conflict and before the bot reported it finds the candidate no longer open in
    the harness, and would otherwise never report it."""
    from harness.events import ReverifyOutcome
    from harness.ledger import CandidateStatus

    seen = {o.n for o in result.candidates}
    stored = [c for c in ctx.store.candidates(task.id, generation=task.generation)
              if c.state == CandidateState.OPEN and c.n not in seen]
    if not stored:
        return result
    records = ctx.harness.ledger(clone, harness_task_id(task.issue, task.generation))
    extra = []
    for c in stored:
        rec = next((r for r in reversed(records) if r.event == "reverify" and r.candidate == c.n
                    and r.base_sha == sha and r.status == CandidateStatus.CONFLICT), None)
        if rec is not None:
            extra.append(ReverifyOutcome(n=c.n, branch=c.branch or rec.branch, old_sha=c.sha or "",
                                         outcome="conflict",
                                         reason=rec.reason.removeprefix("conflict: ")))
    return result.model_copy(update={"candidates": [*result.candidates, *extra]})


def apply_rebaseline(ctx: Context, task: Task, clone: Path, sha: str, merged_pr: int | None,
                     result: RebaselineResult, old_shas: dict[int, str | None], *,
                     heads: dict[str, str] | None = None) -> str:
    """Publish a rebaseline's re-verifications: push moved branches, update reports.
    ``heads`` (a runner's bundle): a re-verified candidate's own branch (the stored
    one, never the branch the runner names) must be taken from the bundle at the
    outcome's new head."""
    by_n = {c.n: c for c in ctx.store.candidates(task.id, generation=task.generation)}
    ctx.store.update_task(task.id, bk_sha=sha)
    task = ctx.store.existing_task(task.id)
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
            _report_conflict(ctx, task, cand, merged_pr, out.reason, sha)
            continue
        new_sha = out.new_sha
        if new_sha and new_sha != old_shas.get(out.n) and cand.branch:
            push(ctx, task, clone, cand.branch, lease=old_shas.get(out.n))
        verdict = out.verdict
        if verdict is None:
            continue
        cand = ctx.store.upsert_candidate(
            task.id, cand.n, generation=cand.generation, sha=new_sha or cand.sha,
            decision=verdict.decision, state=CandidateState.OPEN,
            verdict=verdict.model_dump(mode="json", by_alias=True))
        post_report(ctx, task, cand, verdict, clone, note=note)
    t = ctx.store.existing_task(task.id)
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
                     detail: str, bk: str) -> None:
    """The store says ``conflict`` (as the harness does), then the PR's report and a
    neutral check with its ``external_id`` (found again by a re-run, never doubled)."""
    cand = ctx.store.upsert_candidate(task.id, cand.n, generation=cand.generation,
                                      state=CandidateState.CONFLICT)
    crash.point("conflict.stored")
    text = render.conflict_note(merged_pr, detail)
    old = verdict_of(cand)
    body = (render.report_comment(old, pr_note=text) if old
            else render.with_marker(text, render.REPORT))
    if cand.pr_number is None or not cand.sha:  # only open PRs are re-verified
        raise ValueError(f"candidate {cand.n} has no PR or commit to report the conflict on")
    sticky.upsert(ctx.gh, ctx.store, task.repo, cand.pr_number, render.REPORT, body,
                  login=ctx.login())
    crash.point("conflict.reported")
    checks.complete_once(ctx, task.repo, head_sha=cand.sha,
                         external_id=f"{task.id}:{cand.generation}:{cand.n}:conflict:{bk[:12]}",
                         conclusion="neutral", title="conflicts with the new baseline",
                         summary=text)
    crash.point("conflict.check")


# ------------------------------------------------------------ the watch after merge


def revert_branch_name(pr: int) -> str:
    """The revert PR's head: never ``rsi/...`` (those are candidates)."""
    return f"rsi-revert/{int(pr)}"


def _watch_job(sha: str) -> str:
    return f"watch-{render.short_sha(sha).lower()}"


def watch_saga(ctx: Context, repo: str, pr: int, sha: str) -> Saga:
    """The watch of merge ``sha`` of ``pr`` as a recorded sequence: ``result`` (the
    measured watch, recorded before any effect), ``revert_pr``, ``label``, ``review``,
    ``comment``, then ``finished``. Each effect is found again on GitHub by a re-run
    (the revert PR by its head in this repository and its author, the comment by its
    marker; labels and review requests are sets), so a kill between an effect and
    its record makes nothing twice, and a re-run resumes at the first step not done."""
    return Saga(ctx, "watch", f"{repo}#{int(pr)}@{sha}")


def wants_watch(ctx: Context, task: Task, spec: TaskSpec, payload: RebaselinePayload,
                sha: str) -> bool:
    """A merge of our candidate PR (the ``merged`` handler's ``watch`` flag), a
    repo that has not turned the watch off, and a watch of this merge not finished
    yet (:func:`watch_saga`; an older bot's finished watch is its comment): a job
    run again after a crash finishes the steps left, never one twice."""
    pr = payload.merged_pr
    if not payload.watch or pr is None or spec.bot.on_failed_watch == "off":
        return False
    saga = watch_saga(ctx, task.repo, pr, sha)
    if saga.done("finished"):
        return False
    if saga.done("result"):
        return True  # resume at the first step not done
    return not replies.find(ctx, task.repo, pr, replies.reply_kind(_watch_job(sha), "report"))


def _recorded_watch(ctx: Context, repo: str, pr: int | None, sha: str) -> WatchResult | str | None:
    """The watch an earlier run of this job measured and recorded (never measured twice)."""
    if pr is None:
        return None
    saga = watch_saga(ctx, repo, pr, sha)
    return _load_watch(saga.data("result")) if saga.done("result") else None


def _load_watch(data: Any) -> WatchResult | str:
    from harness.watch import WatchResult

    if isinstance(data, dict) and "result" in data:
        return WatchResult.model_validate(data["result"])
    return str((data or {}).get("problem") if isinstance(data, dict) else data)


def _ours(ctx: Context, repo: str, p: PullInfo) -> bool:
    """A PR the bot opened from a branch of this repository (a fork's PR from a
    branch of the same name is someone else's, whoever it names)."""
    return p.head_repo_full_name == repo and ctx.is_us(p.user)


def _revert_pulls(ctx: Context, repo: str, pr: int) -> list[PullInfo]:
    """Every PR (open or closed, anyone's) from the revert branch of ``pr`` in this
    repository; a fork's PR from a branch of that name is not one (only a writer can
    make the branch here)."""
    branch = revert_branch_name(pr)
    return [p for p in ctx.gh.list_pulls(repo, head_prefix=branch, state="all")
            if p.head_ref == branch and p.head_repo_full_name == repo]


def apply_watch(ctx: Context, task: Task, clone: Path, default: str, spec: TaskSpec,
                merged_pr: int | None, watched: WatchResult | str | None, sha: str) -> str:
    """Judge the watch against the PR's claim; on a failure, per ``[bot]
    on_failed_watch``: open the revert PR (``revert-pr``) and comment on the
    merged PR with both reports side by side (``revert-pr``, ``comment``). The
    steps are :func:`watch_saga`'s: a re-run resumes where the last run stopped."""
    from harness.watch import WatchOutcome, WatchResult, judge_watch

    if watched is None or merged_pr is None:
        return ""
    saga = watch_saga(ctx, task.repo, merged_pr, sha)
    watched = _load_watch(saga.run("result", lambda: (
        {"result": watched.model_dump(mode="json", by_alias=True)}
        if isinstance(watched, WatchResult) else {"problem": watched})))
    if isinstance(watched, str):
        log.warning("watch of #%s: %s", merged_pr, watched)
        saga.run("finished", lambda: True)
        return f"; watch: {render.inert(watched, one_line=True, max_len=200)}"
    found = ctx.store.candidate_by_pr(task.repo, merged_pr)
    claim = verdict_of(found[1]) if found is not None else None
    finding = judge_watch(claim, watched.verdict, spec.min_gain)
    log.info("watch of #%s (%s, hidden seed %s): %s %s", merged_pr, watched.merge_sha[:12],
             watched.hidden_seed, finding.outcome, "; ".join(finding.reasons))
    if finding.outcome != WatchOutcome.FAILED:  # the job's result records the draw
        saga.run("finished", lambda: True)
        return f"; watch: {finding.outcome} (hidden seed {watched.hidden_seed})"
    policy = spec.bot.on_failed_watch
    revert: int | None = None
    problem = ""
    if policy == "revert-pr":
        w = watched
        opened = saga.run("revert_pr", lambda: _open_revert(
            ctx, task, clone, default, merged_pr, claim, w, finding.reasons))
        revert, problem = opened.get("number"), str(opened.get("problem") or "")
    if revert is not None:
        number = revert
        saga.run("label", lambda: _label_revert(ctx, task.repo, number))
        if task.labeler and not ctx.is_us(task.labeler):
            labeler = task.labeler
            saga.run("review", lambda: _ask_review(ctx, task.repo, number, labeler))
    body = render.watch_comment(pr=merged_pr, claim=claim, watched=watched,
                                reasons=finding.reasons, policy=policy, revert_pr=revert,
                                revert_problem=problem)
    job = _watch_job(watched.merge_sha)
    saga.run("comment", lambda: {"comment_id": replies.reply(
        ctx, task.repo, merged_pr, body, job=job, step="report").id})
    best_effort(refresh_status, ctx, task.id,
                note=f"⚠️ #{merged_pr}'s gain did not hold after the merge"
                + (f": #{revert} reverts it." if revert else "."))
    saga.run("finished", lambda: True)
    return (f"; watch: failed (hidden seed {watched.hidden_seed})"
            + (f", revert #{revert}" if revert else ""))


def _label_revert(ctx: Context, repo: str, number: int) -> bool:
    ctx.gh.ensure_label(repo, render.REVERT_LABEL, color=render.REVERT_LABEL_COLOR,
                        description=render.REVERT_LABEL_TEXT)
    ctx.gh.add_labels(repo, number, [render.REVERT_LABEL])  # a set: a second add changes nothing
    return True


def _ask_review(ctx: Context, repo: str, number: int, who: str) -> bool:
    best_effort(ctx.gh.request_reviewers, repo, number, [who])  # a set as well
    return True


def _open_revert(ctx: Context, task: Task, clone: Path, default: str, merged_pr: int,
                 claim: Verdict | None, watched: WatchResult, reasons: tuple[str, ...]
                 ) -> dict[str, Any]:
    """{"number": the revert PR} or {"problem": why not}. Found again by its head in
    this repository and its author (the bot) before one is opened: one revert PR per
    merged PR, however often this runs."""
    branch = revert_branch_name(merged_pr)
    pulls = _revert_pulls(ctx, task.repo, merged_pr)
    pull = next((p for p in pulls if _ours(ctx, task.repo, p)), None)
    if pull is not None:
        return {"number": pull.number}
    if any(p.state == "open" for p in pulls):
        # a writer's PR uses the branch here: never force-push over their work
        return {"problem": f"`{branch}` is the head of a PR the bot did not open; revert it by hand"}
    if revert_branch(clone, branch, watched.merge_sha, f"origin/{default}") is None:
        return {"problem": f"reverting `{render.short_sha(watched.merge_sha)}` conflicts with "
                           f"`{default}` as it is now: revert it by hand"}
    push(ctx, task, clone, branch)
    title = ctx.gh.get_pull(task.repo, merged_pr).title
    try:
        pull = ctx.gh.create_pull(
            task.repo, title=render.revert_title(merged_pr, title),
            body=render.revert_pr_body(pr=merged_pr, claim=claim, watched=watched,
                                       reasons=reasons),
            head=branch, base=default, draft=False)
    except GitHubError as e:
        if e.status != 422:
            raise
        # e.g. someone else's open PR from the same head: ours cannot be opened
        return {"problem": f"GitHub refused the revert PR from `{branch}`: {e}"}
    return {"number": pull.number}


# ------------------------------------------------------------ on a runner (actions)


def on_runner(harness: Any, repo: Path, spec: Any, job: dict[str, Any], *, state_dir: Path,
              default: str, on_event: Callable[[Any], None]) -> dict[str, Any]:
    p = payload_of(job, RebaselinePayload)
    ref = p.ref or f"origin/{default}"
    res = harness.rebaseline(repo, spec, ref, state_dir=state_dir, on_event=on_event)
    out = {"rebaseline": res.model_dump(mode="json", by_alias=True)}
    if p.watch and spec.bot.on_failed_watch != "off":
        from harness.watch import watch

        try:
            out["watch"] = watch(repo, spec, ref, state_dir=state_dir, on_event=on_event
                                 ).model_dump(mode="json", by_alias=True)
        except (ValueError, OSError) as e:
            out["watch"] = f"the watch could not run: {str(e)[:300]}"
    return out


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
    done = apply_rebaseline(ctx, task, clone, sha, p.merged_pr, res, old, heads=heads)
    watched = _runner_watch(result.get("watch"), sha)
    if watched is None:
        return done
    default = ctx.gh.default_branch(task.repo)
    spec = load_spec(ctx, task, clone, default)
    if not wants_watch(ctx, task, spec, p, sha):
        return done
    if isinstance(watched, str):  # keyed by the merge the job names
        watched = _recorded_watch(ctx, task.repo, p.merged_pr, sha) or watched
    return done + apply_watch(ctx, task, clone, default, spec, p.merged_pr, watched, sha)


def _runner_watch(raw: Any, sha: str) -> WatchResult | str | None:
    """A runner's watch: valid, and of the merge commit this job names (else dropped)."""
    from harness.watch import WatchResult

    if raw is None or isinstance(raw, str):
        return raw
    try:
        w = WatchResult.model_validate(raw)
    except ValueError as e:
        return f"the runner's watch is not valid: {str(e)[:200]}"
    if w.merge_sha != sha:
        return f"the runner's watch measured {w.merge_sha[:12]}, not the merge {sha[:12]}"
    return w
