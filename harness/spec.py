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
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.gitutil import GitError, default_branch, git
from harness.merge import merge_proposal
from harness.policy import EditPolicy, paths_named_by
from harness.proposal import parse_proposal
from harness.tomlout import dump_toml
from verifier.config import BenchmarkConfig, ConfigError, VerifyConfig

CONFIG_PATH = ".rsi/config.toml"
AGENT_KINDS = ("tuner", "replay", "command", "claude-code", "codex", "aider", "mini-swe-agent")
DEFAULT_IMAGE = "rsi-bot/base:bookworm"
_M = TypeVar("_M", bound=BaseModel)


class SpecError(ValueError):
    """A repo config or proposal that cannot become a task. ``errors`` lists
    every problem, each with where it is and what to do."""

    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Knob(_Model):
    """A setting the ``tuner`` may change: a ``key = value`` line in ``file``,
    or the one group of ``pattern``."""

    name: str
    file: str
    key: str | None = None
    """A ``key = value`` (or ``key: value``) line in the file."""
    pattern: str | None = None
    """A regular expression with exactly one group: the value."""
    values: list[int | float | bool | str] = Field(min_length=1)
    """The values to try; the current one is read from the file."""

    @model_validator(mode="after")
    def _one_locator(self) -> Knob:
        if (self.key is None) == (self.pattern is None):
            raise ValueError("give exactly one of 'key' or 'pattern'")
        if self.pattern is not None:
            try:
                rx = re.compile(self.pattern, re.MULTILINE)
            except re.error as exc:
                raise ValueError(f"'pattern' is not a regular expression: {exc}") from exc
            if rx.groups != 1:
                raise ValueError(f"'pattern' must have exactly one group, it has {rx.groups}")
        return self


class AgentSettings(_Model):
    kind: str = "tuner"
    """tuner | replay | command | claude-code | codex | aider | mini-swe-agent."""
    rounds: int = Field(6, ge=1, le=1000)
    round_timeout_s: float = Field(900, gt=0)
    """Wall-clock limit of one agent run."""
    max_straight_rejections: int = Field(5, ge=1)
    """Pause the task after this many rejected candidates in a row."""
    keep: Literal["advance", "propose"] = "advance"
    """advance: Bk moves to an accepted candidate at once (local ``rsi run``);
    propose: the candidate waits on its branch for review (the bot)."""
    command: str | None = None
    """For kind ``command``: the command template ({task_file}, {prompt_file},
    {workdir}, {python}, {model} are filled in). Presets fill it for the others."""
    model: str | None = None
    """Model name handed to presets that take one."""
    env: list[str] = Field(default_factory=list)
    """Names of runner environment variables passed to the agent (API keys);
    their values are never logged."""
    patches: list[str] = Field(default_factory=list)
    """For kind ``replay``: patch files, applied one per round, in order."""
    allowed_kinds: list[str] = Field(default_factory=list)
    """Agent kinds a proposal may pick (repo config only); empty: ``kind`` and the
    kinds that run no external agent and get no credentials (tuner, replay)."""
    max_rounds: int = Field(50, ge=1, le=1000)
    """The most rounds a proposal may ask for (repo config only)."""
    max_tokens: int | None = Field(None, ge=1)
    """Token budget of the task (model tokens in + out over all rounds, as the
    agent's client reports the endpoint's usage); no new round starts once spent."""
    max_cost_usd: float | None = Field(None, gt=0)
    """Cost budget of the task in US dollars; no new round starts once spent."""
    price_in_per_mtok: float | None = Field(None, ge=0)
    """Price of a million input tokens (USD): the round's cost is computed from
    the tokens with these prices; unset, the agent's own cost figure is used."""
    price_out_per_mtok: float | None = Field(None, ge=0)
    """Price of a million output tokens (USD)."""

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str) -> str:
        if v not in AGENT_KINDS:
            raise ValueError(f"unknown agent kind '{v}'; known: {', '.join(AGENT_KINDS)}")
        return v


