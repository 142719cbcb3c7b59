"""``issues.labeled`` with the trigger label: start (or supersede) the issue's task.

Never on ``issues.opened``: the label is the maintainer's decision. The
labeler needs write, maintain or admin. The proposal is the issue body *in
the label event* (what the labeler saw), stored with the task; an edit after
the label is never run unapproved (see :mod:`bot.handlers.edited`). It is read with the
harness's parser against ``.rsi/config.toml`` from the default branch; the
sticky status comment says "accepted" with the task's summary, or lists the
errors and how to fix them. One task per issue: a newer label supersedes the
older run (its jobs see a newer generation and stop).
"""

from __future__ import annotations

from typing import Any

from bot import checks, obs, render, replies
from bot.context import TRUSTED_ROLES, Context, harness_task_id, sender_of
from bot.harness_port import SpecError
from bot.payloads import RunTaskPayload
from bot.status import refresh_status
from bot.vocab import TaskState
from harness.spec import CONFIG_PATH

EVENTS = ("issues.labeled",)


def handle(ctx: Context, event: Any) -> str:
    p = event.payload
    label = (p.get("label") or {}).get("name")
    if label != ctx.settings.trigger_label:
        return f"ignored: label {label!r}"
    repo = (p.get("repository") or {}).get("full_name")
    issue = p.get("issue") or {}
    if not repo or not issue.get("number"):
        return "ignored: no issue"
    if issue.get("pull_request"):
        return "ignored: label on a pull request"
    login, kind = sender_of(p)
    if kind == "Bot" or ctx.is_us(login):
        return "ignored: bot"
    number = int(issue["number"])
    role = ctx.gh.collaborator_role(repo, login)
    if role not in TRUSTED_ROLES:
        replies.reply(ctx, repo, number, render.label_refusal(
            login, label, f"starting a task needs write, maintain or admin access to {repo}, "
            f"and you have `{render.inert(role, plain=True)}`. Ask a maintainer to add the label."),
            job=event.delivery_id, step="refusal")
        return f"refused: {login} is {role}"

    return start(ctx, repo, number, body=issue.get("body") or "", title=issue.get("title") or "",
                 labeler=login, installation_id=event.installation_id,
                 trigger=event.delivery_id)


def start(ctx: Context, repo: str, number: int, *, body: str, title: str, labeler: str,
          installation_id: int | None, trigger: str) -> str:
    """Start (or supersede) the issue's task with ``body``: the proposal exactly
    as the writer approved it (the label event's copy, or the edit a writer ran
    with ``/rsi rerun``), never the issue as it is when a worker gets to it. An
    edit held now that is not ``body`` stays held (``Store.approve_proposal``)."""
    task = ctx.store.start_task(repo, number, labeler=labeler, installation_id=installation_id,
                                trigger=trigger)
    obs.bind_task(task.id)
    config_text = ctx.gh.get_file_text(repo, CONFIG_PATH)
    errors: list[str] = []
    spec = None
    if config_text is None:
        errors.append(f"`{CONFIG_PATH}` is missing on the default branch of {repo}: commit the "
                      "repo config first (see docs/contracts.md)")
    else:
        try:
            spec = ctx.harness.build_task(config_text, body,
                                         harness_task_id(number, task.generation), title=title)
        except SpecError as e:
            errors = list(e.errors)
    if errors or spec is None:
        ctx.store.approve_proposal(task.id, body, generation=task.generation,
                                   state=TaskState.INVALID, summary=None)
        refresh_status(ctx, task.id, errors=errors)
        return f"invalid: {len(errors)} error(s)"
    summary = render.task_summary(spec)
    budget = spec.agent.rounds
    ctx.store.approve_proposal(task.id, body, generation=task.generation,
                               state=TaskState.QUEUED, summary=summary, budget=budget,
                               b0_sha=None, bk_sha=None)
    checks.supersede(ctx, task)
    checks.queue_job(ctx, ctx.store.task(task.id) or task,
                     RunTaskPayload(task_id=task.id, generation=task.generation),
                     key=f"run:{task.id}:{task.generation}")
    note = "Accepted. The baseline is measured first, then the rounds run." + (
        " This supersedes the previous run." if task.generation > 1 else "")
    refresh_status(ctx, task.id, note=note)
    return f"accepted: task {task.id} generation {task.generation}"
