"""Proposals: an issue body to overrides of the repo config.

A proposal is the issue a maintainer labels: GitHub issue-form sections
(``### Benchmark``, ``### Guards`` ...) and/or fenced ```` ```toml ```` blocks
(the TOML wins where both set a key). Sections and blocks are found in
CommonMark's block structure (markdown-it-py), so a heading or a block inside
a code fence or a quote is text, not structure. Each known section is read by
its handler in :data:`_FIELDS`; unknown sections become notes for the agent.
What the overrides may change is :mod:`harness.merge`'s business.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field


class Proposal(BaseModel):
    """A parsed proposal: overrides in the repo config's layout, free-text notes
    for the agent, and every problem found (each naming its section or block)."""

    overrides: dict[str, Any] = Field(default_factory=dict)
    notes: str = ""
    errors: list[str] = Field(default_factory=list)


_FENCE_RX = re.compile(r"^```+\s*toml\s*\n(.*?)^```+\s*$", re.MULTILINE | re.DOTALL)
_EMPTY = {"", "_no response_", "none", "n/a", "-"}

_HEADINGS: dict[str, str] = {
    "benchmark": "benchmark",
    "objective": "metric",
    "metric": "metric",
    "objective metric": "metric",
    "minimum gain": "min_gain",
    "min gain": "min_gain",
    "min_gain": "min_gain",
    "guards": "guards",
    "agent": "agent",
    "rounds": "rounds",
    "budget": "rounds",
    "budget (rounds)": "rounds",
    "editable paths": "editable",
    "editable": "editable",
    "runner": "runner",
    "runner profile": "runner",
    "configuration": "toml",
    "config": "toml",
    "toml": "toml",
    "overrides": "toml",
}


def _clean(value: str) -> str:
    v = _FENCE_RX.sub("", value).strip()
    v = re.sub(r"^```.*?$", "", v, flags=re.MULTILINE).strip()
    return "" if v.lower() in _EMPTY else v


def _parse_gain(text: str) -> float:
    t = text.strip().lower().replace(" ", "")
    m = re.match(r"^\+?([0-9]*\.?[0-9]+)(%|x)?$", t)
    if not m:
        raise ValueError(f"'{text}' is not a gain; write 2%, 0.02 or 1.1x")
    v = float(m.group(1))
    if m.group(2) == "%":
        return v / 100.0
    if m.group(2) == "x":
        return v - 1.0
    return v


_GUARD_RX = re.compile(
    r"^(?:(?P<bench>[A-Za-z_][\w-]*)[.:])?(?P<metric>[A-Za-z_]\w*)\s*"
    r"(?:(?P<op><=|≤|<|>=|≥|>)|(?P<kw>max_ratio|max_delta|min_ratio|min_delta)\s*=?)\s*"
    r"(?P<sign>\+)?(?P<num>[0-9]*\.?[0-9]+)\s*(?P<unit>x|%)?\s*(?P<req>\(required\)|required)?$"
)


def _parse_guard_line(line: str) -> dict[str, Any]:
    m = _GUARD_RX.match(line.strip())
    if not m:
        raise ValueError(
            f"'{line.strip()}' is not a guard; write e.g. 'latency_p95_s <= 1.05x', "
            "'peak_rss_mib <= +50' or 'latency_p95_s max_ratio = 1.05'"
        )
    num = float(m.group("num"))
    g: dict[str, Any] = {"metric": m.group("metric")}
    if m.group("bench"):
        g["benchmark"] = m.group("bench")
    unit, kw, op = m.group("unit"), m.group("kw"), m.group("op") or ""
    side = "min" if (kw or "").startswith("min") or op.startswith((">", "≥")) else "max"
    if (kw or "").endswith("delta") or (m.group("sign") and unit != "%"):
        g[f"{side}_delta"] = num
    elif unit == "%":
        g[f"{side}_ratio"] = round(1.0 + num / 100.0 * (1 if side == "max" else -1), 10)
    else:
        g[f"{side}_ratio"] = num
    if m.group("req"):
        g["required"] = True
    return g


def _markdown_blocks(body: str) -> tuple[list[tuple[str, str]], list[tuple[int, str]]]:
    """The ``### `` sections (heading, the text up to the next one) and the
    ```` ```toml ```` blocks of a proposal (each with the issue's line number of its
    first TOML line), from CommonMark's block structure
    (markdown-it-py): a heading or a TOML block inside a code fence or a quote
    is text, not structure."""
    from markdown_it import MarkdownIt

    lines = body.split("\n")
    tokens = MarkdownIt("commonmark").parse(body)
    heads: list[tuple[str, int, int]] = []  # (title, first line, line after it)
    fences: list[tuple[int, str]] = []
    quoted = 0
    for i, t in enumerate(tokens):
        if t.type == "blockquote_open":
            quoted += 1
        elif t.type == "blockquote_close":
            quoted -= 1
        elif quoted or not t.map:
            continue
        elif t.type == "heading_open" and t.tag == "h3":
            heads.append((tokens[i + 1].content.strip(), t.map[0], t.map[1]))
        elif t.type == "fence" and (t.info.strip().split() or [""])[0].lower() == "toml":
            fences.append((t.map[0] + 2, t.content))  # the line after the opening fence
    sections = []
    for j, (title, _, after) in enumerate(heads):
        end = heads[j + 1][1] if j + 1 < len(heads) else len(lines)
        sections.append((title, "\n".join(lines[after:end])))
    return sections, fences


# One handler per form field: the section's text -> the overrides it sets
# (raises ValueError with what to write instead).


def _benchmark(value: str) -> dict[str, Any]:
    return {"objective": {"benchmark": value.split()[0]}}


def _metric(value: str) -> dict[str, Any]:
    mm = re.match(r"^[`\s]*([A-Za-z_]\w*)", value)
    if not mm:
        raise ValueError(f"'{value}' does not start with a metric name")
    return {"objective": {"metric": mm.group(1)}}


