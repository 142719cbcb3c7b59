"""One vocabulary (issue 13): every state the bot assigns is a member of its
enum, has words in every renderer, and is drawn in bot/README.md; every
decision has one style, the same emoji as ``harness.report``."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import get_args

import pytest

from bot import render
from bot.vocab import (
    DECISION_STYLE,
    STORE_STATES,
    TASK_CONCLUSIONS,
    TASK_STATE_WORDS,
    CandidateState,
    JobKind,
    TaskState,
    decision_style,
)
from harness.report import EMOJI
from tests.bot._support import stored_candidates
from verifier import verdict as verdict_mod

BOT = Path(__file__).resolve().parents[2] / "bot"
# the store call (or model) whose ``state=`` keyword is a task's or a candidate's state
SETTERS = {"update_task": TaskState, "Task": TaskState, "upsert_candidate": CandidateState}


def _assigned_states() -> list[tuple[str, str, str]]:
    """(file:line, call, what) for each ``state=`` value passed to a setter: a
    string literal as itself, an enum member as ``Enum.MEMBER``."""
    found = []
    for path in sorted(BOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            if name not in SETTERS:
                continue
            for kw in node.keywords:
                for value in ast.walk(kw.value) if kw.arg == "state" else ():
                    if isinstance(value, ast.Constant) and isinstance(value.value, str):
                        found.append((f"{path.name}:{node.lineno}", name, value.value))
                    elif (isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name)
                          and value.value.id.endswith("State")):
                        found.append((f"{path.name}:{node.lineno}", name,
                                      f"{value.value.id}.{value.attr}"))
    return found


def test_every_state_the_bot_assigns_is_a_member_of_its_enum():
    found = _assigned_states()
    assert len({s for _, call, s in found if call == "update_task"}) >= 3  # the scan sees them
    # the store's candidates take the states of STORE_STATES (``CandidateState`` is the
    # bot's name for the harness's ``CandidateStatus``)
    members = {call: {f"{enum.__name__}.{m.name}" for m in enum} for call, enum in SETTERS.items()}
    members["upsert_candidate"] = {f"CandidateState.{m.name}" for m in STORE_STATES}
    bad = [(where, s) for where, call, s in found if s not in members[call]]
    assert bad == []  # no bare strings, and no task state given to a candidate


def test_every_task_state_has_words_and_paused_is_no_longer_raw():
    assert set(TASK_STATE_WORDS) == set(TaskState)
    body = render.status_comment(state="paused")
    assert "## rsi: ⏸️ paused (`/rsi resume` continues)" in body
    check = render.task_check("paused", rounds_done=1, budget=3, candidates=[])
    assert check["title"].startswith("⏸️ paused") and check["conclusion"] == "neutral"
    assert set(TASK_CONCLUSIONS) <= set(TaskState)


def test_every_candidate_state_has_a_ledger_status():
    """One candidate vocabulary, the harness's: the store's states are members
    of it, and each has the ledger's word (what the report's chart says)."""
    from harness import ledger, loop

    assert CandidateState is ledger.CandidateStatus and not hasattr(loop, "CandidateState")
    assert STORE_STATES < set(CandidateState)
    assert {s: s.ledger_word for s in STORE_STATES} == {
        "none": "rolled_back", "pending": "open", "open": "open", "conflict": "conflict",
        "merged": "merged", "closed": "rolled_back"}


def test_one_decision_style_with_the_reports_emoji():
    decisions = set(get_args(verdict_mod.Decision)) or {d.value for d in verdict_mod.Decision}
    assert set(DECISION_STYLE) == decisions
    assert {d: s.emoji for d, s in DECISION_STYLE.items()} == EMOJI
    assert {d: s.conclusion for d, s in DECISION_STYLE.items()} == {
        "accept": "success", "reject": "failure", "review": "neutral",
        "inconclusive": "neutral", "error": "neutral"}
    assert decision_style("weird") == ("", "weird", "neutral")


@pytest.mark.parametrize("decision", sorted(DECISION_STYLE))
def test_every_renderer_shows_a_decision_the_same_way(decision):
    style = decision_style(decision)
    (cand,) = stored_candidates(dict(n=1, decision=decision, state="open", pr_number=4,
                                     hypothesis="h", sha="a" * 40))
    shown = f"{style.emoji} {style.words}"
    assert f"| 1 | {shown} | h | #4 |" in render.status_comment(state="running", candidates=[cand])
    assert f"- candidate 1: {shown} (#4)" in render.task_check(
        "finished", rounds_done=1, budget=1, candidates=[cand])["summary"]


def test_short_shas_are_12_hex_digits():
    sha = "0123456789abcdef" * 2 + "01234567"
    assert render.short_sha(sha) == "0123456789ab"
    assert render.short_sha("<b>12</b>") == "b12b" and render.short_sha(None) == "?"
    assert f"B0 `{sha[:12]}` · Bk `{sha[:12]}`" in render.status_comment(
        state="running", b0=sha, bk=sha)
    assert render.reverified_note(sha) == f"🔁 Re-verified against Bk `{sha[:12]}`."


def test_the_readme_draws_every_state_and_job_kind():
    readme = (BOT / "README.md").read_text()

    def section(title: str) -> str:
        return readme.split(f"## {title}", 1)[1].split("\n## ", 1)[0]

    tasks, cands = section("Task states"), section("Candidate states")
    jobs = section("Job kinds")
    for states, text in ((TaskState, tasks), (STORE_STATES, cands), (JobKind, jobs)):
        missing = [s.value for s in states if f"`{s.value}`" not in text]
        assert missing == []
    assert re.search(r"There is no `superseded` state", tasks)