class RunnerProfile(_Model):
    image: str = DEFAULT_IMAGE
    device: Literal["cpu", "cuda", "npu"] = "cpu"
    cpus: float = Field(2.0, gt=0)
    memory: str = "4g"
    pids: int = Field(512, ge=16)
    network: bool = False
    """Whether the agent's container may reach the network: only through an
    egress proxy to ``allowed_hosts`` (set them; this turns on by itself).
    Verifier containers never have network."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """Hosts the agent may reach (its model API), e.g. ``["api.anthropic.com"]``
    or ``["*.example.com"]``; nothing else is routable (see harness.egress)."""
    devices: list[str] = Field(default_factory=list)
    """cuda: GPU ids; npu: davinci indices. Required for those devices: a profile
    never gets every accelerator on the machine by default."""
    env: dict[str, str] = Field(default_factory=dict)
    runs_on: list[str] = Field(default_factory=list)
    """GitHub Actions runner labels for jobs of this profile (the ``actions``
    executor), e.g. ``["self-hosted", "linux", "cuda"]``. Empty: ``["self-hosted",
    "<device>"]`` for cuda and npu, the bot's ``RSI_RUNNER_LABELS`` for cpu."""
    writable_checkouts: bool = False
    """Mount the checkouts read-write in verifier containers. Off by default:
    the candidate's code runs in the same container as the baselines' and must
    not be able to change their trees. Turn on only for benchmarks whose setup
    builds in the tree."""


    @field_validator("runs_on")
    @classmethod
    def _labels(cls, v: list[str]) -> list[str]:
        for label in v:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", label):
                raise ValueError(f"runs_on label {label!r}: letters, digits, '.', '_' and '-' only")
        return v

    @model_validator(mode="after")
    def _network_and_devices(self) -> RunnerProfile:
        from harness.egress import check_hosts

        if self.network and not self.allowed_hosts:
            raise ValueError("network = true needs allowed_hosts, the hosts the agent may "
                             "reach (e.g. allowed_hosts = [\"api.anthropic.com\"])")
        self.allowed_hosts = check_hosts(self.allowed_hosts)
        if self.allowed_hosts:
            self.network = True
        if self.device in ("cuda", "npu") and not self.devices:
            what = "GPU ids" if self.device == "cuda" else "NPU (davinci) indices"
            raise ValueError(f"device = '{self.device}' needs devices, the {what} this "
                             "profile may use (e.g. devices = [\"0\"])")
        if self.device == "npu" and not all(str(d).isdigit() for d in self.devices):
            raise ValueError("npu devices are davinci indices: whole numbers such as \"0\"")
        return self


class RunnerSettings(_Model):
    profile: str = "cpu"
    profiles: dict[str, RunnerProfile] = Field(default_factory=lambda: {"cpu": RunnerProfile()})
    allowed_profiles: list[str] = Field(default_factory=list)
    """Profiles a proposal may pick (repo config only); empty: only ``profile``."""

    @property
    def active(self) -> RunnerProfile:
        return self.profiles[self.profile]

    @model_validator(mode="after")
    def _known(self) -> RunnerSettings:
        if self.profile not in self.profiles:
            if self.profile == "cpu":
                self.profiles["cpu"] = RunnerProfile()
            else:
                raise ValueError(
                    f"profile '{self.profile}' is not declared; declared: {', '.join(self.profiles) or 'none'}"
                )
        return self


class BotSettings(_Model):
    """``[bot]``: what the bot does for this repository (repo config only: a
    proposal cannot set it)."""

    on_failed_watch: Literal["revert-pr", "comment", "off"] = "revert-pr"
    """When a merged bot PR's gain does not reproduce after the merge (or a guard
    fails): ``revert-pr`` comments on the PR with both reports and opens a PR
    reverting the merge (a PR: maintainers still decide); ``comment`` only
    comments; ``off`` only rebaselines."""


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
        (``python -m tiny_tts.server``)."""
        extra: list[str] = []
        for bench in self.verify.benchmarks.values():
            extra += measuring_paths(bench)
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
    if agent.kind == "command" and not agent.command:
        errors.append("[agent]: kind 'command' needs 'command', a command template such as 'my-agent --task {task_file}'")
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
