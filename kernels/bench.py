"""``python -m kernels.bench [--json FILE]``: every variant, per operator and shape.

For each operator, decode-like and prefill-like shapes (sized per device),
each variant that can run here first passes the correctness gate, then is
timed (warm-up, median of repeats, device synchronized). A row gives the
median, the speedup over the reference, and the achieved memory bandwidth
(the bytes the operator must move at least, over the median) as a fraction of
this machine's copy bandwidth, measured first with ``dst.copy_(src)``: these
operators are memory-bound, so copy bandwidth is their ceiling.

``--json FILE`` writes the rows as a JSON list: op, variant, shape, dtype,
median_s, speedup, bandwidth_fraction (plus device, layout, bytes, gate,
copy_bandwidth_Bps, fingerprint). A variant that fails the gate has a row with
median_s null and the reason in gate.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from . import _device, gate, tuner
from .ops import modulate as M
from .ops import norm as N
from .ops import rope as R
from .registry import REGISTRY, Op


@dataclass
class Case:
    op: str
    label: str  # "decode" | "prefill" | ...
    shape: str
    args: tuple
    bytes: int


def _rand(shape, dtype, device):
    return torch.randn(shape, dtype=torch.float32).to(dtype=dtype, device=device)


def rope_case(label, B, S, Nq, Nk, D, layout, interleaved, dtype, device) -> Case:
    if layout == "BSND":
        q, k = _rand((B, S, Nq, D), dtype, device), _rand((B, S, Nk, D), dtype, device)
    else:
        q, k = _rand((B, Nq, S, D), dtype, device), _rand((B, Nk, S, D), dtype, device)
    cos, sin = R.tables(S, D, interleaved, dtype=dtype, device=device)
    args = (q, k, cos, sin, layout, interleaved)
    shape = f"q[{B},{S},{Nq},{D}] k[{B},{S},{Nk},{D}] {R._tag(layout, interleaved)}"
    return Case("rope", label, shape, args, R.bytes_moved(args))


def norm_case(label, rows, H, residual, dtype, device) -> Case:
    x = _rand((rows, H), dtype, device)
    w = (1 + 0.1 * _rand((H,), torch.float32, device)).to(dtype)
    r = _rand((rows, H), dtype, device) if residual else None
    args = (x, w, 1e-6, r)
    return Case("rms_norm", label, f"x[{rows},{H}]{' +residual' if residual else ''}", args, N.bytes_moved(args))


def mod_case(op, label, B, T, C, shared, dtype, device) -> Case:
    x = _rand((B, T, C), dtype, device)
    sb = 1 if shared else B
    shift, scale = _rand((sb, 1, C), dtype, device), 0.1 * _rand((sb, 1, C), dtype, device)
    args = (x, shift, scale) if op == "modulate" else (x, shift, scale, 1e-6)
    return Case(op, label, f"x[{B},{T},{C}] shift[{sb},1,{C}]", args, M.mod_bytes(args[:3]))


def cases(device: str, dtype: torch.dtype, quick: bool) -> list[Case]:
    big = device != "cpu"
    if quick:
        return [
            rope_case("decode", 2, 1, 4, 2, 32, "BSND", False, dtype, device),
            rope_case("prefill", 1, 64, 4, 2, 32, "BSND", False, dtype, device),
            norm_case("prefill", 64, 128, True, dtype, device),
            mod_case("modulate", "prefill", 2, 32, 64, False, dtype, device),
            mod_case("layer_norm_modulate", "prefill", 1, 32, 64, True, dtype, device),
        ]
    if big:  # an accelerator: shapes of a 7B-class model, large enough to reach bandwidth
        dec, pre = (64, 1, 32, 8, 128), (8, 4096, 32, 8, 128)
        nrows, H = (64, 8192), 4096
        dit = (8, 4096, 1152)
    else:
        dec, pre = (8, 1, 16, 8, 128), (1, 1024, 16, 8, 128)
        nrows, H = (8, 2048), 2048
        dit = (2, 1024, 1152)
    out = [
        rope_case("decode", *dec, "BSND", False, dtype, device),
        rope_case("prefill", *pre, "BSND", False, dtype, device),
        rope_case("prefill", *pre, "BSND", True, dtype, device),
        rope_case("prefill", *pre, "BNSD", False, dtype, device),
    ]
    for label, rows in zip(("decode", "prefill"), nrows, strict=True):
        out.append(norm_case(label, rows, H, False, dtype, device))
        out.append(norm_case(label, rows, H, True, dtype, device))
    B, T, C = dit
    out.append(mod_case("modulate", "decode", B, 16, C, False, dtype, device))
    out.append(mod_case("modulate", "prefill", B, T, C, False, dtype, device))
    out.append(mod_case("layer_norm_modulate", "prefill", 1, T, C, True, dtype, device))
    out.append(mod_case("layer_norm_modulate", "prefill", B, T, C, False, dtype, device))
    return out


def copy_bandwidth(device: str, nbytes: int) -> float:
    """Bytes per second of dst.copy_(src) (read + write) on device."""
    n = nbytes // 4
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    t = tuner.measure(lambda: dst.copy_(src), device, warmup=3, min_repeats=10, max_repeats=50, budget_s=0.5)
    return 2 * src.nbytes / t


def bench_case(case: Case, copy_bw: float, *, include_jit: bool, budget_s: float,
               log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Gate every variant that can run this case, then time the survivors in
    interleaved rounds (``tuner.measure_many``)."""
    op: Op = REGISTRY.ops[case.op]
    key = op.make_key(case.args)
    dtype = op.dtype_of(case.args)
    rows: dict[str, dict[str, Any]] = {}
    timed: dict[str, Callable[[], object]] = {}
    for v in op.variants.values():
        if v.can_run(key, dtype, case.args) is not None or (v.jit and not include_jit):
            continue
        rows[v.name] = {"op": case.op, "variant": v.name, "shape": f"{case.label} {case.shape}",
                        "dtype": key.dtype, "device": key.device, "layout": key.layout,
                        "bytes": case.bytes, "median_s": None, "speedup": None,
                        "bandwidth_fraction": None, "gate": "ok"}
        t0 = time.perf_counter()
        why = None if v is op.reference else gate.check(op, v, case.args)
        if why is not None:
            rows[v.name]["gate"] = why
            log(f"  {case.op} {case.label} {v.name}: gate failed: {why}")
            continue
        log(f"  {case.op} {case.label} {v.name}: gate ok ({time.perf_counter() - t0:.1f} s)")
        timed[v.name] = functools.partial(v.fn, *case.args)
        if v.jit:
            with torch.no_grad():
                tuner.settle(timed[v.name], key.device)
    with torch.no_grad():
        medians = tuner.measure_many(timed, key.device, warmup=3, min_repeats=10,
                                     max_repeats=200, budget_s=budget_s)
    ref_time = medians.get(op.reference.name)
    for name, med in medians.items():
        row = rows[name]
        row["median_s"] = med
        row["bandwidth_fraction"] = case.bytes / med / copy_bw
        if ref_time:
            row["speedup"] = ref_time / med
    return list(rows.values())


