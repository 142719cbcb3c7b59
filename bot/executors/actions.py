"""The ``actions`` executor: heavy jobs run on the target repo's self-hosted runners.

Bot side::

    job claimed -> dispatch <target>/.github/workflows/<RSI_JOB_WORKFLOW> on the
                   default branch, inputs: job (JSON), runner_labels (JSON list)
    workflow_run.completed -> list the run's artifacts -> download "rsi-result"
                   -> result.json (job + loop events) and branches.bundle
                   -> the same bookkeeping as a local run (each job's ``ingest``, bot.tasks)

Only runs the bot dispatched are ingested (:func:`run_problem`, :func:`ingest`):
a ``workflow_dispatch`` run of the job workflow, on the default branch of the
same repository (not a fork), by the bot itself, whose result carries the
one-time nonce the bot recorded for that job (a replayed or forged result finds
no unconsumed nonce). The job is the one the bot recorded, never the result's
copy. From the bundle only the expected ``rsi/<task>/<n>`` branches whose
commits descend from the recorded base are taken, and only loop events that
name exactly those branch heads are applied.

Runner side (``rsi worker --job ...``, see :mod:`bot.executors.remote`): runs
the harness on the checkout, writes ``result.json`` and a git bundle of the
``rsi/*`` branches it made, and the workflow uploads them. Runners need no
inbound access and no bot credentials: the bot pushes branches and opens PRs
itself from the bundle. GitHub Actions queues, places and scales the runs.
"""

from __future__ import annotations

import io
import json
import logging
import re
import secrets
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from bot import checks, crash, obs, render
from bot.context import Context, harness_task_id
from bot.gh import GitHubError
from bot.payloads import ReverifyPayload, RunTaskPayload, model_of
from bot.status import refresh_status
from bot.tasks import job as job_of
from bot.tasks.clone import commit_of, ensure_clone
from bot.tasks.common import best_effort, candidate_of, task_of
from bot.vocab import JobKind, TaskState
from bot.worker import JobRun, Permanent, Retry
from harness.gitutil import GitError, git, rev_parse

log = logging.getLogger("rsi.bot.actions")

ARTIFACT = "rsi-result"
RESULT_SCHEMA = "rsi.job-result/2"
"""/2: typed loop events (``harness.events``), and the job's own result (``result``:
a ``TaskResult``; ``rebaseline``: a ``RebaselineResult``; ``verdict``)."""
JOB_SCHEMA = "rsi.job/1"


def job_document(ctx: Context, run: JobRun) -> dict[str, Any]:
    """Everything the runner needs to run this job, and nothing secret."""
    task = task_of(ctx, run)
    args = run.args_as(model_of(run.job.kind))
    doc = {
        "schema": JOB_SCHEMA, "job_id": run.job.id, "attempt": run.job.attempts,
        "kind": run.job.kind, "payload": args.dump(), "repo": task.repo, "issue": task.issue,
        "generation": task.generation,
        "task_id": harness_task_id(task.issue, task.generation),
        "proposal": task.proposal or "", "budget": task.budget, "bk_sha": task.bk_sha,
    }
    if isinstance(args, ReverifyPayload):
        cand = candidate_of(ctx, task,
                            task.generation if args.generation is None else args.generation,
                            args.n)
        doc["branch"] = cand.branch
        doc["sha"] = cand.sha
    return doc


def runner_labels(ctx: Context, task: Any) -> list[str]:
    """The runner labels of the task's runner profile (``runs_on``; for cuda and npu
    profiles without it ``["self-hosted", device]``; else ``RSI_RUNNER_LABELS``)."""
    from bot.harness_port import SpecError
    from harness.spec import CONFIG_PATH

    text = ctx.gh.get_file_text(task.repo, CONFIG_PATH)
    if text is None:
        return list(ctx.settings.runner_labels)
    try:
        spec = ctx.harness.build_task(text, task.proposal,
                                      harness_task_id(task.issue, task.generation))
    except SpecError:
        return list(ctx.settings.runner_labels)  # the runner's job reports the errors
    profile = spec.runner.active
    if profile.runs_on:
        return list(profile.runs_on)
    if profile.device in ("cuda", "npu"):
        return ["self-hosted", profile.device]
    return list(ctx.settings.runner_labels)


