"""Event handlers, one feature per module, composed into one routing table.

Each module declares ``EVENTS`` (``"issues.labeled"``, or a bare event name for
every action) and ``handle(ctx, event) -> str`` (a short outcome, stored as
the job's result). Events without a handler are acknowledged and ignored, and
so are events of a repository or installation the bot does not serve
(``RSI_ALLOWED_REPOS`` / ``RSI_ALLOWED_INSTALLATIONS``) or of a suspended
installation (``installation*`` events still reach their handler, so that an
unsuspend is seen).
"""

from __future__ import annotations

from typing import Any, Callable

from bot import webhook
from bot.handlers import (
    commands,
    edited,
    installation,
    labeled,
    merged,
    pushed,
    rerequested,
    workflow_run,
)

MODULES = (labeled, edited, commands, merged, pushed, rerequested, workflow_run, installation)

ROUTES: dict[str, Callable[[Any, Any], str]] = {
    key: mod.handle for mod in MODULES for key in mod.EVENTS
}


def route(ctx: Any, event: Any) -> str:
    handler = ROUTES.get(event.key) or ROUTES.get(event.name)
    if handler is None:
        return f"ignored: {event.key}"
    why = webhook.admitted(event, repos=ctx.settings.allowed_repos,
                           installations=ctx.settings.allowed_installations)
    if why is not None:
        return f"ignored: {why}"
    if event.name not in installation.EVENTS and event.installation_id is not None:
        inst = ctx.store.installation(event.installation_id)
        if inst is not None and inst.suspended:
            return f"ignored: installation {event.installation_id} is suspended"
    return handler(ctx, event)
