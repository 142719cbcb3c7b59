"""make test's split of the suite (tests/conftest.py): what runs in parallel,
what alone, and that pytest-xdist honours the groups at all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _pytest(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RSI_REQUIRE_")}
    env.pop("RSI_TEST_POSTGRES_URL", None)  # the grouped tests skip: only their ids matter
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    return out.stdout + out.stderr


def test_postgres_tests_share_one_xdist_worker():
    """One PostgreSQL database: its tests are one xdist group. pytest-xdist
    3.8 renames a grouped test's id to `...@group`, which pytest 9.2 ignores
    (every group silently dropped): pytest is pinned below 9 for that."""
    out = _pytest("tests/bot/test_store.py", "-k", "claimed_once or claim_finish",
                  "-n", "2", "--dist", "loadgroup", "-v")
    grouped = [ln for ln in out.splitlines() if ln.startswith("[gw") and "[postgres]" in ln]
    assert len(grouped) == 3, out[-3000:]
    assert all(ln.rstrip().endswith("@postgres") for ln in grouped), out[-3000:]
    assert len({ln.split()[0] for ln in grouped}) == 1, grouped  # one worker


def test_timing_and_docker_tests_run_alone():
    """`-m serial` (make test's second part) takes the verifier's real
    verifications and the Docker tests; `-m 'not serial'` (in parallel) the rest."""
    serial = _pytest("tests/verifier/test_judge.py", "tests/harness/test_sandbox.py",
                     "tests/verifier/test_stats.py", "-m", "serial", "--co", "-q")
    ids = {ln.split("::")[0] for ln in serial.splitlines() if "::" in ln}
    assert ids == {"tests/verifier/test_judge.py", "tests/harness/test_sandbox.py"}, serial[-2000:]
    rest = _pytest("tests/verifier/test_judge.py", "tests/verifier/test_stats.py",
                   "-m", "not serial", "--co", "-q")
    ids = {ln.split("::")[0] for ln in rest.splitlines() if "::" in ln}
    assert ids == {"tests/verifier/test_stats.py"}, rest[-2000:]


def test_docker_tests_that_rest_on_no_measured_time_run_with_the_adversarial_suite():
    """`-m parallel_docker` (make test's third part, in parallel) takes the
    adversarial suite and the real-agent tests, and neither of the other two
    parts takes them: every test runs in exactly one part."""
    files = ("tests/agents/test_real_agents.py", "tests/adversarial/test_target.py",
             "tests/harness/test_sandbox.py", "tests/verifier/test_stats.py")

    def ids(marker: str) -> set[str]:
        out = _pytest(*files, "-m", marker, "--co", "-q")
        return {ln.split("::")[0] for ln in out.splitlines() if "::" in ln}

    assert ids("parallel_docker") == {"tests/agents/test_real_agents.py", "tests/adversarial/test_target.py"}
    assert ids("serial and not parallel_docker") == {"tests/harness/test_sandbox.py"}
    # test_sandbox.py: its Docker tests run alone, the rest in the first part
    assert ids("not serial and not parallel_docker") == {"tests/harness/test_sandbox.py",
                                                         "tests/verifier/test_stats.py"}
