"""``pull_request.synchronize`` on a bot PR: a maintainer pushed to it, so the
verifier judges the new head (against the current Bk and B0).

Only for our own candidate PRs (an ``rsi/...`` head branch, opened by us, known
to the store) and pushes by people with write, maintain or admin; the bot's
own pushes (rebaselines) are ignored, as they come with their own verdicts.
"""

from __future__ import annotations

import re
from typing import Any

from bot import checks, render
from bot.context import TRUSTED_ROLES, Context, our_candidate_pr, sender_of
from bot.payloads import ReverifyPayload
from bot.vocab import REVERIFIABLE

EVENTS = ("pull_request.synchronize",)


def handle(ctx: Context, event: Any) -> str:
    p = event.payload
    pr = p.get("pull_request") or {}
    repo = (p.get("repository") or {}).get("full_name")
    number = pr.get("number") or p.get("number")
    head = pr.get("head") or {}
    after = str(p.get("after") or head.get("sha") or "")
    if not repo or not number or not str(head.get("ref") or "").startswith("rsi/"):
        return "ignored: not an rsi branch"
    if not re.fullmatch(r"[0-9a-f]{40}", after):
        return "ignored: no head commit"
    login, kind = sender_of(p)
    if kind == "Bot" or ctx.is_us(login):
        return "ignored: our own push"
    found = our_candidate_pr(ctx, repo, pr, number)
    if isinstance(found, str):
        return found
    task, cand = found
    if cand.state not in REVERIFIABLE:
        return f"ignored: candidate {cand.n} is {cand.state}"
    role = ctx.gh.collaborator_role(repo, login)
    if role not in TRUSTED_ROLES:
        return f"ignored: {login} is {role}"
    job = checks.queue_job(ctx, task, ReverifyPayload(task_id=task.id, n=cand.n,
                                                      requested_by=login),
                           key=f"reverify:{task.id}:{cand.n}:{after}", head_sha=after, n=cand.n)
    return (f"re-verifying candidate {cand.n} at {render.short_sha(after)}" if job is not None
            else f"already queued for {render.short_sha(after)}")
