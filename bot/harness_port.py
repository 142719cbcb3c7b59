"""The bot's narrow port to the harness (the loop that runs agents and the verifier).

``RealHarness`` calls ``harness.spec`` and ``harness.loop`` (imported lazily:
the web process never needs them); tests pass a fake with the same methods.
Loop events are read through :func:`event_view`, which accepts the harness's
``LoopEvent`` (pydantic or dataclass) or a plain dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from harness.spec import SpecError  # noqa: F401  (re-exported: handlers catch it)
from verifier.verdict import Verdict


class HarnessPort(Protocol):
    def build_task(self, config_text: str, proposal_body: str | None, task_id: str, *,
                   title: str = "", repo_files: set[str] | None = None) -> Any:
        """A TaskSpec, or ``SpecError(errors)``."""
        ...

    def load_config(self, repo: Path, ref: str | None = None) -> str:
        """``.rsi/config.toml`` at ``ref`` of a local clone (``SpecError`` when missing)."""
        ...

    def repo_files(self, repo: Path, ref: str | None = None) -> set[str]: ...

    def run_task(self, repo: Path, spec: Any, *, state_dir: Path, keep: str,
                 rounds: int | None, should_stop: Callable[[], bool],
                 on_event: Callable[[Any], None]) -> Any: ...

    def rebaseline(self, repo: Path, spec: Any, ref: str, *, state_dir: Path,
                   on_event: Callable[[Any], None] | None = None) -> Any: ...

    def reverify(self, repo: Path, spec: Any, branch: str, *, state_dir: Path) -> Verdict: ...


class RealHarness:
    """The harness package, called in-process."""

    def build_task(self, config_text, proposal_body, task_id, *, title="", repo_files=None):
        from harness import spec

        return spec.build_task(config_text, proposal_body, task_id, title=title,
                               repo_files=repo_files)

    def load_config(self, repo, ref=None):
        from harness import spec

        return spec.load_repo_config(repo, ref)

    def repo_files(self, repo, ref=None):
        from harness import spec

        return spec.repo_files(repo, ref)

    def run_task(self, repo, spec, *, state_dir, keep, rounds, should_stop, on_event):
        from harness import loop

        return loop.run_task(repo, spec, state_dir=state_dir, keep=keep, rounds=rounds,
                             should_stop=should_stop, on_event=on_event)

    def rebaseline(self, repo, spec, ref, *, state_dir, on_event=None):
        from harness import loop

        return loop.rebaseline(repo, spec, ref, state_dir=state_dir, on_event=on_event)

    def reverify(self, repo, spec, branch, *, state_dir):
        from harness import loop

        return loop.reverify(repo, spec, branch, state_dir=state_dir)


@dataclass
class EventView:
    """A loop event, flattened: ``kind`` plus whatever fields it carries."""

    kind: str
    data: dict[str, Any] = field(default_factory=dict)

    def get(self, *names: str, default: Any = None) -> Any:
        for n in names:
            if n in self.data and self.data[n] is not None:
                return self.data[n]
            # one level down (e.g. event.data / event.payload / event.record)
            for inner in ("data", "payload", "record"):
                sub = self.data.get(inner)
                if isinstance(sub, dict) and sub.get(n) is not None:
                    return sub[n]
        return default

    @property
    def verdict(self) -> Verdict | None:
        v = self.get("verdict")
        if v is None or isinstance(v, Verdict):
            return v
        if isinstance(v, str):
            return Verdict.from_json(v)
        if isinstance(v, dict):
            return Verdict.model_validate(v)
        return None


def _plain(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        # keep nested verdicts as objects: dump shallowly
        return {k: getattr(obj, k) for k in type(obj).model_fields}
    if hasattr(obj, "__dataclass_fields__"):
        return {k: getattr(obj, k) for k in obj.__dataclass_fields__}
    if isinstance(obj, dict):
        return dict(obj)
    return {k: v for k, v in vars(obj).items() if not k.startswith("_")}


def event_view(ev: Any) -> EventView:
    data = _plain(ev)
    kind = data.get("kind") or data.get("type") or data.get("event") or ""
    return EventView(kind=str(kind), data=data)
