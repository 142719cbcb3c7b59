"""harness.report: the verifier report as markdown (the bot's PR comment) and
HTML, tested on its text."""

from __future__ import annotations

import re
from datetime import datetime, timezone

import pytest

from harness.ledger import LedgerRecord
from harness.report import (
    MAX_MARKDOWN_CHARS,
    HistoryPoint,
    comparing_line,
    headline,
    history_from_ledger,
    render_html_report,
    render_markdown_report,
    render_mermaid_chart,
    render_summary_table,
    summary_rows,
)
from verifier.verdict import (
    Fingerprint,
    GuardResult,
    Interval,
    MetricComparison,
    ObjectiveResult,
    RunError,
    Verdict,
)

SHAS = {"b0": "b0" * 20, "bk": "bk" * 20, "candidate": "cc" * 20}
FP = Fingerprint(cpu_model="AMD EPYC 9654", cpu_count=2, machine="x86_64", python="3.11.7",
                 accelerator="cpu", torch="2.13.0+cpu", container_image="rsi-bot/base:bookworm")
STARTED = datetime(2026, 12, 2, 18, 0, tzinfo=timezone.utc)


def _metric(name, direction, b0, bk, cand, unit=""):
    return MetricComparison(
        name=name, direction=direction, unit=unit, b0=b0, bk=bk, candidate=cand,
        ratio_vs_bk=cand / bk, ratio_vs_bk_ci=Interval(low=cand / bk * 0.97, high=cand / bk * 1.03),
        ratio_vs_b0=cand / b0, ratio_vs_b0_ci=Interval(low=cand / b0 * 0.97, high=cand / b0 * 1.03),
    )


def _guards(length_change=0.0):
    out = [GuardResult(name="failed requests (tts)", kind="failed_requests", metric="counts.failed",
                       bound="== 0", value=0.0, status="pass")]
    for ref in ("bk", "b0"):
        out += [
            GuardResult(name="latency_p95_s <= 1.05x", kind="ratio", metric="latency_p95_s", against=ref,
                        bound="<= 1.05x", value=0.8, ci=Interval(low=0.75, high=0.85), status="pass"),
            GuardResult(name="peak_rss_mib <= 1.02x [default]", kind="ratio", metric="peak_rss_mib",
                        against=ref, bound="<= 1.02x", value=1.004, status="pass"),
            GuardResult(name="startup_s <= 1.2x", kind="ratio", metric="startup_s", against=ref,
                        bound="<= 1.2x", value=0.99, status="pass"),
            GuardResult(name="WER(transcripts)", kind="wer", metric="outputs.transcripts", against=ref,
                        bound="<= 2.00%; delta <= +0.00%", value=0.0, status="pass",
                        detail="WER 0.00% against ground truth"),
            GuardResult(name="length(audio_samples) within ±1%", kind="output_length",
                        metric="outputs.audio_samples", against=ref, bound="within ±1.0%", value=length_change,
                        status="pass" if abs(length_change) <= 0.01 else "fail",
                        detail=f"length 63360 vs ref 84480 ({length_change:+.2%})"),
        ]
    return out


