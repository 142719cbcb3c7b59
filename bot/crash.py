"""Deterministic crash points, for the crash tests (``tests/bot/test_crash.py``).

``RSI_CRASH_AT=name[,name...]``: when this process reaches a point of that name
(right after GitHub acted and before the bot recorded it, see the calls of
:func:`point`), it kills its whole process group with SIGKILL, as a power cut
or the OOM killer would: no ``finally``, no atexit, no flush. ``name#k`` fires
on the k-th time the point is reached (counted per process).

``RSI_CRASH_FILE=<path>``: the same, armed at run time by writing a name into
that file; it fires once (the file is emptied before the kill), so a test can
let a restarted bot recover first and arm the next point afterwards.

Unset (always, in production), :func:`point` does nothing.
"""

from __future__ import annotations

import os
import signal
import threading

_counts: dict[str, int] = {}
_lock = threading.Lock()


def point(name: str) -> None:
    spec = os.environ.get("RSI_CRASH_AT")
    path = os.environ.get("RSI_CRASH_FILE")
    if not spec and not path:
        return
    with _lock:
        _counts[name] = n = _counts.get(name, 0) + 1
        if path:
            try:
                with open(path, "r+") as fh:
                    if fh.read().strip() == name:
                        fh.seek(0)
                        fh.truncate()
                        fh.flush()
                        os.fsync(fh.fileno())
                        _die()
            except FileNotFoundError:
                pass
    for item in (spec or "").split(","):
        want, _, k = item.strip().partition("#")
        if want == name and (not k or (k.isdigit() and int(k) == n)):
            _die()


def _die() -> None:
    os.killpg(os.getpgrp(), signal.SIGKILL)
