"""Shared test configuration: markers for costly tests.

Tests marked ``docker``, ``postgres``, ``torch`` or ``chromium`` skip with a clear reason
where this machine cannot run them, except when the matching
``RSI_REQUIRE_*=1`` variable is set (``.ci/run`` sets them), where a missing
dependency fails the test instead: CI must never pass by skipping.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
BASE_IMAGE = os.environ.get("RSI_BASE_IMAGE", "rsi-bot/base:bookworm")
sys.path.insert(0, str(REPO_ROOT))


@functools.lru_cache(maxsize=None)
def docker_unavailable_reason() -> str | None:
    if shutil.which("docker") is None:
        return "docker CLI not installed (run scripts/setup-docker.sh)"
    try:
        info = subprocess.run(["docker", "info"], capture_output=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "docker engine did not answer within 20 s"
    if info.returncode != 0:
        return "no Docker engine running (run scripts/setup-docker.sh)"
    img = subprocess.run(["docker", "image", "inspect", BASE_IMAGE], capture_output=True)
    if img.returncode != 0:
        return f"base image {BASE_IMAGE} missing (run scripts/setup-docker.sh)"
    return None


def postgres_unavailable_reason() -> str | None:
    if not os.environ.get("RSI_TEST_POSTGRES_URL"):
        return "RSI_TEST_POSTGRES_URL not set (.ci/run starts PostgreSQL and sets it)"
    return None


def torch_unavailable_reason() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "torch not installed (pip install -e '.[torch]')"
    return None


def chromium_unavailable_reason() -> str | None:
    if shutil.which("chromium") is None and shutil.which("chromium-browser") is None:
        return "chromium not installed (apt-get install chromium; .ci/run installs it)"
    return None


_CHECKS = {
    "chromium": (chromium_unavailable_reason, "RSI_REQUIRE_CHROMIUM"),
    "docker": (docker_unavailable_reason, "RSI_REQUIRE_DOCKER"),
    "postgres": (postgres_unavailable_reason, "RSI_REQUIRE_POSTGRES"),
    "torch": (torch_unavailable_reason, "RSI_REQUIRE_TORCH"),
}


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark, (check, required_var) in _CHECKS.items():
        if item.get_closest_marker(mark) is None:
            continue
        reason = check()
        if reason is None:
            continue
        if os.environ.get(required_var) == "1":
            pytest.fail(f"{mark} required ({required_var}=1) but unavailable: {reason}")
        pytest.skip(reason)


# ---- make test: which tests run in parallel ----------------------------------
#
# `make test` runs the suite in two parts: every test not marked ``serial``
# under pytest-xdist (``-n``, ``--dist loadgroup``), then the ``serial`` ones
# one at a time, alone on the machine. ``serial`` goes (below) to every test
# whose outcome rests on measured time (a verifier decision on real runs: the
# CPU a parallel neighbour takes would move it) and to every Docker test (the
# base image's containers, images and ports are not all named per worker).
# PostgreSQL tests share one database: one xdist group, one worker.
#
# A third part runs Docker tests in parallel, under ``parallel_docker``: the
# adversarial suite (tests/adversarial/README.md) and the files below. A file
# joins only when no outcome in it rests on how fast the machine is (its
# targets are sleep-bound, its gains far inside min_gain and 2x, its errors
# asserted by their reason) and everything its tests create or check (
# containers, networks, host paths, processes) is named per test: never a
# check over all of the engine's containers, which another worker's would fail.
PARALLEL_DOCKER_FILES = frozenset(
    {
        # real agents against a sleep-bound target: +47% against min_gain 20%;
        # the fake model, its network and each round's containers named per test
        "tests/agents/test_real_agents.py",
    }
)
SERIAL_FILES = frozenset(
    {
        # real verifications with process isolation: decisions on measured time
        "tests/verifier/test_judge.py",
        "tests/verifier/test_every_run.py",
        "tests/verifier/test_cli.py",
        "tests/verifier/test_noise.py",
        "tests/verifier/test_provenance.py",
        "tests/verifier/test_fingerprint.py",
        "tests/verifier/test_runner.py",
        "tests/verifier/test_guards.py",
        "tests/verifier/test_isolation.py",  # an A/A serving verification; time bounds on runs
        "tests/harness/test_verification.py",  # a timed-out verification within 20 s
        "tests/harness/test_resume.py",
        "tests/harness/test_e2e.py",  # the tuner with the real verifier in process
        "tests/bot/test_new_user.py",  # rsi try with the real verifier in process
        "tests/harness/test_report.py",
        "tests/bot/test_e2e.py",
        "tests/bot/test_adoption_path.py",
        "tests/bot/test_actions.py",
        "tests/bot/test_cli_init.py",
        "tests/bot/test_crash.py",
    }
)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (its worker hook runs first)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        rel = Path(str(item.fspath)).resolve().relative_to(REPO_ROOT).as_posix()
        if rel.startswith("tests/adversarial/") or rel in PARALLEL_DOCKER_FILES:
            item.add_marker(pytest.mark.parallel_docker)  # make test's third part
            continue
        if item.get_closest_marker("docker") is not None or rel in SERIAL_FILES:
            item.add_marker(pytest.mark.serial)
        if item.get_closest_marker("postgres") is not None:
            item.add_marker(pytest.mark.xdist_group("postgres"))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """The recorded real GitHub webhook payloads (../shared/fixtures)."""
    for candidate in (REPO_ROOT.parent / "shared" / "fixtures", REPO_ROOT / "tests" / "fixtures"):
        if (candidate / "github-webhooks").is_dir():
            return candidate
    pytest.fail("webhook fixtures not found: expected ../shared/fixtures/github-webhooks")


@pytest.fixture(autouse=True)
def _own_runner_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test its own runner store (harness.calcache: kept calibrations, the
    measuring lane), inherited by the commands it starts: no test reuses another's
    calibration or waits on another xdist worker's measuring lane."""
    monkeypatch.setenv("RSI_RUNNER_DIR", str(tmp_path_factory.mktemp("runner")))
