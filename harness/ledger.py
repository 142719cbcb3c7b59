"""The ledger: the experience library of a target repo, kept in git.

One JSON line per candidate (and per re-verification) in ``ledger.jsonl`` on the
branch ``rsi/ledger`` of the target repo. Records are appended with git
plumbing only (``hash-object``, ``mktree``, ``commit-tree``, ``update-ref`` with
the old value, so two writers cannot lose each other's line), which never
touches the user's worktree, index or checked-out branch. The branch can be
pushed and reviewed like any other; it survives any machine.

Appends are idempotent: a record whose ``id`` is already on the branch is not
written again (a resumed run may retry the append it was killed during).

Each line carries its ``schema``. ``load_record`` reads this one and upgrades
older ones on read (``UPGRADES``): ``rsi.ledger/1`` kept the verdict as the
dict its JSON parsed to; ``rsi.ledger/2`` keeps a ``verifier.verdict.Verdict``
(a line whose verdict is not one is refused). ``CandidateStatus`` is the one
vocabulary of what became of a candidate, shared by the loop, the ledger, the
loop's events and the bot's store.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable
from datetime import datetime, timezone
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.gitutil import GitError, git, rev_parse
from verifier.verdict import Verdict

log = logging.getLogger(__name__)

SCHEMA = "rsi.ledger/2"
BRANCH = "rsi/ledger"
REF = f"refs/heads/{BRANCH}"
FILE = "ledger.jsonl"


class CandidateStatus(StrEnum):
    """What became of a candidate: one vocabulary for the loop (``LoopCandidate``),
    the ledger (``LedgerRecord.status``), the loop's events and the bot's store
    (``bot.store.Candidate.state``). Each writer uses a part of it:

    * the loop and its ledger lines: ``kept``, ``open``, ``rolled_back``,
      ``merged``, ``conflict`` (``superseded`` in older lines);
    * the bot's store: ``none``, ``pending``, ``open``, ``conflict``, ``merged``,
      ``closed``; ``ledger_word`` says what the ledger calls each of them.

    The values are the strings stored and written in JSON (a member compares
    equal to its string), so older lines and rows read back unchanged.
    """

    KEPT = "kept"  # the loop advanced Bk to it (keep = advance)
    OPEN = "open"  # kept for review (keep = propose); in the store: its draft PR is open
    ROLLED_BACK = "rolled_back"  # not kept
    MERGED = "merged"
    CONFLICT = "conflict"  # no longer applies to the new Bk
    SUPERSEDED = "superseded"
    NONE = "none"  # store: not kept, no PR (the ledger's rolled_back)
    PENDING = "pending"  # store: kept; its draft PR is queued
    CLOSED = "closed"  # store: its PR closed without merging

    @property
    def ledger_word(self) -> CandidateStatus:
        """The ledger's word for this status (the report's chart and table)."""
        return _LEDGER_WORD.get(self, self)


_LEDGER_WORD = {CandidateStatus.NONE: CandidateStatus.ROLLED_BACK,
                CandidateStatus.PENDING: CandidateStatus.OPEN,
                CandidateStatus.CLOSED: CandidateStatus.ROLLED_BACK}



class GuardOutcome(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str
    against: str = "bk"
    status: str
    value: float | None = None
    bound: str = ""


class Usage(BaseModel):
    """What one round's agent used: model calls, tokens in and out (the
    endpoint's OpenAI ``usage``, as the agent's client reported it), cost and
    wall time. Counts are None when the agent reports no usage."""

    model_config = ConfigDict(extra="ignore")
    calls: int | None = Field(None, ge=0)
    tokens_in: int | None = Field(None, ge=0)
    tokens_out: int | None = Field(None, ge=0)
    cost_usd: float | None = Field(None, ge=0)
    """From the task's prices when set ([agent] price_in_per_mtok, price_out_per_mtok), else the agent's own figure."""
    wall_s: float = Field(0.0, ge=0)
    source: str = ""
    """Where the counts come from: ``gateway`` (the harness's model gateway
    metered every call: the figures the budget is held to), else the agent's
    own record (``mini-trajectory``, ``aider-report``)."""
    reported: dict[str, int] | None = None
    """With ``gateway``: the agent's own counts (calls, tokens_in, tokens_out),
    kept only as a cross-check, never summed nor held to a budget."""

    @property
    def tokens(self) -> int:
        return (self.tokens_in or 0) + (self.tokens_out or 0)

    def plus(self, other: Usage) -> Usage:
        def add(a, b):
            return None if a is None and b is None else (a or 0) + (b or 0)

        return Usage(calls=add(self.calls, other.calls), tokens_in=add(self.tokens_in, other.tokens_in),
                     tokens_out=add(self.tokens_out, other.tokens_out),
                     cost_usd=add(self.cost_usd, other.cost_usd), wall_s=self.wall_s + other.wall_s,
                     source=self.source or other.source)


class LedgerRecord(BaseModel):
    """One candidate's outcome (or one re-verification of it)."""

    schema_: Literal["rsi.ledger/2"] = Field("rsi.ledger/2", alias="schema")
    id: str
    """``<task>/<n>`` for a candidate, ``<task>/<n>/reverify/<bk sha>`` for a re-check."""
    event: Literal["candidate", "reverify"] = "candidate"
    task: str
    round: int
    candidate: int
    agent: str
    hypothesis: str = ""
    branch: str = ""
    sha: str = ""
    base_sha: str = ""
    """Bk the candidate was made on and verified against."""
    b0_sha: str = ""
    files: list[str] = Field(default_factory=list)
    lines_added: int = 0
    lines_removed: int = 0
    decision: str
    """accept | review | reject | inconclusive | error (the verifier's, or the policy's reject)."""
    reason: str = ""
    status: CandidateStatus | None = None
    """What the loop did with it: kept (Bk advanced), open (awaiting review), rolled_back..."""
    objective_metric: str = ""
    ratio: float | None = None
    """Objective ratio candidate / Bk."""
    ratio_low: float | None = None
    ratio_high: float | None = None
    gain: float | None = None
    gain_vs_b0: float | None = None
    guards: list[GuardOutcome] = Field(default_factory=list)
    violations: list[str] = Field(default_factory=list)
    left_out: list[str] = Field(default_factory=list)
    """What the host did not take from the agent's tree (``.git`` entries,
    FIFOs and other special files, files the repo ignores), with the reason."""
    change: dict[str, Any] | None = None
    """Structured change, for agents that have one (tuner: {knob, value, was, context})."""
    patch_id: str = ""
    """``git patch-id --stable`` of the diff: the same change on any base."""
    usage: Usage | None = None
    """The round's model calls, tokens, cost and wall time (agents that use a model)."""
    verdict: Verdict | None = None
    """The verifier's verdict (None: decided before verification, e.g. a policy reject)."""
    recorded_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    def to_line(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True)

    @classmethod
    def from_verdict(cls, verdict: Verdict, **fields: Any) -> LedgerRecord:
        """Fill decision, reason, ratio, interval and guards from a Verdict, and keep it."""
        obj = verdict.objective
        ci = obj.ratio_ci if obj is not None else None
        guards = [
            GuardOutcome(
                name=g.name, against=g.against, status=g.status, value=g.value, bound=g.bound
            )
            for g in verdict.guards
        ]
        return cls(
            decision=verdict.decision,
            reason=verdict.reason,
            objective_metric=obj.metric if obj is not None else "",
            ratio=obj.ratio if obj is not None else None,
            ratio_low=ci.low if ci is not None else None,
            ratio_high=ci.high if ci is not None else None,
            gain=obj.gain if obj is not None else None,
            gain_vs_b0=obj.gain_vs_b0 if obj is not None else None,
            guards=guards,
            verdict=verdict,
            **fields,
        )


