"""The loop: propose, measure, judge, keep or roll back, remember.

::

    run_task
      |- B0: calibrate (A/A pairs); refuse when too noisy for min_gain
      '- each round, until the budget (rounds; [agent] max_tokens / max_cost_usd
         against the rounds' usage), should_stop(), N straight rejections,
         or an agent with nothing left to try:
           agent   plain export of Bk (sandbox uid) + TASK.md -> agent edits it
           take    the agent's tree exported as regular files (no links
                   followed, no .git, no FIFOs, size caps) into a host-owned
                   dir, staged in a private index of the host repo
           commit  rsi/<task>/<n>, hypothesis as the subject
           policy  the committed diff checked (unidiff); a violation is a reject
           verify  fresh exports of the committed shas (B0, Bk, candidate),
                   removed afterwards; the verifier runs each benchmark run
                   in its own container
           record  one ledger line (rsi/ledger); keep:
                     advance -> Bk = candidate now
                     propose -> candidate stays open for review

Each round moves through the stages ``agent -> verify -> record``; the state
(``<state_dir>/state.json``, written atomically) is saved at every stage
boundary, so a run killed at any point and started again continues where it
was: an agent run cut off is redone from the same start state, a committed
candidate is not made twice, a verdict is not measured twice, and a ledger
line is never duplicated (appends are idempotent by record id).

``rebaseline(ref)`` measures a new Bk (a merge) and re-verifies every open
candidate on top of it; ``reverify(branch)`` re-judges one.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from harness.agents import Agent, AgentContext, AgentOutcome, make_agent
from harness.agents.base import host_dir, write_host_file
from harness.agents.taskmd import load_template, write_task_md
from harness.agents.usage import budget_spent, round_usage
from harness.calcache import CalibrationKey, RunnerStore
from harness.events import (
    AgentFinished,
    BaselineMeasured,
    CandidateRecorded,
    Finished,
    LoopEvent,
    LoopStatus,
    Paused,
    Progress,
    Rebaselined,
    Refused,
    Resumed,
    Reverified,
    ReverifyOutcome,
    RoundStarted,
    Stopped,
    Verifying,
)
from harness.gitutil import GitError, git, git_ok, rev_parse
from harness.ledger import CandidateStatus, Ledger, LedgerRecord, Usage
from harness.parallel import run_parallel
from harness.policy import PolicyResult, check_diff
from harness.spec import TaskSpec
from harness.verification import VerifierBackend, calibration_ok, error_verdict, make_backend
from harness.workspace import CandidateCommit, TreeExport, Workspace, candidate_branch
from verifier.calibrate import Calibration
from verifier.verdict import Verdict

log = logging.getLogger(__name__)

STATE_SCHEMA: Final = "rsi.loop-state/1"

Status = LoopStatus


class LoopCandidate(BaseModel):
    """The loop's memory of one candidate it recorded (in ``state.json`` and the
    ``TaskResult``): enough to re-verify it on a new Bk. The record of what a
    candidate is stays the ledger line (``ledger_id``)."""

    n: int
    round: int
    agent: str = ""
    branch: str = ""
    sha: str = ""
    base_sha: str = ""
    hypothesis: str = ""
    decision: str = ""
    reason: str = ""
    status: CandidateStatus | None = None
    gain: float | None = None
    gain_vs_b0: float | None = None
    ratio: float | None = None
    ledger_id: str = ""

    @field_validator("status", mode="before")
    @classmethod
    def _unset(cls, v: object) -> object:
        return None if v == "" else v  # state files of older versions wrote "" for none


class InProgress(BaseModel):
    round: int
    n: int
    agent: str = ""
    stage: Literal["agent", "verify", "record"] = "agent"
    base_sha: str
    agent_state_before: dict[str, Any] = Field(default_factory=dict)
    agent_state_after: dict[str, Any] | None = None
    outcome: dict[str, Any] | None = None
    policy: dict[str, Any] | None = None
    sha: str = ""
    branch: str = ""
    decision: str = ""
    """Set when the candidate is decided before verification (policy, error)."""
    reason: str = ""
    verdict: Verdict | None = None
    patch_id: str = ""
    left_out: list[str] = Field(default_factory=list)
    slot: str = ""
    """Whose agent state the round starts from and updates (``agent_state``'s
    key): the agent's name, or ``name@k`` for the k-th of parallel agents."""


class LoopState(BaseModel):
    schema_: Literal["rsi.loop-state/1"] = Field(STATE_SCHEMA, alias="schema")
    task_id: str
    repo: str
    agent: str = ""
    keep: Literal["advance", "propose"] = "advance"
    b0_sha: str = ""
    bk_sha: str = ""
    calibration: Calibration | None = None
    status: Status = "running"
    reason: str = ""
    rounds_done: int = 0
    next_n: int = 1
    straight_rejections: int = 0
    agent_state: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Each agent's own state, by agent name (a task may use several agents in turn)."""
    in_progress: InProgress | None = None
    in_flight: list[InProgress] = Field(default_factory=list)
    """With parallel agents (``run_task(agents=N)``): every round started and not
    yet recorded, in candidate order (``in_progress`` stays None)."""
    candidates: list[LoopCandidate] = Field(default_factory=list)
    bk_history: list[dict[str, Any]] = Field(default_factory=list)
    """Every Bk of the task: {sha, at, via} (via: b0 | candidate n | rebaseline)."""
    spent: Usage = Field(default_factory=Usage)
    """Model calls, tokens, cost and agent wall time of every recorded round."""
    budget: dict[str, float | int | None] = Field(default_factory=dict)
    """The task's spending limits when it last ran: ``max_tokens``, ``max_cost_usd``."""

    model_config = ConfigDict(populate_by_name=True)


