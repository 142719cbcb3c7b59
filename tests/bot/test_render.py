"""Renderers are pure: tested on their text."""

from __future__ import annotations

import hashlib

import pytest

from bot import render
from tests.bot._support import stored_candidates
from verifier.verdict import (
    Fingerprint,
    GuardResult,
    Interval,
    MetricComparison,
    ObjectiveResult,
    RunError,
    Verdict,
)

SHAS = {"b0": "b0b0b0b0b0b0b0", "bk": "bkbkbkbkbkbkbk", "candidate": "cacacacacaca12"}


def verdict(decision="accept", **kw) -> Verdict:
    base = dict(
        decision=decision, reason="throughput +12.0% (95% CI +9.0% … +15.0%)", benchmark="tts",
        objective=ObjectiveResult(benchmark="tts", metric="throughput", direction="higher",
                                  ratio=1.12, ratio_ci=Interval(low=1.09, high=1.15), gain=0.12,
                                  gain_ci=Interval(low=0.09, high=0.15), gain_vs_b0=0.2,
                                  p_value=0.001, min_gain=0.02),
        metrics=(
            MetricComparison(name="throughput", direction="higher", b0=40.0, bk=42.0,
                             candidate=47.0, ratio_vs_bk=1.12,
                             ratio_vs_bk_ci=Interval(low=1.09, high=1.15)),
            MetricComparison(name="latency_p95_s", direction="lower", source="samples",
                             b0=0.31, bk=0.30, candidate=0.305, ratio_vs_bk=1.016),
            MetricComparison(name="peak_rss_mib", direction="lower", source="measured",
                             b0=500, bk=500, candidate=520, ratio_vs_bk=1.04),
        ),
        guards=(GuardResult(name="latency_p95_s <= 1.05x", kind="ratio", metric="latency_p95_s",
                            against="bk", bound="<= 1.05x", value=1.016, status="pass"),
                GuardResult(name="WER", kind="wer", against="b0", bound="<= 0.05", value=0.01,
                            status="pass")),
        tradeoffs=("peak memory +4.0% (520 MiB vs 500 MiB)",),
        pairs=20, runs=42, shas=SHAS,
        fingerprint=Fingerprint(cpu_model="Xeon", cpu_count=2, accelerator="cpu"),
        duration_s=61.0,
    )
    base.update(kw)
    return Verdict(**base)


def test_marker_first_line_and_unique_kinds():
    body = render.with_marker("hello", render.REPORT)
    assert body.splitlines()[0] == "<!-- rsi-bot:report -->"
    assert render.marker("status") != render.marker("report")
    with pytest.raises(ValueError):
        render.marker("bad kind -->")


def test_report_has_the_required_parts():
    o = verdict().objective
    cands = stored_candidates(
        dict(n=1, state="open", decision="accept", hypothesis="h", sha="c" * 40,
             verdict=verdict(objective=o.model_copy(update={
                 "gain_ci": Interval(low=0.05, high=0.2)}))),
        dict(n=2, state="none", decision="reject", hypothesis="h2", sha="d" * 40,
             verdict=verdict("reject", objective=o.model_copy(update={
                 "gain": -0.03, "ratio": 0.97, "gain_ci": None, "ratio_ci": None}))))
    text = render.report_comment(verdict(), pr_note="🔁 Re-verified.",
                                 history=render.candidate_history(cands))
    assert text.startswith(render.marker(render.REPORT) + "\n🔁 Re-verified.")
    assert "Accepted" in text or "accepted" in text
    assert "comparing" in text and "cacacacaca" in text and "bkbkbkbkbk" in text
    assert "b0b0b0b0b0" in text
    assert "| metric | B0 | Bk | candidate |" in text and "interval (level)" in text
    for name in ("throughput", "latency_p95_s", "peak_rss_mib", "WER"):
        assert name in text
    assert "peak memory +4.0%" in text
    assert "```mermaid" in text and 'x-axis ["#1 PR open", "#2 rolled back"]' in text
    assert "bar [12, -3]" in text
    assert "<details>" in text and "Xeon" in text
    assert len(text) < render.COMMENT_LIMIT


def test_an_older_verdict_gets_its_gain_interval_from_its_ratio_interval():
    """A stored verdict with only the ratio interval (older verdicts) charts the
    gain interval ``harness.report.gain_interval`` makes of it (lower is better:
    1/ratio - 1, so the bounds swap)."""
    o = ObjectiveResult(benchmark="tts", metric="latency_s", direction="lower", ratio=0.8,
                        ratio_ci=Interval(low=0.75, high=0.85), gain=0.25)
    (point,) = render.candidate_history(stored_candidates(
        dict(n=1, state="pending", decision="accept", verdict=verdict(objective=o))))
    assert point.gain == 0.25 and point.status == "open"
    assert point.gain_low == pytest.approx(1 / 0.85 - 1)
    assert point.gain_high == pytest.approx(1 / 0.75 - 1)


def test_report_with_ledger_records():
    from harness.ledger import LedgerRecord

    recs = [LedgerRecord.from_verdict(verdict(), id="3/1", task="3", round=1, candidate=1,
                                      agent="replay", hypothesis="cache it", status="open")]
    text = render.report_comment(verdict(), ledger=recs)
    assert "Ledger (1 records)" in text and "cache it" in text


def test_report_is_cut_to_the_limit():
    from harness.ledger import LedgerRecord

    huge = [LedgerRecord.from_verdict(verdict(), id=f"x/{i}", task="x", round=i, candidate=i,
                                      agent="replay", hypothesis="y" * 3000, status="open")
            for i in range(1, 401)]
    text = render.report_comment(verdict(), ledger=huge)
    assert len(text) <= render.COMMENT_LIMIT and "older record(s) left out" in text
    assert text.count("<details>") == text.count("</details>")


