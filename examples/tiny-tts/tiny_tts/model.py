"""The networks: text encoder (RoPE attention), speaker encoder, autoregressive
codec-token decoder and a frame-wise vocoder. Weights are random but seeded, so
every run of the server synthesizes the same tokens and the same audio.

The vocoder renders every codec token as a token-specific pair of tones
(:func:`tone_pair`, DTMF-like) under a quieter texture from its network: the
audio itself carries the words, so a listener (rsi-bot's protected evaluator
in ``bench/evaluate.py``) recognises them from the waveform alone.

The decoder is steered by a monotonic alignment (each word is spoken for
``FRAMES_PER_WORD`` frames), as in duration-guided TTS models: the random
network contributes the acoustic detail, the alignment keeps it intelligible.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from . import ops
from .text import CODEBOOK, FRAMES_PER_WORD, WORDS

D_MODEL = 128
N_HEADS = 4
HEAD_DIM = D_MODEL // N_HEADS
SAMPLE_RATE = 16_000
HOP = 320  # samples per codec frame (50 frames per second)
ALIGN_BIAS = 12.0  # logit bonus of the aligned token; random logits have std ~1
TONE_LOW_HZ, TONE_HIGH_HZ, TONE_STEP_HZ = 400.0, 2400.0, 100.0  # 16 low and 16 high tones
TONE_AMPLITUDE = 0.3  # per tone
TEXTURE_AMPLITUDE = 0.06  # RMS of the vocoder network's part of a frame (tones: 0.3)
SPEAKER_GAIN = 8.0  # the speaker's FiLM: modulations of order 1, so each speaker has its own texture


def rope_tables(seq_len: int, dim: int, base: float = 10_000.0) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    freqs = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv)
    emb = torch.cat([freqs, freqs], dim=-1)  # HF half-split convention
    return emb.cos(), emb.sin()


class EncoderLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(D_MODEL)
        self.qkv = nn.Linear(D_MODEL, 3 * D_MODEL)
        self.out = nn.Linear(D_MODEL, D_MODEL)
        self.norm2 = nn.LayerNorm(D_MODEL)
        self.mlp = nn.Sequential(nn.Linear(D_MODEL, 4 * D_MODEL), nn.GELU(), nn.Linear(4 * D_MODEL, D_MODEL))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, N_HEADS, HEAD_DIM).unbind(2)
        q, k = ops.rope(q, k, cos, sin)  # [B, S, N, D]
        att = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        x = x + self.out(att.transpose(1, 2).reshape(b, s, D_MODEL))
        return x + self.mlp(self.norm2(x))


class TextEncoder(nn.Module):
    def __init__(self, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(len(WORDS), D_MODEL)
        self.layers = nn.ModuleList(EncoderLayer() for _ in range(layers))
        self.norm = nn.LayerNorm(D_MODEL)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # [B, S] -> [B, S, D]
        x = self.embed(ids)
        cos, sin = rope_tables(ids.shape[1], HEAD_DIM)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x)


class SpeakerEncoder(nn.Module):
    """Reference audio -> a unit-norm speaker embedding (a small conv stack,
    its pooled features standardized against a population of speakers, as
    x-vector systems do: what sets one speaker apart, not what all share)."""

    def __init__(self) -> None:
        super().__init__()
        self.convs = nn.Sequential(
            nn.Conv1d(1, 32, 16, stride=8), nn.ReLU(),
            nn.Conv1d(32, 96, 8, stride=4), nn.ReLU(),
            nn.Conv1d(96, 128, 4, stride=2), nn.ReLU(),
        )
        self.proj = nn.Linear(128, D_MODEL)
        self.register_buffer("center", torch.zeros(128))
        self.register_buffer("spread", torch.ones(128))

    def pooled(self, wav: torch.Tensor) -> torch.Tensor:  # [T] -> [128]
        return self.convs(wav.view(1, 1, -1)).mean(-1).view(-1)

    def standardize(self, clips: list[torch.Tensor]) -> None:
        """Set the population statistics from reference clips of many speakers."""
        h = torch.stack([self.pooled(c) for c in clips])
        self.center.copy_(h.mean(0))
        self.spread.copy_(h.std(0) + 1e-6)

    def forward(self, wav: torch.Tensor) -> torch.Tensor:  # [T] -> [D]
        h = (self.pooled(wav) - self.center) / self.spread
        return F.normalize(self.proj(h), dim=-1).view(-1)


class CodecDecoder(nn.Module):
    """One autoregressive step: previous token, state, text memory -> logits."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(CODEBOOK + 1, D_MODEL)  # last id: BOS
        self.spk = nn.Linear(D_MODEL, D_MODEL)
        self.cell = nn.GRUCell(D_MODEL, 2 * D_MODEL)
        self.q = nn.Linear(2 * D_MODEL, D_MODEL)
        self.kv = nn.Linear(D_MODEL, 2 * D_MODEL)
        self.head = nn.Sequential(nn.Linear(3 * D_MODEL, 4 * D_MODEL), nn.GELU(), nn.Linear(4 * D_MODEL, CODEBOOK))

    BOS = CODEBOOK

    def init_state(self) -> torch.Tensor:
        return torch.zeros(1, 2 * D_MODEL)

    def step(self, prev: int, state: torch.Tensor, memory: torch.Tensor, spk: torch.Tensor,
             target: int) -> tuple[int, torch.Tensor]:
        """``memory``: [S, D] encoder states; ``target``: the aligned token id."""
        x = self.embed(torch.tensor([prev])) + self.spk(spk)
        state = self.cell(x, state)
        k, v = self.kv(memory).chunk(2, dim=-1)
        att = torch.softmax(self.q(state) @ k.T / math.sqrt(D_MODEL), dim=-1) @ v
        logits = self.head(torch.cat([state, att], dim=-1)).view(-1)
        logits = logits / logits.std()
        logits[target] += ALIGN_BIAS
        return int(torch.argmax(logits)), state


