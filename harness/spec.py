"""Task specs: from a proposal (an issue body) and the repo config to a task.

``TaskSpec`` = the repo config ``.rsi/config.toml`` read from the target repo's
default branch (never from a branch a proposal could control), overridden by
the proposal where it is allowed to. The verifier owns the sections
``benchmarks``, ``objective``, ``guards``, ``quality``, ``verifier`` and
``hidden`` (``verifier.config.VerifyConfig``); this module owns ``knobs``,
``policy``, ``agent`` and ``runner`` (see docs/contracts.md).

What a proposal may change, and how:

Proposals only tighten, in every field (a looser value is an error saying
the repo's bound), and every number must be a real number of the right kind:

=================  ==========================================================
``objective``      benchmark, metric; ``min_gain`` only raised (<= 10)
``guards``         added; one on the same benchmark+metric as a repo guard, or
                   as a verifier default guard, replaces it only when at least
                   as tight on every bound. Guards are never dropped.
``quality``        added (within hard caps); same rule (kind+output) as guards,
                   ``dtype`` and ``reference`` never changed
``verifier``       ``alpha`` only lowered, ``level``, margins, warm-ups, pair
                   counts and bootstrap sizes only raised, all within hard
                   bounds (``VERIFIER_RULES``); ``default_guards``,
                   ``require_external``, ``cross_check`` only turned on;
                   ``seed`` never
``agent``          ``kind`` from ``[agent] allowed_kinds``; ``rounds`` up to
                   ``max_rounds``; ``round_timeout_s``,
                   ``max_straight_rejections``, ``max_tokens`` and
                   ``max_cost_usd`` only lowered
``policy``         only tighter: ``editable`` narrows (a path must match both
                   lists), ``protected`` adds, ``max_changed_lines`` a whole
                   number lowered
``runner``         ``profile``: one of ``[runner] allowed_profiles``
=================  ==========================================================

Everything else (benchmark commands, hidden inputs, knobs, agent commands,
runner profiles) comes from the repo config only. Errors are collected, never
raised one at a time: ``SpecError.errors`` is a list a human can act on.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import tomllib
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.gitutil import GitError, default_branch, git
from harness.policy import EditPolicy, paths_named_by

CONFIG_PATH = ".rsi/config.toml"
VERIFIER_SECTIONS = ("benchmarks", "objective", "guards", "quality", "verifier", "hidden")
HARNESS_SECTIONS = ("knobs", "policy", "agent", "runner")
AGENT_KINDS = ("tuner", "replay", "command", "claude-code", "codex", "aider", "mini-swe-agent")
DEFAULT_IMAGE = "rsi-bot/base:bookworm"
SAFE_AGENT_KINDS = ("tuner", "replay")
"""Kinds a proposal may pick without the repo's ``allowed_kinds``: no external
agent, no API key, no network."""


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


class HiddenInputs(BaseModel):
    model_config = ConfigDict(extra="allow")
    env: dict[str, str] = Field(default_factory=dict)
    seed_env: str | None = None


class TaskSpec(BaseModel):
    """A validated task: everything the loop needs, nothing the agent may not see
    except through :meth:`visible`."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    task_id: str
    title: str = ""
    verify: Any = None
    """``verifier.config.VerifyConfig`` of the merged config."""
    config: dict[str, Any] = Field(default_factory=dict)
    """The merged config, as a dict in the repo config's layout."""
    knobs: list[Knob] = Field(default_factory=list)
    policy: EditPolicy = Field(default_factory=EditPolicy)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    runner: RunnerSettings = Field(default_factory=RunnerSettings)
    hidden: HiddenInputs = Field(default_factory=HiddenInputs)
    notes: str = ""
    """Free text from the proposal (the maintainer's idea), shown to the agent."""

    # --- convenience views used by the loop and TASK.md -------------------
    @property
    def objective(self) -> dict[str, Any]:
        return dict(self.config.get("objective", {}))

    @property
    def benchmark_name(self) -> str:
        return str(self.objective.get("benchmark", ""))

    @property
    def benchmark(self) -> dict[str, Any]:
        return dict(self.config.get("benchmarks", {}).get(self.benchmark_name, {}))

    @property
    def guards(self) -> list[dict[str, Any]]:
        return list(self.config.get("guards", []))

    @property
    def quality(self) -> list[dict[str, Any]]:
        return list(self.config.get("quality", []))

    @property
    def min_gain(self) -> float:
        return float(self.objective.get("min_gain", 0.0))

    def protected_paths(self) -> list[str]:
        """Protected globs: the policy's plus every file a benchmark command or
        setup names."""
        extra: list[str] = []
        for bench in self.config.get("benchmarks", {}).values():
            for key in ("command", "setup"):
                if isinstance(bench, dict) and isinstance(bench.get(key), str):
                    extra += paths_named_by(bench[key])
        return self.policy.all_protected(extra)

    def verifier_config_text(self) -> str:
        """The merged config as TOML (for a verifier running in a container)."""
        return dump_toml(self.config)


