"""The one small interface every agent implements, and the host's safe file IO.

An agent gets a fresh plain export of Bk (``worktree``, no ``.git``) and an
:class:`AgentContext`; it edits that tree in place and returns an
:class:`AgentOutcome` with its one-line hypothesis. The harness exports the
tree back as regular files, commits it in a host-owned index, checks the
committed diff with the edit policy and has the verifier judge it; the agent
never sees the verdict except through the ledger digest in the next round's
TASK.md.

Files: ``io_dir`` is the HOST's (TASK.md, agent.log; never mounted writable
into a container); ``scratch_dir`` is the agent's own writable dir (its
hypothesis file). Whatever the host reads from an agent's dir goes through
:func:`read_agent_file` (no links, regular files only, size-capped, never
blocking on a FIFO); whatever it writes goes through :func:`write_host_file`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from harness.ledger import LedgerRecord, Usage
from harness.spec import TaskSpec


class AgentContext(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    spec: TaskSpec
    worktree: Path
    """Fresh worktree of Bk; the agent edits it in place."""
    round: int
    candidate: int
    bk_sha: str
    task_md: str
    """TASK.md for this round (written to ``task_file`` too)."""
    task_file: Path
    io_dir: Path
    """The host's own dir for this round (TASK.md, agent.log); never writable by the agent."""
    scratch_dir: Path | None = None
    """The agent's writable scratch dir (hypothesis file); default ``io_dir/out``."""
    ledger: list[LedgerRecord] = Field(default_factory=list)
    """Every ledger record of this repo (all tasks), oldest first."""
    state: dict[str, Any] = Field(default_factory=dict)
    """The agent's own persistent state (saved in the loop's state file)."""
    timeout_s: float = 900
    spent: Usage | None = None
    """What the task has used before this round (its budget's remainder goes to the model gateway)."""


class AgentOutcome(BaseModel):
    hypothesis: str = ""
    """One line: what was changed and why it should be faster."""
    done: bool = False
    """True when the agent has nothing more to try (the loop stops)."""
    error: str | None = None
    """The agent failed (crash, timeout): recorded as an ``error`` candidate."""
    log: str = ""
    """The agent's output, secrets redacted (kept in the state dir, not the ledger)."""
    change: dict[str, Any] | None = None
    """A structured description of the change, for the ledger (tuner)."""
    raw_patch: str | None = None
    """The patch text as given (replay): checked by the edit policy too."""
    duration_s: float = 0.0
    usage: Usage | None = None
    """Model calls and tokens of this run: the model gateway's meter, else what the agent reports."""
    withheld: bool = False
    """The agent's tree is not taken (its output carried a secret): nothing is committed or judged."""


@runtime_checkable
class Agent(Protocol):
    name: str

    def run(self, ctx: AgentContext) -> AgentOutcome: ...


class UnsafeFile(OSError):
    """An agent-written path the host refuses to read (a link, a FIFO, too big)."""


def read_agent_file(directory: Path, name: str, *, max_bytes: int = 64 * 1024) -> str | None:
    """The text of ``directory/name`` written by an agent, or None when there is
    none. Neither the directory nor the file may be a symlink; only a regular
    file is read (a FIFO or device is never opened for blocking reads); at most
    ``max_bytes`` are read. Raises :class:`UnsafeFile` for anything else."""
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"read_agent_file takes a plain file name, not {name!r}")
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UnsafeFile(f"{directory}: not a plain directory ({exc.strerror})") from None
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UnsafeFile(f"{name}: refused ({exc.strerror}; a symlink?)") from None
    finally:
        os.close(dfd)
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(f"{name}: not a regular file")
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UnsafeFile(f"{name}: larger than {max_bytes} bytes")
    return data.decode("utf-8", errors="replace")


def write_host_file(path: Path, text: str, mode: int = 0o600) -> None:
    """Write a host file atomically (temp file + rename in the same host-owned
    dir): an existing symlink at ``path`` is replaced, never followed."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def host_dir(path: Path) -> Path:
    """Create (or check) a host-only dir (mode 0700) that is not a symlink."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UnsafeFile(f"{path}: expected a host-owned directory")
    os.chmod(path, 0o700)
    return path
