"""`make demo NEIGHBOUR=1`: the background load runs while the block runs and
never outlives it."""

from __future__ import annotations

import pytest

from harness.demo import neighbour_load


def test_neighbour_runs_inside_the_block_and_dies_after():
    with neighbour_load(0.25, period_s=0.05) as proc:
        assert proc.poll() is None
    assert proc.poll() is not None


def test_neighbour_dies_when_the_block_raises():
    with pytest.raises(RuntimeError), neighbour_load() as proc:
        raise RuntimeError("demo failed")
    assert proc.poll() is not None


def test_neighbour_share_is_checked():
    with pytest.raises(ValueError, match="share"), neighbour_load(1.5):
        pass
