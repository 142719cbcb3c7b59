"""The deployment matrix in the report, the PR body and the task page: the
cell table (setting | gain vs Bk | p95 | TTFA | memory) and one sentence in
words where the gain holds and where it does not; nothing without a matrix."""

from __future__ import annotations

import re

from bot.render import pr_body
from bot.store import Store
from bot.web import render_page
from harness.report import html_report_sections, render_markdown_report
from verifier.verdict import (
    CellResult,
    Decision,
    GuardResult,
    Interval,
    MetricComparison,
    ObjectiveResult,
    Verdict,
)

EVIL = "<script>alert(1)</script>"


def _metrics(p95: float, ttfa: float, rss: float) -> tuple[MetricComparison, ...]:
    def row(name: str, unit: str, bk: float, ratio: float) -> MetricComparison:
        return MetricComparison(name=name, direction="lower", unit=unit, bk=bk, candidate=bk * ratio,
                                ratio_vs_bk=ratio, ratio_vs_bk_ci=Interval(low=ratio * 0.9, high=ratio * 1.1))

    return (row("latency_p95_s", "s", 0.5, p95), row("ttfa_p50_s", "s", 0.1, ttfa),
            row("stall_p95_s", "s", 0.01, 3.0), row("peak_rss_mib", "MiB", 300.0, rss))


def _verdict() -> Verdict:
    p95 = GuardResult(name="latency_p95_s <= 1.05x", kind="ratio", metric="latency_p95_s",
                      bound="<= 1.05x", value=2.4, status="fail", detail="ratio 2.4x")
    ok = p95.model_copy(update={"status": "pass", "value": 0.6, "detail": "ratio 0.6x"})
    cells = (
        CellResult(setting={"concurrency": 1}, primary=True, pairs=6, metric="throughput",
                   gain=0.66, gain_ci=Interval(low=0.55, high=0.78), guards=(ok,),
                   metrics=_metrics(0.6, 0.6, 1.0)),
        CellResult(setting={"concurrency": 4}, pairs=2, metric="throughput", gain=-0.58,
                   gain_ci=Interval(low=-0.62, high=-0.52), guards=(p95,),
                   metrics=_metrics(2.4, 3.5, 1.0)),
        CellResult(setting={"concurrency": EVIL}, measured=False, note="x"),
    )
    obj = ObjectiveResult(benchmark="tts", metric="throughput", direction="higher", ratio=1.66,
                          ratio_ci=Interval(low=1.55, high=1.78), gain=0.66,
                          gain_ci=Interval(low=0.55, high=0.78), min_gain=0.1)
    return Verdict(schema="rsi.verdict/1", decision=Decision.REJECT, objective=obj, cells=cells, guards=(ok,),
                   reason="guard failed: latency_p95_s <= 1.05x at concurrency=4 vs Bk: ratio 2.4x",
                   shas={"bk": "a" * 40, "candidate": "b" * 40})


def test_the_report_shows_the_cell_table_and_says_where_the_gain_holds():
    md = render_markdown_report(_verdict())
    assert "**Deployment matrix**" in md
    assert "The gain holds at concurrency=1 (+66%); it does not hold at concurrency=4 " \
           "(latency_p95_s ≤ 1.05x failed)" in md
    assert "| setting | gain vs Bk | p95 | TTFA | memory |" in md
    row = next(line for line in md.splitlines() if line.startswith("| concurrency=4 |"))
    cols = [c.strip() for c in row.strip("|").split("|")]
    assert cols[1].startswith("-58.0% (95% CI -62.0% .. -52.0%); guard failed: latency_p95_s")
    assert cols[2] == "1.2 s (+140% vs Bk)" and cols[3] == "0.35 s (+250% vs Bk)"
    assert cols[4] == "300 MiB (+0% vs Bk)"
    assert "| concurrency=1 (primary) | +66.0% (95% CI +55.0% .. +78.0%) |" in md
    assert "not measured" in md and "<script>" not in md


def test_no_matrix_no_section():
    v = _verdict().model_copy(update={"cells": ()})
    assert "Deployment matrix" not in render_markdown_report(v)
    assert not any("Deployment matrix" in s for s in html_report_sections(v))
    assert "Where the gain holds" not in pr_body(issue=3, n=1, hypothesis="h", verdict=v, labeler=None)


def test_the_pr_body_says_in_words_where_the_gain_holds():
    body = pr_body(issue=3, n=1, hypothesis="lock the engine", verdict=_verdict(), labeler="alice")
    assert "#### Where the gain holds" in body
    assert "it does not hold at concurrency=4" in body
    assert "| concurrency=4 | -58.0%" in body and "<script>" not in body


def test_the_task_page_shows_the_cell_table_escaped():
    store = Store("sqlite://")
    t = store.start_task("o/r", 3, labeler="alice", installation_id=None)
    store.upsert_candidate(t.id, 1, decision="reject", sha="b" * 40, state="none",
                           verdict=_verdict().model_dump(mode="json", by_alias=True))
    page = render_page(store, t.id)
    assert page is not None and "<h2>Deployment matrix</h2>" in page
    table = page.split("<h2>Deployment matrix</h2>", 1)[1].split("</table>", 1)[0]
    assert [h for h in re.findall(r"<th>(.*?)</th>", table)] == \
        ["setting", "gain vs Bk", "p95", "TTFA", "memory"]
    assert '<tr class="fail"><td>concurrency=4</td>' in table
    assert "concurrency=&lt;script&gt;" in table and "<script" not in page
