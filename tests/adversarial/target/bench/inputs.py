"""Request texts: from ``RSI_SEED`` (hidden in verification), 0 by default."""

import os
import random

REQUESTS = 24


def seed() -> int:
    return int(os.environ.get("RSI_SEED") or 0)


def make_inputs(seed_value: int, n: int = REQUESTS) -> list[str]:
    rng = random.Random(seed_value)
    return [f"req-{seed_value}-{i}-{rng.randrange(10**9):09d}" for i in range(n)]
