"""Output allocation for variants that write into buffers of their own.

Variants allocate through ``empty_like`` / ``empty`` here rather than through
torch directly. While the correctness gate runs a variant, these return
buffers filled with NaN, so an element that the variant forgot to write shows
up as NaN in the comparison instead of passing by luck with stale memory.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

_state = threading.local()


def _nan() -> bool:
    return getattr(_state, "nan", False)


def empty_like(x: torch.Tensor, **kwargs) -> torch.Tensor:
    if _nan():
        return torch.full_like(x, float("nan"), **kwargs)
    return torch.empty_like(x, **kwargs)


def empty(shape, *, dtype: torch.dtype, device) -> torch.Tensor:
    if _nan():
        return torch.full(tuple(shape), float("nan"), dtype=dtype, device=device)
    return torch.empty(tuple(shape), dtype=dtype, device=device)


@contextlib.contextmanager
def nan_filled() -> Iterator[None]:
    """Within this block, new output buffers are filled with NaN."""
    prev = _nan()
    _state.nan = True
    try:
        yield
    finally:
        _state.nan = prev
