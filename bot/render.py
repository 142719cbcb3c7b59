"""Pure renderers: comment bodies, PR texts and check run payloads.

Every function here is a function of data (verdicts, ledger records, task
fields) returning text or a dict; nothing is sent from here (docs/architecture.md, habit 4).
Untrusted text (hypotheses, proposal text and the errors quoting it, command
arguments, verifier reasons, runner output) only enters through
:func:`harness.text.inert` (or :func:`harness.text.fenced` for a block).
The verifier report itself is ``harness.report``'s markdown; this module wraps
it with the hidden sticky marker and keeps it under GitHub's comment limit.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from bot import command_table
from bot.vocab import (
    KEPT,
    TASK_CONCLUSIONS,
    TASK_STATE_WORDS,
    CandidateState,
    decision_style,
)
from harness.ledger import CandidateStatus
from harness.report import (
    HistoryPoint,
    LedgerRow,
    ReportLinks,
    gain_interval,
    headline,
    render_markdown_report,
)
from harness.spec import TaskSpec
from harness.text import fenced as fenced  # re-exported: handlers and tasks use render.inert
from harness.text import inert as inert
from verifier.verdict import Verdict

if TYPE_CHECKING:
    from bot.store import Candidate
    from harness.watch import WatchResult

COMMENT_LIMIT = 65536
CHECK_SUMMARY_LIMIT = 65535
MARKER_RX = re.compile(r"<!-- rsi-bot:([a-z0-9:_-]+) -->")
STATUS = "status"  # the issue's sticky status comment
REPORT = "report"  # the PR's sticky verifier report

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


SHORT_SHA = 12


def short_sha(sha: str | None) -> str:
    """The first 12 hex digits of a commit id (anything else dropped), or ``?``."""
    return re.sub(r"[^0-9a-fA-F]", "", sha or "")[:SHORT_SHA] or "?"



# --------------------------------------------------------------------- report


def report_markdown(v: Verdict, *, history: Sequence[HistoryPoint] = (),
                    ledger: Sequence[LedgerRow] = (), max_chars: int = COMMENT_LIMIT,
                    links: ReportLinks | None = None) -> str:
    """The verifier report: ``harness.report.render_markdown_report``, the same
    report the demo writes. ``history``: the task's candidates as chart points
    (the store's view, used when there is no ledger)."""
    hist = list(history) if (history and not ledger) else None
    return render_markdown_report(v, history=hist, ledger=list(ledger), max_chars=max_chars,
                                  title="rsi/verifier report", links=links)


def report_comment(v: Verdict, *, pr_note: str = "", history: Sequence[HistoryPoint] = (),
                   ledger: Sequence[LedgerRow] = (), links: ReportLinks | None = None) -> str:
    """The PR's sticky report comment: marker, an optional note, the report."""
    note = pr_note.rstrip() + "\n\n" if pr_note else ""
    room = COMMENT_LIMIT - len(marker(REPORT)) - len(note) - 64
    return with_marker(note + report_markdown(v, history=history, ledger=ledger,
                                              max_chars=room, links=links), REPORT)


def candidate_history(candidates: Iterable[Candidate]) -> list[HistoryPoint]:
    """Chart points from stored candidates: each one's gain vs the Bk of its own
    session, kept (a PR: open, merged) or rolled back."""
    out = []
    for c in candidates:
        v = c.verdict_model
        o = v.objective if v is not None else None
        low: float | None
        high: float | None
        if o is not None and o.gain_ci is not None:
            low, high = o.gain_ci.low, o.gain_ci.high
        else:  # older verdicts have only the ratio interval
            low, high = gain_interval(o.ratio_ci if o is not None else None,
                                      o.direction if o is not None else "higher")
        out.append(HistoryPoint(
            label=f"#{int(c.n)}", value=None, bk=None, decision=c.decision,
            hypothesis=c.hypothesis or "", gain=o.gain if o is not None else None,
            gain_low=low, gain_high=high,
            status=CandidateStatus(c.state).ledger_word, sha=c.sha or ""))
    return out


# --------------------------------------------------------------------- check run


def check_run(v: Verdict, *, note: str = "", links: ReportLinks | None = None) -> dict[str, Any]:
    """Arguments for ``GitHubPort.create_check_run`` (name and head sha added by the caller)."""
    style = decision_style(v.decision)
    title = inert(f"{style.words}: {v.reason}", plain=True, max_len=200)
    note = note.rstrip() + "\n\n" if note else ""
    summary = note + report_markdown(v, max_chars=CHECK_SUMMARY_LIMIT - len(note) - 64,
                                     links=links)
    return {"conclusion": style.conclusion, "title": title,
            "summary": truncate(summary, CHECK_SUMMARY_LIMIT)}


def check_run_error(message: str) -> dict[str, Any]:
    """A check run for a job that could not judge the change: neutral, never a failure."""
    return {"conclusion": "neutral", "title": "not judged: infrastructure error"[:200],
            "summary": truncate(f"The verifier could not run: {inert(message)}\n\n"
                                "This says nothing about the change. `/rsi rerun` retries.",
                                CHECK_SUMMARY_LIMIT)}


# --------------------------------------------------------------------- live checks


def check_queued(what: str, issue: int, n: int | None = None) -> dict[str, str]:
    """Title and summary of a check run just queued (``what`` is the bot's own words)."""
    cand = f" of candidate {int(n)}" if n is not None else ""
    return {"title": f"queued: {what}{cand}",
            "summary": f"Queued for task #{int(issue)}: {what}{cand}. This check turns to in "
                       "progress when a worker or runner starts it, with the round and the "
                       "number of measured pairs, and completes with the verifier's report."}


def check_progress_text(*, phase: str = "", round_: int | None = None,
                        rounds: int | None = None, pairs: int | None = None,
                        candidate: int | None = None, runs: int | None = None,
                        total: int | None = None) -> str:
    """One line of progress: "round 2/5 · candidate 2 · measuring · 6 pairs (12/20 runs)".
    Numbers are taken as ints (progress data comes from the runner); ``phase`` is made inert."""
    parts = []
    if isinstance(round_, int):
        parts.append(f"round {round_}/{rounds}" if isinstance(rounds, int) else f"round {round_}")
    if isinstance(candidate, int):
        parts.append(f"candidate {candidate}")
    if phase:
        parts.append(inert(phase, plain=True, one_line=True, max_len=120))
    if isinstance(pairs, int):
        parts.append(f"{pairs} pair{'s' if pairs != 1 else ''} so far")
    if isinstance(runs, int) and isinstance(total, int) and total > 0:
        if parts:
            parts[-1] += f" ({runs}/{total} runs)"
        else:
            parts.append(f"{runs}/{total} runs")
    return " · ".join(parts) or "in progress"


def check_progress(text: str) -> dict[str, str]:
    return {"title": text[:200], "summary": f"In progress: {text}\n\nThis check completes "
                                           "with the verifier's report."}


def task_check(state: str, *, rounds_done: int, budget: int | None,
               candidates: Sequence[Candidate]) -> dict[str, str]:
    """The completed check of a task's run: how many rounds, what was kept."""
    kept = [c for c in candidates if c.state in KEPT]
    word = TASK_STATE_WORDS.get(state, inert(state, plain=True))
    rounds = f"{rounds_done} round(s)" + (f" of {budget}" if budget is not None else "")
    title = f"{word}: {rounds}, {len(candidates)} candidate(s), {len(kept)} kept"
    lines = [title, ""]
    for c in candidates:
        style = decision_style(c.decision)
        pr = f" (#{int(c.pr_number)})" if c.pr_number else ""
        lines.append(f"- candidate {int(c.n)}: {style.emoji} {style.words}{pr}")
    lines += ["", "Each kept candidate has its own draft PR, report and `rsi/verifier` check."]
    return {"conclusion": TASK_CONCLUSIONS.get(state, "neutral"), "title": title[:200],
            "summary": truncate("\n".join(lines), CHECK_SUMMARY_LIMIT)}


# --------------------------------------------------------------------- issue status


def _bound(text: str) -> str:
    return text.replace("<=", "≤").replace(">=", "≥")


def task_summary(spec: TaskSpec) -> str:
    """A short summary of a task: its objective, guards and quality guards (all
    under ``spec.verify``), agent and runner profile. Every value is inert."""
    def t(x: Any) -> str:
        return inert(x, one_line=True, max_len=120)

    ob = spec.verify.objective
    lines = [f"- **objective**: {t(ob.metric)} of benchmark {t(ob.benchmark)}, "
             f"at least {_pct(ob.min_gain)} per candidate"]
    for g in spec.verify.guards:
        where = f" on {t(g.benchmark)}" if g.benchmark and g.benchmark != ob.benchmark else ""
        lines.append(f"- **guard**: {t(g.metric)} {t(_bound(g.bound_text))}{where}")
    for q in spec.verify.quality:
        lines.append(f"- **quality**: {t(_bound(q.label))}")
    lines.append(f"- **agent**: {t(spec.agent.kind)}, {t(spec.agent.rounds)} rounds")
    if spec.runner.profile:
        lines.append(f"- **runner**: {t(spec.runner.profile)}")
    return "\n".join(lines)


MAX_ERRORS_SHOWN = 50
"""Problems of a proposal the status comment lists; the rest are counted."""


def status_comment(*, state: str, summary: str = "", errors: Sequence[str] = (),
                   candidates: Iterable[Candidate] = (), budget: int | None = None,
                   rounds_done: int = 0, bk: str | None = None, b0: str | None = None,
                   note: str = "", edit: tuple[str, str] | None = None,
                   label: str = "rsi", usage: dict[str, Any] | None = None,
                   edit_link: str = "", proposal: str | None = None) -> str:
    """The issue's sticky status comment. ``note`` is the bot's own text (callers
    pass untrusted parts through ``inert``); ``errors`` are escaped here;
    ``edit``: (approved body, edited body) of an edit not approved yet, with
    ``edit_link`` where its full diff is (the task page), if anywhere;
    ``proposal``: the text that runs (its digest is shown)."""
    lines = [f"## rsi: {TASK_STATE_WORDS.get(inert(state), inert(state))}", ""]
    if note:
        lines += [note, ""]
    if edit is not None:
        lines += edit_notice(edit[0], edit[1], label=label, full_diff=edit_link)
    if errors:
        lines += ["The proposal cannot run yet. Fix these and add the label again:", ""]
        lines += [f"- {inert(e, one_line=True, max_len=1000)}" for e in errors[:MAX_ERRORS_SHOWN]]
        if len(errors) > MAX_ERRORS_SHOWN:  # said, never cut silently by the size limit
            lines.append(f"- **{len(errors) - MAX_ERRORS_SHOWN:,} more problem(s) not shown "
                         "here**; `rsi spec check` on the proposal lists them all")
        lines += ["", "The issue form (`.github/ISSUE_TEMPLATE/rsi-proposal.yml`) lists every "
                  "section; `rsi spec check` validates a proposal locally.", ""]
    if summary:
        lines += ["**Task**", "", summary, ""]
    if proposal is not None:
        lines += [f"Proposal digest `{proposal_digest(proposal)}` (the issue body a writer "
                  "approved; this task runs exactly it)", ""]
    if b0 or bk:
        lines += [f"B0 `{short_sha(b0)}` · Bk `{short_sha(bk)}`", ""]
    if budget is not None or rounds_done:
        lines += [f"Rounds: {rounds_done}" + (f" of {budget}" if budget is not None else ""), ""]
    if usage:  # rsi-agents: the agent's model usage and the task's spending budget
        lines += [usage_line(usage), ""]
    cands = list(candidates)
    if cands:
        lines += ["| # | verdict | hypothesis | PR |", "| --- | --- | --- | --- |"]
        for c in cands:
            style = decision_style(c.decision)
            pr = f"#{c.pr_number}" if c.pr_number else "—"
            if c.state in (CandidateState.MERGED, CandidateState.CLOSED, CandidateState.CONFLICT):
                pr += f" ({c.state})"
            hyp = inert(c.hypothesis or "", one_line=True, max_len=120)
            lines.append(f"| {c.n} | {style.emoji} {style.words} | {hyp} | {pr} |")
        lines.append("")
    lines.append(command_table.footer())
    return with_marker("\n".join(lines), STATUS)


def usage_line(usage: dict[str, Any]) -> str:
    """``Agent usage: 3 model calls · 3,600 tokens in / 120 out of 10,000 · $0.0082 of $1.00 ·
    41 s`` from the loop state's ``spent`` and ``budget`` (numbers only, formatted here)."""
    spent, limits = usage.get("spent") or {}, usage.get("budget") or {}

    def num(key: str) -> float:
        v = spent.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0

    max_tokens, max_cost = limits.get("max_tokens"), limits.get("max_cost_usd")
    tokens = f"{int(num('tokens_in')):,} tokens in / {int(num('tokens_out')):,} out"
    if isinstance(max_tokens, int):
        tokens += f" of {max_tokens:,}"
    cost = f"${num('cost_usd'):.4f}" + (f" of ${float(max_cost):.2f}" if isinstance(max_cost, (int, float)) else "")
    return f"Agent usage: {int(num('calls'))} model calls · {tokens} · {cost} · {num('wall_s'):.0f} s"


# --------------------------------------------------------------------- replies


def help_text(label: str = "rsi") -> str:
    return command_table.help_text(label)


DIGEST_CHARS = 32
"""Hex characters of a proposal's digest shown and required (128 bits: no two
texts an author could craft share one)."""
EDIT_DIFF_LINES = 150
EDIT_DIFF_CHARS = 12_000
"""How much of a held edit's diff the status comment shows; the rest is
counted and linked, never silently cut."""


def proposal_digest(text: str | None) -> str:
    """The digest of a proposal's exact text (what ``/rsi rerun <digest>`` binds)."""
    import hashlib

    return hashlib.sha256((text or "").encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]


def digest_matches(text: str | None, digest: str) -> bool:
    """Whether ``digest`` (at least :data:`DIGEST_CHARS` hex characters, up to the
    whole SHA-256) is ``text``'s."""
    import hashlib

    full = hashlib.sha256((text or "").encode("utf-8", "surrogatepass")).hexdigest()
    return len(digest) >= DIGEST_CHARS and full.startswith(digest.lower())


def proposal_diff(approved: str, edited: str) -> list[str]:
    """The unified diff of an edit, every line of it."""
    import difflib

    return list(difflib.unified_diff(approved.splitlines(), edited.splitlines(),
                                     "proposal as labeled", "issue as edited", lineterm="", n=1))


def edit_notice(approved: str, edited: str, *, label: str = "rsi", full_diff: str = "",
                max_lines: int = EDIT_DIFF_LINES, max_chars: int = EDIT_DIFF_CHARS
                ) -> list[str]:
    """Lines saying the issue was edited after the label, with the difference and
    the digest a writer approves. A diff past ``max_lines`` or ``max_chars`` is
    shown up to there, and the notice says how much is hidden and where the full
    diff is (``full_diff``: a link; else the issue's edit history)."""
    diff = proposal_diff(approved, edited)
    shown: list[str] = []
    used = 0
    for line in diff:
        if len(shown) >= max_lines or used + len(line) + 1 > max_chars:
            break
        shown.append(line)
        used += len(line) + 1
    lines = ["⚠️ **The issue was edited after the label.** The task runs the proposal as it "
             f"was when the label was added (digest `{proposal_digest(approved)}`); the edit "
             f"(digest `{proposal_digest(edited)}`) is not run. A person with write access who "
             "has read the edit can run exactly it by commenting "
             f"`/rsi rerun {proposal_digest(edited)}` on this issue (a later edit is held "
             f"again), or by adding the `{label}` label again. What changed:", "",
             fenced("\n".join(shown), info="diff"), ""]
    hidden = diff[len(shown):]
    if hidden:
        where = (f"the full diff: {full_diff}" if full_diff else
                 "read the whole edit in the issue's edit history before approving it")
        lines += [f"**{len(hidden):,} more line(s) of this diff "
                  f"({sum(len(h) + 1 for h in hidden):,} characters) are not shown here**; "
                  f"{where}.", ""]
    return lines


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
        lines += matrix_section(verdict)
    lines += ["This draft PR holds exactly one change. The verifier's full report is in the "
              "comment below and in the `rsi/verifier` check run.", "",
              "Merging it makes the merge commit the new baseline (Bk) for the next rounds; "
              "the bot never approves or merges."]
    if labeler:
        lines += ["", f"Review requested from @{labeler}, who started the task."]
    return "\n".join(lines)


def matrix_section(verdict: Verdict) -> list[str]:
    """The PR body's deployment matrix: in words where the gain holds and
    where it does not, then the cell table (``harness.report``); nothing
    without a matrix."""
    from harness.report import render_matrix_table

    table = render_matrix_table(verdict)
    if not table:
        return []
    return ["#### Where the gain holds", "", *table.splitlines()[2:], ""]


def conflict_note(merged_pr: int | None, detail: str) -> str:
    where = f" with #{merged_pr}" if merged_pr else ""
    return (f"⚠️ **This candidate conflicts{where}**: it no longer applies to the new Bk, so it "
            f"was not re-verified. Rebase it by hand or close it.\n\n{fenced(detail[-1500:])}")


def reverified_note(bk: str | None, merged_pr: int | None = None) -> str:
    why = f" after #{merged_pr} merged" if merged_pr else ""
    return f"🔁 Re-verified against Bk `{short_sha(bk)}`{why}."


# --------------------------------------------------------------------- watch after merge

WATCH = "watch"  # the merged PR's watch report (one per merge commit: ``watch:<sha>``)
REVERT_LABEL = "rsi:revert"
REVERT_LABEL_COLOR = "b60205"
REVERT_LABEL_TEXT = "rsi-bot: reverts a merged change whose gain did not reproduce"


def _interval_text(v: Verdict | None) -> tuple[str, str]:
    """(gain, interval) cells of a verdict's objective, in the better direction."""
    from harness.watch import gain_interval

    o = v.objective if v is not None else None
    if v is None or o is None or v.decision == "error":
        return "—", "—"
    gain = o.gain if o.gain is not None else (
        None if o.ratio is None else (o.ratio - 1 if o.direction == "higher" else 1 / o.ratio - 1))
    ci = gain_interval(o)
    return _pct(gain), ("—" if ci is None else f"[{_pct(ci.low)}, {_pct(ci.high)}]")


def _decision(v: Verdict | None) -> str:
    if v is None:
        return "—"
    style = decision_style(v.decision)
    return f"{style.emoji} {style.words}".strip()


def _guards_text(v: Verdict | None) -> str:
    if v is None or v.decision == "error" or not v.guards:
        return "—"
    failed = [g for g in v.guards if g.status == "fail"]
    if failed:
        return "❌ failed: " + ", ".join(inert(g.name, one_line=True, max_len=80) for g in failed)
    unclear = [g for g in v.guards if g.status == "unclear"]
    passed = sum(1 for g in v.guards if g.status == "pass")
    return f"{passed} passed" + (f", {len(unclear)} unclear" if unclear else "")


def watch_table(claim: Verdict | None, watched: WatchResult) -> str:
    """Claim (the PR's verdict) and watch (``harness.watch.WatchResult``) side by side."""
    v = watched.verdict
    cg, ci = _interval_text(claim)
    wg, wi = _interval_text(v)
    o = (claim.objective if claim is not None else None) or v.objective
    metric = inert(o.metric, one_line=True, max_len=60) if o is not None else "objective"

    def req(x: Verdict | None) -> str:
        n = x.settings.get("requests") if x is not None else None
        return "—" if n is None else inert(n, one_line=True, max_len=20)

    seed_words = f"`{watched.hidden_seed}` (fresh draw)"
    rows = [
        ("decision", _decision(claim), _decision(v)),
        (f"gain ({metric} vs Bk)", cg, wg),
        ("interval", ci, wi),
        ("guards", _guards_text(claim), _guards_text(v)),
        ("hidden input seed", "the runner's secret", seed_words),
        ("requests per run", req(claim),
         req(v) + (f" ({watched.requests_factor}x)" if watched.requests else "")),
        ("pairs", str(claim.pairs) if claim is not None else "—", str(v.pairs)),
        ("run-order seed", "—" if claim is None or claim.seed is None else f"`{claim.seed}`",
         "—" if v.seed is None else f"`{v.seed}`"),
        ("Bk → candidate",
         "—" if claim is None else f"`{short_sha(claim.shas.get('bk'))}` → "
                                   f"`{short_sha(claim.shas.get('candidate'))}`",
         f"`{short_sha(watched.parent_sha)}` → `{short_sha(watched.merge_sha)}` (merge)"),
    ]
    lines = ["| | claim (before the merge) | watch (after the merge) |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


def _reasons(reasons: Sequence[str]) -> list[str]:
    return [f"- {inert(r, one_line=True, max_len=400)}" for r in reasons]


def watch_comment(*, pr: int, claim: Verdict | None, watched: WatchResult, reasons: Sequence[str],
                  policy: str, revert_pr: int | None = None, revert_problem: str = "") -> str:
    """The comment on a merged bot PR whose claim did not hold after the merge:
    why, both reports side by side, what the bot did, the watch's full report."""
    lines = [f"🚨 **The watch after merge: #{pr}'s claim did not hold.** The merge commit "
             f"`{short_sha(watched.merge_sha)}` was measured again against its parent "
             f"`{short_sha(watched.parent_sha)}` with a fresh hidden-input draw and "
             f"{watched.requests_factor}x the requests:", "", *_reasons(reasons), "",
             watch_table(claim, watched), ""]
    if revert_pr is not None:
        lines.append(f"➡️ Opened #{revert_pr} to revert it (label `{REVERT_LABEL}`). "
                     "Merge it to undo the change, or close it to keep the change.")
    elif revert_problem:
        lines.append(f"⚠️ No revert PR: {inert(revert_problem, one_line=True, max_len=300)}")
    else:
        lines.append(f"No revert PR: this repository sets `[bot] on_failed_watch = \"{policy}\"`.")
    room = COMMENT_LIMIT - 4000 - sum(len(x) for x in lines)
    lines += ["", "<details><summary>The watch's full report</summary>", "",
              report_markdown(watched.verdict, max_chars=max(room, 2000)), "", "</details>"]
    return "\n".join(lines)


def revert_title(pr: int, title: str) -> str:
    return (f"Revert #{pr} (gain did not reproduce after merge): "
            + (inert(title, plain=True, max_len=160) or "rsi candidate"))


def revert_pr_body(*, pr: int, claim: Verdict | None, watched: WatchResult,
                   reasons: Sequence[str]) -> str:
    """The revert PR's body: what it undoes, and the evidence."""
    return "\n".join([
        f"Reverts #{pr} (merge commit `{short_sha(watched.merge_sha)}`, a real `git revert`).",
        "",
        "After the merge, rsi-bot's watch measured the merge commit again against its parent, "
        f"with a fresh hidden-input draw and {watched.requests_factor}x the requests, "
        "and the gain the PR claimed did not hold:",
        "", *_reasons(reasons), "",
        watch_table(claim, watched), "",
        f"The watch's full report is on #{pr}. The bot never merges: merge this PR to undo "
        "the change, or close it to keep it. (`[bot] on_failed_watch` in `.rsi/config.toml`: "
        "`revert-pr`, `comment` or `off`.)",
    ])