class ActionsExecutor:
    name = "actions"

    def run(self, ctx: Context, run: JobRun) -> str:
        doc = job_document(ctx, run)
        repo = doc["repo"]
        args = run.args
        if isinstance(args, RunTaskPayload):
            t = task_of(ctx, run)
            if t.generation != args.generation:
                return "superseded"
            ctx.store.update_task(t.id, state=TaskState.RUNNING if t.b0_sha else TaskState.BASELINE)
        task = task_of(ctx, run)
        base = task.bk_sha
        if not base:
            clone, default = ensure_clone(ctx, task)
            base = commit_of(clone, f"refs/remotes/origin/{default}")
        labels = runner_labels(ctx, task)
        if run.job.kind in (JobKind.RUN_TASK, JobKind.REVERIFY):  # a rebaseline reports per candidate
            checks.ensure(ctx, task, run.job.id, run.job.kind, head_sha=doc.get("sha"),
                          n=(args.n if isinstance(args, ReverifyPayload) else None))
        prev = ctx.store.dispatch_of_job(run.job.id)
        if prev is not None:  # an earlier attempt of this job dispatched (or tried to)
            if prev.consumed_at is not None:
                return f"its result was already ingested (nonce {prev.nonce[:8]})"
            run_id = prev.run_id or find_run(ctx, repo, prev.nonce, since=prev.created_at)
            if not run_id:
                refuse_unmarked_redispatch(ctx, repo, prev)
            if run_id:  # GitHub took it: continue that run, never dispatch a second
                if prev.run_id is None:
                    ctx.store.set_dispatch_run(prev.nonce, int(run_id))
                labels = list(prev.doc.get("runner_labels") or labels)
                checks.dispatched(ctx, repo, run.job.id, int(run_id), labels)
                return f"already dispatched as run {run_id}"
            nonce, doc = prev.nonce, prev.doc  # not taken (or not listed yet): same nonce again
            labels = list(doc.get("runner_labels") or labels)
        else:
            doc["nonce"] = nonce = secrets.token_hex(16)
            doc["runner_labels"] = labels
            # stored before dispatching: a kill after GitHub took it leaves the nonce to look for
            ctx.store.record_dispatch(nonce, repo=repo, task_id=task.id,
                                      generation=task.generation, kind=run.job.kind, doc=doc,
                                      base_sha=base, job_id=run.job.id)
        inputs = {"job": json.dumps(doc, sort_keys=True), "runner_labels": json.dumps(labels)}
        ref = ctx.gh.default_branch(repo)
        if prev is None:  # an old workflow gets the one-line update proposed, once
            best_effort_pr(ctx, repo, ref)
        run_id = ctx.gh.dispatch_workflow(repo, ctx.settings.job_workflow, ref, inputs)
        crash.point("dispatched")
        if not run_id:  # a GitHub without return_run_details: the run carries the nonce
            recorded = ctx.store.dispatch(nonce)
            run_id = find_run(ctx, repo, nonce,
                              since=recorded.created_at if recorded else ctx.clock())
        if run_id:
            ctx.store.set_dispatch_run(nonce, int(run_id))
        checks.dispatched(ctx, repo, run.job.id, int(run_id) if run_id else None, labels)
        best_effort(refresh_status, ctx, task.id,
                    note=f"Dispatched to runners `{', '.join(labels)}`.")
        return f"dispatched {run.job.kind} to {ctx.settings.job_workflow} ({', '.join(labels)})"


def find_run(ctx: Context, repo: str, nonce: str, *, since: float) -> int | None:
    """The job workflow's run that carries ``nonce`` in its title (the caller
    workflow's ``run-name: rsi-job ${{ fromJSON(inputs.job).nonce }}``), if GitHub lists
    one created since shortly before ``since``."""
    for w in ctx.gh.list_workflow_runs(repo, ctx.settings.job_workflow,
                                       created_since=since - 300):
        if nonce in (w.display_title or "").split():
            return w.id
    return None


RUN_NAME = "run-name: rsi-job ${{ fromJSON(inputs.job).nonce }}"
"""The job workflow's line that puts the job's nonce in each run's title."""
_RUN_NAME = re.compile(r"^run-name:.*\$\{\{\s*fromJSON\(\s*inputs\.job\s*\)\.nonce\s*\}\}",
                       re.MULTILINE)
RUN_NAME_BRANCH = "rsi-bot/workflow-run-name"
"""The bot's own branch for the proposed update (never ``rsi/...``: those are candidates)."""


