"""The watch after merge: does a merged candidate's claimed gain reproduce?

A bot PR's verdict was measured before the merge, on one hidden-input draw and
the benchmark's own request count. Once it is merged, :func:`watch` measures
the merge commit (candidate) against its first parent (the default branch just
before the merge, as Bk) again, under conditions the candidate was never judged
on:

1. a fresh hidden-input draw: a new secret seed (``RSI_SEED`` for the client,
   never for the candidate's server), recorded in the result
   (:func:`watch_spec`, through ``[hidden] seed``);
2. a larger request set: every benchmark's ``requests`` setting (exported to
   its client as ``RSI_SETTING_REQUESTS``) times :data:`REQUESTS_FACTOR`;
3. the whole deployment matrix, when the benchmark declares one: every
   secondary cell is measured (after the primary accepts, as in any
   verification) with :data:`MATRIX_PAIRS_FACTOR` times the matrix's pairs
   (:func:`_whole_matrix`).

:func:`judge_watch` (pure) compares the watch's verdict with the claim: the
claim fails to reproduce when the watch's gain interval lies wholly below the
claim's lower bound or wholly below ``min_gain``, or when a guard fails. An
error or an objective without an interval is ``inconclusive``, never a
failure. What the bot does about a failure (a comment, a revert PR) is the
bot's (``bot/tasks/rebaseline.py``).
"""

from __future__ import annotations

import copy
import secrets
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.events import LoopEvent
from harness.gitutil import rev_parse
from harness.spec import TaskSpec
from harness.verification import VerifierBackend, make_backend
from verifier.config import VerifyConfig
from verifier.verdict import Interval, ObjectiveResult, Verdict

REQUESTS_FACTOR = 4
"""The watch runs every benchmark with this many times its ``requests`` setting:
4x the samples behind each percentile (a p95 of 24 requests is the 2nd-worst
one; of 96, the 5th-worst), at ~4x the request time of a run."""


class WatchOutcome(StrEnum):
    REPRODUCED = "reproduced"
    FAILED = "failed"  # the gain did not reproduce, or a guard failed
    INCONCLUSIVE = "inconclusive"  # the watch could not measure (an error): nothing is concluded


class WatchResult(BaseModel):
    """One watch: what was measured, under which draw, and the verdict."""

    model_config = ConfigDict(frozen=True)

    merge_sha: str
    parent_sha: str
    hidden_seed: int
    """The fresh hidden-input draw (``RSI_SEED`` of the watch's client runs)."""
    requests_factor: int
    requests: dict[str, int] = Field(default_factory=dict)
    """Per benchmark: its ``requests`` setting in the watch (absent: none declared)."""
    verdict: Verdict


class WatchFinding(BaseModel):
    """:func:`judge_watch`'s conclusion, with the reasons in words."""

    model_config = ConfigDict(frozen=True)

    outcome: WatchOutcome
    reasons: tuple[str, ...] = ()


# ------------------------------------------------------------------ the spec


def watch_spec(spec: TaskSpec, *, seed: int, factor: int = REQUESTS_FACTOR
               ) -> tuple[TaskSpec, dict[str, int]]:
    """``spec`` for a watch: ``[hidden] seed = seed``, each benchmark's integer
    ``requests`` setting times ``factor`` and its whole matrix
    (:func:`_whole_matrix`). The config text a verifier in its own process
    reads is changed and the verifier's model is built again from it, so the
    two cannot differ. Returns it with the request counts set."""
    if factor < 1:
        raise ValueError(f"the watch's request factor must be at least 1, not {factor}")
    config = copy.deepcopy(spec.config)
    requests: dict[str, int] = {}
    for name, bench in (config.get("benchmarks") or {}).items():
        settings = bench.get("settings") if isinstance(bench, dict) else None
        if not isinstance(settings, dict):
            continue
        n = settings.get("requests")
        if isinstance(n, int) and not isinstance(n, bool):
            requests[name] = n * factor
            bench["settings"] = {**settings, "requests": n * factor}
    config["hidden"] = {**(config.get("hidden") or {}), "seed": seed}
    _whole_matrix(config)
    verify = VerifyConfig.from_dict(config)
    return spec.model_copy(update={"verify": verify, "config": config}), requests


MATRIX_PAIRS_FACTOR = 2
"""The watch measures each secondary matrix cell with this many times the
matrix's ``pairs`` (at most 30)."""


def _whole_matrix(config: dict[str, Any]) -> None:
    """MATRIX CALL SITE (issue 22 item 1, ``[benchmarks.<name>.matrix]``): the
    verifier measures every secondary cell after the primary cell accepts, with
    the matrix's ``pairs``; the watch raises them (:data:`MATRIX_PAIRS_FACTOR`).
    A cell whose guard fails fails the watch (:func:`judge_watch`)."""
    for bench in (config.get("benchmarks") or {}).values():
        matrix = bench.get("matrix") if isinstance(bench, dict) else None
        if isinstance(matrix, dict):
            pairs = matrix.get("pairs", 4)
            if isinstance(pairs, int) and not isinstance(pairs, bool):
                matrix["pairs"] = min(30, pairs * MATRIX_PAIRS_FACTOR)


