"""Task specs: from a proposal (an issue body) and the repo config to a task.

``TaskSpec`` = the repo config ``.rsi/config.toml`` read from the target repo's
default branch (never from a branch a proposal could control), overridden by
the proposal where it is allowed to. The verifier owns the sections
``benchmarks``, ``objective``, ``guards``, ``quality``, ``verifier`` and
``hidden`` (``verifier.config.VerifyConfig``, kept typed as ``TaskSpec.verify``);
this module owns ``knobs``, ``policy``, ``agent`` and ``runner`` (see
docs/contracts.md).

A proposal is read by :mod:`harness.proposal`; what it may change, and how
(it only tightens), is :mod:`harness.merge`. Everything else (benchmark
commands, hidden inputs, knobs, agent commands, runner profiles) comes from the
repo config only. Errors are collected, never raised one at a time:
``SpecError.errors`` is a list a human can act on.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, Field, ValidationError

from harness.gitutil import GitError, default_branch, git
from harness.merge import merge_proposal
from harness.policy import EditPolicy, paths_named_by
from harness.proposal import parse_proposal
from harness.sections import (  # noqa: F401  (re-exported: the task's config models)
    AGENT_KINDS,
    DEFAULT_IMAGE,
    AgentSettings,
    BotSettings,
    Knob,
    RunnerProfile,
    RunnerSettings,
)
from harness.tomlout import dump_toml
from verifier.config import BenchmarkConfig, ConfigError, VerifyConfig

CONFIG_PATH = ".rsi/config.toml"
_M = TypeVar("_M", bound=BaseModel)


class SpecError(ValueError):
    """A repo config or proposal that cannot become a task. ``errors`` lists
    every problem, each with where it is and what to do."""

    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


class TaskSpec(BaseModel):
    """A validated task: everything the loop needs. The agent sees only what
    TASK.md shows of it (``harness.agents.taskmd``), never ``verify.hidden``."""

    task_id: str
    title: str = ""
    verify: VerifyConfig
    """The verifier's sections of the merged config: benchmarks, objective,
    guards, quality, verifier settings and hidden inputs (verifier-only)."""
    config: dict[str, Any] = Field(default_factory=dict)
    """The merged config as written, in the repo config's layout: the TOML a
    verifier in its own process reads, and the guards ``rsi spec check`` shows."""
    knobs: list[Knob] = Field(default_factory=list)
    policy: EditPolicy = Field(default_factory=EditPolicy)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    runner: RunnerSettings = Field(default_factory=RunnerSettings)
    bot: BotSettings = Field(default_factory=BotSettings)
    notes: str = ""
    """Free text from the proposal (the maintainer's idea), shown to the agent."""

    @property
    def benchmark_name(self) -> str:
        return self.verify.objective.benchmark

    @property
    def benchmark(self) -> BenchmarkConfig:
        """The objective's benchmark."""
        return self.verify.benchmark()

    @property
    def min_gain(self) -> float:
        return self.verify.objective.min_gain

    def protected_paths(self) -> list[str]:
        """Protected globs: the policy's plus the measuring code of every
        benchmark, by default (:func:`measuring_paths`): the files its
        ``command``, ``setup``, ``serve``, ``client`` and ``evaluator`` name,
        in script form (``python bench/client.py``) or module form
        (``python -m tiny_tts.server``); and every runner profile's
        ``environment`` file (the verifier reads B0's copy; a candidate's
        change to it would only be a change nobody measures)."""
        extra: list[str] = []
        for bench in self.verify.benchmarks.values():
            extra += measuring_paths(bench)
        extra += sorted({p.environment for p in self.runner.profiles.values() if p.environment})
        return self.policy.all_protected(extra)

    def verifier_config_text(self) -> str:
        """The merged config as TOML (for a verifier running in a container)."""
        return dump_toml(self.config)


# ------------------------------------------------------------- measuring code


def module_paths(command: str) -> list[str]:
    """The files ``python -m pkg.mod`` runs from the repository: the module
    (``pkg/mod.py``, or the package's ``pkg/mod/__main__.py`` and
    ``__init__.py``) and the ``__init__.py`` of every package above it (they
    run first), at the root and under ``src/``. A module not in the
    repository (``python -m pytest``) names files an agent could add to
    shadow it: protecting them does no harm."""
    import shlex

    try:
        tokens = shlex.split(command)
    except ValueError:
        tokens = command.split()
    out: list[str] = []
    for flag, name in zip(tokens, tokens[1:], strict=False):
        if flag != "-m" or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", name):
            continue
        parts = name.split(".")
        files = [*(f"{'/'.join(parts[:i])}/__init__.py" for i in range(1, len(parts))),
                 f"{'/'.join(parts)}.py", f"{'/'.join(parts)}/__main__.py",
                 f"{'/'.join(parts)}/__init__.py"]
        for root in ("", "src/"):
            # a file at the root is anchored (``/pytest.py``): unanchored, the glob
            # would protect every ``pytest.py`` in the tree
            out += [g for f in files if (g := root + f if "/" in root + f else "/" + f) not in out]
    return out


def measuring_paths(bench: BenchmarkConfig) -> list[str]:
    """What an agent may not edit in a benchmark, whatever the policy says:
    every file its ``command``, ``setup``, ``serve``, ``client`` or
    ``evaluator`` names (script or module form); for a ``client`` or an
    ``evaluator`` script in a folder, the Python files next to it too (what it
    imports: ``bench/vocab.py`` next to ``bench/client.py``)."""
    out: list[str] = []
    for role in ("command", "setup", "serve", "client", "evaluator"):
        command = getattr(bench, role)
        if not command:
            continue
        for path in [*paths_named_by(command), *module_paths(command)]:
            if path not in out:
                out.append(path)
            folder = path.rsplit("/", 1)[0] if "/" in path else ""
            sibling = f"{folder}/*.py"
            if role in ("client", "evaluator") and folder and path.endswith(".py") \
                    and path in paths_named_by(command) and sibling not in out:
                out.append(sibling)
    return out


# ------------------------------------------------------------- validation


def _fmt_pydantic(prefix: str, exc: ValidationError) -> list[str]:
    out = []
    for e in exc.errors():
        loc = ".".join(str(p) for p in e.get("loc", ()) if p != "__root__")
        msg = e.get("msg", "invalid").removeprefix("Value error, ")
        if e.get("type") == "extra_forbidden":
            msg = "unknown setting"
        out.append(f"{prefix}{(' ' + loc) if loc else ''}: {msg}")
    return out


def _verify_config(merged: dict[str, Any]) -> tuple[VerifyConfig | None, list[str]]:
    try:
        return VerifyConfig.from_dict(merged), []
    except ConfigError as exc:
        return None, list(exc.errors)


def build_task(
    repo_config_text: str,
    proposal_body: str | None,
    task_id: str,
    *,
    title: str = "",
    repo_files: set[str] | None = None,
) -> TaskSpec:
    """Repo config text + proposal body -> TaskSpec, or ``SpecError`` listing
    every problem. ``repo_files`` (paths at the default branch), when given,
    lets knobs be checked against the tree."""
    errors: list[str] = []
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", task_id or ""):
        errors.append(f"task id '{task_id}': use letters, digits, '.', '_' or '-' (it names git branches)")
    try:
        repo = tomllib.loads(repo_config_text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError([f"{CONFIG_PATH}: not valid TOML: {exc}"]) from exc

    try:  # parse_proposal collects every failure it knows; this is the backstop
        prop = parse_proposal(proposal_body)
        merged, merge_errors = merge_proposal(repo, prop.overrides)
    except RecursionError as exc:
        raise SpecError(["proposal: nested too deeply to read; a proposal's settings are at "
                         "most 3 deep (e.g. [[guards]] -> max_ratio)"]) from exc
    errors += prop.errors
    errors += merge_errors
    knobs = _knobs(merged, repo_files, errors)
    policy = _section(EditPolicy, merged, "policy", errors)
    agent = _section(AgentSettings, merged, "agent", errors)
    runner = _section(RunnerSettings, merged, "runner", errors)
    bot = _section(BotSettings, merged, "bot", errors)
    if isinstance(merged.get("hidden"), dict) and merged["hidden"].get("seed") is not None:
        errors.append("[hidden] seed: not allowed in .rsi/config.toml (the repo is visible to "
                      "agents); name the runner's secret with seed_env instead")
    if agent.kind == "tuner" and not knobs and "kind" in (merged.get("agent") or {}):
        errors.append("[agent]: kind 'tuner' needs at least one [[knobs]] entry in .rsi/config.toml")

    verify, verify_errors = _verify_config(merged)
    errors += verify_errors
    if errors or verify is None:
        raise SpecError(errors)
    return TaskSpec(task_id=task_id, title=title, verify=verify, config=merged, knobs=knobs,
                    policy=policy, agent=agent, runner=runner, bot=bot, notes=prop.notes)


def _knobs(merged: dict[str, Any], repo_files: set[str] | None, errors: list[str]) -> list[Knob]:
    """The ``[[knobs]]``, each checked; problems are added to ``errors``."""
    knobs: list[Knob] = []
    for i, raw in enumerate(merged.get("knobs", []) or [], start=1):
        label = f"knob {i}" + (f" ({raw.get('name')})" if isinstance(raw, dict) and raw.get("name") else "")
        try:
            k = Knob.model_validate(raw)
        except ValidationError as exc:
            errors += _fmt_pydantic(label, exc)
            continue
        if repo_files is not None and k.file not in repo_files:
            errors.append(f"{label}: file '{k.file}' does not exist on the default branch")
        if any(k.name == o.name for o in knobs):
            errors.append(f"{label}: the name '{k.name}' is used by another knob")
        knobs.append(k)
    return knobs


def _section(model: type[_M], merged: dict[str, Any], key: str, errors: list[str]) -> _M:
    """One harness section of the merged config; on problems (added to
    ``errors``, labelled ``[key]``) the model's defaults."""
    try:
        return model.model_validate(merged.get(key, {}) or {})
    except ValidationError as exc:
        errors.extend(_fmt_pydantic(f"[{key}]", exc))
        return model()


def load_repo_config(repo: Path | str, ref: str | None = None) -> str:
    """The text of ``.rsi/config.toml`` at ``ref`` (default: the default branch)."""
    ref = ref or default_branch(repo)
    try:
        return git(repo, "show", f"{ref}:{CONFIG_PATH}")
    except GitError as exc:
        raise SpecError(
            [f"{repo}: no {CONFIG_PATH} on '{ref}' ({exc.stderr.strip()}); commit one to the default branch"]
        ) from exc


def repo_files(repo: Path | str, ref: str | None = None) -> set[str]:
    ref = ref or default_branch(repo)
    return set(git(repo, "ls-tree", "-r", "--name-only", ref).splitlines())


def load_task(
    repo: Path | str,
    proposal_body: str | None = None,
    task_id: str = "local",
    *,
    ref: str | None = None,
) -> TaskSpec:
    """build_task with the config and file list read from ``repo`` at ``ref``."""
    ref = ref or default_branch(repo)
    return build_task(
        load_repo_config(repo, ref), proposal_body, task_id, repo_files=repo_files(repo, ref)
    )
