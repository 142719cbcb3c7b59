"""The workload: answer a request text with a keyed digest of it.

Each request builds the mixing table from scratch, although the table never
changes: the known slow path that an honest patch removes.
"""

TABLE_SIZE = 48_000
ROUNDS = 2700


def build_table() -> list[int]:
    return [(i * 2654435761 + 12345) % 4294967296 for i in range(TABLE_SIZE)]


def digest(text: str, table: list[int]) -> int:
    h = 2166136261
    data = text.encode()
    for r in range(ROUNDS):
        for ch in data:
            h = (table[(h ^ ch ^ r) % TABLE_SIZE] + (h >> 7)) % 4294967296
    return h


def answer(text: str) -> str:
    table = build_table()
    return f"{text} {digest(text, table):08x}"
