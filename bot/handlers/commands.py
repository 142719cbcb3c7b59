"""``/rsi ...`` comment commands (``issue_comment.created``).

A command is a line of a paragraph that starts with ``/rsi`` (up to three
spaces of indentation, as in Markdown). The comment's block structure comes
from a CommonMark parser (markdown-it-py), as GitHub renders it: lines inside
fenced code blocks (```` ``` ```` or ``~~~``), indented code blocks (four
spaces or a tab), ``>`` quotes (lazy continuation lines included) and HTML
comments do not count. ``/rsi rerun`` on an issue whose body was edited
after the label runs the edit the writer approved, bound when the comment was
made: ``/rsi rerun <digest>`` the text with that digest (the status comment
shows it), plain ``/rsi rerun`` the issue body in the comment event's payload
(the issue as it read when the comment was made), never the body as it reads
when the handler gets to it; an edit after that is held as before.
The commenter needs write, maintain or admin
(``role_name``); bots and the bot itself are ignored; a refusal says why.
Commands are acknowledged with a reaction (+1 done, confused refused).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from bot import checks, obs, render, replies
from bot.command_table import SPECS, Args, CommandSpec
from bot.context import TRUSTED_ROLES, Context, sender_of, task_lane
from bot.payloads import RebaselinePayload, ReverifyPayload, RunTaskPayload
from bot.status import refresh_status, task_usage
from bot.store import Task
from bot.vocab import ACTIVE, DEAD_ENDS, TASK_STATE_WORDS, CandidateState, TaskState

EVENTS = ("issue_comment.created",)

MAX_BUDGET = 1000
MAX_COMMANDS = 10

_CMD_RX = re.compile(r"^ {0,3}/rsi(?=\s|$)(.*)$")
_DIGEST_RX = re.compile(r"^`?(?:sha256:)?([0-9a-fA-F]{7,64})`?$")
_HTML_COMMENT_RX = re.compile(r"<!--.*?(-->|\Z)", re.S)


@dataclass(frozen=True)
class Command:
    name: str  # a name in bot.command_table.TABLE, or "" for an unknown command
    args: tuple[str, ...] = ()
    error: str | None = None  # set when the command is malformed
    text: str = ""  # the line as written

    @property
    def budget(self) -> int | None:
        return int(self.args[0]) if self.name == "budget" and not self.error else None


def parse_commands(body: str | None) -> list[Command]:
    """The commands in a comment, in order (pure; see the module docstring)."""
    if not body:
        return []
    text = _HTML_COMMENT_RX.sub("", body.replace("\r\n", "\n").replace("\r", "\n"))
    out: list[Command] = []
    for line in _paragraph_lines(text):
        cm = _CMD_RX.match(line)
        if not cm:
            continue
        out.append(_command(cm.group(1).split(), line.strip()))
        if len(out) >= MAX_COMMANDS:
            break
    return out


def _paragraph_lines(text: str):
    """Source lines of the paragraphs a reader sees as text: CommonMark's block
    structure (markdown-it-py), so code blocks, fences and quotes (with their
    lazy continuation lines, as GitHub renders them) are left out."""
    from markdown_it import MarkdownIt

    lines = text.split("\n")
    quoted = 0
    for tok in MarkdownIt("commonmark").parse(text):
        if tok.type == "blockquote_open":
            quoted += 1
        elif tok.type == "blockquote_close":
            quoted -= 1
        elif tok.type == "paragraph_open" and not quoted and tok.map:
            yield from lines[tok.map[0]:tok.map[1]]


def _command(words: list[str], text: str) -> Command:
    if not words:
        return Command("help", (), None, text)
    name, args = words[0].lower(), tuple(words[1:])
    spec = SPECS.get(name)
    if spec is None:
        return Command("", (words[0],), "unknown command; /rsi help lists them", text)
    return _ARGS[spec.args](name, args, text)


def _no_args(name: str, args: tuple[str, ...], text: str) -> Command:
    return Command(name, (), None, text)


def _rounds(name: str, args: tuple[str, ...], text: str) -> Command:
    if not args or not args[0].isdigit():
        return Command(name, args, f"/rsi {name} N needs a whole number of rounds", text)
    n = int(args[0])
    if not 1 <= n <= MAX_BUDGET:
        return Command(name, args, f"the budget must be between 1 and {MAX_BUDGET} rounds", text)
    return Command(name, (str(n),), None, text)


def _digest(name: str, args: tuple[str, ...], text: str) -> Command:
    m = _DIGEST_RX.match(args[0]) if args else None
    if m is None:
        return Command(name, (), None, text)
    digest = m.group(1).lower()
    if len(digest) < render.DIGEST_CHARS:
        return Command(name, (digest,), f"give the whole digest ({render.DIGEST_CHARS} "
                       "characters) the status comment shows", text)
    return Command(name, (digest,), None, text)


_ARGS: dict[Args, Callable[[str, tuple[str, ...], str], Command]] = {
    Args.NONE: _no_args, Args.ROUNDS: _rounds, Args.DIGEST: _digest}


# --------------------------------------------------------------------- handler


def handle(ctx: Context, event: Any) -> str:
    p = event.payload
    comment = p.get("comment") or {}
    issue = p.get("issue") or {}
    repo = (p.get("repository") or {}).get("full_name")
    user = (comment.get("user") or {}).get("login") or sender_of(p)[0]
    user_type = (comment.get("user") or {}).get("type") or sender_of(p)[1]
    if not repo or not issue.get("number"):
        return "ignored: no repository or issue"
    if user_type == "Bot" or user.endswith("[bot]") or ctx.is_us(user):
        return "ignored: bot"
    cmds = parse_commands(comment.get("body"))
    if not cmds:
        return "ignored: no command"
    number = int(issue["number"])
    comment_id = comment.get("id")
    role = ctx.gh.collaborator_role(repo, user)
    if any(role not in (SPECS[c.name].who if c.name in SPECS else TRUSTED_ROLES) for c in cmds):
        names = ", ".join(c.name or c.args[0] for c in cmds)
        replies.reply(ctx, repo, number, render.refusal(
            user, names, f"it needs write, maintain or admin access to {repo}, and you have "
            f"`{render.inert(role, plain=True)}`."), job=event.delivery_id, step="refusal")
        _react(ctx, repo, comment_id, "confused")
        return f"refused: {user} is {role}"
    is_pr = bool(issue.get("pull_request"))
    results = []
    ok = True
    for i, cmd in enumerate(cmds, 1):
        if cmd.error:
            replies.reply(ctx, repo, number, render.refusal(user, cmd.text.removeprefix("/rsi ")
                                                            or "", cmd.error),
                          job=event.delivery_id, step=f"cmd{i}")
            ok = False
            results.append(f"{cmd.name or cmd.args[0]}: refused ({cmd.error})")
            continue
        done, message = _run(ctx, cmd, repo=repo, number=number, is_pr=is_pr, user=user,
                             delivery=event.delivery_id, seen=issue.get("body"))
        ok &= done
        if message:
            replies.reply(ctx, repo, number, render.ack(user, message) if done else
                          render.refusal(user, cmd.name, message),
                          job=event.delivery_id, step=f"cmd{i}")
        results.append(f"{cmd.name}: {'done' if done else 'refused'}")
    _react(ctx, repo, comment_id, "+1" if ok else "confused")
    return "; ".join(results)


def _approved_edit(task: Task, digest: str | None, seen: str | None
                   ) -> tuple[str | None, str | None]:
    """What ``/rsi rerun`` on the issue approves: (the edit to run, or None to
    re-verify the candidates; a refusal). With a digest, the text with that
    digest: the issue as the writer commented on it, or the edit held now. Plain,
    the issue as the writer commented on it (``seen``, the event's copy), when
    it differs from the proposal that runs. Never the body as it reads now."""
    approved = task.proposal or ""
    if digest:
        for text in (seen, task.edited_proposal):
            if text is not None and render.digest_matches(text, digest):
                return (text if text != approved else None), None
        if render.digest_matches(approved, digest):
            return None, None
        return None, (f"`{digest}` is not the digest of the proposal that runs nor of the issue "
                      "as you commented on it; the issue was edited again. Read the edit in the "
                      "status comment and comment `/rsi rerun` with the digest it shows")
    if seen is None:
        return None, ("this comment does not say which text of the issue it approves; comment "
                      "`/rsi rerun` with the digest the status comment shows"
                      ) if task.edited_proposal is not None else None
    return (seen if seen != approved else None), None


def _react(ctx: Context, repo: str, comment_id: int | None, content: str) -> None:
    replies.react(ctx, repo, comment_id, content)


def _task_for(ctx: Context, repo: str, number: int, is_pr: bool) -> tuple[Task | None, Any]:
    """The task an issue or a bot PR belongs to, and the PR's candidate if any."""
    if is_pr:
        found = ctx.store.candidate_by_pr(repo, number)
        if found:
            return found
        return None, None
    return ctx.store.find_task(repo, number), None


@dataclass(frozen=True)
class Call:
    """One command being run: who asked where, and the task it is about."""

    ctx: Context
    cmd: Command
    repo: str
    number: int
    is_pr: bool
    user: str
    delivery: str
    seen: str | None
    """The issue body in the comment event (the text as it read when the writer commented)."""
    task: Task | None = None
    cand: Any = None

    @property
    def the_task(self) -> Task:
        assert self.task is not None  # rows with needs_task get one (_run)
        return self.task


Outcome = tuple[bool, str]
"""(done, message to reply, "" for none)."""


def _run(ctx: Context, cmd: Command, *, repo: str, number: int, is_pr: bool, user: str,
         delivery: str, seen: str | None = None) -> Outcome:
    """Run one parsed command through its row of :data:`COMMANDS`."""
    row = COMMANDS.get(cmd.name)
    if row is None:
        return False, "unknown command"
    call = Call(ctx, cmd, repo, number, is_pr, user, delivery, seen)
    if row.spec.needs_task:
        task, cand = _task_for(ctx, repo, number, is_pr)
        obs.bind_task(task.id if task is not None else None)
        if task is None:
            return False, ("this pull request is not an rsi candidate" if is_pr else
                           f"there is no rsi task on this issue; add the "
                           f"`{ctx.settings.trigger_label}` label to start one")
        call = replace(call, task=task, cand=cand)
    return row.handler(call)


def _help(c: Call) -> Outcome:
    return True, render.help_text(c.ctx.settings.trigger_label)


def _status(c: Call) -> Outcome:
    ctx, task = c.ctx, c.the_task
    refresh_status(ctx, task.id)
    t = ctx.store.task(task.id) or task
    return True, (f"status: {TASK_STATE_WORDS.get(t.state, t.state)}; rounds "
                  f"{t.rounds_done}" + (f" of {t.budget}" if t.budget else "") +
                  f". Details in the status comment on #{t.issue}.")


def _stop(c: Call) -> Outcome:
    ctx, task = c.ctx, c.the_task
    if task.state in DEAD_ENDS:
        return False, f"the task is {task.state}; there is nothing to stop"
    ctx.store.update_task(task.id, stop=True, state=TaskState.STOPPING
                          if task.state in ACTIVE else TaskState.STOPPED)
    cancelled = checks.cancel_task(ctx, task)
    refresh_status(ctx, task.id)
    return True, ("cancelled " + ", ".join(cancelled) + "." if cancelled else "")


def _resume(c: Call) -> Outcome:
    ctx, task = c.ctx, c.the_task
    if task.state in DEAD_ENDS:
        return False, (f"the task is {task.state}; fix the proposal and add the label again")
    ctx.store.update_task(task.id, stop=False, state=TaskState.QUEUED)
    ctx.store.enqueue_job(RunTaskPayload(task_id=task.id, generation=task.generation),
                          lane=task_lane(task.id), key=f"run:{task.id}:{task.generation}:{c.delivery}")
    refresh_status(ctx, task.id)
    return True, ""


def _budget(c: Call) -> Outcome:
    ctx, task, n = c.ctx, c.the_task, int(c.cmd.args[0])
    ctx.store.update_task(task.id, budget=n)
    if task.state == TaskState.FINISHED and n > task.rounds_done and not task.stop:
        ctx.store.update_task(task.id, state=TaskState.QUEUED)
        ctx.store.enqueue_job(RunTaskPayload(task_id=task.id, generation=task.generation),
                              lane=task_lane(task.id),
                              key=f"run:{task.id}:{task.generation}:{c.delivery}")
    refresh_status(ctx, task.id)
    used = task_usage(ctx, task)  # rsi-agents: what the rounds have spent so far
    return True, (f"budget: {n} rounds; {render.usage_line(used)}" if used else "")


def _rebaseline(c: Call) -> Outcome:
    task = c.the_task
    c.ctx.store.enqueue_job(RebaselinePayload(task_id=task.id), lane=task_lane(task.id),
                            key=f"rebaseline:{task.id}:{c.delivery}")
    return True, "rebaselining on the default branch; open candidates will be re-verified."


def _rerun(c: Call) -> Outcome:
    ctx, task = c.ctx, c.the_task
    edit, why = (_approved_edit(task, c.cmd.args[0] if c.cmd.args else None, c.seen)
                 if not c.is_pr else (None, None))
    if why:
        return False, why
    if edit is not None:
        from bot.handlers import labeled

        outcome = labeled.start(ctx, c.repo, c.number, body=edit,
                                title=f"#{c.number}", labeler=c.user,
                                installation_id=task.installation_id, trigger=c.delivery)
        return True, (f"running the edited proposal `{render.proposal_digest(edit)}`, approved "
                      "by you" + ("" if outcome.startswith("accepted") else
                                  " (it has problems: see the status comment)") + ".")
    cands = ([c.cand] if c.cand is not None
             else ctx.store.candidates(task.id, state=CandidateState.OPEN))
    if not cands:
        return False, "there is no open candidate to re-verify"
    for cand in cands:
        checks.queue_job(ctx, task, ReverifyPayload(task_id=task.id, n=cand.n, requested_by=c.user),
                         key=f"reverify:{task.id}:{cand.n}:{c.delivery}", head_sha=cand.sha,
                         n=cand.n)
    return True, ""


@dataclass(frozen=True)
class Row:
    """A row of the command table bound to its handler."""

    spec: CommandSpec
    handler: Callable[[Call], Outcome]


_HANDLERS: dict[str, Callable[[Call], Outcome]] = {
    "rerun": _rerun, "status": _status, "stop": _stop, "resume": _resume, "budget": _budget,
    "rebaseline": _rebaseline, "help": _help}


def _bind() -> dict[str, Row]:
    missing, extra = set(SPECS) - set(_HANDLERS), set(_HANDLERS) - set(SPECS)
    if missing or extra:
        raise RuntimeError(f"/rsi commands without a handler: {sorted(missing)}; handlers "
                           f"without a row in bot.command_table.TABLE: {sorted(extra)}")
    return {name: Row(spec, _HANDLERS[name]) for name, spec in SPECS.items()}


COMMANDS: dict[str, Row] = _bind()
"""The command table (:data:`bot.command_table.TABLE`), each row with its handler."""
