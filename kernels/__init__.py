"""kernels: operator variants with a correctness gate and an autotuner.

Model code calls the plain functions below; each call is dispatched to the
fastest variant that passed the correctness gate for its key (operator,
device, dtype, layout, shape bucket), and to the reference otherwise. See
README.md, ``registry`` (dispatch and environment variables), ``gate`` and
``tuner``.

    q, k = kernels.rope(q, k, cos, sin, layout="BSND", interleaved=False)
    y = kernels.rms_norm(x, weight, eps=1e-6)
    y, h = kernels.rms_norm(x, weight, eps=1e-6, residual=r)   # h = x + r
    x = kernels.modulate(x, shift, scale)                      # x * (1 + scale) + shift

``RSI_KERNEL_<OP>=<variant>`` forces a variant (``RSI_KERNEL_ROPE=eager``).
"""

from __future__ import annotations

from .adaln import SharedAdaLN, adaln_chunks, gated_residual
from .ops.modulate import layer_norm_modulate, modulate
from .ops.norm import rms_norm
from .ops.rope import rope
from .registry import REGISTRY, Key, Op, Variant

__version__ = "0.1.0"

__all__ = [
    "REGISTRY",
    "Key",
    "Op",
    "SharedAdaLN",
    "Variant",
    "adaln_chunks",
    "gated_residual",
    "layer_norm_modulate",
    "modulate",
    "reset",
    "rms_norm",
    "rope",
    "variants",
]


def variants(op: str) -> list[str]:
    """The names of op's variants, the reference first."""
    return list(REGISTRY.ops[op].variants)


def reset() -> None:
    """Forget this process's per-key decisions (the cache file stays)."""
    REGISTRY.reset()
