"""Quality guards on what a benchmark outputs: WER, output length, allclose,
and output files: waveform (SNR in dB), spectral (log-mel distance in dB) and
tensor (allclose per file). ``KINDS`` is the registry: every kind declared in
``qualitykinds`` with its comparator (a declared kind without one fails at
import; a guard of an undeclared kind fails, never falls back to another).

Each check compares one candidate run's outputs with one run's of a reference
arm (Bk or B0); ``guards.Evaluator`` takes a ``snapshot`` of every measured run
of every arm as it ends (files are described at once: checked, counted and
digested; a comparison reads them again from the run's dir, which the session
keeps until it closes, and fails on a file that changed) and judges each
candidate run. ``snapshot_digest`` tells whether two runs'
outputs are bit-exact.

``evaluate`` judges one guard on two such snapshots and returns the
``GuardResult`` the verdict carries.

Output files were written by untrusted code: they are read only as regular
files (``O_NOFOLLOW``: a symlink is an error, never followed; never a FIFO or
device), size-capped, and only inside the run's dirs (no ``..``, no symlinked
directory on the way). Paths under ``/rsi/run/outputs`` (a container's view)
resolve to the run's output dir.

The file guards (waveform, spectral, tensor) never hold a file whole
(issue 30.3): a run's snapshot holds one ``outfiles.OutFile`` per file (its
header checked against fixed bounds, its samples counted against the guard's
``max_samples``, its payload digested), and a comparison streams the two
files of one name block by block, checking neither changed since its run.
Memory per run stays under ``outfiles.MEMORY_BOUND_MIB`` (64 MiB) whatever
the files claim; the CPU per file grows with its samples, bounded by
``max_samples``. A file past a bound is an error naming it and the bound.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import io
import json
import math
import os
import re
import stat
import string
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .config import TOLERANCES, QualityGuard
from .outfiles import (
    DEFAULT_MAX_SAMPLES,
    MAX_FILE_BYTES,
    ArrayFile,
    OutFile,
    OutFileError,
    Samples,
    decode_pcm,
    describe_npy,
    describe_wav,
    pairs,
    parse_wav,
)
from .protocol import ProtocolError, read_regular
from .qualitykinds import QUALITY_KINDS, SPECTRAL_MAX_DB, KindDecl, unknown_kind_message
from .verdict import Against, GuardResult, arm_label

_PUNCT = re.compile(
    "[" + re.escape(string.punctuation) + "\u2018\u2019\u201c\u201d\u2013\u2014\u2026]"
)
TENSOR_SUFFIXES = (".npy", ".pt", ".pth")
MAX_FILES = 10_000
CONTAINER_OUTPUTS = "/rsi/run/outputs/"


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
    if isinstance(value, OutFile):
        return float(value.size)  # a described .npy file: its elements
    if isinstance(value, list):
        return float(sum(output_length(v, base) for v in value))
    raise QualityError(f"cannot measure the length of {type(value).__name__}")


# ---- tensors -------------------------------------------------------------------

_NP_DTYPE = {"float64": "fp64", "float32": "fp32", "float16": "fp16"}


def resolve(path: str, bases: list[Path]) -> Path:
    """The file ``path`` names, inside one of ``bases``, without following a
    symlink on the way. Raises QualityError."""
    if path.startswith(CONTAINER_OUTPUTS):
        path = path[len(CONTAINER_OUTPUTS) :]
    p = Path(path)
    for b in bases:
        rel = p
        if p.is_absolute():
            try:
                rel = p.relative_to(b)
            except ValueError:
                continue
        if ".." in rel.parts:
            raise QualityError("an output path leaves the output dir ('..'; the path is not quoted)")
        if _plain_path(b, rel):
            return b / rel
    where = ", ".join(map(str, bases))
    raise QualityError(f"an output file the result names was not found (looked in {where}; its path is not quoted)")


def _plain_path(base: Path, rel: Path) -> bool:
    """True when base/rel exists with no symlink among its directories
    (the last component is checked when it is opened, with O_NOFOLLOW)."""
    cur = base
    for part in rel.parts[:-1]:
        cur = cur / part
        try:
            st = os.lstat(cur)
        except OSError:
            return False
        if not stat.S_ISDIR(st.st_mode):
            raise QualityError("an output path goes through a symlink or not a directory (not followed; not quoted)")
    return os.path.lexists(base / rel)


def read_file(p: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    try:
        return read_regular(p, limit, "output file")
    except FileNotFoundError:
        raise QualityError("an output file the result names does not exist") from None
    except ProtocolError as e:
        raise QualityError(str(e)) from None


def load_tensor(path: str, base: Path | list[Path]) -> tuple[np.ndarray, str]:
    """(array as float64 or original ints, dtype name) from .npy, or .pt/.pth
    when torch is installed (imported here, lazily)."""
    bases = base if isinstance(base, list) else [base]
    p = resolve(path, bases)
    if p.suffix == ".npy":
        try:
            a = np.load(io.BytesIO(read_file(p)), allow_pickle=False)
        except QualityError:
            raise
        except Exception as e:  # noqa: BLE001
            raise QualityError(f"cannot read an output .npy file ({type(e).__name__})") from None
        return a, _NP_DTYPE.get(str(a.dtype), str(a.dtype))
    if p.suffix in (".pt", ".pth"):
        try:
            import torch  # lazily: only for .pt outputs
        except ImportError:
            raise QualityError(
                "an output file is a torch file but torch is not installed; save .npy instead"
            ) from None
        data = read_file(p)
        try:
            t = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001
            raise QualityError(f"cannot read an output .pt file ({type(e).__name__})") from None
        if not isinstance(t, torch.Tensor):
            raise QualityError("an output .pt file holds something other than a tensor")
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
    raise QualityError("an output tensor file of an unsupported type: use .npy (or .pt with torch installed)")


def snapshot(outputs: dict, guards: list[QualityGuard], bases: list[Path]) -> dict[str, Any]:
    """Load what the quality guards need from one run's outputs, at once.
    Values are the loaded objects, or a QualityError to report later."""
    snap: dict[str, Any] = {}
    keys = set()
    for g in guards:
        if g.files:
            snap[file_key(g)] = _load_files(g, bases[0]) if bases else QualityError("no output dir")
            continue
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


def snapshot_digest(snap: Mapping[str, Any]) -> dict[str, str]:
    """Per key of a ``snapshot``: a digest of its content (arrays by dtype,
    shape and bytes; an error by its message), equal iff bit-exact."""
    out = {}
    for key, value in snap.items():
        h = hashlib.sha256()
        _feed(h, value)
        out[key] = h.hexdigest()
    return out


def _feed(h: Any, v: Any) -> None:
    if isinstance(v, np.ndarray):
        a = np.ascontiguousarray(v)
        h.update(f"nd:{a.dtype.str}:{a.shape}:".encode())
        h.update(a.tobytes())
    elif isinstance(v, dict):
        h.update(b"{")
        for k in sorted(v, key=str):
            h.update(json.dumps(str(k)).encode() + b":")
            _feed(h, v[k])
        h.update(b"}")
    elif isinstance(v, (list, tuple)):
        h.update(b"[")
        for x in v:
            _feed(h, x)
            h.update(b",")
        h.update(b"]")
    elif isinstance(v, OutFile):  # its payload's digest, taken when it was described
        h.update(f"file:{v.kind}:{v.rate}:{v.channels}:{v.width}:{v.dtype}:{v.shape}:".encode())
        h.update(v.digest.encode())
    elif isinstance(v, QualityError):
        h.update(b"error:" + str(v).encode())
    else:
        h.update(json.dumps(v, sort_keys=True, default=repr).encode())


def _has_tensor_paths(value: Any) -> bool:
    if isinstance(value, str):
        return value.endswith(TENSOR_SUFFIXES)
    if isinstance(value, list):
        return any(_has_tensor_paths(v) for v in value)
    return False


Tensor = tuple[np.ndarray, str] | OutFile
"""A tensor to compare: (array, dtype name) in memory, or an .npy output file
read block by block (``outfiles.OutFile``)."""


def _tensors(value: Any, bases: list[Path]) -> list[Tensor]:
    """The tensors an ``outputs`` value names: .npy paths described (read
    block by block when compared), .pt paths loaded (torch reads them whole),
    or an inline list of numbers."""
    if isinstance(value, str):
        return [_tensor_at(value, bases, 0)]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return [_tensor_at(v, bases, i) for i, v in enumerate(value)]
    if isinstance(value, list):
        try:
            a = np.asarray(value, dtype=float)
        except (TypeError, ValueError):
            raise QualityError(
                "inline outputs for allclose must be a (nested) list of numbers"
            ) from None
        return [(a, "fp64")]
    raise QualityError("outputs for allclose must be a path, a list of paths, or a list of numbers")


def _tensor_at(path: str, bases: list[Path], i: int) -> Tensor:
    """Tensor ``i`` of an outputs value (its path is never quoted in an error)."""
    if not path.endswith(".npy"):
        return load_tensor(path, bases)
    try:
        return describe_npy(resolve(path, bases), f"tensor {i}")
    except OutFileError as e:
        raise QualityError(str(e)) from None


def _tensor_parts(t: Tensor) -> tuple[Samples, str, tuple[int, ...]]:
    """(values, dtype name, shape) of a tensor in memory or in a file."""
    if isinstance(t, OutFile):
        name = np.dtype(t.dtype).name
        return t, _NP_DTYPE.get(name, name), t.shape
    a, dtype = t
    return ArrayFile(np.asarray(a)), dtype, tuple(np.shape(a))


def allclose(cand: list[Tensor], ref: list[Tensor], guard: QualityGuard) -> tuple[bool, float, str]:
    """(ok, max abs error, detail) comparing tensors with the per-dtype
    tolerances, block by block (a tensor file is never held whole)."""
    if len(cand) != len(ref):
        return False, float("inf"), f"{len(cand)} tensors vs {len(ref)} in the reference"
    worst = 0.0
    details = []
    ok = True
    for i, (ct, rt) in enumerate(zip(cand, ref, strict=True)):
        (c, cd, cs), (r, rd, rs) = _tensor_parts(ct), _tensor_parts(rt)
        if cs != rs:
            return False, float("inf"), f"tensor {i}: shape {cs} vs reference {rs}"
        if cd != rd and guard.dtype is None:
            return False, float("inf"), f"tensor {i}: dtype {cd} vs reference {rd}"
        row = guard.dtype or rd
        if row in TOLERANCES:
            rtol, atol = TOLERANCES[row]
        else:
            rtol, atol = 0.0, 0.0  # integer or unknown dtypes: exact
        rtol = guard.rtol if guard.rtol is not None else rtol
        atol = guard.atol if guard.atol is not None else atol
        bad, err, nonfinite = _close(c, r, rtol, atol)
        if nonfinite:
            return False, float("inf"), f"tensor {i}: non-finite values where the reference has none"
        worst = max(worst, err)
        if bad:
            ok = False
            details.append(
                f"tensor {i} ({row}): {bad}/{c.size} elements outside rtol={rtol:g} atol={atol:g}, "
                f"max abs error {err:.3g}"
            )
        else:
            details.append(
                f"tensor {i} ({row}): max abs error {err:.3g} within rtol={rtol:g} atol={atol:g}"
            )
    return ok, worst, "; ".join(details)


def _close(c: Samples, r: Samples, rtol: float, atol: float) -> tuple[int, float, bool]:
    """(elements outside the tolerance, max finite abs error, whether the
    candidate has non-finite values where the reference's differ) of two
    tensors of the same size, block by block."""
    bad, err, c_nonfinite, pattern_differs = 0, 0.0, False, False
    for c64, r64 in pairs(c, r):
        cf, rf = np.isfinite(c64), np.isfinite(r64)
        c_nonfinite = c_nonfinite or not cf.all()
        pattern_differs = pattern_differs or not np.array_equal(cf, rf)
        diff = np.abs(c64 - r64)
        finite = np.isfinite(diff)
        if finite.any():
            err = max(err, float(diff[finite].max()))
        bad += int((~np.isclose(c64, r64, rtol=rtol, atol=atol, equal_nan=True)).sum())
    return bad, err, c_nonfinite and pattern_differs


# ---- output files: waveform, spectral and tensor guards ---------------------------


def file_key(g: QualityGuard) -> str:
    return f"files:{g.kind}:{g.files}"


def _load_files(g: QualityGuard, out_dir: Path) -> dict[str, OutFile] | QualityError:
    """name -> ``OutFile`` (checked, counted, digested; never held whole) for
    every entry of ``out_dir`` matching ``g.files`` (a symlink, FIFO or other
    non-regular entry is an error, not followed; so is a file past a bound)."""
    try:
        entries = sorted(os.scandir(out_dir), key=lambda e: e.name)
    except OSError as e:
        return QualityError(f"cannot list the output dir: {e.strerror}")
    found = [x for x in entries if fnmatch.fnmatchcase(x.name, g.files or "")]
    if len(found) > MAX_FILES:
        return QualityError(f"{len(found)} files match {g.files}, over the {MAX_FILES} limit")
    wav = QUALITY_KINDS[g.kind].file_ext == "wav"
    limit = g.max_samples if g.max_samples is not None else DEFAULT_MAX_SAMPLES
    out: dict[str, OutFile] = {}
    try:
        for entry in found:
            if entry.is_symlink() or not entry.is_file(follow_symlinks=False):
                raise QualityError(f"an output file matching {g.files} is not a regular file (a symlink, FIFO...)")
            path = Path(entry.path)
            out[entry.name] = (describe_wav(path, entry.name, limit) if wav
                               else describe_npy(path, entry.name))  # fmt: skip
    except QualityError as err:
        return err
    except OutFileError as err:
        return QualityError(str(err))
    return out


def _npy(data: bytes, name: str) -> tuple[np.ndarray, str]:
    try:
        a = np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as e:  # noqa: BLE001
        raise QualityError(f"cannot read an output .npy file ({type(e).__name__})") from None
    return a, _NP_DTYPE.get(str(a.dtype), str(a.dtype))


def read_wav(data: bytes, name: str = "wav") -> tuple[np.ndarray, int]:
    """(samples in [-1, 1], frames x channels flattened; sample rate) from PCM
    WAV bytes in memory (8, 16, 24 or 32 bit; the bounds of
    ``outfiles.parse_wav``). float32 up to 24 bits (exact), float64 for 32
    bits. The guards read output files with ``outfiles.describe_wav``, block
    by block, instead."""
    try:
        hdr = parse_wav(io.BytesIO(data), len(data), name)
    except OutFileError as e:
        raise QualityError(str(e)) from None
    raw = data[hdr.offset : hdr.offset + hdr.samples * hdr.width]
    a = decode_pcm(raw, hdr.width)
    return (a.astype(np.float32) if hdr.width < 4 else a), hdr.rate


def _samples(x: np.ndarray | Samples) -> Samples:
    return ArrayFile(x) if isinstance(x, np.ndarray) else x


def snr_db(cand: np.ndarray | Samples, ref: np.ndarray | Samples) -> float:
    """10 log10(energy of ref / energy of (cand - ref)), block by block; the
    shorter signal is padded with silence, so missing audio counts as error.
    inf when identical."""
    noise = signal = 0.0
    for c, r in pairs(_samples(cand), _samples(ref)):
        noise += float(np.sum((c - r) ** 2))
        signal += float(np.sum(r**2))
    if noise == 0:
        return math.inf
    if signal == 0:
        return -math.inf
    return 10 * math.log10(signal / noise)


Audio = tuple[np.ndarray, int] | OutFile
"""Audio to compare: (samples, rate) in memory, or a WAV output file read
block by block."""


def _audio(v: Audio) -> tuple[Samples, int]:
    return (v, v.rate) if isinstance(v, OutFile) else (ArrayFile(v[0]), v[1])


def file_snr(cand: Audio, ref: Audio) -> float:
    """``snr_db`` of two audio files (-inf when their sample rates differ)."""
    (c, cr), (r, rr) = _audio(cand), _audio(ref)
    return snr_db(c, r) if cr == rr else -math.inf


# ---- spectral: log-mel distance -------------------------------------------------

#: Frames of 25 ms every 10 ms, 64 mel bands up to half the sample rate, log
#: energies floored 80 dB below the reference file's loudest band.
FRAME_S = 0.025
HOP_S = 0.010
MEL_BANDS = 64
FLOOR_DB = 80.0


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    return 2595.0 * np.log10(1.0 + f / 700.0)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    return 700.0 * (10.0 ** (m / 2595.0) - 1.0)


@functools.lru_cache(maxsize=2)
def mel_filterbank(rate: int, n_fft: int, bands: int = MEL_BANDS) -> np.ndarray:
    """(bands x n_fft//2+1) triangular filters, equally spaced on the HTK mel
    scale from 0 Hz to rate/2, each of unit peak (read-only: cached; at most
    4 MiB at ``outfiles.MAX_RATE``)."""
    edges = _mel_to_hz(np.linspace(0.0, float(_hz_to_mel(np.array(rate / 2.0))), bands + 2))
    freqs = np.linspace(0.0, rate / 2.0, n_fft // 2 + 1)
    fb = np.zeros((bands, freqs.size))
    for b in range(bands):
        lo, mid, hi = edges[b], edges[b + 1], edges[b + 2]
        up = (freqs - lo) / max(mid - lo, 1e-9)
        down = (hi - freqs) / max(hi - mid, 1e-9)
        fb[b] = np.clip(np.minimum(up, down), 0.0, None)
    fb.setflags(write=False)
    return fb


def _framing(rate: int) -> tuple[int, int, int]:
    """(window, hop, FFT size) in samples at ``rate``."""
    win = max(int(round(FRAME_S * rate)), 2)
    hop = max(int(round(HOP_S * rate)), 1)
    return win, hop, 1 << (win - 1).bit_length()


def _frame_count(n: int, rate: int) -> int:
    win, hop, _ = _framing(rate)
    return max(1, 1 + math.ceil(max(n - win, 0) / hop))


#: Frames per block, at most; and at most SPECTRAL_BLOCK_ELEMENTS / FFT size of
#: them, so one block's spectra stay ~(2^19 x 16 bytes) = 8 MiB at any rate.
_BLOCK_FRAMES = 2048
SPECTRAL_BLOCK_ELEMENTS = 1 << 19


class _Window:
    """Samples ``[lo, lo + size)`` of a stream read block by block, ``lo``
    never decreasing; zeros past its end. Holds at most ``size`` plus one
    read block."""

    def __init__(self, src: Samples):
        self.it, self.buf, self.start, self.done = src.blocks(), np.zeros(0), 0, False

    def take(self, lo: int, size: int) -> np.ndarray:
        while True:
            if lo > self.start:  # what lies before lo is never asked again
                cut = min(lo - self.start, self.buf.size)
                self.buf, self.start = self.buf[cut:], self.start + cut
            if self.done or self.start + self.buf.size >= lo + size:
                break
            nxt = next(self.it, None)
            if nxt is None:
                self.done = True
            else:
                self.buf = np.concatenate([self.buf, nxt])
        out = np.zeros(size)
        part = self.buf[lo - self.start : lo - self.start + size]  # start <= lo: see above
        out[: part.size] = part
        return out


def _mel_blocks(x: np.ndarray | Samples, rate: int, frames: int) -> Iterator[np.ndarray]:
    """Mel band energies (linear power) of ``x`` (samples in [-1, 1]) in blocks
    of up to ``_BLOCK_FRAMES`` frames (fewer at high rates): Hann windows of
    ``FRAME_S`` every ``HOP_S``, the signal padded with silence to ``frames``
    frames. The samples are read block by block too: memory stays bounded
    whatever the file's length or rate."""
    win, hop, n_fft = _framing(rate)
    fb_t = mel_filterbank(rate, n_fft).T
    window = np.hanning(win)[None, :]
    per_block = max(1, min(_BLOCK_FRAMES, SPECTRAL_BLOCK_ELEMENTS // n_fft))
    source = _Window(_samples(x))
    for first in range(0, frames, per_block):
        count = min(per_block, frames - first)
        seg = source.take(first * hop, (count - 1) * hop + win)
        framed = np.lib.stride_tricks.sliding_window_view(seg, win)[::hop]
        spec = np.abs(np.fft.rfft(framed * window, n=n_fft, axis=1)) ** 2
        yield spec @ fb_t


def log_mel(x: np.ndarray, rate: int, n_frames: int | None = None) -> np.ndarray:
    """(frames x bands) mel band energies of ``x``, linear power (see
    ``_mel_blocks``), over ``n_frames`` frames (default: enough for ``x``)."""
    frames = n_frames if n_frames is not None else _frame_count(x.size, rate)
    return np.concatenate(list(_mel_blocks(np.asarray(x, dtype=np.float64), rate, frames)))


def log_mel_distance(cand: np.ndarray | Samples, ref: np.ndarray | Samples, rate: int) -> float:
    """The mean over frames of the RMS difference (over mel bands) of the two
    signals' log-mel energies, in dB. Both are framed over the longer one (the
    shorter padded with silence: missing or extra audio counts); energies are
    floored ``FLOOR_DB`` below the reference's loudest band-frame, so what
    both leave near silence does not count. 0.0 when identical. Streams both
    (files are read block by block: the reference twice, for its loudest
    band-frame first)."""
    c, r = _samples(cand), _samples(ref)
    frames = max(_frame_count(c.size, rate), _frame_count(r.size, rate))
    top = max((float(b.max()) for b in _mel_blocks(r, rate, frames)), default=0.0)
    floor = max(top, 1e-20) * 10.0 ** (-FLOOR_DB / 10.0)
    total = 0.0
    for bc, br in zip(_mel_blocks(c, rate, frames), _mel_blocks(r, rate, frames), strict=True):
        diff = 10.0 * np.log10(bc + floor) - 10.0 * np.log10(br + floor)
        total += float(np.sum(np.sqrt(np.mean(diff**2, axis=1))))
    return total / frames


def _spectral_files(
    cand: dict[str, Any], ref: dict[str, Any], names: list[str], g: QualityGuard, ref_label: str
) -> tuple[bool, float, str]:
    """(ok, worst file's log-mel distance in dB, detail) over files matched by name."""
    bound = g.max_db if g.max_db is not None else SPECTRAL_MAX_DB
    dists: dict[str, float] = {}
    for n in names:
        (c, cr), (r, rr) = _audio(cand[n]), _audio(ref[n])
        if cr != rr:
            return False, math.inf, f"{n}: sample rate {cr} vs {ref_label} {rr}"
        dists[n] = log_mel_distance(c, r, rr)
    worst_name = max(names, key=lambda n: dists[n])
    worst = dists[worst_name]
    ok = worst <= bound
    mean = sum(dists.values()) / len(dists)
    detail = (f"worst log-mel distance {worst:.2f} dB ({worst_name}), mean {mean:.2f} dB "
              f"over {len(names)} files vs {ref_label}")
    return ok, worst, detail + ("" if ok else f": above {bound:g} dB")


def compare_files(
    cand: dict[str, Any], ref: dict[str, Any], g: QualityGuard, ref_label: str
) -> tuple[bool, float, str]:
    """(ok, value, detail) of a guard on output files (``KINDS[g.kind].files``)
    over files matched by name, one pair of files at a time, block by block:
    waveform (value: worst SNR, dB), spectral (worst log-mel distance, dB),
    tensor (worst max abs error). A file that cannot be read again as it was
    described (changed since its run) fails the guard, naming it."""
    check = _kind(g).files
    if check is None:
        raise QualityError(f"kind '{g.kind}' does not read output files")
    if not ref:
        raise QualityError(f"{ref_label} wrote no file matching {g.files}")
    missing = sorted(set(ref) - set(cand))
    extra = sorted(set(cand) - set(ref))
    if missing or extra:
        parts = [f"missing {', '.join(missing[:5])}" if missing else "",
                 f"{len(extra)} unexpected (names not quoted)" if extra else ""]  # fmt: skip
        what = "; ".join(p for p in parts if p)
        return False, math.nan, f"{len(cand)} files vs {len(ref)} of {ref_label}: {what}"
    try:
        return check(cand, ref, sorted(ref), g, ref_label)
    except OutFileError as e:
        return False, math.nan, str(e)


def _tensor_files(
    cand: dict[str, Any], ref: dict[str, Any], names: list[str], g: QualityGuard, ref_label: str
) -> tuple[bool, float, str]:
    ok, err, detail = allclose([cand[n] for n in names], [ref[n] for n in names], g)
    return ok, err, f"{len(names)} files: {detail}"


def _waveform_files(
    cand: dict[str, Any], ref: dict[str, Any], names: list[str], g: QualityGuard, ref_label: str
) -> tuple[bool, float, str]:
    worst, worst_name = math.inf, ""
    for n in names:
        (c, cr), (r, rr) = _audio(cand[n]), _audio(ref[n])
        if cr != rr:
            return False, -math.inf, f"{n}: sample rate {cr} vs {ref_label} {rr}"
        snr = snr_db(c, r)
        if snr < worst:
            worst, worst_name = snr, n
    bound = g.min_snr_db if g.min_snr_db is not None else 0.0
    ok = worst >= bound
    detail = f"worst SNR {worst:.1f} dB ({worst_name}) over {len(names)} files vs {ref_label}"
    if math.isinf(worst) and worst > 0:
        detail = f"{len(names)} files identical to {ref_label}"
    return ok, worst, detail + ("" if ok else f": below {bound:g} dB")


# ---- one guard on two snapshots ------------------------------------------------


def evaluate(
    guard: QualityGuard,
    candidate: Mapping[str, Any],
    reference: Mapping[str, Any],
    against: Against,
    warn: Callable[[str], None] | None = None,
) -> GuardResult:
    """Judge ``guard`` on the candidate's ``snapshot`` against a reference
    arm's (``against``: ``bk`` or ``b0``); never raises for a guard of a
    registered kind.

    A guard whose kind is not in ``KINDS`` (built around the config's check,
    e.g. with ``model_construct``) raises ValueError: it is never judged by
    another kind's comparator.

    Status: ``fail`` when the candidate's outputs are missing, unreadable or
    beyond the bound; ``skipped`` when the reference arm's are (``warn`` then
    receives a sentence for the verdict's warnings); else ``pass``.
    """
    warn = warn or (lambda _text: None)
    if guard.kind not in KINDS:  # only a guard built around the config's check gets here
        raise ValueError(unknown_kind_message(guard.kind))
    if guard.files:
        return _file_guard(guard, candidate, reference, against, warn)
    base: dict[str, Any] = dict(
        name=guard.label, kind=guard.kind, metric=f"outputs.{guard.output}", against=against
    )
    rl = arm_label(against)
    need = [guard.output] + ([guard.reference] if guard.reference else [])
    for key in need:
        if isinstance(reference.get(key), QualityError) or key not in reference:
            why = reference.get(key, "no snapshot")
            warn(f"quality guard {guard.label}: {rl} lacks outputs.{key} ({why}); not checked")
            return GuardResult(**base, status="skipped", detail=f"{rl}: {why}")
    if isinstance(candidate.get(guard.output), QualityError) or guard.output not in candidate:
        return GuardResult(
            **base, status="fail", detail=f"candidate: {candidate.get(guard.output, 'no outputs')}"
        )
    try:
        check = _kind(guard).outputs
        if check is None:
            raise QualityError(f"kind '{guard.kind}' reads output files: give files")
        return GuardResult(**base, **check(guard, candidate, reference, rl))
    except QualityError as e:
        return GuardResult(**base, status="fail", detail=str(e))


def _wer_guard(
    q: QualityGuard, cand: Mapping[str, Any], refs: Mapping[str, Any], rl: str
) -> dict[str, Any]:
    """WER of the candidate's texts, against ground truth (``q.reference``) or
    the reference arm's texts; raises QualityError."""
    hyp = _texts(cand[q.output], f"candidate outputs.{q.output}")
    if q.reference:
        truth = _texts(refs[q.reference], f"{rl} outputs.{q.reference}")
        w_c = corpus_wer(truth, hyp)
        w_r = corpus_wer(truth, _texts(refs[q.output], f"{rl} outputs.{q.output}"))
        against_what = f"ground truth outputs.{q.reference}"
    else:
        w_c = corpus_wer(_texts(refs[q.output], f"{rl} outputs.{q.output}"), hyp)
        w_r = 0.0
        against_what = f"{rl}'s outputs"
    delta = w_c - w_r
    bounds, fails = [], []
    if q.max is not None:
        bounds.append(f"<= {q.max:.2%}")
        if w_c > q.max:
            fails.append(f"WER {w_c:.2%} > {q.max:.2%}")
    if q.max_delta is not None:
        bounds.append(f"delta <= {q.max_delta:+.2%}")
        if delta > q.max_delta:
            fails.append(f"WER rose by {delta:+.2%} > {q.max_delta:+.2%}")
    detail = f"WER {w_c:.2%} against {against_what}" + (
        f" ({rl} {w_r:.2%}, delta {delta:+.2%})" if q.reference else ""
    )
    if fails:
        detail += ": " + "; ".join(fails)
    return dict(
        bound="; ".join(bounds), value=w_c, status="fail" if fails else "pass", detail=detail
    )


def _length_guard(
    q: QualityGuard, cand: Mapping[str, Any], refs: Mapping[str, Any], rl: str
) -> dict[str, Any]:
    """Relative change of the output's length (``output_length``); raises QualityError."""
    lc = output_length(cand[q.output])
    lr = output_length(refs[q.output])
    if lr == 0:
        ok = lc == 0
        change = 0.0 if ok else float("inf")
    else:
        change = lc / lr - 1
        ok = abs(change) <= q.max_change
    return dict(
        bound=f"within ±{q.max_change:.1%}",
        value=change,
        status="pass" if ok else "fail",
        detail=f"length {lc:g} vs {rl} {lr:g} ({change:+.2%})",
    )


def _allclose_guard(
    q: QualityGuard, cand: Mapping[str, Any], refs: Mapping[str, Any], rl: str
) -> dict[str, Any]:
    """Tensors within the per-dtype tolerances (``allclose``)."""
    ok, err, detail = allclose(cand[q.output], refs[q.output], q)
    return dict(
        bound="per-dtype tolerance", value=err, status="pass" if ok else "fail", detail=detail
    )


def _file_guard(
    q: QualityGuard,
    candidate: Mapping[str, Any],
    reference: Mapping[str, Any],
    against: Against,
    warn: Callable[[str], None],
) -> GuardResult:
    """waveform / tensor: the run's output files, matched by name."""
    key, rl = file_key(q), arm_label(against)
    base: dict[str, Any] = dict(
        name=q.label, kind=q.kind, metric=f"files {q.files}", against=against
    )
    base["bound"] = KINDS[q.kind].bound(q)
    cand = candidate.get(key, QualityError("no candidate run"))
    refv = reference.get(key, QualityError("no snapshot"))
    if isinstance(refv, QualityError):
        warn(f"quality guard {q.label}: {rl}: {refv}; not checked")
        return GuardResult(**base, status="skipped", detail=f"{rl}: {refv}")
    if isinstance(cand, QualityError):
        return GuardResult(**base, status="fail", detail=f"candidate: {cand}")
    try:
        ok, value, detail = compare_files(cand, refv, q, rl)
    except QualityError as e:
        warn(f"quality guard {q.label}: {e}; not checked")
        return GuardResult(**base, status="skipped", detail=str(e))
    shown = value if math.isfinite(value) else None
    return GuardResult(**base, value=shown, status="pass" if ok else "fail", detail=detail)


# ---- the registry ------------------------------------------------------------------

OutputsCheck = Callable[[QualityGuard, Mapping[str, Any], Mapping[str, Any], str], dict[str, Any]]
"""(guard, candidate snapshot, reference snapshot, reference label) -> GuardResult
fields (bound, value, status, detail); raises QualityError."""
FilesCheck = Callable[
    [dict[str, Any], dict[str, Any], list[str], QualityGuard, str], tuple[bool, float, str]
]
"""(candidate files, reference files, names, guard, reference label) -> (ok, value, detail)."""


def _bound_text(q: QualityGuard) -> str:
    if q.kind == "waveform":
        return f">= {q.min_snr_db:g} dB" if q.min_snr_db is not None else ">= 0 dB"
    if q.kind == "spectral":
        return f"<= {q.max_db if q.max_db is not None else SPECTRAL_MAX_DB:g} dB"
    return "per-dtype tolerance"


@dataclass(frozen=True)
class QualityKind:
    """A declared kind (``qualitykinds.KindDecl``: name, parameter model) with
    its comparator: ``outputs`` for kinds reading the result's outputs,
    ``files`` for kinds reading output files."""

    decl: KindDecl
    outputs: OutputsCheck | None = None
    files: FilesCheck | None = None
    bound: Callable[[QualityGuard], str] = _bound_text


OUTPUT_CHECKS: dict[str, OutputsCheck] = {
    "wer": _wer_guard,
    "output_length": _length_guard,
    "allclose": _allclose_guard,
}
"""The comparators of the kinds that read the result's outputs."""
FILE_CHECKS: dict[str, FilesCheck] = {
    "waveform": _waveform_files,
    "tensor": _tensor_files,
    "spectral": _spectral_files,
}
"""The comparators of the kinds that read output files."""


def _registry() -> dict[str, QualityKind]:
    """Every declared kind with its comparator; ImportError when a declared kind
    has none of its reading (or a comparator has no declaration)."""
    out = {}
    for name, decl in QUALITY_KINDS.items():
        checks = OUTPUT_CHECKS if decl.reads == "outputs" else FILE_CHECKS
        if name not in checks:
            raise ImportError(f"quality kind '{name}' ({decl.reads}) has no comparator")
        out[name] = QualityKind(decl, outputs=OUTPUT_CHECKS.get(name), files=FILE_CHECKS.get(name))
    stray = sorted((set(OUTPUT_CHECKS) | set(FILE_CHECKS)) - set(out))
    if stray:
        raise ImportError(f"comparators without a declared quality kind: {stray}")
    return out


KINDS: dict[str, QualityKind] = _registry()
"""Every quality kind: its declaration and its comparator."""


def _kind(g: QualityGuard) -> QualityKind:
    try:
        return KINDS[g.kind]
    except KeyError:
        raise QualityError(unknown_kind_message(g.kind)) from None