# ---------------------------------------------------------------- proposals


class Proposal(BaseModel):
    overrides: dict[str, Any] = Field(default_factory=dict)
    notes: str = ""
    errors: list[str] = Field(default_factory=list)


_FENCE_RX = re.compile(r"^```+\s*toml\s*\n(.*?)^```+\s*$", re.MULTILINE | re.DOTALL)
_EMPTY = {"", "_no response_", "none", "n/a", "-"}

_HEADINGS: dict[str, str] = {
    "benchmark": "benchmark",
    "objective": "metric",
    "metric": "metric",
    "objective metric": "metric",
    "minimum gain": "min_gain",
    "min gain": "min_gain",
    "min_gain": "min_gain",
    "guards": "guards",
    "agent": "agent",
    "rounds": "rounds",
    "budget": "rounds",
    "budget (rounds)": "rounds",
    "editable paths": "editable",
    "editable": "editable",
    "runner": "runner",
    "runner profile": "runner",
    "configuration": "toml",
    "config": "toml",
    "toml": "toml",
    "overrides": "toml",
}


def _clean(value: str) -> str:
    v = _FENCE_RX.sub("", value).strip()
    v = re.sub(r"^```.*?$", "", v, flags=re.MULTILINE).strip()
    return "" if v.lower() in _EMPTY else v


def _parse_gain(text: str) -> float:
    t = text.strip().lower().replace(" ", "")
    m = re.match(r"^\+?([0-9]*\.?[0-9]+)(%|x)?$", t)
    if not m:
        raise ValueError(f"'{text}' is not a gain; write 2%, 0.02 or 1.1x")
    v = float(m.group(1))
    if m.group(2) == "%":
        return v / 100.0
    if m.group(2) == "x":
        return v - 1.0
    return v


_GUARD_RX = re.compile(
    r"^(?:(?P<bench>[A-Za-z_][\w-]*)[.:])?(?P<metric>[A-Za-z_]\w*)\s*"
    r"(?:(?P<op><=|≤|<|>=|≥|>)|(?P<kw>max_ratio|max_delta|min_ratio|min_delta)\s*=?)\s*"
    r"(?P<sign>\+)?(?P<num>[0-9]*\.?[0-9]+)\s*(?P<unit>x|%)?\s*(?P<req>\(required\)|required)?$"
)


def _parse_guard_line(line: str) -> dict[str, Any]:
    m = _GUARD_RX.match(line.strip())
    if not m:
        raise ValueError(
            f"'{line.strip()}' is not a guard; write e.g. 'latency_p95_s <= 1.05x', "
            "'peak_rss_mib <= +50' or 'latency_p95_s max_ratio = 1.05'"
        )
    num = float(m.group("num"))
    g: dict[str, Any] = {"metric": m.group("metric")}
    if m.group("bench"):
        g["benchmark"] = m.group("bench")
    unit, kw, op = m.group("unit"), m.group("kw"), m.group("op") or ""
    side = "min" if (kw or "").startswith("min") or op.startswith((">", "≥")) else "max"
    if (kw or "").endswith("delta") or (m.group("sign") and unit != "%"):
        g[f"{side}_delta"] = num
    elif unit == "%":
        g[f"{side}_ratio"] = round(1.0 + num / 100.0 * (1 if side == "max" else -1), 10)
    else:
        g[f"{side}_ratio"] = num
    if m.group("req"):
        g["required"] = True
    return g


