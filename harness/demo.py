"""``make demo``: the whole loop on the example target, in a few minutes.

::

    python -m harness.demo [--out rsi-demo] [--verify sandbox|inprocess] ...
    rsi demo ...                      (the same command, mounted by bot/cli.py)

1. copies ``examples/tiny-tts`` (a streaming TTS server, measured by its
   protected client and evaluator) into a fresh git repository
   ``<out>/target``;
2. runs the loop (``harness.loop.run_task``, keep="advance"): optionally the
   ``tuner`` agent over the knobs in its ``.rsi/config.toml``
   (``--tuner-rounds``), then a ``replay`` of patches from
   ``examples/demo-patches/`` (fixes of its overheads, and one that is too
   good to be true), under a live progress display. The request texts come
   from a hidden seed (:func:`hidden_seed`) that only the verifier sees;
3. prints the verdict table of the final Bk against B0, the candidates, and
   whether the demo's targets were met (a verified gain of at least 1.3x, at
   least one candidate rejected by a guard, within 10 minutes);
4. writes ``<out>/report.md`` (the markdown the bot posts on a pull request)
   and ``<out>/report.html`` (with a plot of the objective over rounds).

Rerunning with ``--resume`` continues a killed demo from its saved state.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from harness.gitutil import git
from harness.tomlout import dump_toml

if TYPE_CHECKING:
    from rich.live import Live

    from harness.ledger import LedgerRecord
    from verifier.verdict import Verdict

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "tiny-tts"
PATCHES = ROOT / "examples" / "demo-patches"
DEFAULT_PATCHES = (
    "90-skip-last-frame-of-each-word.patch",  # too good to be true: the output-length guard rejects it
    "03-batch-vocoder-frames.patch",
    "04-keep-tensors-between-stages.patch",
    "01-stats-worker-blocking-get.patch",
    "02-cache-speaker-embedding.patch",
)
"""Replayed by default, in order. The bad patch comes first: judged while Bk is
still B0 it costs two arms instead of three (the demo's budget is 10 minutes on
2 cores). The fixes of Python overhead come before the speaker-embedding cache:
with two requests in flight the speaker encoder's convolutions run outside the
GIL, beside the other request's Python work, so caching them gains little
(+3% measured) until 03 and 04 have removed that work (then +30-40%).
``91-cap-utterance-length.patch`` (rejected by the WER guard) is there for
``--patch``."""
DEFAULT_TUNER_ROUNDS = 0
"""The tuner's rounds in the demo: none by default. Every benchmark run is
three fresh containers (server, client, evaluator), ~7 s on a quiet 2-core machine, and the
10-minute budget holds the calibration, the bad patch and the four fixes;
``--tuner-rounds 1`` adds the tuner's first knob (threads, ~1 minute)."""
TASK_ID = "tiny-tts-demo"
TARGET_GAIN = 1.30
TARGET_SECONDS = 600.0

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])


# ----------------------------------------------------------------- result


@dataclass
class DemoResult:
    out: Path
    target: Path
    elapsed_s: float
    status: str
    b0_sha: str
    bk_sha: str
    gain_ratio: float | None
    """Final Bk's objective over B0 (1.5 = 50% better), as the verifier measured it."""
    guard_rejections: list[str] = field(default_factory=list)
    candidates: list[Any] = field(default_factory=list)
    report_md: Path | None = None
    report_html: Path | None = None

    @property
    def targets(self) -> dict[str, bool]:
        return {
            f"verified gain >= {TARGET_GAIN:.1f}x": (self.gain_ratio or 0) >= TARGET_GAIN,
            "a candidate rejected by a guard": bool(self.guard_rejections),
            f"finished within {TARGET_SECONDS / 60:.0f} minutes": self.elapsed_s <= TARGET_SECONDS,
        }


# ------------------------------------------------------------ preparation


#: The commit identity of the demo's own (host-made) target repo, for ``harness.gitutil.git``.
DEMO_IDENTITY = {"GIT_AUTHOR_NAME": "rsi demo", "GIT_AUTHOR_EMAIL": "demo@rsi-bot.invalid",
                 "GIT_COMMITTER_NAME": "rsi demo", "GIT_COMMITTER_EMAIL": "demo@rsi-bot.invalid"}


