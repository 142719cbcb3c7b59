"""The protected side's own copy of what tiny-tts speaks: the vocabulary, the
token layout and the tone table. ``bench/client.py`` draws request texts from
it and ``bench/evaluate.py`` recognises words with it; neither imports the
candidate's ``tiny_tts`` package, so a candidate that edits its own tables
cannot move the yardstick.

Layout (the same as ``tiny_tts.text`` and ``tiny_tts.model``): word ``w`` is
spoken as ``FRAMES_PER_WORD`` codec tokens ``w*F .. w*F+F-1``, one per 20 ms
frame of ``HOP`` samples at ``SAMPLE_RATE``; token ``c`` sounds as a low tone
``TONE_LOW_HZ + TONE_STEP_HZ * (c // 16)`` plus a high tone
``TONE_HIGH_HZ + TONE_STEP_HZ * (c % 16)``.
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
FRAMES_PER_WORD = 4
CODEBOOK = len(WORDS) * FRAMES_PER_WORD  # 256
SAMPLE_RATE = 16_000
HOP = 320
TONE_LOW_HZ, TONE_HIGH_HZ, TONE_STEP_HZ = 400.0, 2400.0, 100.0
TONES_PER_GROUP = 16
MAX_STYLE = 2**31 - 1  # speakers (styles) are 0 .. MAX_STYLE, as in tiny_tts.model


def prompts(n: int, seed: int, min_words: int = 4, max_words: int = 8) -> list[str]:
    """``n`` request texts drawn from the vocabulary: deterministic for a seed."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(min_words, max_words)
        out.append(" ".join(rng.choice(WORDS) for _ in range(k)))
    return out


def styles(n: int, seed: int) -> list[int]:
    """``n`` speakers (styles), one per request: deterministic for a seed (a
    stream of its own: the texts do not move when this changes), unknown to
    the server until each request names its own."""
    rng = random.Random(f"tiny-tts styles {seed}")
    return [rng.randint(0, MAX_STYLE) for _ in range(n)]


def words_from_tokens(tokens: list[int | None]) -> list[str]:
    """Codec tokens, one per frame (None: no token heard), -> words: a word
    is heard where its first frame's token is."""
    return [WORDS[t // FRAMES_PER_WORD] for t in tokens
            if t is not None and t % FRAMES_PER_WORD == 0]
