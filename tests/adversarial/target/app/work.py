"""The workload: answer a request text with a keyed digest of it.

Each request builds the mixing table from scratch, although the table never
changes: the known slow path that an honest patch removes.

Most of a request's wall time is waiting, not computing: building the table
waits ``BUILD_WAIT_S`` (as a read of it from disk would) and each digest
``DIGEST_WAIT_S`` (as a call to a remote model would). A wait does not stretch
when other processes compete for the CPU, so the wall-clock lenses
(throughput on the benchmark's own timer, served throughput) move far less
with the machine's load than a pure CPU loop would, and the honest patch's
gain sits near 1.6x on every lens, whatever the load: the waits removed and
the waits kept are in the same proportion as the CPU removed and kept. The
CPU part (the table and the rounds) is what ``cpu_s`` (cgroup CPU time) sees.
"""

import time

TABLE_SIZE = 48_000
ROUNDS = 900
BUILD_WAIT_S = 0.014
DIGEST_WAIT_S = 0.036


def build_table() -> list[int]:
    time.sleep(BUILD_WAIT_S)
    return [(i * 2654435761 + 12345) % 4294967296 for i in range(TABLE_SIZE)]


def digest(text: str, table: list[int]) -> int:
    h = 2166136261
    data = text.encode()
    for r in range(ROUNDS):
        for ch in data:
            h = (table[(h ^ ch ^ r) % TABLE_SIZE] + (h >> 7)) % 4294967296
    time.sleep(DIGEST_WAIT_S)
    return h


def answer(text: str) -> str:
    table = build_table()
    return f"{text} {digest(text, table):08x}"