class TaskResult(BaseModel):
    task_id: str
    status: Status
    reason: str = ""
    b0_sha: str
    bk_sha: str
    rounds: int
    candidates: list[LoopCandidate]
    calibration: Calibration | None = None
    gain_vs_b0: float | None = None
    """Objective gain of the best kept candidate over B0 (0.3 = 30% better)."""
    spent: Usage = Field(default_factory=Usage)

    @property
    def kept(self) -> list[LoopCandidate]:
        return [c for c in self.candidates if c.status == CandidateStatus.KEPT]

    @property
    def open(self) -> list[LoopCandidate]:
        return [c for c in self.candidates if c.status == CandidateStatus.OPEN]


# ------------------------------------------------------------------ state I/O


def state_path(state_dir: Path) -> Path:
    return Path(state_dir) / "state.json"


def load_state(state_dir: Path) -> LoopState | None:
    p = state_path(state_dir)
    if not p.exists():
        return None
    return LoopState.model_validate_json(p.read_text())


def save_state(state_dir: Path, state: LoopState) -> None:
    """Write atomically: a kill leaves the old state or the new one, never half."""
    p = state_path(state_dir)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".state.{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        fh.write(state.model_dump_json(by_alias=True, indent=1))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, p)
    try:
        fd = os.open(str(p.parent), os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    except OSError:
        pass


# --------------------------------------------------------------------- loop


class _Loop:
    def __init__(
        self,
        repo: Path,
        spec: TaskSpec,
        state_dir: Path,
        backend: VerifierBackend,
        on_event: Callable[[LoopEvent], None] | None,
        store: RunnerStore | None = None,
    ):
        self.repo = Path(repo).resolve()
        self.store = store
        self.mutex = threading.RLock()
        """With parallel agents: held by a worker for everything but its agent's
        run, its wait for the measuring lane and the measurement itself."""
        self.parallel = False
        self._emit_lock = threading.Lock()
        self.spec = spec
        self.state_dir = Path(state_dir).resolve()
        self.ws = Workspace(self.repo, self.state_dir / "worktrees")
        self.ledger = Ledger(self.repo)
        self.backend = backend
        self.on_event = on_event
        self.extra_protected = spec.protected_paths()

    def emit(self, event: type[LoopEvent], message: str = "", **kw: Any) -> None:
        """Tell the watcher: ``event`` (a class of ``harness.events``) with its fields."""
        if self.on_event is None:
            return
        try:
            with self._emit_lock:
                self.on_event(event(task_id=self.spec.task_id, message=message, **kw))
        except Exception:  # noqa: BLE001 - a broken watcher must not stop the loop
            log.exception("on_event failed for a %s event", event.__name__)

    def progress(self, round_: int | None = None, n: int | None = None):
        def cb(message: str, data: dict) -> None:
            fields = {k: data[k] for k in ("phase", "run", "total", "pairs", "arm", "benchmark")
                      if data.get(k) is not None}
            self.emit(Progress, message, round=round_, candidate=n, **fields)

        return cb

    def verify(self, key: str, shas: dict[str, str], *, with_b0: bool, calibration: Calibration | None,
               progress) -> Verdict:
        """The verdict on fresh exports of ``shas`` (bk, candidate, b0), made
        for this call and removed after it: never a tree an agent touched."""
        refs = {"bk": shas["bk"], "candidate": shas["candidate"], "b0": shas["b0"] if with_b0 else None}
        with self.lane_unlocked(), self.ws.exports(f"verify-{key}", refs) as d, self.unlocked():
            return self.backend.verify(d["bk"], d["candidate"], self.spec, b0=d.get("b0"), shas=shas,
                                       calibration=calibration, progress=progress)

    @contextlib.contextmanager
    def unlocked(self):
        """With parallel agents, let the others work meanwhile (this worker holds
        ``mutex`` once); a no-op otherwise."""
        if not self.parallel:
            yield
            return
        self.mutex.release()
        try:
            yield
        finally:
            self.mutex.acquire()

    @contextlib.contextmanager
    def lane_unlocked(self):
        """The measuring lane, waited for without holding ``mutex``; this
        process's own when the runner's store cannot be used (said once)."""
        cm = self.lane()
        with self.unlocked():
            try:
                cm.__enter__()
            except OSError as exc:
                log.warning("the runner's measuring lane is unusable (%s): this process's own instead", exc)
                cm = _process_lane(lambda: None)
                cm.__enter__()
        try:
            yield
        finally:
            cm.__exit__(None, None, None)

    def lane(self):
        """The runner's one measuring lane (``RunnerStore.lane``; without a store,
        this process's): every calibration and verification holds it."""
        def waiting() -> None:
            self.emit(Progress, "waiting for the runner's measuring lane (another verification is measuring)",
                      phase="lane")

        return (self.store.lane(on_wait=waiting) if self.store is not None
                else _process_lane(waiting))

    def calibration_key(self, sha: str, spec: TaskSpec) -> CalibrationKey | None:
        """What a calibration of ``sha`` under ``spec`` measures, or None when
        it cannot be kept (no store; a backend that does not say where it measures)."""
        where = getattr(self.backend, "measures_where", None)
        if self.store is None or where is None:
            return None
        try:
            tree = git(self.repo, "rev-parse", f"{sha}^{{tree}}")
            return CalibrationKey.of(spec, tree, where(spec))
        except Exception:  # noqa: BLE001 - no key: measured as without a store
            log.warning("no calibration key for %s", sha[:12], exc_info=True)
            return None

    def reuse_calibration(self, sha: str, what: str) -> Calibration | None:
        """A stored calibration of ``sha`` (this task's pairs, then the longer
        retry's) that this task may use: comparable machine, young enough,
        feasible at ``min_gain``; said in a progress line with the time saved."""
        if self.store is None:
            return None
        pairs = self.spec.verify.verifier.calibration_pairs
        for spec in (self.spec, with_calibration_pairs(self.spec, 2 * pairs)):
            key = self.calibration_key(sha, spec)
            try:
                hit = self.store.get(key) if key is not None else None
            except OSError:
                log.warning("the runner's calibration store is unreadable", exc_info=True)
                return None
            if key is None or hit is None or not calibration_ok(hit.calibration, self.spec.min_gain)[0]:
                continue
            with contextlib.suppress(OSError):
                self.store.note_hit(key, hit, what)
            self.emit(Progress, f"reusing {what}'s calibration from {_ago(hit.age_s)} on this runner (same "
                      f"machine, tree and benchmark config; {hit.calibration.pairs} A/A pairs): "
                      f"{hit.measured_s:.0f} s of measuring saved; every look still checks it against "
                      "the pairs' own noise", phase="calibrate")
            return hit.calibration
        return None

    def calibrate(self, key: str, sha: str, spec: TaskSpec | None = None) -> Calibration:
        spec = spec or self.spec
        store_key = self.calibration_key(sha, spec)
        with self.lane_unlocked(), self.ws.exports(f"calibrate-{key}", {"ref": sha}) as d, self.unlocked():
            t0 = time.monotonic()
            cal = self.backend.calibrate(d["ref"], spec, progress=self.progress())
            took = time.monotonic() - t0
        if store_key is not None and self.store is not None and isinstance(cal, Calibration):
            try:
                self.store.put(store_key, cal, took)
            except OSError:
                log.warning("could not keep the calibration in the runner's store", exc_info=True)
        return cal

    def save(self, st: LoopState) -> None:
        save_state(self.state_dir, st)

    # -- B0 ------------------------------------------------------------
    def baseline(self, st: LoopState, should_stop: Callable[[], bool | str] = lambda: False) -> bool:
        if st.calibration is not None:
            return True
        reused = self.reuse_calibration(st.b0_sha, "B0")
        if reused is not None:
            st.calibration = reused
            self.save(st)
            ok, message = calibration_ok(reused, self.spec.min_gain)
            self.emit(BaselineMeasured, f"B0 {st.b0_sha[:12]} measured (calibration reused): {message}",
                      sha=st.b0_sha, calibration=reused)
            return True
        v = self.spec.verify.verifier
        self.emit(Progress, f"measuring B0 {st.b0_sha[:12]} (calibration: {v.calibration_pairs} A/A pairs, "
                  f"{2 * (v.calibration_pairs + v.warmup)} benchmark runs)", phase="calibrate")
        try:
            cal = self.calibrate("b0", st.b0_sha)
        except Exception as exc:  # noqa: BLE001 - a failed calibration refuses the task, with the reason
            st.status, st.reason = "refused", f"could not measure B0: {exc}"
            self.save(st)
            self.emit(Refused, st.reason)
            return False
        ok, message = calibration_ok(cal, self.spec.min_gain)
        why = should_stop() if not ok and getattr(cal, "error", None) is None else False
        if why:  # a stop, or a time budget a longer calibration would not fit in: refused as it stands
            message += f" (not measured again: {why if isinstance(why, str) else 'stopped on request'})"
        elif not ok and getattr(cal, "error", None) is None:
            # too noisy: one busy moment (another job starting) must not refuse the task,
            # and a longer A/A series is simply more evidence: B0 is measured once more
            # with twice the pairs, and that calibration stands, whatever it says
            pairs = 2 * self.spec.verify.verifier.calibration_pairs
            self.emit(Progress, f"B0 looked too noisy; measuring it again with {pairs} A/A pairs: {message}",
                      phase="calibrate")
            try:
                cal = self.calibrate("b0-longer", st.b0_sha, spec=with_calibration_pairs(self.spec, pairs))
            except Exception as exc:  # noqa: BLE001
                st.status, st.reason = "refused", f"could not measure B0: {exc}"
                self.save(st)
                self.emit(Refused, st.reason)
                return False
            ok, message = calibration_ok(cal, self.spec.min_gain)
        st.calibration = cal
        if not ok:
            st.status, st.reason = "refused", message
            self.save(st)
            self.emit(Refused, message, calibration=cal)
            return False
        self.save(st)
        if getattr(cal, "cost_note", ""):  # most of the wall time went to starting servers
            message += f"; {cal.cost_note}"
        self.emit(BaselineMeasured, f"B0 {st.b0_sha[:12]} measured: {message}", sha=st.b0_sha, calibration=cal)
        return True

    # -- one round -----------------------------------------------------
    def round(self, st: LoopState, agent: Agent, rounds_total: int) -> bool:
        """Run (or finish) one round; False when the agent has nothing left."""
        if st.in_progress is None:
            st.in_progress = InProgress(
                round=st.rounds_done + 1,
                n=st.next_n,
                agent=agent.name,
                base_sha=st.bk_sha,
                agent_state_before=copy.deepcopy(st.agent_state.get(agent.name, {})),
            )
            self.save(st)
        ip = st.in_progress
        if ip.stage == "agent" and ip.agent != agent.name:
            # resumed with another agent before the old one finished: its round, from the start
            ip.agent = agent.name
            ip.agent_state_before = copy.deepcopy(st.agent_state.get(agent.name, {}))
            self.save(st)
        self.emit(
            RoundStarted,
            f"round {ip.round}/{rounds_total}: {agent.name} on Bk {ip.base_sha[:12]}",
            round=ip.round,
            candidate=ip.n,
            stage=ip.stage,
            agent=agent.name,
            bk=ip.base_sha,
        )
        if ip.stage == "agent" and not self.agent_stage(st, ip, agent):
            return False
        if ip.stage == "verify":
            self.verify_stage(st, ip)
        if ip.stage == "record":
            self.record_stage(st, ip, agent)
        return True

    def agent_stage(self, st: LoopState, ip: InProgress, agent: Agent) -> bool:
        name = f"cand-{ip.n}"
        wt = self.ws.agent_tree(name, ip.base_sha)
        io_dir = host_dir(self.state_dir / "rounds" / str(ip.n))
        records = self.ledger.records()
        task_md = write_task_md(self.spec, records, round=ip.round, bk_sha=ip.base_sha, workdir="/work/repo",
                                template=load_template(self.repo, st.b0_sha))
        write_host_file(io_dir / "TASK.md", task_md, 0o644)
        ctx = AgentContext(
            spec=self.spec,
            worktree=wt,
            round=ip.round,
            candidate=ip.n,
            bk_sha=ip.base_sha,
            task_md=task_md,
            task_file=io_dir / "TASK.md",
            io_dir=io_dir,
            scratch_dir=io_dir / "out",
            ledger=records,
            state=copy.deepcopy(ip.agent_state_before),
            timeout_s=self.spec.agent.round_timeout_s,
            spent=st.spent,
        )
        t0 = time.monotonic()
        try:
            with self.unlocked():
                outcome = agent.run(ctx)
        except Exception as exc:  # noqa: BLE001 - an agent crash is an error candidate
            outcome = AgentOutcome(error=f"agent {agent.name} raised {type(exc).__name__}: {exc}")
        outcome.duration_s = outcome.duration_s or (time.monotonic() - t0)
        outcome.usage = round_usage(self.spec.agent, outcome.usage, outcome.duration_s)
        ip.branch = candidate_branch(self.spec.task_id, ip.n)
        taken, export = self.take(ip, wt, outcome, agent.name)
        if outcome.log:
            write_host_file(io_dir / "agent.log", outcome.log)
        if outcome.done and not taken.sha and not outcome.error:
            self.finish(st, ip)
            st.status, st.reason = "exhausted", outcome.hypothesis or f"{agent.name} has nothing left to try"
            self.ws.remove(name)
            self.save(st)
            return False
        self.emit(
            AgentFinished,
            f"{agent.name}: {outcome.hypothesis or '(no hypothesis)'}" + (f" [error: {outcome.error}]" if outcome.error else ""),
            round=ip.round,
            candidate=ip.n,
            duration_s=outcome.duration_s or 0.0,
            error=outcome.error or "",
            left_out=ip.left_out,
        )
        self.judge_taken(ip, outcome, taken, export)
        ip.agent_state_after = ctx.state
        ip.stage = "record" if ip.decision else "verify"
        self.save(st)
        self.ws.remove(name)
        return True

    def take(self, ip: InProgress, wt: Path, outcome: AgentOutcome, agent_name: str) -> tuple[CandidateCommit, TreeExport]:
        """Export the agent's tree as plain files into a host-owned dir and
        commit it on the candidate's branch (the host never runs git in ``wt``)."""
        export_name = f"cand-{ip.n}.export"
        taken, export = CandidateCommit(), TreeExport()
        if outcome.withheld:  # it carried a secret: nothing of it is committed
            return taken, export
        try:
            dest, export = self.ws.export_candidate(wt, export_name)
            body = f"rsi task {self.spec.task_id}, round {ip.round}, agent {agent_name}\nBk: {ip.base_sha}"
            taken = self.ws.commit_candidate(dest, ip.base_sha, ip.branch, outcome.hypothesis, body)
        except Exception as exc:  # noqa: BLE001 - whatever the agent left, the loop goes on: an error candidate
            outcome.error = outcome.error or f"could not take the agent's changes: {type(exc).__name__}: {exc}"
        finally:
            self.ws.remove(export_name)
        ip.left_out = export.notes() + [f"{p}: ignored by the repo, not committed" for p in taken.ignored]
        if ip.left_out:
            outcome.log += "\n[rsi] left out of the candidate:\n" + "\n".join(f"  {x}" for x in ip.left_out) + "\n"
        return taken, export

    def judge_taken(self, ip: InProgress, outcome: AgentOutcome, taken: CandidateCommit, export: TreeExport) -> None:
        """The edit policy on exactly the committed diff (and the raw patch a
        replay agent gave); sets ``ip.decision`` when no verification is due."""
        pol = PolicyResult()
        if outcome.raw_patch:
            pol = check_diff(outcome.raw_patch, self.spec.policy, extra_protected=self.extra_protected)
        if pol.ok and taken.diff.strip():
            pol = check_diff(taken.diff, self.spec.policy, extra_protected=self.extra_protected)
        ip.policy = pol.model_dump()
        ip.outcome = outcome.model_dump(exclude={"log", "raw_patch"})
        ip.sha = taken.sha
        if taken.sha:
            ip.patch_id = self.ws.patch_id(ip.base_sha, taken.sha)
        if export.problems():
            ip.decision, ip.reason = "reject", "export: " + "; ".join(export.problems())
        elif not pol.ok:
            ip.decision, ip.reason = "reject", "edit policy: " + pol.reason()
        elif outcome.error:
            ip.decision, ip.reason = "error", outcome.error
        elif not taken.sha:
            ip.decision, ip.reason = "reject", "the agent made no change"

    def new_round(self, st: LoopState, *, round_: int, n: int, agent: str, slot: str) -> InProgress:
        """A parallel worker's new round on the current Bk, in ``in_flight`` (saved)."""
        ip = InProgress(round=round_, n=n, agent=agent, slot=slot, base_sha=st.bk_sha,
                        agent_state_before=copy.deepcopy(st.agent_state.get(slot, {})))
        st.in_flight.append(ip)
        self.save(st)
        return ip

    def finish(self, st: LoopState, ip: InProgress) -> None:
        """``ip`` is no longer in progress (recorded, or its agent had nothing left)."""
        if st.in_progress is ip:
            st.in_progress = None
        st.in_flight = [x for x in st.in_flight if x is not ip]

    def onto_bk(self, st: LoopState, ip: InProgress) -> None:
        """A candidate made on an older Bk (parallel agents; Bk advanced by a
        kept one meanwhile) moved onto the current Bk before it is judged: its
        commit cherry-picked there (its branch follows); one that no longer
        applies, or whose change Bk already has, is rejected with the reason."""
        if ip.stage != "verify" or ip.base_sha == st.bk_sha:
            return
        bk, name = st.bk_sha, f"onto-bk-{ip.n}"
        wt = self.ws.checkout(name, bk)
        try:
            git(wt, "cherry-pick", "--allow-empty", ip.sha)
            new_sha = git(wt, "rev-parse", "HEAD")
        except GitError as exc:
            git_ok(wt, "cherry-pick", "--abort")
            ip.decision, ip.stage = "reject", "record"
            ip.reason = (f"does not apply on the current Bk {bk[:12]} (kept while this candidate was made): "
                         f"{exc.stderr.strip()[-300:]}")
            return
        finally:
            self.ws.remove_worktree(name)
        if not git(self.repo, "diff", "--name-only", bk, new_sha).strip():
            ip.decision, ip.stage = "reject", "record"
            ip.reason = f"its change is already in the current Bk {bk[:12]}"
            return
        git(self.repo, "update-ref", f"refs/heads/{ip.branch}", new_sha)
        ip.sha, ip.base_sha = new_sha, bk
        ip.patch_id = self.ws.patch_id(bk, new_sha)
        self.save(st)

    def verify_stage(self, st: LoopState, ip: InProgress) -> None:
        shas = {"b0": st.b0_sha, "bk": ip.base_sha, "candidate": ip.sha}
        self.emit(Verifying, f"verifying #{ip.n} against Bk and B0", round=ip.round, candidate=ip.n, sha=ip.sha)
        verdict = self.verify(str(ip.n), shas, with_b0=ip.base_sha != st.b0_sha, calibration=st.calibration,
                              progress=self.progress(ip.round, ip.n))
        ip.verdict = verdict
        ip.stage = "record"
        self.save(st)

    def record_stage(self, st: LoopState, ip: InProgress, agent: Agent) -> None:
        outcome = AgentOutcome.model_validate(ip.outcome or {})
        pol = PolicyResult.model_validate(ip.policy or {})
        common = dict(
            id=f"{self.spec.task_id}/{ip.n}",
            task=self.spec.task_id,
            round=ip.round,
            candidate=ip.n,
            agent=ip.agent or agent.name,
            hypothesis=outcome.hypothesis,
            branch=ip.branch if ip.sha else "",
            sha=ip.sha,
            base_sha=ip.base_sha,
            b0_sha=st.b0_sha,
            files=pol.files,
            lines_added=pol.lines_added,
            lines_removed=pol.lines_removed,
            violations=[v.reason for v in pol.violations],
            left_out=ip.left_out,
            change=outcome.change,
            patch_id=ip.patch_id,
            usage=outcome.usage,
        )
        verdict: Verdict | None
        if ip.verdict is not None:
            verdict = ip.verdict
            record = LedgerRecord.from_verdict(verdict, **common)
        else:
            verdict = error_verdict("agent", ip.reason) if ip.decision == "error" else None
            record = LedgerRecord(decision=ip.decision, reason=ip.reason, **common)
        decision = record.decision
        status: CandidateStatus
        if decision == "accept":
            status = CandidateStatus.KEPT if st.keep == "advance" else CandidateStatus.OPEN
        elif decision == "review":
            status = CandidateStatus.OPEN
        else:
            status = CandidateStatus.ROLLED_BACK
        record.status = status
        self.ledger.append(record)

        if status == CandidateStatus.KEPT:
            st.bk_sha = ip.sha
            st.bk_history.append({"sha": ip.sha, "via": f"candidate {ip.n}", "at": _now()})
            git(self.repo, "update-ref", f"refs/heads/rsi/{self.spec.task_id}/best", ip.sha)
        st.straight_rejections = 0 if decision in ("accept", "review") else st.straight_rejections + 1
        st.candidates.append(
            LoopCandidate(
                n=ip.n,
                round=ip.round,
                agent=ip.agent or agent.name,
                branch=record.branch,
                sha=ip.sha,
                base_sha=ip.base_sha,
                hypothesis=record.hypothesis,
                decision=decision,
                reason=record.reason,
                status=status,
                gain=record.gain,
                gain_vs_b0=record.gain_vs_b0,
                ratio=record.ratio,
                ledger_id=record.id,
            )
        )
        if outcome.usage is not None:
            st.spent = st.spent.plus(outcome.usage)
        if ip.agent_state_after is not None:
            st.agent_state[ip.slot or ip.agent or agent.name] = ip.agent_state_after
        st.rounds_done = max(st.rounds_done, ip.round)
        st.next_n = max(st.next_n, ip.n + 1)
        self.finish(st, ip)
        self.save(st)
        self.ws.remove(f"cand-{ip.n}")
        gain = f" ({record.gain * 100:+.1f}%)" if record.gain is not None else ""
        self.emit(
            CandidateRecorded,
            f"#{ip.n} {decision}{gain}: {record.hypothesis} — {record.reason}",
            round=ip.round,
            candidate=ip.n,
            branch=record.branch,
            sha=ip.sha,
            status=status,
            verdict=verdict,
            record=record,
            bk=st.bk_sha,
        )


def with_calibration_pairs(spec: TaskSpec, pairs: int) -> TaskSpec:
    """``spec`` with ``[verifier] calibration_pairs = pairs`` (in the model and in
    the config text a verifier in its own process reads)."""
    v = spec.verify
    verify = v.model_copy(update={"verifier": v.verifier.model_copy(update={"calibration_pairs": pairs})})
    config = copy.deepcopy(spec.config)
    config.setdefault("verifier", {})["calibration_pairs"] = pairs
    return spec.model_copy(update={"verify": verify, "config": config})


_LANE = threading.Lock()


def _store(store: RunnerStore | None | Literal["default"]) -> RunnerStore | None:
    return RunnerStore.default() if isinstance(store, str) else store


@contextlib.contextmanager
def _process_lane(on_wait: Callable[[], None]):
    """This process's measuring lane, for a loop without a runner store."""
    if not _LANE.acquire(blocking=False):
        on_wait()
        _LANE.acquire()
    try:
        yield
    finally:
        _LANE.release()


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h ago"
    return f"{seconds / 86400:.1f} days ago"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _result(st: LoopState) -> TaskResult:
    kept = [c for c in st.candidates if c.status == CandidateStatus.KEPT and c.gain_vs_b0 is not None]
    gain = kept[-1].gain_vs_b0 if kept else None
    return TaskResult(
        task_id=st.task_id,
        status=st.status,
        reason=st.reason,
        b0_sha=st.b0_sha,
        bk_sha=st.bk_sha,
        rounds=st.rounds_done,
        candidates=st.candidates,
        calibration=st.calibration,
        gain_vs_b0=gain,
        spent=st.spent,
    )


def run_task(
    repo: Path,
    spec: TaskSpec,
    *,
    state_dir: Path,
    keep: Literal["advance", "propose"] | None = None,
    agent: Agent | str | None = None,
    rounds: int | None = None,
    should_stop: Callable[[], bool | str] = lambda: False,
    on_event: Callable[[LoopEvent], None] | None = None,
    verifier: VerifierBackend | str | None = None,
    base_ref: str | None = None,
    store: RunnerStore | None | Literal["default"] = "default",
    agents: int = 1,
) -> TaskResult:
    """Run the loop on ``repo`` until the budget, a stop, N straight
    rejections or an exhausted agent. Resumable: call it again with the same
    ``state_dir`` and it continues from the last saved stage.

    ``keep`` defaults to ``[agent] keep``; ``agent`` to ``[agent] kind``;
    ``rounds`` (the task's total budget) to ``[agent] rounds``; ``verifier``
    to ``$RSI_VERIFY_MODE`` or ``sandbox``; ``base_ref`` (B0) to the default
    branch; ``store`` (kept calibrations, the measuring lane) to the runner's
    (``harness.calcache.default_root``), None for neither; ``agents``: how many
    agents work at once (``harness.parallel``: one measuring lane, the ledger in
    candidate order)."""
    from harness.gitutil import default_branch

    repo = Path(repo).resolve()
    state_dir = Path(state_dir).resolve()
    backend = verifier if (verifier is not None and not isinstance(verifier, str)) else make_backend(verifier)
    agent_obj = agent if (agent is not None and not isinstance(agent, str)) else make_agent(spec, agent, repo=repo)
    rounds_total = rounds or spec.agent.rounds
    loop = _Loop(repo, spec, state_dir, backend, on_event, _store(store))

    st = load_state(state_dir)
    if st is not None and st.task_id != spec.task_id:
        raise ValueError(f"{state_dir} holds task '{st.task_id}', not '{spec.task_id}': use another --state-dir")
    if st is None:
        ref = base_ref or default_branch(repo)
        b0 = rev_parse(repo, ref)
        if b0 is None:
            raise ValueError(f"{repo}: cannot resolve '{ref}' for B0")
        st = LoopState(
            task_id=spec.task_id,
            repo=str(repo),
            agent=agent_obj.name,
            keep=keep or spec.agent.keep,
            b0_sha=b0,
            bk_sha=b0,
            bk_history=[{"sha": b0, "via": "b0", "at": _now()}],
        )
        loop.save(st)
    else:
        if keep:
            st.keep = keep
        if st.status == "refused":
            loop.emit(Refused, st.reason)
            return _result(st)
        if st.status in ("paused", "stopped", "exhausted", "finished"):
            st.straight_rejections = 0 if st.status == "paused" else st.straight_rejections
        st.status, st.reason = "running", ""
        loop.save(st)
        loop.emit(
            Resumed,
            f"resuming {spec.task_id}: {st.rounds_done} rounds done"
            + (f", round {st.in_progress.round} at stage {st.in_progress.stage}" if st.in_progress else ""),
            rounds_done=st.rounds_done,
        )

    st.budget = {"max_tokens": spec.agent.max_tokens, "max_cost_usd": spec.agent.max_cost_usd}
    if not loop.baseline(st, should_stop):
        return _result(st)

    if agents < 1:
        raise ValueError(f"agents must be 1 or more, not {agents}")
    if agents > 1 or st.in_flight:
        return _run_parallel(loop, st, agent_obj, rounds_total, agents, should_stop)
    limit = spec.agent.max_straight_rejections
    while True:
        if st.in_progress is None:
            if st.rounds_done >= rounds_total:
                st.status, st.reason = "finished", f"budget of {rounds_total} rounds used"
                break
            if (spent := budget_spent(spec.agent, st.spent)) is not None:
                st.status, st.reason = "finished", spent
                break
            if why := should_stop():
                st.status, st.reason = "stopped", why if isinstance(why, str) else "stopped on request"
                loop.save(st)
                loop.emit(Stopped, st.reason)
                return _result(st)
            if st.straight_rejections >= limit:
                st.status, st.reason = "paused", f"{st.straight_rejections} straight rejections (limit {limit})"
                loop.save(st)
                loop.emit(Paused, st.reason)
                return _result(st)
        if not loop.round(st, agent_obj, rounds_total):
            break
    loop.save(st)
    res = _result(st)
    loop.emit(
        Finished,
        f"{spec.task_id} {st.status}: {st.reason}; {len(res.kept)} kept, {len(res.open)} open",
        sha=st.bk_sha,
        status=st.status,
        gain_vs_b0=res.gain_vs_b0,
        rounds=st.rounds_done,
    )
    return res


def _run_parallel(loop: _Loop, st: LoopState, agent: Agent, rounds_total: int, agents: int,
                  should_stop: Callable[[], bool | str]) -> TaskResult:
    """``run_task``'s rounds with several agents at once (``harness.parallel``)."""
    if st.in_progress is not None:  # a round a one-agent run left: finished first, alone
        loop.round(st, agent, rounds_total)
    out = run_parallel(loop, st, agent, rounds_total, agents, should_stop)
    if out.errors:
        loop.save(st)
        raise out.errors[0]
    st.status, st.reason = out.status, out.reason  # type: ignore[assignment]
    loop.save(st)
    if out.kind:
        loop.emit(Stopped if out.kind == "stopped" else Paused, st.reason)
        return _result(st)
    res = _result(st)
    loop.emit(Finished, f"{loop.spec.task_id} {st.status}: {st.reason}; {len(res.kept)} kept, {len(res.open)} open",
              sha=st.bk_sha, status=st.status, gain_vs_b0=res.gain_vs_b0, rounds=st.rounds_done)
    return res


# --------------------------------------------------------------- rebaseline


class RebaselineResult(BaseModel):
    bk_sha: str
    calibration: Calibration | None = None
    candidates: list[ReverifyOutcome] = Field(default_factory=list)
    """Every open candidate's outcome, with its new verdict when judged again."""


def _require_state(state_dir: Path) -> LoopState:
    st = load_state(state_dir)
    if st is None:
        raise ValueError(f"{state_dir}: no task state; run the task first")
    return st


def rebaseline(
    repo: Path,
    spec: TaskSpec,
    ref: str,
    *,
    state_dir: Path,
    on_event: Callable[[LoopEvent], None] | None = None,
    verifier: VerifierBackend | str | None = None,
    store: RunnerStore | None | Literal["default"] = "default",
) -> RebaselineResult:
    """Measure ``ref`` (e.g. a merge commit) as the new Bk and re-verify every
    open candidate on top of it: each is cherry-picked onto the new Bk (its
    branch moves there); already contained -> ``merged``; conflicts ->
    ``conflict`` (reported, branch left as it was); else judged again."""
    repo = Path(repo).resolve()
    backend = verifier if (verifier is not None and not isinstance(verifier, str)) else make_backend(verifier)
    loop = _Loop(repo, spec, Path(state_dir), backend, on_event, _store(store))
    st = _require_state(loop.state_dir)
    new_bk = rev_parse(repo, ref)
    if new_bk is None:
        raise ValueError(f"{repo}: cannot resolve '{ref}'")
    old_bk = st.bk_sha
    st.bk_sha = new_bk
    if not st.bk_history or st.bk_history[-1]["sha"] != new_bk:
        st.bk_history.append({"sha": new_bk, "via": f"rebaseline {ref}", "at": _now()})
    loop.save(st)
    cal = None
    try:
        cal = loop.reuse_calibration(new_bk, "the new Bk") or loop.calibrate("bk", new_bk)
    except Exception as exc:  # noqa: BLE001 - reported; re-verification still runs with B0's calibration
        loop.emit(Progress, f"could not calibrate the new Bk: {exc}")
    loop.emit(
        Rebaselined,
        f"new Bk {new_bk[:12]} (was {old_bk[:12]})",
        sha=new_bk,
        old_bk=old_bk,
        calibration=cal,
    )
    result = RebaselineResult(bk_sha=new_bk, calibration=cal)
    for c in st.candidates:
        if c.status != CandidateStatus.OPEN:
            continue
        out = _rebase_and_verify(loop, st, c, new_bk)
        result.candidates.append(out)
        loop.save(st)
    return result


def _reverify_fields(st: LoopState, c: LoopCandidate, new_bk: str, sha: str) -> dict[str, Any]:
    """The ledger fields of one re-check of candidate ``c`` on ``new_bk``."""
    return {
        "id": f"{st.task_id}/{c.n}/reverify/{new_bk[:12]}",
        "event": "reverify",
        "task": st.task_id,
        "round": c.round,
        "candidate": c.n,
        "agent": c.agent or st.agent,
        "hypothesis": c.hypothesis,
        "branch": c.branch,
        "sha": sha,
        "base_sha": new_bk,
        "b0_sha": st.b0_sha,
    }


def _rebase_and_verify(loop: _Loop, st: LoopState, c: LoopCandidate, new_bk: str) -> ReverifyOutcome:
    repo = loop.repo
    out = ReverifyOutcome(n=c.n, branch=c.branch, old_sha=c.sha, outcome="reverified")
    if git_ok(repo, "merge-base", "--is-ancestor", c.sha, new_bk):
        c.status, out.outcome, out.reason = CandidateStatus.MERGED, "merged", "already in the new Bk"
        loop.emit(Reverified, f"#{c.n} is merged", candidate=c.n, branch=c.branch, outcome=out)
        return out
    name = f"rebase-{c.n}"
    wt = loop.ws.checkout(name, new_bk)
    try:
        git(wt, "cherry-pick", "--allow-empty", "-x", c.sha)
    except GitError as exc:
        git_ok(wt, "cherry-pick", "--abort")
        loop.ws.remove_worktree(name)
        c.status = CandidateStatus.CONFLICT
        out.outcome, out.reason = "conflict", f"does not apply on the new Bk {new_bk[:12]}: {exc.stderr.strip()[-300:]}"
        loop.ledger.append(
            LedgerRecord(
                **_reverify_fields(st, c, new_bk, c.sha),
                decision="error",
                reason="conflict: " + out.reason,
                status=CandidateStatus.CONFLICT,
            )
        )
        loop.emit(Reverified, f"#{c.n} conflicts with the new Bk", candidate=c.n, branch=c.branch, outcome=out)
        return out
    new_sha = git(wt, "rev-parse", "HEAD")
    if not git(repo, "diff", "--name-only", new_bk, new_sha).strip():
        loop.ws.remove_worktree(name)
        c.status, out.outcome, out.reason = CandidateStatus.MERGED, "merged", "its change is already in the new Bk"
        loop.emit(Reverified, f"#{c.n} is merged", candidate=c.n, branch=c.branch, outcome=out)
        return out
    git(repo, "update-ref", f"refs/heads/{c.branch}", new_sha)
    out.new_sha = new_sha
    loop.ws.remove_worktree(name)
    verdict = loop.verify(f"rebase-{c.n}", {"b0": st.b0_sha, "bk": new_bk, "candidate": new_sha}, with_b0=True,
                          calibration=st.calibration, progress=loop.progress(None, c.n))
    status = (CandidateStatus.OPEN if verdict.decision in ("accept", "review")
              else CandidateStatus.ROLLED_BACK)
    record = LedgerRecord.from_verdict(verdict, **_reverify_fields(st, c, new_bk, new_sha), status=status)
    loop.ledger.append(record)
    c.sha, c.base_sha, c.decision, c.reason, c.status = new_sha, new_bk, verdict.decision, verdict.reason, status
    c.gain, c.ratio = record.gain, record.ratio
    out.decision, out.reason, out.verdict = verdict.decision, verdict.reason, verdict
    loop.emit(
        Reverified,
        f"#{c.n} on the new Bk: {verdict.decision} — {verdict.reason}",
        candidate=c.n,
        branch=c.branch,
        sha=new_sha,
        outcome=out,
    )
    return out


def reverify(
    repo: Path,
    spec: TaskSpec,
    branch: str,
    *,
    state_dir: Path,
    verifier: VerifierBackend | str | None = None,
    on_event: Callable[[LoopEvent], None] | None = None,
    store: RunnerStore | None | Literal["default"] = "default",
) -> Verdict:
    """Judge the tip of ``branch`` again against the task's current Bk and B0."""
    repo = Path(repo).resolve()
    backend = verifier if (verifier is not None and not isinstance(verifier, str)) else make_backend(verifier)
    loop = _Loop(repo, spec, Path(state_dir), backend, on_event, _store(store))
    st = _require_state(loop.state_dir)
    sha = rev_parse(repo, f"refs/heads/{branch}") or rev_parse(repo, branch)
    if sha is None:
        return error_verdict("config", f"unknown branch '{branch}'")
    return loop.verify("reverify", {"b0": st.b0_sha, "bk": st.bk_sha, "candidate": sha},
                       with_b0=st.bk_sha != st.b0_sha, calibration=st.calibration, progress=loop.progress())
