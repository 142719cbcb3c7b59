"""The "model": each word of the prompt becomes ``word:<digest>``, streamed."""

from __future__ import annotations

from collections.abc import Iterator

ROUNDS = 9000
PASSES = 3  # the digest is recomputed on every pass: the last one is kept


def digest(word: str, rounds: int = ROUNDS) -> int:
    h = 0
    for i in range(rounds):
        for ch in word:
            h = (h * 31 + ord(ch) + i) % 1_000_003
    return h


def generate(prompt: str) -> Iterator[str]:
    for word in prompt.split():
        h = 0
        for _ in range(PASSES):
            h = digest(word)
        yield f"{word}:{h % 97} "
