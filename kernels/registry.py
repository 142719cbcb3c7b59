"""The registry: operators, their variants, and dispatch.

A call is keyed by ``Key(op, device, dtype, layout, bucket)``. The first call
of a key resolves it once: the variants that can run there (device, dtype,
layout, availability of their back end, shape limits of this call, not
disabled) pass the correctness gate (``gate.check``) or are disabled for that
key for good with a logged reason; the survivors are ranked by the autotuner
(``tuner``) or, with ``RSI_KERNELS_AUTOTUNE=0``, by declared priority; the
ranking is stored in the cache file and later processes read it from there.
Each call then runs the first ranked variant whose shape limits fit the call;
the operator's reference closes every ranking, so a call always has a variant.

Environment:

``RSI_KERNEL_<OP>=<variant>``   force a variant for OP (``RSI_KERNEL_ROPE=eager``);
                                 it still passes the gate, else the reference runs.
``RSI_KERNELS_AUTOTUNE=0``       no timing: gated variants by their declared priority.
``RSI_KERNELS_COMPILE=1``        let automatic selection consider torch.compile
                                 variants (their first call compiles; forcing one
                                 by name works without this).
``RSI_KERNELS_CACHE=<file>``     the tuning cache (default ~/.cache/rsi-kernels/autotune.json).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from . import _device, gate, tuner

log = logging.getLogger("kernels")

ALL_DEVICES = frozenset({"cpu", "cuda", "npu"})


class Key(NamedTuple):
    op: str
    device: str
    dtype: str
    layout: str
    bucket: str

    def __str__(self) -> str:
        return "|".join(self)


def pow2_bucket(n: int, cap: int = 1 << 20) -> int:
    """The power of two at or above n (at least 1, at most cap)."""
    n = max(1, int(n))
    return min(cap, 1 << (n - 1).bit_length())


def _always(_args: tuple) -> None:
    return None


def _ready() -> None:
    return None


@dataclass(frozen=True, eq=False)
class Variant:
    """One implementation of an operator and where it can run.

    ``available()`` says (once per process) whether its back end exists here:
    None, or the reason it does not. ``fits(args)`` says, for each call,
    whether the call is within its limits: None, or the reason not.
    ``jit`` marks variants that compile on first use (torch.compile).
    ``priority`` orders the gated variants when autotuning is off (highest first).
    """

    name: str
    fn: Callable[..., Any]
    devices: frozenset[str] = ALL_DEVICES
    dtypes: frozenset[torch.dtype] | None = None
    layouts: frozenset[str] | None = None
    available: Callable[[], str | None] = _ready
    fits: Callable[[tuple], str | None] = _always
    jit: bool = False
    priority: int = 0
    doc: str = ""

    def can_run(self, key: Key, dtype: torch.dtype, args: tuple) -> str | None:
        """None when this variant may serve the call, else the reason not."""
        if key.device not in self.devices:
            return f"runs on {sorted(self.devices)}, not {key.device}"
        if self.dtypes is not None and dtype not in self.dtypes:
            return f"does not take {dtype}"
        if self.layouts is not None and key.layout not in self.layouts:
            return f"does not take layout {key.layout}"
        why = self.available()
        if why is not None:
            return why
        return self.fits(args)


@dataclass(eq=False)
class Op:
    """An operator: how to key a call, its float64 reference, how to draw
    fresh inputs like a call's, and its variants (the reference first)."""

    name: str
    key: Callable[[tuple], tuple[str, str]]  # args -> (layout, bucket)
    ref64: Callable[..., Any]
    sample: Callable[[tuple, torch.Generator, int], tuple | None]
    primary: Callable[[tuple], torch.Tensor]  # the tensor whose device/dtype keys the call
    describe: Callable[[tuple], str] = lambda args: ""
    variants: dict[str, Variant] = field(default_factory=dict)

    @property
    def reference(self) -> Variant:
        """The first variant registered: the original behaviour, and the fallback."""
        return next(iter(self.variants.values()))

    def dtype_of(self, args: tuple) -> torch.dtype:
        return self.primary(args).dtype

    def make_key(self, args: tuple) -> Key:
        t = self.primary(args)
        layout, bucket = self.key(args)
        return Key(self.name, _device.device_type(t), _dtype_name(t.dtype), layout, bucket)

    def add(self, variant: Variant) -> Variant:
        if variant.name in self.variants:
            raise ValueError(f"{self.name}: variant {variant.name!r} registered twice")
        self.variants[variant.name] = variant
        return variant


