"""The bot's vocabulary, defined once: task and candidate states, job kinds,
and how each verifier decision and task state looks in every renderer.

Each enum's values are the strings stored in the database and written in
JSON, so rows written before the enums existed read back unchanged (a
``StrEnum`` member compares equal to its string). Who moves a task or a
candidate from one state to another is drawn in ``bot/README.md``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

from harness.ledger import CandidateStatus
from harness.report import EMOJI


class TaskState(StrEnum):
    """``store.Task.state``: what the issue's status comment says."""

    QUEUED = "queued"
    BASELINE = "baseline"  # measuring B0
    RUNNING = "running"
    STOPPING = "stopping"  # /rsi stop while a job runs: it stops after its current step
    STOPPED = "stopped"
    PAUSED = "paused"  # the loop paused itself (e.g. its spending budget ran out)
    REBASELINING = "rebaselining"
    FINISHED = "finished"
    REFUSED = "refused"  # the loop refused the task (e.g. a benchmark too noisy)
    INVALID = "invalid"  # the proposal or the repo config has errors
    FAILED = "failed"  # infrastructure: a job gave up


CandidateState = CandidateStatus
"""``store.Candidate.state``: what became of a candidate's change. The harness's
one candidate vocabulary (``harness.ledger.CandidateStatus``); the store uses
``STORE_STATES`` of it."""

STORE_STATES = frozenset({CandidateStatus.NONE, CandidateStatus.PENDING, CandidateStatus.OPEN,
                          CandidateStatus.CONFLICT, CandidateStatus.MERGED, CandidateStatus.CLOSED})
"""The candidate states the bot's store assigns (``CandidateStatus.ledger_word``
says what the ledger, the report's chart and table, call each)."""


class JobKind(StrEnum):
    """``store.Job.kind``: the jobs the bot enqueues."""

    EVENT = "event"  # one webhook delivery, handled by ``handlers.route``
    RUN_TASK = "run_task"
    PUBLISH = "publish"
    REBASELINE = "rebaseline"
    REVERIFY = "reverify"


# a new trigger label is needed to leave these (stop and resume refuse them)
DEAD_ENDS = frozenset({TaskState.INVALID, TaskState.REFUSED})
# a job of the task is queued or running: /rsi stop makes it ``stopping``
ACTIVE = frozenset({TaskState.QUEUED, TaskState.BASELINE, TaskState.RUNNING})
# candidates with a change kept for review (a PR, or one queued)
KEPT = frozenset({CandidateState.PENDING, CandidateState.OPEN, CandidateState.MERGED,
                  CandidateState.CONFLICT})
# candidates whose PR can be re-verified (/rsi rerun, Re-run, a push, a rebaseline)
REVERIFIABLE = frozenset({CandidateState.OPEN, CandidateState.CONFLICT})


class DecisionStyle(NamedTuple):
    emoji: str
    words: str
    conclusion: str  # of the ``rsi/verifier`` check run


# Keyed on the verifier's decisions (plain strings, equal to ``Decision``'s
# values). The emoji are ``harness.report``'s, so the report and the bot's
# comments, checks and page agree. An inconclusive result or an
# infrastructure error is never a failure of the change.
DECISION_STYLE: dict[str, DecisionStyle] = {
    "accept": DecisionStyle(EMOJI["accept"], "accepted", "success"),
    "review": DecisionStyle(EMOJI["review"], "needs a human review", "neutral"),
    "reject": DecisionStyle(EMOJI["reject"], "rejected", "failure"),
    "inconclusive": DecisionStyle(EMOJI["inconclusive"], "inconclusive", "neutral"),
    "error": DecisionStyle(EMOJI["error"], "not judged: infrastructure error", "neutral"),
}


def decision_style(decision: str) -> DecisionStyle:
    """The style of ``decision``; an unknown one shows as itself, neutral."""
    return DECISION_STYLE.get(decision) or DecisionStyle("", str(decision), "neutral")


TASK_STATE_WORDS: dict[str, str] = {
    TaskState.QUEUED: "⏳ queued",
    TaskState.INVALID: "🛑 the proposal has problems",
    TaskState.REFUSED: "🛑 refused",
    TaskState.BASELINE: "📏 measuring the baseline",
    TaskState.RUNNING: "🏃 running rounds",
    TaskState.STOPPING: "⏸️ stopping after the current step",
    TaskState.STOPPED: "⏸️ stopped (`/rsi resume` continues)",
    TaskState.PAUSED: "⏸️ paused (`/rsi resume` continues)",
    TaskState.REBASELINING: "📏 measuring the new baseline",
    TaskState.FINISHED: "🏁 finished",
    TaskState.FAILED: "⚠️ failed (infrastructure)",
}

# The conclusion of a task run's check when the run ends in that state.
TASK_CONCLUSIONS: dict[str, str] = {
    TaskState.FINISHED: "success", TaskState.STOPPED: "cancelled", TaskState.PAUSED: "neutral",
    TaskState.REFUSED: "neutral", TaskState.INVALID: "neutral", TaskState.FAILED: "neutral",
}