def make_verdict(decision="accept", *, gain=0.25, gain_vs_b0=0.9, length_change=0.0, reason=None, **kw):
    tp_bk, tp_b0 = 8.0, (8.0 * (1 + gain)) / (1 + gain_vs_b0)
    tp_c = tp_bk * (1 + gain)
    return Verdict(
        decision=decision,
        reason=reason or "gain +25.0% [+20.1%, +30.2%] clears min_gain and the noise margin; p=0.0039",
        benchmark="tts",
        objective=ObjectiveResult(
            benchmark="tts", metric="throughput", direction="higher", ratio=1 + gain,
            ratio_ci=Interval(low=1 + gain - 0.05, high=1 + gain + 0.05), gain=gain,
            gain_ci=Interval(low=gain - 0.05, high=gain + 0.05), gain_vs_b0=gain_vs_b0, p_value=0.0039,
            min_gain=0.03, noise_margin=0.012,
        ),
        metrics=(
            _metric("throughput", "higher", tp_b0, tp_bk, tp_c),
            _metric("latency_p95_s", "lower", 0.35, 0.12, 0.096, "s"),
            _metric("peak_rss_mib", "lower", 257.0, 258.0, 259.0, "MiB"),
            _metric("startup_s", "lower", 3.1, 3.0, 2.97, "s"),
            _metric("ttfa_p50_s", "lower", 0.05, 0.03, 0.025, "s"),
        ),
        guards=tuple(_guards(length_change)),
        tradeoffs=("Peak memory (peak_rss_mib): 258 MiB -> 259 MiB, +0.4% vs Bk (no clear change), +0.8% vs B0.",),
        pairs=8, runs=27, shas=SHAS, fingerprint=FP, started_at=STARTED, duration_s=93.0,
        settings={"device": "cpu", "requests": 8}, **kw,
    )


def _measured(decision: str, reason: str, b0: float, bk: float, cand: float) -> Verdict:
    """A verdict that measured the objective (throughput) on the three arms."""
    return Verdict(decision=decision, reason=reason, benchmark="tts",
                   objective=ObjectiveResult(benchmark="tts", metric="throughput", direction="higher"),
                   metrics=(MetricComparison(name="throughput", direction="higher", b0=b0, bk=bk,
                                             candidate=cand),))


def make_ledger(n=5) -> list[LedgerRecord]:
    recs = []
    tp = 4.0
    for i in range(1, n + 1):
        kept = i % 2 == 0
        cand = tp * (1.2 if kept else 0.98)
        decision, reason = ("accept", "ok") if kept else ("reject", "objective wholly below min_gain")
        recs.append(LedgerRecord(
            id=f"t/{i}", event="candidate", task="t", round=i, candidate=i,
            agent="replay" if i > 2 else "tuner", hypothesis=f"change number {i}",
            sha=f"{i:040d}", base_sha="b0" * 20 if i == 1 else "x", b0_sha="b0" * 20,
            decision=decision, status="kept" if kept else "rolled_back",
            reason=reason, gain=0.2 if kept else -0.02,
            gain_vs_b0=cand / 4.0 - 1, objective_metric="throughput",
            verdict=_measured(decision, reason, 4.0, tp, cand),
        ))
        if kept:
            tp = cand
    return recs


# ---------------------------------------------------------------- headline


def test_headline_says_decision_gain_and_b0():
    h = headline(make_verdict())
    assert h.startswith("✅ **Accepted**")
    assert "throughput +25.0% better vs Bk" in h
    assert "95% repeated interval +20.0% to +30.0%" in h
    assert "+90.0% vs B0 (1.90x)" in h


@pytest.mark.parametrize("decision,word", [("reject", "Rejected"), ("review", "Needs review"),
                                           ("inconclusive", "Inconclusive")])
def test_headline_words(decision, word):
    assert f"**{word}**" in headline(make_verdict(decision))


def test_error_verdict_is_not_a_regression():
    v = Verdict(decision="error", reason="the candidate: benchmark crashed", shas=SHAS,
                error=RunError(stage="candidate", message="exit code 1", stderr_tail="Traceback ... boom"))
    md = render_markdown_report(v, ledger=[])
    assert "not a regression" in md
    assert "_No measurements._" in md
    assert "boom" in md and "<details><summary>stderr (tail)</summary>" in md
    assert "an unrecorded machine" in md


def test_comparing_line():
    line = comparing_line(make_verdict())
    assert line.startswith(f"comparing `{SHAS['candidate'][:12]}` with Bk `{SHAS['bk'][:12]}` and B0 `{SHAS['b0'][:12]}`")
    assert "on CPU (AMD EPYC 9654, 2 cores)" in line
    assert "8 pairs, 27 runs" in line