def _markdown_blocks(body: str) -> tuple[list[tuple[str, str]], list[str]]:
    """The ``### `` sections (heading, the text up to the next one) and the
    ```` ```toml ```` blocks of a proposal, from CommonMark's block structure
    (markdown-it-py): a heading or a TOML block inside a code fence or a quote
    is text, not structure."""
    from markdown_it import MarkdownIt

    lines = body.split("\n")
    tokens = MarkdownIt("commonmark").parse(body)
    heads: list[tuple[str, int, int]] = []  # (title, first line, line after it)
    fences: list[str] = []
    quoted = 0
    for i, t in enumerate(tokens):
        if t.type == "blockquote_open":
            quoted += 1
        elif t.type == "blockquote_close":
            quoted -= 1
        elif quoted or not t.map:
            continue
        elif t.type == "heading_open" and t.tag == "h3":
            heads.append((tokens[i + 1].content.strip(), t.map[0], t.map[1]))
        elif t.type == "fence" and (t.info.strip().split() or [""])[0].lower() == "toml":
            fences.append(t.content)
    sections = []
    for j, (title, _, after) in enumerate(heads):
        end = heads[j + 1][1] if j + 1 < len(heads) else len(lines)
        sections.append((title, "\n".join(lines[after:end])))
    return sections, fences


def parse_proposal(body: str | None) -> Proposal:
    """Read a proposal: GitHub issue-form sections (``### Benchmark`` ...) and/or
    fenced ```toml blocks (the TOML wins where both set a key)."""
    prop = Proposal()
    if not body or not body.strip():
        return prop
    body = body.replace("\r\n", "\n")
    form: dict[str, Any] = {}
    notes: list[str] = []

    sections, fences = _markdown_blocks(body)
    for heading, value in sections:
        key = _HEADINGS.get(heading.lower().rstrip(":"))
        value = _clean(value)
        if key == "toml" or not value:
            continue
        where = f"section '### {heading}'"
        try:
            if key is None:
                notes.append(f"{heading}:\n{value}")
            elif key == "benchmark":
                form.setdefault("objective", {})["benchmark"] = value.split()[0]
            elif key == "metric":
                mm = re.match(r"^[`\s]*([A-Za-z_]\w*)", value)
                if not mm:
                    raise ValueError(f"'{value}' does not start with a metric name")
                form.setdefault("objective", {})["metric"] = mm.group(1)
            elif key == "min_gain":
                form.setdefault("objective", {})["min_gain"] = _parse_gain(value.split()[0])
            elif key == "guards":
                guards = []
                for line in value.splitlines():
                    line = re.sub(r"^\s*(?:[-*]|\d+\.)\s*(?:\[[ xX]\]\s*)?", "", line).strip().strip("`")
                    if line and line.lower() not in _EMPTY:
                        guards.append(_parse_guard_line(line))
                if guards:
                    form["guards"] = guards
            elif key == "agent":
                form.setdefault("agent", {})["kind"] = value.split()[0].strip("`").lower()
            elif key == "rounds":
                mm = re.search(r"\d+", value)
                if not mm:
                    raise ValueError(f"'{value}' has no number of rounds")
                form.setdefault("agent", {})["rounds"] = int(mm.group(0))
            elif key == "editable":
                globs = [g.strip().strip("`") for g in re.split(r"[,\n]", value)]
                globs = [re.sub(r"^[-*]\s*", "", g) for g in globs if g.strip()]
                form.setdefault("policy", {})["editable"] = [g for g in globs if g]
            elif key == "runner":
                form.setdefault("runner", {})["profile"] = value.split()[0].strip("`")
        except ValueError as exc:
            prop.errors.append(f"proposal {where}: {exc}")

    toml_over: dict[str, Any] = {}
    for n, block in enumerate(fences, start=1):
        try:
            toml_over = _deep_merge(toml_over, tomllib.loads(block))
        except tomllib.TOMLDecodeError as exc:
            prop.errors.append(f"proposal toml block {n}: not valid TOML: {exc}")
    prop.overrides = _deep_merge(form, toml_over)
    if not sections and not fences:
        notes.append(body.strip())
    prop.notes = "\n\n".join(notes)
    return prop


