"""The jobs behind a task: run the rounds, publish a candidate, rebaseline, re-verify.

Each function takes the :class:`~bot.context.Context` and a running job and is
idempotent (a job may run twice after a crash): branches are force-pushed to
the same name, a PR is looked up by its head before one is opened, sticky
comments are edited in place, and follow-up jobs are enqueued with keys.

``run_task``, ``rebaseline`` and ``reverify`` share the task's lane (one at a
time per task; they use the task's clone and harness state). ``publish`` has
its own lane so draft PRs appear while the rounds go on.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from bot import checks, obs, render, sticky
from bot.context import Context, harness_task_id, task_lane
from bot.gh import GitHubError, web_root
from bot.harness_port import SpecError, event_view
from bot.status import refresh_status
from bot.store import Candidate, Task
from bot.worker import JobRun, Permanent
from harness.gitutil import git, rev_parse
from verifier.verdict import Verdict

log = logging.getLogger("rsi.bot.jobs")


# --------------------------------------------------------------------- helpers


def _task(ctx: Context, run: JobRun) -> Task:
    task = ctx.store.task(run.payload["task_id"])
    if task is None:
        raise Permanent(f"task {run.payload['task_id']} does not exist")
    obs.bind_task(task.id)
    return task


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


def load_spec(ctx: Context, task: Task, clone: Path, default: str) -> Any:
    text = ctx.harness.load_config(clone, default)
    files = ctx.harness.repo_files(clone, default)
    return ctx.harness.build_task(text, task.proposal, harness_task_id(task.issue, task.generation),
                                  title=f"#{task.issue}", repo_files=files)


def _best_effort(fn, *args, **kw) -> None:
    """Cosmetic GitHub updates (status refreshes) must not abort a long run."""
    try:
        fn(*args, **kw)
    except GitHubError as e:
        log.warning("status update failed (will refresh later): %s", e)


def _verdict(c: Candidate) -> Verdict | None:
    return Verdict.model_validate(c.verdict) if c.verdict else None


def _history(ctx: Context, task: Task) -> list[Any]:
    """The task's candidates as chart points: each one's gain vs the Bk of its session."""
    return render.candidate_history(ctx.store.candidates(task.id, generation=task.generation))


def _ledger(clone: Path, task: Task) -> list[Any]:
    try:
        from harness.ledger import Ledger

        return Ledger(clone).records(task=harness_task_id(task.issue, task.generation))
    except Exception as e:  # the report still goes out without it
        log.info("no ledger for %s#%s: %s", task.repo, task.issue, e)
        return []


def _push(ctx: Context, task: Task, clone: Path, branch: str, *, lease: str | None = None) -> None:
    remote = ctx.gh.git_remote(task.repo)
    args = ["push", "--quiet"]
    args.append(f"--force-with-lease={branch}:{lease}" if lease else "--force")
    git(clone, *args, "origin", f"refs/heads/{branch}:refs/heads/{branch}", env=remote.git_env())


def _post_report(ctx: Context, task: Task, cand: Candidate, verdict: Verdict, clone: Path | None,
                 *, note: str = "", job_id: int | None = None) -> None:
    """The PR's sticky report and its completed ``rsi/verifier`` check (the job's
    live check on that commit when there is one, else a new one)."""
    ledger = _ledger(clone, task) if clone else []
    links = report_links(ctx, task, cand, verdict)
    body = render.report_comment(verdict, pr_note=note, history=_history(ctx, task),
                                 ledger=ledger, links=links)
    sticky.upsert(ctx.gh, ctx.store, task.repo, cand.pr_number, render.REPORT, body,
                  login=ctx.login())
    head = verdict.shas.get("candidate") or cand.sha
    payload = render.check_run(verdict, note=note, links=links)
    if not checks.finish(ctx, job_id, head_sha=head, **payload):
        ctx.gh.create_check_run(task.repo, head_sha=head,
                                external_id=f"{task.id}:{cand.generation}:{cand.n}",
                                details_url=checks.details_url(ctx, task), **payload)
    # a check left on an older head (the branch moved while queued) ends too
    checks.finish(ctx, job_id, conclusion="neutral", title="superseded: the branch moved",
                  summary=f"The verdict is on the branch's newer head `{render._short(head)}`.")


def report_links(ctx: Context, task: Task, cand: Candidate, verdict: Verdict) -> Any:
    """Links for the report: commits, compare views, the ledger file, the task page."""
    from harness.report import ReportLinks

    web = web_root(ctx.settings.github_api_url)
    runs = [d.run_id for d in ctx.store.dispatches_of(task.id, pending=False) if d.run_id]
    return ReportLinks(
        repo_url=f"{web}/{task.repo}" if web else "", page_url=checks.details_url(ctx, task) or "",
        branch=cand.branch or "", ledger_ref="rsi/ledger",
        artifacts_url=f"{web}/{task.repo}/actions/runs/{runs[-1]}" if runs else "",
        task_id=harness_task_id(task.issue, task.generation))


# --------------------------------------------------------------------- run_task


class RunWatcher:
    """Turns the loop's events into store updates, draft PRs and status refreshes.

    Called with live ``LoopEvent`` objects (local executor) or their JSON form
    (ingested from an ``actions`` run); ``finish`` records the run's outcome.
    """

    def __init__(self, ctx: Context, task: Task, gen: int, job_id: int | None = None):
        self.ctx, self.task, self.gen = ctx, task, gen
        self.job_id = job_id  # its live check shows the progress
        self.note = ""
        self.round: int | None = None

    def _progress(self, v: Any) -> None:
        """Round i/N and the pairs measured so far, on the job's live check."""
        data = v.get("data") if isinstance(v.get("data"), dict) else {}
        rnd = v.get("round") if isinstance(v.get("round"), int) else self.round
        self.round = rnd
        t = self.ctx.store.task(self.task.id)
        phase = data.get("phase") if v.kind == "progress" else (
            "baseline measured" if v.kind == "baseline" else "agent at work")
        text = render.check_progress_text(
            phase=str(phase or ""), round_=rnd, rounds=t.budget if t else None,
            candidate=v.get("candidate") if isinstance(v.get("candidate"), int) else None,
            pairs=data.get("pairs") if isinstance(data.get("pairs"), int) else None)
        # (runs are left out: a PATCH per pair, not per benchmark run, is enough)
        checks.progress(self.ctx, self.job_id, text)

    def __call__(self, ev: Any) -> None:
        ctx, task, gen = self.ctx, self.task, self.gen
        v = event_view(ev)
        if v.kind in ("progress", "round_started", "baseline"):
            self._progress(v)
        if v.kind == "baseline":
            t = ctx.store.task(task.id)
            sha = v.get("sha")
            ctx.store.update_task(task.id, generation=gen, state="running",
                                  b0_sha=t.b0_sha or sha, bk_sha=t.bk_sha or sha)
        elif v.kind == "round_started":
            n = v.get("round")
            if isinstance(n, int):
                # rounds_done counts finished rounds; this one is under way
                ctx.store.update_task(task.id, generation=gen, rounds_done=n - 1)
        elif v.kind == "candidate":
            record_candidate(ctx, task, gen, v)
            n = v.get("round")
            if isinstance(n, int):
                ctx.store.update_task(task.id, generation=gen, rounds_done=n)
        elif v.kind == "refused":
            self.note = render.inert(str(v.get("message", default="refused")), max_len=2000)
            ctx.store.update_task(task.id, generation=gen, state="refused")
        else:
            return
        _best_effort(refresh_status, ctx, task.id, note=self.note)

    def finish(self, status: str, reason: str) -> str:
        ctx, task, gen = self.ctx, self.task, self.gen
        if status == "refused" or self.note:
            state = "refused"
            self.note = self.note or render.inert(reason, max_len=2000)
        elif status in ("stopped", "paused"):
            state = status
            if status == "paused":
                self.note = f"Paused: {render.inert(reason, max_len=2000)}. `/rsi resume` continues."
        else:
            state = "finished"
        t = ctx.store.task(task.id)
        if t.stop and state == "finished" and t.budget and t.rounds_done < t.budget:
            state = "stopped"
        ctx.store.update_task(task.id, generation=gen, state=state)
        _best_effort(refresh_status, ctx, task.id, note=self.note)
        checks.finish_task_run(ctx, self.job_id, task, state)
        return state


