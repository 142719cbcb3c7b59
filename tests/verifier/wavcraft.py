"""WAV files as a candidate can write them, for the quality guards' bounds
(tests/verifier/test_quality_bounds.py and benchmarks/untrusted_outputs.py):
any header field, a data chunk claiming any size, junk chunks before it."""

from __future__ import annotations

import struct

import numpy as np


def wav_bytes(samples: bytes, *, rate: int = 16000, channels: int = 1, bits: int = 16,
              tag: int = 1, claim: int | None = None, junk_chunks: int = 0) -> bytes:
    """A WAV file as a candidate can write it: any header fields, a data
    chunk claiming ``claim`` bytes (default: what follows), ``junk_chunks``
    empty chunks before the data."""
    width = (bits + 7) // 8
    fmt = struct.pack("<HHIIHH", tag, channels, rate, (rate * channels * width) & 0xFFFFFFFF,
                      (channels * width) & 0xFFFF, bits)
    body = b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt
    body += (b"junk" + struct.pack("<I", 0)) * junk_chunks
    body += b"data" + struct.pack("<I", len(samples) if claim is None else claim) + samples
    return b"RIFF" + struct.pack("<I", min(len(body), 2**32 - 1)) + body


def pcm16(x: np.ndarray) -> bytes:
    """Samples in [-1, 1] (clipped) as 16-bit little-endian PCM."""
    return np.round(np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()