def _from_v1(raw: dict[str, Any]) -> dict[str, Any]:
    """``rsi.ledger/1``: the same fields, the verdict a dict. A verdict no
    ``Verdict`` reads any more (a layout since changed) is dropped with a warning;
    the rest of the record stands (the bot stored such candidates without one)."""
    out = {**raw, "schema": SCHEMA}
    vd = raw.get("verdict")
    if vd is not None:
        try:
            out["verdict"] = Verdict.model_validate(vd)
        except ValidationError as e:
            log.warning("ledger record %s: its rsi.ledger/1 verdict does not read as a Verdict "
                        "(%s); kept without it", str(raw.get("id"))[:200], str(e)[:300])
            out["verdict"] = None
    return out


UPGRADES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {"rsi.ledger/1": _from_v1}
"""Older schemas this reader upgrades on read, each to the current one."""


def load_record(raw: object) -> LedgerRecord:
    """One ledger line's parsed JSON as a record of the current schema (older
    schemas upgraded). ValueError (a pydantic ``ValidationError`` included) when
    it is not a ledger record of a schema this reader knows."""
    if not isinstance(raw, dict):
        raise ValueError(f"a ledger line is a JSON object, not {type(raw).__name__}")
    schema = raw.get("schema")
    if schema in UPGRADES:
        raw = UPGRADES[str(schema)](raw)
    elif schema != SCHEMA:
        raise ValueError(f"unknown ledger schema {str(schema)[:60]!r} (this reader knows "
                         f"{SCHEMA} and {', '.join(UPGRADES)})")
    return LedgerRecord.model_validate(raw)


