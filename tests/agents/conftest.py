"""Real agent programs (mini-swe-agent, aider) in the real sandbox, talking to
the scripted model server through the egress proxy. Docker-marked; they also
need the agents venvs (``scripts/setup-agents.sh``): missing venvs skip, or
fail where ``RSI_REQUIRE_DOCKER=1`` (CI)."""

from __future__ import annotations

import os

import pytest

from harness.agents.command import agents_venv


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("docker") is None:
        return
    missing = [p for p in ("mini-swe-agent", "aider") if not (agents_venv(p) / ".rsi-installed").is_file()]
    if missing:
        reason = f"agents venvs missing ({', '.join(missing)}): run scripts/setup-agents.sh"
        if os.environ.get("RSI_REQUIRE_DOCKER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
