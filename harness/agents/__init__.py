"""Agents: one small interface (:class:`Agent`), three adapters.

* ``command`` (and its presets ``claude-code``, ``codex``, ``aider``,
  ``mini-swe-agent``): an external coding-agent CLI in a sandbox container
  (aider and mini-swe-agent from the pinned venvs of scripts/setup-agents.sh;
  their token usage read by ``usage.py``);
* ``tuner``: single-variable coordinate descent over the declared knobs;
* ``replay``: given patch files, one per round.
"""

from __future__ import annotations

from pathlib import Path

from harness.agents.base import Agent, AgentContext, AgentOutcome
from harness.agents.command import PRESETS, CommandAgent
from harness.agents.replay import ReplayAgent
from harness.agents.tuner import TunerAgent
from harness.spec import TaskSpec

__all__ = [
    "PRESETS",
    "Agent",
    "AgentContext",
    "AgentOutcome",
    "CommandAgent",
    "ReplayAgent",
    "TunerAgent",
    "make_agent",
]


def make_agent(spec: TaskSpec, kind: str | None = None, *, patches: list[Path | str] | None = None, repo: Path | None = None) -> Agent:
    """The agent a task asks for (``kind`` overrides ``[agent] kind``).
    Replay patch paths are relative to ``repo`` unless absolute."""
    kind = kind or spec.agent.kind
    if kind == "tuner":
        return TunerAgent()
    if kind == "replay":
        paths = [Path(p) for p in (patches if patches is not None else spec.agent.patches)]
        if repo is not None:
            paths = [p if p.is_absolute() else Path(repo) / p for p in paths]
        return ReplayAgent(paths)
    if kind == "command":
        if not spec.agent.command:
            raise ValueError("[agent] kind 'command' needs 'command' (a command template)")
        return CommandAgent(template=spec.agent.command, env_names=tuple(spec.agent.env), model=spec.agent.model)
    if kind in PRESETS:
        agent = CommandAgent.preset(kind, env_names=tuple(spec.agent.env), model=spec.agent.model)
        if spec.agent.command:
            agent.template = spec.agent.command
        return agent
    raise ValueError(f"unknown agent kind '{kind}'; known: tuner, replay, command, {', '.join(PRESETS)}")
