"""The host's shared libraries for sandbox containers that run the host's Python.

The base image (Debian minbase) has no ``libssl`` or ``libsqlite3``; the host's
Python, mounted read-only into containers, links its ``_ssl`` and ``_sqlite3``
modules against the host's. Agents speak HTTP(S) to their model API (httpx,
litellm, openai all import ``ssl``) and aider keeps a sqlite cache, so their
containers get those host libraries read-only under :data:`LIB_DIR` and
``LD_LIBRARY_PATH`` pointing there. Found by asking the dynamic loader
(``ldd``) what the host's extension modules load.
"""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

LIB_DIR = "/opt/rsi/hostlib"
_WANTED = re.compile(r"^(libssl|libcrypto|libsqlite3|libffi)\.so[.\d]*$")
_MODULES = ("_ssl", "_sqlite3", "_ctypes")


@functools.lru_cache(maxsize=1)
def host_libraries() -> tuple[str, ...]:
    """``name=host path`` of the libraries the host's ``_ssl``, ``_sqlite3`` and
    ``_ctypes`` modules load (none for a module linked statically, or without
    ``ldd``)."""
    import importlib.util

    found: dict[str, str] = {}
    for mod in _MODULES:
        spec = importlib.util.find_spec(mod)
        if spec is None or not spec.origin or not spec.origin.endswith(".so"):
            continue
        try:
            out = subprocess.run(["ldd", spec.origin], capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        for line in out.splitlines():
            m = re.match(r"\s*(\S+)\s+=>\s+(/\S+)", line)
            if m and _WANTED.match(m.group(1)):
                found[m.group(1)] = str(Path(m.group(2)).resolve())
    return tuple(f"{name}={path}" for name, path in sorted(found.items()))


def lib_mounts() -> tuple[list[tuple[str, str]], dict[str, str]]:
    """(host path, container path) pairs to mount read-only, and the env to set."""
    pairs = []
    for item in host_libraries():
        name, path = item.split("=", 1)
        pairs.append((path, f"{LIB_DIR}/{name}"))
    return pairs, ({"LD_LIBRARY_PATH": LIB_DIR} if pairs else {})
