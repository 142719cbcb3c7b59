"""`rsi run` / `rsi try` progress on a pipe (harness.cli.StepLines): never quiet
for long while the verifier measures, the loop's phase lines always said, an
estimate once runs are timed, and the wall-time budget (harness.cli.Budget)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.cli import Budget, StepLines
from harness.events import AgentFinished, BaselineMeasured, Progress
from harness.spec import load_task

from .target import make_target


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _steps(tmp_path: Path) -> tuple[StepLines, list[str], Clock]:
    spec = load_task(make_target(tmp_path, python=sys.executable), None, "t")
    out: list[str] = []
    steps = StepLines(spec, 2, echo=out.append, every_s=20)
    clock = Clock()
    steps.clock, steps.t0, steps.last = clock, 0.0, 0.0
    return steps, out, clock


def test_a_long_calibration_prints_its_progress_and_the_estimate(tmp_path: Path):
    steps, out, clock = _steps(tmp_path)
    steps(Progress(task_id="t", message="measuring B0 abc (calibration: 3 A/A pairs, 6 benchmark runs)",
                   phase="calibrate"))
    assert out[-1].endswith("[calibrate] measuring B0 abc (calibration: 3 A/A pairs, 6 benchmark runs)")
    for run in range(1, 31):  # 30 runs, 5 s each: 150 s of measuring
        clock.t += 5
        steps(Progress(task_id="t", message="", phase="measure", run=run, total=30, pairs=run // 2))
    lines = [ln for ln in out if "[progress] calibration: measure run" in ln]
    assert len(lines) >= 150 // 20 - 1
    stamps = [0.0] + [float(ln[1:ln.index("s]")]) for ln in out]
    assert max(b - a for a, b in zip(stamps, stamps[1:], strict=False)) <= 20
    steps(BaselineMeasured(task_id="t", message="B0 measured: ok", sha="a" * 40))
    assert "[estimate] ~5.0 s per benchmark run" in out[-1]


def test_a_longer_retry_and_a_wait_for_the_lane_are_said(tmp_path: Path):
    steps, out, _ = _steps(tmp_path)
    steps(Progress(task_id="t", message="B0 looked too noisy; measuring it again with 6 A/A pairs: ...",
                   phase="calibrate"))
    steps(Progress(task_id="t", message="waiting for the runner's measuring lane", phase="lane"))
    assert "[calibrate] B0 looked too noisy; measuring it again" in out[0]
    assert "[lane] waiting for the runner's measuring lane" in out[1]


def test_the_budget_stops_before_a_round_that_could_not_end_within_it(tmp_path: Path):
    steps, out, clock = _steps(tmp_path)
    budget = Budget(steps, 10)
    assert budget() is False  # nothing timed yet: the first round may start
    for run in range(1, 6):
        clock.t += 2
        steps(Progress(task_id="t", message="", phase="measure", run=run, total=10))
    steps(AgentFinished(task_id="t", message="agent", round=1, candidate=1, duration_s=60))
    # a round now: 60 s of agent + 3 arms x (8 pairs + 0 warm-up) x 2 s = 108 s
    assert steps.worst_round_s() == 60 + 3 * 8 * 2
    clock.t = 600 - 109
    assert budget() is False
    clock.t = 600 - 107
    why = budget()
    assert isinstance(why, str) and "time budget" in why and "--budget-min" in why
    assert Budget(steps, None)() is False


def test_a_stop_with_a_reason_is_the_tasks_reason(tmp_path: Path):
    from harness.agents import ReplayAgent
    from harness.loop import run_task

    from . import fakes

    repo = make_target(tmp_path, python=sys.executable)
    spec = load_task(repo, None, "t")
    res = run_task(repo, spec, state_dir=tmp_path / "state", agent=ReplayAgent([]), verifier=fakes.FakeVerifier(),
                   should_stop=lambda: "time budget: 15.0 of 15 min used")
    assert (res.status, res.reason) == ("stopped", "time budget: 15.0 of 15 min used")


def test_a_budget_spent_by_the_calibration_refuses_without_a_longer_one(tmp_path: Path, monkeypatch):
    from harness.agents import ReplayAgent
    from harness.loop import run_task

    from . import fakes

    monkeypatch.setenv("RSI_FAKE_NOISY", "1")  # every calibration too noisy
    fakes.CALLS.clear()
    repo = make_target(tmp_path, python=sys.executable)
    spec = load_task(repo, None, "t")
    res = run_task(repo, spec, state_dir=tmp_path / "state", agent=ReplayAgent([]), verifier=fakes.FakeVerifier(),
                   should_stop=lambda: "time budget: 15.2 of 15 min used")
    assert res.status == "refused" and res.reason.endswith("(not measured again: time budget: 15.2 of 15 min used)")
    assert [c[0] for c in fakes.CALLS] == ["calibrate"]  # no longer calibration


def test_the_estimates_count_the_runs_an_accept_needs_with_the_wild_run_rule_on(tmp_path: Path):
    """Issue 29: with the default wild-run rule an accept measures at least 51
    candidate runs and a verification up to accept_max_runs (160); the
    up-front estimate and the budget's worst round say so."""
    from harness.cli import estimate

    target = make_target(tmp_path, python=sys.executable)
    cfg = target / ".rsi" / "config.toml"
    cfg.write_text(cfg.read_text().replace("accept_wild_rate = 0\n", ""))
    subprocess.run(["git", "commit", "-qam", "the default wild-run rule"], cwd=target, check=True)
    spec = load_task(target, None, "t")
    v = spec.verify.verifier
    assert v.accept_wild_rate == 0.1 and v.max_pairs == 8 and v.warmup == 0
    text = estimate(spec, 2)
    assert text.startswith(f"at most {2 * 3 + 2 * 2 * 160} benchmark runs"), text
    assert "an accept takes at least 102: every run counts" in text, text
    steps = StepLines(spec, 1, echo=[].append)
    steps.run_gaps = [2.0, 2.0, 2.0]
    assert steps.worst_round_s() == 3 * 160 * 2
    # the rule off (as in the other tests' target): no accept line, max_pairs bounds
    off = estimate(load_task(make_target(tmp_path / "off", python=sys.executable), None, "t"), 2)
    assert off.startswith(f"at most {2 * 3 + 2 * 2 * 8} benchmark runs") and "accept takes" not in off