_DTYPE_NAMES: dict[torch.dtype, str] = {}


def _dtype_name(dtype: torch.dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).replace("torch.", "")
    return name


def _env_flag(name: str, default: bool) -> bool:
    val = os.environ.get(name)
    if val is None or val == "":
        return default
    return val.strip().lower() not in ("0", "false", "no", "off")


class Registry:
    """Operators by name, and the per-key decisions of this process."""

    def __init__(self, cache: tuner.Cache | None = None):
        self.ops: dict[str, Op] = {}
        self.cache = cache or tuner.Cache()
        self._lock = threading.RLock()
        self._ranked: dict[tuple[Key, str | None], list[Variant]] = {}
        self._disabled: dict[Key, dict[str, str]] = {}
        self._warned: set[tuple[Key, str]] = set()

    # ---- set-up ---------------------------------------------------------
    def add_op(self, op: Op) -> Op:
        self.ops[op.name] = op
        return op

    def reset(self) -> None:
        """Forget this process's decisions (the cache file is kept)."""
        with self._lock:
            self._ranked.clear()
            self._disabled.clear()
            self._warned.clear()

    # ---- queries --------------------------------------------------------
    def disabled(self, key: Key) -> dict[str, str]:
        return dict(self._disabled.get(key, {}))

    def ranking(self, op_name: str, args: tuple) -> list[str]:
        """The variant names the call would try, in order (resolving the key if needed)."""
        op = self.ops[op_name]
        key = op.make_key(args)
        return [v.name for v in self._resolve(op, key, args, self._forced(op))]

    def choose(self, op_name: str, args: tuple) -> Variant:
        """The variant that serves this call."""
        op = self.ops[op_name]
        return self._pick(op, op.make_key(args), args)

    # ---- dispatch -------------------------------------------------------
    def call(self, op_name: str, args: tuple) -> Any:
        op = self.ops[op_name]
        if _bypass(args):
            return op.reference.fn(*args)
        key = op.make_key(args)
        while True:
            variant = self._pick(op, key, args)
            if variant is op.reference:
                return variant.fn(*args)
            try:
                return variant.fn(*args)
            except Exception as e:  # noqa: BLE001 - a variant that raises is disabled for good
                self._disable(op, key, variant, f"raised at call {op.describe(args)}: {type(e).__name__}: {e}")
                with self._lock:
                    for k in [k for k in self._ranked if k[0] == key]:
                        self._ranked[k] = [v for v in self._ranked[k] if v is not variant]

    def _pick(self, op: Op, key: Key, args: tuple) -> Variant:
        forced = self._forced(op)
        ranked = self._ranked.get((key, forced))
        if ranked is None:
            ranked = self._resolve(op, key, args, forced)
        for v in ranked:
            if v is op.reference or v.fits(args) is None:
                return v
        return op.reference

    @staticmethod
    def _forced(op: Op) -> str | None:
        name = os.environ.get(f"RSI_KERNEL_{op.name.upper()}")
        if not name:
            return None
        if name not in op.variants:
            raise ValueError(
                f"RSI_KERNEL_{op.name.upper()}={name!r}: no such variant of {op.name}; "
                f"known: {', '.join(op.variants)}"
            )
        return name

    def _disable(self, op: Op, key: Key, variant: Variant, reason: str) -> None:
        with self._lock:
            self._disabled.setdefault(key, {})[variant.name] = reason
        log.warning("kernels: %s disabled for %s: %s; using %s instead",
                    variant.name, key, reason, op.reference.name)
        self.cache.update(_device.fingerprint(key.device), str(key), disabled={variant.name: reason})

    def _warn_once(self, key: Key, msg: str) -> None:
        if (key, msg) not in self._warned:
            self._warned.add((key, msg))
            log.warning("kernels: %s", msg)

    def _resolve(self, op: Op, key: Key, args: tuple, forced: str | None) -> list[Variant]:
        with self._lock:
            ranked = self._ranked.get((key, forced))
            if ranked is not None:
                return ranked
            ranked = self._decide(op, key, args, forced)
            self._ranked[(key, forced)] = ranked
            return ranked

    def _decide(self, op: Op, key: Key, args: tuple, forced: str | None) -> list[Variant]:
        ref = op.reference
        dtype = op.dtype_of(args)
        fp = _device.fingerprint(key.device)
        entry = self.cache.get(fp, str(key)) or {}
        disabled = self._disabled.setdefault(key, {})
        for name, reason in (entry.get("disabled") or {}).items():
            disabled.setdefault(name, reason)

        def gated(v: Variant) -> bool:
            if v is ref:
                return True
            if v.name in disabled:
                return False
            why = gate.check(op, v, args)
            if why is None:
                return True
            self._disable(op, key, v, f"failed the correctness gate: {why}")
            return False

        if forced is not None:
            v = op.variants[forced]
            if v is ref:
                return [ref]
            why = disabled.get(v.name) or v.can_run(key, dtype, args)
            if why is not None:
                self._warn_once(key, f"RSI_KERNEL_{op.name.upper()}={forced} cannot serve {key}: {why}; using {ref.name}")
                return [ref]
            return [v, ref] if gated(v) else [ref]

        use_jit = _env_flag("RSI_KERNELS_COMPILE", False)
        candidates = [
            v for v in op.variants.values()
            if v is ref or (v.name not in disabled and (use_jit or not v.jit)
                            and v.can_run(key, dtype, args) is None)
        ]
        by_name = {v.name: v for v in candidates}
        cached = [by_name[n] for n in entry.get("ranking") or [] if n in by_name]
        if cached:  # answered from the cache: gated and timed by an earlier process
            return cached if ref in cached else cached + [ref]

        passed = [v for v in candidates if gated(v)]
        if len(passed) > 1 and _env_flag("RSI_KERNELS_AUTOTUNE", True):
            sample = op.sample(args, torch.Generator().manual_seed(1234), 0) or args
            with torch.no_grad():
                for v in list(passed):  # one call each first: a raising variant is dropped
                    try:
                        v.fn(*sample)
                        if v.jit:
                            tuner.settle(functools.partial(v.fn, *sample), key.device)
                    except Exception as e:
                        if v is ref:
                            raise
                        self._disable(op, key, v, f"raised while timed: {type(e).__name__}: {e}")
                        passed.remove(v)
                medians = tuner.measure_many({v.name: functools.partial(v.fn, *sample) for v in passed},
                                             key.device)
            passed = sorted((v for v in passed if v.name in medians), key=lambda v: medians[v.name])
            self.cache.update(fp, str(key), ranking=[v.name for v in passed], median_s=medians)
            log.info("kernels: %s -> %s (%s)", key, passed[0].name,
                     ", ".join(f"{n}={t * 1e6:.1f}us" for n, t in sorted(medians.items(), key=lambda x: x[1])))
        else:
            passed.sort(key=lambda v: -v.priority)
        return passed if ref in passed else passed + [ref]


def _bypass(args: tuple) -> bool:
    """Calls the reference serves directly: while torch.compile traces the
    caller (it fuses the reference itself), and when autograd needs a graph."""
    try:
        if torch.compiler.is_compiling():
            return True
    except AttributeError:  # pragma: no cover - old torch
        pass
    if torch.is_grad_enabled():
        return any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
    return False


REGISTRY = Registry()
