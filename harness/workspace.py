"""Workspaces: plain exports of committed shas, the agent's tree, and the
candidate's way back into git.

The trust boundary (docs/architecture.md, rule 1) runs through this module:

* :func:`export_commit` writes the tree of a commit as plain files (blob bytes
  as committed, exec bits, symlinks as symlinks; submodules skipped) into a
  fresh directory: no ``.git``, no attributes or filters applied. Every
  verification runs on such fresh exports (:meth:`Workspace.exports`), never on
  a tree an agent touched.
* The agent edits a plain export of Bk handed to the sandbox's uid
  (:meth:`Workspace.agent_tree`). The host never runs git inside it.
* After the agent exits, :func:`export_tree` copies what it left into a fresh
  host-owned directory without following links: regular files (size-capped,
  exec bit kept), symlinks recorded as symlinks (the edit policy rejects them),
  every ``.git`` entry at any depth skipped, FIFOs, devices and sockets
  skipped and reported. :meth:`Workspace.commit_candidate` then stages that
  copy against Bk in a private index of the host repo (``git add -A``: files
  the repo ignores are listed and never committed), writes the tree, commits
  it on ``rsi/<task>/<n>`` and returns the diff of exactly that commit: what
  the edit policy judges is what is committed and what is verified.

The user's own worktree, index and checked-out branch are never touched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, Field

from harness.gitutil import HARDENING, GitError, bot_env, git, rev_parse
from harness.text import inert

SANDBOX_UID = 1000
SANDBOX_GID = 1000


def candidate_branch(task_id: str, n: int) -> str:
    return f"rsi/{task_id}/{n}"


class ExportLimits(BaseModel):
    """Caps on what the host copies out of an agent's tree."""

    max_file_bytes: int = 16 * 1024 * 1024
    max_total_bytes: int = 512 * 1024 * 1024
    max_entries: int = 100_000
    max_depth: int = 64


class TreeExport(BaseModel):
    """What :func:`export_tree` copied, and what it left behind (and why)."""

    files: int = 0
    bytes: int = 0
    entries: int = 0
    symlinks: list[str] = Field(default_factory=list)
    """Recorded as symlinks: the edit policy sees them (and rejects them)."""
    skipped_git: list[str] = Field(default_factory=list)
    """``.git`` entries (any depth): never exported."""
    skipped_special: list[str] = Field(default_factory=list)
    """FIFOs, devices, sockets: never opened, never exported."""
    too_large: list[str] = Field(default_factory=list)
    over_limits: list[str] = Field(default_factory=list)
    """Caps reached (entries, total bytes, depth): the export is incomplete."""

    def problems(self) -> list[str]:
        """Reasons the candidate cannot be taken as exported (a reject)."""
        out = [f"{p}: file larger than the export cap" for p in self.too_large]
        return out + list(self.over_limits)

    def notes(self) -> list[str]:
        """What was left out on purpose (reported, not a reject)."""
        out = [f"{p}: .git entry not exported" for p in self.skipped_git]
        return out + [f"{p}: not a regular file, not exported" for p in self.skipped_special]


class CandidateCommit(BaseModel):
    sha: str = ""
    """The candidate's commit ("" when the agent changed nothing)."""
    diff: str = ""
    """``git diff --binary base sha``: exactly the committed change."""
    ignored: list[str] = Field(default_factory=list)
    """Files the repo ignores: left out of the commit (so never verified)."""


# ------------------------------------------------------------ export_commit


def _git_popen(cwd: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["git", *HARDENING, *args], cwd=str(cwd), env=bot_env(),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )


def _tree_entries(repo: Path, sha: str) -> list[tuple[str, str, str]]:
    """(mode, oid, path) of every blob and gitlink of ``sha``'s tree."""
    raw = git(repo, "ls-tree", "-r", "-z", "--full-tree", sha, text=False)
    out = []
    for rec in raw.split(b"\0"):
        if not rec:
            continue
        meta, _, path = rec.partition(b"\t")
        mode, kind, oid = meta.decode().split()
        if kind in ("blob", "commit"):
            out.append((mode, oid, os.fsdecode(path)))
    return out


