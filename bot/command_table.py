"""The ``/rsi`` commands, in one table: name, arguments, who may run it, where,
and its help text. The parser (:func:`bot.handlers.commands.parse_commands`), the
help reply (:func:`help_text`) and the status comment's footer
(:func:`footer`) all read this table; :data:`bot.handlers.commands.COMMANDS`
binds each row to its handler, and refuses to load when a row has no handler
or a handler no row. A command not in the table gets the reply "unknown
command; /rsi help lists them".

This module sits low (no bot imports but the roles): the status comment, which
every job refreshes, renders the footer from it, below the handlers.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

WRITERS: tuple[str, ...] = ("write", "maintain", "admin")
"""The repository roles (GitHub's ``role_name``) that may run a command."""


class Args(StrEnum):
    """What a command takes after its name (parsed by the handler's parser)."""

    NONE = "none"  # nothing (anything written after the name is ignored)
    ROUNDS = "rounds"  # a whole number of rounds, 1..MAX_BUDGET
    DIGEST = "digest"  # optionally a proposal digest


class Where(StrEnum):
    """Where the status comment's footer lists a command."""

    ISSUE = "issue"
    PR = "pr"


@dataclass(frozen=True)
class CommandSpec:
    name: str
    help: str
    """The help reply's line (after ``/rsi <name> <usage>``)."""
    args: Args = Args.NONE
    usage: str = ""
    """How its argument is written in the help and the footer (``N``)."""
    who: tuple[str, ...] = WRITERS
    where: Where = Where.ISSUE
    needs_task: bool = True
    """False: it answers on any issue or PR (``help``)."""

    @property
    def shown(self) -> str:
        return f"/rsi {self.name}" + (f" {self.usage}" if self.usage else "")


TABLE: tuple[CommandSpec, ...] = (
    CommandSpec("rerun", "on a bot PR, re-verify its head against the current Bk; on the issue, "
                "every open candidate, or, when the issue was edited after the label, run the "
                "edit as it read when you commented (`/rsi rerun <digest>`: exactly the text "
                "with the digest the status comment shows)", args=Args.DIGEST, where=Where.PR),
    CommandSpec("status", "refresh the status comment"),
    CommandSpec("stop", "pause the rounds"),
    CommandSpec("resume", "continue the rounds"),
    CommandSpec("budget", "set the number of rounds to N", args=Args.ROUNDS, usage="N"),
    CommandSpec("rebaseline", "measure the default branch as the new Bk and re-verify open "
                "candidates"),
    CommandSpec("help", "this text", needs_task=False),
)

SPECS: dict[str, CommandSpec] = {c.name: c for c in TABLE}
NAMES: tuple[str, ...] = tuple(SPECS)


def help_text(label: str = "rsi") -> str:
    """The reply to ``/rsi help`` (and to a bare ``/rsi``)."""
    return "\n".join([
        "**rsi-bot commands** (one per line, at the start of the line; people with "
        f"{', '.join(WRITERS[:-1])} or {WRITERS[-1]} access):", "",
        f"- add the `{label}` label to a proposal issue: start a task (a newer label supersedes)",
        *(f"- `{c.shown}`: {c.help}" for c in TABLE),
    ])


def footer() -> str:
    """The status comment's last line: the commands, and those for a PR."""
    on_issue = ", ".join(f"`{c.shown}`" for c in TABLE if c.where == Where.ISSUE)
    on_pr = ", ".join(f"`{c.shown}`" for c in TABLE if c.where == Where.PR)
    return f"_Commands: {on_issue}" + (f"; on a PR: {on_pr}" if on_pr else "") + "._"
