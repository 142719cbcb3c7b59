"""The time the harness adds to a round, beyond the agent's and the benchmark's own.

Measured on a tiny synthetic target repo (tests/harness/target.py), median of
N rounds, with the real pieces of the trust boundary: the agent's tree (a
plain export of Bk handed to the sandbox uid), TASK.md and the ledger digest,
taking the candidate back (export of the agent's tree as regular files, a
private index, commit, committed diff), the edit policy (unidiff), patch-id,
the ledger append (git plumbing), atomic state writes, the three fresh
exports a verification runs on (B0, Bk, candidate) and their removal, the
verifier's host process start, and the agent's container (start + stop,
running ``true``). The agent (``tuner``) and the verifier's work are replaced
by no-ops so that only the harness is timed.

Separately: what one benchmark run's own container costs (the verifier's
``ContainerIsolation``: create, start, exec ``true``, kill, remove), and what
that adds to a verification of N runs.

    .venv/bin/python benchmarks/harness_overhead.py [--rounds 5] [--no-docker] [--runs 24]

Target: the harness's own steps under 5% of a 60-second round (3 s).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
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
from harness.verification import isolation_spec
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
        with t.time("agent tree: plain export of Bk + chown"):
            wt = ws.agent_tree(f"c{i}", "main")
        with t.time("TASK.md + ledger digest"):
            recs = ledger.records()
            write_task_md(spec, recs, round=i + 1, bk_sha="0" * 40)
        (wt / "app" / "settings.toml").write_text((wt / "app" / "settings.toml").read_text().replace("25", "18"))
        with t.time("take: export agent tree + index + commit"):
            dest, _ = ws.export_candidate(wt, f"c{i}.export")
            taken = ws.commit_candidate(dest, "main", f"rsi/bench/{i}", "hypothesis")
            ws.remove(f"c{i}.export")
            ws.remove(f"c{i}")
        with t.time("edit policy on the committed diff + patch-id"):
            check_diff(taken.diff, spec.policy, extra_protected=spec.protected_paths())
            ws.patch_id("main", taken.sha)
        with t.time("ledger append (git plumbing)"):
            ledger.append(LedgerRecord(id=f"bench/{i}", task="bench", round=i, candidate=i, agent="x",
                                       decision="reject", reason="r"))
        with t.time("state writes (3 per round, atomic)"):
            st = LoopState(task_id="bench", repo=str(repo))
            for _ in range(3):
                save_state(work / "state", st)
        with t.time("verification: 3 fresh exports + removal"):
            with ws.exports(f"v{i}", {"b0": "main", "bk": "main", "candidate": taken.sha}):
                pass
        with t.time("verifier host process start (python -m verifier)"):
            subprocess.run([sys.executable, "-I", "-m", "verifier", "--help"], capture_output=True, check=True)
        if docker:
            mounts = [sandbox.Mount(source=str(work), target="/work/repo", read_only=False)]
            res = sandbox.run(sandbox.SandboxJob(command=["true"], mounts=mounts), profile)
            if not res.ok:
                raise SystemExit(f"docker failed: {res.error or res.output}")
            t.add("container: agent start + stop", res.duration_s)
    return t


def per_run_container(spec, work: Path, n: int) -> list[float]:
    """Seconds one benchmark run's own container adds (ContainerIsolation,
    running ``true``: create, start, exec, kill, remove)."""
    from verifier.isolation import ContainerIsolation, IsolationSpec, Job, run_job

    iso = ContainerIsolation(IsolationSpec.model_validate(isolation_spec(spec)))
    checkout = work / "checkout"
    checkout.mkdir(exist_ok=True)
    out = []
    try:
        for i in range(n):
            run_dir = work / f"run-{i}"
            run_dir.mkdir()
            iso.prepare_dir(run_dir)
            t0 = time.perf_counter()
            res = run_job(iso, Job(command="true", checkout=checkout, run_dir=run_dir, timeout_s=60))
            out.append(time.perf_counter() - t0 - (res.wall_s or 0.0))
            if res.error or res.returncode != 0:
                raise SystemExit(f"per-run container failed: {res.error or res.stderr_tail}")
    finally:
        iso.close()
    return out


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
    ap.add_argument("--runs", type=int, default=24, help="benchmark runs in one verification (pairs x 2 + warm-ups)")
    args = ap.parse_args()
    per_run: list[float] = []
    with tempfile.TemporaryDirectory(prefix="rsi-overhead-") as tmp:
        work = Path(tmp)
        repo = make_target(work / "a", python=sys.executable)
        t = components(repo, work, args.rounds, docker=not args.no_docker)
        if not args.no_docker:
            per_run = per_run_container(load_task(repo, None, "bench"), work, args.rounds)
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
    if per_run:
        r = statistics.median(per_run)
        print(f"\nper benchmark run, its own container (create+start+exec+kill+remove, median of {len(per_run)}): "
              f"{r * 1000:.0f} ms; x {args.runs} runs = {r * args.runs:.1f} s per verification "
              f"({r * args.runs / ROUND_S * 100:.1f}% of a {ROUND_S:.0f} s round; not timed: the benchmark's own start)")
    verdict = "PASS" if total < 0.05 * ROUND_S else "FAIL"
    print(f"\ntarget: harness steps < 5% of a {ROUND_S:.0f} s round ({0.05 * ROUND_S:.1f} s): {verdict}")
    if per_run:
        both = total + statistics.median(per_run) * args.runs
        verdict = "PASS" if both < 0.05 * ROUND_S else "FAIL"
        print(f"with {args.runs} per-run containers: {both:.1f} s = {both / ROUND_S * 100:.1f}% of a round: {verdict}; "
              f"under 5% only with <= {max(0, int((0.05 * ROUND_S - total) / statistics.median(per_run)))} runs "
              f"per {ROUND_S:.0f} s round")


if __name__ == "__main__":
    main()
