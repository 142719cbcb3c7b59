"""Attack test (issue 18, point 2): a candidate's strings are never quoted into
a verdict's reason, the ledger or the next round's TASK.md.

The candidate runs in an in-process benchmark with the task's hidden seed (a
hidden evaluation sentence) in its environment; it adds the sentence to its
result as an unknown top-level key. The protocol error names the category and
the count, never the key, so the sentence goes nowhere an agent or a reader
can see it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.agents import ReplayAgent
from harness.ledger import Ledger
from harness.loop import run_task
from harness.spec import load_task

from .target import CONFIG, FASTER_SETTINGS, make_patch, make_target

HIDDEN = "HIDDEN-EVAL the quick brown fox sings at dawn"

LEAKING_CORE = '''\
import atexit, json, os

WORDS = ["the", "cat", "sat", "on", "the", "mat"]


def _leak():
    path = os.environ["RSI_RESULT"]
    data = json.load(open(path))
    data[os.environ.get("RSI_SEED", "none")] = 1
    json.dump(data, open(path, "w"))


atexit.register(_leak)


def transcribe(i):
    return " ".join(WORDS)
'''


def test_a_hidden_sentence_written_as_a_result_key_reaches_no_reader(tmp_path: Path, monkeypatch):
    cfg = (CONFIG.replace("{python}", sys.executable).replace("max_straight_rejections = 3", "max_straight_rejections = 5")
           .replace("min_gain = 0.1", "min_gain = 0.9")
           + '\n[hidden]\nseed_env = "SECRET_SEED"\n')
    repo = make_target(tmp_path, python=sys.executable, config=cfg)
    leak = make_patch(repo, tmp_path / "leak.patch", "leak", {"app/core.py": LEAKING_CORE})
    second = make_patch(repo, tmp_path / "second.patch", "faster", {"app/settings.toml": FASTER_SETTINGS})
    monkeypatch.setenv("SECRET_SEED", HIDDEN)  # the candidate's run sees it as RSI_SEED
    # min_gain 90%: no noisy spell of a loaded box refuses the task at calibration (no gain is judged here)
    spec = load_task(repo, None, "t18")
    events: list = []
    res = run_task(repo, spec, state_dir=tmp_path / "state", agent=ReplayAgent([leak, second]), rounds=2,
                   verifier="inprocess", on_event=events.append)
    assert res.status != "refused", res.reason
    first = res.candidates[0]
    assert first.decision == "error", first.reason
    assert "1 unknown top-level key(s)" in first.reason and "allowed: metrics" in first.reason
    # the verdict, the ledger (every line, every commit), the events and round 2's TASK.md
    assert HIDDEN not in first.reason
    ledger = subprocess.run(["git", "log", "-p", "rsi/ledger"], cwd=repo, capture_output=True, text=True).stdout
    assert ledger and HIDDEN not in ledger
    assert all(HIDDEN not in r.to_line() for r in Ledger(repo).records())
    assert all(HIDDEN not in e.model_dump_json() for e in events)
    task_md = (tmp_path / "state" / "rounds" / "2" / "TASK.md").read_text()
    assert HIDDEN not in task_md
    # a verified candidate is shown by the fields we produced, never by its verdict's reason text
    assert "#1" in task_md and "a verifier run failed (stage: candidate" in task_md
    assert "unknown top-level key" not in task_md
