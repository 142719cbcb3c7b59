"""``event``: one stored webhook delivery, routed to its handler.

The router is the context's (:attr:`bot.context.Context.route`, wired to
:func:`bot.handlers.route` by the composition root, :mod:`bot.service`): the
handlers sit above the jobs (they queue them, and ``workflow_run`` ingests their
results), so the jobs never import the handlers.
"""

from __future__ import annotations

import logging

from bot import obs
from bot.context import Context
from bot.payloads import EventPayload
from bot.webhook import Event
from bot.worker import JobRun, Permanent

log = logging.getLogger("rsi.bot")


def handle_event(ctx: Context, run: JobRun) -> str:
    delivery_id = run.args_as(EventPayload).delivery_id
    d = ctx.store.delivery(delivery_id)
    if d is None:
        raise Permanent(f"delivery {delivery_id} is missing")
    if ctx.route is None:
        raise Permanent("no event router: the Context was built without route= "
                        "(bot.service.build_context wires bot.handlers.route)")
    obs.bind_delivery(d.id, f"{d.event}.{d.action}" if d.action else d.event)
    outcome = ctx.route(ctx, Event(d.event, d.action, d.id, d.payload or {}))
    log.info("event handled", extra={"outcome": str(outcome)[:300]})
    return outcome
