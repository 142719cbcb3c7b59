"""The protected reference answer (the base's slow path, kept apart from app/)."""

TABLE_SIZE = 48_000
ROUNDS = 900
_TABLE = [(i * 2654435761 + 12345) % 4294967296 for i in range(TABLE_SIZE)]


def answer(text: str) -> str:
    h = 2166136261
    data = text.encode()
    for r in range(ROUNDS):
        for ch in data:
            h = (_TABLE[(h ^ ch ^ r) % TABLE_SIZE] + (h >> 7)) % 4294967296
    return f"{text} {h:08x}"