def test_comparing_line_names_the_accelerator():
    fp = FP.model_copy(update={"accelerator": "Ascend910B3", "accelerator_count": 8, "cann": "8.0.RC3"})
    v = make_verdict().model_copy(update={"fingerprint": fp})
    assert "on 8× Ascend910B3 (CANN 8.0.RC3)" in comparing_line(v)


# ------------------------------------------------------------------- table


def test_table_has_the_columns_and_rows():
    table = render_summary_table(make_verdict())
    lines = table.splitlines()
    assert lines[0] == "| metric | B0 | Bk | candidate | change vs Bk | interval (level) | verdict |"
    body = "\n".join(lines[2:])
    assert lines[2].startswith("| **throughput** (objective, higher is better) | 5.263 | 8 | 10 | +25.0% better |")
    for name in ("latency_p95_s", "peak_rss_mib", "startup_s", "failed requests", "WER(transcripts)",
                 "length(audio_samples) within ±1%"):
        assert f"| {name} |" in body, name
    assert "| 350 ms | 120 ms | 96 ms | -20.0% better | -22.4% to -17.6% (95%) |" in body
    assert "✅ pass (≤ 1.05x)" in body
    assert "✅ clear gain, p=0.0039" in lines[2]


def test_rows_order_objective_first_then_tail_memory_startup():
    names = [r.metric for r in summary_rows(make_verdict())]
    assert names[0].startswith("**throughput**")
    assert names.index("latency_p95_s") < names.index("peak_rss_mib") < names.index("startup_s")
    assert names[-2:] == ["WER(transcripts)", "length(audio_samples) within ±1%"]


def test_quality_guard_failure_is_spelled_out():
    v = make_verdict("reject", length_change=-0.25,
                     reason="guard failed: length(audio_samples) within ±1% vs Bk: length 63360 vs Bk 84480 (-25.00%)")
    md = render_markdown_report(v, ledger=[])
    row = next(line for line in md.splitlines() if line.startswith("| length(audio_samples)"))
    assert "-25.0% vs Bk, -25.0% vs B0" in row
    assert "❌ fail (within ±1.0%) vs B0 and Bk: length 63360" in row
    assert "comes with a quality loss" in md  # tradeoffs spell it out


def test_unclear_guard_names_the_reference():
    guards = list(_guards())
    guards[1] = guards[1].model_copy(update={"status": "unclear", "ci": Interval(low=0.99, high=1.08)})
    v = make_verdict("review").model_copy(update={"guards": tuple(guards)})
    row = next(r for r in summary_rows(v) if r.metric == "latency_p95_s")
    assert row.status == "unclear" and row.verdict == "❔ unclear (<= 1.05x) vs Bk"


# ------------------------------------------- units, levels, one estimate, words


def test_a_rate_is_never_shown_in_seconds():
    """``tokens_per_s`` ends in ``_s``: the old report guessed seconds from the
    name. A verdict's metric shows the unit it declares, or none."""
    m = _metric("tokens_per_s", "higher", 200.0, 208.9, 230.0)
    v = make_verdict().model_copy(update={"metrics": (*make_verdict().metrics, m)})
    row = next(r for r in summary_rows(v) if r.metric == "tokens_per_s")
    assert row.bk == "208.9" and " s" not in row.candidate
    declared = m.model_copy(update={"unit": "token/s"})
    v = v.model_copy(update={"metrics": (*make_verdict().metrics, declared)})
    row = next(r for r in summary_rows(v) if r.metric == "tokens_per_s")
    assert row.bk == "208.9 token/s"


