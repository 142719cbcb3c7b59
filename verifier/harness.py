"""The verifier's timing harness for in-process benchmarks (``entry``; issue 29).

An ``entry`` benchmark names a function of the target repo
(``package.module:function``: a prompt in, its output, or an iterable of
chunks, out) and a file of inputs in B0's checkout. The verifier does not run a
benchmark script of the repo: it runs its own program, ``harness_run.py``
(read from this package, never from a checkout), in the candidate's run
container as ``python -I -c <text>``, which starts the entry point in a
worker process and times every call from the outside of that process. The
metrics it reports (``throughput``, ``output_bytes_per_s``, samples
``latency_s``, ``ttfa_s``) have source ``harness``: measured by the verifier's
code, not reported by the candidate's. ``startup_s`` is the verifier's own
clock from the start to the harness's ready line.

Threat model. The candidate controls the entry point's code, and through it
everything a process of the run's user can do in the run's container: it
runs in the same container (and under the same user) as the timer, but not in
the same process.

* It cannot touch the timer's memory, clock or stdout: the timer drops its
  dumpable flag before it starts the worker (no ptrace, no
  ``/proc/<pid>/mem|environ|fd`` for a process without ``CAP_SYS_PTRACE``,
  which no run has), and the worker's stdout is the timer's stderr. The
  clock is the kernel's monotonic clock; stopping the timer (a signal) only
  lengthens the window.
* It cannot answer before it is asked: each request carries a fresh random
  nonce that its answer must echo; work done between requests (or while the
  timer is stopped) is inside the window, which runs from before the ready
  line to the last answer. Work moved before the ready line is in
  ``startup_s`` (guarded by default).
* It cannot forge the result: the timer writes it after it killed the
  worker's process group, with the SHA-256 of every output file, and an
  HMAC-SHA256 of its bytes under a key drawn by the verifier for that run
  alone and given to the timer only (removed from its environment before the
  worker starts; the worker never sees it). The verifier checks the MAC and
  every output file's digest (no file more, none less) before it reads the
  result: a rewritten result or output is an ``error``, never a measurement.
* Hidden inputs (``RSI_SEED`` and ``[hidden] env``) reach the timer only,
  never the worker: the candidate does not learn which inputs a run draws.

What remains the candidate's: what its function returns (judged by the
evaluator and the quality guards, every run), and making the calls fast by
work before the ready line (``startup_s``) or a cache across the inputs of
one run (the inputs repeat: write more distinct inputs than ``requests``,
or keep them in ``[hidden]``). Killing the timer or the run makes the run
fail: ``error``, never a gain.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import shlex
from importlib import resources
from pathlib import Path

READY_PATTERN = "^RSI_HARNESS_READY$"
"""The ready line the harness prints when the entry point is loaded."""
KEY_ENV = "RSI_HARNESS_KEY"
MAC_FILE = "harness.mac"
METRICS = {"throughput": "higher", "output_bytes_per_s": "higher"}
"""What the harness reports, with the better direction."""
SAMPLES = {"latency_s": "lower", "ttfa_s": "lower"}
UNITS = {"throughput": "request/s", "output_bytes_per_s": "B/s", "latency_s": "s", "ttfa_s": "s"}
MAX_OUTPUT_FILE = 64 << 20
ENTRY_RE = r"[A-Za-z_][\w.]*:[A-Za-z_]\w*"


def program() -> str:
    """The harness's text, from this package (never from a checkout)."""
    return resources.files("verifier").joinpath("harness_run.py").read_text(encoding="utf-8")


def command(python: str = "python") -> str:
    """The shell command of an ``entry`` run: the parent half of
    :func:`program`, which starts its worker half with its own text."""
    src = program()
    text = f"{src}\nparent({src!r})\n"
    return f"{python} -I -c {shlex.quote(text)}"


def job_env(entry: str, inputs: Path, requests: int, hidden: dict[str, str]) -> tuple[dict[str, str], str]:
    """(the environment the harness adds to a run, the run's fresh key)."""
    key = secrets.token_hex(32)
    return {
        KEY_ENV: key,
        "RSI_HARNESS_ENTRY": entry,
        "RSI_HARNESS_INPUTS": str(inputs),
        "RSI_HARNESS_REQUESTS": str(requests),
        "RSI_HARNESS_HIDDEN": ",".join(sorted(k for k in hidden if k != "RSI_SEED")),
    }, key


def inputs_path(base: Path, inputs: str) -> Path:
    """``inputs`` in B0's checkout ``base``: a regular file inside it, reached
    through no link (ValueError otherwise)."""
    root = Path(base).resolve()
    path = root / inputs
    if path.resolve() != path or not path.is_relative_to(root):
        raise ValueError(f"inputs {inputs!r} goes through a link or out of the checkout")
    if not path.is_file():
        raise ValueError(f"inputs {inputs!r} is not a file in the base checkout ({root})")
    return path


def check(run_dir: Path, key: str) -> str:
    """Why the run's result and outputs are not what the harness wrote
    (empty: they are): its MAC under ``key``, then every output file's digest."""
    from .protocol import MAX_RESULT_BYTES, ProtocolError, read_regular

    try:
        data = read_regular(run_dir / "result.json", MAX_RESULT_BYTES, "result file")
        mac = read_regular(run_dir / MAC_FILE, 200, "harness MAC").decode("ascii", "replace")
    except FileNotFoundError as e:
        return f"the timing harness left no {Path(e.filename or '').name or 'result'} (see its stderr)"
    except ProtocolError as e:
        return f"the timing harness's result cannot be read: {e}"
    want = hmac.new(key.encode(), data, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, mac.strip()):
        return ("the result is not the one the timing harness wrote (its MAC does not match): "
                "something in the run rewrote it")
    files = (json.loads(data).get("meta") or {}).get("harness", {}).get("files", {})
    out = run_dir / "outputs"
    found = sorted(os.listdir(out)) if out.is_dir() else []
    if found != sorted(files):
        return (f"the run's output files ({len(found)}) are not the ones the timing harness "
                f"wrote ({len(files)}): something in the run added or removed some")
    for name, digest in files.items():
        try:
            blob = read_regular(out / name, MAX_OUTPUT_FILE, "output file")
        except (OSError, ProtocolError) as e:
            return f"output {name} cannot be read: {e}"
        if not hmac.compare_digest(hashlib.sha256(blob).hexdigest(), str(digest)):
            return (f"output {name} is not the one the timing harness wrote: something in "
                    "the run rewrote it")
    return ""