def _with_overrides(config_text: str, overrides: dict[str, dict[str, Any]]) -> str:
    """The config with some tables' keys replaced (e.g. {"verifier": {"initial_pairs": 4}})."""
    if not overrides:
        return config_text
    data = tomllib.loads(config_text)
    for table, values in overrides.items():
        data.setdefault(table, {}).update(values)
    return "# rsi demo: overridden settings: " + ", ".join(
        f"[{t}] " + ", ".join(f"{k}={v!r}" for k, v in vals.items()) for t, vals in overrides.items()
    ) + "\n" + dump_toml(data)


def prepare_target(target: Path, *, example: Path = EXAMPLE,
                   overrides: dict[str, dict[str, Any]] | None = None) -> str:
    """A fresh git repository at ``target`` holding a copy of ``example``
    (branch ``main``, one commit); returns the commit's sha."""
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(example, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache"))
    cfg = target / ".rsi" / "config.toml"
    cfg.write_text(_with_overrides(cfg.read_text(), overrides or {}))
    git(target, "init", "-q", "-b", "main", env=DEMO_IDENTITY)
    git(target, "add", "-A", env=DEMO_IDENTITY)
    git(target, "commit", "-q", "-m", "tiny-tts: import the example target", env=DEMO_IDENTITY)
    return git(target, "rev-parse", "HEAD", env=DEMO_IDENTITY)


def _python_on_path() -> None:
    """Benchmarks run ``python``: make it this interpreter's (the venv's) for
    in-process verification; sandboxes set their own PATH."""
    bindir = str(Path(sys.executable).parent)
    parts = os.environ.get("PATH", "").split(os.pathsep)
    if parts[:1] != [bindir]:
        os.environ["PATH"] = os.pathsep.join([bindir, *[p for p in parts if p != bindir]])


@contextlib.contextmanager
def hidden_seed(out: Path, seed_env: str | None):
    """The task's hidden seed (``[hidden] seed_env``) in this process's
    environment while the demo runs, for the verifier only (agents never get
    it): the runner's own value when set, else a random one drawn once per demo
    and kept in ``<out>/hidden-seed`` (mode 0600) so that ``--resume`` keeps
    the same request texts."""
    if not seed_env or os.environ.get(seed_env):
        yield
        return
    path = out / "hidden-seed"
    if path.is_file() and not path.is_symlink() and path.read_text().strip().isdigit():
        value = path.read_text().strip()
    else:
        value = str(secrets.randbelow(2**31))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(value + "\n")
    os.environ[seed_env] = value
    try:
        yield
    finally:
        os.environ.pop(seed_env, None)


def docker_available() -> str | None:
    """None when Docker and the base image are usable, else the reason not."""
    try:
        from harness.sandbox import docker_client
        from harness.sections import DEFAULT_IMAGE

        client = docker_client()
        client.ping()
        client.images.get(DEFAULT_IMAGE)
        return None
    except Exception as exc:  # noqa: BLE001 - any failure means: no sandbox here
        return f"{type(exc).__name__}: {str(exc)[:200]}"


# --------------------------------------------------------------- display


class Display:
    """A rich live view driven by LoopEvents: phase, current verification's
    progress, and the candidates so far. Falls back to plain lines when the
    output is not a terminal (CI logs)."""

    def __init__(self, console=None, *, live: bool | None = None):
        from rich.console import Console

        self.console = console or Console()
        self.live_enabled = self.console.is_terminal if live is None else live
        self.t0 = time.monotonic()
        self.phase = "starting"
        self.b0 = ""
        self.bk = ""
        self.rows: list[dict[str, Any]] = []
        self.current = ""
        self.since = 0.0
        self._live: Live | None = None
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("runs"), TimeElapsedColumn(), console=self.console)
        self.bar = self.progress.add_task("waiting", total=1, completed=0)

    def __enter__(self) -> Display:
        if self.live_enabled:
            from rich.live import Live

            self._live = Live(console=self.console, refresh_per_second=4, transient=False,
                              get_renderable=self._render)  # re-rendered at each refresh: the clocks tick
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.refresh()
            self._live.__exit__(*exc)
            self._live = None

    def set_phase(self, text: str) -> None:
        self.phase = text
        self._log(f"== {text}")
        self._refresh()

    def _log(self, text: str) -> None:
        if self._live is None:
            self.console.print(f"[{time.monotonic() - self.t0:6.0f}s] {text}", markup=False, highlight=False)

    def _refresh(self) -> None:
        if self._live is not None:
            self._live.refresh()

    def _render(self):
        from rich.console import Group
        from rich.panel import Panel
        from rich.table import Table

        head = (f"[bold]{self.phase}[/bold]   B0 {self.b0[:12] or '?'}   Bk {self.bk[:12] or '?'}   "
                f"elapsed {time.monotonic() - self.t0:.0f} s")
        table = Table(expand=True, show_edge=False, pad_edge=False)
        for col, kw in (("#", {"width": 3}), ("agent", {"width": 7}), ("hypothesis", {"ratio": 3}),
                        ("verdict", {"width": 13}), ("vs Bk", {"width": 8, "justify": "right"}),
                        ("vs B0", {"width": 8, "justify": "right"}), ("reason", {"ratio": 3})):
            table.add_column(col, overflow="ellipsis", no_wrap=True, **kw)
        for r in self.rows[-14:]:
            table.add_row(*[str(r.get(k, "")) for k in ("n", "agent", "hyp", "verdict", "gain", "gain0", "reason")])
        parts = [head, table]
        if self.current:
            since = f"  ({time.monotonic() - self.since:.0f} s)" if self.since else ""
            parts.append(self.current + since)
            parts.append(self.progress)
        return Panel(Group(*parts), title="rsi demo: tiny-tts", border_style="cyan")

    # the LoopEvent sink
    def __call__(self, ev) -> None:
        from harness.report import EMOJI

        kind = ev.kind
        if kind == "progress":
            total, run = ev.total, ev.run
            if total is not None and run is not None and total > 0:
                self.progress.update(self.bar, total=total, completed=run,
                                     description=f"{ev.phase} {ev.arm}".strip())
            elif ev.message:
                if ev.phase == "calibrate" or not self.since:
                    self.since = time.monotonic()
                self.current = ev.message
            self._refresh()
            return
        if kind == "baseline":
            self.b0 = self.bk = ev.sha or self.b0
            margin = ev.calibration.noise_margin if ev.calibration is not None else 0
            self.current, self.since = "", 0.0
            self._log(ev.message + (f" (noise margin {margin:.1%})" if margin else ""))
        elif kind == "round_started":
            self.current = ev.message
            self.progress.update(self.bar, total=1, completed=0, description="agent")
            self._log(ev.message)
        elif kind == "agent_finished":
            self.current = ev.message
            self._log(ev.message)
        elif kind == "verifying":
            self.since = time.monotonic()
            self.current = f"verifying #{ev.candidate}: {self.current.split(': ', 1)[-1]}"
            self.progress.update(self.bar, total=1, completed=0, description="starting")
            self._log(ev.message)
        elif kind == "candidate":
            rec = ev.record
            gain, g0, decision = rec.gain, rec.gain_vs_b0, rec.decision
            kept = " (kept)" if ev.status == "kept" else ""
            row = {
                "n": f"{ev.candidate}", "agent": rec.agent, "hyp": rec.hypothesis,
                "verdict": f"{EMOJI.get(decision, '')} {decision}{kept}",
                "gain": f"{gain * 100:+.1f}%" if gain is not None else "-",
                "gain0": f"{g0 * 100:+.1f}%" if g0 is not None else "-",
                "reason": rec.reason,
            }
            self.rows.append(row)
            self.bk = ev.bk or self.bk
            self.current, self.since = "", 0.0
            self._log(ev.message)
        else:
            if kind in ("refused", "paused", "stopped", "finished", "resumed", "rebaseline"):
                self._log(f"{kind}: {ev.message}")
        self._refresh()