def _sequential(decision="accept", *, direction="higher", low=1.04, high=1.16, ratio=1.10,
                guards=(), metric_ratio=1.13):
    """A verdict whose objective carries the judge's 98% repeated interval while
    its metric row carries the descriptive 95% bootstrap one (as ``judge`` writes them)."""
    sign = 1 if direction == "higher" else -1
    gain = ratio ** sign - 1
    glo, ghi = sorted((low ** sign - 1, high ** sign - 1))
    obj = ObjectiveResult(benchmark="b", metric="m", direction=direction, ratio=ratio,
                          ratio_ci=Interval(low=low, high=high, level=0.98), gain=gain,
                          gain_ci=Interval(low=glo, high=ghi, level=0.98), p_value=0.004,
                          min_gain=0.05, noise_margin=0.0)
    row = MetricComparison(name="m", direction=direction, unit="1/s", b0=10.0, bk=10.0,
                           candidate=10.0 * metric_ratio, ratio_vs_bk=metric_ratio,
                           ratio_vs_bk_ci=Interval(low=metric_ratio - 0.01, high=metric_ratio + 0.01))
    return Verdict(decision=decision, reason="r", benchmark="b", objective=obj, metrics=(row,),
                   guards=tuple(guards), shas=SHAS)


def test_intervals_are_labelled_with_their_real_level():
    v = _sequential()
    assert "98% repeated interval +4.0% to +16.0%" in headline(v)
    assert "95%" not in headline(v)
    assert summary_rows(v)[0].interval == "+4.0% to +16.0% (98% repeated)"


def test_headline_table_and_tradeoffs_give_one_estimate_per_metric():
    """The metric row's descriptive ratio (1.13) never shows beside the objective's (1.10)."""
    v = _sequential(direction="lower", ratio=0.90, low=0.85, high=0.95, metric_ratio=0.87)
    v = v.model_copy(update={"metrics": (v.metrics[0].model_copy(update={"name": "m"}),)})
    md = render_markdown_report(v, ledger=[])
    row = summary_rows(v)[0]
    assert row.change == "-10.0% better" and "-10.0% better vs Bk" in headline(v)
    assert "-13.0%" not in md and "+11.1%" not in md


def test_decision_words_never_contradict():
    # rejected by the judge's futility bound while the 98% interval still reaches min_gain
    reject = _sequential("reject", ratio=1.01, low=0.96, high=1.06)
    assert headline(reject).startswith("❌ **Rejected**")
    assert summary_rows(reject)[0].verdict.startswith("❌ no gain worth keeping")
    assert "unclear" not in render_markdown_report(reject, ledger=[])
    # rejected on a guard: the objective is not "unclear" either
    bad = GuardResult(name="m2 <= 1.05x", kind="ratio", metric="m2", bound="<= 1.05x", value=1.2,
                      status="fail")
    on_guard = _sequential("reject", ratio=1.01, low=0.96, high=1.06, guards=(bad,))
    assert summary_rows(on_guard)[0].verdict.startswith("➖ not decided: a guard rejected")
    inconclusive = _sequential("inconclusive", ratio=1.01, low=0.96, high=1.06)
    assert summary_rows(inconclusive)[0].verdict.startswith("❔ unclear at the cap of pairs")
    assert summary_rows(_sequential("review"))[0].verdict.startswith("✅ clear gain")


# ------------------------------------------------------------ history/chart


def test_history_from_ledger_follows_kept_candidates():
    hist = history_from_ledger(make_ledger(4))
    assert [h.label for h in hist] == ["B0", "#1", "#2", "#3", "#4"]
    assert hist[0].value == 4.0
    assert hist[1].bk == 4.0 and hist[1].decision == "reject"  # rolled back: Bk stays
    assert hist[2].bk == pytest.approx(4.8)  # kept: Bk is the candidate
    assert hist[3].bk == pytest.approx(4.8)
    assert hist[4].bk == pytest.approx(5.76)