def _min_gain(value: str) -> dict[str, Any]:
    return {"objective": {"min_gain": _parse_gain(value.split()[0])}}


def _guards(value: str) -> dict[str, Any]:
    guards = []
    for line in value.splitlines():
        line = re.sub(r"^\s*(?:[-*]|\d+\.)\s*(?:\[[ xX]\]\s*)?", "", line).strip().strip("`")
        if line and line.lower() not in _EMPTY:
            guards.append(_parse_guard_line(line))
    return {"guards": guards} if guards else {}


def _agent(value: str) -> dict[str, Any]:
    return {"agent": {"kind": value.split()[0].strip("`").lower()}}


def _rounds(value: str) -> dict[str, Any]:
    mm = re.search(r"\d+", value)
    if not mm:
        raise ValueError(f"'{value}' has no number of rounds")
    return {"agent": {"rounds": int(mm.group(0))}}


def _editable(value: str) -> dict[str, Any]:
    globs = [g.strip().strip("`") for g in re.split(r"[,\n]", value)]
    globs = [re.sub(r"^[-*]\s*", "", g) for g in globs if g.strip()]
    return {"policy": {"editable": [g for g in globs if g]}}


def _runner(value: str) -> dict[str, Any]:
    return {"runner": {"profile": value.split()[0].strip("`")}}


_FIELDS: dict[str, Callable[[str], dict[str, Any]]] = {
    "benchmark": _benchmark, "metric": _metric, "min_gain": _min_gain, "guards": _guards,
    "agent": _agent, "rounds": _rounds, "editable": _editable, "runner": _runner,
}
"""Form field (a value of :data:`_HEADINGS`) -> its handler. The field ``toml``
has none: its fenced block is read with the others."""


def _read_form(sections: list[tuple[str, str]]) -> tuple[dict[str, Any], list[str], list[str]]:
    """The issue-form sections -> (overrides, notes, errors)."""
    form: dict[str, Any] = {}
    notes: list[str] = []
    errors: list[str] = []
    for heading, raw in sections:
        key = _HEADINGS.get(heading.lower().rstrip(":"))
        value = _clean(raw)
        if key == "toml" or not value:
            continue
        if key is None:
            notes.append(f"{heading}:\n{value}")
            continue
        try:
            form = _deep_merge(form, _FIELDS[key](value))
        except ValueError as exc:
            errors.append(f"proposal section '### {heading}': {exc}")
    return form, notes, errors


MAX_DEPTH = 8
"""Deepest nesting of tables and arrays a proposal's TOML may have (its
settings are at most three deep: ``[[guards]]`` -> a guard -> a value)."""


def _depth(value: Any) -> int:
    """How deeply tables and arrays nest in ``value`` (iterative: a proposal
    controls the depth)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = list(v.values())
        if isinstance(v, list):
            if d + 1 > MAX_DEPTH:
                return d + 1
            deepest = max(deepest, d + 1)
            stack += [(x, d + 1) for x in v]
    return deepest


def _read_toml(fences: list[tuple[int, str]]) -> tuple[dict[str, Any], list[str]]:
    """The ```` ```toml ```` blocks, merged in order -> (overrides, errors).
    Every way a block can fail to parse is an error here, never an exception:
    invalid TOML, nesting too deep for the parser or for a proposal, a number
    too long to read."""
    over: dict[str, Any] = {}
    errors: list[str] = []
    for n, (line, block) in enumerate(fences, start=1):
        where = f"proposal toml block {n} (from line {line} of the issue)"
        try:
            data = tomllib.loads(block)
        except tomllib.TOMLDecodeError as exc:
            errors.append(f"{where}: not valid TOML: {exc}")
            continue
        except RecursionError:
            errors.append(f"{where}: arrays or inline tables nested more than {MAX_DEPTH} "
                          "deep; a proposal's settings are at most 3 deep (e.g. [[guards]] -> "
                          "max_ratio)")
            continue
        except ValueError as exc:  # e.g. an integer of more than 4300 digits
            errors.append(f"{where}: a value cannot be read ({str(exc)[:60]}...); write a "
                          "number of at most a few digits")
            continue
        if _depth(data) > MAX_DEPTH:
            errors.append(f"{where}: tables or arrays nested more than {MAX_DEPTH} deep; a "
                          "proposal's settings are at most 3 deep (e.g. [[guards]] -> "
                          "max_ratio)")
            continue
        over = _deep_merge(over, data)
    return over, errors


def parse_proposal(body: str | None) -> Proposal:
    """Read a proposal: GitHub issue-form sections (``### Benchmark`` ...) and/or
    fenced ```toml blocks (the TOML wins where both set a key)."""
    if not body or not body.strip():
        return Proposal()
    body = body.replace("\r\n", "\n")
    sections, fences = _markdown_blocks(body)
    form, notes, form_errors = _read_form(sections)
    toml_over, toml_errors = _read_toml(fences)
    if not sections and not fences:
        notes.append(body.strip())
    return Proposal(overrides=_deep_merge(form, toml_over), notes="\n\n".join(notes),
                    errors=form_errors + toml_errors)


def _deep_merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out
