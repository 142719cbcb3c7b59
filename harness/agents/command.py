"""``command``: an external coding-agent CLI run in the agent container.

The prompt is TASK.md (the host's file, mounted read-only at
``/rsi/TASK.md``); the agent's tree (a plain export of Bk, no ``.git``, owned by
the sandbox uid) is mounted read-write at ``/work/repo``; the agent's only
other writable dir is its scratch dir at ``/rsi/out``, where it writes its
one-line hypothesis (``/rsi/out/hypothesis.txt``; or it prints a line
``RSI-HYPOTHESIS: ...``). The host reads the hypothesis without following
links, from regular files only, size-capped; the log is the container's
output, written by the host into its own dir. A preset with network reaches its
model through the model gateway only (:mod:`harness.gateway`: claude-code
speaks Anthropic messages, the others OpenAI; :meth:`CommandAgent.route`), which
holds the key: no variable with a secret-like name reaches a preset's
container. A custom ``command`` goes through the gateway when the profile's
``env`` names a base URL; else the variables named in ``[agent] env`` are read
from the runner's environment and passed to it. Every secret is redacted from
every log and never written to the state dir or the ledger. Network is on only
when the runner profile says ``network = true`` (the agent's model API).

Presets (override any with ``[agent] command``):

==============  ==============================================================
claude-code     ``claude -p "$(cat TASK.md)" --dangerously-skip-permissions``
codex           ``codex exec --dangerously-bypass-approvals-and-sandbox ...`` (in our sandbox)
aider           ``aider --yes-always --no-git --stream ... --message-file TASK.md``
mini-swe-agent  ``mini --yolo --exit-immediately -o /rsi/out/trajectory.json -t ...``
==============  ==============================================================

Each runs from the agents image (:mod:`harness.images`: ``/opt/rsi/agents/<preset>``),
its ``bin`` first on ``PATH``: a venv for aider and mini-swe-agent (built from
the pins in ``scripts/agents-constraints/``), the npm packages' native binaries
for claude-code and codex (pinned in ``scripts/agents-constraints/npm.txt``,
fetched by ``scripts/setup-agents.sh``; no node needed). Nothing of the host is
mounted but the agent's tree, TASK.md and its scratch dir. Each preset sets the
non-secret variables its agent needs to run unattended (no first-run wizard,
no update checks, telemetry or price-table download). The model API is named
in the runner profile's ``env`` (``OPENAI_API_BASE``, ``ANTHROPIC_BASE_URL``;
else the provider's own) and reached through the gateway only.

Usage (tokens in and out, from the endpoint's OpenAI ``usage``): read from
mini-swe-agent's trajectory (every response as the API returned it) and from
aider's per-message ``Tokens: N sent, M received`` report (rounded by aider
above 1k), as the agent's client reported them (:mod:`usage`).

Placeholders in a template (shell-quoted when filled): ``{task_file}``,
``{hypothesis_file}``, ``{out_dir}`` (the agent's scratch dir), ``{workdir}``, ``{python}``, ``{model}``, and
``{model_flag}`` (the preset's model option, empty when no model is set).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import images, leaks, sandbox
from harness.agents.base import AgentContext, AgentOutcome, UnsafeFile, read_agent_file
from harness.agents.usage import read_usage
from harness.gateway import GatewayRoute, check_allowed_hosts
from harness.leaks import SECRET_NAME, host_secrets
from harness.ledger import Usage
from harness.sections import RunnerProfile
from harness.workspace import hand_to_sandbox

IO_DIR = "/rsi"
OUT_DIR = "/rsi/out"
WORKDIR = "/work/repo"
HYPOTHESIS_FILE = "hypothesis.txt"
HYPOTHESIS_MARK = "RSI-HYPOTHESIS:"


def agents_venv(preset: str) -> Path:
    """Where ``scripts/setup-agents.sh`` put a preset on the host (for trying an
    agent by hand; containers run the agents image, :func:`harness.images.agents_dir`)."""
    return images.agents_dir() / preset


_LITELLM_OFFLINE = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}


@dataclass(frozen=True)
class Preset:
    command: str
    env: tuple[str, ...] = ()
    """Secrets passed from the runner's environment (redacted everywhere)."""
    model_flag: str = "--model"
    fixed_env: tuple[tuple[str, str], ...] = ()
    """Non-secret variables that make the agent run unattended."""
    venv: bool = False
    """Runs from its dir in the agents image (:data:`harness.images.AGENTS_ROOT`)."""
    usage: str = ""
    """How its token usage is read: ``mini-trajectory`` | ``aider-report``."""
    api: str = "openai"
    """The model API it speaks through the gateway: ``openai`` | ``anthropic``."""


