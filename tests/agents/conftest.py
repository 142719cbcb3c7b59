"""Real agent programs (mini-swe-agent, aider, claude-code, codex) in the real
sandbox, talking to the scripted model server through the model gateway.
Docker-marked; they also need the agents image (``scripts/setup-agents.sh``,
then ``scripts/build-images.sh``: the four presets are its content, nothing of
the host is mounted): a missing image skips, or fails where
``RSI_REQUIRE_DOCKER=1`` (CI)."""

from __future__ import annotations

import os

import pytest

from harness import images


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("docker") is None:
        return
    try:
        images.agents_image()
    except images.ImageError as exc:
        reason = f"no agents image: {exc}"
        if os.environ.get("RSI_REQUIRE_DOCKER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
