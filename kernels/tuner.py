"""The autotuner: time variants, keep the winners in a cache file.

Timing: a few warm-up calls, then repeats until both a minimum count and a
small time budget are reached (or a maximum count), and the median is kept.
Each repeat is synchronized with the device (CUDA / NPU events where the
device has them, ``perf_counter`` around a synchronize otherwise).

Cache: one JSON file, ``$RSI_KERNELS_CACHE`` or
``~/.cache/rsi-kernels/autotune.json``, holding per device fingerprint (see
``_device.fingerprint``: device model, software versions, CPU threads and a
hash of the kernels sources) and per key the ranking of the variants that
passed the gate, their medians, and the variants disabled with the reason.
Writes re-read the file under a lock and replace it atomically, so several
processes can share it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from . import _device

CACHE_VERSION = 1
WARMUP = 3
MIN_REPEATS = 5
MAX_REPEATS = 50
BUDGET_S = 0.25


def cache_path() -> Path:
    env = os.environ.get("RSI_KERNELS_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "rsi-kernels" / "autotune.json"


def measure(fn: Callable[[], object], device: str, *, warmup: int | None = None,
            min_repeats: int | None = None, max_repeats: int | None = None,
            budget_s: float | None = None) -> float:
    """Median seconds of fn() on device (defaults: the module's constants)."""
    warmup = WARMUP if warmup is None else warmup
    min_repeats = MIN_REPEATS if min_repeats is None else min_repeats
    max_repeats = MAX_REPEATS if max_repeats is None else max_repeats
    budget_s = BUDGET_S if budget_s is None else budget_s
    for _ in range(warmup):
        fn()
    _device.synchronize(device)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_repeats:
        times.append(_device.time_once(fn, device))
        if len(times) >= min_repeats and time.perf_counter() - start >= budget_s:
            break
    return statistics.median(times)


def settle(fn: Callable[[], object], device: str, *, max_s: float = 3.0) -> None:
    """Extra warm-up for a freshly compiled variant: its first calls after
    compiling run slow for a while (inductor's compile workers starting up,
    caches), so call it until the last three calls are within 1.5x of the
    fastest so far, or max_s has passed."""
    start = time.perf_counter()
    times: list[float] = []
    while time.perf_counter() - start < max_s:
        times.append(_device.time_once(fn, device))
        if len(times) >= 5 and max(times[-3:]) <= 1.5 * min(times):
            break


def measure_many(fns: dict[str, Callable[[], object]], device: str, *, warmup: int | None = None,
                 min_repeats: int | None = None, max_repeats: int | None = None,
                 budget_s: float | None = None) -> dict[str, float]:
    """Median seconds of each fn, timed in interleaved rounds (each round runs
    every fn once, in a rotating order), so that a burst of load on a shared
    machine hits all of them alike instead of whichever ran at the time.
    The budget is per fn; an exception from a fn propagates."""
    warmup = WARMUP if warmup is None else warmup
    min_repeats = MIN_REPEATS if min_repeats is None else min_repeats
    max_repeats = MAX_REPEATS if max_repeats is None else max_repeats
    budget_s = BUDGET_S if budget_s is None else budget_s
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    _device.synchronize(device)
    times: dict[str, list[float]] = {n: [] for n in names}
    start = time.perf_counter()
    r = 0
    while r < max_repeats:
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            times[name].append(_device.time_once(fns[name], device))
        r += 1
        if r >= min_repeats and time.perf_counter() - start >= budget_s * len(names):
            break
    return {n: statistics.median(t) for n, t in times.items()}


class Cache:
    """The persistent tuning cache (see the module docstring)."""

    def __init__(self, path: Path | None = None):
        self._path = path
        self._warned = False

    @property
    def path(self) -> Path:
        return self._path or cache_path()

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {"version": CACHE_VERSION, "devices": {}}
        if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
            return {"version": CACHE_VERSION, "devices": {}}
        data.setdefault("devices", {})
        return data

    def get(self, fingerprint: str, key: str) -> dict[str, Any] | None:
        entry = self._read()["devices"].get(fingerprint, {}).get(key)
        return entry if isinstance(entry, dict) else None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = self.path.with_name(self.path.name + ".lock")
        with open(lock, "a+") as fh:
            try:
                import fcntl

                fcntl.flock(fh, fcntl.LOCK_EX)
            except (ImportError, OSError):  # no flock here: last writer wins
                pass
            yield

    def update(self, fingerprint: str, key: str, **fields: Any) -> None:
        """Merge fields into the entry for (fingerprint, key) on disk."""
        try:
            with self._locked():
                data = self._read()
                entry = data["devices"].setdefault(fingerprint, {}).setdefault(key, {})
                for name, value in fields.items():
                    if isinstance(value, dict) and isinstance(entry.get(name), dict):
                        entry[name].update(value)
                    else:
                        entry[name] = value
                entry["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".autotune-")
                with os.fdopen(fd, "w") as fh:
                    json.dump(data, fh, indent=1, sort_keys=True)
                os.replace(tmp, self.path)
        except OSError as e:  # a read-only home must not break the model
            if not self._warned:
                self._warned = True
                logging.getLogger("kernels").warning(
                    "kernels: cannot write tuning cache %s: %s (set RSI_KERNELS_CACHE)", self.path, e)