def tone_pair(code: int) -> tuple[float, float]:
    """The two frequencies (Hz) that carry codec token ``code``: a low tone
    from its row (``code // 16``) and a high tone from its column
    (``code % 16``), DTMF-style. Every frequency is a multiple of 50 Hz, so a
    20 ms frame holds whole periods and a listener can tell the token from one
    frame's spectrum."""
    return TONE_LOW_HZ + TONE_STEP_HZ * (code // 16), TONE_HIGH_HZ + TONE_STEP_HZ * (code % 16)


def tone_table() -> torch.Tensor:
    """[CODEBOOK, HOP]: the tone pair of every codec token over one frame."""
    t = torch.arange(HOP, dtype=torch.float64) / SAMPLE_RATE
    rows = []
    for code in range(CODEBOOK):
        lo, hi = tone_pair(code)
        rows.append(TONE_AMPLITUDE * (torch.sin(2 * math.pi * lo * t) + torch.sin(2 * math.pi * hi * t)))
    return torch.stack(rows).float()


class Vocoder(nn.Module):
    """Codec frames -> waveform, frame by frame (no overlap between frames):
    [N] token ids -> [N, HOP] samples.

    Each frame is the token's tone pair (what makes the words audible) plus a
    speaker-conditioned texture from a small upsampling network, quieter than
    the tones: the same token sounds different for every speaker, so no table
    of token audio stands in for the network."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(CODEBOOK, D_MODEL)
        self.film = nn.Linear(D_MODEL, 2 * D_MODEL)
        self.inp = nn.Linear(D_MODEL, 256)
        ups = []
        for cin, cout, r in ((256, 128, 4), (128, 64, 4), (64, 32, 4), (32, 16, 5)):
            # no biases: with them, a random network's output is their pattern whatever
            # its input; without, the texture follows the token and the speaker
            ups += [nn.ConvTranspose1d(cin, cout, r, stride=r, bias=False), nn.GELU(),
                    nn.Conv1d(cout, cout, 1, bias=False), nn.GELU()]
        self.ups = nn.Sequential(*ups)
        self.out = nn.Conv1d(16, 1, 1, bias=False)
        self.register_buffer("tones", tone_table(), persistent=False)

    def forward(self, codes: torch.Tensor, spk: torch.Tensor) -> torch.Tensor:
        scale, shift = (SPEAKER_GAIN * self.film(spk)).chunk(2, dim=-1)
        h = self.embed(codes) * (1 + scale) + shift
        h = self.inp(h).view(-1, 256, 1)
        texture = self.out(self.ups(h)).view(codes.shape[0], HOP)
        texture = texture - texture.mean(-1, keepdim=True)
        texture = texture / (texture.pow(2).mean(-1, keepdim=True).sqrt() + 1e-6)  # unit RMS per frame
        return self.tones[codes] + TEXTURE_AMPLITUDE * texture


class TinyTTS(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = TextEncoder()
        self.speaker = SpeakerEncoder()
        self.decoder = CodecDecoder()
        self.vocoder = Vocoder()


def build(seed: int = 0) -> TinyTTS:
    """The model with seeded random weights (no downloads), in eval mode."""
    torch.manual_seed(seed)
    model = TinyTTS().eval()
    for p in model.parameters():
        p.requires_grad_(False)
    with torch.no_grad():  # a population of speakers no request names (styles are >= 0)
        model.speaker.standardize([reference_audio(-1 - i) for i in range(POPULATION)])
    return model


MAX_STYLE = 2**31 - 1
"""Speakers (styles) are 0 .. MAX_STYLE: far too many to tabulate the audio of."""
POPULATION = 16
"""Speakers the speaker encoder is standardized against at build time."""


def reference_audio(seed: int = 0, seconds: float = 3.0) -> torch.Tensor:
    """The reference clip of speaker ``seed`` (a style): a few harmonics of
    its own pitch + its own noise, deterministic per speaker."""
    g = torch.Generator().manual_seed(seed + 2**32)  # seeds >= 0, for the population's too
    t = torch.arange(int(SAMPLE_RATE * seconds), dtype=torch.float32) / SAMPLE_RATE
    f0 = 90.0 + (seed * 7919) % 120
    wav = sum(torch.sin(2 * math.pi * f0 * h * t) / h for h in range(1, 6))
    return 0.3 * wav + 0.02 * torch.randn(t.shape, generator=g)


__all__ = ["FRAMES_PER_WORD", "HOP", "MAX_STYLE", "SAMPLE_RATE", "TinyTTS", "build", "reference_audio", "tone_pair"]
