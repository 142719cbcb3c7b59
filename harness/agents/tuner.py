"""``tuner``: a built-in single-variable search over the declared knobs.

Coordinate descent from Bk: each round changes exactly one knob to one other
value (neighbours of the current value first), staying on a knob until its
values are used up, then moving to the next. It never proposes a change the
ledger already holds a verdict for (any task of this repo): the same knob, the
same value, with the other knobs at the same values. Changes whose verifier
run failed for infrastructure reasons (``error``) may be tried again once.
When nothing is left it says ``done``.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from harness.agents.base import AgentContext, AgentOutcome
from harness.ledger import LedgerRecord
from harness.sections import Knob


class KnobError(ValueError):
    pass


def _locate(text: str, knob: Knob) -> re.Match[str]:
    if knob.key is not None:
        rx = re.compile(
            r"^(?P<pre>[ \t]*" + re.escape(knob.key) + r"[ \t]*[=:][ \t]*)(?P<val>.*?)(?P<post>[ \t]*(?:#.*)?)$",
            re.MULTILINE,
        )
        m = rx.search(text)
        if not m:
            raise KnobError(f"knob {knob.name}: no line '{knob.key} = ...' in {knob.file}")
        return m
    rx = re.compile(knob.pattern or "", re.MULTILINE)
    m = rx.search(text)
    if not m:
        raise KnobError(f"knob {knob.name}: pattern {knob.pattern!r} does not match {knob.file}")
    return m


def _span(m: re.Match[str], knob: Knob) -> tuple[int, int]:
    return m.span("val") if knob.key is not None else m.span(1)


def _unquote(raw: str) -> tuple[str, str]:
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        return raw[1:-1], raw[0]
    return raw, ""


def _canon(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def read_knob(worktree: Path, knob: Knob) -> str:
    text = (worktree / knob.file).read_text()
    m = _locate(text, knob)
    s, e = _span(m, knob)
    value, _ = _unquote(text[s:e])
    return value


def _format(v: Any, quote: str, file: str) -> str:
    if isinstance(v, bool):
        word = ("True" if v else "False") if file.endswith(".py") else ("true" if v else "false")
        return word
    if isinstance(v, str):
        if quote:
            return f"{quote}{v}{quote}"
        if file.endswith((".toml", ".json", ".py")):
            return json.dumps(v)
        return v
    return str(v)


def write_knob(worktree: Path, knob: Knob, value: Any) -> None:
    path = worktree / knob.file
    text = path.read_text()
    m = _locate(text, knob)
    s, e = _span(m, knob)
    _, quote = _unquote(text[s:e])
    path.write_text(text[:s] + _format(value, quote, knob.file) + text[e:])


def _tried(records: list[LedgerRecord]) -> dict[tuple[str, str, str], int]:
    """(knob, value, context) -> times tried; errors count as half a try."""
    out: dict[tuple[str, str, str], int] = {}
    for r in records:
        ch = r.change or {}
        if r.event != "candidate" or ch.get("kind") != "knob":
            continue
        key = (str(ch.get("knob")), str(ch.get("value")), str(ch.get("context")))
        out[key] = out.get(key, 0) + (2 if r.decision != "error" else 1)
    return out


class TunerAgent:
    name = "tuner"

    def __init__(self, knobs: list[Knob] | None = None):
        self.knobs = knobs

    def plan(self, ctx: AgentContext) -> tuple[Knob, Any, str, str] | None:
        knobs = self.knobs if self.knobs is not None else ctx.spec.knobs
        if not knobs:
            return None
        current = {k.name: read_knob(ctx.worktree, k) for k in knobs}
        tried = _tried(ctx.ledger)
        start = int(ctx.state.get("knob_index", 0)) % len(knobs)
        for i in range(len(knobs)):
            idx = (start + i) % len(knobs)
            knob = knobs[idx]
            cur = current[knob.name]
            context = json.dumps({n: v for n, v in sorted(current.items()) if n != knob.name})
            canon = [_canon(v) for v in knob.values]
            pos = canon.index(cur) if cur in canon else -1
            order = sorted(
                range(len(knob.values)),
                key=lambda j: (abs(j - pos) if pos >= 0 else j, j),
            )
            for j in order:
                v = knob.values[j]
                if _canon(v) == cur:
                    continue
                # a verdict (2+) means never again; one infrastructure error (1) allows one retry
                if tried.get((knob.name, _canon(v), context), 0) >= 2:
                    continue
                ctx.state["knob_index"] = idx
                return knob, v, cur, context
        return None

    def run(self, ctx: AgentContext) -> AgentOutcome:
        t0 = time.monotonic()
        try:
            picked = self.plan(ctx)
        except (KnobError, OSError) as exc:
            return AgentOutcome(error=str(exc), duration_s=time.monotonic() - t0)
        if picked is None:
            return AgentOutcome(done=True, hypothesis="tuner: every knob value has been tried")
        knob, value, was, context = picked
        try:
            write_knob(ctx.worktree, knob, value)
        except (KnobError, OSError) as exc:
            return AgentOutcome(error=str(exc), duration_s=time.monotonic() - t0)
        return AgentOutcome(
            hypothesis=f"tuner: set {knob.name} = {_canon(value)} (was {was}) in {knob.file}",
            change={"kind": "knob", "knob": knob.name, "value": _canon(value), "was": was, "context": context},
            duration_s=time.monotonic() - t0,
        )
