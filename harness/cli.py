"""``rsi run`` and ``rsi spec check``: the harness's commands.

``bot/cli.py`` mounts them into ``rsi`` by copying ``app.registered_commands``
and ``app.registered_groups``; ``python -m harness`` runs them alone.
"""

from __future__ import annotations

import re
from pathlib import Path

import typer

app = typer.Typer(name="harness", help="The self-improvement loop.", no_args_is_help=True, add_completion=False)
spec_app = typer.Typer(name="spec", help="Task specs: check a proposal against a repo config.", no_args_is_help=True)
app.add_typer(spec_app, name="spec")


def _task_id_from(path: Path | None) -> str:
    if path is None:
        return "local"
    tid = re.sub(r"[^A-Za-z0-9._-]+", "-", path.stem).strip("-.") or "local"
    return tid[:64]


@spec_app.command("check")
def spec_check(
    issue: Path = typer.Argument(..., exists=True, dir_okay=False, help="The proposal (an issue body, markdown)."),
    repo: Path = typer.Option(Path("."), "--repo", help="The target repository."),
    ref: str | None = typer.Option(None, "--ref", help="Read the repo config here (default: the default branch)."),
) -> None:
    """Print every problem with a proposal, or the task it makes."""
    from rich.console import Console

    from harness.spec import SpecError, load_task

    console = Console()
    try:
        spec = load_task(repo, issue.read_text(), _task_id_from(issue), ref=ref)
    except SpecError as exc:
        console.print(f"[red]{len(exc.errors)} problem(s) in {issue}:[/red]")
        for e in exc.errors:
            console.print(f"  - {e}", markup=False, highlight=False)
        raise typer.Exit(1) from None
    obj = spec.objective
    console.print(f"[green]ok[/green]: task {spec.task_id}", highlight=False)
    console.print(
        f"  objective: {obj.get('metric')} of '{spec.benchmark_name}', min_gain {spec.min_gain:.1%}", highlight=False
    )
    console.print(f"  benchmark: {spec.benchmark.get('command')}", markup=False, highlight=False)
    for g in spec.guards:
        console.print(f"  guard: {g}", markup=False, highlight=False)
    console.print(
        f"  agent: {spec.agent.kind}, {spec.agent.rounds} rounds, keep={spec.agent.keep}; runner: {spec.runner.profile}",
        highlight=False,
    )
    console.print(f"  editable: {spec.policy.editable}; protected: {spec.protected_paths()}", markup=False, highlight=False)


@app.command("run")
def run_cmd(
    repo: Path = typer.Option(..., "--repo", help="The target repository (a git repo with .rsi/config.toml)."),
    task: Path | None = typer.Option(None, "--task", exists=True, dir_okay=False, help="A proposal (issue body)."),
    agent: str | None = typer.Option(None, "--agent", help="tuner | replay | command | claude-code | codex | aider | mini-swe-agent"),
    rounds: int | None = typer.Option(None, "--rounds", min=1, help="Total round budget of the task."),
    patch: list[Path] = typer.Option([], "--patch", help="Patch files for --agent replay (in order)."),
    state_dir: Path | None = typer.Option(None, "--state-dir", help="Default: <repo>/.git/rsi/<task>."),
    keep: str | None = typer.Option(None, "--keep", help="advance | propose"),
    verify: str | None = typer.Option(None, "--verify", help="sandbox (default) | inprocess"),
    task_id: str | None = typer.Option(None, "--task-id", help="Default: the task file's name, or 'local'."),
    quiet: bool = typer.Option(False, "--quiet", help="Plain event lines instead of the progress display."),
) -> None:
    """Run the loop on a local repository; rerun to resume after a kill."""
    from rich.console import Console

    from harness.gitutil import git
    from harness.loop import run_task
    from harness.spec import SpecError, load_task

    console = Console()
    repo = repo.resolve()
    tid = task_id or _task_id_from(task)
    try:
        spec = load_task(repo, task.read_text() if task else None, tid)
    except SpecError as exc:
        console.print(f"[red]{len(exc.errors)} problem(s):[/red]")
        for e in exc.errors:
            console.print(f"  - {e}", markup=False, highlight=False)
        raise typer.Exit(2) from None
    if keep not in (None, "advance", "propose"):
        console.print("--keep must be advance or propose")
        raise typer.Exit(2) from None
    if state_dir is None:
        common = Path(git(repo, "rev-parse", "--git-common-dir"))
        common = common if common.is_absolute() else (repo / common)
        state_dir = common.resolve() / "rsi" / tid
    agent_obj = None
    if (agent or spec.agent.kind) == "replay" and patch:
        from harness.agents import ReplayAgent

        agent_obj = ReplayAgent([p.resolve() for p in patch])

    rounds_total = rounds or spec.agent.rounds
    if quiet:
        def on_event(ev):
            console.print(f"[{ev.kind}] {ev.message}", markup=False, highlight=False)

        result = run_task(repo, spec, state_dir=state_dir, keep=keep, agent=agent_obj or agent, rounds=rounds,
                          on_event=on_event, verifier=verify)
    else:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        with Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress:
            bar = progress.add_task(f"{tid}: starting", total=rounds_total)

            def on_event(ev):
                if ev.kind == "progress":
                    progress.update(bar, description=f"{tid}: {ev.message[:60]}")
                    return
                if ev.kind in ("candidate",):
                    progress.update(bar, completed=ev.round or 0)
                colour = {"candidate": "cyan", "refused": "red", "paused": "yellow", "finished": "green"}.get(ev.kind, "white")
                progress.console.print(f"[{colour}]{ev.kind:>14}[/{colour}] {ev.message}", highlight=False)
                progress.update(bar, description=f"{tid}: {ev.kind}")

            result = run_task(repo, spec, state_dir=state_dir, keep=keep, agent=agent_obj or agent, rounds=rounds,
                              on_event=on_event, verifier=verify)
    from rich.table import Table

    table = Table(title=f"{tid}: {result.status} ({result.reason})")
    for col in ("#", "round", "decision", "status", "gain vs Bk", "hypothesis"):
        table.add_column(col)
    for c in result.candidates:
        gain = f"{c.gain * 100:+.1f}%" if c.gain is not None else "-"
        table.add_row(str(c.n), str(c.round), c.decision, c.status, gain, c.hypothesis[:70])
    console.print(table)
    if result.gain_vs_b0 is not None:
        console.print(f"Bk {result.bk_sha[:12]}: {result.gain_vs_b0 * 100:+.1f}% over B0 {result.b0_sha[:12]}")
    console.print(f"state: {state_dir}; ledger: branch rsi/ledger")
    if result.status == "refused":
        raise typer.Exit(3)
