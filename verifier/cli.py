"""Command line: ``python -m verifier`` (and ``rsi verify`` / ``rsi calibrate``).

Exit codes: 0 accept (calibrate: the task is feasible), 1 any other decision
(calibrate: too noisy), 2 usage or infrastructure errors (bad refs, bad
config, a benchmark that crashed: decision ``error``).

* ``verify BASE_REF CAND_REF --repo PATH [--benchmark NAME] [--b0 REF] [--report FILE]``:
  worktrees of the refs, the config from BASE_REF's ``.rsi/config.toml`` (never
  the candidate's), a table and the JSON report.
* ``calibrate REF --repo PATH``: A/A pairs; spread and smallest detectable gain.
* ``verify-dirs BASE_DIR CAND_DIR``: the same judge on two checkouts already on
  disk (the harness runs it inside a container); writes the JSON verdict.
* ``calibrate-dir DIR``: calibration of a checkout on disk.

Every command takes ``--isolation process|container`` (default ``process``):
with ``container`` every run (setup, warm-ups, pairs, calibration, a serving
benchmark's server and client, an evaluator) is a fresh container, set up
from ``--isolation-spec FILE`` (JSON, see ``verifier/README.md``) or from
``--image IMAGE [--cpus N] [--memory 4g]``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .calibrate import Calibration
from .calibrate import calibrate as run_calibration
from .config import ConfigError, VerifyConfig
from .git import GitError, rev_parse, show_file, worktrees
from .isolation import Isolation, from_options
from .measure import ProgressEvent
from .verdict import Decision, Fingerprint, Verdict

CONFIG_PATH = ".rsi/config.toml"
EXIT_ACCEPT, EXIT_OTHER, EXIT_INFRA, EXIT_CANDIDATE = 0, 1, 2, 3
"""0 accepted; 1 judged and not accepted (review, reject, inconclusive); 2 the tool
or the machine failed (config, git, Docker, the baseline's own run): nothing was
judged; 3 the candidate's own run failed (it crashed, timed out or wrote no result)."""

app = typer.Typer(
    help="The rsi verifier: measures and judges candidates.",
    no_args_is_help=True,
    add_completion=False,
)
err_console = Console(stderr=True)


def exit_code(verdict: Verdict) -> int:
    if verdict.decision == Decision.ACCEPT:
        return EXIT_ACCEPT
    if verdict.decision == Decision.ERROR:
        failed = verdict.error.stage if verdict.error is not None else ""
        return EXIT_CANDIDATE if failed == "candidate" else EXIT_INFRA
    return EXIT_OTHER


def _fail(message: str) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {escape(message)}")
    return typer.Exit(EXIT_INFRA)


# ---- rendering (pure: data in, renderables out) -------------------------------

_COLOR = {
    Decision.ACCEPT: "green",
    Decision.REVIEW: "yellow",
    Decision.REJECT: "red",
    Decision.INCONCLUSIVE: "blue",
    Decision.ERROR: "magenta",
    # guard statuses
    "pass": "green",
    "fail": "red",
    "unclear": "yellow",
    "skipped": "dim",
}


def render_verdict(v: Verdict) -> list:
    out: list = []
    color = _COLOR.get(v.decision, "white")
    out.append(f"[bold {color}]{v.decision.upper()}[/]  {escape(v.reason)}")
    if v.objective is not None and v.objective.gain is not None:
        o = v.objective
        ci = o.gain_ci
        out.append(
            escape(
                f"objective {o.benchmark}.{o.metric} ({o.direction} is better): gain {o.gain:+.2%}"
                + (f" [{ci.low:+.2%}, {ci.high:+.2%}] ({ci.level:.0%} repeated interval)" if ci else "")
                + (f", p={o.p_value:.2g}" if o.p_value is not None else "")
                + f", min_gain {o.min_gain:.1%}, noise margin {o.noise_margin:.1%}"
                + (f", vs B0 {o.gain_vs_b0:+.2%}" if o.gain_vs_b0 is not None else "")
                + f"; {v.pairs} pairs, {v.runs} runs"
                + (f"; run order seed {v.seed} (--seed replays it)" if v.seed is not None else "")
            )
        )
    if v.metrics:
        t = Table(title="metrics (median over runs; percentiles pooled)", show_lines=False)
        has_b0 = any(m.b0 is not None for m in v.metrics)
        t.add_column("metric")
        if has_b0:
            t.add_column("B0", justify="right")
        t.add_column("Bk", justify="right")
        t.add_column("candidate", justify="right")
        t.add_column("vs Bk", justify="right")
        t.add_column("interval", justify="right")
        if has_b0:
            t.add_column("vs B0", justify="right")
        t.add_column("source")
        obj = v.objective
        for m in v.metrics:
            if obj is not None and m.name == obj.metric and obj.ratio is not None:
                # the objective's own estimate, the one the decision rests on
                m = m.model_copy(update={"ratio_vs_bk": obj.ratio, "ratio_vs_bk_ci": obj.ratio_ci})
            row = [f"{m.name} ({m.direction[0]})"]
            if has_b0:
                row.append(_num(m.b0))
            row += [
                _num(m.bk),
                _num(m.candidate),
                f"{m.ratio_vs_bk - 1:+.2%}" if m.ratio_vs_bk is not None else "-",
                f"{m.ratio_vs_bk_ci.low - 1:+.1%} .. {m.ratio_vs_bk_ci.high - 1:+.1%} "
                f"({m.ratio_vs_bk_ci.level:.0%})"
                if m.ratio_vs_bk_ci
                else "-",
            ]
            if has_b0:
                row.append(f"{m.ratio_vs_b0 - 1:+.2%}" if m.ratio_vs_b0 is not None else "-")
            row.append(m.source)
            t.add_row(*row)
        out.append(t)
    if v.guards:
        t = Table(title="guards")
        for col in ("guard", "vs", "status", "detail"):
            t.add_column(col)
        for g in v.guards:
            c = _COLOR.get(g.status, "white")
            t.add_row(escape(g.name), g.against, f"[{c}]{g.status}[/]", escape(g.detail))
        out.append(t)
    if v.cells:
        out += _matrix_table(v)
    for line in v.tradeoffs:
        out.append(f"tradeoff: {escape(line)}")
    for line in v.warnings:
        out.append(f"[yellow]warning:[/] {escape(line)}")
    if v.error is not None:
        out.append(f"[magenta]error in {v.error.stage}:[/] {escape(v.error.message)}")
        if v.error.stderr_tail.strip():
            tail = "\n".join(v.error.stderr_tail.strip().splitlines()[-15:])
            out.append(f"[dim]{escape(tail)}[/]")
    return out


def _matrix_table(v: Verdict) -> list:
    """The deployment matrix: a row per cell, then where the gain holds in words."""
    from .cells import MATRIX_HEADER, cell_row, matrix_sentence

    t = Table(title="deployment matrix")
    for col in MATRIX_HEADER:
        t.add_column(col)
    for cell in v.cells:
        t.add_row(*(escape(c) for c in cell_row(cell)))
    return [t, escape(matrix_sentence(v.cells))]


def render_calibration(c: Calibration, min_gain: float) -> list:
    if c.error is not None:
        return [
            f"[magenta]calibration failed in {c.error.stage}:[/] {escape(c.error.message)}",
            f"[dim]{escape(c.error.stderr_tail.strip()[-2000:])}[/]",
        ]
    t = Table(title=f"calibration of {c.benchmark}.{c.metric} ({c.pairs} A/A pairs)")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_row("per-pair spread (sd of log ratio)", f"{c.per_pair_sd:.2%}")
    t.add_row("observed A/A offset", f"{c.aa_gain:.2%}")
    t.add_row(f"spread of the ratio at {c.max_pairs} pairs", f"{c.spread:.2%}")
    t.add_row("noise margin", f"{c.noise_margin:.2%}")
    t.add_row(f"smallest detectable gain ({c.max_pairs} pairs)", f"{c.min_detectable_gain:.2%}")
    ok, msg = c.ok_for(min_gain)
    out: list = [t, f"[{'green' if ok else 'red'}]{escape(msg)}[/]"]
    out += [f"[yellow]warning:[/] {escape(w)}" for w in c.warnings]
    if c.cost_note:
        out.append(f"[cyan]cost:[/] {escape(c.cost_note)}")
    return out


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


PROGRESS_PREFIX = "RSI-PROGRESS "


@contextmanager
def progress_bar(console: Console, label: str) -> Iterator:
    """A rich progress bar on a terminal. With ``RSI_PROGRESS_JSON=1`` (set by
    the harness when it runs the verifier in a container) each event is also
    written to stderr as one ``RSI-PROGRESS {json}`` line, so the caller can
    follow a run it cannot see."""
    as_json = os.environ.get("RSI_PROGRESS_JSON") == "1"
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    ) as bar:
        task = bar.add_task(label, total=None, info="")

        def on_event(e: ProgressEvent) -> None:
            if as_json:
                sys.stderr.write(PROGRESS_PREFIX + json.dumps(dataclasses.asdict(e)) + "\n")
                sys.stderr.flush()
            info = f"{e.phase} {e.arm}".strip() + (f" · {e.pairs} pairs" if e.pairs else "")
            bar.update(task, completed=e.run, total=max(e.total, e.run) or None, info=info)

        yield on_event


