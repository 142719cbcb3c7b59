"""A round's token usage, read from what the agent's client recorded.

Untrusted input: the files are the agent's (read without following links,
size-capped), every number is checked (non-negative, bounded) and nothing but
the numbers is kept. Sources:

* ``mini-trajectory``: mini-swe-agent's ``trajectory.json`` keeps every model
  response as the API returned it; its ``usage.prompt_tokens`` and
  ``usage.completion_tokens`` are summed, one call per response;
* ``aider-report``: aider prints ``Tokens: 1.2k sent, 20 received.`` after each
  model reply (computed from the response's ``usage``; aider rounds counts of
  1,000 and more to 0.1k, 10,000 and more to 1k).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from harness.agents.base import UnsafeFile, read_agent_file
from harness.ledger import Usage

MAX_TOKENS = 10**12
_AIDER = re.compile(r"Tokens: ([\d.]+)(k?) sent(?:, [\d.]+k? cache \w+)*, ([\d.]+)(k?) received")


def _count(value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return 0
    return int(min(max(value, 0), MAX_TOKENS))


def mini_trajectory(scratch: Path) -> Usage | None:
    try:
        text = read_agent_file(scratch, "trajectory.json", max_bytes=16 * 1024 * 1024)
        data = json.loads(text) if text else None
    except (UnsafeFile, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        return None
    calls = tin = tout = 0
    for msg in data["messages"]:
        extra = msg.get("extra") if isinstance(msg, dict) else None
        resp = extra.get("response") if isinstance(extra, dict) else None
        usage = resp.get("usage") if isinstance(resp, dict) else None
        if isinstance(usage, dict):
            calls += 1
            tin += _count(usage.get("prompt_tokens"))
            tout += _count(usage.get("completion_tokens"))
    return Usage(calls=calls, tokens_in=tin, tokens_out=tout, source="mini-trajectory")


def _aider_number(num: str, k: str) -> int:
    try:
        return _count(float(num) * (1000 if k else 1))
    except ValueError:
        return 0


def aider_report(log: str) -> Usage | None:
    hits = _AIDER.findall(log)
    if not hits:
        return None
    tin = sum(_aider_number(a, b) for a, b, _, _ in hits)
    tout = sum(_aider_number(c, d) for _, _, c, d in hits)
    return Usage(calls=len(hits), tokens_in=tin, tokens_out=tout, source="aider-report")


def read_usage(kind: str, scratch: Path, log: str) -> Usage | None:
    """The round's usage by ``kind`` (a preset's ``usage``), or None."""
    if kind == "mini-trajectory":
        return mini_trajectory(scratch)
    if kind == "aider-report":
        return aider_report(log)
    return None


def round_usage(settings, reported: Usage | None, wall_s: float) -> Usage:
    """The round's usage for the ledger: the reported counts, the wall time,
    and the cost from the task's prices when both are set (else the agent's)."""
    u = (reported or Usage()).model_copy(update={"wall_s": round(max(wall_s, 0.0), 3)})
    pin, pout = settings.price_in_per_mtok, settings.price_out_per_mtok
    if pin is not None and pout is not None and u.tokens_in is not None:
        u.cost_usd = round(((u.tokens_in or 0) * pin + (u.tokens_out or 0) * pout) / 1e6, 6)
    return u


def budget_spent(settings, spent: Usage) -> str | None:
    """Why the task's token or cost budget is spent (``[agent] max_tokens``,
    ``max_cost_usd``), or None while some is left."""
    if settings.max_tokens is not None and spent.tokens >= settings.max_tokens:
        return f"token budget spent: {spent.tokens:,} of {settings.max_tokens:,} tokens used"
    if settings.max_cost_usd is not None and (spent.cost_usd or 0) >= settings.max_cost_usd:
        return f"cost budget spent: ${spent.cost_usd:.4f} of ${settings.max_cost_usd:.2f} used"
    return None
