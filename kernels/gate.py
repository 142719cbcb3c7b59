"""The correctness gate: a variant is used for a key only after it matches a
float64 reference on fresh random inputs.

For each trial the operator draws new random inputs shaped like the call
(``Op.sample``; values are never zeros; trial 0 has the call's shape, the
others a shorter sequence and its odd neighbour), computes the reference in float64, runs the variant with its output
buffers pre-filled with NaN (see ``_alloc``), and checks: the same structure,
shapes and dtypes as the reference's, no NaN or Inf, ``|out - ref| <= atol +
rtol * |ref|`` with the tolerance of the dtype, and inputs left untouched.
Any exception is a failure too. ``check`` returns None or the reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from . import _alloc

if TYPE_CHECKING:  # pragma: no cover
    from .registry import Op, Variant

#: (atol, rtol) per dtype: the tolerance table of issue 5.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-5, 1.3e-6),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1e-3, 1.6e-2),
}

TRIALS = 3


def _flat(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flat(o)]
    raise TypeError(f"expected a tensor or a tuple of tensors, got {type(out).__name__}")


def compare(out: Any, ref: Any, dtype: torch.dtype) -> str | None:
    """None when out matches the float64 reference within dtype's tolerance."""
    outs, refs = _flat(out), _flat(ref)
    if len(outs) != len(refs):
        return f"returned {len(outs)} tensors, expected {len(refs)}"
    atol, rtol = TOLERANCES[dtype]
    for i, (o, r) in enumerate(zip(outs, refs, strict=True)):
        if tuple(o.shape) != tuple(r.shape):
            return f"output {i}: shape {tuple(o.shape)}, expected {tuple(r.shape)}"
        if o.dtype != dtype:
            return f"output {i}: dtype {o.dtype}, expected {dtype}"
        o64 = o.detach().to(torch.float64)  # compared on the output's device
        r64 = r.detach().to(device=o.device, dtype=torch.float64)
        bad = ~torch.isfinite(o64)
        if bad.any():
            return f"output {i}: {int(bad.sum())} of {o64.numel()} elements are NaN/Inf (unwritten?)"
        err = (o64 - r64).abs()
        over = err > atol + rtol * r64.abs()
        if over.any():
            j = int(torch.argmax(err - rtol * r64.abs()))
            return (
                f"output {i}: {int(over.sum())} of {o64.numel()} elements outside "
                f"atol={atol:g} rtol={rtol:g} (max abs err {float(err.max()):.3g}; "
                f"worst got {float(o64.flatten()[j]):.6g}, want {float(r64.flatten()[j]):.6g})"
            )
    return None


def _snapshot(args: tuple) -> list[tuple[int, torch.Tensor]]:
    return [(i, a.detach().clone()) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]


def check(op: Op, variant: Variant, args: tuple, *, trials: int = TRIALS, seed: int = 0) -> str | None:
    """Run the gate for one variant on inputs shaped like ``args``."""
    dtype = op.dtype_of(args)
    if dtype not in TOLERANCES:
        return f"no tolerance for dtype {dtype}"
    gen = torch.Generator().manual_seed(seed)
    ran = 0
    for trial in range(trials):
        sample = op.sample(args, gen, trial)
        if sample is None:
            continue
        why = variant.fits(sample)
        if why is not None:  # a neighbouring shape outside the variant's limits
            continue
        ref = op.ref64(*sample)
        before = _snapshot(sample)
        try:
            with _alloc.nan_filled(), torch.no_grad():
                out = variant.fn(*sample)
        except Exception as e:  # noqa: BLE001 - any exception fails the gate
            return f"raised {type(e).__name__}: {e}"
        why = compare(out, ref, dtype)
        if why is not None:
            return f"trial {trial} {op.describe(sample)}: {why}"
        for i, t in before:
            if not torch.equal(sample[i], t):
                return f"trial {trial}: modified its input argument {i}"
        ran += 1
    if ran == 0:
        return "no trial could run within the variant's limits"
    return None