def _deep_merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


# ------------------------------------------------------------------ merging
#
# Proposals only tighten. The repo config (default branch, maintainers) sets
# every rule; a proposal may make a rule stricter, within hard upper bounds
# (so a proposal cannot make a task unboundedly costly either), and may pick
# an agent kind or a runner profile only from the lists the repo config allows.
# Every refusal names the field, the repo's bound and what to write instead.

_ALLOWED = {
    "objective": {"benchmark", "metric", "min_gain"},
    "agent": {"kind", "rounds", "round_timeout_s", "max_straight_rejections", "max_tokens",
              "max_cost_usd"},
    "policy": {"editable", "protected", "max_changed_lines"},
    "runner": {"profile"},
}
_FROM_REPO_ONLY = {
    "benchmarks": "benchmark commands come from .rsi/config.toml on the default branch",
    "hidden": "hidden inputs come from .rsi/config.toml on the default branch",
    "knobs": "knobs come from .rsi/config.toml on the default branch",
}
#: [verifier] fields a proposal may set: (stricter direction, hard bound). "down":
#: only lower (a stricter test), never below the bound; "up": only raise (more
#: evidence), never above the bound (or the repo's own value, if higher).
VERIFIER_RULES: dict[str, tuple[str, float]] = {
    "alpha": ("down", 1e-4),
    "level": ("up", 0.999),
    "min_noise_margin": ("up", 0.5),
    "warmup": ("up", 10),
    "initial_pairs": ("up", 100),
    "step": ("up", 100),
    "max_pairs": ("up", 200),
    "calibration_pairs": ("up", 50),
    "bootstrap": ("up", 100_000),
}
_VERIFIER_FLAGS = {"default_guards": True, "require_external": True, "cross_check": True}
"""Boolean [verifier] settings a proposal may only turn to the strict value."""
_INT_FIELDS = {"warmup", "initial_pairs", "step", "max_pairs", "calibration_pairs", "bootstrap",
               "rounds", "max_straight_rejections", "max_changed_lines"}
#: Quality bounds: which may only go down; and hard caps for new quality guards.
_QUALITY_BOUNDS = ("max", "max_delta", "max_change", "rtol", "atol")
_QUALITY_CAPS = {"max": 1.0, "max_delta": 1.0, "max_change": 0.5, "rtol": 1.0, "atol": 1.0}
_QUALITY_DEFAULTS = {"output_length": {"max_change": 0.02}}
MAX_MIN_GAIN = 10.0


def _number(v: Any, field: str) -> str | None:
    """Why ``v`` is not a strict number for ``field`` (bools and strings refused)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return f"must be a number, not {type(v).__name__} {v!r}"
    if field in _INT_FIELDS and not isinstance(v, int):
        return f"must be a whole number, not {v!r}"
    if v != v or v in (float("inf"), float("-inf")):
        return f"must be a finite number, not {v!r}"
    return None


def _defaults(model: type[BaseModel]) -> dict[str, Any]:
    return model().model_dump()


def _verifier_defaults() -> dict[str, Any]:
    try:
        from verifier.config import VerifierSettings
    except ImportError:  # pragma: no cover
        return {}
    return _defaults(VerifierSettings)


def _bounded(label: str, value: Any, repo: Any, direction: str, cap: float) -> str | None:
    """Check one numeric override against the repo's value and a hard bound."""
    why = _number(value, label.rsplit(" ", 1)[-1])
    if why:
        return f"proposal {label}: {why}"
    if repo is None:
        return None
    if direction == "down":
        if value > repo:
            return (f"proposal {label} = {value} would loosen the repo's {repo}; a proposal "
                    f"may only lower it (between {cap:g} and {repo})")
        if value < cap:
            return f"proposal {label} = {value} is below the lowest allowed, {cap:g}"
    else:
        top = max(cap, repo)
        if value < repo:
            return (f"proposal {label} = {value} would loosen the repo's {repo}; a proposal "
                    f"may only raise it (between {repo} and {top:g})")
        if value > top:
            return f"proposal {label} = {value} is above the highest allowed, {top:g}"
    return None


def _guard_key(g: dict[str, Any], objective_bench: str) -> tuple[str, str]:
    return (str(g.get("benchmark", objective_bench)), str(g.get("metric", "")))


