"""Correctness on a real CUDA device (benchmarks/kernels_gpu.sh runs these).

Skipped where there is no CUDA device, unless RSI_REQUIRE_CUDA=1 (the GPU
script sets it), where a missing device fails instead.
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from kernels import _device, gate
from kernels.ops import rope as R
from kernels.registry import REGISTRY

if not torch.cuda.is_available() and os.environ.get("RSI_REQUIRE_CUDA") != "1":
    pytest.skip("no CUDA device (benchmarks/kernels_gpu.sh runs these on a GPU)", allow_module_level=True)

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def test_cuda_is_there():
    assert torch.cuda.is_available(), "RSI_REQUIRE_CUDA=1 but torch sees no CUDA device"


def test_triton_is_available_on_this_gpu_machine():
    assert _device.triton_available() is None, _device.triton_available()


def _cuda_variants(op_name):
    op = REGISTRY.ops[op_name]
    return [v for v in op.variants.values() if "cuda" in v.devices and v.available() is None]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["BSND", "BNSD"])
@pytest.mark.parametrize("interleaved", [False, True], ids=["half", "interleaved"])
@pytest.mark.parametrize("shape", [(4, 1, 32, 8, 128), (2, 333, 16, 4, 64), (1, 2048, 8, 8, 256), (3, 17, 6, 2, 80)])
def test_rope_cuda_variants(dtype, layout, interleaved, shape):
    B, S, Nq, Nk, D = shape
    op = REGISTRY.ops["rope"]
    mk = (lambda n: torch.empty(B, S, n, D, dtype=dtype, device="cuda")) if layout == "BSND" else \
        (lambda n: torch.empty(B, n, S, D, dtype=dtype, device="cuda"))
    cos, sin = R.tables(S, D, interleaved, dtype=dtype, device="cuda")
    args = (mk(Nq), mk(Nk), cos, sin, layout, interleaved)
    key = op.make_key(args)
    failures = {}
    for v in _cuda_variants("rope"):
        if v is op.reference or v.can_run(key, dtype, args) is not None:
            continue
        why = gate.check(op, v, args)
        if why is not None:
            failures[v.name] = why
    assert not failures


def test_triton_rope_large_tensor_offsets():
    """More than 2**31 elements in q: the kernel's offsets must be 64-bit."""
    free, _ = torch.cuda.mem_get_info()
    if free < 24 << 30:
        pytest.skip("needs about 20 GiB of free GPU memory")
    B, S, N, D = 1, 1 << 17, 128, 128  # 2**31 elements, bf16: 4 GiB per tensor
    q = torch.randn(B, S, N, D, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(B, S, 1, D, dtype=torch.bfloat16, device="cuda")
    cos, sin = R.tables(S, D, False, dtype=torch.bfloat16, device="cuda")
    oq, ok = R.triton(q, k, cos, sin, "BSND", False)
    tail = slice(S - 4, S)
    rq, rk = R.realexpr(q[:, tail], k[:, tail], cos[tail], sin[tail], "BSND", False)
    torch.testing.assert_close(oq[:, tail], rq)
    torch.testing.assert_close(ok[:, tail], rk)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("residual", [False, True])
def test_rms_norm_cuda_variants(dtype, residual):
    op = REGISTRY.ops["rms_norm"]
    x = torch.empty(37, 4096, dtype=dtype, device="cuda")
    args = (x, torch.ones(4096, dtype=dtype, device="cuda"), 1e-6, torch.empty_like(x) if residual else None)
    failures = {v.name: gate.check(op, v, args) for v in _cuda_variants("rms_norm")
                if v is not op.reference and v.can_run(op.make_key(args), dtype, args) is None}
    assert not {n: w for n, w in failures.items() if w}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op_name", ["modulate", "layer_norm_modulate"])
@pytest.mark.parametrize("sb", [1, 4])
def test_modulate_cuda_variants(dtype, op_name, sb):
    op = REGISTRY.ops[op_name]
    x = torch.empty(4, 257, 1152, dtype=dtype, device="cuda")
    s = torch.empty(sb, 1, 1152, dtype=dtype, device="cuda")
    args = (x, s, s.clone()) if op_name == "modulate" else (x, s, s.clone(), 1e-6)
    failures = {v.name: gate.check(op, v, args) for v in _cuda_variants(op_name)
                if v is not op.reference and v.can_run(op.make_key(args), dtype, args) is None}
    assert not {n: w for n, w in failures.items() if w}
