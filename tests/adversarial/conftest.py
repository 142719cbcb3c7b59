"""Fixtures of the adversarial suite, and its table.

Every docker case runs the real loop (``harness.loop.run_task``) on a target
repo made by :func:`targetrepo.make_target_repo`, with the real agents
(``replay`` for patch cheats, ``command`` for agent-side cheats) and the
default verification backend (``harness.verification.make_backend("sandbox")``).
B0 is calibrated once per mode in each xdist worker and shared by that
worker's cases of the mode (:class:`RetriedCalibration`); every verification
is measured afresh.

The cases run in parallel (``pytest -n 3``, pytest-xdist; ``make test`` does
it): the target's wall time is mostly waits, which do not stretch with CPU
contention, ``cpu_s`` is CPU time, and every case owns its repo, state dir
and containers. Each row of the table travels to the controller in the
test report's ``user_properties`` (key :data:`ROW_KEY`).

At the end of a session that ran any case, the table ``case | what it tries |
decision | reason | result`` is printed and written to
``tests/adversarial/RESULTS.md`` (not committed automatically; by the xdist
controller only, never by a worker).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .cases import Case
from .targetrepo import HIDDEN_SEED, HIDDEN_SEED_ENV, make_target_repo

RESULTS_MD = Path(__file__).resolve().parent / "RESULTS.md"
ROWS: dict[str, dict[str, str]] = {}
"""nodeid -> row of the table (filled by the tests, outcome by the hook)."""
ROW_KEY = "adversarial_row"
"""The key of a case's row in its test report's ``user_properties``."""


def _is_xdist_worker() -> bool:
    return bool(os.environ.get("PYTEST_XDIST_WORKER"))


def record_row(request, row: dict[str, str]) -> None:
    """Keep a case's row here and in its report (what an xdist controller sees)."""
    ROWS[request.node.nodeid] = row
    request.node.user_properties.append((ROW_KEY, row))


class RetriedCalibration:
    """The real backend, with B0's calibration measured once per mode (on the
    first case of the mode in this worker), retried when refused, and shared by
    the worker's later cases of that mode.

    Sharing is sound because the verifier does not trust a calibration it has
    not checked: from 6 pairs on, every look compares the noise its own pairs
    show with the calibration's and sets a stale spread aside (the verdict
    warns "noisier than at calibration"), and no look before 6 pairs decides.
    Before that check, one calibration per mode went stale over ten minutes of
    cases and a cheat with no gain was accepted after 4 pairs (cpu_s, +38%);
    the suite then calibrated before every case, which hid the mechanism and
    cost 16 container runs a case. ``tests/verifier/test_noise_blackbox.py``
    holds the mechanism (a calibration 4x too quiet never accepts)."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.name = getattr(inner, "name", "sandbox")
        self.calibration: Any = None  # verifier.calibrate.Calibration

    #: calibrations tried before the refusal stands: the suite judges the
    #: defences, and one noisy moment of a shared 2-core machine (another
    #: process starting) must not refuse a whole mode's cases
    ATTEMPTS = 4

    def calibrate(self, ref, spec, **kw):
        from harness.verification import calibration_ok

        for _ in range(self.ATTEMPTS):
            if self.calibration is not None and calibration_ok(self.calibration, spec.min_gain)[0]:
                break
            self.calibration = self.inner.calibrate(ref, spec, **kw)
        return self.calibration

    def verify(self, *args, **kw):
        return self.inner.verify(*args, **kw)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


@pytest.fixture(scope="session")
def hidden_seed():
    """The hidden seed, in the runner's environment for the session only."""
    old = os.environ.get(HIDDEN_SEED_ENV)
    os.environ[HIDDEN_SEED_ENV] = HIDDEN_SEED
    yield HIDDEN_SEED
    if old is None:
        os.environ.pop(HIDDEN_SEED_ENV, None)
    else:
        os.environ[HIDDEN_SEED_ENV] = old


