"""NPU and CUDA dispatch and limits, with the device checks simulated on CPU.

The tensors stay on the CPU; ``kernels._device`` is patched so that dispatch
sees an "npu" or "cuda" device, and the device libraries are replaced by
fakes that record their calls (and compute the right answer on the CPU).
The real calls are only made on the devices themselves.
"""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

torch = pytest.importorskip("torch")

import kernels
from kernels import _device
from kernels.ops import rope as R

pytestmark = pytest.mark.torch


class FakeTorchNpu(types.ModuleType):
    """The three torch_npu calls kernels makes, computed on the CPU, recorded."""

    __version__ = "2.5.1.fake"

    def __init__(self):
        super().__init__("torch_npu")
        self.calls: list[tuple] = []

    def npu_rotary_mul(self, x, r1, r2, rotary_mode="half"):
        assert not x.is_complex() and not r1.is_complex(), "complex dtypes must never reach the NPU"
        assert x.dim() == 4 and r1.dim() == 4 and r2.dim() == 4
        self.calls.append(("npu_rotary_mul", tuple(x.shape), rotary_mode))
        rot = R.rotate_every_two if rotary_mode == "interleave" else R.rotate_half
        xf = x.float()
        return (xf * r1.float() + rot(xf) * r2.float()).to(x.dtype)

    def npu_rms_norm(self, x, gamma, epsilon=1e-6):
        self.calls.append(("npu_rms_norm", tuple(x.shape)))
        xf = x.float()
        rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + epsilon)
        return (xf * rstd * gamma.float()).to(x.dtype), rstd

    def npu_add_rms_norm(self, x1, x2, gamma, epsilon=1e-6):
        self.calls.append(("npu_add_rms_norm", tuple(x1.shape)))
        h = x1 + x2
        y, rstd = FakeTorchNpu.npu_rms_norm(self, h, gamma, epsilon)
        self.calls.pop()
        return y, rstd, h


@pytest.fixture
def npu(monkeypatch):
    fake = FakeTorchNpu()
    monkeypatch.setattr(_device, "device_type", lambda t: "npu")
    monkeypatch.setattr(_device, "npu_available", lambda: None)
    monkeypatch.setattr(_device, "torch_npu", lambda: fake)
    monkeypatch.setattr(_device, "synchronize", lambda device: None)
    monkeypatch.setenv("RSI_KERNELS_AUTOTUNE", "0")
    return fake


def rope_args(B=2, S=5, Nq=4, Nk=2, D=16, layout="BSND", interleaved=False, dtype=torch.float32):
    torch.manual_seed(0)
    if layout == "BSND":
        q, k = torch.randn(B, S, Nq, D), torch.randn(B, S, Nk, D)
    else:
        q, k = torch.randn(B, Nq, S, D), torch.randn(B, Nk, S, D)
    cos, sin = R.tables(S, D, interleaved)
    return q.to(dtype), k.to(dtype), cos.to(dtype), sin.to(dtype)


@pytest.mark.parametrize("layout", ["BSND", "BNSD"])
@pytest.mark.parametrize("interleaved", [False, True])
def test_npu_rope_used_within_limits(npu, layout, interleaved):
    q, k, cos, sin = rope_args(layout=layout, interleaved=interleaved)
    out = kernels.rope(q, k, cos, sin, layout=layout, interleaved=interleaved)
    mode = "interleave" if interleaved else "half"
    assert ("npu_rotary_mul", tuple(q.shape), mode) in npu.calls
    want = R.eager(q, k, cos, sin, layout, interleaved)
    torch.testing.assert_close(out[0], want[0])
    torch.testing.assert_close(out[1], want[1])
    ranking = kernels.REGISTRY.ranking("rope", (q, k, cos, sin, layout, interleaved))
    assert ranking[0] == "npu" and "complex" not in ranking and ranking[-1] == "eager"