# --------------------------------------------------------------- the demo


def _final_verdict(records: list[LedgerRecord]) -> tuple[Verdict | None, LedgerRecord | None]:
    """The verdict of the last kept candidate (the final Bk against B0), else
    of the last measured candidate."""
    measured = [r for r in records if r.event == "candidate" and r.verdict]
    kept = [r for r in measured if r.status == "kept"]
    pick = kept[-1] if kept else (measured[-1] if measured else None)
    return (pick.verdict, pick) if pick else (None, None)


def run_demo(
    out: Path = Path("rsi-demo"),
    *,
    example: Path = EXAMPLE,
    patches: list[Path] | None = None,
    tuner_rounds: int | None = None,
    verify: str | Any | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
    resume: bool = False,
    console=None,
    live: bool | None = None,
) -> DemoResult:
    """Run the demo; see the module docstring. ``verify``: "sandbox",
    "inprocess", a VerifierBackend, or None (sandbox when Docker and the base
    image are there, else in-process). ``overrides``: config tables to change
    in the copied target (smaller verifier settings for tests)."""
    from rich.console import Console

    from harness.agents import make_agent
    from harness.ledger import Ledger
    from harness.loop import load_state, run_task
    from harness.report import render_html_report, render_markdown_report
    from harness.spec import load_task

    console = console or Console()
    t0 = time.monotonic()
    out = Path(out).resolve()
    target, state_dir = out / "target", out / "state"
    patches = [PATCHES / name for name in DEFAULT_PATCHES] if patches is None else [Path(p).resolve() for p in patches]
    _python_on_path()
    if verify is None:
        why = docker_available()
        verify = "sandbox" if why is None else "inprocess"
        if why:
            console.print(f"Docker sandbox unavailable ({why}); verifying in this process.", style="yellow",
                          markup=False, highlight=False)
    out.mkdir(parents=True, exist_ok=True)
    if not (resume and load_state(state_dir) is not None and target.exists()):
        shutil.rmtree(state_dir, ignore_errors=True)
        prepare_target(target, example=example, overrides=overrides)
    spec = load_task(target, None, TASK_ID)
    names = ", ".join(f"{k.name} {k.values}" for k in spec.knobs)
    console.print(f"rsi demo: {target} — objective {spec.verify.objective.metric} "
                  f"(min gain {spec.verify.objective.min_gain:.0%}); knobs: {names}; "
                  f"{len(patches)} patches; verifier: {verify if isinstance(verify, str) else type(verify).__name__}",
                  markup=False, highlight=False)

    with hidden_seed(out, spec.verify.hidden.seed_env), Display(console, live=live) as display:
        st = load_state(state_dir)
        done = st.rounds_done if st else 0
        n_tuner = tuner_rounds if tuner_rounds is not None else DEFAULT_TUNER_ROUNDS
        result = None
        if n_tuner > 0 and done < n_tuner and not (st and st.agent_state.get("next")):
            display.set_phase(f"tuner: up to {n_tuner} rounds over the knobs")
            result = run_task(target, spec, state_dir=state_dir, keep="advance", agent="tuner",
                              rounds=n_tuner, on_event=display, verifier=verify)
            if result.status == "refused":
                console.print(f"B0 refused: {result.reason}", style="red", markup=False, highlight=False)
                console.print("The verifier will not judge gains it cannot tell from noise. Run the demo on "
                              "a quiet machine (nothing else busy on its cores).", style="yellow")
        st = load_state(state_dir)
        if patches and (st is None or st.status != "refused"):
            display.set_phase(f"replay: {len(patches)} patches")
            agent = make_agent(spec, "replay", patches=patches)
            # the loop keeps each agent's state under its name: the replay's is {"next": patches used}
            used = int((st.agent_state.get(agent.name) or {}).get("next", 0)) if st else 0
            budget = len(patches) + (st.rounds_done - used if st else 0)
            for _ in range(3):  # a pause after straight rejections is resumed: every patch gets its round
                result = run_task(target, spec, state_dir=state_dir, keep="advance", agent=agent,
                                  rounds=budget, on_event=display, verifier=verify)
                if result.status != "paused":
                    break
        display.set_phase("done")

    st = load_state(state_dir)
    records = Ledger(target).records(task=TASK_ID)
    verdict, pick = _final_verdict(records)
    title = f"tiny-tts: {len(records)} candidates, B0 → Bk"
    res = DemoResult(out=out, target=target, elapsed_s=time.monotonic() - t0,
                     status=st.status if st else "not started",
                     b0_sha=st.b0_sha if st else "", bk_sha=st.bk_sha if st else "",
                     gain_ratio=None, candidates=list(st.candidates) if st else [])
    # "too good to be true": faster on the objective, rejected because a guard failed
    res.guard_rejections = [f"#{r.candidate} {r.hypothesis}: {r.reason}" for r in records
                            if r.decision == "reject" and (r.gain or 0) > 0
                            and any(g.status == "fail" for g in r.guards)]
    if verdict is not None and pick is not None:
        o = verdict.objective
        if pick.status == "kept" and o is not None:
            g0 = o.gain_vs_b0 if o.gain_vs_b0 is not None else (o.gain if pick.base_sha == pick.b0_sha else None)
            res.gain_ratio = 1 + g0 if g0 is not None else None
        if pick.status == "kept":
            gain_txt = f" {res.gain_ratio:.2f}x" if res.gain_ratio else ""
            title = f"tiny-tts demo: {len(records)} candidates, B0 → Bk{gain_txt} (last kept: {pick.hypothesis})"
        else:
            title = f"tiny-tts demo: {len(records)} candidates, none kept (last: {pick.hypothesis})"
        md = render_markdown_report(verdict, ledger=records, title=title)
        res.report_md = out / "report.md"
        res.report_md.write_text(md)
        res.report_html = out / "report.html"
        res.report_html.write_text(render_html_report(verdict, ledger=records, title=title))
    res.elapsed_s = time.monotonic() - t0
    print_summary(res, verdict, console)
    return res