# ---- shared helpers --------------------------------------------------------------

IsolationOpt = Annotated[
    str,
    typer.Option(
        "--isolation",
        help="Where each run happens: 'process' (a fresh process group) or 'container' "
        "(a fresh container per run).",
    ),
]
SpecOpt = Annotated[
    Path | None,
    typer.Option("--isolation-spec", help="Container settings JSON (see verifier/README.md)."),
]
ImageOpt = Annotated[
    str | None, typer.Option("--image", help="Container image (a simple spec, without a file).")
]
CpusOpt = Annotated[float | None, typer.Option("--cpus", help="CPU limit per container.")]
SeedOpt = Annotated[
    int | None,
    typer.Option(
        "--seed",
        min=0,
        help="Replay a verification's run order: the seed its verdict recorded (default: "
        "[verifier] seed, else a fresh secret per verification).",
    ),
]


def _with_seed(config: VerifyConfig, seed: int | None) -> VerifyConfig:
    if seed is None:
        return config
    return config.model_copy(update={"verifier": config.verifier.model_copy(update={"seed": seed})})


MemoryOpt = Annotated[str | None, typer.Option("--memory", help="Memory limit per container.")]


@contextmanager
def _isolation(
    kind: str, spec: Path | None, image: str | None, cpus: float | None, memory: str | None
) -> Iterator[Isolation]:
    if kind == "process" and (cpus is not None or memory is not None):
        raise _fail("--cpus and --memory need --isolation container")
    try:
        iso = from_options(kind, spec, image=image, cpus=cpus, memory=memory)
    except ValueError as e:
        raise _fail(str(e)) from None
    except Exception as e:  # noqa: BLE001 - e.g. no Docker engine
        raise _fail(f"cannot set up {kind} isolation: {e}") from None
    try:
        yield iso
    finally:
        iso.close()


