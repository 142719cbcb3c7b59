"""``event``: one stored webhook delivery, routed to its handler."""

from __future__ import annotations

import logging

from bot import handlers, obs
from bot.context import Context
from bot.webhook import Event
from bot.worker import JobRun, Permanent

log = logging.getLogger("rsi.bot")


def handle_event(ctx: Context, run: JobRun) -> str:
    d = ctx.store.delivery(run.payload["delivery_id"])
    if d is None:
        raise Permanent(f"delivery {run.payload['delivery_id']} is missing")
    obs.bind_delivery(d.id, f"{d.event}.{d.action}" if d.action else d.event)
    outcome = handlers.route(ctx, Event(d.event, d.action, d.id, d.payload or {}))
    log.info("event handled", extra={"outcome": str(outcome)[:300]})
    return outcome
