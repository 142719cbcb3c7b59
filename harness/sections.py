"""The harness's sections of the repo config: ``knobs``, ``[agent]``, ``[runner]``.

The models :class:`harness.spec.TaskSpec` is made of, kept in a module of their
own below ``spec``, ``merge``, ``sandbox`` and ``egress`` so that all of them
can import them without going round in a circle (``spec`` builds a task with
``merge``; ``merge`` needs ``AgentSettings``' defaults; ``sandbox`` runs a
``RunnerProfile``; a profile checks its hosts with :func:`check_hosts`, which
``egress`` uses too). Each agent kind's config model is here too
(:data:`AGENT_CONFIGS`): an unknown kind, or a kind without what it needs, is
an error when the config is read. It imports nothing of ours.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

DEFAULT_IMAGE = "rsi-bot/base:bookworm"
_HOST_RX = re.compile(r"(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


def check_hosts(hosts: Iterable[str]) -> list[str]:
    """The allowed hosts, lower-cased; ``ValueError`` naming a bad one. A host is a
    DNS name (``api.example.com``) or a wildcard over its subdomains
    (``*.example.com``); no IP addresses, ports, schemes or paths."""
    out = []
    for h in hosts:
        name = str(h).strip().lower().rstrip(".")
        if not _HOST_RX.fullmatch(name) or re.fullmatch(r"[0-9.]+", name) or "." not in name:
            raise ValueError(
                f"allowed host {h!r}: write a DNS name such as 'api.openai.com' or "
                "'*.example.com' (no scheme, port, path or IP address)")
        out.append(name)
    return out


MODEL_BASE_ENV = ("OPENAI_API_BASE", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_BASE")
"""The runner profile ``env`` names of a model API's base URL (the model gateway's upstream)."""


def wildcard_over(host: str, allowed: Iterable[str]) -> str | None:
    """The first wildcard of ``allowed`` that covers ``host`` (``*.example.com``
    covers ``api.example.com`` and ``example.com``), or None."""
    host = host.strip().lower().rstrip(".")
    for h in allowed:
        name = str(h).strip().lower().rstrip(".")
        if host and name.startswith("*.") and (host.endswith(name[1:]) or host == name[2:]):
            return name
    return None


def no_wildcard_over_model_api(env: dict[str, str], allowed: Iterable[str]) -> None:
    """``ValueError`` when a wildcard of ``allowed`` covers the host of a model
    API base URL that ``env`` names (:data:`MODEL_BASE_ENV`): the agent could
    reach it around the model gateway, which holds the key and meters every call."""
    allowed = list(allowed)
    for name in MODEL_BASE_ENV:
        up = (urlsplit(env[name]).hostname or "").lower() if env.get(name) else ""
        h = wildcard_over(up, allowed)
        if h:
            raise ValueError(
                f"allowed host {h!r} covers the model API's host {up!r} ({name}): the agent could "
                "reach it around the model gateway, which holds the key and meters every call; "
                f"list {up!r} by its exact name and no wildcard over it")


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


class TunerConfig(BaseModel):
    """``tuner``: nothing of its own in ``[agent]`` (it tunes the task's ``knobs``)."""


class ReplayConfig(BaseModel):
    """``replay``: the patch files it applies, one per round."""

    patches: list[str] = Field(default_factory=list)


class CommandConfig(BaseModel):
    """``command``: an external agent CLI run from ``command``, a template."""

    command: str | None = None
    model: str | None = None
    env: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _has_command(self) -> CommandConfig:
        if not (self.command or "").strip():
            raise ValueError("kind 'command' needs 'command', a command template such as "
                             "'my-agent --task {task_file}'")
        return self


class PresetConfig(BaseModel):
    """A preset agent CLI (``claude-code``, ``codex``, ``aider``,
    ``mini-swe-agent``): its command is the preset's unless ``command`` is set."""

    command: str | None = None
    model: str | None = None
    env: list[str] = Field(default_factory=list)


AGENT_CONFIGS: dict[str, type[BaseModel]] = {
    "tuner": TunerConfig,
    "replay": ReplayConfig,
    "command": CommandConfig,
    "claude-code": PresetConfig,
    "codex": PresetConfig,
    "aider": PresetConfig,
    "mini-swe-agent": PresetConfig,
}
"""Each agent kind's config model: what its ``[agent]`` fields must satisfy,
checked when the config is read (:meth:`AgentSettings._kind_settings`). The
factories are :data:`harness.agents.registry.AGENTS`, keyed the same (checked
when that module is imported)."""
AGENT_KINDS = tuple(AGENT_CONFIGS)


def check_agent_kind(kind: str) -> str:
    """``kind`` when it is a known agent kind; ``ValueError`` listing the known ones."""
    if kind not in AGENT_CONFIGS:
        raise ValueError(f"unknown agent kind '{kind}'; known: {', '.join(AGENT_KINDS)}")
    return kind


def check_agent_settings(settings: AgentSettings) -> BaseModel:
    """``settings`` read by its kind's config model (:data:`AGENT_CONFIGS`);
    ``ValueError`` saying what the kind needs."""
    model = AGENT_CONFIGS[check_agent_kind(settings.kind)]
    try:
        return model.model_validate(settings.model_dump(include=set(model.model_fields)))
    except ValidationError as exc:
        raise ValueError("; ".join(str(e["msg"]).removeprefix("Value error, ")
                                   for e in exc.errors())) from None


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
        return check_agent_kind(v)

    @model_validator(mode="after")
    def _kind_settings(self) -> AgentSettings:
        check_agent_settings(self)
        return self


def environment_kind(path: str) -> Literal["requirements", "dockerfile"] | None:
    """What a runner profile's ``environment`` file is, by its name: a
    requirements or lock file (``*.txt``), a Dockerfile, or neither (None)."""
    name = path.rsplit("/", 1)[-1]
    if name == "Dockerfile" or name.endswith(".Dockerfile") or name.startswith("Dockerfile."):
        return "dockerfile"
    if name.endswith(".txt"):
        return "requirements"
    return None


class RunnerProfile(_Model):
    image: str = DEFAULT_IMAGE
    environment: str | None = None
    """The target's own environment for the verifier's containers (its
    benchmark, server, client and evaluator): a file of the repository, read
    from B0's tree (never a candidate's), either a requirements or lock file
    (``*.txt``: its requirements are installed on the runtime image, from
    wheels built on this host; the image build has no network) or a
    Dockerfile (``Dockerfile``, ``*.Dockerfile``, ``Dockerfile.*``: built with
    its folder as context and ``--build-arg RSI_RUNTIME=<the runtime image>``;
    begin it ``ARG RSI_RUNTIME`` / ``FROM ${RSI_RUNTIME}``, or install rsi-bot
    in it). Built once, found again by a digest of what it was built from
    (``rsi-bot/env:<digest>``); nothing of the host is mounted."""
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


    @field_validator("environment")
    @classmethod
    def _environment(cls, v: str | None) -> str | None:
        if v is None:
            return v
        parts = v.replace("\\", "/").split("/")
        if not v.strip() or v.startswith("/") or any(p in ("", ".", "..") for p in parts) or parts[-1].startswith("-"):
            raise ValueError(f"environment {v!r}: a path inside the repository, relative to its root and "
                             "without '..' (e.g. \"bench/requirements.txt\" or \"docker/bench.Dockerfile\")")
        if environment_kind(v) is None:
            raise ValueError(f"environment {v!r}: name a requirements or lock file (*.txt) or a Dockerfile "
                             "(Dockerfile, *.Dockerfile, Dockerfile.*)")
        return v

    @field_validator("runs_on")
    @classmethod
    def _labels(cls, v: list[str]) -> list[str]:
        for label in v:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", label):
                raise ValueError(f"runs_on label {label!r}: letters, digits, '.', '_' and '-' only")
        return v

    @model_validator(mode="after")
    def _network_and_devices(self) -> RunnerProfile:
        if self.network and not self.allowed_hosts:
            raise ValueError("network = true needs allowed_hosts, the hosts the agent may "
                             "reach (e.g. allowed_hosts = [\"api.anthropic.com\"])")
        self.allowed_hosts = check_hosts(self.allowed_hosts)
        no_wildcard_over_model_api(self.env, self.allowed_hosts)
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
