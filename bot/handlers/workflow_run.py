"""``workflow_run.completed``: ingest a job's result from the ``actions`` executor
(``workflow_run.in_progress``: the job's live check turns in progress).

Only with ``RSI_EXECUTOR=actions``, and only for a run the bot dispatched:
the job workflow, triggered by ``workflow_dispatch`` on the default branch of
this same repository (never a fork's head), by the bot
(:func:`bot.executors.actions.run_problem`); the result must then carry the
nonce of a job the bot recorded and has not ingested yet
(:func:`bot.executors.actions.ingest`). Everything else is ignored with the
reason as the job's result.
"""

from __future__ import annotations

from typing import Any

from bot.context import Context

EVENTS = ("workflow_run.completed", "workflow_run.in_progress")


def handle(ctx: Context, event: Any) -> str:
    if ctx.settings.executor != "actions":
        return "ignored: the executor is not actions"
    p = event.payload
    run = p.get("workflow_run") or {}
    repo = (p.get("repository") or {}).get("full_name")
    path = run.get("path") or ""
    if not repo or not run.get("id") or not path.endswith("/" + ctx.settings.job_workflow):
        return "ignored: not an rsi job run"
    from bot.executors import actions

    why = actions.run_problem(ctx, p, ctx.gh.default_branch(repo))
    if why is not None:
        return f"ignored: not a run the bot dispatched ({why})"
    if event.action == "in_progress":  # a runner took it: the live check says so
        from bot import checks

        return f"run {int(run['id'])} in progress: {checks.run_started(ctx, int(run['id']))} check(s)"
    return actions.ingest(ctx, repo, int(run["id"]), conclusion=run.get("conclusion"))
