"""The verifier's timing harness: the program that runs in a benchmark's run
container for an ``entry`` benchmark (see :mod:`verifier.harness`).

Standard library only, and never imported by the verifier at run time: the
verifier reads this file's text from its own package and starts it as
``python -I -c <text>`` (isolated mode: no ``PYTHON*`` variable, no user
site, no working directory on ``sys.path``, so nothing in the candidate's
checkout is imported into it). It is two programs in one text:

* :func:`parent` (the timer): drops its dumpable flag (so no process of the
  same user may ptrace it or read its ``/proc/<pid>/{mem,environ,fd}``),
  takes its per-run key from the environment and zeroes it there (and the
  hidden inputs) in its original environment block, starts the
  worker with an environment without the key, the hidden inputs or the
  result paths, waits until the worker has loaded the entry point, prints
  ``RSI_HARNESS_READY`` (the verifier times ``startup_s`` to it from
  outside), then sends each request with a fresh random nonce and times the
  answer on its own monotonic clock: the time to the first real output
  (``ttfa_s``), to the end (``latency_s``), and the whole window from
  before the ready line to the last answer (``throughput``,
  ``output_bytes_per_s``). It then kills the worker's process group, writes
  each output to ``$RSI_OUTPUT_DIR/req-NNN.out``, the result to
  ``$RSI_RESULT`` (with the SHA-256 of every output file in
  ``meta.harness.files``) and an HMAC-SHA256 of the result's bytes under the
  per-run key to ``harness.mac`` next to it;
* :func:`worker` (the candidate's side): imports ``package.module:function``
  from the checkout and answers each request with its output (``str`` or
  ``bytes``, or an iterable of chunks), framed on two pipes; its own stdout
  goes to stderr so that nothing it prints reaches the timer's stdout.

Frames: one type byte, a 4-byte big-endian length, the payload. Requests
``R`` (nonce + prompt); answers ``C`` (nonce + chunk), ``E`` (nonce: done),
``X`` (nonce + message: the call raised); ``L`` once, when loaded.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

NONCE = 16
MAX_FRAME = 16 << 20
MAX_OUTPUT = 64 << 20
MAX_TOTAL = 160 << 20
MAX_INPUTS = 16 << 20
READY = "RSI_HARNESS_READY"
KEY_ENV = "RSI_HARNESS_KEY"
MAC_FILE = "harness.mac"


def _send(fd: int, kind: bytes, payload: bytes) -> None:
    data = kind + len(payload).to_bytes(4, "big") + payload
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _read_exact(fd: int, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, min(n - len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _recv(fd: int) -> tuple[bytes, bytes] | None:
    """One frame, or None at the end of the stream; a frame over the cap ends it."""
    head = _read_exact(fd, 5)
    if head is None:
        return None
    size = int.from_bytes(head[1:], "big")
    if size > MAX_FRAME:
        raise ValueError(f"a frame of {size} bytes (at most {MAX_FRAME})")
    body = _read_exact(fd, size)
    if body is None:
        return None
    return head[:1], body


def worker() -> None:
    import importlib

    rfd, wfd = (int(x) for x in os.environ.pop("RSI_HARNESS_FDS").split(","))
    entry = os.environ.pop("RSI_HARNESS_ENTRY")
    module, _, name = entry.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    fn = getattr(importlib.import_module(module), name)
    _send(wfd, b"L", b"")
    while True:
        frame = _recv(rfd)
        if frame is None:
            return
        nonce, prompt = frame[1][:NONCE], frame[1][NONCE:].decode("utf-8")
        try:
            out = fn(prompt)
            for chunk in [out] if isinstance(out, (str, bytes)) else out:
                data = chunk.encode("utf-8") if isinstance(chunk, str) else bytes(chunk)
                if data:
                    _send(wfd, b"C", nonce + data)
            _send(wfd, b"E", nonce)
        except Exception as e:  # a failed request is counted, never hidden
            _send(wfd, b"X", nonce + f"{type(e).__name__}: {e}".encode()[:2000])


def _undumpable() -> None:
    """PR_SET_DUMPABLE = 0: without CAP_SYS_PTRACE, no other process (the
    worker, same user) may ptrace this one or open its /proc mem, environ or fd."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def _scrub(names: set[str]) -> None:
    """Zero the values of ``names`` in this process's original environment
    block, which ``/proc/<pid>/environ`` shows (removing them from
    ``os.environ`` leaves that memory as it was): even a process that may read
    this one's /proc (root, in a trusted process run) does not find the key
    or a hidden input there."""
    import ctypes

    libc = ctypes.CDLL(None)
    strings = ctypes.POINTER(ctypes.c_char_p).in_dll(libc, "environ")
    addrs = ctypes.cast(strings, ctypes.POINTER(ctypes.c_void_p))
    i = 0
    while strings[i]:
        entry = strings[i] or b""
        name = entry.split(b"=", 1)[0].decode("utf-8", "replace")
        if name in names:
            ctypes.memset((addrs[i] or 0) + len(name) + 1, 0, len(entry) - len(name) - 1)
        i += 1


