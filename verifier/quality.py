"""Quality guards on what a benchmark outputs: WER, output length, allclose.

Each check compares the candidate's outputs with a reference arm's (Bk or B0),
taken from the first measured run of each arm (``snapshot``: files are read at
once, before a later run can overwrite them).
"""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Any

import numpy as np

from .config import TOLERANCES, QualityGuard

_PUNCT = re.compile(
    "[" + re.escape(string.punctuation) + "\u2018\u2019\u201c\u201d\u2013\u2014\u2026]"
)
TENSOR_SUFFIXES = (".npy", ".pt", ".pth")


class QualityError(ValueError):
    """Outputs missing or unreadable: the guard fails with this message."""


# ---- WER ---------------------------------------------------------------------


def normalize_text(text: str) -> str:
    """The one normalization applied to both sides: lower case, punctuation
    removed, whitespace collapsed."""
    return " ".join(_PUNCT.sub(" ", text.lower()).split())


def corpus_wer(references: list[str], hypotheses: list[str]) -> float:
    """Corpus WER (total errors / total reference words) through jiwer, with
    ``normalize_text`` on both sides. An empty reference counts its hypothesis
    words as insertions."""
    import jiwer

    if len(references) != len(hypotheses):
        raise QualityError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    refs = [normalize_text(r) for r in references]
    hyps = [normalize_text(h) for h in hypotheses]
    errors = 0
    words = 0
    keep_r, keep_h = [], []
    for r, h in zip(refs, hyps, strict=True):
        if not r:
            errors += len(h.split())
        else:
            keep_r.append(r)
            keep_h.append(h)
    if keep_r:
        out = jiwer.process_words(keep_r, keep_h)
        errors += out.substitutions + out.deletions + out.insertions
        words += sum(len(r.split()) for r in keep_r)
    if words == 0:
        return 0.0 if errors == 0 else float("inf")
    return errors / words


def _texts(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(x, str) for x in value):
        return list(value)
    raise QualityError(f"{where} must be a string or a list of strings")


# ---- output length -----------------------------------------------------------


def output_length(value: Any, base: Path | None = None) -> float:
    """Numbers count as themselves (e.g. seconds of audio), texts by words,
    tensor files by elements; lists are summed."""
    if isinstance(value, bool):
        raise QualityError("a boolean has no length")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        if value.endswith(TENSOR_SUFFIXES) and base is not None:
            return float(load_tensor(value, base)[0].size)
        return float(len(value.split()))
    if isinstance(value, np.ndarray):
        return float(value.size)
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], np.ndarray):
        return float(value[0].size)  # a loaded tensor: (array, dtype)
    if isinstance(value, list):
        return float(sum(output_length(v, base) for v in value))
    raise QualityError(f"cannot measure the length of {type(value).__name__}")


# ---- tensors -------------------------------------------------------------------

_NP_DTYPE = {"float64": "fp64", "float32": "fp32", "float16": "fp16"}


def resolve(path: str, bases: list[Path]) -> Path:
    p = Path(path)
    if p.is_absolute():
        if p.exists():
            return p
        raise QualityError(f"output file {path} does not exist")
    for b in bases:
        if (b / p).exists():
            return b / p
    raise QualityError(f"output file {path} not found (looked in {', '.join(map(str, bases))})")


