"""Fixtures for the kernels tests: an isolated tuning cache and fresh decisions per test."""

from __future__ import annotations

import importlib.util
import os

import pytest


@pytest.fixture(autouse=True)
def kernels_env(tmp_path, monkeypatch):
    """Every test gets its own cache file, no forced variants, quick timing."""
    if importlib.util.find_spec("torch") is None:  # the tests skip (marked torch)
        yield None
        return
    import kernels
    from kernels import tuner

    for name in list(os.environ):
        if name.startswith("RSI_KERNEL"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("RSI_KERNELS_CACHE", str(tmp_path / "autotune.json"))
    monkeypatch.setattr(tuner, "WARMUP", 1)
    monkeypatch.setattr(tuner, "MIN_REPEATS", 3)
    monkeypatch.setattr(tuner, "MAX_REPEATS", 5)
    monkeypatch.setattr(tuner, "BUDGET_S", 0.01)
    kernels.reset()
    yield tmp_path / "autotune.json"
    kernels.reset()
