"""verifier.probe: what a benchmark may import."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from verifier import probe
from verifier.protocol import load_result


def test_report_writes_a_valid_result(tmp_path, monkeypatch):
    out = tmp_path / "r.json"
    monkeypatch.setenv("RSI_RESULT", str(out))
    lat: list[float] = []
    for _ in range(3):
        with probe.timer(lat):
            sum(range(1000))
    path = probe.report(
        {
            "metrics": {"throughput": 3.0},
            "samples": {"latency_s": lat},
            "counts": {"requests": 3, "failed": 0},
        }
    )
    assert path == out
    r = load_result(out, expected_metrics=["throughput"])
    assert len(r.samples["latency_s"]) == 3 and all(x > 0 for x in r.samples["latency_s"])
    assert probe.write_result is probe.report


def test_report_refuses_nan_and_prints_without_rsi_result(monkeypatch, capsys):
    monkeypatch.delenv("RSI_RESULT", raising=False)
    with pytest.raises(ValueError, match="finite"):
        probe.report({"metrics": {"x": float("nan")}})
    assert probe.report({"metrics": {"x": 1.0}}) is None
    assert json.loads(capsys.readouterr().out) == {"metrics": {"x": 1.0}}


def test_probe_never_imports_torch_itself():
    code = (
        "import sys; from verifier import probe; "
        "probe.device_peak_memory_mib(); probe.synchronize(); "
        "print('torch' in sys.modules, probe.device_peak_memory_mib())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "None"]


def test_seed_and_output_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("RSI_SEED", "42")
    monkeypatch.setenv("RSI_OUTPUT_DIR", str(tmp_path / "o"))
    assert probe.seed() == 42
    assert probe.output_dir() == tmp_path / "o" and (tmp_path / "o").is_dir()
