"""The autotuner's timing and cache, and the environment overrides."""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest

torch = pytest.importorskip("torch")

import kernels
from kernels import _device, gate, tuner
from kernels.ops import rope as R
from kernels.registry import REGISTRY

pytestmark = pytest.mark.torch


def rope_call_args(S=16, D=32):
    torch.manual_seed(0)
    q, k = torch.randn(1, S, 4, D), torch.randn(1, S, 4, D)
    cos, sin = R.tables(S, D, False)
    return q, k, cos, sin


def test_measure_takes_the_median(monkeypatch):
    times = iter([5.0, 1.0, 3.0, 2.0, 4.0])
    monkeypatch.setattr(_device, "time_once", lambda fn, device: next(times))
    assert tuner.measure(lambda: None, "cpu", warmup=0, min_repeats=5, max_repeats=5) == 3.0


def test_measure_many_interleaves_rounds_and_takes_medians(monkeypatch):
    order = []
    fake = {"a": [3.0, 1.0, 2.0], "b": [10.0, 30.0, 20.0]}

    def time_once(fn, device):
        name = fn()
        order.append(name)
        return fake[name].pop(0)

    monkeypatch.setattr(_device, "time_once", time_once)
    got = tuner.measure_many({"a": lambda: "a", "b": lambda: "b"}, "cpu", warmup=0,
                             min_repeats=3, max_repeats=3)
    assert got == {"a": 2.0, "b": 20.0}
    assert order == ["a", "b", "b", "a", "a", "b"]  # rounds, in rotating order


def test_winners_persist_and_later_processes_read_them(kernels_env, monkeypatch):
    q, k, cos, sin = rope_call_args()
    args = (q, k, cos, sin, "BSND", False)
    kernels.rope(q, k, cos, sin)
    data = json.loads(kernels_env.read_text())
    fp = _device.fingerprint("cpu")
    assert data["version"] == tuner.CACHE_VERSION and list(data["devices"]) == [fp]
    key = str(REGISTRY.ops["rope"].make_key(args))
    entry = data["devices"][fp][key]
    assert set(entry["ranking"]) == {"eager", "realexpr", "fused"}
    assert set(entry["median_s"]) == set(entry["ranking"])
    assert entry["ranking"] == sorted(entry["median_s"], key=entry["median_s"].get)

    # a new process (fresh decisions) answers from the cache: no gate, no timing
    kernels.reset()
    monkeypatch.setattr(gate, "check", lambda *a, **k: pytest.fail("gated again"))
    monkeypatch.setattr(tuner, "measure_many", lambda *a, **k: pytest.fail("timed again"))
    assert REGISTRY.ranking("rope", args) == entry["ranking"]
    kernels.rope(q, k, cos, sin)


def test_cache_is_keyed_by_device_fingerprint(kernels_env, monkeypatch):
    q, k, cos, sin = rope_call_args()
    kernels.rope(q, k, cos, sin)
    kernels.reset()
    monkeypatch.setattr(_device, "fingerprint", lambda device: "cpu|another machine")
    timed = []
    real = tuner.measure_many
    monkeypatch.setattr(tuner, "measure_many", lambda *a, **k: timed.append(1) or real(*a, **k))
    kernels.rope(q, k, cos, sin)
    assert timed  # a different fingerprint is tuned anew, and kept beside the first
    assert len(json.loads(kernels_env.read_text())["devices"]) == 2


def test_fingerprint_names_device_versions_threads_and_code():
    fp = _device.fingerprint("cpu")
    assert fp.startswith("cpu|") and f"torch={torch.__version__}" in fp
    assert f"threads={torch.get_num_threads()}" in fp and f"kernels={_device.code_hash()}" in fp


def test_corrupt_or_foreign_cache_is_ignored_and_rewritten(kernels_env):
    kernels_env.write_text("{not json")
    q, k, cos, sin = rope_call_args()
    kernels.rope(q, k, cos, sin)
    assert json.loads(kernels_env.read_text())["version"] == tuner.CACHE_VERSION
    kernels_env.write_text(json.dumps({"version": 999, "devices": {"x": {}}}))
    kernels.reset()
    kernels.rope(q, k, cos, sin)
    assert "x" not in json.loads(kernels_env.read_text())["devices"]


