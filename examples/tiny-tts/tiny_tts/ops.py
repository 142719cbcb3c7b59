"""Operators the model takes from rsi-bot's ``kernels`` package.

``rope_variant`` in settings.toml picks the RoPE implementation through the
kernels package's documented switch (``RSI_KERNEL_ROPE=<variant>``), which
:func:`configure` sets when the server starts (an explicit environment setting
wins). Without the kernels package (a bare checkout), an eager RoPE is used and
the knob has no effect.
"""

from __future__ import annotations

import os

import torch

from .settings import Settings

try:
    from kernels import rope as _kernel_rope
except ImportError:  # pragma: no cover - depends on the environment
    _kernel_rope = None

BACKEND = "kernels" if _kernel_rope is not None else "builtin-eager"


def configure(settings: Settings) -> None:
    """Apply the operator knobs to this process."""
    if settings.rope_variant:
        os.environ.setdefault("RSI_KERNEL_ROPE", settings.rope_variant)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


def _eager_rope(q, k, cos, sin):
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]  # BSND
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """Rotary embedding of q, k in BSND layout (HF half-split tables)."""
    if _kernel_rope is not None:
        return _kernel_rope(q, k, cos, sin, layout="BSND")
    return _eager_rope(q, k, cos, sin)
