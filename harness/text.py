"""Make untrusted text inert before GitHub shows it: one escaping function.

Everything an agent, a proposal, a commenter, a benchmark or a verifier reason
says is untrusted. Wherever such text lands (PR titles and bodies, comments,
check run titles and summaries, commit subjects) it goes through
:func:`inert` first, so that it has:

* no live mentions: ``@user`` / ``@org/team`` get a word joiner after the
  ``@`` (GitHub neither links nor notifies);
* no issue or PR references: ``#12``, ``GH-12``, ``owner/repo#12`` are broken
  the same way (no cross-reference spam);
* no links: ``scheme://`` and ``www.`` are broken (no autolink), and in
  Markdown ``[``, ``]``, ``(``, ``)`` and ``!`` are backslash-escaped;
* no HTML: ``<``, ``>`` and ``&`` become entities in Markdown, look-alike
  angle quotes in plain text;
* no breaking out of code spans, tables, quotes or headings: every Markdown
  punctuation character is backslash-escaped (backticks included), so the
  text cannot open or close a code span, a ``|`` cannot end a table cell, and
  a line cannot start a heading, list, quote or fence.

Modes: ``plain=True`` for places GitHub shows as plain text (PR titles, check
run titles, commit subjects: no Markdown escapes there, which would show);
``one_line=True`` folds line breaks into spaces (titles, table cells). Control
characters (except newline and tab in multi-line Markdown) and bidirectional
overrides are removed. ``max_len`` cuts the result, never in the middle of an
escape. Never put untrusted text inside a code span or fence yourself:
:func:`inert` output is meant for normal Markdown text.

Pure and dependency-free; used by ``bot/`` (renderers) and ``harness/``
(commit subjects).
"""

from __future__ import annotations

import re

WJ = "\u2060"  # WORD JOINER: invisible, breaks mentions, references and autolinks

# Markdown punctuation that opens or closes inline syntax anywhere in a line
# (code spans, emphasis, links and images, table cells, strikethrough, math).
# Parentheses alone cannot make a link once brackets are escaped.
_MD_PUNCT = set("\\`*[]|~$")
# ``_`` opens emphasis only at a word's edge (GFM): snake_case stays readable
_UNDERSCORE_RX = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
# Characters that start a block (heading, list, quote, setext rule, ordered list)
# when they open a line.
_LINE_START_RX = re.compile(r"(?m)^([#>+=-]|\d+(?=[.)](?:\s|$)))")
_HTML = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}
_PLAIN_HTML = {"<": "\u2039", ">": "\u203a"}  # single angle quotation marks
# C0/C1 controls, zero-width and bidi controls (Trojan Source), except \n \t
_CONTROL_RX = re.compile(
    "[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")
_MENTION_RX = re.compile(r"@(?=[A-Za-z0-9_-])")
_REF_RX = re.compile(r"(#|\bGH-|\bgh-)(?=\d)")
_URL_RX = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):(?=//)")
_WWW_RX = re.compile(r"\b(www)\.", re.IGNORECASE)


def inert(text: object, *, plain: bool = False, one_line: bool = False,
          max_len: int | None = None) -> str:
    """``text`` made safe to show on GitHub (see the module docstring)."""
    s = "" if text is None else str(text)
    s = s.replace("\r\n", "\n").replace("\r", "\n")
    if one_line or plain:
        s = " ".join(part.strip() for part in s.split("\n") if part.strip())
    s = _CONTROL_RX.sub("", s.replace("\t", " ") if (one_line or plain) else s)
    # break what GitHub would link (before escaping, on the raw characters)
    s = _MENTION_RX.sub("@" + WJ, s)
    s = _REF_RX.sub(lambda m: m.group(1) + WJ, s)
    s = _URL_RX.sub(lambda m: m.group(1) + ":" + WJ, s)
    s = _WWW_RX.sub(lambda m: m.group(1) + WJ + ".", s)
    s = s.replace("](", "]" + WJ + "(")  # never a link's shape, escaped or not
    out: list[str] = []
    for ch in s:
        if plain:
            out.append(_PLAIN_HTML.get(ch, ch))
        elif ch in _HTML:
            out.append(_HTML[ch])
        elif ch in _MD_PUNCT:
            out.append("\\" + ch)
        else:
            out.append(ch)
    if not plain:
        # a line that starts with spaces is an indented code block or a
        # continuation; keep the text as text
        out_s = re.sub(r"(?m)^[ \t]+", "", "".join(out))
        out_s = _UNDERSCORE_RX.sub(r"\\_", out_s)
        if not one_line:
            out_s = _LINE_START_RX.sub(lambda m: _escape_start(m.group(1)), out_s)
        out = [out_s]
    return _cut("".join(out), max_len)


def _escape_start(tok: str) -> str:
    if tok.isdigit():
        return tok + WJ  # "1." / "1)" no longer starts an ordered list
    return "\\" + tok


def _cut(s: str, max_len: int | None) -> str:
    if max_len is None or len(s) <= max_len:
        return s
    cut = s[: max(0, max_len - 1)]
    # never end on a lone backslash, a half entity or a dangling word joiner
    cut = re.sub(r"(\\+)$", lambda m: m.group(1)[: len(m.group(1)) // 2 * 2], cut)
    cut = re.sub(r"&[a-z]{0,3}$", "", cut)
    return cut + "…"


def fenced(text: object, *, info: str = "") -> str:
    """A fenced code block holding ``text`` verbatim (mentions, links and HTML
    are inert inside one): the fence is longer than any backtick run in the
    text, so the text cannot close it. Control characters are removed."""
    s = _CONTROL_RX.sub("", ("" if text is None else str(text)).replace("\r\n", "\n"))
    longest = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * max(3, longest + 1)
    info = re.sub(r"[^A-Za-z0-9_+-]", "", info)
    return f"{fence}{info}\n{s}\n{fence}"
