"""The agent registry: each agent kind's name, config model and factory.

``[agent] kind`` names one entry of :data:`AGENTS`. The config models live
in :mod:`harness.sections` (:data:`~harness.sections.AGENT_CONFIGS`), below
the task spec, so an unknown kind, or a kind without what it needs (``command``
without a command template), is an error when the config is read, listing
the known kinds; this module pairs each with the factory that builds the
agent, and refuses at import a kind with a config model and no factory (or
the other way round). :func:`make_agent` is the one way to build an agent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from harness.agents.base import Agent
from harness.agents.command import PRESETS, CommandAgent
from harness.agents.replay import ReplayAgent
from harness.agents.tuner import TunerAgent
from harness.sections import (
    AGENT_CONFIGS,
    AgentSettings,
    check_agent_kind,
    check_agent_settings,
)

Factory = Callable[[AgentSettings, list[Path]], Agent]
"""Builds the agent from the (checked) ``[agent]`` settings and the replay
patch paths (absolute)."""


@dataclass(frozen=True)
class AgentKind:
    name: str
    config: type[BaseModel]
    """What the kind's ``[agent]`` fields must satisfy (checked at config time)."""
    factory: Factory
    summary: str


def _tuner(settings: AgentSettings, patches: list[Path]) -> Agent:
    return TunerAgent()


def _replay(settings: AgentSettings, patches: list[Path]) -> Agent:
    paths: list[Path | str] = [*patches]
    return ReplayAgent(paths)


def _command(settings: AgentSettings, patches: list[Path]) -> Agent:
    assert settings.command  # CommandConfig
    return CommandAgent(template=settings.command, env_names=tuple(settings.env), model=settings.model)


def _preset(settings: AgentSettings, patches: list[Path]) -> Agent:
    agent = CommandAgent.preset(settings.kind, env_names=tuple(settings.env), model=settings.model)
    if settings.command:
        agent.template = settings.command
    return agent


def _entries() -> dict[str, AgentKind]:
    factories: dict[str, tuple[Factory, str]] = {
        "tuner": (_tuner, "single-variable coordinate descent over the task's knobs"),
        "replay": (_replay, "applies the given patch files, one per round"),
        "command": (_command, "an external agent CLI from a command template, in a sandbox"),
        **{name: (_preset, f"the {name} CLI (a preset command), in a sandbox") for name in PRESETS},
    }
    if set(factories) != set(AGENT_CONFIGS):
        raise RuntimeError("agent kinds with a config model but no factory, or a factory but no "
                           f"config model: {sorted(set(factories) ^ set(AGENT_CONFIGS))} "
                           "(harness.sections.AGENT_CONFIGS vs harness.agents.registry)")
    return {name: AgentKind(name, AGENT_CONFIGS[name], factory, summary)
            for name, (factory, summary) in factories.items()}


AGENTS: dict[str, AgentKind] = _entries()


def make_agent(settings: AgentSettings, kind: str | None = None, *,
               patches: Sequence[Path | str] | None = None, repo: Path | None = None) -> Agent:
    """The agent ``settings`` ask for (``kind`` overrides ``settings.kind``).
    Replay patch paths are relative to ``repo`` unless absolute. ``ValueError``
    for an unknown kind (listing the known ones) or settings the kind cannot run."""
    if kind is not None and kind != settings.kind:
        settings = settings.model_copy(update={"kind": check_agent_kind(kind)})
    entry = AGENTS[check_agent_kind(settings.kind)]
    check_agent_settings(settings)
    paths = [Path(p) for p in (patches if patches is not None else settings.patches)]
    if repo is not None:
        paths = [p if p.is_absolute() else Path(repo) / p for p in paths]
    return entry.factory(settings, paths)
