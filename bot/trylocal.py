"""``rsi try``: the whole flow of a labelled issue, locally, without GitHub.

Like Renovate's local platform, it is the way to try rsi-bot on your own
repository before creating a GitHub App. It runs what the bot runs for a
labelled issue, on a clone of the repository's default branch (your working
tree and branches are left alone):

1. the task, from ``.rsi/config.toml`` (and an optional proposal file, the
   issue body) through :func:`harness.spec.load_task`: every error at once;
2. the loop (:func:`harness.loop.run_task`, ``keep="propose"`` as the bot
   does): calibration of B0, the rounds with the agent you choose, the
   verifier on every candidate;
3. what GitHub would show, written with the bot's own renderers
   (:mod:`bot.render`, :mod:`bot.web`, :mod:`harness.report`) into ``--out``::

       github/status-comment.md   the issue's sticky status comment
       github/pr-<n>.md           each kept candidate's draft PR: title, body, report comment
       github/check-<n>.md        each judged candidate's rsi/verifier check run
       page/index.html            the task page (bot/web.py's, from a real store)
       task.sqlite                that store (``rsi serve`` reads the same schema)

The candidate is verified in the Docker sandbox unless ``--verify inprocess``
says otherwise, and only the flag does: ``$RSI_VERIFY_MODE`` set to anything
but ``sandbox`` without the flag is refused (``verify_mode``), and with the
flag the first line of the output says that the candidate runs on this host.

Exit codes (also in README.md): 0 the flow ran (whatever the verdicts); 2 the
config or proposal is invalid (or the verification mode is not given by the
flag); 3 the task was refused (e.g. a benchmark too noisy for ``min_gain``);
4 an infrastructure failure (Docker, git, the verifier could not run).
"""

from __future__ import annotations

import getpass
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer

from bot import render
from bot.vocab import CandidateState, TaskState

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])

EXIT_OK, EXIT_INVALID, EXIT_REFUSED, EXIT_INFRA = 0, 2, 3, 4
TASK_STATE = {"finished": TaskState.FINISHED, "refused": TaskState.REFUSED,
              "paused": TaskState.PAUSED, "stopped": TaskState.STOPPED,
              "running": TaskState.RUNNING}


IN_PROCESS = ("inprocess", "in-process", "local")
"""The names of the in-process verification mode (``harness.verification.make_backend``'s)."""
HOST_WARNING = ("--verify inprocess: the candidate's code runs ON THIS HOST as {user}, outside any "
                "container: it can read your files and reach your network; use it only on code you "
                "trust (without the flag, the Docker sandbox verifies it)")


