"""Progress of a verifier run inside a container reaches the harness as events."""

from __future__ import annotations

import dataclasses
import json

from harness.verification import _progress_lines
from verifier.cli import PROGRESS_PREFIX, progress_bar
from verifier.measure import ProgressEvent


def test_progress_json_lines_round_trip(monkeypatch, capsys):
    from rich.console import Console

    monkeypatch.setenv("RSI_PROGRESS_JSON", "1")
    ev = ProgressEvent(phase="measure", run=3, total=20, arm="candidate", pairs=2, benchmark="tts")
    with progress_bar(Console(stderr=True), "verifying") as on_event:
        on_event(ev)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith(PROGRESS_PREFIX)]
    assert len(lines) == 1
    assert json.loads(lines[0][len(PROGRESS_PREFIX):]) == dataclasses.asdict(ev)

    seen = []
    on_output = _progress_lines(lambda msg, data: seen.append((msg, data)))
    on_output("some benchmark noise")
    on_output(PROGRESS_PREFIX + "{not json")
    on_output(lines[0])
    assert seen == [("measure", dataclasses.asdict(ev))]


def test_no_progress_lines_by_default(monkeypatch, capsys):
    from rich.console import Console

    monkeypatch.delenv("RSI_PROGRESS_JSON", raising=False)
    with progress_bar(Console(stderr=True), "verifying") as on_event:
        on_event(ProgressEvent(phase="measure", run=1, total=2))
    assert PROGRESS_PREFIX not in capsys.readouterr().err
