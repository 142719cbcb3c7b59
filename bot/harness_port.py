"""The bot's narrow, typed port to the harness.

Everything the bot needs of the harness goes through :class:`HarnessPort`:
building a task (``harness.spec``), running and re-judging it
(``harness.loop``), and reading what the loop recorded (the ledger on
``rsi/ledger``, the run's spending in ``state.json``). ``RealHarness`` calls
the harness in-process, importing it lazily (the web process never needs the
loop); tests pass a fake with the same methods.

The loop's events are ``harness.events.LoopEvent`` (typed, keyed on
``kind``); results are ``TaskResult``, ``RebaselineResult``, ``WatchResult`` and the
verifier's ``Verdict``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from harness.spec import SpecError as SpecError  # re-exported: handlers catch it

if TYPE_CHECKING:
    from harness.events import LoopEvent
    from harness.ledger import LedgerRecord, Usage
    from harness.loop import RebaselineResult, TaskResult
    from harness.spec import TaskSpec
    from harness.watch import WatchResult
    from verifier.verdict import Verdict


class HarnessPort(Protocol):
    def build_task(self, config_text: str, proposal_body: str | None, task_id: str, *,
                   title: str = "", repo_files: set[str] | None = None) -> TaskSpec:
        """The task, or ``SpecError(errors)``."""
        ...

    def load_config(self, repo: Path, ref: str | None = None) -> str:
        """``.rsi/config.toml`` at ``ref`` of a local clone (``SpecError`` when missing)."""
        ...

    def repo_files(self, repo: Path, ref: str | None = None) -> set[str]: ...

    def run_task(self, repo: Path, spec: TaskSpec, *, state_dir: Path, keep: Literal["advance", "propose"],
                 rounds: int | None, should_stop: Callable[[], bool],
                 on_event: Callable[[LoopEvent], None]) -> TaskResult: ...

    def rebaseline(self, repo: Path, spec: TaskSpec, ref: str, *, state_dir: Path,
                   on_event: Callable[[LoopEvent], None] | None = None) -> RebaselineResult: ...

    def reverify(self, repo: Path, spec: TaskSpec, branch: str, *, state_dir: Path) -> Verdict: ...

    def watch(self, repo: Path, spec: TaskSpec, merge_sha: str, *, state_dir: Path) -> WatchResult:
        """The watch after merge: ``merge_sha`` against its parent, fresh hidden draw,
        more requests (``harness.watch``)."""
        ...

    def ledger(self, repo: Path, task_id: str) -> list[LedgerRecord]:
        """The task's records on ``rsi/ledger`` of a local clone (oldest first)."""
        ...

    def spent(self, state_dir: Path) -> tuple[Usage, dict[str, float | int | None]] | None:
        """(what the task's rounds used, its limits) from its loop state; None before a run."""
        ...


class RealHarness:
    """The harness package, called in-process."""

    def build_task(self, config_text: str, proposal_body: str | None, task_id: str, *,
                   title: str = "", repo_files: set[str] | None = None) -> TaskSpec:
        from harness import spec

        return spec.build_task(config_text, proposal_body, task_id, title=title,
                               repo_files=repo_files)

    def load_config(self, repo: Path, ref: str | None = None) -> str:
        from harness import spec

        return spec.load_repo_config(repo, ref)

    def repo_files(self, repo: Path, ref: str | None = None) -> set[str]:
        from harness import spec

        return spec.repo_files(repo, ref)

    def run_task(self, repo: Path, spec: TaskSpec, *, state_dir: Path, keep: Literal["advance", "propose"],
                 rounds: int | None, should_stop: Callable[[], bool],
                 on_event: Callable[[LoopEvent], None]) -> TaskResult:
        from harness import loop

        return loop.run_task(repo, spec, state_dir=state_dir, keep=keep, rounds=rounds,
                             should_stop=should_stop, on_event=on_event)

    def rebaseline(self, repo: Path, spec: TaskSpec, ref: str, *, state_dir: Path,
                   on_event: Callable[[LoopEvent], None] | None = None) -> RebaselineResult:
        from harness import loop

        return loop.rebaseline(repo, spec, ref, state_dir=state_dir, on_event=on_event)

    def reverify(self, repo: Path, spec: TaskSpec, branch: str, *, state_dir: Path) -> Verdict:
        from harness import loop

        return loop.reverify(repo, spec, branch, state_dir=state_dir)

    def watch(self, repo: Path, spec: TaskSpec, merge_sha: str, *, state_dir: Path) -> WatchResult:
        from harness import watch

        return watch.watch(repo, spec, merge_sha, state_dir=state_dir)

    def ledger(self, repo: Path, task_id: str) -> list[LedgerRecord]:
        from harness.ledger import Ledger

        return Ledger(repo).records(task=task_id)

    def spent(self, state_dir: Path) -> tuple[Usage, dict[str, float | int | None]] | None:
        from harness.loop import load_state

        try:
            st = load_state(state_dir)
        except (OSError, ValueError):
            return None
        return (st.spent, dict(st.budget)) if st is not None else None
