"""Command parsing: a table of comment bodies and what they mean."""

import pytest

from bot.handlers.commands import Command, parse_commands


def names(body):
    return [(c.name, c.args, c.error is not None) for c in parse_commands(body)]


@pytest.mark.parametrize("body, expected", [
    ("/rsi rerun", [("rerun", (), False)]),
    ("/rsi status", [("status", (), False)]),
    ("/rsi stop\n/rsi resume", [("stop", (), False), ("resume", (), False)]),
    ("/rsi budget 12", [("budget", ("12",), False)]),
    ("/rsi rebaseline", [("rebaseline", (), False)]),
    ("/rsi help", [("help", (), False)]),
    ("/rsi", [("help", (), False)]),
    ("/RSI RERUN", []),  # the prefix is case-sensitive, like GitHub's slash commands
    ("/rsi RERUN", [("rerun", (), False)]),
    ("   /rsi rerun", [("rerun", (), False)]),  # up to 3 spaces: still a paragraph
    ("/rsi rerun please, thanks", [("rerun", (), False)]),
    # a digest binds the rerun to one text: 32 hex characters at least (a prefix
    # an author could collide on is refused, not taken as a filler word)
    ("/rsi rerun " + "A1" * 16, [("rerun", ("a1" * 16,), False)]),
    ("/rsi rerun `sha256:" + "0f" * 32 + "`", [("rerun", ("0f" * 32,), False)]),
    ("/rsi rerun deadbeef12", [("rerun", ("deadbeef12",), True)]),
    ("Looks good.\r\n/rsi rerun\r\nthanks", [("rerun", (), False)]),
    # not line-anchored
    ("please /rsi rerun", []),
    ("`/rsi rerun`", []),
    ("/rsirerun", []),
    ("/rsi-rerun", []),
    # code blocks
    ("```\n/rsi rerun\n```", []),
    ("```bash\n/rsi stop\n```\n/rsi status", [("status", (), False)]),
    ("~~~\n/rsi stop\n~~~", []),
    ("````\n```\n/rsi stop\n```\n````", []),  # a longer fence holds a shorter one
    ("```\nunclosed\n/rsi stop", []),
    ("    /rsi rerun", []),  # indented code block
    ("\t/rsi rerun", []),
    # quotes
    ("> /rsi rerun", []),
    (">/rsi stop\n/rsi status", []),  # a lazy continuation line: GitHub shows it quoted
    (">/rsi stop\n\n/rsi status", [("status", (), False)]),
    ("  > /rsi stop", []),
    ("> quoted\n>\n> /rsi stop", []),
    ("- a list item\n\n/rsi status", [("status", (), False)]),
    # HTML comments
    ("<!-- /rsi rerun -->", []),
    ("<!--\n/rsi stop\n-->\n/rsi status", [("status", (), False)]),
    ("<!-- unterminated\n/rsi stop", []),
    # malformed
    ("/rsi frobnicate", [("", ("frobnicate",), True)]),
    ("/rsi budget", [("budget", (), True)]),
    ("/rsi budget many", [("budget", ("many",), True)]),
    ("/rsi budget 0", [("budget", ("0",), True)]),
    ("/rsi budget 100000", [("budget", ("100000",), True)]),
    ("/rsi budget -3", [("budget", ("-3",), True)]),
    ("", []),
    (None, []),
])
def test_parse(body, expected):
    assert names(body) == expected


def test_budget_value_and_text():
    (cmd,) = parse_commands("/rsi budget 007")
    assert cmd.budget == 7 and cmd.text == "/rsi budget 007"
    assert Command("rerun").budget is None


def test_at_most_ten_commands():
    assert len(parse_commands("\n".join(["/rsi status"] * 50))) == 10


def test_inline_backticks_do_not_open_a_fence():
    assert names("```not a fence``` \n/rsi status") == [("status", (), False)]
