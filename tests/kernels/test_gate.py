"""The correctness gate catches wrong variants, and dispatch falls back to the reference."""

from __future__ import annotations

import dataclasses
import logging

import pytest

torch = pytest.importorskip("torch")

from kernels import _alloc, gate, tuner
from kernels.ops import rope as R
from kernels.registry import REGISTRY, Registry, Variant

pytestmark = pytest.mark.torch


def registry_with(*extra: Variant, op_name: str = "rope", keep=("eager",)) -> Registry:
    """A private registry holding a copy of op with only `keep` and `extra` variants."""
    base = REGISTRY.ops[op_name]
    op = dataclasses.replace(base, variants={n: base.variants[n] for n in keep})
    for v in extra:
        op.add(v)
    reg = Registry(cache=tuner.Cache())
    reg.add_op(op)
    return reg


def args_rope(S=8, dtype=torch.float32):
    torch.manual_seed(0)
    q, k = torch.randn(1, S, 4, 16, dtype=dtype), torch.randn(1, S, 2, 16, dtype=dtype)
    cos, sin = R.tables(S, 16, False, dtype=dtype)
    return (q, k, cos, sin, "BSND", False)


def wrong_sign(q, k, cos, sin, layout, interleaved):
    cos, sin = R._bcast(cos, layout), R._bcast(sin, layout)
    return q * cos - R.rotate_half(q) * sin, k * cos - R.rotate_half(k) * sin


def slightly_off(q, k, cos, sin, layout, interleaved):
    oq, ok = R.eager(q, k, cos, sin, layout, interleaved)
    return oq * (1 + 1e-4), ok  # within fp16 tolerance, not within fp32's


def forgets_last(q, k, cos, sin, layout, interleaved):
    oq, ok = R.eager(q, k, cos, sin, layout, interleaved)
    out = _alloc.empty_like(oq)
    out[..., :-1] = oq[..., :-1]  # the last element is never written
    return out, ok


def raises(*args):
    raise RuntimeError("kernel launch failed")


def mutates_input(q, k, cos, sin, layout, interleaved):
    oq, ok = R.eager(q, k, cos, sin, layout, interleaved)
    q.zero_()
    return oq, ok


def wrong_dtype(q, k, cos, sin, layout, interleaved):
    oq, ok = R.eager(q.double(), k.double(), cos.double(), sin.double(), layout, interleaved)
    return oq, ok


@pytest.mark.parametrize("fn,reason", [
    (wrong_sign, "outside atol"),
    (slightly_off, "outside atol"),
    (forgets_last, "NaN"),
    (raises, "raised RuntimeError: kernel launch failed"),
    (mutates_input, "modified its input"),
    (wrong_dtype, "dtype"),
])
def test_gate_rejects(fn, reason):
    op = REGISTRY.ops["rope"]
    why = gate.check(op, Variant("bad", fn), args_rope())
    assert why is not None and reason in why


def test_gate_accepts_reference_and_tolerates_per_dtype():
    op = REGISTRY.ops["rope"]
    assert gate.check(op, op.variants["eager"], args_rope()) is None
    # 1e-4 relative error is too much for fp32 but fine for bf16 (rtol 1.6e-2)
    assert gate.check(op, Variant("off", slightly_off), args_rope(dtype=torch.float32)) is not None
    assert gate.check(op, Variant("rx", R.realexpr), args_rope(dtype=torch.bfloat16)) is None


def test_gate_inputs_are_fresh_random_never_zero():
    op = REGISTRY.ops["rope"]
    seen = []

    def spy(*a):
        seen.append(a)
        return R.eager(*a)

    args = args_rope()
    zeros = (torch.zeros_like(args[0]), torch.zeros_like(args[1]), *args[2:])
    assert gate.check(op, Variant("spy", spy), zeros) is None
    assert len(seen) == gate.TRIALS
    for a in seen:
        assert a[0] is not zeros[0] and bool((a[0] != 0).all()) and bool((a[1] != 0).all())
    assert not torch.equal(seen[0][0], seen[1][0])  # a new draw per trial
    assert seen[2][0].shape[1] == seen[0][0].shape[1] + 1  # and a neighbouring shape


def test_wrong_variant_is_disabled_for_good_and_reference_used(caplog, monkeypatch):
    reg = registry_with(Variant("bad", wrong_sign, priority=99))
    args = args_rope()
    want = R.eager(*args)
    with caplog.at_level(logging.WARNING, logger="kernels"):
        got = reg.call("rope", args)
    torch.testing.assert_close(got[0], want[0])
    key = reg.ops["rope"].make_key(args)
    assert "failed the correctness gate" in reg.disabled(key)["bad"]
    assert "bad disabled for rope|cpu|float32" in caplog.text
    # for good: later calls, and a new process reading the cache, never gate it again
    monkeypatch.setattr(gate, "check", lambda *a, **k: pytest.fail("gated again"))
    reg.call("rope", args)
    reg.reset()
    assert reg.ranking("rope", args) == ["eager"]
    assert "failed the correctness gate" in reg.disabled(key)["bad"]


def test_variant_raising_at_call_time_is_disabled_and_falls_back(caplog, monkeypatch):
    monkeypatch.setenv("RSI_KERNELS_AUTOTUNE", "0")  # rank by priority: flaky first
    calls = []

    def flaky(*a):
        calls.append(1)
        if len(calls) > gate.TRIALS + 10:  # fine in the gate and a few calls, then breaks
            raise RuntimeError("out of resources")
        return R.eager(*a)

    reg = registry_with(Variant("flaky", flaky, priority=99))
    args = args_rope()
    want = R.eager(*args)
    with caplog.at_level(logging.WARNING, logger="kernels"):
        for _ in range(40):
            got = reg.call("rope", args)
            torch.testing.assert_close(got[0], want[0])
    key = reg.ops["rope"].make_key(args)
    assert "raised at call" in reg.disabled(key)["flaky"]
    assert reg.ranking("rope", args) == ["eager"]


def test_outside_limits_falls_back_per_call(monkeypatch):
    used = []

    def small_only(*a):
        used.append(a[0].shape[1])
        return R.eager(*a)

    lim = Variant("small", small_only, priority=99,
                  fits=lambda a: None if a[0].shape[1] <= 9 else "S over 9")
    reg = registry_with(lim)
    monkeypatch.setenv("RSI_KERNELS_AUTOTUNE", "0")
    reg.call("rope", args_rope(S=8))
    used.clear()
    # S=8 and S=7 share a bucket: 7 runs the variant; 16 is outside its limit
    reg.call("rope", args_rope(S=7))
    assert used == [7]
    used.clear()
    out = reg.call("rope", args_rope(S=16))
    assert used == []
    torch.testing.assert_close(out[0], R.eager(*args_rope(S=16))[0])
