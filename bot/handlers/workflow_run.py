"""``workflow_run.completed``: ingest a job's result from the ``actions`` executor.

The run's ``rsi-result`` artifact holds ``result.json`` (which job it was, and
the loop events it produced) and ``branches.bundle`` (the candidate branches);
see :mod:`bot.executors.actions`. Runs of other workflows are ignored.
"""

from __future__ import annotations

from typing import Any

from bot.context import Context

EVENTS = ("workflow_run.completed",)


def handle(ctx: Context, event: Any) -> str:
    p = event.payload
    run = p.get("workflow_run") or {}
    repo = (p.get("repository") or {}).get("full_name")
    path = run.get("path") or ""
    if not repo or not run.get("id") or not path.endswith("/" + ctx.settings.job_workflow):
        return "ignored: not an rsi job run"
    from bot.executors import actions

    return actions.ingest(ctx, repo, int(run["id"]), conclusion=run.get("conclusion"))