def render(rows: list[dict[str, Any]], copy_bw: float, device: str) -> str:
    head = f"device {device}: copy bandwidth {copy_bw / 1e9:.1f} GB/s ({_device.fingerprint(device)})"
    lines = [head, ""]
    groups: dict[tuple, list] = {}
    for r in rows:
        groups.setdefault((r["op"], r["shape"], r["dtype"]), []).append(r)
    for (op, shape, dtype), rs in groups.items():
        lines.append(f"{op}  {shape}  {dtype}")
        lines.append(f"  {'variant':<10} {'median':>12} {'speedup':>8} {'GB/s':>8} {'of copy':>8}")
        for r in sorted(rs, key=lambda r: r["median_s"] or float("inf")):
            if r["median_s"] is None:
                lines.append(f"  {r['variant']:<10} gate failed: {r['gate'][:90]}")
                continue
            gbs = r["bytes"] / r["median_s"] / 1e9
            lines.append(f"  {r['variant']:<10} {r['median_s'] * 1e6:>9.1f} us {r['speedup']:>7.2f}x "
                         f"{gbs:>8.1f} {r['bandwidth_fraction'] * 100:>7.1f}%")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kernels.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", metavar="FILE", help="write the rows as JSON")
    p.add_argument("--device", default=None, help="cpu, cuda or npu (default: the accelerator if any)")
    p.add_argument("--dtype", default=None, help="float32, float16 or bfloat16 (default: fp32 on CPU, bf16 elsewhere)")
    p.add_argument("--ops", default=None, help="comma-separated operators (default: all)")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile variants")
    p.add_argument("--quick", action="store_true", help="tiny shapes, for tests")
    p.add_argument("--budget", type=float, default=0.3, help="timing budget per variant, seconds")
    a = p.parse_args(argv)

    device = a.device or ("cuda" if torch.cuda.is_available()
                          else "npu" if _device.npu_available() is None else "cpu")
    if device == "npu":
        import torch_npu  # noqa: F401
    dtype = getattr(torch, a.dtype) if a.dtype else (torch.float32 if device == "cpu" else torch.bfloat16)
    ops = set(a.ops.split(",")) if a.ops else None

    def log(s: str) -> None:
        print(s, file=sys.stderr, flush=True)

    start = time.perf_counter()
    copy_bw = copy_bandwidth(device, (1 << 20 if a.quick else 64 << 20) if device == "cpu" else 1 << 30)
    log(f"copy bandwidth {copy_bw / 1e9:.1f} GB/s")
    rows: list[dict[str, Any]] = []
    for case in cases(device, dtype, a.quick):
        if ops is None or case.op in ops:
            rows.extend(bench_case(case, copy_bw, include_jit=not a.no_compile,
                                   budget_s=0.02 if a.quick else a.budget, log=log))
    print(render(rows, copy_bw, device))
    log(f"bench took {time.perf_counter() - start:.0f} s")
    if a.json:
        fp = _device.fingerprint(device)
        for row in rows:
            row.update(copy_bandwidth_Bps=copy_bw, fingerprint=fp)
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
