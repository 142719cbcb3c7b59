"""RMSNorm, with and without a fused residual add.

Arguments of every variant: ``(x, weight, eps, residual)``; residual is None
or a tensor shaped like x. Without residual the result is ``y``; with it,
``(y, h)`` where ``h = x + residual`` (rounded to x's dtype, the value the
next block adds to) and ``y = rms_norm(h)``. The weight has x's dtype and the
normalization is computed in fp32, as in HF Llama.

Variants: ``eager`` (the reference, HF Llama's RMSNorm), ``fused``
(``torch.nn.functional.rms_norm``, the add written into one buffer),
``compiled`` (torch.compile of the reference) and ``npu``
(``torch_npu.npu_rms_norm`` / ``npu_add_rms_norm``).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from .. import _alloc, _device
from ..registry import REGISTRY, Op, Variant, pow2_bucket

FLOATS = frozenset({torch.float32, torch.float64, torch.float16, torch.bfloat16})


def eager(x, weight, eps, residual):
    if residual is not None:
        x = x + residual
    h = x.to(torch.float32) if x.dtype != torch.float64 else x
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    y = weight * h.to(x.dtype)
    return y if residual is None else (y, x)


def ref64(x, weight, eps, residual):
    if residual is not None:
        h = (x + residual).to(torch.float64)  # the returned sum, as rounded to x's dtype
        s = x.to(torch.float64) + residual.to(torch.float64)
    else:
        h = s = x.to(torch.float64)
    y = weight.to(torch.float64) * h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return y if residual is None else (y, s)


def fused(x, weight, eps, residual):
    if residual is not None:
        h = _alloc.empty_like(x, memory_format=torch.contiguous_format)
        torch.add(x, residual, out=h)
        return F.rms_norm(h, (h.shape[-1],), weight, eps), h
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def _has_rms_norm() -> str | None:
    return None if hasattr(F, "rms_norm") else "this torch has no torch.nn.functional.rms_norm"


@functools.cache
def _compiled_fn():
    return torch.compile(eager, dynamic=True)


def compiled(x, weight, eps, residual):
    return _compiled_fn()(x, weight, eps, residual)


def npu_fits(args) -> str | None:
    x, weight, _eps, _residual = args
    if weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
        return "npu_rms_norm needs a 1-D weight over the last dimension"
    return None


def npu(x, weight, eps, residual):
    torch_npu = _device.torch_npu()
    if residual is None:
        return torch_npu.npu_rms_norm(x, weight, epsilon=eps)[0]
    y, _rstd, h = torch_npu.npu_add_rms_norm(x, residual, weight, epsilon=eps)
    return y, h


def key(args) -> tuple[str, str]:
    x, _weight, _eps, residual = args
    H = x.shape[-1]
    return ("residual" if residual is not None else "plain"), f"h{H}-t{pow2_bucket(x.numel() // max(1, H))}"


def _randn(shape, gen, dtype, device):
    t = torch.randn(tuple(shape), generator=gen, dtype=torch.float32)
    t = torch.where(t == 0, torch.full_like(t, 0.5), t)
    return t.to(dtype=dtype, device=device)


def sample(args, gen, trial):
    x, weight, eps, residual = args
    shape = list(x.shape)
    if trial >= 1 and len(shape) >= 2:  # fewer rows, then one more: cheap, odd
        shape[-2] = min(shape[-2], 32) + (trial - 1)
    xs = _randn(shape, gen, x.dtype, x.device) * 2
    w = (1 + 0.25 * _randn(weight.shape, gen, torch.float32, "cpu")).to(weight.dtype).to(weight.device)
    r = None if residual is None else _randn(shape, gen, residual.dtype, residual.device)
    return xs, w, eps, r


def describe(args) -> str:
    x, _weight, _eps, residual = args
    return f"x{tuple(x.shape)} {x.dtype}{' +residual' if residual is not None else ''}"


def bytes_moved(args) -> int:
    x, weight, _eps, residual = args
    n = 2 * x.nbytes + weight.nbytes
    return n if residual is None else n + 2 * x.nbytes  # read residual, write the sum


OP = REGISTRY.add_op(Op("rms_norm", key=key, ref64=ref64, sample=sample,
                        primary=lambda a: a[0], describe=describe))
OP.add(Variant("eager", eager, doc="the reference: HF Llama RMSNorm (fp32 math)"))
OP.add(Variant("fused", fused, priority=50, dtypes=FLOATS, available=_has_rms_norm,
               doc="torch.nn.functional.rms_norm; the residual add into one buffer"))
OP.add(Variant("compiled", compiled, priority=60, devices=frozenset({"cpu", "cuda"}), dtypes=FLOATS,
               available=lambda: _device.compiler_available(), jit=True, doc="torch.compile of the reference"))
OP.add(Variant("npu", npu, priority=100, devices=frozenset({"npu"}),
               dtypes=frozenset({torch.float32, torch.float16, torch.bfloat16}),
               available=lambda: _device.npu_available(), fits=npu_fits,
               doc="torch_npu.npu_rms_norm / npu_add_rms_norm"))


def rms_norm(x, weight, eps=1e-6, residual=None):
    """RMSNorm of x (or of x + residual, returning (y, x + residual))."""
    if weight.shape[-1] != x.shape[-1]:
        raise ValueError(f"weight {tuple(weight.shape)} does not match x {tuple(x.shape)}")
    if residual is not None and residual.shape != x.shape:
        raise ValueError(f"residual {tuple(residual.shape)} does not match x {tuple(x.shape)}")
    if weight.dtype != x.dtype:
        weight = weight.to(x.dtype)
    if residual is not None and residual.dtype != x.dtype:
        residual = residual.to(x.dtype)
    return REGISTRY.call("rms_norm", (x, weight, float(eps), residual))
