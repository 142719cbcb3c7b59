"""A fresh export of a checkout for each run, whose metadata says nothing.

A candidate must not be able to tell which run it is in (honest in its first
run, wrong in the others): state that survives between runs of the same
checkout is a side channel. So every run (warm-up, measured, calibration) of
every arm gets its own copy of its arm's checkout, made just before the run
and removed after it:

* every entry's atime and mtime is ``EXPORT_MTIME``, the same in every run of
  every arm (nothing dates the checkout, or the run);
* every file is a new inode written just before the run: its ctime is "a
  moment ago" and its pages are in the page cache (just written) in every run,
  so ``stat``, ``mincore`` or ``posix_fadvise`` find the same state each time,
  and nothing one run does to its copy (evicting pages, touching files) is
  seen by another;
* modes (and, when the verifier runs as root, owners) are kept; symlinks are
  copied as symlinks (never followed); FIFOs, sockets and devices are left
  out; the top-level ``.git`` is left out (runs never need history).

Cost: one copy of the checkout per run (``benchmarks/harness_overhead.py``
reports it); large read-only inputs belong in ``[hidden]`` paths or the
image, not in the checkout.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

__all__ = ["EXPORT_MTIME", "fresh_export"]

EXPORT_MTIME = 946_684_800  # 2000-01-01T00:00:00Z
_SKIP_TOP = frozenset({".git"})


def fresh_export(src: Path, parent: Path) -> Path:
    """A new copy of ``src`` in a new directory under ``parent`` (random name);
    the caller removes it. Raises OSError."""
    src = Path(src)
    dst = Path(tempfile.mkdtemp(prefix="src-", dir=parent))
    st = os.lstat(src)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(f"checkout {src} is not a directory")
    _copy_dir(src, dst, top=True)
    _meta(dst, st)
    return dst


def _copy_dir(src: Path, dst: Path, *, top: bool = False) -> None:
    with os.scandir(src) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        if top and e.name in _SKIP_TOP:
            continue
        s, d = Path(e.path), dst / e.name
        st = e.stat(follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(s), d)
        elif stat.S_ISDIR(st.st_mode):
            os.mkdir(d, 0o700)
            _copy_dir(s, d)
        elif stat.S_ISREG(st.st_mode):
            shutil.copyfile(s, d, follow_symlinks=False)
        else:
            continue  # FIFO, socket, device: never part of a run's code
        _meta(d, st)


def _meta(path: Path, st: os.stat_result) -> None:
    """Owner (as root), mode and the fixed times of ``path`` (a symlink itself)."""
    link = stat.S_ISLNK(st.st_mode)
    if os.geteuid() == 0:
        os.lchown(path, st.st_uid, st.st_gid)
    if not link:
        os.chmod(path, stat.S_IMODE(st.st_mode))
    os.utime(path, (EXPORT_MTIME, EXPORT_MTIME), follow_symlinks=False)
