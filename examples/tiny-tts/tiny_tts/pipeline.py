"""The synthesis engine: text in, audio chunks out (``tiny_tts.server`` serves
it over HTTP).

Per request: encode the text, then decode codec tokens autoregressively and
vocode them chunk by chunk, so that the first audio leaves before the whole
utterance is decoded. Every request names its speaker (``style``: the
client's, drawn per request from the verifier's hidden seed); the speaker
encoder turns the speaker's reference clip into the embedding that conditions
the decoder and the vocoder, so the audio of a token is the model's work for
that request, never a fixed table. Each chunk's audio is 16-bit little-endian PCM at 16 kHz.
A background worker collects per-chunk statistics. Requests may run in
several threads at once: per-request state lives in ``synthesize``.
"""

from __future__ import annotations

import itertools
import queue
import sys
import threading
import time
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from . import ops
from .model import TinyTTS, reference_audio
from .settings import SETTINGS, Settings
from .text import FRAMES_PER_WORD, encode

CHUNK_FRAMES = 8  # codec frames per streamed chunk (160 ms of audio)
OUTPUT_GAIN = 0.9


@dataclass
class Chunk:
    codes: list[int]
    pcm: bytes  # 16-bit little-endian samples, len(codes) * HOP of them

    @property
    def samples(self) -> int:
        return len(self.pcm) // 2


@dataclass
class Stats:
    chunks: int = 0
    frames: int = 0
    samples: int = 0
    by_request: dict[int, int] = field(default_factory=dict)


def postprocess(samples: list[float], gain: float = OUTPUT_GAIN) -> list[float]:
    """Output gain and hard clipping to [-1, 1]."""
    return [max(-1.0, min(1.0, s * gain)) for s in samples]


def pcm16(samples: list[float]) -> bytes:
    """Samples in [-1, 1] -> 16-bit little-endian PCM."""
    out = array("h", [round(s * 32767) for s in samples])
    if sys.byteorder != "little":  # pragma: no cover - every host we run on is little-endian
        out.byteswap()
    return out.tobytes()


class TTSServer:
    def __init__(self, model: TinyTTS, settings: Settings = SETTINGS) -> None:
        torch.set_num_threads(max(1, int(settings.threads)))
        ops.configure(settings)
        self.model = model
        self.stats = Stats()
        self._events: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._stats_loop, name="tts-stats", daemon=True)
        self._worker.start()
        self._ids = itertools.count()  # request ids (next() is atomic: safe across threads)

    # -- background statistics -------------------------------------------------
    def _stats_loop(self) -> None:
        while not self._stop.is_set():
            try:
                rid, frames, samples = self._events.get_nowait()
            except queue.Empty:
                time.sleep(0.00005)  # nothing yet: poll again in 50 us
                continue
            self.stats.chunks += 1
            self.stats.frames += frames
            self.stats.samples += samples
            self.stats.by_request[rid] = self.stats.by_request.get(rid, 0) + samples

    def close(self) -> None:
        self._stop.set()
        self._worker.join(timeout=5)

    def __enter__(self) -> TTSServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- synthesis ---------------------------------------------------------------
    @torch.inference_mode()
    def synthesize(self, text: str, style: int = 0) -> Iterator[Chunk]:
        """Stream the utterance as chunks of codec tokens and audio, in the
        voice of speaker ``style``."""
        rid = next(self._ids)
        ids = encode(text)
        memory = self.model.encoder(torch.tensor([ids]))[0].tolist()  # rows for the decoder stage
        targets = alignment(ids)

        state = self.model.decoder.init_state()
        prev = self.model.decoder.BOS
        for start in range(0, len(targets), CHUNK_FRAMES):
            spk = self._speaker_embedding(style)
            codes, prev, state = self._decode(targets[start:start + CHUNK_FRAMES], prev, state, memory, spk)
            pcm = self._finish(self._vocode(codes, spk))
            self._events.put((rid, len(codes), len(pcm) // 2))
            yield Chunk(codes=codes, pcm=pcm)

    def _speaker_embedding(self, style: int) -> torch.Tensor:
        """The speaker embedding of the request's speaker (its reference clip)."""
        return self.model.speaker(reference_audio(style))

    def _decode(self, targets: list[int], prev: int, state: torch.Tensor, memory, spk: torch.Tensor):
        """Decode one chunk of codec tokens autoregressively (greedy)."""
        codes = []
        for target in targets:
            prev, state = self.model.decoder.step(prev, state, torch.as_tensor(memory), spk, target)
            codes.append(prev)
        return codes, prev, state

    def _vocode(self, codes: list[int], spk: torch.Tensor) -> torch.Tensor:
        """Codec tokens -> waveform, [len(codes) * HOP] samples."""
        frames = [self.model.vocoder(torch.tensor([code]), spk) for code in codes]
        return torch.cat(frames).view(-1)

    def _finish(self, audio: torch.Tensor) -> bytes:
        """Output stage: gain, clipping, 16-bit PCM."""
        return pcm16(postprocess(audio.tolist()))


def alignment(ids: list[int]) -> list[int]:
    """The aligned codec token of every frame: each word is spoken for
    FRAMES_PER_WORD frames."""
    return [w * FRAMES_PER_WORD + f for w in ids for f in range(FRAMES_PER_WORD)]
