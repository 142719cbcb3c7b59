"""rsi-bot in-process benchmark, by hand (written by ``rsi init --scaffold inprocess``).

``python bench/rsi/bench.py package.module:function`` calls the repository's
inference function: it takes one prompt (a string) and returns the output
(``str`` or ``bytes``) or yields it in chunks. This script is for people and
agents to look: the verifier never runs it. It makes the same calls through
its own timing harness (the repo config's ``entry``), which times every call
from outside the function's process, so a candidate cannot change the code
that measures it. Per prompt:

* ``ttfa_s``: time to the first *real* output chunk (not empty, not
  whitespace); every chunk is saved and compared with the baseline's outputs
  by the evaluator, so content padding fails the quality guard;
* ``latency_s``: time to the last chunk.

Outputs go to ``$RSI_OUTPUT_DIR/req-NNN.out``; the result to ``$RSI_RESULT``.
"""

from __future__ import annotations

import importlib
import json
import os
import random
import sys
import time
from pathlib import Path


def setting(name: str, default: str) -> str:
    return os.environ.get(f"RSI_SETTING_{name.upper()}", "").strip() or default


def load(entry: str):
    module, _, func = entry.partition(":")
    if not module or not func:
        raise SystemExit(f"entry {entry!r}: pass package.module:function (python bench/rsi/bench.py pkg.mod:fn)")
    sys.path.insert(0, os.getcwd())
    return getattr(importlib.import_module(module), func)


def call(fn, prompt: str) -> tuple[bytes, float, float]:
    t0 = time.perf_counter()
    out = fn(prompt)
    chunks = [out] if isinstance(out, (str, bytes)) else out
    body, ttfa = bytearray(), 0.0
    for chunk in chunks:
        data = chunk.encode() if isinstance(chunk, str) else bytes(chunk)
        body += data
        if not ttfa and body.strip():
            ttfa = time.perf_counter() - t0
    return bytes(body), ttfa, time.perf_counter() - t0


def main() -> int:
    fn = load(sys.argv[1] if len(sys.argv) > 1 else setting("entry", ""))
    pool_path = Path(__file__).resolve().parent / "prompts.txt"
    pool = [p.strip() for p in pool_path.read_text(encoding="utf-8").splitlines() if p.strip()]
    rng = random.Random(int(os.environ.get("RSI_SEED", "").strip() or setting("seed", "0")))
    texts = [rng.choice(pool) for _ in range(max(1, int(setting("requests", "8"))))]
    out_dir = Path(os.environ.get("RSI_OUTPUT_DIR", "") or "rsi-outputs")
    out_dir.mkdir(parents=True, exist_ok=True)
    lat, ttfa, failed, total = [], [], 0, 0
    t_start = time.perf_counter()
    for i, prompt in enumerate(texts):
        try:
            body, first, last = call(fn, prompt)
        except Exception as e:  # a failed request is counted, never hidden
            print(f"bench: request {i} failed: {type(e).__name__}: {e}", file=sys.stderr)
            body, first, last = b"", 0.0, 0.0
        if not first:
            failed += 1
        else:
            lat.append(last)
            ttfa.append(first)
            total += len(body)
        (out_dir / f"req-{i:03d}.out").write_bytes(body)
    window = time.perf_counter() - t_start
    result = {
        "metrics": {"throughput": (len(texts) - failed) / window if window > 0 else 0.0,
                    "output_bytes_per_s": total / window if window > 0 else 0.0},
        "samples": {"latency_s": lat or [window], "ttfa_s": ttfa or [window]},
        "outputs": {"prompts": texts},
        "counts": {"requests": len(texts), "failed": failed},
    }
    text = json.dumps(result, indent=1)
    if os.environ.get("RSI_RESULT"):
        Path(os.environ["RSI_RESULT"]).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