def run_task(ctx: Context, run: JobRun) -> str:
    task = _task(ctx, run)
    gen = run.payload["generation"]
    if task.generation != gen:
        return "superseded"
    if task.stop:
        ctx.store.update_task(task.id, generation=gen, state="stopped")
        _best_effort(refresh_status, ctx, task.id)
        return "stopped before start"
    clone, default = ensure_clone(ctx, task)
    checks.started(ctx, task, run.job.id, "run_task")
    try:
        spec = load_spec(ctx, task, clone, default)
    except SpecError as e:
        ctx.store.update_task(task.id, generation=gen, state="invalid")
        refresh_status(ctx, task.id, errors=e.errors)
        checks.finish_task_run(ctx, run.job.id, task, "invalid")
        return f"invalid: {len(e.errors)} error(s)"
    reconcile(ctx, task, gen, clone)
    ctx.store.update_task(task.id, generation=gen, state="running" if task.b0_sha else "baseline")
    _best_effort(refresh_status, ctx, task.id)
    watcher = RunWatcher(ctx, task, gen, job_id=run.job.id)

    def should_stop() -> bool:
        t = ctx.store.task(task.id)
        return (run.cancelled() or t is None or t.generation != gen or t.stop
                or (t.budget is not None and t.rounds_done >= t.budget))

    result = ctx.harness.run_task(clone, spec, state_dir=ctx.harness_dir(task.repo, task.issue, gen),
                                  keep="propose", rounds=task.budget, should_stop=should_stop,
                                  on_event=watcher)
    t = ctx.store.task(task.id)
    if t.generation != gen:
        return "superseded"
    if run.cancelled():
        return "lease lost"
    # the loop swallows a watcher's errors: make sure no candidate was missed
    reconcile(ctx, task, gen, clone)
    status, reason = getattr(result, "status", "finished"), getattr(result, "reason", "")
    return f"{watcher.finish(status, reason)}: {reason}"