def test_history_skips_unmeasured_and_reverify():
    recs = make_ledger(2)
    recs.insert(1, LedgerRecord(id="t/9", event="candidate", task="t", round=2, candidate=9,
                                agent="replay", decision="reject",
                                reason="edit policy: bench/tts.py is protected", status="rolled_back"))
    recs.append(recs[-1].model_copy(update={"id": "t/2/reverify/x", "event": "reverify"}))
    hist = history_from_ledger(recs)
    assert [h.label for h in hist] == ["B0", "#1", "#9", "#2"]
    assert hist[2].value is None and hist[2].bk == 4.0
    chart = render_mermaid_chart(hist, metric="throughput")
    assert '"#9"' not in chart  # no zero bar for a candidate that was never measured


def test_mermaid_chart_plots_gains_with_intervals_and_status():
    recs = make_ledger(3)
    for r in recs:  # a ratio interval, as the loop records it
        r.ratio_low, r.ratio_high = 1 + r.gain - 0.01, 1 + r.gain + 0.01
    chart = render_mermaid_chart(history_from_ledger(recs), metric="throughput", min_gain=0.03)
    assert chart.startswith("```mermaid\nxychart-beta\n")
    assert 'x-axis ["#1 rolled back", "#2 kept", "#3 rolled back"]' in chart
    assert "bar [-2, 20, -2]" in chart
    assert "line [-3, 19, -3]" in chart and "line [-1, 21, -1]" in chart  # the interval
    assert "line [3, 3, 3]" in chart  # min_gain
    assert chart.endswith("```")
    assert render_mermaid_chart([HistoryPoint("B0", 1.0, 1.0)], metric="x") == ""


def test_chart_agrees_with_the_table_and_never_mixes_sessions():
    """The bug of issue 12: B0 and each candidate were measured in different
    sessions (B0 12.97 in the first, 16.24 in this one), and a rolled-back
    candidate's absolute value was the tallest bar. The chart now plots gains vs
    the Bk of the same session, and the reported candidate's bar is the table's."""
    recs = []
    for i, (bk, cand, status) in enumerate([(12.97, 13.5, "kept"), (16.9, 16.7, "rolled_back")], 1):
        decision = "accept" if status == "kept" else "reject"
        recs.append(LedgerRecord(id=f"t/{i}", event="candidate", task="t", round=i, candidate=i,
                                 agent="tuner", sha=f"{i:040d}", decision=decision,
                                 status=status, gain=cand / bk - 1, objective_metric="throughput",
                                 verdict=_measured(decision, "", 12.97, bk, cand)))
    v = make_verdict(gain=0.25)
    v = v.model_copy(update={"shas": {**SHAS, "candidate": recs[0].sha}})
    md = render_markdown_report(v, ledger=recs)
    chart = md[md.index("```mermaid"):]
    assert "B0" not in chart.split("x-axis")[1].split("\n")[0]  # no absolute B0 bar
    assert "bar [25, -1.183]" in chart  # #1 takes this verdict's gain: the table's +25.0%
    assert "+25.0%" in render_summary_table(v)
    assert '"#2 rolled back"' in chart


# ---------------------------------------------------------------- markdown


def test_markdown_report_sections_in_order():
    md = render_markdown_report(make_verdict(), ledger=make_ledger(3), title="tiny-tts #2", marker="<!-- rsi:report -->")
    assert md.startswith("<!-- rsi:report -->\n\n### tiny-tts #\u20602\n\n✅ **Accepted**")
    order = ["comparing `", "| metric |", "**Tradeoffs**", "```mermaid", "<details><summary>Ledger (3 records) and fingerprint</summary>",
             "| # | round | agent |", "**Fingerprint**", "cpu_model: AMD EPYC 9654", f"sha.candidate: {SHAS['candidate']}", "</details>"]
    pos = [md.index(s) for s in order]
    assert pos == sorted(pos)
    assert md.count("```") % 2 == 0
    assert len(md) < MAX_MARKDOWN_CHARS


