"""The environment fingerprint: where a measurement was taken.

``collect()`` reads the CPU, the accelerator (``nvidia-smi`` / ``npu-smi`` when
present), CUDA / CANN versions, torch and torch_npu versions (package metadata:
torch is never imported), Python, and the container image
(``$RSI_CONTAINER_IMAGE``). Results whose ``Fingerprint.comparable_key()``
differ are never compared: ``ensure_comparable`` raises ``FingerprintMismatch``
naming each differing field; the judge turns that into an ``error`` verdict.

Every verdict carries the fingerprint of the machine that measured it; a
calibration carries one too, and the judge refuses a calibration (or an
expected fingerprint, e.g. B0's) taken elsewhere.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import shutil
import socket
import subprocess
from pathlib import Path

from .verdict import Fingerprint

KEY_FIELDS = (
    "cpu_model",
    "cpu_count",
    "machine",
    "accelerator",
    "accelerator_count",
    "driver",
    "firmware",
    "cuda",
    "cann",
    "torch",
    "torch_npu",
    "container_image",
)


class FingerprintMismatch(Exception):
    """Two measurements come from different environments."""

    def __init__(self, differences: list[str], what: str = "results"):
        self.differences = differences
        super().__init__(
            f"refusing to compare {what} from different environments: " + "; ".join(differences)
        )


def differences(a: Fingerprint, b: Fingerprint) -> list[str]:
    out = []
    for name in KEY_FIELDS:
        va, vb = getattr(a, name), getattr(b, name)
        if va != vb:
            out.append(f"{name}: {va!r} != {vb!r}")
    return out


def ensure_comparable(a: Fingerprint | None, b: Fingerprint | None, what: str = "results") -> None:
    """Raise FingerprintMismatch when both are known and differ; a missing one passes."""
    if a is None or b is None:
        return
    diff = differences(a, b)
    if diff:
        raise FingerprintMismatch(diff, what)


def _run(argv: list[str], timeout: float = 10.0) -> str:
    if shutil.which(argv[0]) is None:
        return ""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return ""
    return p.stdout if p.returncode == 0 else ""


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 0


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return ""


def _nvidia() -> dict:
    out = _run(
        ["nvidia-smi", "--query-gpu=name,driver_version,vbios_version", "--format=csv,noheader"]
    )
    rows = [
        [c.strip() for c in line.split(",")] for line in out.strip().splitlines() if line.strip()
    ]
    if not rows:
        return {}
    names = sorted({r[0] for r in rows})
    info = {
        "accelerator": " + ".join(names),
        "accelerator_count": len(rows),
        "driver": rows[0][1] if len(rows[0]) > 1 else "",
        "firmware": rows[0][2] if len(rows[0]) > 2 else "",
    }
    m = re.search(r"CUDA Version:\s*([\d.]+)", _run(["nvidia-smi"]))
    if m:
        info["cuda"] = m.group(1)
    return info


def _ascend() -> dict:
    out = _run(["npu-smi", "info"])
    if not out:
        return {}
    info: dict = {}
    m = re.search(r"npu-smi\s+([\w.\-]+)\s+Version", out)
    if m:
        info["driver"] = m.group(1)
    # chip rows look like "| 0     910B3               | OK            | ..."
    chips = re.findall(
        r"^\|\s*\d+\s+(\w*\d\w*)\s+\|\s*(?:OK|Warning|Alarm|Critical)", out, re.MULTILINE
    )
    if chips:
        info["accelerator"] = "Ascend" + " + ".join(sorted(set(chips)))
        info["accelerator_count"] = len(chips)
    else:
        info["accelerator"] = "Ascend"
    board = _run(["npu-smi", "info", "-t", "board", "-i", "0"])
    m = re.search(r"Firmware Version\s*:\s*(\S+)", board)
    if m:
        info["firmware"] = m.group(1)
    info["cann"] = _cann_version()
    return info


def _cann_version() -> str:
    homes = [os.environ.get("ASCEND_TOOLKIT_HOME", ""), "/usr/local/Ascend/ascend-toolkit/latest"]
    for home in filter(None, homes):
        for name in ("version.cfg", "compiler/version.info", "runtime/version.info"):
            p = Path(home) / name
            try:
                text = p.read_text()
            except OSError:
                continue
            m = re.search(r"(?:version|Version)\s*[=:]\s*\[?([\w.\-]+)", text)
            if m:
                return m.group(1)
    return ""


def collect() -> Fingerprint:
    """The fingerprint of this machine and environment. Never imports torch."""
    info: dict = {
        "cpu_model": _cpu_model(),
        "cpu_count": _cpu_count(),
        "machine": platform.machine(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "torch": _version("torch"),
        "torch_npu": _version("torch_npu"),
        "container_image": os.environ.get("RSI_CONTAINER_IMAGE", ""),
        "extra": {"hostname": socket.gethostname()},
    }
    acc = _nvidia() or _ascend()
    info.update(acc)
    if not acc:
        info["accelerator"] = "cpu"
    return Fingerprint(**info)