def _load_config_text(text: str | None, where: str) -> VerifyConfig:
    if text is None:
        raise _fail(f"no {CONFIG_PATH} at {where}: the repo config is read from the baseline only")
    try:
        return VerifyConfig.from_toml(text)
    except ConfigError as e:
        raise _fail(
            f"{CONFIG_PATH} at {where} is invalid:\n" + "\n".join(f"  - {x}" for x in e.errors)
        ) from None


def _load_calibration(path: Path | None) -> Calibration | None:
    if path is None:
        return None
    try:
        return Calibration.model_validate_json(path.read_text())
    except (OSError, ValueError) as e:
        raise _fail(f"cannot read calibration {path}: {e}") from None


def _write(path: Path | None, text: str) -> None:
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as e:
        raise _fail(f"cannot write {path}: {e}") from None


def _show(console: Console, items: list) -> None:
    for item in items:
        console.print(item)


# ---- commands ------------------------------------------------------------------------


@app.command()
def verify(
    base_ref: Annotated[str, typer.Argument(help="Baseline ref (Bk); the config is read from it.")],
    cand_ref: Annotated[str, typer.Argument(help="Candidate ref.")],
    repo: Annotated[Path, typer.Option("--repo", help="Path of the target git repository.")] = Path(
        "."
    ),
    benchmark: Annotated[
        str | None, typer.Option("--benchmark", help="Benchmark (default: the objective's).")
    ] = None,
    b0: Annotated[
        str | None, typer.Option("--b0", help="B0 ref: guards are also checked against it.")
    ] = None,
    report: Annotated[
        Path | None, typer.Option("--report", help="Write the JSON verdict here.")
    ] = None,
    calibration: Annotated[
        Path | None,
        typer.Option("--calibration", help="Calibration JSON (rsi calibrate --report)."),
    ] = None,
    isolation: IsolationOpt = "process",
    isolation_spec: SpecOpt = None,
    image: ImageOpt = None,
    cpus: CpusOpt = None,
    memory: MemoryOpt = None,
    seed: SeedOpt = None,
) -> None:
    """Judge CAND_REF against BASE_REF with the benchmark protocol."""
    repo = repo.resolve()
    try:
        shas = {"bk": rev_parse(repo, base_ref), "candidate": rev_parse(repo, cand_ref)}
        if b0:
            shas["b0"] = rev_parse(repo, b0)
    except GitError as e:
        raise _fail(str(e)) from None
    config = _load_config_text(
        show_file(repo, shas["bk"], CONFIG_PATH), f"{base_ref} ({shas['bk'][:12]})"
    )
    config = _with_seed(config, seed)
    cal = _load_calibration(calibration)
    from .judge import verify as judge_verify

    console = Console()
    refs = {"bk": shas["bk"], "candidate": shas["candidate"], **({"b0": shas["b0"]} if b0 else {})}
    try:
        with (
            _isolation(isolation, isolation_spec, image, cpus, memory) as iso,
            worktrees(repo, refs) as trees,
            progress_bar(err_console, "verifying") as on_event,
        ):
            verdict = judge_verify(
                trees["bk"],
                trees["candidate"],
                config,
                benchmark=benchmark,
                b0=trees.get("b0"),
                shas=shas,
                calibration=cal,
                progress=on_event,
                isolation=iso,
            )
    except GitError as e:
        raise _fail(str(e)) from None
    _show(console, render_verdict(verdict))
    _write(report, verdict.to_json(indent=2))
    raise typer.Exit(exit_code(verdict))


