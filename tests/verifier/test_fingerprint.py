"""The environment fingerprint, and refusing to compare across environments."""

from __future__ import annotations

import subprocess
import sys

import pytest

from verifier.calibrate import Calibration
from verifier.config import VerifyConfig
from verifier.fingerprint import FingerprintMismatch, collect, differences, ensure_comparable
from verifier.judge import verify
from verifier.verdict import Fingerprint


def test_collect_describes_this_machine(monkeypatch):
    monkeypatch.setenv("RSI_CONTAINER_IMAGE", "rsi-bot/base:bookworm@sha256:abc")
    fp = collect()
    assert fp.cpu_count >= 1 and fp.machine and fp.python
    assert fp.container_image == "rsi-bot/base:bookworm@sha256:abc"
    assert fp.accelerator  # "cpu" here, a device model elsewhere


def test_collect_never_imports_torch():
    code = (
        "import sys, verifier.fingerprint as f, verifier.judge, verifier.probe; "
        "f.collect(); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_differences_and_refusal():
    a = Fingerprint(cpu_model="x", accelerator="NVIDIA H200", cuda="12.4", torch="2.5.1")
    b = a.model_copy(update={"cuda": "12.1", "python": "3.12"})
    assert differences(a, b) == ["cuda: '12.4' != '12.1'"]  # python is not part of the key
    with pytest.raises(FingerprintMismatch) as e:
        ensure_comparable(a, b)
    assert "cuda" in str(e.value) and e.value.differences
    ensure_comparable(a, a.model_copy(update={"python": "3.12"}))
    ensure_comparable(a, None)


CFG = f"""
[benchmarks.b]
command = "{sys.executable} -c 'raise SystemExit(9)'"
[objective]
benchmark = "b"
metric = "wall_s"
"""


def test_verify_refuses_a_calibration_from_elsewhere(tmp_path):
    other = collect().model_copy(update={"accelerator": "Ascend910B3", "cann": "8.0"})
    cal = Calibration(benchmark="b", metric="wall_s", fingerprint=other)
    v = verify(tmp_path, tmp_path, VerifyConfig.from_toml(CFG), calibration=cal)
    assert v.decision == "error" and v.error.stage == "fingerprint"
    assert "accelerator" in v.error.message and v.runs == 0


def test_verify_refuses_an_unexpected_environment(tmp_path):
    expected = collect().model_copy(update={"torch": "0.0.1"})
    v = verify(tmp_path, tmp_path, VerifyConfig.from_toml(CFG), fingerprint=expected)
    assert v.decision == "error" and v.error.stage == "fingerprint" and "torch" in v.error.message
