"""TASK.md: what an agent is told at the start of a round.

A pure function of the task spec, the ledger and the round. It states the
objective, the visible benchmark command (never the hidden inputs: the
verifier's ``[hidden]`` section is not read here), the guards, the edit policy
and a digest of the ledger: what was kept and by how much, what was rejected
and why (not to be tried again), and what is open for review.
"""

from __future__ import annotations

from collections.abc import Iterable

from harness.ledger import LedgerRecord
from harness.spec import TaskSpec


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{x * 100:+.1f}%"


def _guard_line(g: dict) -> str:
    metric = g.get("metric", "?")
    if "max_ratio" in g:
        bound = f"<= {g['max_ratio']:g}x"
    elif "min_ratio" in g:
        bound = f">= {g['min_ratio']:g}x"
    elif "max_delta" in g:
        bound = f"<= {g['max_delta']:+g}"
    elif "min_delta" in g:
        bound = f">= {g['min_delta']:+g}"
    else:
        bound = "(bound)"
    bench = f" (benchmark {g['benchmark']})" if g.get("benchmark") else ""
    return f"- `{metric}` {bound} the baseline{bench}"


def _quality_line(q: dict) -> str:
    kind, out = q.get("kind"), q.get("output")
    if kind == "wer":
        parts = []
        if "max" in q:
            parts.append(f"at most {q['max']:g}")
        if "max_delta" in q:
            parts.append(f"at most {q['max_delta']:+g} over the baseline's")
        return f"- word error rate of `{out}`: {' and '.join(parts) or 'bounded'}"
    if kind == "output_length":
        return f"- length of `{out}` within ±{q.get('max_change', 0.02):.0%} of the baseline's"
    return f"- `{out}` numerically close to the baseline's ({q.get('dtype') or 'dtype'} tolerance)"


def ledger_digest(records: Iterable[LedgerRecord], task_id: str, *, limit: int = 15) -> str:
    recs = [r for r in records if r.event == "candidate"]
    kept = [r for r in recs if r.status == "kept" or (r.decision == "accept" and r.status == "merged")]
    open_ = [r for r in recs if r.status == "open"]
    failed = [r for r in recs if r.decision not in ("accept", "review") and r.decision != "error"]
    errors = [r for r in recs if r.decision == "error"]
    lines: list[str] = []

    def who(r: LedgerRecord) -> str:
        tag = f"{r.task}#{r.candidate}" if r.task != task_id else f"#{r.candidate}"
        return f"{tag} \"{r.hypothesis or '(no hypothesis)'}\""

    lines.append("### Kept (already in the baseline)")
    if kept:
        for r in kept[-limit:]:
            ci = (
                f" [{_pct(r.ratio_low - 1)}, {_pct(r.ratio_high - 1)}]"
                if r.ratio_low is not None and r.ratio_high is not None
                else ""
            )
            lines.append(f"- {who(r)}: {r.objective_metric or 'objective'} {_pct(r.gain)}{ci}")
    else:
        lines.append("- nothing yet")
    if open_:
        lines.append("")
        lines.append("### Open for review (do not repeat these)")
        for r in open_[-limit:]:
            lines.append(f"- {who(r)} on `{r.branch}`: {_pct(r.gain)}")
    lines.append("")
    lines.append("### Rejected: do not try these again")
    if failed:
        for r in failed[-limit:]:
            lines.append(f"- {who(r)}: {r.decision}: {r.reason}")
    else:
        lines.append("- nothing yet")
    if errors:
        lines.append("")
        lines.append("### Failed to run (infrastructure or a crash; fixing the cause may help)")
        for r in errors[-5:]:
            lines.append(f"- {who(r)}: {r.reason}")
    return "\n".join(lines)


def write_task_md(
    spec: TaskSpec,
    records: Iterable[LedgerRecord],
    *,
    round: int,
    bk_sha: str,
    workdir: str = ".",
    hypothesis_file: str = "$RSI_HYPOTHESIS_FILE",
) -> str:
    obj = spec.objective
    bench = spec.benchmark
    directions = {**bench.get("metrics", {}), **bench.get("samples", {})}
    metric = obj.get("metric", "?")
    direction = directions.get(metric, "higher" if "throughput" in metric else "lower")
    lines = [
        f"# Task {spec.task_id}: make `{spec.benchmark_name}` faster",
        "",
        f"Round {round}. You work on a fresh copy of the current baseline (Bk = `{bk_sha[:12]}`) in `{workdir}`.",
        "",
        "## Objective",
        "",
        (
            f"Improve `{metric}` ({direction} is better) of the benchmark `{spec.benchmark_name}` "
            f"by at least {spec.min_gain:.1%} over the baseline."
        ),
        "An independent verifier measures your change against the baseline in alternating runs, on inputs",
        "you do not see; gains it cannot reproduce with confidence are not kept.",
        "",
        "## Benchmark you may run",
        "",
        "```sh",
        f"RSI_RESULT=/tmp/result.json {bench.get('command', '?')}",
        "```",
        "",
        "It writes its result as JSON to `$RSI_RESULT`.",
    ]
    if bench.get("setup"):
        lines += ["", f"Setup (once per checkout): `{bench['setup']}`"]
    if bench.get("settings"):
        fixed = ", ".join(f"{k}={v}" for k, v in bench["settings"].items())
        lines += ["", f"Fixed settings (recorded and enforced; do not change them): {fixed}."]
    lines += ["", "## Guards (a candidate that breaks one is rejected)", ""]
    lines += [_guard_line(g) for g in spec.guards]
    lines += [_quality_line(q) for q in spec.quality]
    lines += [
        "- no failed requests; outputs must keep their length",
        "- guards are checked against the current baseline and against the task's first baseline (B0)",
    ]
    pol = spec.policy
    lines += [
        "",
        "## Edit policy",
        "",
        f"- You may edit: {', '.join(f'`{g}`' for g in pol.editable)}"
        + (f" (this task: only {', '.join(f'`{g}`' for g in pol.narrow)})" if pol.narrow else ""),
        f"- Never edit: {', '.join(f'`{g}`' for g in spec.protected_paths())}",
        f"- No binary files, symlinks or mode changes; at most {pol.max_changed_lines} changed lines.",
        "- One focused change per round: a change that mixes ideas cannot be judged.",
    ]
    if spec.knobs:
        lines += ["", "## Declared knobs", ""]
        for k in spec.knobs:
            where = f"`{k.key}` in `{k.file}`" if k.key else f"`{k.file}` (pattern `{k.pattern}`)"
            lines.append(f"- {k.name}: {where}, values {', '.join(str(v) for v in k.values)}")
    lines += ["", "## What earlier rounds found (the ledger)", "", ledger_digest(records, spec.task_id)]
    if spec.notes:
        lines += ["", "## Notes from the proposal", "", spec.notes.strip()]
    lines += [
        "",
        "## When you are done",
        "",
        "Leave your change as plain files in the working tree: only regular files are taken",
        "(no symlinks; `.git` directories, FIFOs and files the repo ignores are left out).",
        f"Write one line to `{hypothesis_file}` (or print a line `RSI-HYPOTHESIS: ...`):",
        "what you changed and why it should make the objective better.",
        "",
    ]
    return "\n".join(lines)
