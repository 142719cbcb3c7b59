"""``installation*``: remember where the App is installed (and suspended), and
open onboarding PRs on added repositories (:mod:`bot.handlers.onboarding`)."""

from __future__ import annotations

from typing import Any

from bot.context import Context

EVENTS = ("installation", "installation_repositories")


def handle(ctx: Context, event: Any) -> str:
    p = event.payload
    inst = p.get("installation") or {}
    inst_id = inst.get("id")
    if not inst_id:
        return "ignored: no installation id"
    account = (inst.get("account") or {}).get("login")
    action = event.action or ""
    if event.name == "installation":
        if action == "deleted":
            ctx.store.set_installation(inst_id, deleted=True)
        else:
            repos = [r.get("full_name") for r in p.get("repositories") or [] if r.get("full_name")]
            ctx.store.set_installation(inst_id, account=account, add_repos=repos,
                                       suspended={"suspend": True, "unsuspend": False}.get(action))
    else:
        added = [r.get("full_name") for r in p.get("repositories_added") or []]
        removed = [r.get("full_name") for r in p.get("repositories_removed") or []]
        ctx.store.set_installation(inst_id, account=account, add_repos=[a for a in added if a],
                                   remove_repos=[r for r in removed if r])
    from bot.handlers import onboarding  # a PR with rsi init's files where no config is

    onboarded = onboarding.handle(ctx, event)
    return f"installation {inst_id}: {action}" + (f"; {onboarded}" if onboarded else "")
