"""The host's side of every container we start: the docker client, and this
host's Python made visible inside (the base image has none of its own).

Shared by :mod:`harness.sandbox`, :mod:`harness.egress` and
:mod:`harness.gateway`, below all three (none of them imports another for
these). Imports nothing of ours.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel


class Mount(BaseModel):
    source: str
    target: str
    read_only: bool = True


def python_mounts() -> list[Mount]:
    """Read-only mounts that give the container this host's Python and venv at
    the same paths (the base image has no Python of its own)."""
    paths = [Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()]
    src = Path(__file__).resolve().parents[1]
    if not any(src.is_relative_to(p) for p in paths):
        paths.append(src)
    out: list[Mount] = []
    for p in paths:
        if p.exists() and not any(p.is_relative_to(Path(m.source)) for m in out):
            out.append(Mount(source=str(p), target=str(p), read_only=True))
    return out


def python_executable() -> str:
    return sys.executable


def sandbox_path() -> str:
    return ":".join(
        [
            str(Path(sys.prefix) / "bin"),
            str(Path(sys.base_prefix) / "bin"),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        ]
    )


_CLIENT: Any = None


def docker_client() -> Any:
    """The process's one docker client (``docker.from_env``), made on first use
    (the docker SDK is imported only then)."""
    global _CLIENT
    if _CLIENT is None:
        import docker

        _CLIENT = docker.from_env(timeout=120)
    return _CLIENT