DEFAULT_UPSTREAMS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com/v1"}
"""Where a preset's model API is when the runner profile's ``env`` names no base URL."""
UPSTREAM_ENV = {"openai": (("OPENAI_API_BASE", "OPENAI_BASE_URL"), "OPENAI_API_KEY"),
                "anthropic": (("ANTHROPIC_BASE_URL", "ANTHROPIC_API_BASE"), "ANTHROPIC_API_KEY")}
"""Per API: the profile ``env`` names of its base URL, and the runner's variable holding its key."""

_NODE_QUIET = {  # no update checks, telemetry, error reports or other calls beside the model's
    "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1",
    "CLAUDE_CONFIG_DIR": "/tmp/home/.claude", "NO_UPDATE_NOTIFIER": "1",
}


PRESETS: dict[str, Preset] = {
    "claude-code": Preset(
        'claude -p "$(cat {task_file})" --dangerously-skip-permissions --output-format text {model_flag}',
        ("ANTHROPIC_API_KEY",),
        fixed_env=tuple(_NODE_QUIET.items()),
        venv=True,
        api="anthropic",
    ),
    "codex": Preset(
        'codex exec --dangerously-bypass-approvals-and-sandbox --skip-git-repo-check --ephemeral --color never '
        '{model_flag} -c model_provider=rsi -c model_providers.rsi.name=rsi '
        '-c "model_providers.rsi.base_url=\\"$OPENAI_BASE_URL\\"" -c model_providers.rsi.env_key=OPENAI_API_KEY '
        '-c model_providers.rsi.wire_api=responses "$(cat {task_file})"',
        ("OPENAI_API_KEY",),
        model_flag="-m",
        fixed_env=tuple(_NODE_QUIET.items()),
        venv=True,
    ),
    "aider": Preset(
        "aider --yes-always --no-git --no-auto-commits --no-check-update --no-show-model-warnings "
        "--no-show-release-notes --analytics-disable --stream --no-pretty --no-fancy-input "
        "--map-tokens 0 --edit-format diff --no-auto-lint --no-detect-urls --input-history-file /tmp/aider.input.history "
        "--chat-history-file {out_dir}/aider.chat.md --llm-history-file /tmp/aider.llm.history "
        "{model_flag} --message-file {task_file}",
        ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"),
        fixed_env=tuple({**_LITELLM_OFFLINE, "AIDER_CHECK_UPDATE": "false"}.items()),
        venv=True,
        usage="aider-report",
    ),
    "mini-swe-agent": Preset(
        'mini --yolo --exit-immediately {model_flag} -o {out_dir}/trajectory.json -t "$(cat {task_file})"',
        ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "MSWEA_MODEL_NAME"),
        model_flag="-m",
        fixed_env=tuple({
            **_LITELLM_OFFLINE,
            "MSWEA_CONFIGURED": "true",  # no first-run wizard
            "MSWEA_SILENT_STARTUP": "1",
            "MSWEA_COST_TRACKING": "ignore_errors",  # unknown models have no price: cost 0, not a crash
            "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "3",
            "MSWEA_GLOBAL_CONFIG_DIR": "/tmp/home/.config/mini-swe-agent",
        }.items()),
        venv=True,
        usage="mini-trajectory",
    ),
}