def workflow_path(ctx: Context) -> str:
    return f".github/workflows/{ctx.settings.job_workflow}"


def marks_runs(text: str | None) -> bool:
    """Whether a job workflow's runs carry the job's nonce in their title."""
    return bool(text and _RUN_NAME.search(text))


def with_run_name(text: str) -> str:
    """The workflow with :data:`RUN_NAME` added after its top-level ``name:`` (or first)."""
    lines = text.splitlines(keepends=True)
    at = next((i + 1 for i, line in enumerate(lines) if line.startswith("name:")), 0)
    if at and not lines[at - 1].endswith("\n"):
        lines[at - 1] += "\n"
    return "".join(lines[:at] + [RUN_NAME + "\n"] + lines[at:])


def refuse_unmarked_redispatch(ctx: Context, repo: str, prev: Any) -> None:
    """A job dispatched before a crash whose run GitHub does not list by its nonce.
    With the ``run-name`` line that means GitHub did not take it (dispatched again,
    same nonce). Without it no run can be told apart: when the workflow has runs
    since the dispatch that no recorded dispatch owns, one of them may be this job's,
    and a second dispatch would run it twice: refused (``Permanent``), saying why and
    what to do; its run's result, if it was one, is still ingested by its nonce."""
    text = ctx.gh.get_file_text(repo, workflow_path(ctx))
    if marks_runs(text):
        return
    owned = {d.run_id for d in ctx.store.dispatches_of(prev.task_id, pending=False) if d.run_id}
    unowned = [w.id for w in ctx.gh.list_workflow_runs(repo, ctx.settings.job_workflow,
                                                       created_since=prev.created_at - 2)
               if w.id not in owned]
    if not unowned:
        return  # GitHub took nothing since: dispatching again (same nonce) is safe
    pr = best_effort_pr(ctx, repo)
    raise Permanent(
        f"job {prev.job_id} was dispatched before a restart, and `{workflow_path(ctx)}` has no "
        f"`{RUN_NAME}` line, so its run cannot be told from run(s) "
        f"{', '.join(str(i) for i in unowned[:5])}: not dispatched again (it would run twice). "
        f"If one of those runs is this job, its result is still applied when it completes. "
        f"Add the line{f' (#{pr} does)' if pr else ''}, then `/rsi resume`.")


def best_effort_pr(ctx: Context, repo: str, default: str | None = None) -> int | None:
    """:func:`propose_run_name`, its failure logged (it never stops a dispatch)."""
    try:
        return propose_run_name(ctx, repo, default or ctx.gh.default_branch(repo))
    except (GitHubError, GitError) as e:
        log.warning("could not propose the run-name line to %s: %s", repo, e)
        return None


def propose_run_name(ctx: Context, repo: str, default: str) -> int | None:
    """When the job workflow lacks :data:`RUN_NAME` (repositories onboarded before it
    existed), a PR adding that one line, on the bot's own branch, once (found again
    by its head in this repository and its author, open or closed). Returns its
    number, or None when the workflow has the line (or is not there)."""
    path = workflow_path(ctx)
    text = ctx.gh.get_file_text(repo, path)
    if text is None or marks_runs(text):
        return None
    for p in ctx.gh.list_pulls(repo, head_prefix=RUN_NAME_BRANCH, state="all"):
        if p.head_ref == RUN_NAME_BRANCH and p.head_repo_full_name == repo and ctx.is_us(p.user):
            return p.number
    remote = ctx.gh.git_remote(repo)
    env = remote.git_env()
    with tempfile.TemporaryDirectory(prefix="rsi-run-name-") as tmp:
        clone = Path(tmp) / "clone"
        git(tmp, "clone", "--quiet", "--depth", "1", "--branch", default, remote.url, str(clone),
            env=env)
        target = clone / path
        if target.is_symlink() or not target.is_file():
            return None
        target.write_text(with_run_name(target.read_text()))
        git(clone, "checkout", "--quiet", "-B", RUN_NAME_BRANCH)
        git(clone, "add", "--", path)
        git(clone, "-c", "user.name=rsi-bot", "-c", "user.email=rsi-bot@users.noreply.github.com",
            "commit", "--quiet", "--no-verify", "-m", f"{path}: the job's nonce in each run's title")
        git(clone, "push", "--quiet", "--force", "origin", f"HEAD:refs/heads/{RUN_NAME_BRANCH}",
            env=env)
    pr = ctx.gh.create_pull(repo, title=f"rsi-bot: add `run-name` to {path}",
                            body=RUN_NAME_BODY.format(path=path, line=RUN_NAME),
                            head=RUN_NAME_BRANCH, base=default, draft=False)
    return pr.number


