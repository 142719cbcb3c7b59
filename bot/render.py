"""Pure renderers: comment bodies, PR texts and check run payloads.

Every function here is a function of data (verdicts, ledger records, task
fields) returning text or a dict; nothing is sent from here (STYLE item 4).
The verifier report itself is ``harness.report``'s markdown; this module wraps
it with the hidden sticky marker and keeps it under GitHub's comment limit.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

from harness.report import HistoryPoint, headline, render_markdown_report
from verifier.verdict import Verdict

COMMENT_LIMIT = 65536
CHECK_SUMMARY_LIMIT = 65535
MARKER_RX = re.compile(r"<!-- rsi-bot:([a-z0-9:_-]+) -->")
STATUS = "status"  # the issue's sticky status comment
REPORT = "report"  # the PR's sticky verifier report

DECISION_WORDS = {
    "accept": ("✅", "accepted"),
    "review": ("🔍", "needs a human review"),
    "reject": ("❌", "rejected"),
    "inconclusive": ("➖", "inconclusive"),
    "error": ("⚠️", "not judged: infrastructure error"),
}

# Check run conclusions: an inconclusive result or an infrastructure error is
# never a failure of the change.
CONCLUSIONS = {
    "accept": "success",
    "reject": "failure",
    "review": "neutral",
    "inconclusive": "neutral",
    "error": "neutral",
}


def marker(kind: str) -> str:
    """The hidden marker that identifies one of our sticky comments."""
    if not re.fullmatch(r"[a-z0-9:_-]+", kind):
        raise ValueError(f"bad marker kind {kind!r}")
    return f"<!-- rsi-bot:{kind} -->"


def with_marker(body: str, kind: str, *, limit: int = COMMENT_LIMIT) -> str:
    """``body`` with the marker on its first line, cut to fit ``limit`` characters."""
    head = marker(kind) + "\n"
    return head + truncate(body, limit - len(head))


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    note = "\n\n_… cut to fit GitHub's size limit; the full report is in the job's artifacts._\n"
    cut = text[: max(0, limit - len(note))]
    # do not leave a <details> block open
    if cut.count("<details>") > cut.count("</details>"):
        note = "\n</details>" + note
        cut = text[: max(0, limit - len(note))]
    return cut + note


# --------------------------------------------------------------------- numbers


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{v * 100:+.1f}%"


def _short(sha: str | None) -> str:
    return (sha or "?")[:10]


# --------------------------------------------------------------------- report


def report_markdown(v: Verdict, *, history: Sequence[tuple[str, float]] = (),
                    ledger: Sequence[Any] = (), max_chars: int = COMMENT_LIMIT) -> str:
    """The verifier report: ``harness.report.render_markdown_report``, the same
    report the demo writes."""
    hist = None
    if not ledger and history:
        # (label, value) or (label, value, bk): Bk defaults to the previous step's
        hist, bk = [], None
        for point in history:
            label, val = point[0], point[1]
            bk = point[2] if len(point) > 2 and point[2] is not None else (bk or val)
            hist.append(HistoryPoint(label=str(label), value=val, bk=bk))
    return render_markdown_report(v, history=hist, ledger=list(ledger), max_chars=max_chars,
                                  title="rsi/verifier report")


def report_comment(v: Verdict, *, pr_note: str = "", history: Sequence[tuple[str, float]] = (),
                   ledger: Sequence[Any] = ()) -> str:
    """The PR's sticky report comment: marker, an optional note, the report."""
    note = pr_note.rstrip() + "\n\n" if pr_note else ""
    room = COMMENT_LIMIT - len(marker(REPORT)) - len(note) - 64
    return with_marker(note + report_markdown(v, history=history, ledger=ledger,
                                              max_chars=room), REPORT)


# --------------------------------------------------------------------- check run


def check_run(v: Verdict, *, note: str = "") -> dict[str, Any]:
    """Arguments for ``GitHubPort.create_check_run`` (name and head sha added by the caller)."""
    icon, word = DECISION_WORDS.get(v.decision, ("", v.decision))
    title = f"{word}: {v.reason}"[:200]
    note = note.rstrip() + "\n\n" if note else ""
    summary = note + report_markdown(v, max_chars=CHECK_SUMMARY_LIMIT - len(note) - 64)
    return {"conclusion": CONCLUSIONS.get(v.decision, "neutral"), "title": title,
            "summary": truncate(summary, CHECK_SUMMARY_LIMIT)}


def check_run_error(message: str) -> dict[str, Any]:
    """A check run for a job that could not judge the change: neutral, never a failure."""
    return {"conclusion": "neutral", "title": "not judged: infrastructure error"[:200],
            "summary": truncate(f"The verifier could not run: {message}\n\n"
                                "This says nothing about the change. `/rsi rerun` retries.",
                                CHECK_SUMMARY_LIMIT)}


# --------------------------------------------------------------------- issue status


def task_summary(spec: Any) -> str:
    """A short summary of a TaskSpec (duck-typed: objective, guards, agent, runner)."""
    obj = dict(getattr(spec, "objective", {}) or {})
    lines = [f"- **objective**: `{obj.get('metric', '?')}` of benchmark "
             f"`{obj.get('benchmark', '?')}`, at least {_pct(float(obj.get('min_gain', 0)))} "
             "per candidate"]
    for g in getattr(spec, "guards", []) or []:
        bound = (f"≤ {g['max_ratio']}x" if "max_ratio" in g else
                 f"≤ +{g['max_delta']}" if "max_delta" in g else "")
        lines.append(f"- **guard**: `{g.get('metric', '?')}` {bound}".rstrip())
    for q in getattr(spec, "quality", []) or []:
        lines.append(f"- **quality**: {q.get('kind', '?')} on `{q.get('output', '?')}`")
    agent = getattr(spec, "agent", None)
    if agent is not None:
        lines.append(f"- **agent**: `{getattr(agent, 'kind', '?')}`, "
                     f"{getattr(agent, 'rounds', '?')} rounds")
    runner = getattr(spec, "runner", None)
    if runner is not None and getattr(runner, "profile", None):
        lines.append(f"- **runner**: `{runner.profile}`")
    return "\n".join(lines)


