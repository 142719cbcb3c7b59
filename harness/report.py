"""Verifier reports: the markdown the bot posts on a pull request (and the demo
writes to ``rsi-demo/report.md``) and a self-contained HTML page.

Pure functions of typed data: a ``Verdict``, the objective's history over
rounds and ledger records (``LedgerRecord``, or any ``LedgerRow`` for the
ledger table: the bot's task page shows its store's view). No I/O, no clock, no git, no network; the same input gives the same
text. The markdown stays under GitHub's 65,536-character comment limit: the
ledger section is cut (oldest records first, with a note) when it would not fit.

Entry points::

    render_markdown_report(verdict, *, history=None, ledger=(), title=...) -> str
    render_html_report(verdict, *, history=None, ledger=(), title=...) -> str
    render_summary_table(verdict) -> str          # the markdown table alone
    summary_rows(verdict) -> list[Row]            # the table as data (terminal UIs)
    history_from_ledger(records) -> list[HistoryPoint]
    render_mermaid_chart(history, ...) / render_svg_chart(history, ...)
    render_links(verdict, links) / reproduce_command(verdict, links)
    html_report_sections(verdict, ...) -> list[str]   # for the service's task page

The chart plots each candidate's gain vs the Bk measured in the same session
(with its interval, labelled with its real level), marked kept, PR open or rolled back: absolute values
from different sessions are not comparable, so they are never drawn side by
side. Each metric is shown in one unit everywhere (table and tradeoffs).
"""

from __future__ import annotations

import dataclasses
import html as _html
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from harness.ledger import LedgerRecord
from harness.text import fenced, inert
from verifier.qualitykinds import QUALITY_KINDS
from verifier.units import scale_for_display
from verifier.verdict import Direction, GuardResult, Interval, MetricComparison, Verdict

__all__ = [
    "MAX_MARKDOWN_CHARS",
    "HistoryPoint",
    "ReportLinks",
    "Row",
    "display_unit",
    "html_report_sections",
    "reproduce_command",
    "render_links",
    "comparing_line",
    "headline",
    "history_from_ledger",
    "gain_interval",
    "LedgerRow",
    "objective_change",
    "render_html_report",
    "render_markdown_report",
    "render_mermaid_chart",
    "render_summary_table",
    "render_svg_chart",
    "summary_rows",
]

MAX_MARKDOWN_CHARS = 65_536
"""GitHub's limit on a comment body; reports stay strictly below it."""

EMOJI = {
    "accept": "✅",
    "review": "👀",
    "reject": "❌",
    "inconclusive": "❔",
    "error": "⚠️",
}
STATUS_EMOJI = {"pass": "✅", "fail": "❌", "unclear": "❔", "skipped": "➖"}
STATUS_RANK = {"fail": 3, "unclear": 2, "skipped": 1, "pass": 0}
DECISION_COLOR = {
    "accept": "#1a7f37",
    "review": "#bf8700",
    "reject": "#cf222e",
    "inconclusive": "#6e7781",
    "error": "#8250df",
}
_MAX_REASON = 1500
_MAX_CELL = 300


# --------------------------------------------------------------------- data


@dataclass(frozen=True)
class Row:
    """One line of the summary table, already formatted."""

    metric: str
    b0: str
    bk: str
    candidate: str
    change: str
    interval: str
    verdict: str
    status: str
    """pass | fail | unclear | skipped | info, or the decision for the objective row."""
    kind: str
    """objective | metric | requests | quality."""


@dataclass(frozen=True)
class HistoryPoint:
    """The objective at one step of a task: B0, then each candidate."""

    label: str
    """"B0", "#3"..."""
    value: float | None
    """The measured objective of this candidate (median over its runs); B0's for B0."""
    bk: float | None
    """Bk's objective after this step (the floor the next round starts from)."""
    decision: str = ""
    hypothesis: str = ""
    round: int | None = None
    gain: float | None = None
    """The objective's gain vs the Bk measured in the same session (what the chart plots)."""
    gain_low: float | None = None
    gain_high: float | None = None
    """That gain's interval (the verifier's repeated interval when the verdict gives it)."""
    gain_level: float | None = None
    """That interval's confidence level (None when the record does not say)."""
    status: str = ""
    """What the loop did with the candidate: kept, open, rolled_back, merged..."""
    sha: str = ""


# ------------------------------------------------------------------ helpers


class LedgerRow(Protocol):
    """What a ledger table row shows: a ``LedgerRecord``, or the bot's store view
    of a candidate (whose ``round`` may be unknown)."""

    @property
    def event(self) -> str: ...
    @property
    def candidate(self) -> int: ...
    @property
    def round(self) -> int | None: ...
    @property
    def agent(self) -> str: ...
    @property
    def hypothesis(self) -> str: ...
    @property
    def sha(self) -> str: ...
    @property
    def decision(self) -> str: ...
    @property
    def gain(self) -> float | None: ...
    @property
    def gain_vs_b0(self) -> float | None: ...
    @property
    def status(self) -> str | None: ...
    @property
    def reason(self) -> str: ...


def gain_interval(ci: Interval | None, direction: Direction | str) -> tuple[float | None, float | None]:
    """A ratio interval (candidate / Bk, in the metric's units) as a gain interval
    in the metric's better direction (``verifier.verdict``'s convention):
    ``ratio - 1`` when higher is better, ``1/ratio - 1`` when lower is. (None,
    None) without an interval or with a bound that is not a positive number."""
    lo = _num_or_none(ci.low) if ci is not None else None
    hi = _num_or_none(ci.high) if ci is not None else None
    if lo is None or hi is None or lo <= 0 or hi <= 0:
        return None, None
    if direction == "lower":
        return 1 / hi - 1, 1 / lo - 1
    return lo - 1, hi - 1


def _short(sha: str | None) -> str:
    return (sha or "")[:12] or "?"


def _clip(text: str, limit: int) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _display(text: str) -> str:
    """Text from verdicts and agents, made inert for a GitHub comment
    (``harness.text.inert``: no mentions, links, HTML or Markdown syntax)."""
    return inert(str(text).replace("<=", "≤").replace(">=", "≥"))


def _cell(text: str, limit: int = _MAX_CELL) -> str:
    text = " ".join(str(text).split()).replace("<=", "≤").replace(">=", "≥")
    return inert(_clip(text, limit), one_line=True)


def _fmt_num(v: float) -> str:
    if abs(v) >= 10_000:
        return f"{v:,.0f}"
    return f"{v:.4g}"


def display_unit(unit: str, values: Iterable[float | None]) -> tuple[str, float]:
    """(unit shown, factor) for every value of one metric: a time whose values
    are all below one of its unit is shown in ms (or µs), so a row (and the
    tradeoffs about it) never mixes ms and s (``verifier.units``)."""
    return scale_for_display(unit, values)