def _looser(new: dict[str, Any], old: dict[str, Any],
            bounds: tuple[tuple[str, bool], ...] = (("max_ratio", True), ("max_delta", True),
                                                    ("max", True), ("min_ratio", False),
                                                    ("min_delta", False))) -> str | None:
    """Why ``new`` is looser than ``old`` on some bound (None when not)."""
    for bound, upper in bounds:
        if bound in new and _number(new[bound], bound):
            return f"{bound} {_number(new[bound], bound)}"
        if bound in old:
            if bound not in new:
                return f"drops its {bound} = {old[bound]}"
            a, b = float(new[bound]), float(old[bound])
            if (a > b) if upper else (a < b):
                verb = "raises" if upper else "lowers"
                return f"{verb} {bound} from {old[bound]} to {new[bound]}"
    return None


def _metric_direction(repo: dict[str, Any], bench: str, metric: str) -> str | None:
    b = (repo.get("benchmarks") or {}).get(bench) or {}
    if not isinstance(b, dict):
        return None
    for key in ("metrics", "samples"):
        d = (b.get(key) or {})
        if isinstance(d, dict) and metric in d:
            return d[metric]
    try:
        from verifier.config import MEASURED, PERCENTILES, percentile_name
    except ImportError:  # pragma: no cover
        return None
    for series, d in (b.get("samples") or {}).items():
        if metric in {percentile_name(series, q) for q in PERCENTILES}:
            return d
    return MEASURED.get(metric)


def _default_guard(repo: dict[str, Any], bench: str, metric: str) -> dict[str, Any] | None:
    """The guard the verifier adds by default for this metric, if any."""
    if not (repo.get("verifier") or {}).get("default_guards", True):
        return None
    try:
        from verifier.config import default_bound
    except ImportError:  # pragma: no cover
        return None
    d = _metric_direction(repo, bench, metric)
    bound = default_bound(metric, d) if d else None
    return {"metric": metric, "max_ratio": bound} if bound is not None else None


def _merge_guards(repo: dict[str, Any], merged: dict[str, Any], value: Any,
                  obj_bench: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(g, dict) for g in value):
        return ["proposal [[guards]]: must be an array of tables"]
    errors: list[str] = []
    current = [dict(g) for g in merged.get("guards", [])]
    for i, g in enumerate(value, start=1):
        key = _guard_key(g, obj_bench)
        where = f"proposal guard {i} ({key[1]})"
        if "default" in g:
            errors.append(f"{where}: 'default' is set by the verifier, not by a proposal")
            continue
        if "required" in g and g["required"] is not True:
            errors.append(f"{where}: a proposal may only set required = true")
            continue
        same = [j for j, c in enumerate(current) if _guard_key(c, obj_bench) == key]
        old = current[same[0]] if same else _default_guard(repo, *key)
        why = _looser(g, old) if old else _looser(g, {})
        if why:
            whose = ("the repo config's guard" if same else "the verifier's default guard")
            have = ", ".join(f"{k} = {v}" for k, v in (old or {}).items()
                             if k not in ("metric", "benchmark", "required", "default"))
            errors.append(f"{where}: {why}; {whose} says {have or 'nothing'}, and a proposal "
                          "may only tighten it" if old else f"{where}: {why}")
            continue
        new = dict(g)
        if same:
            if current[same[0]].get("required"):
                new["required"] = True
            current[same[0]] = new
        else:
            current.append(new)
    merged["guards"] = current
    return errors


def _quality_key(q: dict[str, Any], obj_bench: str) -> tuple[str, str, str]:
    return (str(q.get("kind")), str(q.get("output")), str(q.get("benchmark", obj_bench)))


