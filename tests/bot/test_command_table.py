"""The /rsi commands are one table (bot.command_table.TABLE): the parser, the
handlers, the help reply and the status comment's footer all follow it."""

from __future__ import annotations

import re

import pytest

from bot import command_table, render
from bot.command_table import TABLE, Where
from bot.handlers import commands
from bot.handlers.commands import COMMANDS, parse_commands


def test_every_row_has_exactly_one_handler():
    assert list(COMMANDS) == [c.name for c in TABLE]
    assert all(COMMANDS[c.name].spec is c for c in TABLE)


def test_a_row_without_a_handler_refuses_to_load(monkeypatch):
    monkeypatch.setattr(commands, "SPECS", {**commands.SPECS, "fly": TABLE[0]})
    with pytest.raises(RuntimeError, match="without a handler: \\['fly'\\]"):
        commands._bind()


def test_the_parser_knows_exactly_the_table():
    for c in TABLE:
        [cmd] = parse_commands(f"/rsi {c.name} 3")
        assert cmd.name == c.name and cmd.error is None
    [cmd] = parse_commands("/rsi launch")
    assert (cmd.name, cmd.error) == ("", "unknown command; /rsi help lists them")


def test_help_lists_every_command_once():
    text = render.help_text("perf")
    assert "`perf` label" in text
    shown = re.findall(r"^- `(/rsi [^`]*)`:", text, re.M)
    assert shown == [c.shown for c in TABLE]
    assert "/rsi budget N" in shown


def test_the_status_footer_lists_every_command_once():
    body = render.status_comment(state="running")
    assert body.rstrip().endswith(command_table.footer())
    footer = command_table.footer()
    listed = re.findall(r"`(/rsi [^`]*)`", footer)
    assert sorted(listed) == sorted(c.shown for c in TABLE)
    pr_part = footer.split("on a PR:")[1]
    assert re.findall(r"`(/rsi [^`]*)`", pr_part) == [c.shown for c in TABLE
                                                       if c.where == Where.PR]


@pytest.fixture
def target(make_repo, fake_github, tmp_path):
    from tests.bot.fakeharness import target_tree

    repo = make_repo(target_tree(tmp_path / "seed"))
    fake_github.set_role(repo, "alice", "write")
    fake_github.set_role(repo, "rita", "read")
    return repo


def test_replies_through_the_handler(make_bot, fake_github, target):
    from tests.bot.fakeharness import FakeHarness

    bot = make_bot(FakeHarness())
    n = fake_github.open_issue(target, "Faster", "x", by="alice")
    d = bot.deliver(fake_github.comment(target, n, "/rsi launch\n\n/rsi help", by="alice"))
    assert bot.result_of(d) == "launch: refused (unknown command; /rsi help lists them); help: done"
    unknown, helped = [c.body for c in fake_github.comments(target, n)
                       if c.user.login == "rsi-bot[bot]"]
    # the same reply as before the table: the refusal with the command as written
    assert render.refusal("alice", "launch", "unknown command; /rsi help lists them") in unknown
    assert render.ack("alice", render.help_text("rsi")) in helped
    d = bot.deliver(fake_github.comment(target, n, "/rsi status", by="rita"))
    assert bot.result_of(d) == "refused: rita is read"  # who may run it: the table's roles