@pytest.mark.parametrize("kw,why", [
    ({"D": 896}, "even head size under 896"),
    ({"Nq": 1000, "S": 1, "B": 1, "D": 4}, "heads under 1000"),
    ({"Nk": 1000, "Nq": 1000, "S": 1, "B": 1, "D": 4}, "heads under 1000"),
    ({"B": 1000, "S": 1, "Nq": 1, "Nk": 1, "D": 4}, "batch under 1000"),
])
def test_npu_rope_falls_back_outside_limits(npu, kw, why):
    q, k, cos, sin = rope_args(**kw)
    args = (q, k, cos, sin, "BSND", False)
    assert why in R.npu_fits(args)
    out = kernels.rope(q, k, cos, sin)
    assert npu.calls == []
    torch.testing.assert_close(out[0], R.eager(*args)[0])


def test_npu_rope_limits_are_checked_per_call(npu):
    # batch is bucketed with the sequence (B*S): 999 and 1000 share a key
    small = rope_args(B=999, S=1, Nq=1, Nk=1, D=4)
    big = rope_args(B=1000, S=1, Nq=1, Nk=1, D=4)
    kernels.rope(*small)
    assert len(npu.calls) >= 2
    npu.calls.clear()
    kernels.rope(*big)  # same key (t1024 bucket), outside the limit: reference
    assert npu.calls == []


def test_npu_head_size_limit_boundary():
    ok = rope_args(D=894)
    assert R.npu_fits((*ok, "BSND", False)) is None
    assert "even" in R.npu_fits((*rope_args(D=896), "BSND", False))


def test_npu_never_gets_complex_or_fp64(npu):
    q, k, cos, sin = rope_args(dtype=torch.float64)
    kernels.rope(q, k, cos, sin)
    assert npu.calls == []  # fp64 is not an NPU dtype for rotary_mul
    assert "complex" not in kernels.REGISTRY.ranking("rope", (q, k, cos, sin, "BSND", True))
    assert R.npu_fits((q.to(torch.complex64), k, cos, sin, "BSND", False)) is not None


def test_npu_rms_norm_and_add_rms_norm(npu):
    x, r, w = torch.randn(3, 7, 64), torch.randn(3, 7, 64), torch.rand(64) + 0.5
    y = kernels.rms_norm(x, w)
    assert npu.calls[-1] == ("npu_rms_norm", (3, 7, 64))
    y2, h = kernels.rms_norm(x, w, residual=r)
    assert npu.calls[-1] == ("npu_add_rms_norm", (3, 7, 64))
    torch.testing.assert_close(h, x + r)
    torch.testing.assert_close(y2, kernels.ops.norm.eager(x, w, 1e-6, r)[0])
    torch.testing.assert_close(y, kernels.ops.norm.eager(x, w, 1e-6, None))


def test_npu_wrong_library_result_is_gated_out(npu, monkeypatch):
    monkeypatch.setattr(npu, "npu_rms_norm", lambda x, g, epsilon=1e-6: (x * 1.01, None), raising=False)
    x, w = torch.randn(4, 32), torch.ones(32)
    y = kernels.rms_norm(x, w)
    torch.testing.assert_close(y, kernels.ops.norm.eager(x, w, 1e-6, None))
    key = kernels.REGISTRY.ops["rms_norm"].make_key((x, w, 1e-6, None))
    assert "correctness gate" in kernels.REGISTRY.disabled(key)["npu"]


def test_npu_layer_norm_modulate_uses_affine_layer_norm(npu):
    x = torch.randn(1, 9, 32)
    shift, scale = torch.randn(1, 32), torch.randn(1, 32)
    assert kernels.REGISTRY.choose("layer_norm_modulate", (x, shift[:, None], scale[:, None], 1e-6)).name == "affine"
    per_sample = (torch.randn(2, 9, 32), torch.randn(2, 1, 32), torch.randn(2, 1, 32), 1e-6)
    assert kernels.REGISTRY.choose("layer_norm_modulate", per_sample).name == "eager"


def test_npu_autotune_path_runs_with_fake_sync(npu, monkeypatch, kernels_env):
    monkeypatch.delenv("RSI_KERNELS_AUTOTUNE")
    q, k, cos, sin = rope_args()
    kernels.rope(q, k, cos, sin)
    import json
    data = json.loads(kernels_env.read_text())
    (fp,) = data["devices"]
    assert fp.startswith("npu|") and "torch_npu=2.5.1.fake" in fp
    (entry,) = data["devices"][fp].values()
    assert set(entry["ranking"]) == {"npu", "eager", "realexpr"}


