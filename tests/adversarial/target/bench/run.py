"""In-process benchmark: answers every request in this process and reports
throughput from its own timer (naively: the candidate's code runs here)."""

import os
import sys
import time

sys.path.insert(0, os.getcwd())

from app import work  # noqa: E402

from bench.inputs import make_inputs, seed  # noqa: E402
from bench.protocol import write_result  # noqa: E402

inputs = make_inputs(seed())
print("READY", flush=True)
answers = []
t0 = time.perf_counter()
for text in inputs:
    answers.append(work.answer(text))
elapsed = time.perf_counter() - t0
write_result(elapsed, answers, len(inputs))