def verify_mode(flag: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The verification mode of ``rsi try``: the ``--verify`` flag's, else
    ``sandbox``. The environment never chooses it: ``$RSI_VERIFY_MODE`` set to
    another mode without the flag is a ValueError saying which flag to pass
    (the in-process mode runs the candidate on this host, so it is taken only
    from what the user typed)."""
    env = os.environ if environ is None else environ
    if flag:
        return flag
    named = env.get("RSI_VERIFY_MODE", "").strip()
    if named and named != "sandbox":
        where = ("runs the candidate on this host, outside any container"
                 if named in IN_PROCESS else "is not the Docker sandbox")
        raise ValueError(f"RSI_VERIFY_MODE={named[:60]} is set, but rsi try takes its verification "
                         f"mode only from --verify (that mode {where}): pass --verify {named[:60]} "
                         "to mean it, or unset RSI_VERIFY_MODE to verify in the Docker sandbox")
    return "sandbox"


@dataclass
class TryResult:
    out: Path
    status: str
    files: list[Path] = field(default_factory=list)
    page: Path | None = None
    candidates: int = 0


def _clone(repo: Path, target: Path) -> None:
    from harness.gitutil import default_branch, git

    if target.exists():
        shutil.rmtree(target)
    branch = default_branch(repo)
    git(target.parent, "clone", "--quiet", "--no-hardlinks", "--branch", branch, str(repo),
        str(target))


def _python_on_path() -> None:
    from harness.demo import _python_on_path as on_path

    on_path()


def _store_task(store: Any, repo_name: str, spec: Any, result: Any, records: list[Any]) -> Any:
    """The task as the bot's store would hold it after the same run."""
    from bot.store import stored_verdict

    task = store.start_task(repo_name, 1, labeler=getpass.getuser(), installation_id=None)
    store.update_task(task.id, state=TASK_STATE.get(result.status, TaskState.RUNNING),
                      summary=render.task_summary(spec), b0_sha=result.b0_sha,
                      bk_sha=result.bk_sha, rounds_done=result.rounds, budget=spec.agent.rounds)
    for r in records:
        kept = r.status in ("kept", "open")
        store.upsert_candidate(task.id, int(r.candidate), decision=r.decision,
                               verdict=stored_verdict(r.verdict),
                               sha=r.sha or None, branch=r.branch or None,
                               hypothesis=r.hypothesis, round=r.round, agent=r.agent,
                               state=CandidateState.PENDING if kept else CandidateState.NONE)
    return store.task(task.id)


def write_outputs(out: Path, store: Any, task: Any, records: list[Any]) -> list[Path]:
    """What GitHub would show, written with the bot's renderers."""
    from bot.web import render_page

    gh = out / "github"
    gh.mkdir(parents=True, exist_ok=True)
    cands = store.candidates(task.id)
    written = []
    status = render.status_comment(state=task.state, summary=task.summary or "", candidates=cands,
                                   budget=task.budget, rounds_done=task.rounds_done,
                                   bk=task.bk_sha, b0=task.b0_sha)
    written.append(_write(gh / "status-comment.md", status))
    by_n = {int(r.candidate): r for r in records}
    for c in cands:
        v = c.verdict_model
        if v is None:
            continue
        check = render.check_run(v)
        written.append(_write(gh / f"check-{c.n}.md",
                              f"rsi/verifier: {check['conclusion']}\n\n# {check['title']}\n\n"
                              f"{check['summary']}\n"))
        if c.state == CandidateState.PENDING:
            r = by_n.get(int(c.n))
            body = render.pr_body(issue=task.issue, n=c.n, hypothesis=c.hypothesis, verdict=v,
                                  labeler=task.labeler)
            comment = render.report_comment(v, ledger=[r] if r is not None else [])
            written.append(_write(gh / f"pr-{c.n}.md",
                                  f"# {render.pr_title(task.issue, c.n, c.hypothesis)}\n\n"
                                  f"{body}\n\n---\n\n{comment}\n"))
    page = render_page(store, task.id) or ""
    written.append(_write(out / "page" / "index.html", page))
    return written


DEFAULT_BUDGET_MIN = 15.0
"""``rsi try``'s wall-time budget: no round starts that could not end within it."""


def _budget_line(budget_min: float | None) -> str:
    """The budget, said before anything is measured."""
    if budget_min is None:
        return "budget: none (--budget-min 0); every round runs"
    return (f"budget: {budget_min:g} min of wall time (--budget-min): B0's calibration first "
            "(reused when this runner measured the same B0 and benchmark before), then no round "
            "starts that could not end within it; progress at least every 20 s")


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def run_try(repo: Path, out: Path, *, agent: str | None = None, patches: Sequence[Path] = (),
            rounds: int | None = None, verify: str | None = None, proposal: str | None = None,
            task_id: str = "try", budget_min: float | None = DEFAULT_BUDGET_MIN) -> TryResult:
    from bot.store import Store
    from harness.agents import make_agent
    from harness.cli import Budget, StepLines, estimate
    from harness.ledger import Ledger
    from harness.loop import run_task
    from harness.spec import load_task

    mode = verify_mode(verify)  # ValueError before anything runs
    steps = StepLines(None, 0, echo=typer.echo)  # the task comes next
    if mode in IN_PROCESS:
        steps.line(HOST_WARNING.format(user=getpass.getuser()))
    repo, out = Path(repo).resolve(), Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    target = out / "target"
    steps.line(f"step 1/4: clone {repo}'s default branch into {target} (your tree is untouched)")
    _clone(repo, target)
    spec = load_task(target, proposal, task_id)  # SpecError: every problem at once
    n_rounds = rounds or spec.agent.rounds
    kind = agent or spec.agent.kind
    steps.spec, steps.rounds = spec, n_rounds
    steps.line(f"step 2/4: task {task_id}: {spec.verify.objective.metric} of "
               f"'{spec.benchmark_name}', min_gain {spec.min_gain:.1%}; agent {kind}; "
               f"{estimate(spec, n_rounds)}")
    steps.line(_budget_line(budget_min))
    _python_on_path()
    agent_obj = make_agent(spec, kind, patches=[p.resolve() for p in patches] or None, repo=target)
    state_dir = out / "state"
    shutil.rmtree(state_dir, ignore_errors=True)
    result = run_task(target, spec, state_dir=state_dir, keep="propose", agent=agent_obj,
                      rounds=n_rounds, on_event=steps, verifier=mode,
                      should_stop=Budget(steps, budget_min))
    steps.line(f"step 3/4: the loop {result.status}: {result.reason}")
    records = Ledger(target).records(task=task_id)
    db = out / "task.sqlite"
    db.unlink(missing_ok=True)
    store = Store(f"sqlite:///{db}")
    try:
        task = _store_task(store, f"local/{repo.name}", spec, result, records)
        files = write_outputs(out, store, task, records)
    finally:
        store.close()
    page = out / "page" / "index.html"
    steps.line(f"step 4/4: wrote what GitHub would show: {out / 'github'}; the task page: "
               f"file://{page}")
    return TryResult(out=out, status=result.status, files=files, page=page,
                     candidates=len(records))


@app.command("try")
def try_cmd(
    repo: Path = typer.Option(Path("."), "--repo", help="Your repository (a git repo with .rsi/config.toml committed)."),
    out: Path = typer.Option(Path("rsi-try"), "--out", help="Where the files GitHub would show are written."),
    agent: str | None = typer.Option(None, "--agent", help="tuner | replay | command | claude-code | codex | aider | mini-swe-agent (default: the config's)."),
    patch: list[Path] = typer.Option([], "--patch", exists=True, dir_okay=False, help="For --agent replay: your patch files, one per round."),
    rounds: int | None = typer.Option(None, "--rounds", min=1, help="Rounds (default: the config's)."),
    verify: str | None = typer.Option(None, "--verify", help="sandbox (Docker; default) | inprocess: runs the candidate ON THIS HOST, outside any container (only for code you trust; $RSI_VERIFY_MODE never chooses it)."),
    task: Path | None = typer.Option(None, "--task", exists=True, dir_okay=False, help="A proposal (an issue body) to merge into the config."),
    open_page: bool = typer.Option(False, "--open", help="Open the task page in a browser."),
    budget_min: float = typer.Option(DEFAULT_BUDGET_MIN, "--budget-min", min=0,
                                     help="Wall-time budget in minutes: no round starts that could "
                                     "not end within it (0: no budget)."),
) -> None:
    """Run a labelled issue's whole flow locally and write what GitHub would show."""
    from harness.spec import SpecError

    try:
        res = run_try(repo, out, agent=agent, patches=patch, rounds=rounds, verify=verify,
                      proposal=task.read_text() if task else None,
                      budget_min=budget_min or None)
    except SpecError as exc:
        typer.echo(f"{len(exc.errors)} problem(s) in the config or proposal:", err=True)
        for e in exc.errors:
            typer.echo(f"  - {e}", err=True)
        raise typer.Exit(EXIT_INVALID) from None
    except ValueError as exc:  # an agent that cannot be made, a mode not given by the flag
        typer.echo(f"rsi try: {exc}", err=True)
        raise typer.Exit(EXIT_INVALID) from None
    except Exception as exc:  # noqa: BLE001 - infrastructure: say what failed, exit 4
        from verifier.infra import explain

        typer.echo(f"rsi try: {explain(exc)}", err=True)
        raise typer.Exit(EXIT_INFRA) from None
    for p in res.files:
        typer.echo(f"  {p}")
    if open_page and res.page is not None:
        import webbrowser

        webbrowser.open(res.page.as_uri())
    if res.status == "refused":
        raise typer.Exit(EXIT_REFUSED)