@pytest.mark.parametrize("decision, conclusion", [
    ("accept", "success"), ("reject", "failure"), ("inconclusive", "neutral"),
    ("review", "neutral"), ("error", "neutral"),
])
def test_check_run_conclusions(decision, conclusion):
    extra = {}
    if decision == "error":
        extra = dict(error=RunError(stage="candidate", message="docker died"), objective=None)
    payload = render.check_run(verdict(decision, **extra))
    assert payload["conclusion"] == conclusion
    assert len(payload["title"]) <= 200 and len(payload["summary"]) <= 65535


def test_error_verdict_says_infrastructure():
    v = verdict("error", error=RunError(stage="candidate", message="docker died",
                                        stderr_tail="OOM"), objective=None, metrics=())
    text = render.report_comment(v)
    assert "infrastructure" in text and "docker died" in text and "OOM" in text
    assert render.check_run_error("runner offline")["conclusion"] == "neutral"


SUMMARY_CONFIG = """
[benchmarks.tts]
command = "python bench/tts.py"
[benchmarks.tts.metrics]
throughput = "higher"
[benchmarks.tts.samples]
latency_s = "lower"
[objective]
benchmark = "tts"
metric = "throughput"
min_gain = 0.05
[[guards]]
metric = "latency_p95_s"
max_ratio = 1.05
[[quality]]
kind = "output_length"
output = "transcripts"
[agent]
kind = "replay"
rounds = 3
"""


def test_status_comment():
    """The summary of a real TaskSpec (objective, guards and quality live under
    ``spec.verify``): never "? of benchmark ?"."""
    from harness.spec import build_task

    summary = render.task_summary(build_task(SUMMARY_CONFIG, None, "t1"))
    assert "throughput of benchmark tts, at least +5.0%" in summary
    assert "?" not in summary
    assert "latency\\_p95\\_s ≤ 1.05x" not in summary  # snake_case stays readable
    assert "- **guard**: latency_p95_s ≤ 1.05x" in summary and "replay, 3 rounds" in summary
    assert "- **quality**: length(transcripts) within ±2%" in summary

    cands = stored_candidates(dict(n=1, decision="accept", pr_number=7, state="open",
                                   hypothesis="cache | speaker"))
    text = render.status_comment(state="running", summary=summary, candidates=cands, budget=3,
                                 rounds_done=1, bk="abcdef1234567", b0="0123456789")
    assert text.startswith(render.marker(render.STATUS))
    assert "running rounds" in text and "Rounds: 1 of 3" in text
    assert "| 1 | ✅ accepted | cache \\| speaker | #7 |" in text


def test_status_errors_list():
    text = render.status_comment(state="invalid", errors=["[objective]: metric 'x' unknown"])
    assert "- \\[objective\\]: metric 'x' unknown" in text and "add the label again" in text


def test_pr_texts_and_replies():
    assert render.pr_title(3, 2, "Cache the speaker embedding\nmore") == \
        "rsi #3.2: Cache the speaker embedding"
    body = render.pr_body(issue=3, n=2, hypothesis="Cache it", verdict=verdict(), labeler="alice")
    assert "#3" in body and "@alice" in body and "never approves or merges" in body
    assert render.refusal("bob", "rerun", "no access") == \
        "@bob the command /rsi rerun was not run: no access"
    assert "/rsi budget N" in render.help_text()
    assert "conflicts with #5" in render.conflict_note(5, "CONFLICT (content)")


def test_check_progress_text_and_task_check():
    assert render.check_progress_text(phase="measure", round_=2, rounds=5, candidate=2, pairs=6,
                                      runs=12, total=20) == \
        "round 2/5 · candidate 2 · measure · 6 pairs so far (12/20 runs)"
    assert render.check_progress_text() == "in progress"
    hostile = render.check_progress_text(phase="@org/team see https://evil.example\n# x",
                                         pairs="9; rm")  # not an int: left out
    assert "@org" not in hostile and "https://evil" not in hostile and "rm" not in hostile
    cands = stored_candidates(dict(n=1, state="open", decision="accept", pr_number=4),
                              dict(n=2, state="none", decision="reject", pr_number=None))
    done = render.task_check("finished", rounds_done=2, budget=3, candidates=cands)
    assert done["conclusion"] == "success"
    assert done["title"] == "🏁 finished: 2 round(s) of 3, 2 candidate(s), 1 kept"
    assert "- candidate 1: ✅ accepted (#4)" in done["summary"]
    assert render.task_check("stopped", rounds_done=1, budget=3, candidates=[])["conclusion"] \
        == "cancelled"
    assert render.task_check("failed", rounds_done=0, budget=None, candidates=[])["conclusion"] \
        == "neutral"


def test_a_digest_matches_its_text_only_in_full():
    text = "### Minimum gain\n\n5%\n"
    d = render.proposal_digest(text)
    assert len(d) == render.DIGEST_CHARS and render.digest_matches(text, d)
    assert render.digest_matches(text, hashlib.sha256(text.encode()).hexdigest())
    assert not render.digest_matches(text, d[:12]) and not render.digest_matches(text + " ", d)


def test_a_proposal_with_thousands_of_problems_says_how_many_are_not_shown():
    errors = [f"proposal guard {i} (m): max_ratio must be a number" for i in range(3000)]
    text = render.status_comment(state="invalid", errors=errors)
    assert len(text) < render.COMMENT_LIMIT and "cut to fit" not in text
    assert f"**{3000 - render.MAX_ERRORS_SHOWN:,} more problem(s) not shown here**" in text