@app.command()
def calibrate(
    ref: Annotated[str, typer.Argument(help="The ref to measure against itself (A/A).")],
    repo: Annotated[Path, typer.Option("--repo", help="Path of the target git repository.")] = Path(
        "."
    ),
    benchmark: Annotated[str | None, typer.Option("--benchmark")] = None,
    pairs: Annotated[
        int | None,
        typer.Option("--pairs", min=2, help="A/A pairs (default: [verifier] calibration_pairs)."),
    ] = None,
    min_gain: Annotated[
        float | None,
        typer.Option(
            "--min-gain", help="Check feasibility for this min_gain (default: the objective's)."
        ),
    ] = None,
    report: Annotated[
        Path | None, typer.Option("--report", help="Write the calibration JSON here.")
    ] = None,
    isolation: IsolationOpt = "process",
    isolation_spec: SpecOpt = None,
    image: ImageOpt = None,
    cpus: CpusOpt = None,
    memory: MemoryOpt = None,
) -> None:
    """Measure the benchmark's noise with A/A pairs of REF."""
    repo = repo.resolve()
    try:
        sha = rev_parse(repo, ref)
    except GitError as e:
        raise _fail(str(e)) from None
    config = _load_config_text(show_file(repo, sha, CONFIG_PATH), f"{ref} ({sha[:12]})")
    try:
        with (
            _isolation(isolation, isolation_spec, image, cpus, memory) as iso,
            worktrees(repo, {"ref": sha}) as trees,
            progress_bar(err_console, "calibrating") as on_event,
        ):
            cal = run_calibration(
                trees["ref"],
                config,
                benchmark=benchmark,
                pairs=pairs,
                progress=on_event,
                isolation=iso,
            )
    except GitError as e:
        raise _fail(str(e)) from None
    raise typer.Exit(_finish_calibration(cal, config, min_gain, report, Console()))


def _finish_calibration(
    cal: Calibration,
    config: VerifyConfig,
    min_gain: float | None,
    report: Path | None,
    console: Console,
) -> int:
    mg = config.objective.min_gain if min_gain is None else min_gain
    _show(console, render_calibration(cal, mg))
    _write(report, cal.model_dump_json(indent=2))
    if cal.error is not None:
        return EXIT_INFRA
    return EXIT_ACCEPT if cal.ok_for(mg)[0] else EXIT_OTHER