def _safe_parent(dest: Path, path: str, made: set[str]) -> bool:
    """Create the directories of ``path`` under ``dest``; False when a part of
    it is unsafe (``..``, ``.git``, absolute) or already a file or link."""
    parts = path.split("/")
    if path.startswith("/") or any(p in ("", ".", "..") or p.lower() == ".git" for p in parts):
        return False
    prefix = ""
    for part in parts[:-1]:
        prefix = f"{prefix}/{part}" if prefix else part
        if prefix in made:
            continue
        if os.path.lexists(dest / prefix):
            return False
        os.mkdir(dest / prefix, 0o755)
        made.add(prefix)
    return True


def _read_blobs(repo: Path, oids: list[str]) -> Iterator[bytes]:
    """The contents of ``oids``, in order, through one ``git cat-file --batch``."""
    proc = _git_popen(repo, "cat-file", "--batch")
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None  # PIPEs
    stdin, stdout, stderr = proc.stdin, proc.stdout, proc.stderr

    def feed() -> None:
        try:
            stdin.write("".join(o + "\n" for o in oids).encode())
        finally:
            stdin.close()

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        for oid in oids:
            header = stdout.readline().split()
            if len(header) != 3 or header[1] != b"blob":
                raise GitError(["cat-file", "--batch"], 128, f"unexpected object for {oid}: {header!r}")
            data = stdout.read(int(header[2]))
            stdout.read(1)
            yield data
    finally:
        writer.join(timeout=30)
        stdout.close()
        proc.wait(timeout=30)
        stderr.close()


def export_commit(repo: Path | str, sha: str, dest: Path | str) -> Path:
    """Write the tree of commit ``sha`` as plain files into ``dest`` (which
    must not exist). Blob bytes exactly as committed (no attributes, filters or
    eol conversion), ``100755`` files executable, symlinks as symlinks."""
    repo, dest = Path(repo), Path(dest)
    entries = _tree_entries(repo, sha)
    blobs = [e for e in entries if e[0] != "160000"]
    os.mkdir(dest, 0o755)
    made: set[str] = set()
    for mode, _oid, path in entries:
        if mode == "160000" and _safe_parent(dest, path, made):  # a submodule: left as an empty dir
            os.mkdir(dest / path, 0o755)
            made.add(path)
    for (mode, _oid, path), data in zip(blobs, _read_blobs(repo, [e[1] for e in blobs]), strict=True):
        if not _safe_parent(dest, path, made):
            continue
        target = dest / path
        if mode == "120000":
            os.symlink(os.fsdecode(data), target)
            continue
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755 if mode == "100755" else 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    return dest


