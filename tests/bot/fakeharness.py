"""A scripted stand-in for the harness loop, for handler tests (no verifier runs).

It parses specs with the real ``harness.spec`` and makes real commits on
``rsi/<task>/<n>`` branches in the bot's clone, so pushes, PRs and merges in
the fake GitHub are real git; verdicts are made up from a script.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from bot.harness_port import RealHarness
from harness import spec as hspec
from harness.events import (
    BaselineMeasured,
    CandidateRecorded,
    Finished,
    Progress,
    Rebaselined,
    Reverified,
    ReverifyOutcome,
    RoundStarted,
    Stopped,
)
from harness.gitutil import GitError, git, git_ok, rev_parse
from harness.ledger import Ledger, LedgerRecord
from harness.loop import RebaselineResult, TaskResult
from verifier.verdict import Interval, MetricComparison, ObjectiveResult, Verdict

CONFIG = """\
[benchmarks.tts]
command = "python bench.py"
timeout_s = 60

[benchmarks.tts.metrics]
throughput = "higher"

[objective]
benchmark = "tts"
metric = "throughput"
min_gain = 0.02

[policy]
editable = ["src/**"]

[agent]
kind = "replay"
rounds = 2
patches = ["p1.patch", "p2.patch"]
"""


def target_tree(root: Path, config: str = CONFIG) -> Path:
    (root / ".rsi").mkdir(parents=True, exist_ok=True)
    (root / ".rsi" / "config.toml").write_text(config)
    (root / "src").mkdir(exist_ok=True)
    (root / "src" / "speed.txt").write_text("speed = 1\n")
    (root / "bench.py").write_text("print('bench')\n")
    return root


def make_verdict(decision: str, shas: dict[str, str], gain: float = 0.1) -> Verdict:
    return Verdict(
        decision=decision, reason=f"throughput {gain * 100:+.1f}%", benchmark="tts",
        objective=ObjectiveResult(benchmark="tts", metric="throughput", direction="higher",
                                  ratio=1 + gain, gain=gain, ratio_ci=Interval(low=1 + gain / 2,
                                                                               high=1 + gain * 2),
                                  min_gain=0.02),
        metrics=(MetricComparison(name="throughput", direction="higher", b0=10.0, bk=10.0,
                                  candidate=10.0 * (1 + gain), ratio_vs_bk=1 + gain),),
        pairs=10, runs=20, shas=shas)


class FakeHarness(RealHarness):
    """The loop scripted; the spec, the ledger and git are the real thing."""

    def __init__(self, decisions: list[str] | None = None, *, same_file: bool = False):
        self.decisions = decisions or ["accept", "accept"]
        self.same_file = same_file  # candidates edit the same line: they conflict
        self.calls: list[tuple[str, Any]] = []
        self.reverify_decision = "accept"
        self.gate: threading.Event | None = None  # set to block inside each round
        self.hypothesis: str | None = None  # the agent's words for every candidate
        self.reason: str | None = None  # the verifier reason on every verdict
        self.proposals: list[str | None] = []  # every proposal body a spec was built from

    # -- spec: the real thing ------------------------------------------------
    def build_task(self, config_text, proposal_body, task_id, *, title="", repo_files=None):
        self.proposals.append(proposal_body)
        return hspec.build_task(config_text, proposal_body, task_id, title=title,
                                repo_files=repo_files)

    def load_config(self, repo, ref=None):
        return hspec.load_repo_config(repo, ref)

    def repo_files(self, repo, ref=None):
        return hspec.repo_files(repo, ref)

    # -- loop ----------------------------------------------------------------
    def _state(self, d: Path) -> dict:
        p = Path(d) / "state.json"
        return json.loads(p.read_text()) if p.exists() else {}

    def _save(self, d: Path, st: dict) -> None:
        Path(d).mkdir(parents=True, exist_ok=True)
        (Path(d) / "state.json").write_text(json.dumps(st))

    def run_task(self, repo, spec, *, state_dir, keep, rounds, should_stop, on_event):
        self.calls.append(("run_task", spec.task_id))
        st = self._state(state_dir)
        if not st:
            b0 = rev_parse(repo, "HEAD")
            st = {"b0": b0, "bk": b0, "rounds_done": 0, "cands": {}}
            self._save(state_dir, st)
            on_event(BaselineMeasured(task_id=spec.task_id, sha=b0))
        total = rounds or spec.agent.rounds
        while st["rounds_done"] < total:
            if should_stop():
                on_event(Stopped(task_id=spec.task_id))
                return self._result(spec, st, "stopped", "stopped on request")
            r = n = st["rounds_done"] + 1
            on_event(RoundStarted(task_id=spec.task_id, round=r, candidate=n))
            if self.gate is not None:
                self.gate.wait(60)
            for pairs in (2, 4):  # the verifier's progress, as the loop forwards it
                on_event(Progress(task_id=spec.task_id, round=r, candidate=n, message="measure",
                                  phase="measure", pairs=pairs, run=2 * pairs, total=8))
            branch = f"rsi/{spec.task_id}/{n}"
            sha = self._commit(Path(repo), st["bk"], branch, n, Path(state_dir))
            decision = self.decisions[(n - 1) % len(self.decisions)]
            verdict = make_verdict(decision, {"b0": st["b0"], "bk": st["bk"], "candidate": sha},
                                   gain=0.1 * n if decision == "accept" else -0.05)
            if self.reason is not None:
                verdict = verdict.model_copy(update={"reason": self.reason})
            status = "open" if decision in ("accept", "review") else "rolled_back"
            record = LedgerRecord.from_verdict(
                verdict, id=f"{spec.task_id}/{n}", task=spec.task_id, round=r, candidate=n,
                agent="fake", hypothesis=self.hypothesis or f"change {n}", branch=branch, sha=sha,
                base_sha=st["bk"], b0_sha=st["b0"], status=status)
            Ledger(repo).append(record)
            st["cands"][str(n)] = {"branch": branch, "sha": sha, "status": status}
            st["rounds_done"] = r
            self._save(state_dir, st)
            on_event(CandidateRecorded(task_id=spec.task_id, round=r, candidate=n, branch=branch,
                                       sha=sha, status=status, verdict=verdict, record=record,
                                       bk=st["bk"]))
        on_event(Finished(task_id=spec.task_id, status="finished", sha=st["bk"], rounds=total))
        return self._result(spec, st, "finished", f"budget of {total} rounds used")

    def _result(self, spec, st: dict, status: str, reason: str) -> TaskResult:
        return TaskResult(task_id=spec.task_id, status=status, reason=reason, b0_sha=st["b0"],
                          bk_sha=st["bk"], rounds=st["rounds_done"], candidates=[])

    def _commit(self, repo: Path, base: str, branch: str, n: int, state_dir: Path) -> str:
        wt = state_dir / f"wt-{n}"
        git(repo, "worktree", "add", "--force", "--detach", str(wt), base)
        try:
            f = wt / "src" / ("speed.txt" if self.same_file else f"opt{n}.txt")
            f.write_text(f"speed = {n + 1}\n")
            git(wt, "add", "-A")
            git(wt, "commit", "-q", "-m", f"change {n}")
            sha = git(wt, "rev-parse", "HEAD")
            git(repo, "branch", "-f", branch, sha)
            return sha
        finally:
            git(repo, "worktree", "remove", "--force", str(wt), check=False)

    def rebaseline(self, repo, spec, ref, *, state_dir, on_event=None):
        self.calls.append(("rebaseline", ref))
        st = self._state(state_dir)
        new_bk = rev_parse(repo, ref)
        on_event = on_event or (lambda ev: None)
        on_event(Rebaselined(task_id=spec.task_id, sha=new_bk, old_bk=st["bk"]))
        st["bk"] = new_bk
        result = RebaselineResult(bk_sha=new_bk)

        def outcome(out: ReverifyOutcome, sha: str = "") -> None:
            result.candidates.append(out)
            on_event(Reverified(task_id=spec.task_id, candidate=out.n, branch=out.branch,
                                sha=sha, outcome=out))

        for n, c in sorted(st["cands"].items()):
            if c["status"] != "open":
                continue
            n = int(n)
            if git_ok(repo, "merge-base", "--is-ancestor", c["sha"], new_bk):
                c["status"] = "merged"
                outcome(ReverifyOutcome(n=n, branch=c["branch"], old_sha=c["sha"],
                                        outcome="merged"))
                continue
            wt = Path(state_dir) / f"rb-{n}"
            git(repo, "worktree", "add", "--force", "--detach", str(wt), new_bk)
            try:
                try:
                    git(wt, "cherry-pick", c["sha"])
                except GitError as e:
                    git(wt, "cherry-pick", "--abort", check=False)
                    c["status"] = "conflict"
                    # as the real harness: the conflict is in the ledger before it returns
                    Ledger(repo).append(LedgerRecord(
                        id=f"{spec.task_id}/{n}/reverify/{new_bk[:12]}", event="reverify",
                        task=spec.task_id, round=n, candidate=n, agent="fake",
                        hypothesis=f"change {n}", branch=c["branch"], sha=c["sha"],
                        base_sha=new_bk, b0_sha=st["b0"], decision="error",
                        reason="conflict: " + e.stderr[-200:], status="conflict"))
                    outcome(ReverifyOutcome(n=n, branch=c["branch"], old_sha=c["sha"],
                                            outcome="conflict", reason=e.stderr[-200:]))
                    continue
                new = git(wt, "rev-parse", "HEAD")
            finally:
                git(repo, "worktree", "remove", "--force", str(wt), check=False)
            git(repo, "update-ref", f"refs/heads/{c['branch']}", new)
            old, c["sha"] = c["sha"], new
            v = make_verdict(self.reverify_decision, {"b0": st["b0"], "bk": new_bk,
                                                      "candidate": new}, gain=0.05)
            outcome(ReverifyOutcome(n=n, branch=c["branch"], old_sha=old, new_sha=new,
                                    outcome="reverified", decision=v.decision, reason=v.reason,
                                    verdict=v), sha=new)
        self._save(state_dir, st)
        return result

    def watch(self, repo, spec, merge_sha, *, state_dir):
        """The watch after merge, scripted: the claim of candidate 1 reproduces."""
        from harness.watch import WatchResult

        self.calls.append(("watch", merge_sha))
        merge, parent = rev_parse(repo, merge_sha), rev_parse(repo, f"{merge_sha}^1")
        v = make_verdict("accept", {"bk": parent, "candidate": merge}, gain=0.1)
        return WatchResult(merge_sha=merge, parent_sha=parent, hidden_seed=1, requests_factor=4,
                           verdict=v)

    def reverify(self, repo, spec, branch, *, state_dir):
        self.calls.append(("reverify", branch))
        st = self._state(state_dir)
        sha = rev_parse(repo, f"refs/heads/{branch}")
        return make_verdict(self.reverify_decision, {"b0": st["b0"], "bk": st["bk"],
                                                     "candidate": sha}, gain=0.07)
