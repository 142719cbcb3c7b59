"""Several agents at once, one measuring lane (issue 33).

``run_task(..., agents=N)`` runs N workers in threads of the loop's process.
Each worker claims a round (the next round and candidate number, on the
current Bk, with its own agent state ``name@k``), runs its agent in the
agent's own sandbox, takes the candidate back and checks its policy; the
candidate then waits for its turn on the one measuring lane::

    worker 1   claim #1 -> agent ------> [lane: onto Bk -> verify -> record #1] -> claim #4 ...
    worker 2   claim #2 -> agent --------------> wait ...... [lane: ... #2] -> claim #5 ...
    worker 3   claim #3 -> agent -> wait .............................. [lane: ... #3] ...

* **One measuring lane.** Candidates are verified and recorded one at a time,
  in candidate order (the lowest number not yet recorded goes first), while
  the runner's lane lock (``harness.calcache``) keeps any other verification
  on the runner off the machine: paired runs never share it with another
  verification's load. Agents (each in its own container) work meanwhile.
* **The ledger stays ordered**: records are appended in candidate order, and
  every round's TASK.md carries the digest of every record written when it
  starts, whichever worker wrote it.
* **Bk moves under a worker** (``keep = "advance"``): a candidate made on an
  older Bk is cherry-picked onto the current one before it is judged
  (``_Loop.onto_bk``); one that no longer applies is rejected, saying so.
* **Agents with a sequence**: an agent with ``for_worker(k, n)`` gives each
  worker its share (``replay``: patches k, k+n, ...); the tuner's
  one-knob-at-a-time search cannot be split and is refused.
* **State**: ``state.json``'s ``in_flight`` holds every round started and not
  recorded; a resumed run sends those past their agent to the lane first, in
  order; a round cut off at its agent is dropped and its worker starts anew
  from the same agent state, under a higher number (the ledger stays in
  candidate order; the dropped round's number is not used again).
* **Stopping**: budget, ``should_stop``, straight rejections and an exhausted
  agent are checked before each claim; rounds already claimed finish.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.agents import Agent
from harness.agents.usage import budget_spent
from harness.events import RoundStarted
from harness.ledger import Usage
from harness.spec import TaskSpec


class Round(Protocol):
    """What this module reads of a round in flight (``harness.loop.InProgress``)."""

    n: int
    round: int
    stage: str
    slot: str
    base_sha: str


class State(Protocol):
    """What this module reads of the task's state (``harness.loop.LoopState``)."""

    status: Any
    reason: str
    bk_sha: str
    rounds_done: int
    next_n: int
    straight_rejections: int
    spent: Usage

    @property
    def in_flight(self) -> list[Any]: ...


class Loop(Protocol):
    """The loop's calls this module makes (``harness.loop._Loop``)."""

    spec: TaskSpec
    mutex: Any
    parallel: bool

    def emit(self, event: type, message: str = "", **kw: Any) -> None: ...
    def save(self, st: Any) -> None: ...
    def new_round(self, st: Any, *, round_: int, n: int, agent: str, slot: str) -> Any: ...
    def agent_stage(self, st: Any, ip: Any, agent: Agent) -> bool: ...
    def onto_bk(self, st: Any, ip: Any) -> None: ...
    def verify_stage(self, st: Any, ip: Any) -> None: ...
    def record_stage(self, st: Any, ip: Any, agent: Agent) -> None: ...
    def finish(self, st: Any, ip: Any) -> None: ...


def slot_name(agent: Agent, k: int) -> str:
    """Worker ``k``'s key in ``agent_state``: the agent's own name for the first."""
    return agent.name if k == 0 else f"{agent.name}@{k + 1}"


def worker_agents(agent: Agent, n: int) -> list[Agent]:
    """Each worker's agent: its share when the agent can split its sequence
    (``for_worker``), else the same (stateless) agent; the tuner is refused."""
    if n > 1 and agent.name == "tuner":
        raise ValueError("the tuner searches one knob at a time and cannot be split among agents: "
                         "run it with --agents 1")
    split = getattr(agent, "for_worker", None)
    return [split(k, n) if split is not None else agent for k in range(n)]


