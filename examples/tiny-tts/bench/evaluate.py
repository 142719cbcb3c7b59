"""tiny-tts evaluator: recognises the words in the audio itself (protected).

::

    python bench/evaluate.py [--input-dir $RSI_INPUT_DIR] [--result $RSI_RESULT]

Reads every ``*.wav`` in the input dir (the client's ``req-NNN.wav``, sorted
by name: the order of the requests), and writes to ``$RSI_RESULT`` (stdout
when unset)::

    {"outputs": {"transcripts": ["the cat sat", ...], "audio_samples": [...]},
     "metrics": {"tone_frames": 0.99}}

Recognition needs only the waveform and ``bench/vocab.py``: each 20 ms frame
is analysed with an FFT; a frame carries codec token ``16 * row + col`` when
its spectrum is dominated by one tone of the low group (``row``) and one of
the high group (``col``) and these two tones hold most of the frame's energy.
Silence, noise, or the wrong tones recognise no words or the wrong ones, so a
WER guard on these transcripts judges what was actually heard.
``tone_frames`` is the fraction of frames that carry a token.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import wave
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import vocab  # noqa: E402 - bench/vocab.py, next to this file

MIN_TONE = 0.05 * vocab.HOP / 2
"""FFT magnitude of a tone of amplitude 0.05 (of full scale): quieter is no tone."""
MIN_PEAK_RATIO = 2.0
"""A group's strongest tone must be this many times its runner-up."""
MIN_ENERGY_SHARE = 0.5
"""The two tones must hold at least this share of the frame's (non-DC) energy."""
MAX_WAV_BYTES = 64 * 1024 * 1024


def _bins(base_hz: float) -> np.ndarray:
    hz = base_hz + vocab.TONE_STEP_HZ * np.arange(vocab.TONES_PER_GROUP)
    return np.rint(hz * vocab.HOP / vocab.SAMPLE_RATE).astype(int)


LOW_BINS, HIGH_BINS = _bins(vocab.TONE_LOW_HZ), _bins(vocab.TONE_HIGH_HZ)


def read_wav(path: Path) -> np.ndarray:
    """A mono 16-bit WAV at the vocabulary's sample rate -> float samples in [-1, 1]."""
    if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_WAV_BYTES:
        raise ValueError(f"{path.name}: not a regular file under {MAX_WAV_BYTES} bytes")
    with wave.open(str(path), "rb") as w:
        if (w.getnchannels(), w.getsampwidth(), w.getframerate()) != (1, 2, vocab.SAMPLE_RATE):
            raise ValueError(f"{path.name}: expected mono 16-bit {vocab.SAMPLE_RATE} Hz, got "
                             f"{w.getnchannels()} ch, {8 * w.getsampwidth()} bit, {w.getframerate()} Hz")
        raw = w.readframes(w.getnframes())
    return np.frombuffer(raw, dtype="<i2").astype(np.float64) / 32767.0


def frame_tokens(samples: np.ndarray) -> list[int | None]:
    """The codec token heard in each whole frame (None: none)."""
    n = len(samples) // vocab.HOP
    if n == 0:
        return []
    spec = np.abs(np.fft.rfft(samples[: n * vocab.HOP].reshape(n, vocab.HOP), axis=1))
    energy = (spec[:, 1:] ** 2).sum(axis=1)
    out: list[int | None] = []
    for f in range(n):
        lo, hi = spec[f, LOW_BINS], spec[f, HIGH_BINS]
        row, col = int(lo.argmax()), int(hi.argmax())
        if not (_clear_peak(lo, row) and _clear_peak(hi, col)):
            out.append(None)
            continue
        share = (lo[row] ** 2 + hi[col] ** 2) / energy[f] if energy[f] > 0 else 0.0
        out.append(row * vocab.TONES_PER_GROUP + col if share >= MIN_ENERGY_SHARE else None)
    return out


def _clear_peak(mags: np.ndarray, i: int) -> bool:
    runner_up = np.partition(mags, -2)[-2]
    return bool(mags[i] >= MIN_TONE and mags[i] >= MIN_PEAK_RATIO * runner_up)


def transcribe(samples: np.ndarray) -> tuple[str, int, int]:
    """The words heard, the number of frames, and how many carried a token."""
    tokens = frame_tokens(samples)
    return " ".join(vocab.words_from_tokens(tokens)), len(tokens), sum(t is not None for t in tokens)


def evaluate(input_dir: Path) -> dict:
    files = sorted(p for p in input_dir.glob("*.wav"))
    transcripts, lengths, frames, toned = [], [], 0, 0
    for path in files:
        try:
            samples = read_wav(path)
        except (ValueError, EOFError, wave.Error) as e:
            print(f"evaluate: {e}", file=sys.stderr)
            transcripts.append("")
            lengths.append(0)
            continue
        text, n, k = transcribe(samples)
        transcripts.append(text)
        lengths.append(len(samples))
        frames += n
        toned += k
    return {
        "outputs": {"transcripts": transcripts, "audio_samples": lengths},
        "metrics": {"tone_frames": toned / frames if frames else 0.0},
        "meta": {"files": [p.name for p in files]},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input-dir", default=os.environ.get("RSI_INPUT_DIR", ""))
    p.add_argument("--result", default=os.environ.get("RSI_RESULT", ""))
    args = p.parse_args(argv)
    if not args.input_dir or not Path(args.input_dir).is_dir():
        p.error(f"no input dir (set $RSI_INPUT_DIR or --input-dir): {args.input_dir!r}")
    text = json.dumps(evaluate(Path(args.input_dir)), indent=1)
    if args.result:
        Path(args.result).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