def print_summary(res: DemoResult, verdict, console) -> None:
    from rich.table import Table

    from harness.report import EMOJI, headline, summary_rows

    if verdict is not None:
        console.print()
        console.print(headline(verdict).replace("**", ""), highlight=False)
        table = Table(title="final Bk vs B0 (the last kept candidate's verdict)", title_justify="left")
        for col in ("metric", "B0", "Bk", "candidate", "change vs Bk", "95% interval", "verdict"):
            table.add_column(col, justify="right" if col in ("B0", "Bk", "candidate", "change vs Bk") else "left")
        for r in summary_rows(verdict):
            style = {"fail": "red", "unclear": "yellow"}.get(r.status, "")
            table.add_row(r.metric.replace("**", ""), r.b0, r.bk, r.candidate, r.change, r.interval, r.verdict,
                          style=style)
        console.print(table)
    cands = Table(title="candidates", title_justify="left")
    for col in ("#", "decision", "status", "vs Bk", "hypothesis", "reason"):
        cands.add_column(col, overflow="fold")
    for c in res.candidates:
        gain = f"{c.gain * 100:+.1f}%" if c.gain is not None else "-"
        cands.add_row(str(c.n), f"{EMOJI.get(c.decision, '')} {c.decision}", c.status, gain, c.hypothesis,
                      c.reason[:160])
    console.print(cands)
    console.print(f"finished in {res.elapsed_s:.0f} s; loop status: {res.status}", highlight=False)
    if res.gain_ratio is not None:
        console.print(f"verified gain B0 → final Bk: {res.gain_ratio:.2f}x", highlight=False)
    for name, ok in res.targets.items():
        console.print(f"  {'✓' if ok else '✗'} {name}", style="green" if ok else "red", highlight=False)
    if res.report_md:
        console.print(f"reports: {res.report_md} and {res.report_html}", highlight=False)


