"""The runner's side of the ``actions`` executor: ``rsi worker --job JOB``.

Runs one dispatched job on a checkout of the target repo with the harness,
and writes ``<out>/result.json`` (the job, the loop's events, the outcome)
and ``<out>/branches.bundle`` (the ``rsi/*`` branches, for the bot to push).
It needs no GitHub credentials and never raises for a failed job: the error
is in the result, so the bot reports it as infrastructure, not as a verdict.
"""

from __future__ import annotations

import json
import traceback
from pathlib import Path
from typing import Any

from bot.executors.actions import JOB_SCHEMA, RESULT_SCHEMA
from bot.harness_port import HarnessPort, RealHarness
from bot.tasks import JOBS
from harness.gitutil import git


def execute(job: dict[str, Any], *, repo: Path, out: Path, state_dir: Path,
            harness: HarnessPort | None = None) -> dict[str, Any]:
    from harness.events import dump_event

    harness = harness or RealHarness()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    events: list[dict[str, Any]] = []
    result: dict[str, Any] = {"schema": RESULT_SCHEMA, "job": job, "events": events}
    try:
        if job.get("schema") != JOB_SCHEMA:
            raise ValueError(f"unknown job schema {job.get('schema')!r}")
        registered = JOBS.get(job.get("kind"))  # type: ignore[arg-type]  # a JobKind is its string
        on_runner = registered.on_runner if registered is not None else None
        if registered is None or on_runner is None:
            raise ValueError(f"unknown job kind {job.get('kind')!r}")
        registered.payload.load(job.get("payload"))  # PayloadError: says which field is wrong
        repo = Path(repo).resolve()
        sd = Path(state_dir) / job["repo"].replace("/", "__") / f"issue-{job['issue']}" / \
            f"gen-{job['generation']}"
        default = _default_branch(repo)
        spec = harness.build_task(harness.load_config(repo, default), job.get("proposal"),
                                  job["task_id"], title=f"#{job['issue']}",
                                  repo_files=harness.repo_files(repo, default))
        result.update(on_runner(harness, repo, spec, job, state_dir=sd, default=default,
                                on_event=lambda ev: events.append(dump_event(ev))))
        _bundle(repo, out / "branches.bundle")
    except Exception as exc:  # noqa: BLE001 - reported in the result, never raised
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()[-4000:]
    (out / "result.json").write_text(json.dumps(result, default=str))
    return result


def _default_branch(repo: Path) -> str:
    from harness.gitutil import default_branch

    return default_branch(repo)


def _bundle(repo: Path, path: Path) -> None:
    # candidate branches, and the ledger (so the bot's reports can show it)
    refs = git(repo, "for-each-ref", "--format=%(refname)", "refs/heads/rsi/").split()
    if refs:
        git(repo, "bundle", "create", str(path), *refs)
