"""``command``: an external coding-agent CLI run in the agent container.

The prompt is TASK.md (mounted read-only at ``/rsi/TASK.md``); the worktree of
Bk is mounted read-write at ``/work/repo`` (its ``.git`` file read-only, so the
agent cannot repoint the worktree); the agent writes its one-line hypothesis to
``/rsi/hypothesis.txt``. The API key and any other variables named by the
preset or ``[agent] env`` are read from the runner's environment and passed to
the container; their values are redacted from every log and never written to
the state dir or the ledger. Network is on only when the runner profile says
``network = true`` (the agent's model API).

Presets (override any with ``[agent] command``):

==============  ==============================================================
claude-code     ``claude -p "$(cat TASK.md)" --dangerously-skip-permissions``
codex           ``codex exec --full-auto --skip-git-repo-check "$(cat TASK.md)"``
aider           ``aider --yes-always --no-git --message-file TASK.md``
mini-swe-agent  ``mini --yolo --exit-immediately -t "$(cat TASK.md)"``
==============  ==============================================================

Placeholders in a template (shell-quoted when filled): ``{task_file}``,
``{hypothesis_file}``, ``{workdir}``, ``{python}``, ``{model}``, and
``{model_flag}`` (the preset's model option, empty when no model is set).
"""

from __future__ import annotations

import os
import re
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import sandbox
from harness.agents.base import AgentContext, AgentOutcome
from harness.spec import RunnerProfile

IO_DIR = "/rsi"
WORKDIR = "/work/repo"


@dataclass(frozen=True)
class Preset:
    command: str
    env: tuple[str, ...] = ()
    model_flag: str = "--model"


PRESETS: dict[str, Preset] = {
    "claude-code": Preset(
        'claude -p "$(cat {task_file})" --dangerously-skip-permissions --output-format text {model_flag}',
        ("ANTHROPIC_API_KEY",),
    ),
    "codex": Preset(
        'codex exec --full-auto --skip-git-repo-check {model_flag} "$(cat {task_file})"',
        ("OPENAI_API_KEY",),
        model_flag="-m",
    ),
    "aider": Preset(
        "aider --yes-always --no-git --no-auto-commits --no-check-update --no-show-model-warnings "
        "{model_flag} --message-file {task_file}",
        ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"),
    ),
    "mini-swe-agent": Preset(
        'mini --yolo --exit-immediately {model_flag} -t "$(cat {task_file})"',
        ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "MSWEA_MODEL_NAME"),
        model_flag="-m",
    ),
}


def render_command(template: str, *, model: str | None, model_flag: str = "--model") -> str:
    values = {
        "task_file": f"{IO_DIR}/TASK.md",
        "hypothesis_file": f"{IO_DIR}/hypothesis.txt",
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

    @classmethod
    def preset(cls, kind: str, **kw) -> CommandAgent:
        p = PRESETS[kind]
        env = tuple(dict.fromkeys([*p.env, *kw.pop("env_names", ())]))
        return cls(template=p.command, env_names=env, model_flag=p.model_flag, name=kind, **kw)

    def command_line(self) -> str:
        return render_command(self.template, model=self.model, model_flag=self.model_flag)

    def run(self, ctx: AgentContext) -> AgentOutcome:
        t0 = time.monotonic()
        profile = self.profile or ctx.spec.runner.active
        source = self.environ if self.environ is not None else os.environ
        hidden = {ctx.spec.hidden.seed_env, *ctx.spec.hidden.env}  # verifier-only, never an agent's
        passed = {n: source[n] for n in self.env_names if source.get(n) and n not in hidden}
        io = Path(ctx.io_dir)
        io.mkdir(parents=True, exist_ok=True)
        (io / "TASK.md").write_text(ctx.task_md)
        hyp_file = io / "hypothesis.txt"
        hyp_file.unlink(missing_ok=True)
        os.chmod(io, 0o777)
        os.chmod(io / "TASK.md", 0o644)
        mounts = [
            *sandbox.python_mounts(),
            sandbox.Mount(source=str(ctx.worktree), target=WORKDIR, read_only=False),
            sandbox.Mount(source=str(io), target=IO_DIR, read_only=False),
            *self.extra_mounts,
        ]
        if (ctx.worktree / ".git").is_file():
            mounts.append(sandbox.Mount(source=str(ctx.worktree / ".git"), target=f"{WORKDIR}/.git", read_only=True))
        job = sandbox.SandboxJob(
            command=["/bin/sh", "-c", self.command_line()],
            mounts=mounts,
            workdir=WORKDIR,
            env={
                **passed,
                "RSI_TASK_FILE": f"{IO_DIR}/TASK.md",
                "RSI_HYPOTHESIS_FILE": f"{IO_DIR}/hypothesis.txt",
                "RSI_WORKDIR": WORKDIR,
                "RSI_ROUND": str(ctx.round),
            },
            timeout_s=ctx.timeout_s,
            network=profile.network,
        )
        res = sandbox.run(job, profile, secrets=passed.values())
        log = res.output
        (io / "agent.log").write_text(log)
        hyp = ""
        if hyp_file.exists():
            lines = [ln.strip() for ln in hyp_file.read_text(errors="replace").splitlines() if ln.strip()]
            hyp = sandbox.redact(lines[0], passed.values())[:300] if lines else ""
        out = AgentOutcome(hypothesis=hyp or f"{self.name}: (no hypothesis given)", log=log, duration_s=time.monotonic() - t0)
        if res.error:
            out.error = f"agent container failed to run: {res.error}"
        elif res.timed_out:
            out.error = f"agent timed out after {ctx.timeout_s:g} s"
        elif res.oom_killed:
            out.error = f"agent was killed: out of memory (limit {profile.memory})"
        elif res.exit_code != 0:
            tail = log.strip().splitlines()[-5:]
            out.error = f"agent exited with code {res.exit_code}: " + " | ".join(tail)[-500:]
        return out