def _merge_quality(merged: dict[str, Any], value: Any, obj_bench: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(g, dict) for g in value):
        return ["proposal [[quality]]: must be an array of tables"]
    errors: list[str] = []
    current = [dict(q) for q in merged.get("quality", [])]
    for i, q in enumerate(value, start=1):
        key = _quality_key(q, obj_bench)
        where = f"proposal quality guard {i} ({key[0]} on {key[1]})"
        bad = [f"{b} {_number(q[b], b)}" for b in _QUALITY_BOUNDS if b in q and _number(q[b], b)]
        if bad:
            errors.append(f"{where}: {'; '.join(bad)}")
            continue
        same = [j for j, c in enumerate(current) if _quality_key(c, obj_bench) == key]
        if not same:
            over = [f"{b} = {q[b]} is above the highest allowed, {cap:g}"
                    for b, cap in _QUALITY_CAPS.items() if b in q and q[b] > cap]
            if over:
                errors.append(f"{where}: {'; '.join(over)}")
            else:
                current.append(dict(q))
            continue
        old = {**_QUALITY_DEFAULTS.get(key[0], {}), **current[same[0]]}
        new = {**_QUALITY_DEFAULTS.get(key[0], {}), **q}
        why = _looser(new, old, tuple((b, True) for b in _QUALITY_BOUNDS))
        for fixed in ("dtype", "reference"):
            if new.get(fixed) != old.get(fixed) and fixed in q:
                why = why or f"changes {fixed} from {old.get(fixed)!r} to {new.get(fixed)!r}"
        if why:
            errors.append(f"{where}: {why}; the repo config's quality guard is "
                          f"{current[same[0]]}, and a proposal may only tighten it")
            continue
        current[same[0]] = {**current[same[0]], **q}
    merged["quality"] = current
    return errors


def _merge_verifier(repo: dict[str, Any], merged: dict[str, Any], value: Any) -> list[str]:
    if not isinstance(value, dict):
        return ["proposal [verifier]: must be a table"]
    base = {**_verifier_defaults(), **(repo.get("verifier") or {})}
    errors: list[str] = []
    ok: dict[str, Any] = {}
    for k, v in value.items():
        if k in VERIFIER_RULES:
            direction, cap = VERIFIER_RULES[k]
            why = _bounded(f"[verifier] {k}", v, base.get(k), direction, cap)
        elif k in _VERIFIER_FLAGS:
            why = None if v is _VERIFIER_FLAGS[k] or v == base.get(k) and isinstance(v, bool) \
                else (f"proposal [verifier] {k}: a proposal may only set it to "
                      f"{str(_VERIFIER_FLAGS[k]).lower()}")
        else:
            why = (f"proposal [verifier] {k}: not settable by a proposal; it may set "
                   f"{', '.join(sorted([*VERIFIER_RULES, *_VERIFIER_FLAGS]))}, each only "
                   "stricter than .rsi/config.toml")
        if why:
            errors.append(why)
        else:
            ok[k] = v
    merged["verifier"] = {**merged.get("verifier", {}), **ok}
    return errors


def _merge_agent(repo: dict[str, Any], merged: dict[str, Any], ok: dict[str, Any]) -> list[str]:
    base = {**_defaults(AgentSettings), **(repo.get("agent") or {})}
    errors: list[str] = []
    allowed = base.get("allowed_kinds") or [base["kind"], *(k for k in SAFE_AGENT_KINDS
                                                            if k != base["kind"])]
    if "kind" in ok and ok["kind"] not in allowed:
        errors.append(f"proposal [agent] kind = {ok['kind']!r}: the repo config allows "
                      f"{', '.join(map(repr, allowed))}; add it to [agent] allowed_kinds in "
                      ".rsi/config.toml to allow it")
    checks = {"rounds": (base.get("max_rounds"), 1), "round_timeout_s": (base["round_timeout_s"], 1),
              "max_straight_rejections": (base["max_straight_rejections"], 1)}
    for k, (top, low) in checks.items():
        if k not in ok:
            continue
        why = _number(ok[k], k)
        if why is None and not low <= ok[k] <= top:
            why = f"= {ok[k]} is outside {low}..{top}, the bounds the repo config sets"
        if why:
            errors.append(f"proposal [agent] {k} {why}")
    for k in ("max_tokens", "max_cost_usd"):  # spending budgets: a proposal only lowers them
        if k in ok and (_number(ok[k], k) or (base.get(k) is not None and ok[k] > base[k])):
            errors.append(f"proposal [agent] {k} = {ok[k]!r}: must be a number no higher than "
                          f"the repo config's ({base.get(k)})")
    merged["agent"] = {**merged.get("agent", {}), **ok}
    return errors