# -------------------------------------------------------------- export_tree


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "fifo"), (stat.S_ISCHR, "char device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "special file"


def _copy_regular(src_fd: int, name: str, dst: Path, rel: str, rep: TreeExport, lim: ExportLimits) -> None:
    """Copy one file opened without following links, never blocking on a FIFO."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src_fd)
    except OSError as exc:
        rep.skipped_special.append(f"{rel} (cannot open: {exc.strerror})")
        return
    with os.fdopen(fd, "rb") as src:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            rep.skipped_special.append(f"{rel} ({_kind(st.st_mode)})")
            return
        data = src.read(lim.max_file_bytes + 1)
    if len(data) > lim.max_file_bytes:
        rep.too_large.append(rel)
        return
    if rep.bytes + len(data) > lim.max_total_bytes:
        rep.over_limits.append(f"the agent's tree exceeds {lim.max_total_bytes} bytes (at {rel})")
        return
    mode = 0o755 if st.st_mode & stat.S_IXUSR else 0o644
    out = os.open(dst / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(out, "wb") as fh:
        fh.write(data)
    os.chmod(dst / name, mode)  # the umask must not drop the exec bit the policy should see
    rep.files += 1
    rep.bytes += len(data)


def _walk(src_fd: int, dst: Path, rel: str, depth: int, rep: TreeExport, lim: ExportLimits) -> None:
    with os.scandir(src_fd) as it:
        names = sorted(e.name for e in it)
    for name in names:
        path = rel + name
        if name.lower() == ".git":
            rep.skipped_git.append(path)
            continue
        if rep.entries >= lim.max_entries:
            rep.over_limits.append(f"the agent's tree has more than {lim.max_entries} entries")
            return
        rep.entries += 1
        st = os.stat(name, dir_fd=src_fd, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(name, dir_fd=src_fd), dst / name)
            rep.symlinks.append(path)
        elif stat.S_ISDIR(st.st_mode):
            if depth >= lim.max_depth:
                rep.over_limits.append(f"{path}: deeper than {lim.max_depth} directories")
                continue
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src_fd)
            try:
                os.mkdir(dst / name, 0o755)
                _walk(fd, dst / name, path + "/", depth + 1, rep, lim)
            finally:
                os.close(fd)
        elif stat.S_ISREG(st.st_mode):
            _copy_regular(src_fd, name, dst, path, rep, lim)
        else:
            rep.skipped_special.append(f"{path} ({_kind(st.st_mode)})")


def export_tree(src: Path | str, dest: Path | str, limits: ExportLimits | None = None) -> TreeExport:
    """Copy an agent's tree ``src`` into a fresh host-owned ``dest`` (which must
    not exist) without following any link, and say what was left out."""
    lim = limits or ExportLimits()
    rep = TreeExport()
    os.mkdir(dest, 0o755)
    fd = os.open(src, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        _walk(fd, Path(dest), "", 0, rep, lim)
    finally:
        os.close(fd)
    return rep


def hand_to_sandbox(path: Path) -> None:
    """Give a tree to the sandbox's uid: chown when we are root, else open it
    to everyone (a rootless dev box). Links are never followed."""
    as_root = os.geteuid() == 0
    for dirpath, dirnames, filenames in os.walk(path):
        for name in [*dirnames, *filenames, ""]:
            p = os.path.join(dirpath, name) if name else dirpath
            if name and os.path.islink(p):
                if as_root:
                    os.lchown(p, SANDBOX_UID, SANDBOX_GID)
                continue
            if as_root:
                os.lchown(p, SANDBOX_UID, SANDBOX_GID)
            else:
                extra = 0o777 if os.path.isdir(p) else 0o666
                os.chmod(p, os.lstat(p).st_mode | extra)


# ---------------------------------------------------------------- Workspace


class Workspace:
    def __init__(self, repo: Path | str, root: Path | str):
        self.repo = Path(repo).resolve()
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self._git_dir: str | None = None

    @property
    def git_dir(self) -> str:
        if self._git_dir is None:
            self._git_dir = git(self.repo, "rev-parse", "--absolute-git-dir")
        return self._git_dir

    def path(self, name: str) -> Path:
        return self.root / name

    def _resolve(self, ref: str) -> str:
        sha = rev_parse(self.repo, ref)
        if sha is None:
            raise GitError(["rev-parse", ref], 128, f"unknown ref {ref}")
        return sha

    # -- plain exports ------------------------------------------------------
    def export(self, name: str, ref: str, *, for_sandbox: bool = False) -> Path:
        """A fresh plain export of ``ref`` at ``<root>/<name>`` (an old one is
        removed first); ``for_sandbox`` hands it to the sandbox's uid."""
        self.remove(name)
        path = export_commit(self.repo, self._resolve(ref), self.path(name))
        if for_sandbox:
            hand_to_sandbox(path)
        return path

    def agent_tree(self, name: str, ref: str) -> Path:
        """The tree an agent edits: a plain export of ``ref`` (no link to the
        host repo's ``.git``), owned by the sandbox's uid."""
        return self.export(name, ref, for_sandbox=True)

    @contextlib.contextmanager
    def exports(self, prefix: str, refs: dict[str, str | None], *, for_sandbox: bool = True) -> Iterator[dict[str, Path]]:
        """Fresh exports of ``refs`` (key -> sha; None skipped) for one
        verification, removed afterwards whatever happens."""
        made: dict[str, Path] = {}
        try:
            for key, ref in refs.items():
                if ref:
                    made[key] = self.export(f"{prefix}-{key}", ref, for_sandbox=for_sandbox)
            yield made
        finally:
            for key in made:
                self.remove(f"{prefix}-{key}")

    def remove(self, name: str) -> None:
        """Remove a plain directory (export, agent tree); links never followed."""
        path = self.path(name)
        if path.is_symlink():
            path.unlink()
        elif path.exists():
            shutil.rmtree(path, ignore_errors=True)

    # -- the candidate back into git ---------------------------------------
    def export_candidate(self, agent_dir: Path, name: str, limits: ExportLimits | None = None) -> tuple[Path, TreeExport]:
        """Copy the agent's tree into a fresh host-owned ``<root>/<name>``."""
        self.remove(name)
        dest = self.path(name)
        return dest, export_tree(agent_dir, dest, limits)

    def commit_candidate(self, tree_dir: Path, base: str, branch: str, hypothesis: str, body: str = "") -> CandidateCommit:
        """Stage host-owned ``tree_dir`` against ``base`` in a private index,
        commit it on ``branch`` and return exactly the committed diff."""
        index = self.root / f".{tree_dir.name}.index"
        # only the host repo's own config: no user/global filter or diff drivers run on the agent's files
        env = {"GIT_INDEX_FILE": str(index), "GIT_CONFIG_GLOBAL": os.devnull, "GIT_ATTR_NOSYSTEM": "1"}
        wt = ("--git-dir", self.git_dir, "--work-tree", str(tree_dir))
        try:
            git(self.repo, "read-tree", base, env=env)
            git(tree_dir, *wt, "add", "-A", "--", ".", env=env)
            ignored = git(tree_dir, *wt, "ls-files", "-z", "--others", "--ignored", "--exclude-standard",
                          env=env).split("\0")
            tree = git(self.repo, "write-tree", env=env)
        finally:
            index.unlink(missing_ok=True)
        out = CandidateCommit(ignored=[p for p in ignored if p])
        if tree == git(self.repo, "rev-parse", f"{base}^{{tree}}"):
            return out
        # the hypothesis is the agent's text: inert before it becomes a subject
        subject = inert(hypothesis or "candidate", plain=True, max_len=200) or "candidate"
        msg = subject + ("\n\n" + body.strip() if body.strip() else "") + "\n"
        out.sha = git(self.repo, "commit-tree", tree, "-p", base, "-F", "-", input=msg)
        git(self.repo, "update-ref", f"refs/heads/{branch}", out.sha)
        out.diff = git(self.repo, "diff", "--binary", "--no-color", "--no-ext-diff", "--no-textconv",
                       "--no-renames", "--full-index", base, out.sha)
        return out

    # -- host-owned git worktrees (rebase onto a new Bk) -------------------
    def checkout(self, name: str, ref: str) -> Path:
        """A fresh detached host-owned git worktree of ``ref`` at
        ``<root>/<name>``: only for git operations on committed content (a
        cherry-pick onto a new Bk); never given to an agent or the verifier."""
        path = self.path(name)
        self.remove_worktree(name)
        git(self.repo, "worktree", "add", "--detach", "--force", str(path), self._resolve(ref))
        return path

    def remove_worktree(self, name: str) -> None:
        path = self.path(name)
        if path.exists():
            try:
                git(self.repo, "worktree", "remove", "--force", "--force", str(path))
            except GitError:
                pass
            self.remove(name)
        git(self.repo, "worktree", "prune")

    def patch_id(self, base: str, sha: str) -> str:
        diff = git(self.repo, "diff", "--no-color", "--no-ext-diff", base, sha)
        if not diff.strip():
            return ""
        out = git(self.repo, "patch-id", "--stable", input=diff + "\n")
        return out.split()[0] if out else ""