class Ledger:
    """The ledger of one target repo (a path to a git repository)."""

    def __init__(self, repo: Path | str, *, ref: str = REF):
        self.repo = Path(repo)
        self.ref = ref

    def _tip(self) -> str | None:
        return rev_parse(self.repo, self.ref)

    def _text(self, tip: str | None) -> str:
        if tip is None:
            return ""
        try:
            return git(self.repo, "cat-file", "blob", f"{tip}:{FILE}") + "\n"
        except GitError:
            return ""

    def records(self, *, task: str | None = None) -> list[LedgerRecord]:
        """All records (optionally of one task), oldest first; older schemas are
        upgraded (``load_record``). Lines of an unknown schema or that do not
        parse (a verdict that is not one included) are skipped, with a warning."""
        out = []
        for line in self._text(self._tip()).splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                rec = load_record(json.loads(line))
            except ValueError as e:  # (json's and pydantic's errors are ValueErrors)
                log.warning("%s: a line of %s skipped: %s", self.ref, FILE, str(e)[:300])
                continue
            if task is None or rec.task == task:
                out.append(rec)
        return out

    def ids(self) -> set[str]:
        return {r.id for r in self.records()}

    def append(self, record: LedgerRecord, *, attempts: int = 50) -> bool:
        """Append one record; False when a record with its id is already there."""
        line = record.to_line()
        for _ in range(attempts):
            tip = self._tip()
            text = self._text(tip)
            for existing in text.splitlines():
                try:
                    if json.loads(existing).get("id") == record.id:
                        return False
                except ValueError:
                    continue
            blob = git(self.repo, "hash-object", "-w", "--stdin", input=text + line + "\n")
            tree = git(self.repo, "mktree", input=f"100644 blob {blob}\t{FILE}\n")
            msg = f"ledger: {record.id} {record.decision}"
            args = ["commit-tree", tree, "-m", msg]
            if tip:
                args[2:2] = ["-p", tip]
            commit = git(self.repo, *args)
            try:
                git(self.repo, "update-ref", "-m", msg, self.ref, commit, tip or "0" * 40)
                return True
            except GitError:
                # someone else appended (or holds the ref lock): re-read and retry
                time.sleep(random.uniform(0.005, 0.05))
                continue
        raise RuntimeError(f"could not append {record.id} to {self.ref} after {attempts} attempts")