def _merge_runner(repo: dict[str, Any], merged: dict[str, Any], ok: dict[str, Any]) -> list[str]:
    base = repo.get("runner") or {}
    allowed = base.get("allowed_profiles") or [base.get("profile", "cpu")]
    declared = list(base.get("profiles") or {"cpu": {}})
    if "profile" in ok and ok["profile"] not in declared:
        return [f"proposal [runner] profile '{ok['profile']}' is not declared; declared: "
                f"{', '.join(declared)}"]
    if "profile" in ok and ok["profile"] not in allowed:
        return [f"proposal [runner] profile = {ok['profile']!r}: the repo config allows "
                f"{', '.join(map(repr, allowed))}; add it to [runner] allowed_profiles in "
                ".rsi/config.toml to allow it"]
    merged["runner"] = {**merged.get("runner", {}), **ok}
    return []


def _strings(v: Any) -> list[str] | None:
    v = [v] if isinstance(v, str) else v
    return v if isinstance(v, list) and all(isinstance(x, str) for x in v) else None


def _merge_policy(merged: dict[str, Any], ok: dict[str, Any]) -> list[str]:
    pol = dict(merged.get("policy", {}))
    errors: list[str] = []
    for k in ("editable", "protected"):
        if k in ok and _strings(ok[k]) is None:
            errors.append(f"proposal [policy] {k}: must be a list of path globs (strings)")
    if "editable" in ok and _strings(ok["editable"]) is not None:
        pol["narrow"] = _strings(ok["editable"])
    if any(g.lstrip().startswith("!") for g in _strings(ok.get("protected")) or []):
        errors.append("proposal [policy] protected: a '!' glob would un-protect paths; a "
                      "proposal may only add protected paths")
    elif "protected" in ok and _strings(ok["protected"]) is not None:
        have = list(pol.get("protected", []))
        pol["protected"] = have + [p for p in _strings(ok["protected"]) if p not in have]
    if "max_changed_lines" in ok:
        cap = pol.get("max_changed_lines", EditPolicy().max_changed_lines)
        v = ok["max_changed_lines"]
        why = _number(v, "max_changed_lines")
        if why is None and not 1 <= v <= cap:
            why = (f"= {v} is outside 1..{cap}: the repo's cap is {cap} and a proposal may "
                   "only lower it")
        if why:
            errors.append(f"proposal [policy] max_changed_lines {why}")
        else:
            pol["max_changed_lines"] = v
    merged["policy"] = pol
    return errors


def _merge_objective(repo: dict[str, Any], merged: dict[str, Any], ok: dict[str, Any]
                     ) -> list[str]:
    errors = []
    for k in ("benchmark", "metric"):
        if k in ok and not isinstance(ok[k], str):
            errors.append(f"proposal [objective] {k}: must be a name (a string)")
    if "min_gain" in ok:
        floor = float((repo.get("objective") or {}).get("min_gain", 0.0) or 0.0)
        why = _number(ok["min_gain"], "min_gain")
        if why is None and not floor <= ok["min_gain"] <= MAX_MIN_GAIN:
            why = (f"= {ok['min_gain']} is outside {floor:g}..{MAX_MIN_GAIN:g}: the repo "
                   f"config asks for at least {floor:g} and a proposal may only raise it")
        if why:
            errors.append(f"proposal [objective] min_gain {why}")
    if not errors:
        merged["objective"] = {**merged.get("objective", {}), **ok}
    return errors


_SECTION_MERGE = {"agent": _merge_agent, "runner": _merge_runner,
                  "objective": _merge_objective}