@dataclass
class Outcome:
    """Why the parallel rounds ended: ``status`` and ``reason`` for the state,
    ``kind`` the loop event to send (``stopped``, ``paused``), if any."""

    status: str = ""
    reason: str = ""
    kind: str = ""
    errors: list[BaseException] = field(default_factory=list)


def run_parallel(loop: Loop, st: State, agent: Agent, rounds_total: int, workers: int,
                 should_stop: Callable[[], bool | str]) -> Outcome:
    """The rounds of ``st`` with ``workers`` agents at once (see the module)."""
    agents = worker_agents(agent, workers)
    slots = [slot_name(agent, k) for k in range(workers)]
    out = Outcome()
    cond = threading.Condition(loop.mutex)
    exhausted = [False] * workers
    limit = loop.spec.agent.max_straight_rejections

    def lane_stage(ip: Round, who: Agent) -> None:
        loop.onto_bk(st, ip)
        if ip.stage == "verify":
            loop.verify_stage(st, ip)
        if ip.stage == "record":
            loop.record_stage(st, ip, who)

    def claim(k: int) -> Round | None:
        if out.status or out.errors:
            return None
        nxt = max([st.rounds_done, *(x.round for x in st.in_flight)]) + 1
        if nxt > rounds_total:
            return None
        if (spent := budget_spent(loop.spec.agent, st.spent)) is not None:
            out.status, out.reason = "finished", spent
            return None
        if why := should_stop():
            out.status, out.kind = "stopped", "stopped"
            out.reason = why if isinstance(why, str) else "stopped on request"
            return None
        if st.straight_rejections >= limit:
            out.status, out.kind = "paused", "paused"
            out.reason = f"{st.straight_rejections} straight rejections (limit {limit})"
            return None
        ip = loop.new_round(st, round_=nxt, n=max([st.next_n, *(x.n + 1 for x in st.in_flight)]),
                            agent=agent.name, slot=slots[k])
        return ip

    def my_turn(ip: Round) -> bool:
        return ip.n == min(x.n for x in st.in_flight)

    def worker(k: int) -> None:
        with cond:
            try:
                while (ip := claim(k)) is not None:
                    loop.emit(RoundStarted, f"round {ip.round}/{rounds_total}: {agent.name} (agent {k + 1} of "
                              f"{workers}) on Bk {ip.base_sha[:12]}", round=ip.round, candidate=ip.n,
                              stage=ip.stage, agent=agent.name, bk=ip.base_sha)
                    if ip.stage == "agent" and not loop.agent_stage(st, ip, agents[k]):
                        exhausted[k] = True
                        cond.notify_all()
                        return
                    cond.wait_for(lambda ip=ip: my_turn(ip) or bool(out.errors))  # type: ignore[misc]
                    if out.errors:
                        return
                    lane_stage(ip, agents[k])
                    cond.notify_all()
            except BaseException as exc:  # a bug or the machine: every worker stops, the caller raises
                out.errors.append(exc)
                cond.notify_all()

    loop.parallel = True
    try:
        with cond:  # resumed: rounds past their agent go through the lane first, in order
            for ip in sorted([x for x in st.in_flight if x.stage != "agent"], key=lambda x: x.n):
                who = agents[slots.index(ip.slot)] if ip.slot in slots else agent
                lane_stage(ip, who)
            for ip in [x for x in st.in_flight if x.stage == "agent"]:
                loop.finish(st, ip)  # cut off at its agent: redone as a new round (a higher number)
            loop.save(st)
        threads = [threading.Thread(target=worker, args=(k,), name=f"rsi-agent-{k + 1}", daemon=True)
                   for k in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        loop.parallel = False
    if not out.status and not out.errors:
        if all(exhausted):
            out.status = "exhausted"
            out.reason = st.reason if st.status == "exhausted" else f"{agent.name} has nothing left to try"
        else:
            out.status, out.reason = "finished", f"budget of {rounds_total} rounds used"
    return out
