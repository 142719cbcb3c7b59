"""RoPE: rotary position embedding of q and k.

Arguments of every variant: ``(q, k, cos, sin, layout, interleaved)``.
q, k are [B, S, N, D] ("BSND") or [B, N, S, D] ("BNSD"), k may have fewer
heads than q (GQA); cos, sin are [S, D] in the HF convention, of q's dtype:
each frequency duplicated as ``cat([f, f], -1)`` for the half-split pairing
(GPT-NeoX / HF: element i pairs with i + D/2) or ``repeat_interleave(f, 2)``
for the interleaved pairing (GPT-J / Meta: 2i pairs with 2i+1).

Variants: ``eager`` (the reference, rotate_half), ``realexpr`` (one real
expression on the two halves, computed in fp32), ``fused`` (x * cos straight
into the output buffer, then an addcmul per half with the sign folded into
sin; blocks sized for the cache; no cat, no rotated copy), ``complex`` (interleaved only, complex multiply;
CPU and CUDA: never on NPU), ``compiled`` (torch.compile of realexpr), ``npu``
(torch_npu.npu_rotary_mul) and ``triton`` (CUDA).
"""

from __future__ import annotations

import functools

import torch

from .. import _alloc, _device
from ..registry import REGISTRY, Op, Variant, pow2_bucket

LAYOUTS = ("BSND", "BNSD")
FLOATS = frozenset({torch.float32, torch.float64, torch.float16, torch.bfloat16})
HALVES = (torch.float16, torch.bfloat16)


def _tag(layout: str, interleaved: bool) -> str:
    return f"{layout}-{'interleaved' if interleaved else 'half'}"


def _bcast(t: torch.Tensor, layout: str) -> torch.Tensor:
    """[S, D] -> a view that broadcasts against q in this layout."""
    return t.unsqueeze(1) if layout == "BSND" else t


def _heads(x: torch.Tensor, layout: str) -> int:
    return x.shape[2] if layout == "BSND" else x.shape[1]


def _seq(x: torch.Tensor, layout: str) -> int:
    return x.shape[1] if layout == "BSND" else x.shape[2]


# ---- reference -------------------------------------------------------------
def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    x1 = x[..., 0::2]
    x2 = x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def eager(q, k, cos, sin, layout, interleaved):
    cos, sin = _bcast(cos, layout), _bcast(sin, layout)
    rot = rotate_every_two if interleaved else rotate_half
    return q * cos + rot(q) * sin, k * cos + rot(k) * sin


def ref64(q, k, cos, sin, layout, interleaved):
    d = [t.detach().to(torch.float64) for t in (q, k, cos, sin)]
    return eager(*d, layout, interleaved)


# ---- real-valued single expression -----------------------------------------
def _pairs(t: torch.Tensor, interleaved: bool):
    if interleaved:
        return t[..., 0::2], t[..., 1::2]
    h = t.shape[-1] // 2
    return t[..., :h], t[..., h:]


def _realexpr_one(x, cos, sin, interleaved: bool):
    x1, x2 = _pairs(x, interleaved)
    c1, c2 = _pairs(cos, interleaved)
    s1, s2 = _pairs(sin, interleaved)
    if interleaved:
        return torch.stack((x1 * c1 - x2 * s1, x2 * c2 + x1 * s2), dim=-1).flatten(-2)
    return torch.cat((x1 * c1 - x2 * s1, x2 * c2 + x1 * s2), dim=-1)


def realexpr(q, k, cos, sin, layout, interleaved):
    dtype = q.dtype
    if dtype in HALVES:  # opmath: one rounding at the end
        q, k, cos, sin = q.float(), k.float(), cos.float(), sin.float()
    cos, sin = _bcast(cos, layout), _bcast(sin, layout)
    return (_realexpr_one(q, cos, sin, interleaved).to(dtype),
            _realexpr_one(k, cos, sin, interleaved).to(dtype))


