"""The verdict contract: ``Decision`` values, JSON round trips, older verdicts."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from verifier.verdict import ARM_LABEL, Decision, Verdict, arm_label

OLD_JSON = (
    '{"schema":"rsi.verdict/1","decision":"review","reason":"suspicious gain +150%",'
    '"benchmark":"tts","pairs":10,"runs":22,"started_at":"2026-01-02T03:04:05Z","duration_s":1.5}'
)


def test_decision_members_are_the_json_strings():
    assert [d.value for d in Decision] == ["accept", "review", "reject", "inconclusive", "error"]
    assert Decision.ACCEPT == "accept" and f"{Decision.REJECT}" == "reject"
    assert {"inconclusive": 1}[Decision.INCONCLUSIVE] == 1  # a key by string finds the member


def test_verdict_json_is_unchanged_and_old_verdicts_read_back():
    v = Verdict.model_validate(json.loads(OLD_JSON))
    assert v.decision is Decision.REVIEW and v.decision == "review" and not v.accepted
    again = Verdict.from_json(v.to_json())
    assert again == v and json.loads(v.to_json())["decision"] == "review"
    made = Verdict(decision=Decision.ACCEPT, reason="ok")
    assert made.accepted and '"decision":"accept"' in made.to_json()
    assert Verdict(decision="error", reason="x").decision is Decision.ERROR
    with pytest.raises(ValidationError):
        Verdict(decision="accepted", reason="not a decision")


def test_arm_labels():
    assert [arm_label(a) for a in ("bk", "b0", "candidate", "other")] == [
        "Bk",
        "B0",
        "candidate",
        "other",
    ]
    assert set(ARM_LABEL) == {"bk", "b0", "candidate"}
