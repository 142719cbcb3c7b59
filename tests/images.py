"""What Docker tests run their commands with: the sandbox's runtime image
(:mod:`harness.images`: Debian's Python with rsi-bot's dependencies and
packages; nothing of the host is mounted into a container) and its Python by
name (``python3``, which this host has on ``PATH`` too, for the same command
under process isolation)."""

from __future__ import annotations

import functools

PY = "python3"


@functools.lru_cache(maxsize=1)
def runtime_image() -> str:
    """The runtime image's tag (built in seconds when only it is missing;
    ``scripts/build-images.sh`` builds the rest)."""
    from harness.images import ensure_runtime

    return ensure_runtime()
