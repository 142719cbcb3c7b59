"""``check_run.rerequested``: the Re-run button of a ``rsi/verifier`` check.

Only for check runs this bot made (the ``rsi/verifier`` name and a live check
or candidate of ours on that commit), and only for people with write,
maintain or admin. On a candidate's check it re-verifies the PR's current
head against Bk and B0, as ``/rsi rerun`` does; on a task run's check (on the
base commit) it continues a task that failed, stopped or paused, as ``/rsi
resume`` does. Everything else is ignored with the reason.
"""

from __future__ import annotations

from typing import Any

from bot import checks, obs, render
from bot.context import TRUSTED_ROLES, Context, sender_of
from bot.gh import VERIFIER_CHECK
from bot.payloads import ReverifyPayload, RunTaskPayload
from bot.status import refresh_status
from bot.vocab import REVERIFIABLE, TaskState

EVENTS = ("check_run.rerequested",)
RESUMABLE = frozenset({TaskState.FAILED, TaskState.STOPPED, TaskState.PAUSED, TaskState.FINISHED})


def handle(ctx: Context, event: Any) -> str:
    p = event.payload
    run = p.get("check_run") or {}
    repo = (p.get("repository") or {}).get("full_name")
    if not repo or not isinstance(run.get("id"), int) or run.get("name") != VERIFIER_CHECK:
        return "ignored: not an rsi/verifier check run"
    login, kind = sender_of(p)
    if kind == "Bot" or ctx.is_us(login):
        return "ignored: bot"
    mine = ctx.store.live_checks(repo=repo, check_run_id=run["id"], open_only=False)
    found = ctx.store.candidate_by_sha(repo, str(run.get("head_sha") or ""))
    if not mine and found is None:
        return "ignored: not a check run of ours"
    role = ctx.gh.collaborator_role(repo, login)
    if role not in TRUSTED_ROLES:
        return f"refused: {login} is {role}"
    if found is not None:
        task, cand = found
        obs.bind_task(task.id)
        if cand.state not in REVERIFIABLE or not cand.pr_number:
            return f"ignored: candidate {cand.n} is {cand.state}"
        checks.queue_job(ctx, task, ReverifyPayload(task_id=task.id, n=cand.n, requested_by=login),
                         key=f"reverify:{task.id}:{cand.n}:{event.delivery_id}",
                         head_sha=cand.sha, n=cand.n)
        return f"re-verifying candidate {cand.n} of task {task.id}"
    return _resume(ctx, mine[-1].task_id, login, event.delivery_id)


def _resume(ctx: Context, task_id: int, login: str, delivery: str) -> str:
    task = ctx.store.task(task_id)
    if task is None or task.state not in RESUMABLE:
        return f"ignored: the task is {task.state if task else 'gone'}"
    if task.state == TaskState.FINISHED and not (task.budget and task.rounds_done < task.budget):
        return "ignored: the task finished its budget (/rsi budget N adds rounds)"
    ctx.store.update_task(task.id, stop=False, state=TaskState.QUEUED)
    checks.queue_job(ctx, task, RunTaskPayload(task_id=task.id, generation=task.generation),
                     key=f"run:{task.id}:{task.generation}:{delivery}")
    refresh_status(ctx, task.id, note=f"Re-run requested by @{render.inert(login, plain=True)} "
                                      "on the rsi/verifier check: the rounds continue.")
    return f"resumed task {task.id}"
