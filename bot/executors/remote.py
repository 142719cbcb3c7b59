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
from harness.gitutil import git


def _default(o: Any) -> Any:
    if hasattr(o, "to_json"):  # Verdict: by alias ("schema")
        return json.loads(o.to_json())
    if hasattr(o, "model_dump"):
        return o.model_dump(mode="json", by_alias=True)
    return str(o)


def _jsonable_event(ev: Any) -> dict[str, Any]:
    if hasattr(ev, "model_dump"):
        ev = {k: getattr(ev, k) for k in type(ev).model_fields}
    return json.loads(json.dumps(ev, default=_default))


def execute(job: dict[str, Any], *, repo: Path, out: Path, state_dir: Path,
            harness: HarnessPort | None = None) -> dict[str, Any]:
    harness = harness or RealHarness()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    events: list[dict[str, Any]] = []
    result: dict[str, Any] = {"schema": RESULT_SCHEMA, "job": job, "events": events}
    try:
        if job.get("schema") != JOB_SCHEMA:
            raise ValueError(f"unknown job schema {job.get('schema')!r}")
        repo = Path(repo).resolve()
        sd = Path(state_dir) / job["repo"].replace("/", "__") / f"issue-{job['issue']}" / \
            f"gen-{job['generation']}"
        default = _default_branch(repo)
        spec = harness.build_task(harness.load_config(repo, default), job.get("proposal"),
                                  job["task_id"], title=f"#{job['issue']}",
                                  repo_files=harness.repo_files(repo, default))
        kind = job["kind"]
        if kind == "run_task":
            res = harness.run_task(repo, spec, state_dir=sd, keep="propose",
                                   rounds=job.get("budget"), should_stop=lambda: False,
                                   on_event=lambda ev: events.append(_jsonable_event(ev)))
            result["status"] = getattr(res, "status", "finished")
            result["reason"] = getattr(res, "reason", "")
        elif kind == "rebaseline":
            ref = job["payload"].get("ref") or f"origin/{default}"
            res = harness.rebaseline(repo, spec, ref, state_dir=sd,
                                     on_event=lambda ev: events.append(_jsonable_event(ev)))
            result["bk_sha"] = getattr(res, "bk_sha", None)
        elif kind == "reverify":
            branch = job["branch"]
            git(repo, "fetch", "--quiet", "origin", f"+refs/heads/{branch}:refs/heads/{branch}",
                check=False)
            verdict = harness.reverify(repo, spec, branch, state_dir=sd)
            result["verdict"] = json.loads(verdict.to_json())
        else:
            raise ValueError(f"unknown job kind {kind!r}")
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
