"""Helpers a benchmark may import: ``from verifier import probe``.

Nothing here imports torch or torch_npu at import time; device memory is read
only from frameworks the benchmark has already imported.

    from verifier import probe

    probe.ready()                          # prints READY (for ready_pattern)
    lat = []
    for req in requests:
        with probe.timer(lat):             # appends seconds to lat
            serve(req)
    probe.report({"metrics": {"throughput": n / total},
                  "samples": {"latency_s": lat},
                  "counts": {"requests": n, "failed": 0}})

``report`` (alias ``write_result``) adds ``metrics.device_peak_memory_mib`` when
a CUDA or Ascend device was used, and writes the JSON atomically to
``$RSI_RESULT``; without ``RSI_RESULT`` (a quick manual run) it prints the JSON.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


def _torch():
    return sys.modules.get("torch")


def device_peak_memory_mib() -> float | None:
    """Peak device memory allocated by this process (CUDA or Ascend), or None."""
    torch = _torch()
    if torch is None:
        return None
    try:
        if "torch_npu" in sys.modules and hasattr(torch, "npu") and torch.npu.is_available():
            return torch.npu.max_memory_allocated() / 2**20
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            return torch.cuda.max_memory_allocated() / 2**20
    except Exception:  # noqa: BLE001 - a probe never breaks the benchmark
        return None
    return None


def reset_device_peak_memory() -> None:
    torch = _torch()
    if torch is None:
        return
    try:
        if "torch_npu" in sys.modules and hasattr(torch, "npu") and torch.npu.is_available():
            torch.npu.reset_peak_memory_stats()
        elif torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.reset_peak_memory_stats()
    except Exception:  # noqa: BLE001
        pass


def synchronize() -> None:
    """Wait for queued device work (so timers measure it)."""
    torch = _torch()
    if torch is None:
        return
    try:
        if "torch_npu" in sys.modules and hasattr(torch, "npu") and torch.npu.is_available():
            torch.npu.synchronize()
        elif torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
    except Exception:  # noqa: BLE001
        pass


@contextlib.contextmanager
def timer(into: list | None = None, *, sync: bool = True) -> Iterator[dict]:
    """Time a block (device-synchronized); appends seconds to ``into``."""
    box: dict = {}
    if sync:
        synchronize()
    t0 = time.perf_counter()
    try:
        yield box
    finally:
        if sync:
            synchronize()
        box["s"] = time.perf_counter() - t0
        if into is not None:
            into.append(box["s"])


def ready(marker: str = "READY") -> None:
    """Print the ready marker (flushed) once the model is loaded."""
    print(marker, flush=True)


def seed(default: int = 0) -> int:
    """The run's seed: ``$RSI_SEED`` (hidden seed, verifier runs only) or default."""
    try:
        return int(os.environ.get("RSI_SEED", default))
    except ValueError:
        return default


def output_dir() -> Path:
    """Where to write output files (tensors, audio) for quality guards."""
    p = Path(os.environ.get("RSI_OUTPUT_DIR") or ".")
    p.mkdir(parents=True, exist_ok=True)
    return p


def report(result: dict) -> Path | None:
    """Write the result JSON to ``$RSI_RESULT`` (atomically); returns the path."""
    result = {k: (dict(v) if isinstance(v, dict) else v) for k, v in result.items()}
    peak = device_peak_memory_mib()
    if peak is not None:
        result.setdefault("metrics", {}).setdefault("device_peak_memory_mib", peak)
    for k, v in result.get("metrics", {}).items():
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            raise ValueError(f"metrics.{k} must be a finite number, got {v!r}")
    text = json.dumps(result, allow_nan=False)
    target = os.environ.get("RSI_RESULT")
    if not target:
        print(text)
        return None
    path = Path(target)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".result-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path


write_result = report