def fmt_value(v: float | None, unit: str = "", *, factor: float = 1.0) -> str:
    """A metric value (times ``factor``) with its unit (see :func:`display_unit`)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if unit:
        return f"{_fmt_num(v * factor)} {unit}"
    return _fmt_num(v * factor)


def metric_formatter(m: MetricComparison) -> Any:
    """``fmt(value)`` for one metric, in the one unit used for it everywhere."""
    unit, factor = display_unit(_unit(m), (m.b0, m.bk, m.candidate))

    def fmt(v: float | None) -> str:
        return fmt_value(v, unit, factor=factor)

    return fmt


def _pct(x: float) -> str:
    if abs(x) < 0.0005:
        return "±0.0%"
    return f"{x * 100:+.1f}%"


def _better(ratio: float, direction: str) -> bool:
    return (ratio > 1) if direction == "higher" else (ratio < 1)


def _change(ratio: float | None, direction: str, ci: Any = None) -> str:
    if ratio is None:
        return "—"
    text = _pct(ratio - 1)
    if ci is not None and (ci.low > 1 or ci.high < 1) and abs(ratio - 1) >= 0.0005:
        text += " better" if _better(ratio, direction) else " worse"
    return text


def _interval(ci: Any) -> str:
    if ci is None:
        return "—"
    return f"{_pct(ci.low - 1)} to {_pct(ci.high - 1)} ({ci.level:.0%})"


def _unit(m: MetricComparison) -> str:
    """The unit the verdict declares for ``m`` (from the repo config's
    ``[benchmarks.<name>.units]`` or the verifier's own); never guessed from
    the metric's name: ``tokens_per_s`` ends in ``_s`` and is a rate."""
    return m.unit


def _category(name: str) -> int:
    if re.search(r"(^|_)p9\d(_|$)|latency|tail", name):
        return 1
    if re.search(r"mem|rss|_mib$|_mb$", name):
        return 2
    if "startup" in name:
        return 3
    if name == "wall_s":
        return 5
    return 4


def _objective_verdict(o: Any, decision: str, guard_failed: bool) -> str:
    """What the objective's own evidence says, in words that agree with the
    decision (guards are judged on their own rows): accept and review mean the
    objective cleared the bar, inconclusive that it stayed unclear at the cap of
    pairs; a reject with no guard failed is the objective's own (no gain worth
    keeping), one with a guard failed leaves the objective undecided unless it
    had already cleared."""
    need = f"needs ≥ {_pct(o.min_gain)} and an interval above the {o.noise_margin:.1%} noise margin"
    p = f", p={o.p_value:.2g}" if o.p_value is not None else ""
    if o.gain is None or o.gain_ci is None or decision == "error":
        return f"➖ not measured ({need})"
    cleared = o.gain >= o.min_gain and o.gain_ci.low > o.noise_margin
    if decision in ("accept", "review") or (decision == "reject" and guard_failed and cleared):
        return f"✅ clear gain{p} ({need})"
    if decision == "reject" and guard_failed:
        return f"➖ not decided: a guard rejected the candidate first{p} ({need})"
    if decision == "reject":
        return f"❌ no gain worth keeping{p} ({need})"
    return f"❔ unclear at the cap of pairs{p} ({need})"


def _objective_interval_words(o: Any) -> str:
    """The objective's interval is the sequential design's repeated interval."""
    ci = o.ratio_ci or o.gain_ci
    return f"{ci.level:.0%} repeated interval" if ci is not None else "interval"


def _ratio_vs_b0(o: Any) -> float | None:
    """The objective's candidate / B0 ratio (in the metric's own units)."""
    if o.gain_vs_b0 is None or o.gain_vs_b0 <= -1:
        return None
    return float(1 + o.gain_vs_b0 if o.direction == "higher" else 1 / (1 + o.gain_vs_b0))


def objective_change(verdict: Verdict | None) -> str:
    """The objective's change vs Bk as the headline and the table say it
    ("+12.0% better"), for other views of the same verdict; "—" when unmeasured."""
    o = verdict.objective if verdict is not None else None
    if verdict is None or o is None or o.ratio is None or verdict.decision == "error":
        return "—"
    return _change(o.ratio, o.direction, o.ratio_ci)


def one_estimate_metrics(v: Verdict) -> tuple[MetricComparison, ...]:
    """The verdict's metrics, the objective's row taking the objective's own
    paired estimate (the one the decision rests on) in place of the descriptive
    bootstrap one, so that the headline, the table and the tradeoffs give one
    point estimate (and one interval) for that metric."""
    o = v.objective
    if o is None or o.ratio is None:
        return v.metrics
    out = []
    for m in v.metrics:
        if m.name == o.metric:
            m = m.model_copy(update={"ratio_vs_bk": o.ratio, "ratio_vs_bk_ci": o.ratio_ci,
                                     "ratio_vs_b0": _ratio_vs_b0(o), "ratio_vs_b0_ci": None})
        out.append(m)
    return tuple(out)


def _guard_verdict(guards: Sequence[GuardResult]) -> tuple[str, str]:
    """(cell text, status) for the guards of one metric (vs Bk and vs B0)."""
    if not guards:
        return "—", "info"
    worst = max(guards, key=lambda g: STATUS_RANK.get(g.status, 0))
    bound = worst.bound or guards[0].bound
    text = f"{STATUS_EMOJI.get(worst.status, '')} {worst.status}"
    if bound:
        text += f" ({bound})"
    against = sorted({g.against for g in guards if g.status == worst.status})
    if worst.status != "pass" and against:
        text += " vs " + " and ".join("Bk" if a == "bk" else "B0" for a in against)
    return text, worst.status


# -------------------------------------------------------------- headline


def headline(verdict: Verdict) -> str:
    """One line: the decision and, when measured, the objective's gain."""
    v = verdict
    assert v is not None
    word = {
        "accept": "Accepted",
        "review": "Needs review",
        "reject": "Rejected",
        "inconclusive": "Inconclusive",
        "error": "Error (infrastructure; not a regression)",
    }[v.decision]
    text = f"{EMOJI[v.decision]} **{word}**"
    o = v.objective
    if o is not None and o.ratio is not None and v.decision != "error":
        # the same cells as the table's objective row: one estimate, one interval
        text += f": {o.metric} {_change(o.ratio, o.direction, o.ratio_ci)} vs Bk"
        if o.ratio_ci is not None:
            text += (f" ({_objective_interval_words(o)} {_pct(o.ratio_ci.low - 1)} to "
                     f"{_pct(o.ratio_ci.high - 1)})")
        r0 = _ratio_vs_b0(o)
        if r0 is not None:
            text += f", {_pct(r0 - 1)} vs B0 ({r0:.2f}x)"
    if v.quarantined:
        text += " — **QUARANTINED**"
    return text


def _accelerator(v: Verdict) -> str:
    fp = v.fingerprint
    if fp is None:
        return "an unrecorded machine"
    if fp.accelerator in ("", "cpu"):
        cpu = fp.cpu_model or "CPU"
        return f"CPU ({cpu}, {fp.cpu_count} cores)" if fp.cpu_count else f"CPU ({cpu})"
    text = f"{fp.accelerator_count}× {fp.accelerator}" if fp.accelerator_count > 1 else fp.accelerator
    extras = [f"CUDA {fp.cuda}" if fp.cuda else "", f"CANN {fp.cann}" if fp.cann else "",
              f"driver {fp.driver}" if fp.driver else ""]
    extras = [e for e in extras if e]
    return text + (f" ({', '.join(extras)})" if extras else "")


def comparing_line(verdict: Verdict) -> str:
    """"comparing <candidate> with Bk <sha> and B0 <sha> on <accelerator>"."""
    v = verdict
    assert v is not None
    s = v.shas
    text = f"comparing `{_short(s.get('candidate'))}` with Bk `{_short(s.get('bk'))}`"
    if s.get("b0"):
        text += f" and B0 `{_short(s.get('b0'))}`"
        if s.get("b0") == s.get("bk"):
            text += " (Bk is B0)"
    text += f" on {_display(_accelerator(v))}"
    if v.pairs:
        text += f" ({v.pairs} pairs, {v.runs} runs"
        text += f", {v.duration_s:.0f} s)" if v.duration_s else ")"
    return text


# ---------------------------------------------------------------- table


def summary_rows(verdict: Verdict) -> list[Row]:
    """The summary table as data: objective, then tail latency, memory,
    startup and the other metrics, then failed requests and quality guards."""
    v = verdict
    assert v is not None
    rows: list[Row] = []
    o = v.objective
    by_name = {m.name: m for m in v.metrics}
    guards_by_metric: dict[str, list[GuardResult]] = {}
    for g in v.guards:
        if g.kind in ("ratio", "delta"):
            guards_by_metric.setdefault(g.metric, []).append(g)

    if o is not None:
        m = by_name.get(o.metric)
        fmt = metric_formatter(m) if m else fmt_value
        rows.append(Row(
            metric=f"**{o.metric}** (objective, {o.direction} is better)",
            b0=fmt(m.b0) if (m and m.b0 is not None) else (
                fmt(m.bk) if m and v.shas.get("b0") == v.shas.get("bk") else "—"),
            bk=fmt(m.bk if m else None),
            candidate=fmt(m.candidate if m else None),
            change=_change(o.ratio, o.direction, o.ratio_ci),
            interval=_interval(o.ratio_ci).replace("%)", "% repeated)") if o.ratio_ci else "—",
            verdict=_objective_verdict(o, v.decision, any(g.status == "fail" for g in v.guards)),
            status=v.decision,
            kind="objective",
        ))

    others = [m for m in v.metrics if o is None or m.name != o.metric]
    others.sort(key=lambda m: (_category(m.name), m.name))
    for m in others:
        fmt = metric_formatter(m)
        text, status = _guard_verdict(guards_by_metric.get(m.name, []))
        b0 = m.b0 if m.b0 is not None else (m.bk if v.shas.get("b0") and v.shas.get("b0") == v.shas.get("bk") else None)
        rows.append(Row(
            metric=m.name, b0=fmt(b0), bk=fmt(m.bk),
            candidate=fmt(m.candidate), change=_change(m.ratio_vs_bk, m.direction, m.ratio_vs_bk_ci),
            interval=_interval(m.ratio_vs_bk_ci), verdict=text, status=status, kind="metric",
        ))
    # guards on metrics the table has no row for (skipped ones, other benchmarks)
    for metric, gs in guards_by_metric.items():
        if metric in by_name:
            continue
        text, status = _guard_verdict(gs)
        detail = next((g.detail for g in gs if g.detail), "")
        rows.append(Row(metric=metric, b0="—", bk="—", candidate="—", change="—", interval="—",
                        verdict=text + (f": {detail}" if detail and status != "pass" else ""),
                        status=status, kind="metric"))

    for g in v.guards:
        if g.kind == "failed_requests":
            rows.append(Row(
                metric="failed requests", b0="—", bk="—",
                candidate=fmt_value(g.value) if g.value is not None else "—", change="—", interval="—",
                verdict=f"{STATUS_EMOJI.get(g.status, '')} {g.status} ({g.bound or '== 0'})",
                status=g.status, kind="requests",
            ))

    quality: dict[str, list[GuardResult]] = {}
    for g in v.guards:
        if g.kind in QUALITY_KINDS:
            quality.setdefault(g.name, []).append(g)
    for name, gs in quality.items():
        by_ref = {g.against: g for g in gs}
        ref = by_ref.get("bk") or gs[0]
        kind = ref.kind

        def val(g: GuardResult | None, kind: str = kind) -> str:
            if g is None or g.value is None:
                return "—"
            if kind == "wer":
                return f"{g.value:.2%}"
            if kind == "output_length":
                return _pct(g.value)
            return f"{g.value:.3g}"

        text, status = _guard_verdict(gs)
        failing = [g for g in gs if g.status in ("fail", "unclear") and g.detail]
        if failing:
            text += f": {failing[0].detail}"
        if kind == "wer":
            cand, change = val(ref), "—"
        elif kind == "output_length":
            cand, change = "—", f"{val(by_ref.get('bk'))} vs Bk" + (
                f", {val(by_ref['b0'])} vs B0" if "b0" in by_ref else "")
        else:
            cand, change = val(ref), "—"
        rows.append(Row(metric=name, b0="—", bk="—", candidate=cand, change=change, interval="—",
                        verdict=text, status=status, kind="quality"))
    return rows


_HEADER = ("metric", "B0", "Bk", "candidate", "change vs Bk", "interval (level)", "verdict")


def render_summary_table(verdict: Verdict) -> str:
    """The markdown table: metric, B0, Bk, candidate, change, interval (with its level), verdict."""
    rows = summary_rows(verdict)
    if not rows:
        return "_No measurements._"
    lines = ["| " + " | ".join(_HEADER) + " |", "|---|---:|---:|---:|---:|:---:|---|"]
    for r in rows:
        cells = [r.metric if r.kind == "objective" else _cell(r.metric)]
        cells += [_cell(c) for c in (r.b0, r.bk, r.candidate, r.change, r.interval, r.verdict)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + _sources_note(verdict)


_SOURCE_WORDS = {"verifier": "the verifier (from outside)", "client": "the protected client",
                 "evaluator": "the protected evaluator",
                 "harness": "the verifier's timing harness (from outside the entry point's process)",
                 "benchmark": "the candidate's own process"}


def self_reported_line(v: Verdict) -> str:
    """A bold line when the verdict's objective was reported by the candidate's
    own process (issue 29: a self-report is never silent), else ``""``."""
    if v.objective is None:
        return ""
    src = next((m.source for m in v.metrics if m.name == v.objective.metric), None)
    if src != "benchmark":
        return ""
    return (f"**Self-reported objective**: {inert(v.objective.metric, one_line=True)} is reported "
            "by the candidate's own process; the verifier's clock only cross-checked the claim.")


def _sources_note(v: Verdict | None) -> str:
    """One line under the table: who measured each metric (the verdict's provenance)."""
    by: dict[str, list[str]] = {}
    for m in (v.metrics if v is not None else ()):
        if m.source in _SOURCE_WORDS:
            by.setdefault(m.source, []).append(m.name)
    parts = [f"{_SOURCE_WORDS[k]}: {inert(', '.join(by[k]), one_line=True)}"
             for k in _SOURCE_WORDS if k in by]
    return ("\n\nMeasured by " + "; ".join(parts) + ".") if parts else ""


_TRADEOFF_CATEGORIES = ((r"(^|_)p9\d(_|$)|tail", "Tail latency"), (r"mem|rss|_mib$|_mb$", "Peak memory"),
                        (r"startup", "Startup time"))


def _metric_tradeoff(m: MetricComparison) -> str | None:
    """The verifier's tradeoff sentence for one metric, in the table's unit for it."""
    cat = next((word for rx, word in _TRADEOFF_CATEGORIES if re.search(rx, m.name)), None)
    if cat is None or m.ratio_vs_bk is None or m.bk is None or m.candidate is None:
        return None
    change = m.ratio_vs_bk - 1
    better = (change < 0) == (m.direction == "lower")
    ci = m.ratio_vs_bk_ci
    clear = ci is not None and (ci.low > 1 or ci.high < 1)
    word = ("better" if better else "worse") if clear else "no clear change"
    fmt = metric_formatter(m)
    text = f"{cat} ({m.name}): {fmt(m.bk)} → {fmt(m.candidate)}, {change:+.1%} vs Bk ({word})"
    if m.ratio_vs_b0 is not None:
        text += f", {m.ratio_vs_b0 - 1:+.1%} vs B0"
    return text + "."


def _tradeoffs(v: Verdict) -> list[str]:
    """Tradeoffs: one per tail-latency, memory and startup metric, written here in
    the table's unit for that metric (the verifier's own sentences about those
    metrics are replaced), then the verifier's other sentences."""
    mine = {m.name: t for m in one_estimate_metrics(v) if (t := _metric_tradeoff(m))}
    out = list(mine.values())
    out += [t for t in v.tradeoffs if not any(f"({name}):" in t for name in mine)]
    if v.objective is not None and v.objective.ratio is not None and v.decision != "error":
        o = v.objective
        change = _change(o.ratio, o.direction, o.ratio_ci)
        for g in v.guards:
            if g.kind in QUALITY_KINDS and g.status == "fail" and g.against == "bk":
                out.append(f"The {change} on {o.metric} comes with a quality loss: {g.name}: {g.detail}.")
    return out


# -------------------------------------------------------------- history


def _objective_values(verdict: Verdict | None, metric: str) -> tuple[float | None, float | None, float | None]:
    """(b0, bk, candidate) medians of ``metric`` in a verdict."""
    for m in verdict.metrics if verdict is not None else ():
        if m.name == metric:
            return m.b0, m.bk, m.candidate
    return None, None, None


def _num_or_none(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def _gain_of(record: LedgerRecord) -> tuple[float | None, float | None, float | None]:
    """(gain, low, high) of the objective vs the Bk measured in the same session:
    the verdict's own numbers when the record carries them, else the record's
    ``gain`` and its ratio interval turned into a gain interval."""
    obj = record.verdict.objective if record.verdict is not None else None
    gain = _num_or_none(obj.gain) if obj is not None else None
    if obj is not None and gain is not None and obj.gain_ci is not None:
        return gain, _num_or_none(obj.gain_ci.low), _num_or_none(obj.gain_ci.high)
    gain = gain if gain is not None else _num_or_none(record.gain)
    ci = (Interval(low=record.ratio_low, high=record.ratio_high)
          if record.ratio_low is not None and record.ratio_high is not None else None)
    lo, hi = gain_interval(ci, obj.direction if obj is not None else "higher")
    return gain, lo, hi


def history_from_ledger(records: Iterable[LedgerRecord], *, task: str | None = None) -> list[HistoryPoint]:
    """The objective over a task's candidates, from ledger records (oldest
    first): a B0 point, then one point per candidate with its gain
    vs the Bk measured in the same session (and that gain's interval) and what
    the loop did with it (kept, open, rolled back...). The Bk line follows kept
    candidates. Records without a measurement (policy rejects, errors) get
    ``value=None`` and no gain."""
    recs = [r for r in records if r.event == "candidate" and (task is None or r.task == task)]
    points: list[HistoryPoint] = []
    bk: float | None = None
    for r in recs:
        verdict = r.verdict
        obj = verdict.objective if verdict is not None else None
        metric = r.objective_metric or (obj.metric if obj is not None else "")
        b0v, bkv, cand = _objective_values(verdict, metric)
        if not points:
            first = b0v if b0v is not None else (bkv if r.base_sha == r.b0_sha else None)
            points.append(HistoryPoint(label="B0", value=first, bk=first, decision="baseline"))
            bk = first
        if bkv is not None:
            bk = bkv  # Bk as measured alongside this candidate
        status = str(r.status or "")
        after = cand if (status == "kept" and cand is not None) else bk
        gain, lo, hi = _gain_of(r) if cand is not None else (None, None, None)
        ci = obj.gain_ci if obj is not None else None
        level = _num_or_none(ci.level) if (lo is not None and ci is not None) else None
        points.append(HistoryPoint(
            label=f"#{r.candidate}", value=cand, bk=after, decision=str(r.decision),
            hypothesis=r.hypothesis, round=r.round,
            gain=gain, gain_low=lo, gain_high=hi, gain_level=level, status=status, sha=r.sha,
        ))
        bk = after
    return points


def _as_history(history: Sequence[HistoryPoint] | None, ledger: Sequence[LedgerRow],
                verdict: Verdict | None = None) -> list[HistoryPoint]:
    """The chart's points; the point of the reported candidate (same sha) takes this
    verdict's gain, so the chart and the table always show the same number."""
    if history is None:  # the newest record's task: a repo's ledger holds every task's records
        recs = [r for r in ledger if isinstance(r, LedgerRecord)]
        hist = history_from_ledger(recs, task=recs[-1].task if recs else None)
    else:
        hist = [h if isinstance(h, HistoryPoint) else HistoryPoint(**dict(h)) for h in history]
    o = verdict.objective if verdict is not None else None
    sha = verdict.shas.get("candidate") if verdict is not None else None
    if o is None or o.gain is None or not sha:
        return hist
    ci = o.gain_ci

    def same(h: HistoryPoint) -> HistoryPoint:
        if ci is None:  # keep the interval the point had rather than none
            return dataclasses.replace(h, gain=o.gain)
        return dataclasses.replace(h, gain=o.gain, gain_low=ci.low, gain_high=ci.high, gain_level=ci.level)

    return [same(h) if h.sha == sha and h.label != "B0" else h for h in hist]


def _num(v: float) -> str:
    return f"{v:.4g}"


def _last_points(pts: list[HistoryPoint], max_points: int) -> tuple[list[HistoryPoint], int]:
    """The newest points, at most ``max_points``; and how many were left out."""
    if len(pts) <= max_points:
        return pts, 0
    return pts[len(pts) - max_points:], len(pts) - max_points


STATUS_WORDS = {"kept": "kept", "open": "PR open", "merged": "merged", "rolled_back": "rolled back",
                "conflict": "conflict", "superseded": "superseded"}
STATUS_COLOR = {"kept": "#1a7f37", "merged": "#1a7f37", "open": "#0969da", "conflict": "#bf8700",
                "rolled_back": "#afb8c1", "superseded": "#afb8c1"}


def _status_word(p: HistoryPoint) -> str:
    if p.status:
        return STATUS_WORDS.get(p.status, p.status.replace("_", " "))
    return "kept" if p.decision == "accept" else "rolled back"


def _chart_interval_words(pts: Sequence[HistoryPoint]) -> str:
    """"98% interval" when every drawn interval has that level; else "interval"."""
    levels = {p.gain_level for p in pts if p.gain_low is not None and p.gain_high is not None}
    if len(levels) == 1 and None not in levels:
        return f"{levels.pop():.0%} interval"
    return "interval"


def gain_points(history: Sequence[HistoryPoint]) -> list[HistoryPoint]:
    """The candidates the chart draws: those with a measured gain."""
    return [p for p in history if p.label != "B0" and p.gain is not None]


def render_mermaid_chart(history: Sequence[HistoryPoint], *, metric: str, direction: str = "higher",
                         max_points: int = 60, min_gain: float | None = None) -> str:
    """A Mermaid ``xychart-beta`` of each candidate's gain on the objective vs the
    Bk measured in the same session (%): bars, with the interval as two lines
    (low, high) and ``min_gain`` as a flat line; each x label says what happened
    to the candidate (kept, PR open, rolled back). Values measured in different
    sessions are never put side by side as absolute numbers."""
    pts, dropped = _last_points(gain_points(history), max_points)
    if not pts:
        return ""
    labels = ", ".join(f'"{p.label} {_status_word(p)}"' for p in pts)
    safe_metric = re.sub(r'["\n]', "", metric)

    def pct(x: float | None, fallback: float) -> str:
        return _num(100 * (x if x is not None else fallback))

    lows = [p.gain_low if p.gain_low is not None else p.gain for p in pts]
    highs = [p.gain_high if p.gain_high is not None else p.gain for p in pts]
    vals = [x for x in (*lows, *highs, 0.0, min_gain or 0.0) if x is not None]
    lo, hi = min(vals) * 100, max(vals) * 100
    pad = max(1.0, (hi - lo) * 0.1)
    lines = [
        "```mermaid",
        "xychart-beta",
        f'    title "{safe_metric}: gain vs Bk of the same session, % ({direction} is better); '
        f"lines: {_chart_interval_words(pts)}" + ("; flat line: min_gain" if min_gain is not None else "")
        + (f"; {dropped} older not shown" if dropped else "") + '"',
        f"    x-axis [{labels}]",
        f'    y-axis "gain vs Bk (%)" {_num(lo - pad)} --> {_num(hi + pad)}',
        f"    bar [{', '.join(pct(p.gain, 0.0) for p in pts)}]",
        f"    line [{', '.join(pct(x, 0.0) for x in lows)}]",
        f"    line [{', '.join(pct(x, 0.0) for x in highs)}]",
    ]
    if min_gain is not None:
        lines.append(f"    line [{', '.join(_num(100 * min_gain) for _ in pts)}]")
    lines.append("```")
    return "\n".join(lines)


# -------------------------------------------------------------- links


@dataclass(frozen=True)
class ReportLinks:
    """Where a report's readers can follow up. Every field is optional; parts that
    do not look like what they claim to be (a URL, a repo, a branch) are left out."""

    repo_url: str = ""
    """The target repository's web page, e.g. ``https://github.com/acme/tts``."""
    branch: str = ""
    """The candidate's branch (``rsi/<task>/<n>``)."""
    ledger_ref: str = "rsi/ledger"
    """The branch that holds ``ledger.jsonl``."""
    artifacts_url: str = ""
    """The Actions run (or other page) holding the job's artifacts."""
    page_url: str = ""
    """The service's read-only page for the task."""
    task_id: str = ""


_SHA_RX = re.compile(r"[0-9a-f]{7,64}")
_URL_OK = re.compile(r"https?://[A-Za-z0-9._~:/?#@!$&'*+,;=%\[\]-]+")
_REF_OK = re.compile(r"[A-Za-z0-9._/-]{1,200}")
_NAME_OK = re.compile(r"[A-Za-z0-9._-]{1,100}")


def _url(u: str) -> str:
    return u.rstrip("/") if u and _URL_OK.fullmatch(u) and "(" not in u and ")" not in u else ""


def _ref(r: str) -> str:
    return r if r and _REF_OK.fullmatch(r) and ".." not in r and not r.startswith("-") else ""


def _sha(s: str | None) -> str:
    return s if s and _SHA_RX.fullmatch(s) else ""


def render_links(verdict: Verdict, links: ReportLinks | None) -> str:
    """One markdown line: the commits, compare views vs Bk and B0, the ledger file,
    the artifacts and the task page ("" when there is nothing to link)."""
    v = verdict
    assert v is not None
    if links is None:
        return ""
    repo = _url(links.repo_url)
    cand, bk, b0 = (_sha(v.shas.get(k)) for k in ("candidate", "bk", "b0"))
    parts: list[str] = []
    if repo:
        for word, sha in (("candidate", cand), ("Bk", bk), ("B0", b0 if b0 != bk else "")):
            if sha:
                parts.append(f"{word} [`{_short(sha)}`]({repo}/commit/{sha})")
        if bk and cand:
            parts.append(f"[diff vs Bk]({repo}/compare/{bk}...{cand})")
        if b0 and cand and b0 != bk:
            parts.append(f"[diff vs B0]({repo}/compare/{b0}...{cand})")
        ledger_ref = _ref(links.ledger_ref)
        if ledger_ref:
            parts.append(f"[ledger]({repo}/blob/{ledger_ref}/ledger.jsonl)")
    if _url(links.artifacts_url):
        parts.append(f"[artifacts]({_url(links.artifacts_url)})")
    if _url(links.page_url):
        parts.append(f"[task page]({_url(links.page_url)})")
    return ("**Links**: " + " · ".join(parts)) if parts else ""


def reproduce_command(verdict: Verdict, links: ReportLinks | None = None) -> str:
    """Shell lines that re-judge the candidate on a maintainer's machine with the
    same verifier ("" when the verdict has no commits to name)."""
    v = verdict
    assert v is not None
    cand, bk, b0 = (_sha(v.shas.get(k)) for k in ("candidate", "bk", "b0"))
    if not (cand and bk):
        return ""
    branch = _ref(links.branch) if links else ""
    lines = ["# in a clone of the target repository, with rsi-bot installed"]
    lines.append(f"git fetch origin {branch}" if branch else "git fetch origin")
    cmd = f"rsi verify {bk} {cand} --repo ."
    if b0 and b0 != bk:
        cmd += f" --b0 {b0}"
    if v.benchmark and _NAME_OK.fullmatch(v.benchmark):
        cmd += f" --benchmark {v.benchmark}"
    lines.append(cmd + " --report verdict.json")
    return "\n".join(lines)


def _reproduce_block(v: Verdict, links: ReportLinks | None) -> str:
    cmd = reproduce_command(v, links)
    if not cmd:
        return ""
    return ("**Reproduce locally** (the same verifier, on your machine; results from a "
            "different machine are not comparable with these):\n\n" + fenced(cmd, info="sh"))


# ------------------------------------------------------------- ledger


def _ledger_rows(ledger: Sequence[LedgerRow]) -> list[str]:
    rows = []
    for r in ledger:
        n = f"#{r.candidate}" + (" (re-verify)" if r.event == "reverify" else "")
        cells = [
            n,
            str(r.round if r.round is not None else ""),
            _cell(r.agent),
            _cell(r.hypothesis, 160),
            f"`{_short(r.sha)}`" if r.sha else "—",
            f"{EMOJI.get(str(r.decision), '')} {r.decision}",
            _pct(r.gain) if r.gain is not None else "—",
            _cell(r.status or ""),
            _cell(r.reason, 240),
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


_LEDGER_HEADER = ("| # | round | agent | hypothesis | sha | decision | gain vs Bk | status | reason |\n"
                  "|---|---:|---|---|---|---|---:|---|---|")


def _fingerprint_lines(v: Verdict) -> list[str]:
    lines = []
    fp = v.fingerprint
    if fp is not None:
        for k, val in fp.model_dump().items():
            if val in ("", 0, {}, None):
                continue
            if isinstance(val, dict):
                for k2, v2 in sorted(val.items()):
                    lines.append(f"{k}.{k2}: {v2}")
            else:
                lines.append(f"{k}: {val}")
    for k in ("b0", "bk", "candidate"):
        if v.shas.get(k):
            lines.append(f"sha.{k}: {v.shas[k]}")
    for k, val in sorted(v.settings.items()):
        lines.append(f"setting.{k}: {val}")
    lines.append(f"verdict: {v.decision}, {v.pairs} pairs, {v.runs} runs, {v.duration_s:.1f} s, "
                 f"started {v.started_at.isoformat(timespec='seconds')}")
    return [_clip(x.replace("```", "'''"), 300) for x in lines]


# ------------------------------------------------------------ markdown


def render_markdown_report(
    verdict: Verdict,
    *,
    history: Sequence[HistoryPoint] | None = None,
    ledger: Sequence[LedgerRow] = (),
    title: str = "rsi verifier report",
    marker: str = "",
    max_chars: int = MAX_MARKDOWN_CHARS,
    links: ReportLinks | None = None,
) -> str:
    """The verifier's report as GitHub markdown, strictly under ``max_chars``.

    ``history`` defaults to :func:`history_from_ledger` of ``ledger``;
    ``marker`` (e.g. a hidden ``<!-- rsi:... -->`` comment) goes first, as given;
    ``links``: where the commits, compare views, ledger and artifacts are."""
    v = verdict
    assert v is not None
    hist = _as_history(history, ledger, v)
    parts: list[str] = []
    if marker:
        parts.append(marker)
    parts.append(f"### {_display(_clip(title, 200))}")
    parts.append(headline(v))
    parts.append(_display(_clip(v.reason, _MAX_REASON)))
    if self_reported_line(v):
        parts.append(self_reported_line(v))
    parts.append(comparing_line(v))
    if render_links(v, links):
        parts.append(render_links(v, links))
    parts.append(render_summary_table(v))
    if render_matrix_table(v):
        parts.append(render_matrix_table(v))
    trade = _tradeoffs(v)
    if trade:
        parts.append("**Tradeoffs**\n\n" + "\n".join(f"- {_display(_clip(t, 400))}" for t in trade[:20]))
    if v.warnings:
        parts.append("**Warnings**\n\n" + "\n".join(f"- {_display(_clip(w, 300))}" for w in v.warnings[:20]))
    if v.error is not None:
        err = v.error
        body = f"**{_display(err.stage)}**: {_display(_clip(err.message, 800))}"
        if err.stderr_tail:
            tail = fenced(_clip(err.stderr_tail[-3000:], 3000))
            body += f"\n\n<details><summary>stderr (tail)</summary>\n\n{tail}\n\n</details>"
        parts.append(body)
    if v.objective is not None:
        chart = render_mermaid_chart(hist, metric=v.objective.metric, direction=v.objective.direction,
                                     min_gain=v.objective.min_gain)
        if chart:
            parts.append(chart)
    if _reproduce_block(v, links):
        parts.append(_reproduce_block(v, links))
    head = "\n\n".join(parts)

    fp = "**Fingerprint**\n\n```\n" + "\n".join(_fingerprint_lines(v)) + "\n```"
    ledger_list = list(ledger)
    rows = _ledger_rows(ledger_list)

    def details(rows_kept: list[str], dropped: int) -> str:
        summary = f"Ledger ({len(ledger_list)} records) and fingerprint"
        body = [f"<details><summary>{summary}</summary>", ""]
        if rows_kept:
            body += [_LEDGER_HEADER, *rows_kept, ""]
        elif not ledger_list:
            body += ["_No ledger records._", ""]
        if dropped:
            body += [(f"_{dropped} older record(s) left out to stay under GitHub's comment limit; "
                      "the full ledger is on the branch `rsi/ledger` (ledger.jsonl)._"), ""]
        body += [fp, "", "</details>"]
        return "\n".join(body)

    # keep the newest rows that fit
    budget = max_chars - 1 - len(head) - 2
    kept = list(rows)
    text = details(kept, 0)
    if len(text) > budget:
        lo, hi = 0, len(rows)
        while lo < hi:  # the most rows (newest) that fit
            mid = (lo + hi + 1) // 2
            if len(details(rows[len(rows) - mid:], len(rows) - mid)) <= budget:
                lo = mid
            else:
                hi = mid - 1
        kept = rows[len(rows) - lo:] if lo else []
        text = details(kept, len(rows) - lo)
    out = head + "\n\n" + text + "\n"
    if len(out) >= max_chars:  # a pathological head: cut hard, keep valid markup
        note = "\n\n_(report truncated to stay under GitHub's comment limit)_\n"
        out = out[: max_chars - len(note) - 64]
        if out.count("```") % 2:
            out += "\n```"
        if out.count("<details>") > out.count("</details>"):
            out += "\n</details>"
        out += note
    return out


def render_matrix_table(v: Verdict | None) -> str:
    """The deployment matrix (``Verdict.cells``): one sentence saying where
    the gain holds and where it does not, and the cell table (setting | gain
    vs Bk | p95 | TTFA | memory); '' without a matrix."""
    from verifier.cells import MATRIX_HEADER, cell_row, matrix_sentence

    if v is None or not v.cells:
        return ""
    lines = ["**Deployment matrix**", "", _display(matrix_sentence(v.cells)), "",
             "| " + " | ".join(MATRIX_HEADER) + " |", "| --- | ---: | ---: | ---: | ---: |"]
    lines += ["| " + " | ".join(_cell(c, 300) for c in cell_row(cell)) + " |" for cell in v.cells[:16]]
    return "\n".join(lines)


def matrix_html_sections(v: Verdict | None) -> list[str]:
    """``render_matrix_table`` as HTML (the report page and the task page)."""
    from verifier.cells import MATRIX_HEADER, cell_row, matrix_sentence

    if v is None or not v.cells:
        return []
    head = "".join(f"<th>{_h(c)}</th>" for c in MATRIX_HEADER)
    rows = "".join(
        f'<tr class="{"fail" if cell.failed else "pass"}">'
        + "".join(f"<td>{_h(c)}</td>" for c in cell_row(cell)) + "</tr>"
        for cell in v.cells[:16]
    )
    return ["<h2>Deployment matrix</h2>", f"<p>{_h(matrix_sentence(v.cells))}</p>",
            f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"]


# ---------------------------------------------------------------- HTML


def _h(text: Any) -> str:
    return _html.escape(str(text), quote=True)


def render_svg_chart(
    history: Sequence[HistoryPoint],
    *,
    metric: str,
    direction: str = "higher",
    width: int = 760,
    height: int = 320,
    max_points: int = 80,
    min_gain: float | None = None,
) -> str:
    """An inline SVG of each candidate's gain vs the Bk measured in the same session:
    a bar per candidate coloured by what happened to it (kept, PR open, rolled
    back: grey, hatched), its interval as a whisker, zero and ``min_gain``
    as lines; hover a bar for the hypothesis."""
    pts, _ = _last_points(gain_points(history), max_points)
    if not pts:
        return ""
    vals = [x for p in pts for x in (p.gain, p.gain_low, p.gain_high) if x is not None]
    vals += [0.0] + ([min_gain] if min_gain is not None else [])
    lo, hi = min(vals), max(vals)
    span = (hi - lo) or 0.01
    lo, hi = lo - span * 0.1, hi + span * 0.1
    left, right, top_pad, bottom = 64, 16, 28, 56
    pw, ph = width - left - right, height - top_pad - bottom
    n = len(pts)

    def X(i: int) -> float:
        return left + (pw * (i + 0.5) / n)

    def Y(v: float) -> float:
        return top_pad + ph * (hi - v) / (hi - lo)

    out = [(f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
            f'height="{height}" role="img" aria-label="{_h(metric)}: gain vs Bk per candidate" '
            'font-family="system-ui, sans-serif" font-size="11">'),
           f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
           '<defs><pattern id="rb" width="6" height="6" patternUnits="userSpaceOnUse" '
           'patternTransform="rotate(45)"><rect width="6" height="6" fill="#eaeef2"/>'
           '<line x1="0" y1="0" x2="0" y2="6" stroke="#afb8c1" stroke-width="3"/></pattern></defs>']
    for k in range(6):  # grid and y ticks, in %
        v = lo + (hi - lo) * k / 5
        y = Y(v)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="#d0d7de" '
                   'stroke-width="0.6"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" fill="#57606a">{_h(_pct(v))}</text>')
    out.append(f'<line x1="{left}" y1="{Y(0):.1f}" x2="{width - right}" y2="{Y(0):.1f}" stroke="#24292f" '
               'stroke-width="1.2"/>')
    if min_gain is not None:
        out.append(f'<line x1="{left}" y1="{Y(min_gain):.1f}" x2="{width - right}" y2="{Y(min_gain):.1f}" '
                   'stroke="#bf8700" stroke-width="1.2" stroke-dasharray="5 4"/>')
    out.append(f'<text x="14" y="{top_pad + ph / 2:.0f}" transform="rotate(-90 14 {top_pad + ph / 2:.0f})" '
               f'text-anchor="middle" fill="#24292f">{_h(metric)}: gain vs Bk ({_h(direction)} is better)</text>')
    bw = max(4.0, min(36.0, pw / n * 0.6))
    every = max(1, math.ceil(n / 16))
    for i, p in enumerate(pts):
        x, g = X(i), p.gain or 0.0
        status = p.status or ("kept" if p.decision == "accept" else "rolled_back")
        fill = "url(#rb)" if status in ("rolled_back", "superseded") else STATUS_COLOR.get(status, "#0969da")
        y0, y1 = sorted((Y(0), Y(g)))
        tip = f"{p.label} ({_status_word(p)}, {p.decision}): {_pct(g)} vs Bk"
        if p.gain_low is not None and p.gain_high is not None:
            tip += f" [{_pct(p.gain_low)} to {_pct(p.gain_high)}]"
        tip += f" — {p.hypothesis}" if p.hypothesis else ""
        out.append(f'<rect class="bar {_h(status)}" x="{x - bw / 2:.1f}" y="{y0:.1f}" width="{bw:.1f}" '
                   f'height="{max(y1 - y0, 1):.1f}" fill="{fill}" stroke="#57606a" stroke-width="0.6">'
                   f'<title>{_h(tip)}</title></rect>')
        if p.gain_low is not None and p.gain_high is not None:
            ya, yb = Y(p.gain_low), Y(p.gain_high)
            out.append(f'<path class="interval" d="M{x:.1f},{ya:.1f} L{x:.1f},{yb:.1f} M{x - 5:.1f},{ya:.1f} '
                       f'L{x + 5:.1f},{ya:.1f} M{x - 5:.1f},{yb:.1f} L{x + 5:.1f},{yb:.1f}" '
                       'stroke="#24292f" stroke-width="1.2" fill="none"/>')
        if i % every == 0 or i == n - 1:
            out.append(f'<text x="{x:.1f}" y="{height - bottom + 16}" text-anchor="middle" fill="#24292f">'
                       f'{_h(p.label)}</text>')
            out.append(f'<text x="{x:.1f}" y="{height - bottom + 29}" text-anchor="middle" fill="#57606a">'
                       f'{_h(_status_word(p))}</text>')
    lx, ly = left, height - 8
    for label, fill in (("kept / merged", STATUS_COLOR["kept"]), ("PR open", STATUS_COLOR["open"]),
                        ("rolled back", "url(#rb)")):
        out.append(f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" fill="{fill}" stroke="#57606a" '
                   f'stroke-width="0.6"/><text x="{lx + 14}" y="{ly}" fill="#24292f">{label}</text>')
        lx += 24 + 7 * len(label)
    out.append(f'<text x="{lx}" y="{ly}" fill="#24292f">whisker: {_chart_interval_words(pts)}</text>')
    if min_gain is not None:
        out.append(f'<text x="{lx + 150}" y="{ly}" fill="#bf8700">dashed: min_gain {_h(_pct(min_gain))}</text>')
    out.append("</svg>")
    return "\n".join(out)


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:1100px;color:#24292f;padding:0 1rem}
h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:2rem}
.headline{font-size:1.15rem;padding:.6rem .9rem;border-left:6px solid var(--c);background:#f6f8fa}
table{border-collapse:collapse;margin:.6rem 0;font-size:.9rem}
th,td{border:1px solid #d0d7de;padding:.3rem .55rem;vertical-align:top}
th{background:#f6f8fa;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.fail td{background:#ffebe9}tr.unclear td{background:#fff8c5}tr.objective td{font-weight:600}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.85rem}
pre{background:#f6f8fa;padding:.7rem;white-space:pre-wrap;overflow-wrap:anywhere}
.muted{color:#57606a}
"""


def render_html_report(
    verdict: Verdict,
    *,
    history: Sequence[HistoryPoint] | None = None,
    ledger: Sequence[LedgerRow] = (),
    title: str = "rsi verifier report",
    max_ledger_rows: int = 1000,
    links: ReportLinks | None = None,
) -> str:
    """A self-contained HTML page (inline CSS and SVG; no scripts, no external
    resources; only ``links`` lead elsewhere) with the same content as the markdown report."""
    v = verdict
    assert v is not None
    b = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
         f"<title>{_h(title)}</title>", f"<style>{_CSS}</style></head><body>",
         f"<h1>{_h(title)}</h1>"]
    b += html_report_sections(v, history=history, ledger=ledger, links=links,
                              max_ledger_rows=max_ledger_rows)
    b.append("</body></html>")
    return "\n".join(b) + "\n"


def html_links(v: Verdict, links: ReportLinks | None) -> str:
    """The markdown links line as HTML anchors ("" when none)."""
    md = render_links(v, links)
    if not md:
        return ""
    out = _h(md.removeprefix("**Links**: "))
    out = re.sub(r"\[(.*?)\]\((https?://[^)\s]+)\)",
                 lambda m: f'<a href="{m.group(2)}" rel="noopener noreferrer">{m.group(1).replace("`", "")}</a>', out)
    return f'<p class="links">Links: {out}</p>'


def html_report_sections(
    verdict: Verdict,
    *,
    history: Sequence[HistoryPoint] | None = None,
    ledger: Sequence[LedgerRow] = (),
    links: ReportLinks | None = None,
    max_ledger_rows: int = 1000,
) -> list[str]:
    """The report's HTML body (headline, table, tradeoffs, chart, reproduce
    command, ledger, fingerprint), for a page of its own or the service's task page."""
    v = verdict
    assert v is not None
    hist = _as_history(history, ledger, v)
    color = DECISION_COLOR[v.decision]
    md_head = headline(v).replace("**", "")
    comp = comparing_line(v).replace("`", "")
    b = [f'<p class="headline" style="--c:{color}">{_h(md_head)}</p>',
         f"<p>{_h(v.reason)}</p>", f'<p class="muted">{_h(comp)}</p>']
    if html_links(v, links):
        b.append(html_links(v, links))
    rows = summary_rows(v)
    if rows:
        b.append("<table><thead><tr>" + "".join(f"<th>{_h(c)}</th>" for c in _HEADER) + "</tr></thead><tbody>")
        for r in rows:
            cls = "objective" if r.kind == "objective" else r.status
            metric = r.metric.replace("**", "")
            b.append(f'<tr class="{_h(cls)}"><td>{_h(metric)}</td>'
                     + "".join(f'<td class="num">{_h(c)}</td>' for c in (r.b0, r.bk, r.candidate, r.change, r.interval))
                     + f"<td>{_h(r.verdict)}</td></tr>")
        b.append("</tbody></table>")
    b += matrix_html_sections(v)
    trade = _tradeoffs(v)
    if trade:
        b.append("<h2>Tradeoffs</h2><ul>" + "".join(f"<li>{_h(t)}</li>" for t in trade) + "</ul>")
    if v.warnings:
        b.append("<h2>Warnings</h2><ul>" + "".join(f"<li>{_h(w)}</li>" for w in v.warnings) + "</ul>")
    if v.error is not None:
        b.append(f"<h2>Error</h2><p><b>{_h(v.error.stage)}</b>: {_h(v.error.message)}</p>")
        if v.error.stderr_tail:
            b.append(f"<pre>{_h(v.error.stderr_tail[-4000:])}</pre>")
    if v.objective is not None:
        svg = render_svg_chart(hist, metric=v.objective.metric, direction=v.objective.direction,
                               min_gain=v.objective.min_gain)
        if svg:
            b.append(f"<h2>{_h(v.objective.metric)}: gain of each candidate vs Bk</h2>")
            b.append(svg)
    cmd = reproduce_command(v, links)
    if cmd:
        b.append(f"<h2>Reproduce locally</h2><pre>{_h(cmd)}</pre>")
    led = list(ledger)
    b.append(f"<h2>Ledger ({len(led)} records)</h2>")
    if led:
        shown = led[-max_ledger_rows:]
        if len(shown) < len(led):
            b.append(f'<p class="muted">{len(led) - len(shown)} older records left out.</p>')
        b.append("<table><thead><tr>" + "".join(
            f"<th>{c}</th>" for c in ("#", "round", "agent", "hypothesis", "sha", "decision", "gain vs Bk",
                                      "gain vs B0", "status", "reason")) + "</tr></thead><tbody>")
        for rec in shown:
            gain, g0 = rec.gain, rec.gain_vs_b0
            dec = str(rec.decision)
            b.append(
                f'<tr><td>#{_h(rec.candidate)}</td><td class="num">{_h(rec.round if rec.round is not None else "")}</td>'
                f'<td>{_h(rec.agent)}</td><td>{_h(rec.hypothesis)}</td>'
                f'<td><code>{_h(_short(rec.sha))}</code></td>'
                f'<td style="color:{DECISION_COLOR.get(dec, "#24292f")}">{_h(dec)}</td>'
                f'<td class="num">{_h(_pct(gain) if gain is not None else "—")}</td>'
                f'<td class="num">{_h(_pct(g0) if g0 is not None else "—")}</td>'
                f'<td>{_h(rec.status or "")}</td><td>{_h(rec.reason)}</td></tr>')
        b.append("</tbody></table>")
    else:
        b.append('<p class="muted">No ledger records.</p>')
    b.append("<h2>Fingerprint</h2><pre>" + _h("\n".join(_fingerprint_lines(v))) + "</pre>")
    return b
