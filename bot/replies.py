"""Idempotent replies: a comment or reaction written for one step of one job is
written once, however often the job runs.

A job can run more than once: its worker is killed after GitHub created the
comment but before the job was recorded done (the lease runs out and the job is
claimed again), or a later call of the same job fails with a 5xx and the job is
retried. Each reply therefore carries a hidden marker naming the job (the
delivery id of the event that caused it) and the step (``cmd1``, ``refusal``,
...); before writing, the issue's comments are read, and a comment of ours
carrying that marker is reused instead of written again, as the sticky
comments are (:mod:`bot.sticky`). A comment is ours only when it carries the
marker *and* our login wrote it (anyone can paste a marker).

Reactions are idempotent on GitHub itself: a second ``POST .../reactions`` with
the same content by the same user answers 200 with the existing reaction.
"""

from __future__ import annotations

import hashlib
import re

from bot import crash, render
from bot.context import Context
from bot.gh import CommentInfo

_PLAIN = re.compile(r"[a-z0-9][a-z0-9_-]{0,79}")


def reply_kind(job: str, step: str) -> str:
    """The marker kind of one job's step: ``reply:<job>:<step>`` (a job id that is
    not plain lowercase text is hashed, so it cannot break out of the marker)."""
    job = job.lower()
    if not _PLAIN.fullmatch(job):
        job = "h" + hashlib.sha256(job.encode()).hexdigest()[:32]
    if not _PLAIN.fullmatch(step):
        raise ValueError(f"bad reply step {step!r}")
    return f"reply:{job}:{step}"


def find(ctx: Context, repo: str, number: int, kind: str) -> CommentInfo | None:
    mark = render.marker(kind)
    for c in ctx.gh.list_issue_comments(repo, number):
        if ctx.is_us(c.user) and mark in c.body:
            return c
    return None


def reply(ctx: Context, repo: str, number: int, body: str, *, job: str, step: str
          ) -> CommentInfo:
    """Post ``body`` on issue/PR ``number`` once for (``job``, ``step``); a re-run
    returns the comment the first run wrote."""
    kind = reply_kind(job, step)
    found = find(ctx, repo, number, kind)
    if found is not None:
        return found
    comment = ctx.gh.create_issue_comment(repo, number, render.with_marker(body, kind))
    crash.point("reply_posted")
    return comment


def react(ctx: Context, repo: str, comment_id: int | None, content: str) -> None:
    """React to a comment (GitHub keeps one reaction per user and content)."""
    if comment_id:
        ctx.gh.add_reaction(repo, int(comment_id), content)
        crash.point("reacted")
