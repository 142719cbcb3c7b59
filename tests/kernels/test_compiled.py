"""torch.compile variants on the CPU (inductor needs a C++ compiler; compiling takes seconds)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kernels import _device, gate
from kernels.ops import rope as R
from kernels.registry import REGISTRY

pytestmark = [pytest.mark.torch, pytest.mark.slow,
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]  # inside inductor


def test_compiler_check_says_why_not():
    why = _device.compiler_available()
    assert why is None or "compiler" in why or "torch.compile" in why


@pytest.mark.skipif(_device.compiler_available() is not None, reason="no C++ compiler for inductor")
def test_compiled_rope_passes_the_gate():
    op = REGISTRY.ops["rope"]
    q, k = torch.empty(1, 12, 2, 16), torch.empty(1, 12, 1, 16)
    cos, sin = R.tables(12, 16, False)
    assert gate.check(op, op.variants["compiled"], (q, k, cos, sin, "BSND", False)) is None


def test_compiled_variants_are_left_out_of_automatic_choice_unless_asked(monkeypatch):
    q, k = torch.randn(1, 4, 2, 16), torch.randn(1, 4, 2, 16)
    cos, sin = R.tables(4, 16, False)
    args = (q, k, cos, sin, "BSND", False)
    monkeypatch.setenv("RSI_KERNELS_AUTOTUNE", "0")
    assert "compiled" not in REGISTRY.ranking("rope", args)
    REGISTRY.reset()
    monkeypatch.setenv("RSI_KERNELS_COMPILE", "1")
    monkeypatch.setattr(gate, "check", lambda *a, **kw: None)  # no compile in this test
    assert REGISTRY.ranking("rope", args)[0] == "compiled"
