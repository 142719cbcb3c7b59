"""``pull_request.closed``: a merged bot PR advances Bk (the human gate).

On a merge of one of our candidate PRs: mark it merged, rebaseline at the
merge commit, then re-verify the task's other open candidates against it
(rebased onto it; a conflict is reported, not hidden), and watch the merge
(``watch``: its claimed gain measured again; ``bot/tasks/rebaseline.py``).
A redelivery of the same merge queues nothing new (the job's key). A bot PR closed
without merging is only marked closed.
"""

from __future__ import annotations

from typing import Any

from bot import render
from bot.context import Context, our_candidate_pr, task_lane
from bot.payloads import RebaselinePayload
from bot.status import refresh_status
from bot.vocab import CandidateState, TaskState

EVENTS = ("pull_request.closed",)


def handle(ctx: Context, event: Any) -> str:
    p = event.payload
    pr = p.get("pull_request") or {}
    repo = (p.get("repository") or {}).get("full_name")
    number = pr.get("number") or p.get("number")
    head = (pr.get("head") or {}).get("ref") or ""
    if not repo or not number or not head.startswith("rsi/"):
        return "ignored: not an rsi branch"
    found = our_candidate_pr(ctx, repo, pr, number)
    if isinstance(found, str):
        return found
    task, cand = found
    if not pr.get("merged"):
        ctx.store.upsert_candidate(task.id, cand.n, generation=cand.generation,
                                   state=CandidateState.CLOSED)
        refresh_status(ctx, task.id)
        return "closed without merge"
    sha = pr.get("merge_commit_sha")
    ctx.store.upsert_candidate(task.id, cand.n, generation=cand.generation,
                               state=CandidateState.MERGED)
    queued = ctx.store.enqueue_job(
        RebaselinePayload(task_id=task.id, ref=sha, merged_pr=int(number), watch=True),
        lane=task_lane(task.id), key=f"rebaseline:{task.id}:merge:{number}")
    if queued is None:  # a redelivery of this merge: its job is queued or done already
        return f"merged #{number}: rebaseline already queued"
    ctx.store.update_task(task.id, state=TaskState.REBASELINING)
    refresh_status(ctx, task.id, note=f"#{int(number)} merged: measuring `{render.short_sha(sha)}` "
                                      "as the new Bk, then re-verifying the open candidates.")
    return f"merged #{number}: rebaseline queued"
