"""The loop's typed events: what a real run emits, and their JSON round trip
(the ``actions`` executor carries them from a runner to the bot)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness.events import (
    BaselineMeasured,
    CandidateRecorded,
    Finished,
    Progress,
    Rebaselined,
    Reverified,
    RoundStarted,
    dump_event,
    load_event,
)
from harness.loop import load_state, rebaseline, run_task
from harness.spec import load_task
from verifier.calibrate import Calibration
from verifier.verdict import Verdict

from . import fakes
from .target import FASTER_SETTINGS, make_patch, make_target, sh


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    return make_target(tmp_path, python=sys.executable)


def test_a_run_emits_typed_events_that_survive_json(repo: Path, tmp_path: Path):
    events: list = []
    spec = load_task(repo, None, "t")
    run_task(repo, spec, state_dir=tmp_path / "s", rounds=1, verifier=fakes.FakeVerifier(),
             on_event=events.append)
    kinds = [type(e) for e in events if not isinstance(e, Progress)]
    assert kinds[0] is BaselineMeasured and kinds[-1] is Finished
    assert RoundStarted in kinds and CandidateRecorded in kinds
    base = next(e for e in events if isinstance(e, BaselineMeasured))
    assert isinstance(base.calibration, Calibration) and base.sha == sh(repo, "rev-parse", "main")
    cand = next(e for e in events if isinstance(e, CandidateRecorded))
    assert isinstance(cand.verdict, Verdict) and cand.record.candidate == cand.candidate == 1
    assert cand.status == "kept" and cand.bk == cand.sha  # the tuner's first step is kept
    # every event comes back equal from its JSON (the runner -> bot path)
    for ev in events:
        back = load_event(json.loads(json.dumps(dump_event(ev))))
        assert type(back) is type(ev) and back == ev
    # the verdict inside keeps its own wire form ("schema", as Verdict.to_json writes it)
    assert dump_event(cand)["verdict"] == json.loads(cand.verdict.to_json())
    # the loop state keeps the calibration typed, and the file reads back
    st = load_state(tmp_path / "s")
    assert st.calibration == base.calibration


def test_rebaseline_result_carries_each_outcome_with_its_verdict(repo: Path, tmp_path: Path):
    events: list = []
    spec = load_task(repo, None, "t")
    patch = make_patch(repo, tmp_path / "p1.patch", "faster", {"app/settings.toml": FASTER_SETTINGS})
    from harness.agents import ReplayAgent

    run_task(repo, spec, state_dir=tmp_path / "s", keep="propose", rounds=1,
             agent=ReplayAgent([patch]), verifier=fakes.FakeVerifier())
    sh(repo, "commit", "--allow-empty", "-qm", "unrelated change on main")
    res = rebaseline(repo, spec, "main", state_dir=tmp_path / "s",
                     verifier=fakes.FakeVerifier(), on_event=events.append)
    (out,) = res.candidates
    assert out.outcome == "reverified" and isinstance(out.verdict, Verdict)
    assert out.new_sha == sh(repo, "rev-parse", "rsi/t/1") != out.old_sha
    assert [type(e) for e in events if not isinstance(e, Progress)] == [Rebaselined, Reverified]
    rev = events[-1]
    assert rev.outcome == out and load_event(dump_event(rev)) == rev


@pytest.mark.parametrize("data, why", [
    ({"kind": "candidate", "task_id": "t"}, "round"),  # a candidate without its fields
    ({"kind": "verdict_forged", "task_id": "t"}, "kind"),  # no such event
    ({"kind": "baseline", "task_id": "t", "sha": "a" * 40, "extra": 1}, "extra"),  # unknown field
    ({"kind": "progress", "task_id": "t", "run": "many"}, "run"),
    ("not an object", ""),
])
def test_what_is_not_an_event_is_refused(data, why):
    with pytest.raises(ValidationError) as e:
        load_event(data)
    assert why in str(e.value)
