"""rsi-bot load client (protected; written by ``rsi init --scaffold serving``).

The verifier runs it from the baseline checkout for every arm, in its own
container, against the candidate's server at ``$RSI_SERVER_URL``: the
candidate never times itself. ::

    python bench/rsi/client.py      (settings: RSI_SETTING_*, from the repo config)

Each request POSTs ``{"<input_field>": "<prompt>"}`` (JSON) to ``endpoint``
and reads the response as a stream. Prompts come from ``prompts.txt`` next to
this file, in an order drawn from ``$RSI_SEED`` (the verifier's hidden seed,
when the config declares one). Per request it records

* ``ttfa_s``: time from the send to the first *real* output: the first byte
  that is not whitespace and not an SSE comment or keep-alive line. A first
  byte is not first output: a server that sends a blank line at once would
  otherwise look instant; and every byte of the output is saved and compared
  with the baseline's by the evaluator, so padding with content fails the
  quality guard;
* ``latency_s``: time from the send to the last byte.

and saves the body as ``$RSI_OUTPUT_DIR/req-NNN.out`` (an empty file for a
failed request, so files stay in request order). Metrics: ``throughput``
(completed requests per second over the window from the first send to the
last byte) and ``output_bytes_per_s``. A request fails on a connection error,
a status other than 200, a timeout or an empty body; failures are counted,
never hidden.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

READ_SIZE = 64 * 1024
MAX_BYTES = 64 * 1024 * 1024  # per response


@dataclass
class Response:
    prompt: str
    ok: bool = False
    error: str = ""
    ttfa_s: float = 0.0
    latency_s: float = 0.0
    body: bytearray = field(default_factory=bytearray)


def setting(name: str, default: str) -> str:
    return os.environ.get(f"RSI_SETTING_{name.upper()}", "").strip() or default


def first_real_output(body: bytes) -> bool:
    """Whether ``body`` holds a byte of real output: not whitespace, not an SSE
    comment (``:`` line) or an empty ``data:`` line."""
    for line in bytes(body).splitlines():
        line = line.strip()
        if not line or line.startswith(b":"):
            continue
        if line.startswith(b"data:") and not line[5:].strip():
            continue
        return True
    return False


def request(url: str, endpoint: str, field_name: str, prompt: str, timeout_s: float) -> Response:
    parts = urlsplit(url)
    res = Response(prompt=prompt)
    data = json.dumps({field_name: prompt}).encode()
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80,
                                      timeout=timeout_s)
    t0 = time.perf_counter()
    try:
        conn.request("POST", endpoint, body=data,
                     headers={"Content-Type": "application/json", "Connection": "close"})
        resp = conn.getresponse()
        if resp.status != 200:
            res.error = f"HTTP {resp.status}: {resp.read(300).decode(errors='replace')}"
            return res
        while True:
            chunk = resp.read1(READ_SIZE)
            if not chunk:
                break
            res.body += chunk
            if not res.ttfa_s and first_real_output(res.body):
                res.ttfa_s = time.perf_counter() - t0
            if len(res.body) > MAX_BYTES:
                res.error = f"more than {MAX_BYTES} bytes"
                return res
        res.latency_s = time.perf_counter() - t0
    except (OSError, http.client.HTTPException) as e:
        res.error = f"{type(e).__name__}: {e}"
        return res
    finally:
        conn.close()
    if not res.ttfa_s:
        res.error = "no output (an empty or blank body)"
        return res
    res.ok = True
    return res


def prompts(n: int, seed: int) -> list[str]:
    path = Path(__file__).resolve().parent / "prompts.txt"
    pool = [p.strip() for p in path.read_text(encoding="utf-8").splitlines() if p.strip()]
    if not pool:
        raise SystemExit(f"{path} has no prompts: write one per line")
    rng = random.Random(seed)
    return [rng.choice(pool) for _ in range(n)]


def run(url: str, endpoint: str, field_name: str, texts: list[str], concurrency: int,
        out_dir: Path | None, timeout_s: float) -> dict:
    t_start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        responses = list(pool.map(
            lambda t: request(url, endpoint, field_name, t, timeout_s), texts))
    window = time.perf_counter() - t_start
    ok = [r for r in responses if r.ok]
    for r in responses:
        if not r.ok:
            print(f"client: request failed ({r.prompt[:60]!r}): {r.error}", file=sys.stderr)
    names = [f"req-{i:03d}.out" for i in range(len(texts))]
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, r in zip(names, responses, strict=True):
            (out_dir / name).write_bytes(bytes(r.body) if r.ok else b"")
    total = sum(len(r.body) for r in ok)
    return {
        "metrics": {"throughput": len(ok) / window if window > 0 else 0.0,
                    "output_bytes_per_s": total / window if window > 0 else 0.0},
        "samples": {"latency_s": [r.latency_s for r in ok] or [window],
                    "ttfa_s": [r.ttfa_s for r in ok] or [window]},
        "outputs": {"prompts": texts, "output_files": names},
        "counts": {"requests": len(texts), "failed": len(texts) - len(ok)},
    }


def main() -> int:
    url = os.environ.get("RSI_SERVER_URL", "http://127.0.0.1:8000")
    endpoint = setting("endpoint", "/generate")
    n = int(setting("requests", "16"))
    concurrency = int(setting("concurrency", "2"))
    seed = int(os.environ.get("RSI_SEED", "").strip() or setting("seed", "0"))
    texts = prompts(max(1, n), seed)
    out_dir = os.environ.get("RSI_OUTPUT_DIR", "")
    result = run(url, endpoint if endpoint.startswith("/") else "/" + endpoint,
                 setting("input_field", "prompt"), texts, concurrency,
                 Path(out_dir) if out_dir else None, float(setting("timeout_s", "60")))
    text = json.dumps(result, indent=1)
    if os.environ.get("RSI_RESULT"):
        Path(os.environ["RSI_RESULT"]).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