def render_command(template: str, *, model: str | None, model_flag: str = "--model") -> str:
    values = {
        "task_file": f"{IO_DIR}/TASK.md",
        "out_dir": OUT_DIR,
        "hypothesis_file": f"{OUT_DIR}/{HYPOTHESIS_FILE}",
        "workdir": WORKDIR,
        "python": sandbox.python_executable(),
        "model": model or "",
        "model_flag": f"{model_flag} {shlex.quote(model)}" if model else "",
    }
    quoted = {k: (shlex.quote(v) if k not in ("model_flag",) and v else v) for k, v in values.items()}
    # only our placeholders: shell's own ${VAR} and {a,b} stay as written
    return re.sub(r"\{(" + "|".join(quoted) + r")\}", lambda m: quoted[m.group(1)], template)


@dataclass
class CommandAgent:
    """Runs ``template`` with ``/bin/sh -c`` in a sandbox container."""

    template: str
    env_names: tuple[str, ...] = ()
    model: str | None = None
    model_flag: str = "--model"
    name: str = "command"
    profile: RunnerProfile | None = None
    extra_mounts: list[sandbox.Mount] = field(default_factory=list)
    environ: dict[str, str] | None = None
    """Where API keys are read from (default: os.environ)."""
    fixed_env: dict[str, str] = field(default_factory=dict)
    venv: str | None = None
    """The agents image's venv of this preset (its bin first on PATH); the run then uses the agents image."""
    usage: str = ""
    api: str | None = None
    """The model API a preset speaks (``openai``/``anthropic``): it always runs
    behind the gateway. None (a custom ``command``): behind the gateway when the
    profile's ``env`` names a base URL."""
    upstream_networks: tuple[str, ...] = ("bridge",)
    """Where the egress proxy reaches the model API from (tests: the fake model's network)."""

    @classmethod
    def preset(cls, kind: str, **kw) -> CommandAgent:
        p = PRESETS[kind]
        env = tuple(dict.fromkeys([*p.env, *kw.pop("env_names", ())]))
        return cls(template=p.command, env_names=env, model_flag=p.model_flag, name=kind,
                   fixed_env=dict(p.fixed_env), venv=f"{images.AGENTS_ROOT}/{kind}" if p.venv else None,
                   usage=p.usage, api=p.api, **kw)

    def _venv_parts(self) -> tuple[list[sandbox.Mount], dict[str, str]]:
        if self.venv is None:
            return [], {}
        return [], {"PATH": f"{self.venv}/bin:{sandbox.sandbox_path()}"}

    def _profile(self, profile: RunnerProfile) -> RunnerProfile:
        """A venv preset on the default image runs in the agents image (which holds its venv)."""
        if self.venv is None or profile.image != images.BASE_IMAGE:
            return profile
        return profile.model_copy(update={"image": images.agents_image()})

    def command_line(self) -> str:
        return render_command(self.template, model=self.model, model_flag=self.model_flag)

    def _job(self, ctx: AgentContext, scratch: Path, passed: dict[str, str], network: bool) -> sandbox.SandboxJob:
        venv_mounts, venv_env = self._venv_parts()
        mounts = [
            *venv_mounts,
            sandbox.Mount(source=str(ctx.worktree), target=WORKDIR, read_only=False),
            sandbox.Mount(source=str(ctx.task_file), target=f"{IO_DIR}/TASK.md", read_only=True),
            sandbox.Mount(source=str(scratch), target=OUT_DIR, read_only=False),
            *self.extra_mounts,
        ]
        return sandbox.SandboxJob(
            command=["/bin/sh", "-c", self.command_line()],
            mounts=mounts,
            workdir=WORKDIR,
            env={
                **self.fixed_env,
                **venv_env,
                **passed,
                "RSI_TASK_FILE": f"{IO_DIR}/TASK.md",
                "RSI_HYPOTHESIS_FILE": f"{OUT_DIR}/{HYPOTHESIS_FILE}",
                "RSI_OUT_DIR": OUT_DIR,
                "RSI_WORKDIR": WORKDIR,
                "RSI_ROUND": str(ctx.round),
            },
            timeout_s=ctx.timeout_s,
            network=network,
        )

    def upstream(self, profile: RunnerProfile) -> tuple[str, str] | None:
        """(the model API's base URL, the runner variable holding its key) of
        this agent, or None when it runs without the gateway."""
        for api in ([self.api] if self.api else list(UPSTREAM_ENV)):
            names, key_name = UPSTREAM_ENV[api]
            base = next((profile.env[n] for n in names if profile.env.get(n)), "")
            if base or self.api:
                base = (base or DEFAULT_UPSTREAMS[api]).rstrip("/")
                if api == "anthropic" and not base.endswith("/v1"):  # Anthropic's base URLs omit it
                    base += "/v1"
                return base, key_name
        return None

    def route(self, ctx: AgentContext, profile: RunnerProfile, source) -> GatewayRoute | None:
        """The model gateway's route for this run (with network): the model
        API's base URL (the profile's ``env``, else the preset's default), its
        key (read from the runner's environment; the gateway alone holds it)
        and what is left of the task's token and cost budgets. ``ValueError``
        when the profile's ``allowed_hosts`` would let the agent around it."""
        up = self.upstream(profile) if profile.network else None
        if up is None:
            return None
        base, key_name = up
        check_allowed_hosts(base, profile.allowed_hosts)
        a, spent = ctx.spec.agent, ctx.spent or Usage()
        return GatewayRoute(
            upstream=base, key=source.get(key_name, ""),
            max_tokens=None if a.max_tokens is None else max(0, a.max_tokens - spent.tokens),
            max_cost_usd=None if a.max_cost_usd is None else max(0.0, a.max_cost_usd - (spent.cost_usd or 0)),
            price_in_per_mtok=a.price_in_per_mtok, price_out_per_mtok=a.price_out_per_mtok)

    def run(self, ctx: AgentContext) -> AgentOutcome:
        t0 = time.monotonic()
        profile = self.profile or ctx.spec.runner.active
        source = self.environ if self.environ is not None else os.environ
        hidden = {ctx.spec.verify.hidden.seed_env, *ctx.spec.verify.hidden.env}  # verifier-only, never an agent's
        passed = {n: source[n] for n in self.env_names if source.get(n) and n not in hidden}
        try:
            route = self.route(ctx, profile, source)
        except ValueError as exc:
            return AgentOutcome(error=f"{self.name}: {exc}", duration_s=time.monotonic() - t0)
        if route is not None or self.api:  # the gateway holds the key: a preset gets no secret at all
            passed = {n: v for n, v in passed.items() if not SECRET_NAME.search(n)}
        # every secret the host holds, looked for in everything the agent wrote (harness.leaks)
        held = list(dict.fromkeys([*passed.values(), *(source.get(n, "") for n in self.env_names),
                                   *host_secrets(source), *host_secrets()]))
        held = [v for v in held if v]
        scratch = fresh_scratch(Path(ctx.scratch_dir or Path(ctx.io_dir) / "out"))
        try:
            job = self._job(ctx, scratch, passed, profile.network)
            profile = self._profile(profile)
        except (FileNotFoundError, images.ImageError) as exc:
            return AgentOutcome(error=str(exc), duration_s=time.monotonic() - t0)
        res = sandbox.run(job, profile, secrets=held, upstream_networks=self.upstream_networks, gateway=route)
        log = res.output
        hyp, note = read_hypothesis(scratch, log)
        reported = read_usage(self.usage, scratch, log)
        shutil.rmtree(scratch, ignore_errors=True)  # nothing else in it is ever read
        used = reported
        if route is not None:
            meter = res.gateway or {}
            used = Usage(calls=meter.get("calls", 0), tokens_in=meter.get("tokens_in", 0),
                         tokens_out=meter.get("tokens_out", 0), cost_usd=meter.get("cost_usd"), source="gateway",
                         reported=None if reported is None else reported.model_dump(
                             include={"calls", "tokens_in", "tokens_out"}, exclude_none=True))
        # the log stays on the host, redacted; what leaves it (hypothesis, tree) flags the round
        carried = ["the hypothesis"] if leaks.found(hyp, held) else []
        hyp = sandbox.redact(hyp, held)[:300]
        if note:
            log += f"\n[rsi] {note}\n"
        out = AgentOutcome(hypothesis=hyp or f"{self.name}: (no hypothesis given)", log=log,
                           duration_s=time.monotonic() - t0, usage=used)
        carried += scrub_secrets(ctx.worktree, held)
        refused = (res.gateway or {}).get("refused") if route is not None else 0
        if res.error:
            out.error = f"agent container failed to run: {res.error}"
        elif refused:  # the cause, also of a timeout or an exit after it (an agent that retried the refusals)
            out.error = (f"the model gateway refused {refused} call(s): "
                         f"{(res.gateway or {}).get('refusal') or 'budget spent'}")
        elif res.timed_out:
            out.error = f"agent timed out after {ctx.timeout_s:g} s"
        elif res.oom_killed:
            out.error = f"agent was killed: out of memory (limit {profile.memory})"
        elif res.exit_code != 0:
            tail = log.strip().splitlines()[-5:]
            out.error = f"agent exited with code {res.exit_code}: " + " | ".join(tail)[-500:]
        elif self.usage and not (used and used.calls):
            # exit 0 but not one model reply (aider does that): the endpoint is down or refused it
            last = " | ".join(log.strip().splitlines()[-3:])[-300:]
            out.error = f"the agent got no reply from its model API (down, refused, or a wrong OPENAI_API_BASE?): {last}"
        if carried:
            out.withheld = True
            out.error = (f"the agent's output carried a secret the host holds (as written or disguised: "
                         f"reversed, encoded, split, compressed), or what the leak scan cannot read, in "
                         f"{', '.join(carried[:5])}: replaced with [REDACTED]; "
                         "nothing of this round is committed or judged")
        return out


