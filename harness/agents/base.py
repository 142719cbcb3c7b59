"""The one small interface every agent implements, and TASK.md.

An agent gets a fresh worktree of Bk and an :class:`AgentContext`; it edits the
worktree in place and returns an :class:`AgentOutcome` with its one-line
hypothesis. The harness takes the diff, checks it with the edit policy,
commits it and has the verifier judge it; the agent never sees the verdict
except through the ledger digest in the next round's TASK.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from harness.ledger import LedgerRecord
from harness.spec import TaskSpec


class AgentContext(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    spec: TaskSpec
    worktree: Path
    """Fresh worktree of Bk; the agent edits it in place."""
    round: int
    candidate: int
    bk_sha: str
    task_md: str
    """TASK.md for this round (written to ``task_file`` too)."""
    task_file: Path
    io_dir: Path
    """A scratch dir for the agent's own files (TASK.md, hypothesis, logs)."""
    ledger: list[LedgerRecord] = Field(default_factory=list)
    """Every ledger record of this repo (all tasks), oldest first."""
    state: dict[str, Any] = Field(default_factory=dict)
    """The agent's own persistent state (saved in the loop's state file)."""
    timeout_s: float = 900


class AgentOutcome(BaseModel):
    hypothesis: str = ""
    """One line: what was changed and why it should be faster."""
    done: bool = False
    """True when the agent has nothing more to try (the loop stops)."""
    error: str | None = None
    """The agent failed (crash, timeout): recorded as an ``error`` candidate."""
    log: str = ""
    """The agent's output, secrets redacted (kept in the state dir, not the ledger)."""
    change: dict[str, Any] | None = None
    """A structured description of the change, for the ledger (tuner)."""
    raw_patch: str | None = None
    """The patch text as given (replay): checked by the edit policy too."""
    duration_s: float = 0.0


@runtime_checkable
class Agent(Protocol):
    name: str

    def run(self, ctx: AgentContext) -> AgentOutcome: ...