# ------------------------------------------------------------------ measuring


def watch(repo: Path, spec: TaskSpec, merge_sha: str, *, state_dir: Path,
          factor: int = REQUESTS_FACTOR, seed: int | None = None,
          verifier: VerifierBackend | str | None = None,
          on_event: Callable[[LoopEvent], None] | None = None) -> WatchResult:
    """Measure ``merge_sha`` against its first parent with a fresh hidden draw
    (``seed``: a new secret unless given) and ``factor`` times the requests.
    The trees are fresh exports (``state_dir``/worktrees), removed after."""
    from harness.loop import _Loop  # the loop's export-and-verify step, shared

    repo = Path(repo).resolve()
    merge = rev_parse(repo, merge_sha)
    if merge is None:
        raise ValueError(f"{repo}: cannot resolve the merge commit '{merge_sha}'")
    parent = rev_parse(repo, f"{merge}^1")
    if parent is None:
        raise ValueError(f"{repo}: the merge commit {merge[:12]} has no parent to measure against")
    seed = secrets.randbits(63) if seed is None else seed
    wspec, requests = watch_spec(spec, seed=seed, factor=factor)
    backend = verifier if (verifier is not None and not isinstance(verifier, str)) \
        else make_backend(verifier)
    loop = _Loop(repo, wspec, Path(state_dir), backend, on_event)
    # no calibration: the task's was measured at the old request count, possibly on
    # another machine (a foreign fingerprint is refused); the watch stands alone
    verdict = loop.verify(f"watch-{merge[:12]}", {"b0": parent, "bk": parent, "candidate": merge},
                          with_b0=False, calibration=None, progress=loop.progress())
    return WatchResult(merge_sha=merge, parent_sha=parent, hidden_seed=seed,
                       requests_factor=factor, requests=requests, verdict=verdict)


# ------------------------------------------------------------------ judging


def gain_interval(obj: ObjectiveResult | None) -> Interval | None:
    """The objective's gain interval (better direction): ``gain_ci``, else derived
    from ``ratio_ci`` (higher: ratio - 1; lower: 1/ratio - 1)."""
    if obj is None:
        return None
    if obj.gain_ci is not None:
        return obj.gain_ci
    r = obj.ratio_ci
    if r is None or r.low <= 0:
        return None
    if obj.direction == "higher":
        return Interval(low=r.low - 1, high=r.high - 1, level=r.level)
    return Interval(low=1 / r.high - 1, high=1 / r.low - 1, level=r.level)


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def judge_watch(claim: Verdict | None, watched: Verdict, min_gain: float) -> WatchFinding:
    """Does the claim reproduce? ``failed`` when a guard of the watch failed, or
    its gain interval lies wholly below the claim's lower bound or wholly below
    ``min_gain``; ``inconclusive`` when the watch has no gain interval (an
    error: measured nothing); else ``reproduced``."""
    if watched.decision == "error":
        why = watched.error.message if watched.error is not None else watched.reason
        return WatchFinding(outcome=WatchOutcome.INCONCLUSIVE,
                            reasons=(f"the watch could not measure: {why}",))
    reasons: list[str] = []
    for g in watched.guards:
        if g.status == "fail":
            value = f" (measured {g.value:.4g}, bound {g.bound})" if g.value is not None else ""
            reasons.append(f"guard {g.name} failed{value}")
    for cell in getattr(watched, "cells", ()):  # a deployment matrix's other cells
        if not getattr(cell, "primary", False):
            for g in cell.failed:
                reasons.append(f"guard {g.name} failed in the matrix cell {cell.label}")
    got = gain_interval(watched.objective)
    if got is None:
        if reasons:
            return WatchFinding(outcome=WatchOutcome.FAILED, reasons=tuple(reasons))
        return WatchFinding(outcome=WatchOutcome.INCONCLUSIVE,
                            reasons=(f"the watch has no gain interval: {watched.reason}",))
    claimed = gain_interval(claim.objective) if claim is not None else None
    seen = f"the watch's gain interval [{_pct(got.low)}, {_pct(got.high)}]"
    if claimed is not None and got.high < claimed.low:
        reasons.append(f"{seen} lies wholly below the claimed interval's lower bound "
                       f"{_pct(claimed.low)}")
    if got.high < min_gain:
        reasons.append(f"{seen} lies wholly below min_gain {_pct(min_gain)}")
    return WatchFinding(outcome=WatchOutcome.FAILED if reasons else WatchOutcome.REPRODUCED,
                        reasons=tuple(reasons))


