"""Event handlers, one feature per module, composed into one routing table.

Each module declares ``EVENTS`` (``"issues.labeled"``, or a bare event name for
every action) and ``handle(ctx, event) -> str`` (a short outcome, stored as
the job's result). Events without a handler are acknowledged and ignored.
"""

from __future__ import annotations

from typing import Any, Callable

from bot.handlers import commands, installation, labeled, merged, workflow_run

MODULES = (labeled, commands, merged, workflow_run, installation)

ROUTES: dict[str, Callable[[Any, Any], str]] = {
    key: mod.handle for mod in MODULES for key in mod.EVENTS
}


def route(ctx: Any, event: Any) -> str:
    handler = ROUTES.get(event.key) or ROUTES.get(event.name)
    if handler is None:
        return f"ignored: {event.key}"
    return handler(ctx, event)
