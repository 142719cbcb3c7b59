"""The ``actions`` executor: heavy jobs run on the target repo's self-hosted runners.

Bot side::

    job claimed -> dispatch <target>/.github/workflows/<RSI_JOB_WORKFLOW> on the
                   default branch, inputs: job (JSON), runner_labels (JSON list)
    workflow_run.completed -> list the run's artifacts -> download "rsi-result"
                   -> result.json (job + loop events) and branches.bundle
                   -> the same bookkeeping as a local run (bot.jobs)

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
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from bot import jobs
from bot.context import Context, harness_task_id
from bot.harness_port import event_view
from bot.status import refresh_status
from bot.worker import JobRun, Permanent, Retry
from harness.gitutil import git, rev_parse

log = logging.getLogger("rsi.bot.actions")

ARTIFACT = "rsi-result"
RESULT_SCHEMA = "rsi.job-result/1"
JOB_SCHEMA = "rsi.job/1"


def job_document(ctx: Context, run: JobRun) -> dict[str, Any]:
    """Everything the runner needs to run this job, and nothing secret."""
    task = ctx.store.task(run.payload["task_id"])
    if task is None:
        raise Permanent(f"task {run.payload['task_id']} does not exist")
    doc = {
        "schema": JOB_SCHEMA, "job_id": run.job.id, "attempt": run.job.attempts,
        "kind": run.job.kind, "payload": run.payload, "repo": task.repo, "issue": task.issue,
        "generation": task.generation,
        "task_id": harness_task_id(task.issue, task.generation),
        "proposal": task.proposal or "", "budget": task.budget, "bk_sha": task.bk_sha,
    }
    if run.job.kind == "reverify":
        cand = jobs._candidate(ctx, task, run.payload.get("generation", task.generation),
                               run.payload["n"])
        doc["branch"] = cand.branch
        doc["sha"] = cand.sha
    return doc


class ActionsExecutor:
    name = "actions"

    def run(self, ctx: Context, run: JobRun) -> str:
        doc = job_document(ctx, run)
        repo = doc["repo"]
        if run.job.kind == "run_task":
            t = ctx.store.task(run.payload["task_id"])
            if t.generation != run.payload["generation"]:
                return "superseded"
            ctx.store.update_task(t.id, state="running" if t.b0_sha else "baseline")
        inputs = {"job": json.dumps(doc, sort_keys=True),
                  "runner_labels": json.dumps(list(ctx.settings.runner_labels))}
        ref = ctx.gh.default_branch(repo)
        ctx.gh.dispatch_workflow(repo, ctx.settings.job_workflow, ref, inputs)
        jobs._best_effort(refresh_status, ctx, doc["payload"]["task_id"],
                          note=f"Dispatched to runners `{', '.join(ctx.settings.runner_labels)}`.")
        return f"dispatched {run.job.kind} to {ctx.settings.job_workflow}"


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


def ingest(ctx: Context, repo: str, run_id: int, *, conclusion: str | None = None) -> str:
    """Apply a finished ``rsi-job`` run's result, as a local run would have."""
    arts = [a for a in ctx.gh.list_run_artifacts(repo, run_id)
            if a.name == ARTIFACT and not a.expired]
    if not arts:
        if conclusion == "success":
            raise Retry(f"run {run_id} has no {ARTIFACT} artifact yet")
        return f"run {run_id} ended {conclusion} without a result (runner or workflow error)"
    result, bundle = read_artifact(ctx.gh.download_artifact(repo, arts[0].id))
    job = result["job"]
    if job["repo"] != repo:
        raise Permanent(f"result of {job['repo']} delivered by a run of {repo}")
    task = ctx.store.task(job["payload"]["task_id"])
    if task is None:
        raise Permanent(f"task {job['payload']['task_id']} does not exist")
    if task.generation != job["generation"]:
        return "superseded"
    clone, _default = jobs.ensure_clone(ctx, task)
    if bundle:
        with tempfile.NamedTemporaryFile(suffix=".bundle") as fh:
            fh.write(bundle)
            fh.flush()
            git(clone, "fetch", "--quiet", "--force", fh.name, "+refs/heads/rsi/*:refs/heads/rsi/*")
    events = [event_view(e) for e in result.get("events", [])]
    kind = job["kind"]
    if result.get("error"):
        jobs._best_effort(refresh_status, ctx, task.id,
                          note=f"⚠️ The runner's job failed (infrastructure, not the change): "
                               f"{result['error'][:500]}")
        if kind == "run_task":
            ctx.store.update_task(task.id, generation=task.generation, state="failed")
        return f"runner error: {result['error'][:200]}"
    if kind == "run_task":
        watcher = jobs.RunWatcher(ctx, task, task.generation)
        for ev in events:
            watcher(ev)
        return watcher.finish(result.get("status", "finished"), result.get("reason", ""))
    if kind == "rebaseline":
        sha = result.get("bk_sha") or job["payload"].get("ref")
        old = {c.n: c.sha for c in ctx.store.candidates(task.id, generation=task.generation)}
        outcomes = [e for e in events if e.kind == "reverified"]
        return jobs.apply_rebaseline(ctx, task, clone, sha, job["payload"].get("merged_pr"),
                                     outcomes, old)
    if kind == "reverify":
        from verifier.verdict import Verdict

        cand = jobs._candidate(ctx, task, job["payload"].get("generation", task.generation),
                               job["payload"]["n"])
        verdict = Verdict.model_validate(result["verdict"])
        head = rev_parse(clone, f"refs/heads/{cand.branch}") or job.get("sha")
        return jobs.apply_reverify(ctx, task, cand, verdict, head, clone,
                                   job["payload"].get("requested_by"))
    raise Permanent(f"unknown job kind {kind!r} in the result")