RUN_NAME_BODY = """This adds one line to `{path}`:

```yaml
{line}
```

It puts the nonce of each job the bot dispatches in the run's title. After a
restart, the bot finds a job's run by it instead of dispatching the job a
second time; without it, a job dispatched just before a crash is refused rather
than run twice. Nothing else changes.
"""


def read_artifact(data: bytes) -> tuple[dict[str, Any], bytes | None]:
    """(result.json, branches.bundle or None) from the artifact's zip."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        names = {Path(n).name: n for n in zf.namelist()}
        if "result.json" not in names:
            raise Permanent("the rsi-result artifact has no result.json")
        result = json.loads(zf.read(names["result.json"]))
        bundle = zf.read(names["branches.bundle"]) if "branches.bundle" in names else None
    if result.get("schema") != RESULT_SCHEMA:
        raise Permanent(f"unknown result schema {result.get('schema')!r}")
    return result, bundle


def run_problem(ctx: Context, payload: dict[str, Any], default_branch: str) -> str | None:
    """Why a ``workflow_run`` event is not a run the bot dispatched (None: it may be)."""
    run = payload.get("workflow_run") or {}
    repo = (payload.get("repository") or {}).get("full_name")
    if run.get("event") != "workflow_dispatch":
        return f"triggered by {run.get('event')!r}, not a dispatch"
    head_repo = (run.get("head_repository") or {}).get("full_name")
    if head_repo != repo:
        return f"head repository {head_repo!r} is not {repo}"
    if run.get("head_branch") != default_branch:
        return f"ran on {run.get('head_branch')!r}, not the default branch {default_branch!r}"
    for who in ("actor", "triggering_actor"):
        login = (run.get(who) or {}).get("login")
        if who in run and not ctx.is_us(login):
            return f"{who} {login!r} is not the bot"
    return None


def ingest(ctx: Context, repo: str, run_id: int, *, conclusion: str | None = None) -> str:
    """Apply a finished ``rsi-job`` run's result, as a local run would have, when it
    answers a job the bot dispatched (its nonce, once)."""
    arts = [a for a in ctx.gh.list_run_artifacts(repo, run_id)
            if a.name == ARTIFACT and not a.expired]
    if not arts:
        if conclusion == "success":
            raise Retry(f"run {run_id} has no {ARTIFACT} artifact yet")
        checks.run_ended(ctx, run_id, conclusion)
        return f"run {run_id} ended {conclusion} without a result (runner or workflow error)"
    result, bundle = read_artifact(ctx.gh.download_artifact(repo, arts[0].id))
    nonce = str((result.get("job") or {}).get("nonce") or "")
    rec = ctx.store.dispatch(nonce) if re.fullmatch(r"[0-9a-f]{32}", nonce) else None
    if rec is None or rec.repo != repo:
        return f"refused: run {run_id}'s result answers no job the bot dispatched to {repo}"
    if rec.run_id is not None and rec.run_id != run_id:
        return f"refused: the job was dispatched as run {rec.run_id}, not {run_id}"
    if rec.consumed_at is not None:
        return f"refused: the result of job {nonce[:8]} was already ingested (a replay)"
    job_id = obs.current_job_id()
    owner = f"job:{job_id}" if job_id is not None else f"call:{secrets.token_hex(8)}"
    # Consumed only once applied: a kill between the two leaves the claim to this
    # job, whose re-run (same job id) applies again (every step of an apply finds
    # what it made: PRs by branch, reports by marker, checks by external id).
    if not ctx.store.claim_ingest(nonce, owner, hold_s=max(3600.0, ctx.settings.lease_s * 4)):
        if (ctx.store.dispatch(nonce) or rec).consumed_at is not None:
            return f"refused: the result of job {nonce[:8]} was already ingested (a replay)"
        raise Retry(f"the result of job {nonce[:8]} is being ingested by another job")
    crash.point("ingest.claimed")
    try:
        done = _apply(ctx, repo, rec, result, bundle)
    except Permanent:
        ctx.store.consume_dispatch(nonce)  # it will never apply: never tried again
        raise
    except BaseException:  # retried by the worker: the retry must find the nonce unused
        ctx.store.release_dispatch(nonce)
        raise
    crash.point("ingest.applied")
    ctx.store.consume_dispatch(nonce)
    return done


def _apply(ctx: Context, repo: str, rec: Any, result: dict[str, Any], bundle: bytes | None
           ) -> str:
    job = rec.doc  # what the bot dispatched, not what the result says it was
    task = ctx.store.task(rec.task_id)
    if task is None:
        raise Permanent(f"task {rec.task_id} does not exist")
    obs.bind_task(task.id)
    if task.generation != rec.generation:
        return "superseded"
    clone, _default = ensure_clone(ctx, task)
    heads = import_bundle(clone, bundle, harness_task_id(task.issue, task.generation),
                          rec.base_sha) if bundle else {}
    kind = job["kind"]
    job_id = job.get("job_id") if isinstance(job.get("job_id"), int) else None
    if result.get("error"):
        best_effort(refresh_status, ctx, task.id,
                    note="⚠️ The runner's job failed (infrastructure, not the change): "
                         + render.inert(str(result["error"])[:500], one_line=True))
        if job_id is not None:
            checks.fail_job(ctx, job_id, str(result["error"])[:500])
        if kind == JobKind.RUN_TASK:
            ctx.store.update_task(task.id, generation=task.generation, state=TaskState.FAILED)
        return f"runner error: {str(result['error'])[:200]}"
    try:
        ingest = job_of(kind).ingest
    except KeyError as e:
        raise Permanent(f"{e.args[0]} in the dispatch record") from None
    if ingest is None:
        raise Permanent(f"job kind {kind!r} does not run on runners")
    return ingest(ctx, task, clone, job, result, heads=heads, events=load_events(result),
                  job_id=job_id)


def load_events(result: dict[str, Any]) -> list[Any]:
    """The runner's loop events, each validated (``harness.events``); one that is
    not an event is dropped with a warning. Events only drive progress."""
    from harness.events import load_event

    raw = result.get("events")
    events = []
    for i, data in enumerate(raw if isinstance(raw, list) else []):
        try:
            events.append(load_event(data))
        except ValueError as e:
            log.warning("dropping event %d of the runner's result: %s", i, str(e)[:200])
    return events


INCOMING = "refs/rsi-incoming/"


def import_bundle(clone: Any, bundle: bytes, task_id: str, base: str | None) -> dict[str, str]:
    """Fetch a runner's bundle into a quarantine namespace and keep only the
    branches ``rsi/<task_id>/<n>`` whose heads descend from ``base`` (and the
    ledger, as a fast-forward). Returns {branch: sha} of what was taken."""
    wanted = re.compile(rf"rsi/{re.escape(task_id)}/[1-9][0-9]{{0,5}}")
    taken: dict[str, str] = {}
    with tempfile.NamedTemporaryFile(suffix=".bundle") as fh:
        fh.write(bundle)
        fh.flush()
        git(clone, "bundle", "verify", "--quiet", fh.name)
        git(clone, "fetch", "--quiet", "--no-tags", fh.name, f"+refs/heads/rsi/*:{INCOMING}rsi/*")
    try:
        listing = git(clone, "for-each-ref", "--format=%(refname) %(objectname)", INCOMING)
        for line in listing.splitlines():
            ref, sha = line.split()
            branch = ref[len(INCOMING):]
            if wanted.fullmatch(branch):
                ok = base is not None and _descends(clone, sha, base)
            elif branch == "rsi/ledger":
                old = rev_parse(clone, "refs/heads/rsi/ledger")
                ok = old is None or _descends(clone, sha, old)
            else:
                ok = False
            if ok:
                git(clone, "update-ref", f"refs/heads/{branch}", sha)
                taken[branch] = sha
            else:
                log.warning("bundle ref %s (%s) refused: not an expected branch of task %s "
                            "descending from %s", branch, sha[:12], task_id, (base or "?")[:12])
    finally:
        for line in git(clone, "for-each-ref", "--format=%(refname)", INCOMING).splitlines():
            git(clone, "update-ref", "-d", line.strip())
    return taken


def _descends(clone: Any, sha: str, base: str) -> bool:
    try:
        git(clone, "merge-base", "--is-ancestor", base, sha)
        return True
    except GitError:
        return False