def load_tensor(path: str, base: Path | list[Path]) -> tuple[np.ndarray, str]:
    """(array as float64 or original ints, dtype name) from .npy, or .pt/.pth
    when torch is installed (imported here, lazily)."""
    bases = base if isinstance(base, list) else [base]
    p = resolve(path, bases)
    if p.suffix == ".npy":
        try:
            a = np.load(p, allow_pickle=False)
        except Exception as e:  # noqa: BLE001
            raise QualityError(f"cannot read {p.name}: {e}") from None
        return a, _NP_DTYPE.get(str(a.dtype), str(a.dtype))
    if p.suffix in (".pt", ".pth"):
        try:
            import torch  # lazily: only for .pt outputs
        except ImportError:
            raise QualityError(
                f"{p.name} is a torch file but torch is not installed; save .npy instead"
            ) from None
        try:
            t = torch.load(p, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001
            raise QualityError(f"cannot read {p.name}: {e}") from None
        if not isinstance(t, torch.Tensor):
            raise QualityError(f"{p.name} holds a {type(t).__name__}, not a tensor")
        name = {
            torch.float32: "fp32",
            torch.float16: "fp16",
            torch.bfloat16: "bf16",
            torch.float64: "fp64",
        }.get(t.dtype, str(t.dtype).replace("torch.", ""))
        arr = (
            t.detach().float().numpy()
            if t.dtype in (torch.bfloat16, torch.float16)
            else t.detach().numpy()
        )
        if name == "fp16":
            arr = arr.astype(np.float16)
        return arr, name
    raise QualityError(f"unsupported tensor file {p.name}: use .npy (or .pt with torch installed)")


def snapshot(outputs: dict, guards: list[QualityGuard], bases: list[Path]) -> dict[str, Any]:
    """Load what the quality guards need from one run's outputs, at once.
    Values are the loaded objects, or a QualityError to report later."""
    snap: dict[str, Any] = {}
    keys = set()
    for g in guards:
        keys.add(g.output)
        if g.reference:
            keys.add(g.reference)
    for key in keys:
        if key not in outputs:
            snap[key] = QualityError(f"the result has no outputs.{key}")
            continue
        value = outputs[key]
        needs_tensor = any(g.kind == "allclose" and g.output == key for g in guards) or (
            any(g.kind == "output_length" and g.output == key for g in guards)
            and _has_tensor_paths(value)
        )
        if not needs_tensor:
            snap[key] = value
            continue
        try:
            snap[key] = _tensors(value, bases)
        except QualityError as e:
            snap[key] = e
    return snap


def _has_tensor_paths(value: Any) -> bool:
    if isinstance(value, str):
        return value.endswith(TENSOR_SUFFIXES)
    if isinstance(value, list):
        return any(_has_tensor_paths(v) for v in value)
    return False


def _tensors(value: Any, bases: list[Path]) -> list[tuple[np.ndarray, str]]:
    if isinstance(value, str):
        return [load_tensor(value, bases)]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return [load_tensor(v, bases) for v in value]
    if isinstance(value, list):
        try:
            a = np.asarray(value, dtype=float)
        except (TypeError, ValueError):
            raise QualityError(
                "inline outputs for allclose must be a (nested) list of numbers"
            ) from None
        return [(a, "fp64")]
    raise QualityError("outputs for allclose must be a path, a list of paths, or a list of numbers")


def allclose(
    cand: list[tuple[np.ndarray, str]], ref: list[tuple[np.ndarray, str]], guard: QualityGuard
) -> tuple[bool, float, str]:
    """(ok, max abs error, detail) comparing tensors with the per-dtype tolerances."""
    if len(cand) != len(ref):
        return False, float("inf"), f"{len(cand)} tensors vs {len(ref)} in the reference"
    worst = 0.0
    details = []
    ok = True
    for i, ((c, cd), (r, rd)) in enumerate(zip(cand, ref, strict=True)):
        if c.shape != r.shape:
            return False, float("inf"), f"tensor {i}: shape {c.shape} vs reference {r.shape}"
        if cd != rd and guard.dtype is None:
            return False, float("inf"), f"tensor {i}: dtype {cd} vs reference {rd}"
        row = guard.dtype or rd
        if row in TOLERANCES:
            rtol, atol = TOLERANCES[row]
        else:
            rtol, atol = 0.0, 0.0  # integer or unknown dtypes: exact
        rtol = guard.rtol if guard.rtol is not None else rtol
        atol = guard.atol if guard.atol is not None else atol
        c64 = c.astype(np.float64)
        r64 = r.astype(np.float64)
        if not np.isfinite(c64).all() and not np.array_equal(np.isfinite(c64), np.isfinite(r64)):
            return (
                False,
                float("inf"),
                f"tensor {i}: non-finite values where the reference has none",
            )
        diff = np.abs(c64 - r64)
        finite = np.isfinite(diff)
        err = float(diff[finite].max()) if finite.any() else 0.0
        worst = max(worst, err)
        close = np.isclose(c64, r64, rtol=rtol, atol=atol, equal_nan=True)
        if not close.all():
            ok = False
            bad = int((~close).sum())
            details.append(
                f"tensor {i} ({row}): {bad}/{c.size} elements outside rtol={rtol:g} atol={atol:g}, "
                f"max abs error {err:.3g}"
            )
        else:
            details.append(
                f"tensor {i} ({row}): max abs error {err:.3g} within rtol={rtol:g} atol={atol:g}"
            )
    return ok, worst, "; ".join(details)
