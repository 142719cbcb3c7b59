"""``rsi run``, ``rsi spec check``, ``rsi init`` and ``rsi config check|schema``.

``bot/cli.py`` mounts them into ``rsi`` by copying ``app.registered_commands``
and ``app.registered_groups``; ``python -m harness`` runs them alone.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal, cast

import typer

if TYPE_CHECKING:
    from harness.spec import SpecError, TaskSpec

app = typer.Typer(name="harness", help="The self-improvement loop.", no_args_is_help=True, add_completion=False)
spec_app = typer.Typer(name="spec", help="Task specs: check a proposal against a repo config.", no_args_is_help=True)
app.add_typer(spec_app, name="spec")
config_app = typer.Typer(name="config", help="The repo config .rsi/config.toml: check it, or print its JSON Schema.",
                         no_args_is_help=True)
app.add_typer(config_app, name="config")


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
    working_tree: bool = typer.Option(False, "--working-tree", help="Read the repo config from the working tree."),
) -> None:
    """Print every problem with a proposal (blamed on the file that causes it), or the task it makes."""
    from rich.console import Console

    from harness.configcheck import blame, working_tree_files
    from harness.spec import CONFIG_PATH, SpecError, build_task, load_repo_config, repo_files

    console = Console()
    try:
        if working_tree:
            text, files = (repo / CONFIG_PATH).read_text(), working_tree_files(repo)
        else:
            text, files = load_repo_config(repo, ref), repo_files(repo, ref)
    except (OSError, SpecError) as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from None
    _note_uncommitted(repo, text, working_tree)
    body = issue.read_text()
    problems = blame(text, body, str(issue), repo_files=files)
    if problems:
        typer.echo(f"{len(problems)} problem(s):")
        for p in problems:
            typer.echo(f"  - {p}")
        raise typer.Exit(1)
    _print_task(console, build_task(text, body, _task_id_from(issue), repo_files=files))


def _print_spec_errors(repo: Path, exc: SpecError, task: Path | None) -> None:
    """Every error of ``load_task``, as file:line where the config causes it."""
    from harness.configcheck import config_problems
    from harness.spec import SpecError, load_repo_config

    try:
        text = load_repo_config(repo)
    except SpecError:
        text = ""
    typer.echo(f"{len(exc.errors)} problem(s):", err=True)
    for e in exc.errors:
        blamed = task is not None and e.startswith("proposal")
        shown = f"{task}: {e}" if blamed else str(config_problems([e], text)[0]) if text else e
        typer.echo(f"  - {shown}", err=True)


def _note_uncommitted(repo: Path, text: str, working_tree: bool) -> None:
    from harness.spec import CONFIG_PATH

    disk = repo / CONFIG_PATH
    if not working_tree and disk.is_file() and disk.read_text().strip() != text.strip():
        typer.echo(f"note: {CONFIG_PATH} in the working tree differs from the committed one, "
                   "which is what the bot reads; `rsi config check` checks the working tree")


def _print_task(console, spec: TaskSpec) -> None:
    console.print(f"[green]ok[/green]: task {spec.task_id}", highlight=False)
    console.print(
        f"  objective: {spec.verify.objective.metric} of '{spec.benchmark_name}', min_gain {spec.min_gain:.1%}",
        highlight=False,
    )
    console.print(f"  benchmark: {spec.benchmark.command or spec.benchmark.serve}",
                  markup=False, highlight=False)
    for g in spec.config.get("guards", []):  # as written in the config and the proposal
        console.print(f"  guard: {g}", markup=False, highlight=False)
    console.print(
        f"  agent: {spec.agent.kind}, {spec.agent.rounds} rounds, keep={spec.agent.keep}; runner: {spec.runner.profile}",
        highlight=False,
    )
    console.print(f"  editable: {spec.policy.editable}; protected: {spec.protected_paths()}", markup=False, highlight=False)


@config_app.command("check")
def config_check(
    repo: Path = typer.Option(Path("."), "--repo", help="The target repository (its working tree is read)."),
) -> None:
    """Check .rsi/config.toml in the working tree: errors as file:line, with links to the docs."""
    from harness.configcheck import check_config
    from harness.spec import CONFIG_PATH, build_task

    problems = check_config(repo)
    for p in problems:
        typer.echo(str(p), err=True)
    errors = [p for p in problems if not p.warning]
    if errors:
        typer.echo(f"{len(errors)} problem(s) in {repo / CONFIG_PATH}", err=True)
        raise typer.Exit(1)
    spec = build_task((repo / CONFIG_PATH).read_text(), None, "config-check")
    typer.echo(f"ok: {repo / CONFIG_PATH} (objective {spec.verify.objective.metric} of "
               f"'{spec.benchmark_name}', min_gain {spec.min_gain:g})")


@config_app.command("schema")
def config_schema(
    out: Path | None = typer.Option(None, "--out", help="Write here instead of stdout."),
    docs: Path | None = typer.Option(None, "--docs", help="Also refresh the key tables of this "
                                     "docs/configuration.md."),
) -> None:
    """Print the JSON Schema of .rsi/config.toml (for Taplo / Even Better TOML)."""
    from harness.schema import render_doc_tables, schema_text

    if docs is not None:
        docs.write_text(render_doc_tables(docs.read_text()))
        typer.echo(f"refreshed {docs}")
    if out is None and docs is not None:
        return
    if out is None:
        typer.echo(schema_text(), nl=False)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(schema_text())
        typer.echo(f"wrote {out}")


def estimate(spec: TaskSpec, rounds: int) -> str:
    """The most benchmark runs a task can take, said before it starts (a time
    needs the first run's; runs are what the verifier's settings fix)."""
    v = spec.verify.verifier
    bench = spec.verify.benchmark()
    k = bench.per_start  # runs_per_start: a pair is a pair of sessions of k runs
    calib = 2 * v.calibration_pairs * k
    cells = bench.matrix.runs_after_accept(v.warmup, per_start=k) if bench.matrix else 0
    per = 2 * (v.most_candidate_runs(k) + v.warmup) + cells
    reject = 2 * (v.initial_pairs * k + v.warmup)
    accept = 2 * (v.fewest_accept_runs(k) + v.warmup)
    return (f"at most {calib + rounds * per} benchmark runs: B0's calibration {calib}, then up "
            f"to {per} per candidate (a reject often stops at {reject}"
            + (f", an accept takes at least {accept}: every run counts" if accept > reject else "")
            + (f", plus {cells} for the deployment matrix's other cells after an accept"
               if cells else "")
            + f") over {rounds} round(s)")


def _run_task(run_task, *args, **kw):
    """``run_task``, with the machine's failures (Docker, disk, git) said in one
    sentence with the fix and exit status 4; a bug still shows its traceback."""
    from verifier.infra import explain, is_infrastructure

    try:
        return run_task(*args, **kw)
    except Exception as exc:
        if is_infrastructure(exc) or type(exc).__name__ == "GitError":
            typer.echo(f"rsi run: {explain(exc)}", err=True)
            raise typer.Exit(4) from None
        raise


class StepLines:
    """Progress for a pipe or a CI log: one line per loop event with the elapsed
    time, and never a long silence: the loop's own phase lines (calibration, its
    refusal, a longer retry, a reused calibration, a wait for the measuring lane)
    and, while the verifier measures, a line with its run count at least every
    ``every_s`` seconds. Once runs have been timed (B0's calibration, or the
    first verification's first runs when the calibration was reused), the time
    the rest can take at most, in minutes."""

    def __init__(self, spec: TaskSpec | None, rounds: int,
                 echo: Callable[[str], object] | None = None, every_s: float = 20.0):
        """``spec`` may come later (set ``.spec`` before the first event)."""
        import time

        self.clock, self.t0, self.spec, self.rounds = time.monotonic, time.monotonic(), spec, rounds
        self.echo: Callable[[str], object] = echo or (lambda text: print(text, flush=True))
        self.every_s = every_s
        self.timed = False
        self.last = self.t0
        self.run_gaps: list[float] = []
        """Seconds between one verifier run's end and the next's, within a session."""
        self.run_at: float | None = None
        self.runs_seen = 0
        self.agent_s = 0.0
        """The longest agent round so far."""

    def line(self, text: str) -> None:
        self.last = self.clock()
        self.echo(f"[{self.last - self.t0:6.1f}s] {text}")

    @property
    def per_run_s(self) -> float | None:
        """Seconds per benchmark run: the median gap between runs timed so far
        (None before 3)."""
        import statistics

        return statistics.median(self.run_gaps) if len(self.run_gaps) >= 3 else None

    def worst_round_s(self) -> float | None:
        """The longest a round can take now: its agent (the longest so far) and a
        verification of three arms to the last look."""
        per = self.per_run_s
        if per is None or self.spec is None:
            return None
        v, k = self.spec.verify.verifier, self.spec.verify.benchmark().per_start
        return self.agent_s + per * 3 * (v.most_candidate_runs(k) + v.warmup)

    def _run_progress(self, ev) -> None:
        if ev.run == self.runs_seen + 1 and self.run_at is not None:
            self.run_gaps.append(self.clock() - self.run_at)
        if ev.run != self.runs_seen:
            self.run_at = self.clock()
            self.runs_seen = ev.run
        if self.clock() - self.last >= self.every_s:
            who = f"#{ev.candidate} " if ev.candidate is not None else ""
            what = "calibration" if ev.candidate is None and ev.round is None else f"{who}verification"
            pairs = f", {ev.pairs} pair(s)" if ev.pairs else ""
            self.line(f"[progress] {what}: {ev.phase} run {ev.run}/{ev.total}{pairs}")

    def _estimate(self) -> None:
        per = self.per_run_s
        if self.timed or self.spec is None or per is None:
            return
        self.timed = True
        v, k = self.spec.verify.verifier, self.spec.verify.benchmark().per_start
        typical = per * 2 * (v.initial_pairs * k + v.warmup) * self.rounds / 60
        accept = per * 2 * (v.fewest_accept_runs(k) + v.warmup) / 60
        most = per * 2 * (v.most_candidate_runs(k) + v.warmup) * self.rounds / 60
        self.line(f"[estimate] ~{per:.1f} s per benchmark run; the {self.rounds} round(s) "
                  f"take ~{typical:.1f} min, at most ~{most:.1f} min (plus the agent's time); "
                  f"an accept takes ~{accept:.1f} min or more")

    def __call__(self, ev) -> None:
        if ev.kind == "progress":
            if ev.run is None:  # the loop's own phase line: always said
                self.line(f"[{ev.phase or 'progress'}] {ev.message}")
            else:
                self._run_progress(ev)
                if self.runs_seen and self.per_run_s is not None and ev.candidate is not None:
                    self._estimate()  # a reused calibration timed nothing: the first candidate's runs do
            return
        if ev.kind == "agent_finished":
            self.agent_s = max(self.agent_s, float(getattr(ev, "duration_s", 0.0) or 0.0))
        self.line(f"[{ev.kind}] {ev.message}")
        if ev.kind == "baseline":
            self._estimate()


class Budget:
    """A wall-time budget for a whole task: before each round, stop when the
    round could not end within it (``StepLines.worst_round_s``); for
    ``run_task``'s ``should_stop``, which takes the returned text as the reason."""

    def __init__(self, steps: StepLines, minutes: float | None):
        self.steps, self.minutes = steps, minutes

    def __call__(self) -> str | bool:
        if self.minutes is None:
            return False
        elapsed = self.steps.clock() - self.steps.t0
        worst = self.steps.worst_round_s() or 0.0
        if elapsed + worst > self.minutes * 60:
            return (f"time budget: {elapsed / 60:.1f} of {self.minutes:g} min used, and a round can take "
                    f"~{worst / 60:.1f} min (its agent and three arms to the last look); raise it with "
                    "--budget-min")
        return False


def _interactive() -> bool:
    return sys.stdin.isatty()


def _metric_option(items: list[str]) -> dict[str, str]:
    from harness.onboard import direction_of

    out = {}
    for item in items:
        name, _, d = item.partition("=")
        out[name.strip()] = d.strip() or direction_of(name.strip())
    return out


@app.command("init")
def init_cmd(
    repo: Path = typer.Option(Path("."), "--repo", help="The target repository to write into."),
    command: str | None = typer.Option(None, "--command", help="The benchmark command (default: detected)."),
    metric: list[str] = typer.Option([], "--metric", help="NAME=higher|lower, repeatable (default: detected)."),
    objective: str | None = typer.Option(None, "--objective", help="The metric to improve (default: the first)."),
    min_gain: float = typer.Option(0.05, "--min-gain", help="Smallest gain worth a PR (0.05 = 5%)."),
    benchmark: str = typer.Option("main", "--benchmark", help="The benchmark's name in the config."),
    device: str = typer.Option("cpu", "--device", help="Runner profile: cpu | cuda | npu."),
    agent: str = typer.Option("mini-swe-agent", "--agent", help="Who proposes changes: mini-swe-agent | "
                              "claude-code | codex | aider | command | replay (tuner needs [[knobs]])."),
    scaffold: str | None = typer.Option(None, "--scaffold", help="No benchmark yet? Write one: serving "
                                        "(your server + a protected client) or inprocess (your function)."),
    serve: str | None = typer.Option(None, "--serve", help="serving: your server command; it listens on $RSI_PORT."),
    endpoint: str = typer.Option("/generate", "--endpoint", help="serving: the path the client POSTs to."),
    input_field: str = typer.Option("prompt", "--input-field", help="serving: the JSON key of the prompt."),
    ready_path: str | None = typer.Option(None, "--ready-path", help="serving: answers 200 when ready (default /health)."),
    ready_pattern: str | None = typer.Option(None, "--ready-pattern", help="serving: a line the server prints when ready."),
    entry: str | None = typer.Option(None, "--entry", help="inprocess: package.module:function (prompt -> output)."),
    install: str = typer.Option("", "--install", help="pip requirement the workflows install rsi-bot "
                                "from (default: the repository variable RSI_INSTALL)."),
    self_reported: bool = typer.Option(False, "--self-reported", help="Accept an --objective that the "
                                       "benchmark's own process reports (the candidate's code runs there; "
                                       "every verdict then says so). Default: the verifier measures it."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Ask nothing: take the flags and what is detected."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing files."),
) -> None:
    """Write .rsi/config.toml, the caller workflow, a config-check workflow and the issue form;
    with no benchmark in the repo, scaffold one (--scaffold)."""
    from harness.onboard import (
        InitAnswers,
        InitError,
        default_objective,
        detect,
        next_steps,
        render_files,
        self_report_refusal,
        source_examples,
        write_files,
    )

    found = detect(repo)
    ask = not yes and _interactive()
    if found.source and not scaffold:
        typer.echo(f"detected: {found.command or found.client} ({found.source})")
    command = command or (None if scaffold else found.command)
    if not command and not scaffold and ask:
        typer.echo("No benchmark found. rsi init can write one for you.")
        scaffold = typer.prompt("How does this repo run inference: serving (an HTTP server) or "
                                "inprocess (a Python function)?", default="serving")
    if scaffold:
        if ask:
            if scaffold == "serving":
                serve = typer.prompt("Server command (it must listen on $RSI_PORT)", default=serve)
                endpoint = typer.prompt("Path the client POSTs a prompt to", default=endpoint)
                input_field = typer.prompt("JSON key of the prompt", default=input_field)
                ready_path = typer.prompt("Path that answers 200 when ready", default=ready_path or "/health")
            else:
                entry = typer.prompt("Inference function (package.module:function)", default=entry)
            agent = typer.prompt("Agent (mini-swe-agent, claude-code, codex, aider, command, replay)",
                                 default=agent)
        _init_scaffold(repo, scaffold=scaffold, serve=serve or "", entry=entry or "",
                       endpoint=endpoint, input_field=input_field, ready_path=ready_path,
                       ready_pattern=ready_pattern, benchmark=benchmark, objective=objective,
                       min_gain=min_gain, agent=agent, device=device, force=force, install=install)
        return
    if ask:
        command = typer.prompt("Benchmark command", default=command)
    metrics = _metric_option(metric) or dict(found.metrics)
    if ask and not metric:
        raw = typer.prompt("Metrics (NAME=higher|lower, comma-separated)",
                           default=",".join(f"{k}={v}" for k, v in metrics.items()) or None)
        metrics = _metric_option([x for x in raw.split(",") if x.strip()])
    client = found.client
    objective = objective or default_objective(metrics, client)
    if ask:
        objective = str(typer.prompt("Objective metric (wall_s: the run's time on the verifier's "
                                     "clock)", default=objective or None))
        if objective in metrics and not client and not self_reported:
            typer.echo(self_report_refusal(objective).replace(" with --self-reported", ""))
            self_reported = typer.confirm("Accept this self-reported objective?", default=False)
            if not self_reported:
                objective = default_objective(metrics, client)
        min_gain = typer.prompt("Smallest gain worth a PR (0.05 = 5%)", default=min_gain, type=float)
        device = typer.prompt("Runner device (cpu, cuda or npu)", default=device)
    if device not in ("cpu", "cuda", "npu"):
        raise typer.BadParameter("cpu, cuda or npu", param_hint="--device")
    if not command:
        typer.echo("rsi init: no benchmark found in this repo. Either scaffold one:\n"
                   "  rsi init --scaffold serving --serve 'python -m app.server --port $RSI_PORT'\n"
                   "  rsi init --scaffold inprocess --entry package.module:generate\n"
                   "or name yours: rsi init --command 'python bench.py' --metric tokens_per_s=higher\n"
                   "Writing a benchmark: https://github.com/rsi-bot/rsi-bot/blob/main/docs/"
                   "writing-a-benchmark.md", err=True)
        raise typer.Exit(2)
    answers = InitAnswers(command=command, metrics=metrics, objective=objective or "", benchmark=benchmark,
                          samples=dict(found.samples) if command == found.command or found.client else {},
                          outputs=list(found.outputs) if command == found.command or found.client else [],
                          min_gain=min_gain, device=cast(Literal["cpu", "cuda", "npu"], device),
                          client=client, agent=agent, self_reported=self_reported,
                          examples=source_examples(repo), install=install)
    try:
        written = write_files(repo, render_files(answers), force=force)
    except InitError as exc:
        typer.echo(f"rsi init: {exc}", err=True)
        raise typer.Exit(1) from None
    for p in written:
        typer.echo(f"wrote {p}")
    typer.echo(next_steps(answers))


def _init_scaffold(repo: Path, *, scaffold: str, serve: str, entry: str, endpoint: str,
                   input_field: str, ready_path: str | None, ready_pattern: str | None,
                   benchmark: str, objective: str | None, min_gain: float, agent: str,
                   device: str, force: bool, install: str = "") -> None:
    """``rsi init --scaffold``: a benchmark, its config, and the GitHub files."""
    from harness.onboard import (
        InitAnswers,
        InitError,
        _runner_lines,
        render_files,
        source_examples,
        write_files,
    )
    from harness.scaffold import BENCH_DIR, Scaffold, ScaffoldError, next_steps, scaffold_files

    if device not in ("cpu", "cuda", "npu"):
        raise typer.BadParameter("cpu, cuda or npu", param_hint="--device")
    sc = Scaffold(kind=scaffold, serve=serve, entry=entry, endpoint=endpoint,  # type: ignore[arg-type]
                  input_field=input_field,
                  ready_path=ready_path if (ready_path or not ready_pattern) else None,
                  ready_pattern=ready_pattern, benchmark=benchmark,
                  objective=objective or "throughput", min_gain=min_gain, agent=agent)
    if sc.ready_path is None and not sc.ready_pattern:
        sc.ready_path = "/health"
    cmd = f"python {BENCH_DIR}/{'client' if scaffold == 'serving' else 'bench'}.py"
    answers = InitAnswers(command=cmd, metrics={"throughput": "higher"}, objective="wall_s",
                          benchmark=benchmark, device=device, agent=agent,  # type: ignore[arg-type]
                          examples=source_examples(repo), install=install)
    try:
        files = render_files(answers)
        files.update(scaffold_files(sc, _runner_lines(answers)))
        form_others = ["latency_p95_s", "ttfa_p50_s"]
        from harness.onboard import FORM_PATH, render_form

        files[FORM_PATH] = render_form(benchmark, sc.objective, form_others, answers.examples)
        written = write_files(repo, files, force=force)
    except (InitError, ScaffoldError) as exc:
        typer.echo(f"rsi init: {exc}", err=True)
        raise typer.Exit(2) from None
    for p in written:
        typer.echo(f"wrote {p}")
    typer.echo(next_steps(sc))


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
    agents: int = typer.Option(1, "--agents", min=1, help="Agents working at once, each in its own sandbox; "
                               "candidates are still measured one at a time on this runner."),
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
        _print_spec_errors(repo, exc, task)
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
    if quiet or not sys.stdout.isatty():  # a pipe or a CI log: one line per step, no redraws
        steps = StepLines(spec, rounds_total)
        steps.line(f"{tid}: {estimate(spec, rounds_total)}")

        result = _run_task(run_task, repo, spec, state_dir=state_dir, keep=keep, agent=agent_obj or agent, rounds=rounds,
                          on_event=steps, verifier=verify, agents=agents)
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

            result = _run_task(run_task, repo, spec, state_dir=state_dir, keep=keep, agent=agent_obj or agent, rounds=rounds,
                              on_event=on_event, verifier=verify, agents=agents)
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
