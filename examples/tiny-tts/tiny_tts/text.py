"""Text side of the pipeline: a fixed word vocabulary, the prompt set, and the
mapping between words and codec tokens.

Every word owns ``FRAMES_PER_WORD`` consecutive codec tokens: word ``w`` is
spoken as tokens ``w*F, w*F+1, ..., w*F+F-1``. :func:`transcribe` turns a
codec-token stream back into words (a debugging aid: the benchmark's
transcripts come from the protected evaluator, which hears the words in the
audio, never from tokens the server reports).
"""

from __future__ import annotations

import random

WORDS: tuple[str, ...] = (
    "the", "a", "cat", "dog", "sat", "on", "mat", "ran", "to", "house",
    "big", "small", "red", "blue", "green", "sun", "moon", "star", "sky", "sea",
    "boat", "fish", "bird", "tree", "leaf", "wind", "rain", "snow", "cold", "warm",
    "day", "night", "light", "dark", "fast", "slow", "up", "down", "over", "under",
    "and", "but", "with", "from", "into", "near", "far", "old", "new", "good",
    "bad", "happy", "quiet", "loud", "sings", "reads", "walks", "sleeps", "eats", "sees",
    "river", "road", "town", "home",
)
assert len(WORDS) == 64
WORD_ID = {w: i for i, w in enumerate(WORDS)}

FRAMES_PER_WORD = 4
CODEBOOK = len(WORDS) * FRAMES_PER_WORD  # 256 codec tokens


def prompts(n: int, seed: int, min_words: int = 4, max_words: int = 8) -> list[str]:
    """The benchmark's request texts: deterministic for a given seed."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(min_words, max_words)
        out.append(" ".join(rng.choice(WORDS) for _ in range(k)))
    return out


def encode(text: str) -> list[int]:
    """Text to word ids (unknown words are an error: the vocabulary is closed)."""
    try:
        return [WORD_ID[w] for w in text.lower().split()]
    except KeyError as e:
        raise ValueError(f"word {e.args[0]!r} is not in the tiny-tts vocabulary") from None


def transcribe(codes: list[int]) -> str:
    """Recognize words in a codec-token stream: a word starts at its frame 0."""
    words = []
    for c in codes:
        if c % FRAMES_PER_WORD == 0:
            words.append(WORDS[c // FRAMES_PER_WORD])
    return " ".join(words)
