"""The time the harness adds to a round, beyond the agent's and the benchmark's own.

Measured on a tiny synthetic target repo (tests/harness/target.py), median of
N rounds, with the real pieces: git worktrees, TASK.md and the ledger digest,
the edit policy (unidiff), the candidate commit and patch-id, the ledger
append (git plumbing), atomic state writes, and the two container starts of a
round (the agent's and the verifier's, each a fresh container with the same
mounts and limits, running ``true``: their own start/stop cost). The agent
(``tuner``) and the verifier are replaced by no-ops so that only the harness
is timed.

    .venv/bin/python benchmarks/harness_overhead.py [--rounds 5] [--no-docker]

Target: under 5% of a 60-second round (3 s).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness import sandbox
from harness.agents import TunerAgent
from harness.agents.taskmd import write_task_md
from harness.ledger import Ledger, LedgerRecord
from harness.loop import LoopState, run_task, save_state
from harness.policy import check_diff
from harness.spec import load_task
from harness.workspace import Workspace
from tests.harness.fakes import FakeVerifier
from tests.harness.target import make_target

ROUND_S = 60.0


class Timed:
    def __init__(self):
        self.samples: dict[str, list[float]] = {}

    def add(self, name: str, seconds: float) -> None:
        self.samples.setdefault(name, []).append(seconds)

    def time(self, name: str):
        outer = self

        class _T:
            def __enter__(self):
                self.t0 = time.perf_counter()

            def __exit__(self, *exc):
                outer.add(name, time.perf_counter() - self.t0)

        return _T()


class NoopVerifier(FakeVerifier):
    """The fake verifier without its work: returns at once."""


def components(repo: Path, work: Path, rounds: int, docker: bool) -> Timed:
    t = Timed()
    spec = load_task(repo, None, "bench")
    ws = Workspace(repo, work / "wts")
    ledger = Ledger(repo)
    profile = spec.runner.active
    for i in range(rounds):
        with t.time("worktree: fresh checkout of Bk"):
            wt = ws.checkout(f"c{i}", "main", writable_by_others=True)
        with t.time("TASK.md + ledger digest"):
            recs = ledger.records()
            write_task_md(spec, recs, round=i + 1, bk_sha="0" * 40)
        (wt / "app" / "settings.toml").write_text((wt / "app" / "settings.toml").read_text().replace("25", "18"))
        with t.time("diff + edit policy (unidiff)"):
            diff = ws.collect(wt)
            check_diff(diff, spec.policy, extra_protected=spec.protected_paths())
        with t.time("commit + patch-id"):
            sha = ws.commit(wt, f"rsi/bench/{i}", "hypothesis")
            ws.patch_id("main", sha)
        with t.time("ledger append (git plumbing)"):
            ledger.append(LedgerRecord(id=f"bench/{i}", task="bench", round=i, candidate=i, agent="x",
                                       decision="reject", reason="r"))
        with t.time("state writes (3 per round, atomic)"):
            st = LoopState(task_id="bench", repo=str(repo))
            for _ in range(3):
                save_state(work / "state", st)
        with t.time("worktree: remove"):
            ws.remove(f"c{i}")
        if docker:
            mounts = [*sandbox.python_mounts(), sandbox.Mount(source=str(wt.parent), target="/work/repo", read_only=False)]
            for name in ("container: agent start + stop", "container: verifier start + stop"):
                res = sandbox.run(sandbox.SandboxJob(command=["true"], mounts=mounts), profile)
                if not res.ok:
                    raise SystemExit(f"docker failed: {res.error or res.output}")
                t.add(name, res.duration_s)
    return t


def whole_rounds(repo: Path, work: Path, rounds: int) -> list[float]:
    """Wall time per round of the real loop with a no-op agent cost and verifier."""
    spec = load_task(repo, None, "whole").model_copy()
    times: list[float] = []
    last = [time.perf_counter()]

    def on_event(ev):
        if ev.kind == "candidate":
            now = time.perf_counter()
            times.append(now - last[0])
            last[0] = now
        elif ev.kind == "baseline":
            last[0] = time.perf_counter()

    run_task(repo, spec, state_dir=work / "whole", agent=TunerAgent(), rounds=rounds, verifier=NoopVerifier(),
             on_event=on_event)
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-docker", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rsi-overhead-") as tmp:
        work = Path(tmp)
        repo = make_target(work / "a", python=sys.executable)
        t = components(repo, work, args.rounds, docker=not args.no_docker)
        repo2 = make_target(work / "b", python=sys.executable)
        whole = whole_rounds(repo2, work, 3)

    rows = [(name, statistics.median(v)) for name, v in t.samples.items()]
    total = sum(v for _, v in rows)
    w = max(len(n) for n, _ in rows) + 2
    print(f"harness overhead per round (median of {args.rounds}; share of a {ROUND_S:.0f} s round)\n")
    print(f"{'component':<{w}}{'ms':>9}{'% of 60 s':>11}")
    print("-" * (w + 20))
    for name, v in rows:
        print(f"{name:<{w}}{v * 1000:>9.1f}{v / ROUND_S * 100:>10.2f}%")
    print("-" * (w + 20))
    print(f"{'total':<{w}}{total * 1000:>9.1f}{total / ROUND_S * 100:>10.2f}%")
    if whole:
        m = statistics.median(whole)
        print(f"\nwhole loop round, no-op agent and verifier, no containers (median of {len(whole)}): "
              f"{m * 1000:.1f} ms ({m / ROUND_S * 100:.2f}%)")
    verdict = "PASS" if total < 0.05 * ROUND_S else "FAIL"
    print(f"\ntarget < 5% of a {ROUND_S:.0f} s round ({0.05 * ROUND_S:.1f} s): {verdict}")


if __name__ == "__main__":
    main()
