"""Pure renderers: comment bodies, PR texts and check run payloads.

Every function here is a function of data (verdicts, ledger records, task
fields) returning text or a dict; nothing is sent from here (STYLE item 4).
Untrusted text (hypotheses, proposal text and the errors quoting it, command
arguments, verifier reasons, runner output) only enters through
:func:`harness.text.inert` (or :func:`harness.text.fenced` for a block).
The verifier report itself is ``harness.report``'s markdown; this module wraps
it with the hidden sticky marker and keeps it under GitHub's comment limit.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

from harness.report import HistoryPoint, headline, render_markdown_report
from harness.text import fenced, inert
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
    return re.sub(r"[^0-9a-fA-F]", "", sha or "")[:10] or "?"


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
    title = inert(f"{word}: {v.reason}", plain=True, max_len=200)
    note = note.rstrip() + "\n\n" if note else ""
    summary = note + report_markdown(v, max_chars=CHECK_SUMMARY_LIMIT - len(note) - 64)
    return {"conclusion": CONCLUSIONS.get(v.decision, "neutral"), "title": title,
            "summary": truncate(summary, CHECK_SUMMARY_LIMIT)}


def check_run_error(message: str) -> dict[str, Any]:
    """A check run for a job that could not judge the change: neutral, never a failure."""
    return {"conclusion": "neutral", "title": "not judged: infrastructure error"[:200],
            "summary": truncate(f"The verifier could not run: {inert(message)}\n\n"
                                "This says nothing about the change. `/rsi rerun` retries.",
                                CHECK_SUMMARY_LIMIT)}


# --------------------------------------------------------------------- issue status


def task_summary(spec: Any) -> str:
    """A short summary of a TaskSpec (duck-typed: objective, guards, agent, runner)."""
    obj = dict(getattr(spec, "objective", {}) or {})
    def t(x: Any) -> str:
        return inert(x, one_line=True, max_len=120)

    lines = [f"- **objective**: {t(obj.get('metric', '?'))} of benchmark "
             f"{t(obj.get('benchmark', '?'))}, at least {_pct(float(obj.get('min_gain', 0)))} "
             "per candidate"]
    for g in getattr(spec, "guards", []) or []:
        bound = (f"≤ {t(g['max_ratio'])}x" if "max_ratio" in g else
                 f"≤ +{t(g['max_delta'])}" if "max_delta" in g else
                 f"≥ {t(g['min_ratio'])}x" if "min_ratio" in g else
                 f"≥ {t(g['min_delta'])}" if "min_delta" in g else "")
        lines.append(f"- **guard**: {t(g.get('metric', '?'))} {bound}".rstrip())
    for q in getattr(spec, "quality", []) or []:
        lines.append(f"- **quality**: {t(q.get('kind', '?'))} on {t(q.get('output', '?'))}")
    agent = getattr(spec, "agent", None)
    if agent is not None:
        lines.append(f"- **agent**: {t(getattr(agent, 'kind', '?'))}, "
                     f"{t(getattr(agent, 'rounds', '?'))} rounds")
    runner = getattr(spec, "runner", None)
    if runner is not None and getattr(runner, "profile", None):
        lines.append(f"- **runner**: {t(runner.profile)}")
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
                   note: str = "", edit: tuple[str, str] | None = None,
                   label: str = "rsi") -> str:
    """The issue's sticky status comment. ``note`` is the bot's own text (callers
    pass untrusted parts through ``inert``); ``errors`` are escaped here;
    ``edit``: (approved body, edited body) of an edit not approved yet."""
    lines = [f"## rsi: {STATE_WORDS.get(inert(state), inert(state))}", ""]
    if note:
        lines += [note, ""]
    if edit is not None:
        lines += edit_notice(edit[0], edit[1], label=label)
    if errors:
        lines += ["The proposal cannot run yet. Fix these and add the label again:", ""]
        lines += [f"- {inert(e, one_line=True, max_len=1000)}" for e in errors]
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
            hyp = inert(c.hypothesis or "", one_line=True, max_len=120)
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


def edit_notice(approved: str, edited: str, *, label: str = "rsi", max_lines: int = 60
                ) -> list[str]:
    """Lines saying the issue was edited after the label, with the difference."""
    import difflib

    diff = list(difflib.unified_diff(approved.splitlines(), edited.splitlines(),
                                     "proposal as labeled", "issue as edited", lineterm="", n=1))
    if len(diff) > max_lines:
        diff = diff[:max_lines] + [f"... {len(diff) - max_lines} more lines"]
    return ["⚠️ **The issue was edited after the label.** The task runs the proposal as it "
            "was when the label was added; the edit is not run. A person with write access "
            f"can run it by commenting `/rsi rerun` on this issue, or by adding the `{label}` "
            "label again. What changed:", "", fenced("\n".join(diff), info="diff"), ""]


def refusal(user: str, command: str, reason: str) -> str:
    """A refused command. ``command`` (as the commenter wrote it) is escaped;
    ``reason`` is the bot's own text (escape untrusted parts where it is made)."""
    return (f"@{user} the command /rsi {inert(command, one_line=True, max_len=200)} was not "
            f"run: {reason}")


def label_refusal(user: str, label: str, reason: str) -> str:
    return f"@{user} the `{inert(label, plain=True)}` label did not start a task: {reason}"


def ack(user: str, text: str) -> str:
    return f"@{user} {text}"


def pr_title(issue: int, n: int, hypothesis: str | None) -> str:
    hyp = (hypothesis or "").strip().splitlines()[0] if (hypothesis or "").strip() else ""
    return f"rsi #{issue}.{n}: " + (inert(hyp, plain=True, max_len=200) or "candidate")


def pr_body(*, issue: int, n: int, hypothesis: str | None, verdict: Verdict | None,
            labeler: str | None) -> str:
    lines = [f"Candidate {n} of task #{issue} (part of #{issue}).", ""]
    if hypothesis and hypothesis.strip():
        quoted = inert(hypothesis.strip(), max_len=2000).splitlines()
        lines += [f"> {q}" for q in quoted] + [""]
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
            f"was not re-verified. Rebase it by hand or close it.\n\n{fenced(detail[-1500:])}")


def reverified_note(bk: str | None, merged_pr: int | None = None) -> str:
    why = f" after #{merged_pr} merged" if merged_pr else ""
    return f"🔁 Re-verified against Bk `{_short(bk)}`{why}."