NEIGHBOUR_SHARE = 0.5  # of one core: a busy laptop (a build, a browser), as on a shared runner
_NEIGHBOUR = """
import time
busy, period = {share} * {period}, {period}
while True:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < busy:
        pass
    time.sleep(max(0.0, period - (time.perf_counter() - t0)))
"""


@contextlib.contextmanager
def neighbour_load(share: float = NEIGHBOUR_SHARE, period_s: float = 0.1):
    """A background process busy ``share`` of every ``period_s`` on one core
    (a noisy neighbour) while the block runs; killed at its end, whatever happens."""
    import signal
    import subprocess

    if not 0 < share < 1:
        raise ValueError(f"neighbour share must be in (0, 1), got {share}")
    code = _NEIGHBOUR.format(share=share, period=period_s)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# ------------------------------------------------------------------- CLI


@app.command("demo")
def demo(
    out: Path = typer.Option(Path("rsi-demo"), "--out", help="Where the target repo, state and reports go."),
    verify: str = typer.Option("auto", "--verify", help="auto | sandbox | inprocess"),
    tuner_rounds: int | None = typer.Option(None, "--tuner-rounds", min=0,
                                            help="Tuner rounds (default: 0; 1 tries threads = 2)."),
    patch: list[Path] = typer.Option([], "--patch", help="Patches to replay (default: examples/demo-patches)."),
    resume: bool = typer.Option(False, "--resume", help="Continue a killed demo from its saved state."),
    strict: bool = typer.Option(False, "--strict", help="Exit 1 when a target of the demo is missed."),
    neighbour: bool = typer.Option(False, "--neighbour",
                                   help="Run a background process keeping one core half busy meanwhile."),
) -> None:
    """Run the self-improvement loop on examples/tiny-tts and write rsi-demo/report.{md,html}."""
    load = neighbour_load() if neighbour else contextlib.nullcontext()
    with load:
        res = run_demo(out, patches=list(patch) or None, tuner_rounds=tuner_rounds,
                       verify=None if verify == "auto" else verify, resume=resume)
    if strict and not all(res.targets.values()):
        raise typer.Exit(1)


def main() -> None:  # python -m harness.demo
    app()


if __name__ == "__main__":
    main()