# ---- fused: preallocated output, mul + addcmul, no cat ------------------------
#: bytes of x per block and per intra-op thread: a block stays in cache
#: between the mul and the addcmuls, and blocks are few, because each op is a
#: parallel region and regions stall when the CPU is oversubscribed.
BLOCK_BYTES_PER_THREAD = 2 * 1024 * 1024


def _block_bytes() -> int:
    return BLOCK_BYTES_PER_THREAD * max(1, torch.get_num_threads())


def _fused_tables(cos, sin, interleaved):
    s1, s2 = _pairs(sin, interleaved)
    return cos, torch.neg(s1), s2


def _rotate_into(x, out, cos, ns1, s2, interleaved):
    """out = x * cos, then each half gets its partner times the sign-folded sin."""
    torch.mul(x, cos, out=out)
    x1, x2 = _pairs(x, interleaved)
    o1, o2 = _pairs(out, interleaved)
    o1.addcmul_(x2, ns1)
    o2.addcmul_(x1, s2)


def _fused_one(x, tables, layout, interleaved):
    """x rotated into a new buffer, block by block so each block stays in cache."""
    cos, ns1, s2 = tables  # [S, D], [S, D/2], [S, D/2]
    out = _alloc.empty_like(x, memory_format=torch.contiguous_format)
    S, es, block = _seq(x, layout), x.element_size(), _block_bytes()
    if x.numel() * es <= 2 * block:  # small (decode): one block
        _rotate_into(x, out, *(_bcast(t, layout) for t in tables), interleaved)
        return out
    if layout == "BSND":  # blocks of positions: [step, N, D] per batch row
        step = max(1, block // max(1, x[0, 0].numel() * es))
        cos, ns1, s2 = (t.unsqueeze(1) for t in tables)
        for b in range(x.shape[0]):
            for a in range(0, S, step):
                e = min(S, a + step)
                _rotate_into(x[b, a:e], out[b, a:e], cos[a:e], ns1[a:e], s2[a:e], interleaved)
        return out
    # BNSD: blocks of heads (each [S, D]), or of positions within a head when one is large
    if not x.is_contiguous():
        _rotate_into(x, out, cos, ns1, s2, interleaved)
        return out
    B, N, D = x.shape[0], x.shape[1], x.shape[-1]
    xg, og = x.view(B * N, S, D), out.view(B * N, S, D)
    per_head = S * D * es
    if per_head <= block:
        g = max(1, block // per_head)
        for a in range(0, B * N, g):
            _rotate_into(xg[a:a + g], og[a:a + g], cos, ns1, s2, interleaved)
        return out
    step = max(1, block // (D * es))
    for h in range(B * N):
        for a in range(0, S, step):
            e = min(S, a + step)
            _rotate_into(xg[h, a:e], og[h, a:e], cos[a:e], ns1[a:e], s2[a:e], interleaved)
    return out


def fused(q, k, cos, sin, layout, interleaved):
    tables = _fused_tables(cos, sin, interleaved)
    return _fused_one(q, tables, layout, interleaved), _fused_one(k, tables, layout, interleaved)


# ---- complex multiply (interleaved pairs are adjacent) ------------------------
def complex_mul(q, k, cos, sin, layout, interleaved):
    dtype = q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    freqs = torch.complex(cos[..., 0::2].to(work), sin[..., 0::2].to(work))
    freqs = _bcast(freqs, layout)

    def one(x):
        xc = torch.view_as_complex(x.to(work).reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * freqs).flatten(-2).to(dtype)

    return one(q), one(k)


# ---- torch.compile --------------------------------------------------------------
@functools.cache
def _compiled_fn():
    return torch.compile(realexpr, dynamic=True)


def compiled(q, k, cos, sin, layout, interleaved):
    return _compiled_fn()(q, k, cos, sin, layout, interleaved)


# ---- Ascend NPU ---------------------------------------------------------------
NPU_MAX_HEAD_DIM = 896  # exclusive
NPU_MAX_BATCH = 1000  # exclusive
NPU_MAX_HEADS = 1000  # exclusive


def npu_fits(args) -> str | None:
    q, k, cos, _sin, layout, _interleaved = args
    D = q.shape[-1]
    if D % 2 or D >= NPU_MAX_HEAD_DIM:
        return f"npu_rotary_mul needs an even head size under {NPU_MAX_HEAD_DIM}, got {D}"
    if q.shape[0] >= NPU_MAX_BATCH:
        return f"npu_rotary_mul needs batch under {NPU_MAX_BATCH}, got {q.shape[0]}"
    n = max(_heads(q, layout), _heads(k, layout))
    if n >= NPU_MAX_HEADS:
        return f"npu_rotary_mul needs heads under {NPU_MAX_HEADS}, got {n}"
    if q.is_complex() or k.is_complex() or cos.is_complex():
        return "no complex dtypes on NPU"
    return None


def npu(q, k, cos, sin, layout, interleaved):
    torch_npu = _device.torch_npu()
    mode = "interleave" if interleaved else "half"
    view = (1, -1, 1, cos.shape[-1]) if layout == "BSND" else (1, 1, -1, cos.shape[-1])
    c4, s4 = cos.reshape(view), sin.reshape(view)
    return (torch_npu.npu_rotary_mul(q, c4, s4, rotary_mode=mode),
            torch_npu.npu_rotary_mul(k, c4, s4, rotary_mode=mode))


# ---- Triton (CUDA) ------------------------------------------------------------
TRITON_MAX_HEAD_DIM = 1024


def triton_fits(args) -> str | None:
    q = args[0]
    D = q.shape[-1]
    if D % 2 or D > TRITON_MAX_HEAD_DIM:
        return f"the Triton kernel takes even head sizes up to {TRITON_MAX_HEAD_DIM}, got {D}"
    return None


def triton(q, k, cos, sin, layout, interleaved):
    from .. import _triton_rope  # imports triton: only here, on a CUDA machine

    return _triton_rope.rope(q, k, cos, sin, layout, interleaved)


# ---- keys, inputs, registration ---------------------------------------------
def key(args) -> tuple[str, str]:
    q, k, _cos, _sin, layout, interleaved = args
    B = q.shape[0]
    S = _seq(q, layout)
    return _tag(layout, interleaved), (
        f"d{q.shape[-1]}-nq{_heads(q, layout)}-nk{_heads(k, layout)}-t{pow2_bucket(B * S)}"
    )


def tables(S: int, D: int, interleaved: bool, *, dtype=torch.float32, device="cpu",
           offset: int = 0, base: float = 10000.0):
    """cos, sin [S, D] in the HF convention for positions offset..offset+S-1."""
    inv = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    ang = torch.outer(torch.arange(offset, offset + S, dtype=torch.float64), inv)
    if interleaved:
        ang = ang.repeat_interleave(2, dim=-1)
    else:
        ang = torch.cat((ang, ang), dim=-1)
    return ang.cos().to(dtype=dtype, device=device), ang.sin().to(dtype=dtype, device=device)


def _randn(shape, gen, dtype, device):
    t = torch.randn(tuple(shape), generator=gen, dtype=torch.float32)
    t = torch.where(t == 0, torch.full_like(t, 0.5), t)  # never zeros
    return t.to(dtype=dtype, device=device)


#: the gate's trial 0 uses the call's shape; trials 1 and 2 a sequence of at
#: most SMALL_SEQ positions and one more (cheap, and an odd length).
SMALL_SEQ = 32


def sample(args, gen: torch.Generator, trial: int):
    q, k, _cos, _sin, layout, interleaved = args
    S = _seq(q, layout)
    if trial >= 1:  # shorter and neighbouring shapes: odd lengths, tails of blocks
        S = min(S, SMALL_SEQ) + (trial - 1)
    qs, ks = list(q.shape), list(k.shape)
    s_dim = 1 if layout == "BSND" else 2
    qs[s_dim] = ks[s_dim] = S
    D = q.shape[-1]
    offset = int(torch.randint(0, 4096, (1,), generator=gen))
    c, s = tables(S, D, interleaved, dtype=q.dtype, device=q.device, offset=offset)
    return (_randn(qs, gen, q.dtype, q.device), _randn(ks, gen, k.dtype, k.device), c, s,
            layout, interleaved)


def describe(args) -> str:
    q, k, _cos, _sin, layout, interleaved = args
    return f"q{tuple(q.shape)} k{tuple(k.shape)} {q.dtype} {_tag(layout, interleaved)}"


def bytes_moved(args) -> int:
    q, k, cos, sin = args[:4]
    return 2 * (q.nbytes + k.nbytes) + cos.nbytes + sin.nbytes


OP = REGISTRY.add_op(Op("rope", key=key, ref64=ref64, sample=sample,
                        primary=lambda a: a[0], describe=describe))
OP.add(Variant("eager", eager, doc="the reference: rotate_half (or rotate_every_two)"))
OP.add(Variant("realexpr", realexpr, priority=20, dtypes=FLOATS,
               doc="one real expression on the two halves, computed in fp32"))
OP.add(Variant("fused", fused, priority=50, devices=frozenset({"cpu", "cuda"}),
               dtypes=frozenset({torch.float32, torch.float64}),
               doc="mul + addcmul into one output buffer, sign folded into sin, cache-sized token blocks"))
OP.add(Variant("complex", complex_mul, priority=30, devices=frozenset({"cpu", "cuda"}), dtypes=FLOATS,
               layouts=frozenset({_tag(lay, True) for lay in LAYOUTS}),
               doc="complex multiply on adjacent pairs (interleaved only; never on NPU)"))
OP.add(Variant("compiled", compiled, priority=60, devices=frozenset({"cpu", "cuda"}), dtypes=FLOATS,
               available=lambda: _device.compiler_available(), jit=True, doc="torch.compile of realexpr (dynamic shapes)"))
OP.add(Variant("npu", npu, priority=100, devices=frozenset({"npu"}),
               dtypes=frozenset({torch.float32, torch.float16, torch.bfloat16}),
               available=lambda: _device.npu_available(), fits=npu_fits,
               doc="torch_npu.npu_rotary_mul, modes half and interleave"))
OP.add(Variant("triton", triton, priority=100, devices=frozenset({"cuda"}),
               dtypes=frozenset({torch.float32, torch.float16, torch.bfloat16}),
               available=lambda: _device.triton_available(), fits=triton_fits,
               doc="one Triton kernel for q and k, fp32 math"))


def rope(q, k, cos, sin, *, layout="BSND", interleaved=False):
    """Rotate q and k; see the module docstring for shapes and conventions."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, not {layout!r}")
    if q.dim() != 4 or k.dim() != 4:
        raise ValueError(f"q and k must be 4-D ({layout}), got {tuple(q.shape)} and {tuple(k.shape)}")
    D = q.shape[-1]
    S = _seq(q, layout)
    if D % 2 or k.shape[-1] != D:
        raise ValueError(f"head sizes must be equal and even, got {D} and {k.shape[-1]}")
    while cos.dim() > 2 and cos.shape[0] == 1:
        cos, sin = cos[0], sin[0]
    if tuple(cos.shape) != (S, D) or tuple(sin.shape) != (S, D):
        raise ValueError(f"cos and sin must be [S, D] = [{S}, {D}], got {tuple(cos.shape)} and {tuple(sin.shape)}")
    if cos.dtype != q.dtype:
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
    return REGISTRY.call("rope", (q, k, cos, sin, layout, bool(interleaved)))

