"""Candidates per hour with 1, 2 and 4 agents at once (issue 33, harness.parallel).

On the demo's target (examples/tiny-tts, its protected client and evaluator,
the hidden request texts), the loop runs ``--rounds`` rounds with N agents
working at once and one measuring lane, ``keep = "propose"`` (every candidate
is judged against B0, so each one costs a whole verification). Two agents:

* ``replay``: the demo's patches, split among the workers (an agent that takes
  no time: the lane alone bounds the rate);
* ``scripted``: mini-swe-agent in its sandbox, talking through the egress proxy
  to the scripted model server (tests/fakemodel), one script per worker:
  read TASK.md, think (``sleep --think-s``, a model's latency), edit
  tiny_tts/pipeline.py, finish. Needs Docker and the agents image.

B0 is calibrated once, in a runner store shared by all the runs
(harness.calcache): the table says how many runs reused it. The verifier's
settings are cut for a short benchmark (``max_pairs`` 6, 8 requests a run, no
deployment matrix): the rate, not the verdicts, is measured here.

    .venv/bin/python benchmarks/parallel_rounds.py [--agents 1,2,4] [--kinds replay,scripted]
        [--rounds 4] [--think-s 20] [--verify inprocess|sandbox]

Candidates per hour = candidates judged / (wall time from the first round's
start to the last record) x 3600.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.agents import ReplayAgent, make_agent  # noqa: E402
from harness.agents.base import AgentContext, AgentOutcome  # noqa: E402
from harness.calcache import RunnerStore  # noqa: E402
from harness.demo import DEFAULT_PATCHES, PATCHES, _python_on_path, prepare_target  # noqa: E402
from harness.gitutil import git  # noqa: E402
from harness.loop import run_task  # noqa: E402
from harness.spec import TaskSpec, load_task  # noqa: E402
from harness.tomlout import dump_toml  # noqa: E402

API_KEY = "sk-rsi-bench-" + secrets.token_hex(8)
EDIT = ("sed -i 's/self._events.get_nowait()/self._events.get(timeout=0.1)/' tiny_tts/pipeline.py && "
        "echo 'stats worker: block on the queue instead of spinning' > \"$RSI_HYPOTHESIS_FILE\"")


def short_config(text: str, kind: str, host: str = "", port: int = 0) -> str:
    data = tomllib.loads(text)
    bench = data["benchmarks"]["tts"]
    bench.pop("matrix", None)
    bench["settings"] = {**bench.get("settings", {}), "requests": 8}
    data["verifier"] = {**data.get("verifier", {}), "warmup": 1, "initial_pairs": 6, "step": 2,
                        "max_pairs": 8, "calibration_pairs": 6, "feasibility_power": 0.5}
    data["objective"]["min_gain"] = 0.3  # feasible at 8 pairs on a busy machine: the rate is measured
    agent = {**data.get("agent", {}), "max_straight_rejections": 100, "round_timeout_s": 300}
    if kind == "scripted":
        agent.update({"kind": "mini-swe-agent", "model": "openai/mini-w0"})
        data["runner"] = {"profile": "agent", "profiles": {"agent": {
            "cpus": 1.0, "memory": "2g", "allowed_hosts": [host],
            "env": {"OPENAI_API_BASE": f"http://{host}:{port}/v1"}}}}
    data["agent"] = agent
    return dump_toml(data)


class Scripted:
    """mini-swe-agent, a model script of its own per worker (the scripted
    server keeps one cursor per model name)."""

    name = "mini-swe-agent"

    def __init__(self, spec: TaskSpec, network: str):
        self.spec, self.network = spec, network

    def for_worker(self, k: int, n: int):
        spec = self.spec.model_copy(update={"agent": self.spec.agent.model_copy(
            update={"model": f"openai/mini-n{n}-w{k}"})})
        agent = make_agent(spec)
        agent.environ = {"OPENAI_API_KEY": API_KEY}  # type: ignore[attr-defined]
        agent.upstream_networks = (self.network,)  # type: ignore[attr-defined]
        return agent

    def run(self, ctx: AgentContext) -> AgentOutcome:  # never called: every worker has its own
        return self.for_worker(0, 1).run(ctx)


def scripts(counts: list[int], rounds: int, think_s: float) -> dict[str, list[dict]]:
    """One script per configuration and worker (the server's cursor is per name)."""
    from tests.agents.scripts import FINISH, READ_TASK

    steps = [READ_TASK, {"bash": f"sleep {think_s:g}; {EDIT}"}, FINISH]
    return {f"mini-n{n}-w{k}": steps * rounds for n in counts for k in range(n)}


def one(repo: Path, tmp: Path, kind: str, n: int, rounds: int, store: RunnerStore, verify: str,
        network: str = "") -> dict:
    tid = f"{kind}-{n}"
    spec = load_task(repo, None, tid)
    agent = (ReplayAgent([PATCHES / p for p in DEFAULT_PATCHES][:rounds]) if kind == "replay"
             else Scripted(spec, network))
    times: dict[str, float] = {}
    reused: list[int] = []
    verified: list[int] = []

    def on_event(ev) -> None:
        now = time.monotonic()
        if ev.kind == "round_started":
            times.setdefault("first", now)
        if ev.kind == "candidate":
            times["last"] = now
            print(f"    {tid}: {ev.message[:110]}", flush=True)
        if ev.kind == "progress" and "reusing" in ev.message:
            reused.append(1)
        if ev.kind == "verifying":
            verified.append(1)

    t0 = time.monotonic()
    res = run_task(repo, spec, state_dir=tmp / f"state-{tid}", keep="propose", agent=agent, rounds=rounds,
                   verifier=verify, on_event=on_event, store=store, agents=n)
    wall = times.get("last", time.monotonic()) - times.get("first", t0)
    judged = verified  # measured by the verifier (not a no-change or policy reject)
    return {"kind": kind, "agents": n, "candidates": len(res.candidates), "judged": len(judged),
            "wall": wall, "per_hour": 3600 * len(judged) / wall if wall > 0 else 0.0,
            "reused": bool(reused), "status": res.status, "total": time.monotonic() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", default="1,2,4")
    ap.add_argument("--kinds", default="replay,scripted")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--think-s", type=float, default=20.0)
    ap.add_argument("--verify", default="inprocess")
    args = ap.parse_args()
    counts = [int(x) for x in args.agents.split(",")]
    kinds = args.kinds.split(",")
    _python_on_path()
    os.environ.setdefault("TTS_EVAL_SEED", str(secrets.randbelow(2**31)))
    rows = []
    with tempfile.TemporaryDirectory(prefix="rsi-parallel-") as tmp_s:
        tmp = Path(tmp_s)
        store = RunnerStore(tmp / "runner")
        for kind in kinds:
            repo = tmp / f"target-{kind}"
            prepare_target(repo)
            fm = None
            host = port = None
            if kind == "scripted":
                from tests.fakemodel.fixture import HOST, PORT, FakeModel

                fm = FakeModel(scripts(counts, args.rounds, args.think_s), api_key=API_KEY).__enter__()
                host, port = HOST, PORT
            try:
                cfg = repo / ".rsi" / "config.toml"
                cfg.write_text(short_config(cfg.read_text(), kind, host or "", port or 0))
                git(repo, "commit", "-qam", "short benchmark settings",
                    env={"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
                         "GIT_COMMITTER_EMAIL": "b@b"})
                for n in counts:
                    print(f"{kind}, {n} agent(s) ...", flush=True)
                    rows.append(one(repo, tmp, kind, n, args.rounds, store, args.verify,
                                    fm.network_name if fm else ""))
                    r = rows[-1]
                    print(f"  -> {kind}, {n} agent(s): {r['judged']} judged in {r['wall']:.0f} s: "
                          f"{r['per_hour']:.0f} candidates/hour ({r['status']})", flush=True)
            finally:
                if fm is not None:
                    fm.__exit__(None, None, None)
        hits = len(store.hits())
    print()
    print(f"candidates per hour on the demo target, --verify {args.verify}, {args.rounds} rounds, "
          f"think {args.think_s:g} s (scripted), load {os.getloadavg()[0]:.1f} at the end")
    print("| agent | agents | candidates (judged) | wall, first round to last record | candidates/hour | "
          "B0 calibration | status |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['kind']} | {r['agents']} | {r['candidates']} ({r['judged']}) | {r['wall']:.0f} s | "
              f"{r['per_hour']:.0f} | {'reused' if r['reused'] else 'measured'} | {r['status']} |")
    print(f"calibration reuse hits in the runner store: {hits}")


if __name__ == "__main__":
    main()