def test_markdown_is_deterministic():
    a = render_markdown_report(make_verdict(), ledger=make_ledger(3))
    b = render_markdown_report(make_verdict(), ledger=make_ledger(3))
    assert a == b


def test_agent_text_is_neutralized():
    recs = make_ledger(1)
    recs[0].hypothesis = "ping @octocat | <script>alert(1)</script>\nsecond line"
    md = render_markdown_report(make_verdict(), ledger=recs)
    row = next(line for line in md.splitlines() if line.startswith("| #1 |"))
    assert "@\u2060octocat" in row and "@octocat" not in row
    assert "<script>" not in md and "&lt;script" in row
    assert "\\|" in row and row.count(" | ") == 8  # the pipe is escaped: still 9 cells


def test_long_ledger_is_cut_with_a_note_and_stays_under_the_limit():
    recs = make_ledger(3000)
    for r in recs:
        r.reason = "x" * 200
    md = render_markdown_report(make_verdict(), ledger=recs)
    assert len(md) < MAX_MARKDOWN_CHARS
    m = re.search(r"_(\d+) older record\(s\) left out", md)
    assert m and 0 < int(m.group(1)) < 3000
    assert "| #3000 |" in md and "| #1 |" not in md  # the newest are kept
    assert md.rstrip().endswith("</details>")
    assert "**Fingerprint**" in md
    assert "2940 older not shown" in md  # the chart keeps the newest 60 candidates


def test_pathological_reason_is_clipped():
    v = make_verdict(reason="y" * 200_000)
    md = render_markdown_report(v, ledger=make_ledger(2))
    assert len(md) < MAX_MARKDOWN_CHARS
    assert "y" * 1499 + "…" in md


def test_smaller_limit_is_respected():
    md = render_markdown_report(make_verdict(), ledger=make_ledger(200), max_chars=9000)
    assert len(md) < 9000


# -------------------------------------------------------------------- HTML


def test_html_report_is_self_contained():
    recs = make_ledger(4)
    recs[0].hypothesis = "<img src=x onerror=alert(1)>"
    page = render_html_report(make_verdict(), ledger=recs, title="tiny-tts demo")
    assert page.startswith("<!DOCTYPE html>")
    assert "<svg" in page and "</svg>" in page
    assert "<script" not in page.lower()
    assert "&lt;img src=x" in page and "<img" not in page
    external = re.findall(r'(?:src|href)="(https?:[^"]+)"', page)
    assert external == []
    assert page.count('<rect class="bar') == 4  # one bar per measured candidate
    assert page.count('class="bar rolled_back"') == 2
    assert "<title>#2 (kept, accept): +20.0% vs Bk — change number 2</title>" in page
    assert "<td>startup_s</td>" in page and 'class="fail"' not in page


def test_html_marks_failing_rows():
    v = make_verdict("reject", length_change=-0.25)
    page = render_html_report(v, ledger=[])
    assert '<tr class="fail"><td>length(audio_samples) within ±1%</td>' in page


def test_chart_follows_the_newest_task_of_a_shared_ledger():
    other = [r.model_copy(update={"id": "o/" + r.id, "task": "other"}) for r in make_ledger(2)]
    md = render_markdown_report(make_verdict(), ledger=other + make_ledger(3))
    assert 'x-axis ["#1 rolled back", "#2 kept", "#3 rolled back"]' in md


# ------------------------------------------------------------ units, links


