"""What the loop tells its watcher: one typed event per thing that happened.

The loop (``harness.loop``) calls ``on_event(ev)`` with one of the models
below; ``LoopEvent`` is their union, keyed on ``kind``. A watcher switches on
the class (or on ``kind``) and reads typed fields: no guessing of names.

Events drive progress displays and the bot's live check. They are not the
record of what a candidate is: that is the ledger (``harness.ledger``) and the
``TaskResult`` a run returns.

The ``actions`` executor carries events across machines as JSON::

    line = dump_event(ev)            # on the runner
    ev = load_event(json.loads(line))  # on the bot: validated, or ValueError

Verdicts inside are the verifier's ``Verdict`` (serialized by alias, as
``verifier.verdict.Verdict.to_json`` writes them).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from harness.ledger import CandidateStatus, LedgerRecord
from verifier.calibrate import Calibration
from verifier.verdict import Verdict

LoopStatus = Literal["running", "finished", "exhausted", "paused", "stopped", "refused"]


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    task_id: str
    message: str = ""
    """One human line (every event has one)."""
    at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))


class Resumed(_Event):
    kind: Literal["resumed"] = "resumed"
    rounds_done: int = 0


class BaselineMeasured(_Event):
    """B0 is measured and the task can be judged (calibration passed)."""

    kind: Literal["baseline"] = "baseline"
    sha: str
    calibration: Calibration | None = None


class Refused(_Event):
    """The task cannot be judged here (B0 failed, or too noisy for ``min_gain``)."""

    kind: Literal["refused"] = "refused"
    calibration: Calibration | None = None


class RoundStarted(_Event):
    kind: Literal["round_started"] = "round_started"
    round: int
    candidate: int
    agent: str = ""
    stage: Literal["agent", "verify", "record"] = "agent"
    """Where the round resumes (``agent`` for a new round)."""
    bk: str = ""


class AgentFinished(_Event):
    kind: Literal["agent_finished"] = "agent_finished"
    round: int
    candidate: int
    duration_s: float = 0.0
    error: str = ""
    left_out: list[str] = Field(default_factory=list)


class Verifying(_Event):
    kind: Literal["verifying"] = "verifying"
    round: int
    candidate: int
    sha: str


class Progress(_Event):
    """The verifier's progress (``verifier.measure.ProgressEvent``), or a loop phase."""

    kind: Literal["progress"] = "progress"
    round: int | None = None
    candidate: int | None = None
    phase: str = ""
    run: int | None = None
    total: int | None = None
    pairs: int | None = None
    arm: str = ""
    benchmark: str = ""


class CandidateRecorded(_Event):
    """A round's candidate is judged and its ledger line written."""

    kind: Literal["candidate"] = "candidate"
    round: int
    candidate: int
    branch: str = ""
    """``rsi/<task>/<n>`` ("" when nothing was committed)."""
    sha: str = ""
    status: CandidateStatus
    verdict: Verdict | None = None
    """The verifier's verdict ("agent" error verdicts included); None for a policy reject."""
    record: LedgerRecord
    bk: str
    """Bk after this candidate (it moved when the candidate was kept)."""


class Paused(_Event):
    kind: Literal["paused"] = "paused"


class Stopped(_Event):
    kind: Literal["stopped"] = "stopped"


class Finished(_Event):
    kind: Literal["finished"] = "finished"
    status: LoopStatus
    sha: str
    """Bk at the end."""
    gain_vs_b0: float | None = None
    rounds: int = 0


class Rebaselined(_Event):
    kind: Literal["rebaseline"] = "rebaseline"
    sha: str
    old_bk: str
    calibration: Calibration | None = None


class ReverifyOutcome(BaseModel):
    """One open candidate after a rebaseline: moved onto the new Bk and judged
    again (``reverified``), already in it (``merged``), ``conflict`` or ``error``."""

    n: int
    branch: str
    old_sha: str
    new_sha: str = ""
    outcome: Literal["reverified", "merged", "conflict", "error"]
    decision: str = ""
    reason: str = ""
    verdict: Verdict | None = None


class Reverified(_Event):
    kind: Literal["reverified"] = "reverified"
    candidate: int
    branch: str
    sha: str = ""
    outcome: ReverifyOutcome


LoopEvent = Annotated[
    Resumed | BaselineMeasured | Refused | RoundStarted | AgentFinished | Verifying | Progress
    | CandidateRecorded | Paused | Stopped | Finished | Rebaselined | Reverified,
    Field(discriminator="kind"),
]

_ADAPTER: TypeAdapter[Any] = TypeAdapter(LoopEvent)


def dump_event(ev: _Event) -> dict[str, Any]:
    """The event as JSON-ready data (verdicts by alias, as their own JSON)."""
    return ev.model_dump(mode="json", by_alias=True)


def load_event(data: Any) -> Any:
    """An event back from :func:`dump_event`'s data; ``ValueError`` (pydantic's
    ``ValidationError``) when it is not one."""
    return _ADAPTER.validate_python(data)
