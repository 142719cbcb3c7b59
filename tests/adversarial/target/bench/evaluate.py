"""Protected evaluator: reads the answers a run left in ``$RSI_INPUT_DIR``
and scores them against the reference for the run's inputs (same seed)."""

import json
import os
import sys

sys.path.insert(0, os.getcwd())

from bench.inputs import make_inputs, seed  # noqa: E402
from bench.reference import answer  # noqa: E402


def main() -> None:
    inputs = make_inputs(seed())
    path = os.path.join(os.environ["RSI_INPUT_DIR"], "answers.txt")
    try:
        with open(path) as fh:
            got = fh.read().splitlines()
    except OSError:
        got = []
    correct = sum(1 for text, ans in zip(inputs, got, strict=False) if ans == answer(text))
    result = {
        "metrics": {"accuracy": correct / len(inputs)},
        "outputs": {"answers": got},
        "counts": {"requests": len(inputs), "failed": 0},
    }
    with open(os.environ["RSI_RESULT"], "w") as fh:
        json.dump(result, fh)


if __name__ == "__main__":
    main()
