"""adaLN parameters for DiT blocks, computed once per timestep.

In DiT every block maps the conditioning ``c`` (timestep + class embedding)
through its own ``SiLU -> Linear(C, 6C)`` to shift/scale/gate for attention
and MLP. ``c`` does not change within a denoising step, so the blocks' linears
can run as one GEMM over their stacked weights, once per step, and each block
reads its slice: ``SharedAdaLN``. ``adaln_chunks`` is the per-block form.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F


def adaln_chunks(c: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                 chunks: int = 6) -> tuple[torch.Tensor, ...]:
    """``Linear(SiLU(c)).chunk(chunks, -1)``: one block's shift/scale/gate..."""
    return F.linear(F.silu(c), weight, bias).chunk(chunks, dim=-1)


def gated_residual(x: torch.Tensor, gate: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``x + gate * y`` in one pass; a [B, C] gate applies per sample to [B, T, C]."""
    if x.dim() >= 3 and gate.dim() == 2:
        gate = gate.unsqueeze(1)
    return torch.addcmul(x, gate, y)


class SharedAdaLN:
    """All blocks' adaLN linears as one GEMM, computed once per conditioning.

    ``linears`` are the blocks' ``nn.Linear`` (or ``(weight, bias)`` pairs),
    each mapping C to ``chunks * C``. ``shared(c)`` returns one tuple of
    ``chunks`` tensors per block; calling it again with the same ``c`` (same
    tensor, unmodified) returns the same result without recomputing, so each
    block may call it, or the model calls it once per step and hands slices out.
    The stacked weight is rebuilt when a block's weight changes (``_version``).
    """

    def __init__(self, linears: Sequence, chunks: int = 6):
        self._params = [(m.weight, m.bias) if hasattr(m, "weight") else tuple(m) for m in linears]
        if not self._params:
            raise ValueError("SharedAdaLN needs at least one linear")
        self.chunks = chunks
        self._stack_key: tuple | None = None
        self._w: torch.Tensor | None = None
        self._b: torch.Tensor | None = None
        self._memo: tuple | None = None

    def _stacked(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        key = tuple((w.data_ptr(), w._version, None if b is None else (b.data_ptr(), b._version))
                    for w, b in self._params)
        if key != self._stack_key:
            with torch.no_grad():
                self._w = torch.cat([w for w, _ in self._params], dim=0)
                biases = [b if b is not None else torch.zeros(w.shape[0], dtype=w.dtype, device=w.device)
                          for w, b in self._params]
                self._b = torch.cat(biases) if any(b is not None for _, b in self._params) else None
            self._stack_key = key
        return self._w, self._b  # type: ignore[return-value]

    def __call__(self, c: torch.Tensor) -> list[tuple[torch.Tensor, ...]]:
        w, b = self._stacked()
        memo_key = (id(c), c.data_ptr(), c._version, tuple(c.shape), self._stack_key)
        if self._memo is not None and self._memo[0] == memo_key:
            return self._memo[1]
        out = F.linear(F.silu(c), w, b)
        per_block = out.chunk(len(self._params), dim=-1)
        result = [blk.chunk(self.chunks, dim=-1) for blk in per_block]
        self._memo = (memo_key, result, c)  # keep c alive so id(c) stays unique
        return result
