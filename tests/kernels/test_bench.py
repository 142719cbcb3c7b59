"""``python -m kernels.bench``: rows, table and JSON (tiny shapes, no compile)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from kernels import bench

pytestmark = pytest.mark.torch

KEYS = {"op", "variant", "shape", "dtype", "median_s", "speedup", "bandwidth_fraction"}


def test_bench_quick_writes_table_and_json(tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert bench.main(["--quick", "--no-compile", "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "copy bandwidth" in table and "rope  decode" in table and "rope  prefill" in table
    rows = json.loads(out.read_text())
    assert rows and all(KEYS <= set(r) for r in rows)
    assert {r["op"] for r in rows} == {"rope", "rms_norm", "modulate", "layer_norm_modulate"}
    for r in rows:
        assert r["gate"] == "ok" and r["median_s"] > 0 and r["bandwidth_fraction"] > 0
        if r["variant"] == "eager":
            assert r["speedup"] == pytest.approx(1.0)
    assert not any(r["variant"] == "compiled" for r in rows)


def test_bench_is_a_module_entry_point(repo_root):
    res = subprocess.run([sys.executable, "-m", "kernels.bench", "--help"], cwd=repo_root,
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0 and "--json" in res.stdout