def merge_proposal(repo: dict[str, Any], over: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Apply a proposal's overrides to the repo config; return (merged, errors).
    Proposals only tighten (see the comment above :data:`VERIFIER_RULES`)."""
    errors: list[str] = []
    merged = {k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v) for k, v in repo.items()}
    ob = over.get("objective") if isinstance(over.get("objective"), dict) else {}
    obj_bench = str(ob.get("benchmark") or (repo.get("objective") or {}).get("benchmark", ""))

    for section, value in over.items():
        if section in _FROM_REPO_ONLY:
            errors.append(f"proposal [{section}]: not allowed in a proposal; {_FROM_REPO_ONLY[section]}")
        elif section in _ALLOWED:
            if not isinstance(value, dict):
                errors.append(f"proposal [{section}]: must be a table")
                continue
            bad = sorted(set(value) - _ALLOWED[section])
            for k in bad:
                errors.append(
                    f"proposal [{section}] {k}: a proposal may only set "
                    f"{', '.join(sorted(_ALLOWED[section]))} here; '{k}' comes from .rsi/config.toml"
                )
            ok = {k: v for k, v in value.items() if k not in bad}
            if section == "policy":
                errors += _merge_policy(merged, ok)
            else:
                errors += _SECTION_MERGE[section](repo, merged, ok)
        elif section == "guards":
            errors += _merge_guards(repo, merged, value, obj_bench)
        elif section == "quality":
            errors += _merge_quality(merged, value, obj_bench)
        elif section == "verifier":
            errors += _merge_verifier(repo, merged, value)
        else:
            errors.append(
                f"proposal [{section}]: unknown section; a proposal may set objective, guards, quality, "
                "verifier, agent, policy and runner"
            )
    return merged, errors


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


def _verify_config(merged: dict[str, Any]) -> tuple[Any, list[str]]:
    try:
        from verifier.config import ConfigError, VerifyConfig
    except ImportError as exc:  # pragma: no cover - the verifier ships with us
        return None, [f"the verifier is not installed ({exc})"]
    text_dict = {k: v for k, v in merged.items() if k in VERIFIER_SECTIONS}
    try:
        return VerifyConfig.from_dict(text_dict), []
    except ConfigError as exc:
        return None, list(getattr(exc, "errors", [str(exc)]))


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

    prop = parse_proposal(proposal_body)
    errors += prop.errors
    merged, merge_errors = merge_proposal(repo, prop.overrides)
    errors += merge_errors

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

    def section(model: type[BaseModel], key: str, label: str) -> Any:
        try:
            return model.model_validate(merged.get(key, {}) or {})
        except ValidationError as exc:
            errors.extend(_fmt_pydantic(label, exc))
            return model()

    policy = section(EditPolicy, "policy", "[policy]")
    agent = section(AgentSettings, "agent", "[agent]")
    runner = section(RunnerSettings, "runner", "[runner]")
    hidden = section(HiddenInputs, "hidden", "[hidden]")
    if agent.kind == "command" and not agent.command:
        errors.append("[agent]: kind 'command' needs 'command', a command template such as 'my-agent --task {task_file}'")
    if agent.kind == "tuner" and not knobs and "kind" in (merged.get("agent") or {}):
        errors.append("[agent]: kind 'tuner' needs at least one [[knobs]] entry in .rsi/config.toml")

    verify, verify_errors = _verify_config(merged)
    errors += verify_errors
    if errors:
        raise SpecError(errors)
    return TaskSpec(
        task_id=task_id,
        title=title,
        verify=verify,
        config=merged,
        knobs=knobs,
        policy=policy,
        agent=agent,
        runner=runner,
        hidden=hidden,
        notes=prop.notes,
    )


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


# --------------------------------------------------------------- TOML out


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else _toml_value(k)


def dump_toml(data: dict[str, Any]) -> str:
    """A small TOML writer for config dicts (tables, arrays of tables, scalars)."""
    lines: list[str] = []

    def emit(d: dict[str, Any], prefix: str) -> None:
        scalars = {k: v for k, v in d.items() if not isinstance(v, dict) and not _is_aot(v)}
        tables = {k: v for k, v in d.items() if isinstance(v, dict)}
        aots = {k: v for k, v in d.items() if _is_aot(v)}
        for k, v in scalars.items():
            lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
        for k, v in tables.items():
            name = f"{prefix}.{_toml_key(k)}" if prefix else _toml_key(k)
            lines.append("")
            lines.append(f"[{name}]")
            emit(v, name)
        for k, v in aots.items():
            name = f"{prefix}.{_toml_key(k)}" if prefix else _toml_key(k)
            for item in v:
                lines.append("")
                lines.append(f"[[{name}]]")
                emit(item, name)

    emit(data, "")
    return "\n".join(lines).lstrip("\n") + "\n"


def _is_aot(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)
