"""Writes the benchmark protocol JSON to ``$RSI_RESULT`` (and the answers as
a file in ``$RSI_OUTPUT_DIR`` when the verifier gives one)."""

import json
import os


def write_result(elapsed: float, answers: list[str], requests: int) -> None:
    out_dir = os.environ.get("RSI_OUTPUT_DIR")
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "answers.txt"), "w") as fh:
            fh.write("\n".join(answers) + "\n")
    result = {
        "metrics": {"throughput": requests / elapsed},
        "outputs": {"answers": answers},
        "counts": {"requests": requests, "failed": 0},
    }
    with open(os.environ["RSI_RESULT"], "w") as fh:
        json.dump(result, fh)
