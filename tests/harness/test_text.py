"""harness.text.inert: the one escaping function for untrusted text (issue 9)."""

from __future__ import annotations

import re

import pytest

from harness.text import WJ, fenced, inert


@pytest.mark.parametrize("raw, bad", [
    ("x`@org/team`", "@org"),
    ("hi @octocat", "@octocat"),
    ("cc @rsi-bot[bot]", "@rsi"),
])
def test_no_live_mentions(raw, bad):
    for kw in ({}, {"plain": True}, {"one_line": True}):
        out = inert(raw, **kw)
        assert bad not in out and "@" + WJ in out


def test_backticks_cannot_open_or_close_a_code_span():
    out = inert("x`@org/team`")
    assert re.fullmatch(r"x\\`@\u2060org/team\\`", out)
    assert "`" not in out.replace("\\`", "")


@pytest.mark.parametrize("raw", ["<img src=x onerror=alert(1)>", "</details><script>x</script>",
                                 "&lt;b&gt;"])
def test_no_html(raw):
    out = inert(raw)
    assert "<" not in out and ">" not in out.replace("&gt;", "")
    assert "&lt;" in out or "&amp;" in out
    assert "<" not in inert(raw, plain=True) and ">" not in inert(raw, plain=True)


@pytest.mark.parametrize("raw, gone", [
    ("[click](https://evil.example)", "](https://"),
    ("![x](http://e/x.png)", "http://"),
    ("go to www.evil.example now", "www.evil"),
    ("ftp://a.b/c", "ftp://"),
])
def test_no_links(raw, gone):
    for kw in ({}, {"plain": True}):
        assert gone not in inert(raw, **kw)


def test_no_references():
    out = inert("fixes #12, GH-3 and acme/target#4")
    assert "#12" not in out and "GH-3" not in out and "target#4" not in out


def test_tables_and_blocks_stay_text():
    cell = inert("a | b\n| --- |", one_line=True)
    assert "\n" not in cell and "|" not in cell.replace("\\|", "")
    block = inert("# title\n> quote\n- item\n1. first\n    code\n===")
    lines = block.splitlines()
    assert lines[0].startswith("\\#") and lines[1].startswith("&gt;")  # not a quote
    assert lines[2].startswith("\\-") and lines[3].startswith("1" + WJ)
    assert lines[4] == "code" and lines[5].startswith("\\=")


def test_readable_where_harmless():
    assert inert("latency_p95_s rose (2 cores), 1.05x") == "latency_p95_s rose (2 cores), 1.05x"
    assert inert("_under_ *star*") == "\\_under\\_ \\*star\\*"


def test_controls_and_bidi_are_removed_and_plain_is_one_line():
    out = inert("a\u202eb\x00c\u200bd\r\ne", plain=True)
    assert out == "abcd e"


def test_max_len_never_cuts_an_escape():
    out = inert("a" * 9 + "`" * 10, max_len=11)
    assert len(out) <= 11 and out.endswith("…") and not out[:-1].endswith("\\")
    assert inert("x" * 8 + "<<<", max_len=10).endswith("…")
    assert "&l…" not in inert("x" * 8 + "<<<", max_len=11)


def test_fenced_cannot_be_closed_from_inside():
    text = "a\n```\n@org/team\n````\n"
    block = fenced(text, info="diff; rm")
    fence = block.splitlines()[0]
    assert fence == "`````diffrm"
    assert block.endswith("\n`````") and text.rstrip("\n") in block
