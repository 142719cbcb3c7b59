"""Device checks, synchronization, timers and the device fingerprint.

Every accelerator check lives here, so that tests can simulate a device by
monkeypatching one function: ``device_type`` says which device a tensor is on
for dispatch, and ``npu_available`` / ``triton_available`` /
``compiler_available`` say whether a back end can run. torch_npu and triton
are imported lazily, inside these functions, never at import time of kernels.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import platform
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import torch


def device_type(t: torch.Tensor) -> str:
    """The device type used for dispatch: "cpu", "cuda", "npu", ..."""
    return t.device.type


@functools.cache
def torch_npu():
    """The torch_npu module, or None when it is not installed or has no device."""
    if importlib.util.find_spec("torch_npu") is None:
        return None
    try:
        mod = importlib.import_module("torch_npu")
    except Exception:  # noqa: BLE001 - a broken CANN install must not break kernels
        return None
    return mod


def npu_available() -> str | None:
    """None when torch_npu can run here, else the reason why not."""
    mod = torch_npu()
    if mod is None:
        return "torch_npu is not installed"
    npu = getattr(torch, "npu", None)
    if npu is None or not npu.is_available():
        return "no NPU device visible to torch_npu"
    return None


@functools.cache
def triton_available() -> str | None:
    """None when Triton kernels can run here (CUDA device and triton), else why not."""
    if not torch.cuda.is_available():
        return "no CUDA device"
    if importlib.util.find_spec("triton") is None:
        return "triton is not installed"
    return None


@functools.cache
def compiler_available() -> str | None:
    """None when torch.compile (inductor) can build kernels for CPU here."""
    if not hasattr(torch, "compile"):
        return "this torch has no torch.compile"
    cxx = os.environ.get("CXX")
    if cxx and shutil.which(cxx):
        return None
    if any(shutil.which(c) for c in ("g++", "c++", "clang++")):
        return None
    return "no C++ compiler (g++, c++ or clang++) for inductor's CPU back end"


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
    elif device == "npu":
        torch.npu.synchronize()  # type: ignore[attr-defined]


def time_once(fn: Callable[[], object], device: str) -> float:
    """Seconds one call of fn takes, with device events where the device has them."""
    mod = {"cuda": getattr(torch, "cuda", None), "npu": getattr(torch, "npu", None)}.get(device)
    if mod is not None and hasattr(mod, "Event"):
        start, end = mod.Event(enable_timing=True), mod.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    synchronize(device)
    t0 = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - t0


@functools.cache
def code_hash() -> str:
    """A hash of the kernels sources: a cache entry written by other code is not trusted."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _dist_version(name: str) -> str:
    """An installed distribution's version without importing it ("-" when absent)."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "-"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def fingerprint(device: str) -> str:
    """What a tuning result depends on: device model, software versions
    (torch, CUDA and triton, or torch_npu), CPU threads, and our code."""
    parts = [f"torch={torch.__version__}", f"kernels={code_hash()}"]
    if device == "cuda":
        idx = torch.cuda.current_device()
        parts += [f"cuda={torch.version.cuda}", f"gpu={torch.cuda.get_device_name(idx)}",
                  f"triton={_dist_version('triton')}"]
    elif device == "npu":
        mod = torch_npu()
        parts += [f"torch_npu={getattr(mod, '__version__', '?')}"]
        try:
            parts.append(f"npu={torch.npu.get_device_name(torch.npu.current_device())}")  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - a name is nice to have
            parts.append("npu=?")
    else:
        parts += [f"cpu={_cpu_model()}", f"threads={torch.get_num_threads()}"]
    return f"{device}|" + "|".join(parts)
