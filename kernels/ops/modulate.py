"""adaLN modulation for DiT blocks.

``modulate(x, shift, scale) = x * (1 + scale) + shift``; arguments of every
variant ``(x, shift, scale)``, already broadcastable to x (the public function
turns DiT's per-sample [B, C] into [B, 1, C] when x is [B, T, C]).

``layer_norm_modulate(x, shift, scale, eps)`` is DiT's
``modulate(LayerNorm(x, no affine), shift, scale)``; when shift and scale are
one vector per channel (batch 1, or shared across the batch) it is exactly a
LayerNorm with ``weight = 1 + scale, bias = shift``, the fused LayerNorm the
NPU (and every device) has: variant ``affine``.

The adaLN parameters themselves (``SharedAdaLN`` in kernels.adaln) are computed
once per timestep for all blocks, not once per block.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from .. import _device
from ..registry import REGISTRY, Op, Variant, pow2_bucket

FLOATS = frozenset({torch.float32, torch.float64, torch.float16, torch.bfloat16})
HALVES = (torch.float16, torch.bfloat16)


def _layout(x, shift, scale) -> str:
    C = x.shape[-1]
    return "shared" if shift.numel() == C and scale.numel() == C else "per-sample"


def _randn(shape, gen, dtype, device):
    t = torch.randn(tuple(shape), generator=gen, dtype=torch.float32)
    t = torch.where(t == 0, torch.full_like(t, 0.5), t)
    return t.to(dtype=dtype, device=device)


def _sample_xss(x, shift, scale, gen, trial):
    shape = list(x.shape)
    if trial >= 1 and len(shape) >= 3:  # fewer tokens, then one more: cheap, odd
        shape[-2] = min(shape[-2], 32) + (trial - 1)
    xs = _randn(shape, gen, x.dtype, x.device)
    sh = _randn(shift.shape, gen, shift.dtype, shift.device)
    sc = (0.3 * _randn(scale.shape, gen, torch.float32, "cpu")).to(scale.dtype).to(scale.device)
    return xs, sh, sc


def _rows(x) -> int:
    return x.numel() // max(1, x.shape[-1])


# ---- modulate -----------------------------------------------------------------
def mod_eager(x, shift, scale):
    return x * (1 + scale) + shift


def mod_ref64(x, shift, scale):
    x, shift, scale = (t.to(torch.float64) for t in (x, shift, scale))
    return x * (1 + scale) + shift


def mod_addcmul(x, shift, scale):
    if x.dtype in HALVES:  # opmath: one rounding
        return torch.addcmul(shift.float(), x.float(), scale.float() + 1).to(x.dtype)
    return torch.addcmul(shift, x, scale + 1)


@functools.cache
def _mod_compiled_fn():
    def f(x, shift, scale):
        return (x.float() * (1 + scale.float()) + shift.float()).to(x.dtype)

    return torch.compile(f, dynamic=True)


def mod_compiled(x, shift, scale):
    return _mod_compiled_fn()(x, shift, scale)


def mod_key(args):
    x, shift, scale = args
    return _layout(x, shift, scale), f"c{x.shape[-1]}-t{pow2_bucket(_rows(x))}"


def mod_sample(args, gen, trial):
    return _sample_xss(*args, gen, trial)


def mod_describe(args):
    x, shift, _scale = args
    return f"x{tuple(x.shape)} shift{tuple(shift.shape)} {x.dtype}"


def mod_bytes(args):
    x, shift, scale = args
    return 2 * x.nbytes + shift.nbytes + scale.nbytes


MOD = REGISTRY.add_op(Op("modulate", key=mod_key, ref64=mod_ref64, sample=mod_sample,
                         primary=lambda a: a[0], describe=mod_describe))
MOD.add(Variant("eager", mod_eager, doc="the reference: x * (1 + scale) + shift"))
MOD.add(Variant("addcmul", mod_addcmul, priority=50, dtypes=FLOATS, doc="torch.addcmul(shift, x, 1 + scale)"))
MOD.add(Variant("compiled", mod_compiled, priority=60, devices=frozenset({"cpu", "cuda"}), dtypes=FLOATS,
                available=lambda: _device.compiler_available(), jit=True, doc="torch.compile, fp32 math"))


# ---- LayerNorm + modulate -------------------------------------------------------
def ln_eager(x, shift, scale, eps):
    return mod_eager(F.layer_norm(x, (x.shape[-1],), eps=eps), shift, scale)


def ln_ref64(x, shift, scale, eps):
    x, shift, scale = (t.to(torch.float64) for t in (x, shift, scale))
    return F.layer_norm(x, (x.shape[-1],), eps=eps) * (1 + scale) + shift


def affine_fits(args) -> str | None:
    x, shift, scale, _eps = args
    if _layout(x, shift, scale) != "shared":
        return "LayerNorm's affine needs one shift/scale vector per channel (batch 1 or shared)"
    return None


def ln_affine(x, shift, scale, eps):
    C = x.shape[-1]
    if x.dtype in HALVES:  # fp32 weight and bias (mixed-dtype LayerNorm): 1 + scale unrounded
        return F.layer_norm(x, (C,), weight=1 + scale.reshape(C).float(),
                            bias=shift.reshape(C).float(), eps=eps)
    return F.layer_norm(x, (C,), weight=1 + scale.reshape(C), bias=shift.reshape(C), eps=eps)


@functools.cache
def _ln_compiled_fn():
    def f(x, shift, scale, eps):
        h = F.layer_norm(x.float(), (x.shape[-1],), eps=eps)
        return (h * (1 + scale.float()) + shift.float()).to(x.dtype)

    return torch.compile(f, dynamic=True)


def ln_compiled(x, shift, scale, eps):
    return _ln_compiled_fn()(x, shift, scale, eps)


def ln_key(args):
    x, shift, scale, _eps = args
    return _layout(x, shift, scale), f"c{x.shape[-1]}-t{pow2_bucket(_rows(x))}"


def ln_sample(args, gen, trial):
    x, shift, scale, eps = args
    return (*_sample_xss(x, shift, scale, gen, trial), eps)


def ln_describe(args):
    return mod_describe(args[:3])


def ln_bytes(args):
    return mod_bytes(args[:3])


LN = REGISTRY.add_op(Op("layer_norm_modulate", key=ln_key, ref64=ln_ref64, sample=ln_sample,
                        primary=lambda a: a[0], describe=ln_describe))
LN.add(Variant("eager", ln_eager, doc="the reference: modulate(layer_norm(x), shift, scale)"))
LN.add(Variant("affine", ln_affine, priority=50, dtypes=FLOATS, fits=affine_fits,
               doc="layer_norm(x, weight=1+scale, bias=shift): the fused LayerNorm (NPU's path)"))
LN.add(Variant("compiled", ln_compiled, priority=60, devices=frozenset({"cpu", "cuda"}), dtypes=FLOATS,
               available=lambda: _device.compiler_available(), jit=True, doc="torch.compile, fp32 math"))


# ---- public -------------------------------------------------------------------
def _dit_broadcast(x, shift, scale):
    if x.dim() >= 3 and shift.dim() == 2:  # DiT: per-sample [B, C] against [B, T, C]
        shift = shift.unsqueeze(1)
    if x.dim() >= 3 and scale.dim() == 2:
        scale = scale.unsqueeze(1)
    if shift.dtype != x.dtype:
        shift = shift.to(x.dtype)
    if scale.dtype != x.dtype:
        scale = scale.to(x.dtype)
    try:
        torch.broadcast_shapes(x.shape, shift.shape, scale.shape)
    except RuntimeError as e:
        raise ValueError(f"shift {tuple(shift.shape)} / scale {tuple(scale.shape)} do not broadcast to x {tuple(x.shape)}") from e
    return shift, scale


def modulate(x, shift, scale):
    """``x * (1 + scale) + shift``; [B, C] shift/scale apply per sample to [B, T, C] x."""
    shift, scale = _dit_broadcast(x, shift, scale)
    return REGISTRY.call("modulate", (x, shift, scale))


def layer_norm_modulate(x, shift, scale, eps=1e-6):
    """``modulate(layer_norm(x), shift, scale)`` (DiT's norm + adaLN), fused where it can be."""
    shift, scale = _dit_broadcast(x, shift, scale)
    return REGISTRY.call("layer_norm_modulate", (x, shift, scale, float(eps)))
