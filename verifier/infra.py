"""Infrastructure errors, each turned into one sentence that says the fix.

Docker (docker-py's typed errors), git and the disk fail for reasons that
have nothing to do with a candidate or its baseline; :func:`explain` says
what failed and what to do, and :func:`is_infrastructure` tells such an
error from a failure of the code under test. ``docker`` is imported only to
recognise its exception types (it is a dependency of the verifier already).
"""

from __future__ import annotations

import errno

INFRA_PREFIX = "infrastructure: "
"""How a run's error says the machine failed, not the code it ran."""


def _docker_errors():
    try:
        import docker.errors as de
        import requests.exceptions as rx
    except ImportError:  # pragma: no cover - docker-py is a dependency
        return None, None
    return de, rx


def explain(exc: BaseException) -> str:
    """One sentence: what failed, and the fix."""
    de, rx = _docker_errors()
    msg = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
    if de is not None:
        if isinstance(exc, de.ImageNotFound):
            return (f"a Docker image is missing ({msg}): build the base image: make docker-image "
                    "(or pass --verify inprocess to measure without containers)")
        if isinstance(exc, de.NotFound):
            return f"a Docker object disappeared while in use ({msg}): rerun; if it repeats, check that nothing prunes containers or networks"
        if isinstance(exc, de.APIError) and "permission denied" in msg.lower():
            return ("Docker refused this user: add it to the docker group (sudo usermod -aG docker "
                    "$USER, then log in again) or run as a user that may use Docker")
        if isinstance(exc, de.APIError):
            return f"Docker refused a request ({msg}): check `docker info`, then rerun"
        if isinstance(exc, de.DockerException) or isinstance(exc, rx.ConnectionError):
            return ("Docker is not reachable (is the daemon running?): start Docker "
                    "(systemctl start docker, or open Docker Desktop), or pass --verify inprocess "
                    "to measure without containers")
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return f"the disk is full ({msg}): free some space (docker system df shows Docker's share), then rerun"
    if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied ({msg}): run as a user who may write there"
    if type(exc).__name__ == "GitError":
        return f"git failed ({msg}): check that the repository is a git repository with a commit"
    return f"{type(exc).__name__}: {msg}"


def is_infrastructure(exc: BaseException) -> bool:
    """Docker, disk and permission errors: the machine, not the code under test."""
    de, rx = _docker_errors()
    if de is not None and isinstance(exc, (de.DockerException, rx.ConnectionError)):
        return True
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EACCES, errno.EPERM)


def is_engine_fault(exc: BaseException) -> bool:
    """Docker answered a request with a server error (5xx): the engine failed
    under load, not the request. Asking again may succeed; a 4xx (the
    container is not running, a bad argument) is an answer that would not
    change."""
    de, _ = _docker_errors()
    if de is None or not isinstance(exc, de.APIError) or exc.status_code is None:
        return False  # not Docker's answer, or no answer at all (no response to read)
    return bool(exc.is_server_error())