def _inputs(path: str) -> list[str]:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        data = os.read(fd, MAX_INPUTS + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_INPUTS:
        raise ValueError(f"the inputs file is over {MAX_INPUTS} bytes")
    return [line for line in data.decode("utf-8").splitlines() if line.strip()]


def _fail(message: str) -> NoReturn:
    print(f"rsi harness: {message}", file=sys.stderr, flush=True)
    raise SystemExit(3)


def _call(rfd: int, wfd: int, prompt: str, clock) -> tuple[bytes, float, float, str]:
    """One request, timed: (output, ttfa, latency, error message)."""
    nonce = os.urandom(NONCE)
    t0 = clock()
    _send(wfd, b"R", nonce + prompt.encode("utf-8"))
    body, first = bytearray(), 0.0
    while True:
        frame = _recv(rfd)
        if frame is None:
            _fail("the entry point's process ended in the middle of a request")
        kind, payload = frame
        if payload[:NONCE] != nonce or kind not in (b"C", b"E", b"X"):
            _fail("an answer that was not to the request sent (a wrong nonce or frame)")
        if kind == b"C":
            body += payload[NONCE:]
            if len(body) > MAX_OUTPUT:
                _fail(f"an output over {MAX_OUTPUT} bytes")
            if not first and body.strip():
                first = clock() - t0
        elif kind == b"E":
            return bytes(body), first, clock() - t0, ""
        else:
            return b"", 0.0, clock() - t0, payload[NONCE:].decode("utf-8", "replace")


def parent(src: str) -> None:
    import hashlib
    import hmac
    import json
    import random
    import signal
    import subprocess
    import time

    _undumpable()
    hidden = [n for n in os.environ.get("RSI_HARNESS_HIDDEN", "").split(",") if n]
    _scrub({KEY_ENV, "RSI_SEED", *hidden})
    key = os.environ.pop(KEY_ENV, "")
    if len(key) < 32:
        _fail(f"no per-run key in {KEY_ENV}: only the verifier starts this harness")
    entry = os.environ.pop("RSI_HARNESS_ENTRY", "")
    inputs_path = os.environ.pop("RSI_HARNESS_INPUTS", "")
    requests = int(os.environ.pop("RSI_HARNESS_REQUESTS", "16"))
    result_path = os.environ.get("RSI_RESULT", "")
    out_dir = os.environ.get("RSI_OUTPUT_DIR", "")
    if not (entry and inputs_path and result_path and out_dir):
        _fail("RSI_HARNESS_ENTRY, RSI_HARNESS_INPUTS, RSI_RESULT and RSI_OUTPUT_DIR are needed")
    pool = _inputs(inputs_path)
    if not pool:
        _fail(f"the inputs file {inputs_path} has no input (one per line)")
    rng = random.Random(int(os.environ.get("RSI_SEED", "").strip() or "0"))
    texts = [rng.choice(pool) for _ in range(max(1, requests))]

    req_r, req_w = os.pipe()
    ans_r, ans_w = os.pipe()
    secret = {"RSI_SEED", "RSI_RESULT", "RSI_OUTPUT_DIR", *hidden}
    env = {k: v for k, v in os.environ.items() if k not in secret and not k.startswith("RSI_HARNESS")}
    env.update(RSI_HARNESS_FDS=f"{req_r},{ans_w}", RSI_HARNESS_ENTRY=entry)
    child = subprocess.Popen(  # noqa: S603 - the interpreter running this file, this file's text
        [sys.executable, "-c", src + "\nworker()\n"], env=env, stdin=subprocess.DEVNULL,
        stdout=sys.stderr.fileno(), pass_fds=(req_r, ans_w), start_new_session=True,
    )
    os.close(req_r)
    os.close(ans_w)
    try:
        loaded = _recv(ans_r)
        if loaded is None:
            child.wait()
            _fail(f"the entry point {entry} could not be loaded (its process exited with "
                  f"status {child.returncode}; see its stderr above)")
        if loaded[0] != b"L" or loaded[1]:
            _fail("an answer that was not to the request sent (a frame before the entry point "
                  "was loaded)")
        clock = time.perf_counter
        start = clock()
        print(READY, flush=True)
        bodies, lat, ttfa, failed, total = [], [], [], 0, 0
        for i, prompt in enumerate(texts):
            body, first, last, err = _call(ans_r, req_w, prompt, clock)
            if err:
                print(f"rsi harness: request {i} failed: {err}", file=sys.stderr, flush=True)
            if not first:
                failed += 1
                body = b""
            else:
                lat.append(last)
                ttfa.append(first)
                total += len(body)
                if total > MAX_TOTAL:
                    _fail(f"outputs over {MAX_TOTAL} bytes in all")
            bodies.append(body)
        window = clock() - start
    finally:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        child.wait()
    os.makedirs(out_dir, exist_ok=True)
    files = {}
    for i, body in enumerate(bodies):
        name = f"req-{i:03d}.out"
        fd = os.open(os.path.join(out_dir, name),
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(body)
        files[name] = hashlib.sha256(body).hexdigest()
    result = {
        "metrics": {"throughput": (len(texts) - failed) / window,
                    "output_bytes_per_s": total / window},
        "samples": {"latency_s": lat or [window], "ttfa_s": ttfa or [window]},
        "outputs": {"prompts": texts},
        "counts": {"requests": len(texts), "failed": failed},
        "meta": {"harness": {"version": 1, "entry": entry, "files": files}},
    }
    data = json.dumps(result).encode()
    for path, blob in ((result_path, data),
                       (os.path.join(os.path.dirname(result_path), MAC_FILE),
                        hmac.new(key.encode(), data, hashlib.sha256).hexdigest().encode())):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
