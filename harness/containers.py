"""The host's side of every container we start: the docker client, and what a
container of ours runs with.

Nothing of the host is mounted to give a container its Python: the image
carries it (:mod:`harness.images`: Debian's Python and rsi-bot's dependencies,
built for the sandbox). :func:`python_executable` and :func:`sandbox_path`
name them as the image has them.

Shared by :mod:`harness.sandbox`, :mod:`harness.egress` and
:mod:`harness.gateway`, below all three (none of them imports another for
these). Imports nothing of ours.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PYTHON = "python3"
"""The image's Python (Debian's ``/usr/bin/python3``; ``python`` too, python-is-python3)."""


class Mount(BaseModel):
    source: str
    target: str
    read_only: bool = True


def python_executable() -> str:
    """The Python a command in a container of ours runs (the image's)."""
    return PYTHON


def sandbox_path() -> str:
    return SANDBOX_PATH


_CLIENT: Any = None


def docker_client() -> Any:
    """The process's one docker client (``docker.from_env``), made on first use
    (the docker SDK is imported only then)."""
    global _CLIENT
    if _CLIENT is None:
        import docker

        _CLIENT = docker.from_env(timeout=120)
    return _CLIENT