@pytest.fixture(scope="session")
def adversarial(tmp_path_factory, hidden_seed):
    """Per mode: the target repo and the backend (calibration retried; made on
    first use)."""
    from harness.verification import make_backend

    root = tmp_path_factory.mktemp("adversarial")
    made: dict[str, tuple[Path, RetriedCalibration]] = {}

    def get(mode: str) -> tuple[Path, RetriedCalibration]:
        if mode not in made:
            repo = make_target_repo(root, mode, python="python3")  # the runtime image's own
            made[mode] = (repo, RetriedCalibration(make_backend("sandbox")))
        return made[mode]

    return get


@dataclass
class CaseRun:
    case: Case
    repo: Path
    state_dir: Path
    result: Any
    events: list = field(default_factory=list)
    seconds: float = 0.0

    @property
    def candidate(self):
        return self.result.candidates[0] if self.result.candidates else None

    @property
    def decision(self) -> str:
        c = self.candidate
        return c.decision if c is not None else f"(loop {self.result.status})"

    @property
    def reason(self) -> str:
        c = self.candidate
        return c.reason if c is not None else self.result.reason

    @property
    def verdict(self):
        for e in self.events:
            if e.kind == "candidate" and e.verdict is not None:
                return e.verdict
        return None


@pytest.fixture
def run_case(adversarial, tmp_path: Path, request):
    """``run_case(case, agent)``: one task of one round through the real loop;
    the row for the table is recorded before the test asserts anything."""
    from harness.loop import run_task
    from harness.spec import load_task

    def run(case: Case, agent: Any) -> CaseRun:
        repo, backend = adversarial(case.mode)
        spec = load_task(repo, None, f"adv-{case.name}")
        events: list = []
        t0 = time.monotonic()
        try:
            res = run_task(repo, spec, state_dir=tmp_path / "state", agent=agent, rounds=1, keep="propose",
                           verifier=backend, on_event=events.append)
        except Exception as exc:
            record_row(request, {
                "case": case.name, "tries": case.tries, "decision": "(loop raised)",
                "reason": f"{type(exc).__name__}: {exc}", "seconds": f"{time.monotonic() - t0:.0f}", "result": "?",
            })
            raise
        out = CaseRun(case, repo, tmp_path / "state", res, events, time.monotonic() - t0)
        record_row(request, {
            "case": case.name,
            "tries": case.tries,
            "decision": out.decision,
            "reason": out.reason,
            "seconds": f"{out.seconds:.0f}",
            "result": "?",
        })
        return out

    return run


def pytest_runtest_logreport(report):
    if report.when == "setup" or _is_xdist_worker():
        return
    row = ROWS.get(report.nodeid)
    if row is None:  # run by an xdist worker: the row came in the report
        row = next((dict(v) for k, v in report.user_properties if k == ROW_KEY), None)
        if row is None:
            return
        ROWS[report.nodeid] = row
    if report.when == "call" or report.failed:
        row["result"] = "pass" if report.passed else "FAIL"
        write_results()  # after every case: a long run can be watched, a cut one still leaves its table


def _cell(text: str, limit: int = 220) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def table() -> list[str]:
    lines = ["| case | what it tries | decision | reason | s | result |", "|---|---|---|---|---|---|"]
    for row in ROWS.values():
        lines.append(
            f"| {row['case']} | {_cell(row['tries'])} | {row['decision']} | {_cell(row['reason'])} "
            f"| {row['seconds']} | {row['result']} |"
        )
    return lines


def write_results() -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    RESULTS_MD.write_text(
        f"# Adversarial suite: last run ({stamp})\n\n"
        "Written by `tests/adversarial/conftest.py`; each case is a cheating candidate driven\n"
        "through the real loop and sandbox (see `cases.py`).\n\n" + "\n".join(table()) + "\n"
    )


def pytest_terminal_summary(terminalreporter):
    if not ROWS or _is_xdist_worker():
        return
    terminalreporter.section("adversarial suite")
    for line in table():
        terminalreporter.write_line(line)
    write_results()
