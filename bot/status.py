"""The issue's sticky status comment, rendered from the store."""

from __future__ import annotations

from typing import Any, Sequence

from bot import render, sticky
from bot.context import Context
from bot.store import Task


def task_usage(ctx: Context, t: Task) -> dict[str, Any] | None:
    """The ``spent`` and ``budget`` of a task's current run (through the harness
    port), or None: no run yet, or nothing spent and no spending limit."""
    got = ctx.harness.spent(ctx.harness_dir(t.repo, t.issue, t.generation))
    if got is None:
        return None
    spent, budget = got
    if not (spent.calls or spent.tokens or budget.get("max_tokens") or budget.get("max_cost_usd")):
        return None
    return {"spent": spent.model_dump(), "budget": dict(budget)}


def _edit_link(ctx: Context, t: Task) -> str:
    """Where a held edit's full diff is: the task page, when it is served."""
    from bot.checks import details_url

    url = details_url(ctx, t) if t.edited_proposal is not None else None
    return f"{url}#edit" if url else ""


def refresh_status(ctx: Context, task_id: int, *, note: str = "",
                   errors: Sequence[str] = ()) -> None:
    """Re-render the task's status comment and edit it in place."""
    t = ctx.store.task(task_id)
    if t is None:
        return
    body = render.status_comment(state=t.state, summary=t.summary or "", errors=errors,
                                 candidates=ctx.store.candidates(t.id), budget=t.budget,
                                 rounds_done=t.rounds_done, bk=t.bk_sha, b0=t.b0_sha, note=note,
                                 edit=((t.proposal or "", t.edited_proposal)
                                       if t.edited_proposal is not None else None),
                                 label=ctx.settings.trigger_label, usage=task_usage(ctx, t),
                                 edit_link=_edit_link(ctx, t), proposal=t.proposal)
    sticky.upsert(ctx.gh, ctx.store, t.repo, t.issue, render.STATUS, body, login=ctx.login())