STATE_WORDS = {
    "queued": "⏳ queued",
    "invalid": "🛑 the proposal has problems",
    "refused": "🛑 refused",
    "baseline": "📏 measuring the baseline",
    "running": "🏃 running rounds",
    "stopping": "⏸️ stopping after the current step",
    "stopped": "⏸️ stopped (`/rsi resume` continues)",
    "rebaselining": "📏 measuring the new baseline",
    "finished": "🏁 finished",
    "failed": "⚠️ failed (infrastructure)",
    "superseded": "↪️ superseded by a newer trigger",
}


def status_comment(*, state: str, summary: str = "", errors: Sequence[str] = (),
                   candidates: Iterable[Any] = (), budget: int | None = None,
                   rounds_done: int = 0, bk: str | None = None, b0: str | None = None,
                   note: str = "") -> str:
    """The issue's sticky status comment."""
    lines = [f"## rsi: {STATE_WORDS.get(state, state)}", ""]
    if note:
        lines += [note, ""]
    if errors:
        lines += ["The proposal cannot run yet. Fix these and add the label again:", ""]
        lines += [f"- {e}" for e in errors]
        lines += ["", "The issue form (`.github/ISSUE_TEMPLATE/rsi-proposal.yml`) lists every "
                  "section; `rsi spec check` validates a proposal locally.", ""]
    if summary:
        lines += ["**Task**", "", summary, ""]
    if b0 or bk:
        lines += [f"B0 `{_short(b0)}` · Bk `{_short(bk)}`", ""]
    if budget is not None or rounds_done:
        lines += [f"Rounds: {rounds_done}" + (f" of {budget}" if budget is not None else ""), ""]
    cands = list(candidates)
    if cands:
        lines += ["| # | verdict | hypothesis | PR |", "| --- | --- | --- | --- |"]
        for c in cands:
            icon, word = DECISION_WORDS.get(c.decision, ("", c.decision))
            pr = f"#{c.pr_number}" if c.pr_number else "—"
            if c.state in ("merged", "closed", "conflict"):
                pr += f" ({c.state})"
            hyp = (c.hypothesis or "").replace("|", "\\|").replace("\n", " ")[:120]
            lines.append(f"| {c.n} | {icon} {word} | {hyp} | {pr} |")
        lines.append("")
    lines.append("_Commands: `/rsi status`, `/rsi stop`, `/rsi resume`, `/rsi budget N`, "
                 "`/rsi rebaseline`, `/rsi help`; on a PR: `/rsi rerun`._")
    return with_marker("\n".join(lines), STATUS)


# --------------------------------------------------------------------- replies


def help_text(label: str = "rsi") -> str:
    return "\n".join([
        "**rsi-bot commands** (one per line, at the start of the line; people with write, "
        "maintain or admin access):", "",
        f"- add the `{label}` label to a proposal issue: start a task (a newer label supersedes)",
        "- `/rsi rerun`: on a bot PR, re-verify its head against the current Bk; on the issue, "
        "every open candidate",
        "- `/rsi status`: refresh the status comment",
        "- `/rsi stop` / `/rsi resume`: pause and continue the rounds",
        "- `/rsi budget N`: set the number of rounds to N",
        "- `/rsi rebaseline`: measure the default branch as the new Bk and re-verify open "
        "candidates",
        "- `/rsi help`: this text",
    ])


def refusal(user: str, command: str, reason: str) -> str:
    return f"@{user} `/rsi {command}` was not run: {reason}"


def ack(user: str, text: str) -> str:
    return f"@{user} {text}"


def pr_title(issue: int, n: int, hypothesis: str | None) -> str:
    hyp = (hypothesis or "candidate").strip().splitlines()[0] if hypothesis else "candidate"
    return f"rsi #{issue}.{n}: {hyp}"[:250]


def pr_body(*, issue: int, n: int, hypothesis: str | None, verdict: Verdict | None,
            labeler: str | None) -> str:
    lines = [f"Candidate {n} of task #{issue} (part of #{issue}).", ""]
    if hypothesis:
        lines += [f"> {hypothesis.strip()}", ""]
    if verdict is not None:
        lines += [headline(verdict), ""]  # harness.report's one-line verdict
    lines += ["This draft PR holds exactly one change. The verifier's full report is in the "
              "comment below and in the `rsi/verifier` check run.", "",
              "Merging it makes the merge commit the new baseline (Bk) for the next rounds; "
              "the bot never approves or merges."]
    if labeler:
        lines += ["", f"Review requested from @{labeler}, who started the task."]
    return "\n".join(lines)


def conflict_note(merged_pr: int | None, detail: str) -> str:
    where = f" with #{merged_pr}" if merged_pr else ""
    return (f"⚠️ **This candidate conflicts{where}**: it no longer applies to the new Bk, so it "
            f"was not re-verified. Rebase it by hand or close it.\n\n```\n{detail[-1500:]}\n```")


def reverified_note(bk: str | None, merged_pr: int | None = None) -> str:
    why = f" after #{merged_pr} merged" if merged_pr else ""
    return f"🔁 Re-verified against Bk `{_short(bk)}`{why}."
