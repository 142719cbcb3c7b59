"""Agents: one small interface (:class:`Agent`), three adapters.

* ``command`` (and its presets ``claude-code``, ``codex``, ``aider``,
  ``mini-swe-agent``): an external coding-agent CLI in a sandbox container
  (aider and mini-swe-agent from the pinned venvs of scripts/setup-agents.sh;
  their token usage read by ``usage.py``);
* ``tuner``: single-variable coordinate descent over the declared knobs;
* ``replay``: given patch files, one per round.

Each kind is one entry of the registry :data:`AGENTS` (``registry.py``): its
config model (``harness.sections.AGENT_CONFIGS``, checked when the config is
read: an unknown kind is an error there, listing the known ones) and its
factory (:func:`make_agent`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness.agents import registry
from harness.agents.base import Agent, AgentContext, AgentOutcome
from harness.agents.command import PRESETS, CommandAgent
from harness.agents.registry import AGENTS, AgentKind
from harness.agents.replay import ReplayAgent
from harness.agents.tuner import TunerAgent
from harness.spec import TaskSpec

__all__ = [
    "AGENTS",
    "PRESETS",
    "AgentKind",
    "Agent",
    "AgentContext",
    "AgentOutcome",
    "CommandAgent",
    "ReplayAgent",
    "TunerAgent",
    "make_agent",
]


def make_agent(spec: TaskSpec, kind: str | None = None, *, patches: Sequence[Path | str] | None = None, repo: Path | None = None) -> Agent:
    """The agent a task asks for (``kind`` overrides ``[agent] kind``), from the
    registry (:data:`harness.agents.registry.AGENTS`). Replay patch paths are
    relative to ``repo`` unless absolute."""
    return registry.make_agent(spec.agent, kind, patches=patches, repo=repo)
