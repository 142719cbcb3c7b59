"""Protected load generator: sends every request to the candidate's server at
``$RSI_SERVER_URL``, times them itself, keeps the answers as files in
``$RSI_OUTPUT_DIR`` and writes the protocol JSON to ``$RSI_RESULT``."""

import json
import os
import sys
import time
import urllib.request

sys.path.insert(0, os.getcwd())

from bench.inputs import make_inputs, seed  # noqa: E402


def ask(url: str, text: str) -> str:
    req = urllib.request.Request(url + "/answer", data=text.encode(), method="POST")
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.read().decode()


def main() -> None:
    url = os.environ["RSI_SERVER_URL"].rstrip("/")
    inputs = make_inputs(seed())
    answers, failed = [], 0
    t0 = time.perf_counter()
    for text in inputs:
        try:
            answers.append(ask(url, text))
        except OSError as exc:
            failed += 1
            answers.append("")
            print(f"request failed: {exc}", file=sys.stderr)
    elapsed = time.perf_counter() - t0
    out_dir = os.environ.get("RSI_OUTPUT_DIR")
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "answers.txt"), "w") as fh:
            fh.write("\n".join(answers) + "\n")
    result = {
        "metrics": {"throughput": len(inputs) / elapsed},
        "outputs": {"answers": answers},
        "counts": {"requests": len(inputs), "failed": failed},
    }
    with open(os.environ["RSI_RESULT"], "w") as fh:
        json.dump(result, fh)


if __name__ == "__main__":
    main()