def test_one_unit_per_metric_in_table_and_tradeoffs():
    v = make_verdict()
    v = v.model_copy(update={"metrics": (*v.metrics, MetricComparison(
        name="latency_p99_s", direction="lower", unit="s", b0=1.2, bk=0.95, candidate=0.9,
        ratio_vs_bk=0.9 / 0.95, ratio_vs_bk_ci=Interval(low=0.9, high=0.98))),
        "tradeoffs": ("Tail latency (latency_p99_s): 0.95 s -> 0.9 s, -5.3% vs Bk (better).",
                      "Something else entirely.")})
    row = next(r for r in summary_rows(v) if r.metric == "latency_p99_s")
    assert (row.b0, row.bk, row.candidate) == ("1.2 s", "0.95 s", "0.9 s")  # not "950 ms"
    row = next(r for r in summary_rows(v) if r.metric == "latency_p95_s")
    assert (row.b0, row.bk, row.candidate) == ("350 ms", "120 ms", "96 ms")
    md = render_markdown_report(v)
    trade = md[md.index("**Tradeoffs**"):].split("\n\n")[1]
    assert "Tail latency (latency_p95_s): 120 ms → 96 ms, -20.0% vs Bk (better)" in trade
    assert "Tail latency (latency_p99_s): 0.95 s → 0.9 s" in trade
    assert trade.count("latency_p99_s") == 1  # the verifier's sentence is replaced
    assert "Something else entirely." in trade


def test_links_and_reproduce_command():
    from harness.report import ReportLinks, reproduce_command

    shas = {"b0": "a" * 40, "bk": "b" * 40, "candidate": "c" * 40}
    v = make_verdict().model_copy(update={"shas": shas})
    links = ReportLinks(repo_url="https://github.com/acme/tts", branch="rsi/7/2",
                        artifacts_url="https://github.com/acme/tts/actions/runs/9",
                        page_url="https://bot.example.com/tasks/3")
    md = render_markdown_report(v, links=links)
    line = next(x for x in md.splitlines() if x.startswith("**Links**"))
    assert f"[`cccccccccccc`](https://github.com/acme/tts/commit/{'c' * 40})" in line
    assert f"[diff vs Bk](https://github.com/acme/tts/compare/{'b' * 40}...{'c' * 40})" in line
    assert f"[diff vs B0](https://github.com/acme/tts/compare/{'a' * 40}...{'c' * 40})" in line
    assert "[ledger](https://github.com/acme/tts/blob/rsi/ledger/ledger.jsonl)" in line
    assert "[artifacts](https://github.com/acme/tts/actions/runs/9)" in line
    assert "[task page](https://bot.example.com/tasks/3)" in line
    cmd = reproduce_command(v, links)
    assert cmd.splitlines()[1:] == ["git fetch origin rsi/7/2",
                                    f"rsi verify {'b' * 40} {'c' * 40} --repo . --b0 {'a' * 40} "
                                    "--benchmark tts --report verdict.json"]
    assert "**Reproduce locally**" in md and "```sh" in md
    page = render_html_report(v, links=links)
    assert f'<a href="https://github.com/acme/tts/compare/{"b" * 40}...{"c" * 40}"' in page


def test_hostile_link_parts_are_left_out():
    from harness.report import ReportLinks, reproduce_command

    v = make_verdict().model_copy(update={"shas": {"bk": "b" * 40, "candidate": "c" * 40},
                                          "benchmark": "tts; rm -rf /"})
    links = ReportLinks(repo_url="javascript:alert(1)", branch="--upload-pack=evil",
                        page_url="https://x.example/a)(b")
    md = render_markdown_report(v, links=links)
    assert "javascript" not in md and "**Links**" not in md
    cmd = reproduce_command(v, links)
    assert "upload-pack" not in cmd and "rm -rf" not in cmd


def test_gain_interval_is_the_one_ratio_to_gain_conversion():
    from harness.report import gain_interval

    lo, hi = gain_interval(Interval(low=0.8, high=0.9), "lower")  # lower is better: 1/r - 1
    assert lo == pytest.approx(1 / 0.9 - 1) and hi == pytest.approx(1 / 0.8 - 1)
    assert gain_interval(Interval(low=1.1, high=1.3), "higher") == pytest.approx((0.1, 0.3))
    assert gain_interval(None, "higher") == (None, None)
    assert gain_interval(Interval(low=0.0, high=1.2), "lower") == (None, None)  # no 1/0