def _parse_shas(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in ("bk", "b0", "candidate"):
            raise _fail(f"--sha takes KEY=SHA with KEY in bk, b0, candidate; got {item!r}")
        out[key] = value
    return out


@app.command("verify-dirs")
def verify_dirs(
    baseline_dir: Annotated[Path, typer.Argument(help="Checkout of the baseline (Bk).")],
    candidate_dir: Annotated[Path, typer.Argument(help="Checkout of the candidate.")],
    config_file: Annotated[
        Path | None,
        typer.Option("--config", help="Config TOML (default: BASELINE_DIR/.rsi/config.toml)."),
    ] = None,
    benchmark: Annotated[str | None, typer.Option("--benchmark")] = None,
    b0: Annotated[Path | None, typer.Option("--b0", help="Checkout of B0.")] = None,
    report: Annotated[
        Path | None, typer.Option("--report", help="Write the JSON verdict here (default: stdout).")
    ] = None,
    sha: Annotated[
        list[str],
        typer.Option("--sha", help="KEY=SHA recorded in the verdict (bk, b0, candidate)."),
    ] = [],  # noqa: B006
    calibration: Annotated[
        Path | None, typer.Option("--calibration", help="Calibration JSON.")
    ] = None,
    fingerprint: Annotated[
        Path | None,
        typer.Option("--fingerprint", help="Expected fingerprint JSON; refuse to run elsewhere."),
    ] = None,
    isolation: IsolationOpt = "process",
    isolation_spec: SpecOpt = None,
    image: ImageOpt = None,
    cpus: CpusOpt = None,
    memory: MemoryOpt = None,
    seed: SeedOpt = None,
) -> None:
    """Judge two checkouts on disk; the verdict JSON goes to --report or stdout."""
    cfg_path = config_file or baseline_dir / CONFIG_PATH
    try:
        text = cfg_path.read_text()
    except OSError:
        text = None
    config = _with_seed(_load_config_text(text, str(cfg_path)), seed)
    cal = _load_calibration(calibration)
    fp = None
    if fingerprint is not None:
        try:
            fp = Fingerprint.model_validate_json(fingerprint.read_text())
        except (OSError, ValueError) as e:
            raise _fail(f"cannot read fingerprint {fingerprint}: {e}") from None
    from .judge import verify as judge_verify

    with (
        _isolation(isolation, isolation_spec, image, cpus, memory) as iso,
        progress_bar(err_console, "verifying") as on_event,
    ):
        verdict = judge_verify(
            baseline_dir.resolve(),
            candidate_dir.resolve(),
            config,
            benchmark=benchmark,
            b0=b0.resolve() if b0 else None,
            shas=_parse_shas(sha),
            calibration=cal,
            progress=on_event,
            fingerprint=fp,
            isolation=iso,
        )
    _show(err_console, render_verdict(verdict))
    text = verdict.to_json(indent=2)
    if report is None:
        sys.stdout.write(text + "\n")
    else:
        _write(report, text)
    raise typer.Exit(exit_code(verdict))


@app.command("calibrate-dir")
def calibrate_dir(
    ref_dir: Annotated[Path, typer.Argument(help="Checkout to measure against itself.")],
    config_file: Annotated[
        Path | None,
        typer.Option("--config", help="Config TOML (default: REF_DIR/.rsi/config.toml)."),
    ] = None,
    benchmark: Annotated[str | None, typer.Option("--benchmark")] = None,
    pairs: Annotated[int | None, typer.Option("--pairs", min=2)] = None,
    min_gain: Annotated[float | None, typer.Option("--min-gain")] = None,
    report: Annotated[
        Path | None,
        typer.Option("--report", help="Write the calibration JSON here (default: stdout)."),
    ] = None,
    isolation: IsolationOpt = "process",
    isolation_spec: SpecOpt = None,
    image: ImageOpt = None,
    cpus: CpusOpt = None,
    memory: MemoryOpt = None,
) -> None:
    """Calibrate a checkout on disk; the calibration JSON goes to --report or stdout."""
    cfg_path = config_file or ref_dir / CONFIG_PATH
    try:
        text = cfg_path.read_text()
    except OSError:
        text = None
    config = _load_config_text(text, str(cfg_path))
    with (
        _isolation(isolation, isolation_spec, image, cpus, memory) as iso,
        progress_bar(err_console, "calibrating") as on_event,
    ):
        cal = run_calibration(
            ref_dir.resolve(),
            config,
            benchmark=benchmark,
            pairs=pairs,
            progress=on_event,
            isolation=iso,
        )
    code = _finish_calibration(cal, config, min_gain, report, err_console)
    if report is None:
        sys.stdout.write(cal.model_dump_json(indent=2) + "\n")
    raise typer.Exit(code)


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    main()


__all__ = ["app", "exit_code", "main", "render_calibration", "render_verdict"]