def scrub_secrets(tree: Path, secrets) -> list[str]:
    """Every byte of the agent's tree's regular files (links never followed;
    compressed files decompressed) scanned for every secret value, as written
    or in a disguise :mod:`harness.leaks` knows, each match replaced with
    ``[REDACTED]`` (:func:`harness.leaks.scrub_tree`); the paths where one was
    found, and ``path (why)`` for each file the scan could not read (a
    round with either is withheld)."""
    scan = leaks.scrub_tree(tree, secrets)
    return [*scan.found, *(f"{r}: not scannable, so not taken" for r in scan.refused)]


def fresh_scratch(path: Path) -> Path:
    """An empty scratch dir for the agent (an old one is removed first, links
    never followed), owned by the sandbox's uid."""
    if path.is_symlink():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    hand_to_sandbox(path)
    return path


def read_hypothesis(scratch: Path, output: str) -> tuple[str, str]:
    """(first line of the hypothesis, a note when the file was refused). The
    file ``hypothesis.txt`` in the scratch dir wins; else the last
    ``RSI-HYPOTHESIS:`` line of the output."""
    note = ""
    text = None
    try:
        text = read_agent_file(scratch, HYPOTHESIS_FILE, max_bytes=16 * 1024)
    except UnsafeFile as exc:
        note = f"hypothesis file refused: {exc}"
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    if lines:
        return lines[0], note
    marked = [ln.split(HYPOTHESIS_MARK, 1)[1].strip() for ln in output.splitlines() if HYPOTHESIS_MARK in ln]
    return (marked[-1] if marked else ""), note