def test_cache_path_default_and_env(monkeypatch, tmp_path):
    monkeypatch.delenv("RSI_KERNELS_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert tuner.cache_path() == tmp_path / ".cache" / "rsi-kernels" / "autotune.json"
    monkeypatch.setenv("RSI_KERNELS_CACHE", str(tmp_path / "x.json"))
    assert tuner.cache_path() == tmp_path / "x.json"


def test_unwritable_cache_does_not_break_calls(monkeypatch, tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("RSI_KERNELS_CACHE", str(blocker / "sub" / "autotune.json"))
    q, k, cos, sin = rope_call_args()
    with caplog.at_level(logging.WARNING, logger="kernels"):
        out = kernels.rope(q, k, cos, sin)
    torch.testing.assert_close(out[0], R.eager(q, k, cos, sin, "BSND", False)[0])
    assert "cannot write tuning cache" in caplog.text


def test_autotune_off_ranks_by_priority(monkeypatch, kernels_env):
    monkeypatch.setenv("RSI_KERNELS_AUTOTUNE", "0")
    monkeypatch.setattr(tuner, "measure_many", lambda *a, **k: pytest.fail("timed"))
    q, k, cos, sin = rope_call_args()
    assert REGISTRY.ranking("rope", (q, k, cos, sin, "BSND", False)) == ["fused", "realexpr", "eager"]


# ---- RSI_KERNEL_<OP> ----------------------------------------------------------
@pytest.mark.parametrize("name", ["eager", "realexpr", "fused"])
def test_env_forces_a_variant(monkeypatch, name):
    monkeypatch.setenv("RSI_KERNEL_ROPE", name)
    q, k, cos, sin = rope_call_args()
    args = (q, k, cos, sin, "BSND", False)
    assert REGISTRY.ranking("rope", args)[0] == name
    assert REGISTRY.choose("rope", args).name == name
    torch.testing.assert_close(kernels.rope(q, k, cos, sin)[0], R.eager(*args)[0])


def test_env_force_is_read_per_call(monkeypatch):
    q, k, cos, sin = rope_call_args()
    args = (q, k, cos, sin, "BSND", False)
    monkeypatch.setenv("RSI_KERNEL_ROPE", "eager")
    assert REGISTRY.choose("rope", args).name == "eager"
    monkeypatch.setenv("RSI_KERNEL_ROPE", "realexpr")
    assert REGISTRY.choose("rope", args).name == "realexpr"


def test_env_unknown_variant_fails_loudly(monkeypatch):
    monkeypatch.setenv("RSI_KERNEL_RMS_NORM", "nope")
    with pytest.raises(ValueError, match="no such variant of rms_norm; known: eager, fused"):
        kernels.rms_norm(torch.randn(2, 8), torch.ones(8))


def test_env_forced_variant_that_cannot_run_here_uses_reference(monkeypatch, caplog):
    monkeypatch.setenv("RSI_KERNEL_ROPE", "npu")
    q, k, cos, sin = rope_call_args()
    with caplog.at_level(logging.WARNING, logger="kernels"):
        kernels.rope(q, k, cos, sin)
    assert REGISTRY.choose("rope", (q, k, cos, sin, "BSND", False)).name == "eager"
    assert "RSI_KERNEL_ROPE=npu cannot serve" in caplog.text


def test_env_forced_variant_still_passes_the_gate(monkeypatch):
    op = REGISTRY.ops["rope"]
    broken = dataclasses.replace(op.variants["realexpr"], fn=lambda *a: tuple(t * 2 for t in R.eager(*a)))
    monkeypatch.setitem(op.variants, "realexpr", broken)
    monkeypatch.setenv("RSI_KERNEL_ROPE", "realexpr")
    q, k, cos, sin = rope_call_args()
    out = kernels.rope(q, k, cos, sin)
    torch.testing.assert_close(out[0], R.eager(q, k, cos, sin, "BSND", False)[0])
    key = op.make_key((q, k, cos, sin, "BSND", False))
    assert "correctness gate" in REGISTRY.disabled(key)["realexpr"]