def reconcile(ctx: Context, task: Task, gen: int, clone: Path) -> None:
    """Record candidates the ledger has and the store missed (a crash between the
    loop's record and our write), and queue PRs that were never opened."""
    known = {c.n: c for c in ctx.store.candidates(task.id, generation=gen)}
    for rec in _ledger(clone, task):
        if getattr(rec, "event", "candidate") != "candidate" or rec.candidate in known:
            continue
        verdict = rec.verdict
        record_candidate(ctx, task, gen, event_view({
            "kind": "candidate", "candidate": rec.candidate, "round": rec.round,
            "branch": rec.branch or None, "sha": rec.sha or None, "verdict": verdict,
            "record": rec, "data": {"status": rec.status}}))
    _republish(ctx, task)


def _field(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def record_candidate(ctx: Context, task: Task, gen: int, v: Any) -> Candidate:
    """Store a candidate event; queue its draft PR when it is open for review
    (verdict ``accept``, or ``review``: a human must look, and a draft PR is
    where humans look)."""
    verdict = v.verdict
    record = v.get("record")
    n = v.get("candidate")
    if not isinstance(n, int):
        n = len(ctx.store.candidates(task.id, generation=gen)) + 1
    decision = (verdict.decision if verdict else _field(record, "decision") or "error")
    hypothesis = _field(record, "hypothesis") or v.get("message")
    branch = v.get("branch")
    sha = v.get("sha")
    status = (v.data.get("data") or {}).get("status")
    publishable = (status == "open" or (status is None and decision == "accept")) \
        and bool(branch) and bool(sha)
    existing = [c for c in ctx.store.candidates(task.id, generation=gen) if c.n == n]
    state = existing[0].state if existing and existing[0].state != "none" else (
        "pending" if publishable else "none")
    verdict_json = verdict.model_dump(mode="json", by_alias=True) if verdict else None
    cand = ctx.store.upsert_candidate(
        task.id, n, generation=gen, branch=branch, sha=sha, decision=decision,
        verdict=verdict_json, hypothesis=hypothesis, state=state)
    if publishable:
        ctx.store.enqueue("publish", {"task_id": task.id, "generation": gen, "n": n},
                          lane=f"publish:{task.id}", key=f"publish:{task.id}:{gen}:{n}:{sha}")
    return cand


def _republish(ctx: Context, task: Task) -> None:
    """After a crash between a candidate and its PR: queue the missing PRs again."""
    for c in ctx.store.candidates(task.id, generation=task.generation, state="pending"):
        ctx.store.enqueue("publish", {"task_id": task.id, "generation": task.generation,
                                      "n": c.n},
                          lane=f"publish:{task.id}", key=f"publish:{task.id}:{task.generation}:"
                                                        f"{c.n}:{c.sha}")


# --------------------------------------------------------------------- publish


def _candidate(ctx: Context, task: Task, gen: int, n: int) -> Candidate:
    for c in ctx.store.candidates(task.id, generation=gen):
        if c.n == n:
            return c
    raise Permanent(f"candidate {n} of task {task.id} (generation {gen}) is unknown")


def publish(ctx: Context, run: JobRun) -> str:
    """Push ``rsi/<issue>/<n>``, open its draft PR, ask the labeler to review,
    post the report and the ``rsi/verifier`` check run."""
    task = _task(ctx, run)
    gen, n = run.payload["generation"], run.payload["n"]
    cand = _candidate(ctx, task, gen, n)
    verdict = _verdict(cand)
    clone = ctx.clone_dir(task.repo, task.issue)
    if not cand.pr_number:  # (a retry after the PR was opened skips to the rest)
        if not rev_parse(clone, f"refs/heads/{cand.branch}"):
            raise Permanent(f"branch {cand.branch} is missing from the task's clone")
        _push(ctx, task, clone, cand.branch)
        default = ctx.gh.default_branch(task.repo)
        pulls = [p for p in ctx.gh.list_pulls(task.repo, head_prefix=cand.branch)
                 if p.head_ref == cand.branch]
        pr = pulls[0] if pulls else ctx.gh.create_pull(
            task.repo, title=render.pr_title(task.issue, n, cand.hypothesis),
            body=render.pr_body(issue=task.issue, n=n, hypothesis=cand.hypothesis,
                                verdict=verdict, labeler=task.labeler),
            head=cand.branch, base=default, draft=True)
        cand = ctx.store.upsert_candidate(task.id, n, generation=gen, pr_number=pr.number,
                                          state="open")
    if task.labeler and not ctx.is_us(task.labeler):
        try:
            ctx.gh.request_reviewers(task.repo, cand.pr_number, [task.labeler])
        except GitHubError as e:
            if e.retryable:
                raise
            log.warning("review request on #%s failed: %s", cand.pr_number, e)
    if verdict is not None:
        _post_report(ctx, task, cand, verdict, clone)
    _best_effort(refresh_status, ctx, task.id)
    return f"published #{cand.pr_number}"


# --------------------------------------------------------------------- rebaseline


def rebaseline(ctx: Context, run: JobRun) -> str:
    """Measure the merge commit (or the default branch) as the new Bk; the harness
    then re-verifies every open candidate on top of it (cherry-picked; a conflict
    is reported, not hidden). Each result is pushed and reported on its PR."""
    task = _task(ctx, run)
    state_dir = ctx.harness_dir(task.repo, task.issue, task.generation)
    if not (state_dir / "state.json").exists():
        _best_effort(refresh_status, ctx, task.id,
                     note="Nothing to rebaseline yet: the baseline has not been measured.")
        return "no task state yet"
    clone, default = ensure_clone(ctx, task)
    ref = run.payload.get("ref") or f"origin/{default}"
    sha = rev_parse(clone, ref)
    if sha is None:
        raise Permanent(f"{ref} is not a commit of {task.repo}")
    try:
        spec = load_spec(ctx, task, clone, default)
    except SpecError as e:
        ctx.store.update_task(task.id, state="invalid")
        refresh_status(ctx, task.id, errors=e.errors)
        return "invalid"
    merged_pr = run.payload.get("merged_pr")
    ctx.store.update_task(task.id, state="rebaselining")
    _best_effort(refresh_status, ctx, task.id)
    old_shas = {c.n: c.sha for c in ctx.store.candidates(task.id, generation=task.generation)}
    outcomes: list[Any] = []

    def on_event(ev: Any) -> None:
        v = event_view(ev)
        if v.kind == "reverified":
            outcomes.append(v)

    ctx.harness.rebaseline(clone, spec, sha, on_event=on_event,
                           state_dir=ctx.harness_dir(task.repo, task.issue, task.generation))
    return apply_rebaseline(ctx, task, clone, sha, merged_pr, outcomes, old_shas)


def apply_rebaseline(ctx: Context, task: Task, clone: Path, sha: str, merged_pr: int | None,
                     outcomes: list[Any], old_shas: dict[int, str | None]) -> str:
    """Publish a rebaseline's re-verifications: push moved branches, update reports."""
    by_n = {c.n: c for c in ctx.store.candidates(task.id, generation=task.generation)}
    ctx.store.update_task(task.id, bk_sha=sha)
    task = ctx.store.task(task.id)
    note = render.reverified_note(sha, merged_pr)
    counts: dict[str, int] = {}
    for v in outcomes:
        n = v.get("candidate")
        cand = by_n.get(n)
        info = v.data.get("data") or {}
        what = info.get("outcome", "reverified")
        counts[what] = counts.get(what, 0) + 1
        if cand is None or not cand.pr_number or cand.state not in ("open", "conflict"):
            continue
        if what == "merged":
            continue  # its change is in Bk (usually: this is the PR that merged)
        if what == "conflict":
            _report_conflict(ctx, task, cand, merged_pr, info.get("reason", ""))
            continue
        new_sha = v.get("sha") or info.get("new_sha")
        if new_sha and new_sha != old_shas.get(n):
            _push(ctx, task, clone, cand.branch, lease=old_shas.get(n))
        verdict = v.verdict
        if verdict is None:
            continue
        cand = ctx.store.upsert_candidate(
            task.id, cand.n, generation=cand.generation, sha=new_sha or cand.sha,
            decision=verdict.decision, state="open",
            verdict=verdict.model_dump(mode="json", by_alias=True))
        _post_report(ctx, task, cand, verdict, clone, note=note)
    t = ctx.store.task(task.id)
    more = (not t.stop and t.budget is not None and t.rounds_done < t.budget
            and t.state not in ("invalid", "refused"))
    if more:
        ctx.store.enqueue("run_task", {"task_id": t.id, "generation": t.generation},
                          lane=task_lane(t.id), key=f"run:{t.id}:{t.generation}:bk:{sha}")
    ctx.store.update_task(task.id, state="queued" if more else (
        "stopped" if t.stop else "finished"))
    summary = render.inert(", ".join(f"{k}: {v}" for k, v in sorted(counts.items())),
                           one_line=True, max_len=300) or "none open"
    _best_effort(refresh_status, ctx, task.id,
                 note=f"Bk is now `{render._short(sha)}`" + (f" (#{merged_pr} merged)" if merged_pr else "")
                 + f". Open candidates re-verified ({summary}).")
    return f"bk={render._short(sha)} ({summary})"


def _report_conflict(ctx: Context, task: Task, cand: Candidate, merged_pr: int | None,
                     detail: str) -> None:
    cand = ctx.store.upsert_candidate(task.id, cand.n, generation=cand.generation,
                                      state="conflict")
    text = render.conflict_note(merged_pr, detail)
    old = _verdict(cand)
    body = (render.report_comment(old, pr_note=text) if old
            else render.with_marker(text, render.REPORT))
    sticky.upsert(ctx.gh, ctx.store, task.repo, cand.pr_number, render.REPORT, body,
                  login=ctx.login())
    ctx.gh.create_check_run(task.repo, head_sha=cand.sha, conclusion="neutral",
                            title="conflicts with the new baseline", summary=text)


# --------------------------------------------------------------------- reverify


def reverify(ctx: Context, run: JobRun) -> str:
    """``/rsi rerun``: judge the PR's head again against the current Bk and B0."""
    task = _task(ctx, run)
    p = run.payload
    cand = _candidate(ctx, task, p.get("generation", task.generation), p["n"])
    if cand.state not in ("open", "conflict") or not cand.pr_number:
        return f"candidate {cand.n} is {cand.state}"
    clone, default = ensure_clone(ctx, task)
    remote = ctx.gh.git_remote(task.repo)
    # the PR head may have moved (a maintainer pushed to it): verify what is there
    git(clone, "fetch", "--quiet", "origin",
        f"+refs/heads/{cand.branch}:refs/heads/{cand.branch}", env=remote.git_env())
    head = rev_parse(clone, f"refs/heads/{cand.branch}")
    checks.started(ctx, task, run.job.id, "reverify", head_sha=head, n=cand.n)
    try:
        spec = load_spec(ctx, task, clone, default)
    except SpecError as e:
        refresh_status(ctx, task.id, errors=e.errors)
        checks.fail_job(ctx, run.job.id, "the task's proposal or repo config has errors: "
                                         "see the status comment on the issue")
        return "invalid"
    verdict = ctx.harness.reverify(clone, spec, cand.branch,
                                   state_dir=ctx.harness_dir(task.repo, task.issue,
                                                             task.generation))
    return apply_reverify(ctx, task, cand, verdict, head, clone, p.get("requested_by"),
                          job_id=run.job.id)


def apply_reverify(ctx: Context, task: Task, cand: Candidate, verdict: Verdict, head: str | None,
                   clone: Path | None, requested_by: str | None, *,
                   job_id: int | None = None) -> str:
    if not verdict.shas.get("candidate") and head:
        verdict = verdict.model_copy(update={"shas": {**verdict.shas, "candidate": head}})
    head = verdict.shas.get("candidate") or head
    cand = ctx.store.upsert_candidate(task.id, cand.n, generation=cand.generation, sha=head,
                                      decision=verdict.decision, state="open",
                                      verdict=verdict.model_dump(mode="json", by_alias=True))
    note = render.reverified_note(verdict.shas.get("bk")) + (
        f" Requested by @{requested_by}." if requested_by else "")
    _post_report(ctx, task, cand, verdict, clone, note=note, job_id=job_id)
    _best_effort(refresh_status, ctx, task.id)
    return f"reverified {cand.n}: {verdict.decision}"
