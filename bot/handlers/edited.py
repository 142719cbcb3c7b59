"""``issues.edited``: an edit after the label is shown, never run unapproved.

The task keeps running the proposal as it was when a writer added the label.
When the body changes, the edited body is kept aside (``Task.edited_proposal``)
and the status comment says so and shows the difference; a writer runs the
edit with ``/rsi rerun`` on the issue (or by adding the label again). An edit
back to the approved text clears the notice.
"""

from __future__ import annotations

from typing import Any

from bot.context import Context, sender_of
from bot.status import refresh_status

EVENTS = ("issues.edited",)


def handle(ctx: Context, event: Any) -> str:
    p = event.payload
    repo = (p.get("repository") or {}).get("full_name")
    issue = p.get("issue") or {}
    if not repo or not issue.get("number") or issue.get("pull_request"):
        return "ignored: no issue"
    if "body" not in (p.get("changes") or {}):
        return "ignored: the body did not change"
    task = ctx.store.find_task(repo, int(issue["number"]))
    if task is None:
        return "ignored: no task on this issue"
    body = issue.get("body") or ""
    ctx.store.hold_edit(task.id, body)  # none when it is the approved text (one statement)
    refresh_status(ctx, task.id)
    if body == (task.proposal or ""):
        return "edit matches the approved proposal"
    return f"edit by {sender_of(p)[0]} held for a writer's approval"
