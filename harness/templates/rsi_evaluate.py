"""rsi-bot evaluator (protected; written by ``rsi init --scaffold``).

Run by the verifier from the baseline checkout after every run, with that
run's output files read-only at ``$RSI_INPUT_DIR`` (``req-NNN.out``, in
request order). It writes ``$RSI_RESULT`` with

* ``outputs.texts``: each output as text (UTF-8; a binary output becomes one
  word, ``sha256:<hex>``), which the config's WER guard compares with the
  baseline's outputs: any change of content shows;
* ``outputs.output_words``: words per output, for the output-length guard (a
  faster run that emits less is not faster).

The candidate's code never runs here: the verifier judges every run's outputs
with this file as the baseline has it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

MAX_BYTES = 64 * 1024 * 1024  # per output file: more is never read


def read(path: Path) -> str:
    """One output as text; an oversized one is a word of its own (it differs
    from the baseline's outputs, so the quality guard fails it)."""
    size = path.stat().st_size
    if size > MAX_BYTES:
        return f"oversized:{size}"
    with path.open("rb") as f:
        return as_text(f.read(MAX_BYTES))


def as_text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "sha256:" + hashlib.sha256(data).hexdigest()


def main() -> int:
    src = Path(os.environ.get("RSI_INPUT_DIR", "."))
    files = sorted(p for p in src.glob("req-*.out") if p.is_file() and not p.is_symlink())
    texts = [read(p) for p in files]
    result = {"outputs": {"texts": texts, "output_words": [len(t.split()) for t in texts]}}
    text = json.dumps(result)
    if os.environ.get("RSI_RESULT"):
        Path(os.environ["RSI_RESULT"]).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
