"""Every variant that can run on this machine, against the float64 reference,
across shapes, layouts and dtypes (through the correctness gate itself)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import kernels
from kernels import gate
from kernels.ops import rope as R
from kernels.registry import REGISTRY

pytestmark = pytest.mark.torch

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def rope_args(shape_q, n_k, dtype, layout, interleaved):
    B, S, N, D = shape_q
    if layout == "BSND":
        q, k = torch.empty(B, S, N, D, dtype=dtype), torch.empty(B, S, n_k, D, dtype=dtype)
    else:
        q, k = torch.empty(B, N, S, D, dtype=dtype), torch.empty(B, n_k, S, D, dtype=dtype)
    cos, sin = R.tables(S, D, interleaved, dtype=dtype)
    return (q, k, cos, sin, layout, interleaved)


def cpu_variants(op_name, *, jit=False):
    op = REGISTRY.ops[op_name]
    return [v for v in op.variants.values()
            if "cpu" in v.devices and v.jit == jit and v.available() is None]


ROPE_SHAPES = [(3, 1, 8, 64), (1, 37, 4, 16), (2, 20, 6, 128)]


def _rope_cases():
    """(variant, dtype, layout, interleaved) for every combination a CPU variant declares."""
    op = REGISTRY.ops["rope"]
    for v in cpu_variants("rope"):
        for dtype in DTYPES:
            if v is op.reference and dtype in (torch.float16, torch.bfloat16):
                continue  # rounds each step in half precision: never gated, it is the fallback
            for layout in ("BSND", "BNSD"):
                for interleaved in (False, True):
                    args = rope_args(ROPE_SHAPES[0], 4, dtype, layout, interleaved)
                    if v.can_run(op.make_key(args), dtype, args) is None:
                        yield pytest.param(v.name, dtype, layout, interleaved,
                                           id=f"{v.name}-{str(dtype)[6:]}-{layout}-{'il' if interleaved else 'half'}")


@pytest.mark.parametrize("variant,dtype,layout,interleaved", list(_rope_cases()))
def test_rope_variant_matches_reference(variant, dtype, layout, interleaved):
    op = REGISTRY.ops["rope"]
    v = op.variants[variant]
    for shape in ROPE_SHAPES:
        args = rope_args(shape, max(1, shape[2] // 2), dtype, layout, interleaved)
        assert v.can_run(op.make_key(args), dtype, args) is None
        assert gate.check(op, v, args) is None


def norm_args(shape, dtype, residual):
    x = torch.empty(shape, dtype=dtype)
    return (x, torch.ones(shape[-1], dtype=dtype), 1e-6, torch.empty(shape, dtype=dtype) if residual else None)


@pytest.mark.parametrize("variant", [v.name for v in cpu_variants("rms_norm")])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
def test_rms_norm_variant_matches_reference(variant, dtype, residual):
    op = REGISTRY.ops["rms_norm"]
    v = op.variants[variant]
    for shape in [(1, 64), (3, 5, 96), (2, 33, 512)]:
        args = norm_args(shape, dtype, residual)
        assert v.can_run(op.make_key(args), dtype, args) is None
        assert gate.check(op, v, args) is None


def _gated_cases(op_name):
    """(variant, dtype) pairs to gate; the reference is never gated in half precision."""
    op = REGISTRY.ops[op_name]
    return [pytest.param(v.name, dt, id=f"{v.name}-{str(dt)[6:]}")
            for v in cpu_variants(op_name) for dt in DTYPES
            if not (v is op.reference and dt in (torch.float16, torch.bfloat16))]


MOD_CASES = [((2, 7, 64), (2, 1, 64)), ((1, 33, 128), (1, 1, 128)), ((3, 16, 32), (32,)), ((4, 96), (4, 96))]


@pytest.mark.parametrize("variant,dtype", _gated_cases("modulate"))
def test_modulate_variant_matches_reference(variant, dtype):
    op = REGISTRY.ops["modulate"]
    v = op.variants[variant]
    for xs, ss in MOD_CASES:
        args = (torch.empty(xs, dtype=dtype), torch.empty(ss, dtype=dtype), torch.empty(ss, dtype=dtype))
        assert gate.check(op, v, args) is None


@pytest.mark.parametrize("variant,dtype", _gated_cases("layer_norm_modulate"))
def test_layer_norm_modulate_variant_matches_reference(variant, dtype):
    op = REGISTRY.ops["layer_norm_modulate"]
    v = op.variants[variant]
    ran = 0
    for xs, ss in MOD_CASES:
        args = (torch.empty(xs, dtype=dtype), torch.empty(ss, dtype=dtype), torch.empty(ss, dtype=dtype), 1e-6)
        if v.fits(args) is not None:
            continue
        assert gate.check(op, v, args) is None
        ran += 1
    assert ran


def test_public_api_matches_reference_formulas():
    torch.manual_seed(0)
    q, k = torch.randn(2, 9, 4, 32), torch.randn(2, 9, 2, 32)
    cos, sin = R.tables(9, 32, False)
    oq, ok = kernels.rope(q, k, cos, sin)
    rq, rk = R.eager(q, k, cos, sin, "BSND", False)
    torch.testing.assert_close(oq, rq)
    torch.testing.assert_close(ok, rk)

    x, r, w = torch.randn(3, 5, 64), torch.randn(3, 5, 64), torch.rand(64) + 0.5
    y = kernels.rms_norm(x, w, eps=1e-5)
    torch.testing.assert_close(y, w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))
    y2, h = kernels.rms_norm(x, w, eps=1e-5, residual=r)
    torch.testing.assert_close(h, x + r)
    torch.testing.assert_close(y2, kernels.rms_norm(x + r, w, eps=1e-5))

    shift, scale = torch.randn(3, 64), torch.randn(3, 64)
    torch.testing.assert_close(kernels.modulate(x, shift, scale),
                               x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1))
    ln = torch.nn.functional.layer_norm(x, (64,), eps=1e-6)
    torch.testing.assert_close(kernels.layer_norm_modulate(x, shift, scale),
                               ln * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1))
    torch.testing.assert_close(kernels.layer_norm_modulate(x[:1], shift[:1], scale[:1]),
                               ln[:1] * (1 + scale[:1].unsqueeze(1)) + shift[:1].unsqueeze(1))


def test_rope_accepts_bnsd_interleaved_and_casts_tables():
    torch.manual_seed(1)
    q, k = torch.randn(1, 4, 6, 16, dtype=torch.bfloat16), torch.randn(1, 4, 6, 16, dtype=torch.bfloat16)
    cos, sin = R.tables(6, 16, True)  # fp32 tables with bf16 q: cast to q's dtype
    oq, _ok = kernels.rope(q, k, cos[None], sin[None], layout="BNSD", interleaved=True)
    assert oq.dtype == torch.bfloat16 and oq.shape == q.shape
    ref = R.ref64(q, k, cos.bfloat16(), sin.bfloat16(), "BNSD", True)
    torch.testing.assert_close(oq.double(), ref[0], atol=1e-2, rtol=1.6e-2)


def test_rope_rejects_bad_arguments():
    q = torch.randn(1, 4, 2, 8)
    cos, sin = R.tables(4, 8, False)
    with pytest.raises(ValueError, match="layout"):
        kernels.rope(q, q, cos, sin, layout="SBND")
    with pytest.raises(ValueError, match=r"\[S, D\]"):
        kernels.rope(q, q, cos[:3], sin[:3])
    with pytest.raises(ValueError, match="even"):
        kernels.rope(q[..., :7], q[..., :7], cos[:, :7], sin[:, :7])


def test_autograd_and_compile_tracing_use_the_reference():
    q = torch.randn(1, 3, 2, 8, requires_grad=True)
    cos, sin = R.tables(3, 8, False)
    oq, _ok = kernels.rope(q, q, cos, sin)
    oq.sum().backward()
    assert q.grad is not None


def test_shared_adaln_matches_per_block():
    torch.manual_seed(2)
    C, depth = 16, 3
    linears = [torch.nn.Linear(C, 6 * C) for _ in range(depth)]
    c = torch.randn(2, C)
    shared = kernels.SharedAdaLN(linears)
    with torch.no_grad():
        got = shared(c)
        assert shared(c) is got  # once per conditioning, shared across blocks
        for lin, chunks in zip(linears, got, strict=True):
            want = kernels.adaln_chunks(c, lin.weight, lin.bias)
            assert len(chunks) == 6
            for a, b in zip(chunks, want, strict=True):
                torch.testing.assert_close(a, b)
        linears[0].weight.add_(1.0)  # a changed weight is re-stacked
        again = shared(c)
        assert again is not got
        torch.testing.assert_close(again[0][0], kernels.adaln_chunks(c, linears[0].weight, linears[0].bias)[0])
    x, y, g = torch.randn(2, 5, C), torch.randn(2, 5, C), torch.randn(2, C)
    torch.testing.assert_close(kernels.gated_residual(x, g, y), x + g.unsqueeze(1) * y)


@pytest.mark.parametrize("layout", ["BSND", "BNSD"])
@pytest.mark.parametrize("interleaved", [False, True], ids=["half", "interleaved"])
@pytest.mark.parametrize("block", [512, 4096, 8192, 1 << 16], ids=["tiny", "small", "heads", "whole"])
def test_fused_rope_blocking_paths(monkeypatch, layout, interleaved, block):
    """fused works in cache-sized blocks: every split (per position, per head
    group, per position within a head, ragged tails) against the reference."""
    monkeypatch.setattr(R, "BLOCK_BYTES_PER_THREAD", block // max(1, torch.get_num_threads()))
    op = REGISTRY.ops["rope"]
    for shape in [(2, 45, 3, 32), (1, 70, 4, 16)]:
        args = rope_args(shape, 2, torch.float32, layout, interleaved)
        assert gate.check(op, op.variants["fused"], args) is None