def test_npu_unavailable_is_skipped_cleanly(monkeypatch, caplog):
    monkeypatch.setattr(_device, "device_type", lambda t: "npu")
    monkeypatch.setattr(_device, "synchronize", lambda device: None)
    monkeypatch.setenv("RSI_KERNELS_AUTOTUNE", "0")
    q, k, cos, sin = rope_args()
    kernels.rope(q, k, cos, sin)
    key = kernels.REGISTRY.ops["rope"].make_key((q, k, cos, sin, "BSND", False))
    assert kernels.REGISTRY.disabled(key) == {}
    assert "npu" not in kernels.REGISTRY.ranking("rope", (q, k, cos, sin, "BSND", False))
    assert _device.npu_available() is not None  # here: no torch_npu


# ---- CUDA / Triton ---------------------------------------------------------------
@pytest.fixture
def cuda(monkeypatch):
    calls = []
    fake = types.ModuleType("kernels._triton_rope")

    def fake_rope(q, k, cos, sin, layout, interleaved):
        calls.append((tuple(q.shape), layout, interleaved))
        return R.realexpr(q, k, cos, sin, layout, interleaved)

    fake.rope = fake_rope
    monkeypatch.setitem(sys.modules, "kernels._triton_rope", fake)
    monkeypatch.setattr(kernels, "_triton_rope", fake, raising=False)
    monkeypatch.setattr(_device, "device_type", lambda t: "cuda")
    monkeypatch.setattr(_device, "triton_available", lambda: None)
    monkeypatch.setattr(_device, "synchronize", lambda device: None)
    monkeypatch.setattr(_device, "fingerprint", lambda device: f"{device}|simulated")
    monkeypatch.setenv("RSI_KERNELS_AUTOTUNE", "0")
    return calls


@pytest.mark.parametrize("layout", ["BSND", "BNSD"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_cuda_rope_uses_triton(cuda, layout, dtype):
    q, k, cos, sin = rope_args(layout=layout, dtype=dtype)
    kernels.rope(q, k, cos, sin, layout=layout)
    assert (tuple(q.shape), layout, False) in cuda
    ranking = kernels.REGISTRY.ranking("rope", (q, k, cos, sin, layout, False))
    assert ranking[0] == "triton" and "npu" not in ranking


def test_cuda_triton_limits_and_absence(cuda, monkeypatch):
    q, k, cos, sin = rope_args(D=1026, S=2, Nq=1, Nk=1, B=1)
    kernels.rope(q, k, cos, sin)
    assert cuda == []  # head size over the kernel's limit: another variant
    monkeypatch.setattr(_device, "triton_available", lambda: "triton is not installed")
    kernels.reset()
    q, k, cos, sin = rope_args()
    kernels.rope(q, k, cos, sin)
    assert cuda == []
    assert "triton" not in kernels.REGISTRY.ranking("rope", (q, k, cos, sin, "BSND", False))


def test_importing_kernels_imports_no_device_library():
    code = ("import sys, kernels; bad = [m for m in ('triton', 'torch_npu', 'kernels._triton_rope') "
            "if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(_root()))


def _root():
    from pathlib import Path
    return Path(kernels.__file__).resolve().parents[1]


def test_triton_kernel_in_interpreter_mode():
    """The real Triton kernel, run by Triton's interpreter on the CPU when triton is installed."""
    pytest.importorskip("triton")
    code = r"""
import torch
from kernels import gate, registry
from kernels.ops import rope as R
from kernels import _triton_rope
v = registry.Variant("triton", _triton_rope.rope)
for layout in ("BSND", "BNSD"):
    for il in (False, True):
        for dt in (torch.float32, torch.bfloat16):
            shp = (2, 5, 4, 16) if layout == "BSND" else (2, 4, 5, 16)
            shk = (2, 5, 2, 16) if layout == "BSND" else (2, 2, 5, 16)
            args = (torch.empty(shp, dtype=dt), torch.empty(shk, dtype=dt), None, None, layout, il)
            args = R.sample(args, torch.Generator().manual_seed(0), 0)
            why = gate.check(R.OP, v, args)
            assert why is None, (layout, il, dt, why)
print("ok")
"""
    import os
    env = dict(os.environ, TRITON_INTERPRET="1")
    res = subprocess.run([sys.executable, "-c", code], cwd=str(_root()), env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-3000:]
