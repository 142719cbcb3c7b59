"""Output files of a run, read block by block with fixed bounds (issue 30.3).

A candidate writes its output files: every byte of them is untrusted, the
header's claims too (a sample rate of 4 GHz, 65,535 channels, a data chunk
of 4 GiB in a file of 40 bytes, a million chunks before the data). The
quality guards never hold a file whole; here each file is

1. **described** once, when its run ends (``describe_wav`` / ``describe_npy``):
   opened as a regular file only (``O_NOFOLLOW | O_NONBLOCK``; never a
   symlink, FIFO or device), at most ``MAX_FILE_BYTES``, its header checked
   against fixed bounds (``MIN_RATE``..``MAX_RATE`` Hz, at most
   ``MAX_CHANNELS`` channels, 8-32 bit PCM; a numeric, C-ordered .npy), its
   payload read in ``READ_BYTES`` chunks to count it and to digest it, and
   its size checked against the guard's ``max_samples`` (the CPU bound: a
   comparison's work grows with the samples, so a file past it is an error
   naming the file, the bound and the key that raises it);
2. **streamed** when compared (``OutFile.blocks``): opened again, the same
   header required, the payload decoded ``BLOCK_SAMPLES`` at a time (float64)
   and digested again; a file whose bytes changed since its run ended is an
   error, never a value.

So a run's snapshot holds one ``OutFile`` (a few hundred bytes) per file,
and a comparison at most a few blocks: see ``MEMORY_BOUND_MIB``.
``ArrayFile`` wraps samples already in memory (tests, small inputs) behind
the same ``blocks`` interface.

Imports nothing of the verifier but ``qualitykinds`` (``MAX_SAMPLES_CAP``:
the most ``max_samples`` may be raised to, one byte per sample filling
``MAX_FILE_BYTES``).
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

import numpy as np

from .qualitykinds import MAX_SAMPLES_CAP

__all__ = [
    "BLOCK_SAMPLES",
    "DEFAULT_MAX_SAMPLES",
    "MAX_CHANNELS",
    "MAX_FILE_BYTES",
    "MAX_RATE",
    "MAX_SAMPLES_CAP",
    "MEMORY_BOUND_MIB",
    "MIN_RATE",
    "ArrayFile",
    "OutFile",
    "OutFileError",
    "Samples",
    "decode_pcm",
    "describe_npy",
    "describe_wav",
    "pairs",
    "parse_wav",
]

MAX_FILE_BYTES = 256 * 1024 * 1024
"""The most bytes one output file may hold (the container run dir's default cap)."""
MIN_RATE, MAX_RATE = 1_000, 384_000
"""Sample rates a WAV output may declare, in Hz (telephony's 8 kHz down to 1
kHz; studio 384 kHz up): a 1 Hz file makes one spectral frame per sample, a
4 GHz one a 2^27-point FFT."""
MAX_CHANNELS = 16
MAX_CHUNKS = 64
"""RIFF chunks read before the ``data`` chunk (each a few bytes of header):
more is an error, not a loop over millions of them."""
DEFAULT_MAX_SAMPLES = 1 << 25
"""Default ``max_samples`` of a waveform or spectral guard: samples (frames x
channels) in one file; 33.5 M is ~35 min of 16 kHz mono or ~5.8 min of 48 kHz
stereo, and a spectral comparison of a file that long costs ~4-6 s of CPU
on this 2-core machine, 16 to 384 kHz (benchmarks/untrusted_outputs.py). Raise it in the guard's
``[[quality]]`` table for longer audio (up to ``MAX_SAMPLES_CAP``)."""
BLOCK_SAMPLES = 1 << 18
"""Samples decoded at a time: 2 MiB as float64."""
READ_BYTES = 1 << 20
"""Bytes read at a time when a file is described."""
MEMORY_BOUND_MIB = 64
"""What the quality guards hold on the host per run, at most: per file a
description (``OutFile``, < 1 KiB; at most ``quality.MAX_FILES`` files), and
while two files are compared a few ``BLOCK_SAMPLES`` blocks and one spectral
block (``quality.SPECTRAL_BLOCK_ELEMENTS``) with its filterbank, whatever the
files' sizes. Measured: benchmarks/untrusted_outputs.py."""


class OutFileError(ValueError):
    """A file that cannot be read within the bounds: the message names the
    file (quoted, cut to 60 chars) and the bound."""


def _label(name: str) -> str:
    return repr(name[:60])


class Samples(Protocol):
    """What a comparison reads: samples in [-1, 1] (WAV) or elements (.npy),
    block by block, in file order."""

    @property
    def size(self) -> int: ...

    def blocks(self, n: int = BLOCK_SAMPLES) -> Iterator[np.ndarray]:
        """float64 blocks of exactly ``n`` values, the last one shorter."""
        ...


@dataclass(frozen=True)
class ArrayFile:
    """Values already in memory, behind the ``Samples`` interface."""

    values: np.ndarray

    @property
    def size(self) -> int:
        return int(self.values.size)

    def blocks(self, n: int = BLOCK_SAMPLES) -> Iterator[np.ndarray]:
        flat = np.ravel(self.values)
        for lo in range(0, flat.size, n):
            yield np.asarray(flat[lo : lo + n], dtype=np.float64)


def pairs(a: Samples, b: Samples, n: int = BLOCK_SAMPLES) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Blocks of ``a`` and ``b`` side by side, the shorter padded with zeros
    (missing values count as silence)."""
    ia, ib = a.blocks(n), b.blocks(n)
    while True:
        x, y = next(ia, None), next(ib, None)
        if x is None and y is None:
            return
        x = np.zeros(0) if x is None else x
        y = np.zeros(0) if y is None else y
        if x.size != y.size:
            m = max(x.size, y.size)
            x, y = np.pad(x, (0, m - x.size)), np.pad(y, (0, m - y.size))
        yield x, y


# ---- opening: a regular file, never followed, never blocking ---------------------


def _open(path: Path, name: str) -> tuple[BinaryIO, os.stat_result]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise OutFileError(f"output file {_label(name)} does not exist") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise OutFileError(f"output file {_label(name)} is a symlink; only regular files "
                               "are read") from None
        raise OutFileError(f"cannot open output file {_label(name)}: {e.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise OutFileError(f"output file {_label(name)} is not a regular file (a FIFO, device or "
                           "directory); only regular files are read")
    if st.st_size > MAX_FILE_BYTES:
        os.close(fd)
        raise OutFileError(f"output file {_label(name)} is {st.st_size} bytes, over the "
                           f"{MAX_FILE_BYTES} byte limit of one output file")
    return os.fdopen(fd, "rb"), st


# ---- WAV ---------------------------------------------------------------------------


@dataclass(frozen=True)
class WavHeader:
    rate: int
    channels: int
    width: int
    """Bytes per sample (1-4)."""
    offset: int
    """Where the samples start."""
    frames: int
    """Whole frames present (the header's claim, cut to the bytes there)."""

    @property
    def samples(self) -> int:
        return self.frames * self.channels


def parse_wav(f: BinaryIO, size: int, name: str) -> WavHeader:
    """The header of a PCM WAV file of ``size`` bytes, checked against the
    bounds (rate, channels, sample width, chunks before the data);
    OutFileError otherwise. Reads only the chunk headers."""
    what = f"output file {_label(name)}"
    head = f.read(12)
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        raise OutFileError(f"{what} is not a PCM WAV file (no RIFF/WAVE header)")
    pos, fmt = 12, None
    for _ in range(MAX_CHUNKS):
        hdr = f.read(8)
        if len(hdr) < 8:
            break
        cid, n = hdr[:4], int.from_bytes(hdr[4:], "little")
        body = pos + 8
        if cid == b"fmt ":
            raw = f.read(16)
            if n < 16 or len(raw) < 16:
                raise OutFileError(f"{what} is not a PCM WAV file (a short fmt chunk)")
            tag, channels, rate, _bps, _align, bits = struct.unpack("<HHIIHH", raw)
            if tag != 1:
                raise OutFileError(f"{what} is not a PCM WAV file (format tag {tag}; write 8-32 "
                                   "bit integer PCM)")
            fmt = (rate, channels, (bits + 7) // 8)
        elif cid == b"data":
            if fmt is None:
                raise OutFileError(f"{what} is not a PCM WAV file (data before fmt)")
            rate, channels, width = fmt
            _check_format(what, rate, channels, width)
            there = max(0, min(n, size - body))
            return WavHeader(rate, channels, width, body, there // (channels * width))
        pos = body + n + (n & 1)
        if pos > size:
            break
        f.seek(pos)
    raise OutFileError(f"{what} is not a PCM WAV file (no data chunk within its first "
                       f"{MAX_CHUNKS} chunks)")


def _check_format(what: str, rate: int, channels: int, width: int) -> None:
    if not 1 <= width <= 4:
        raise OutFileError(f"{what} has {8 * width}-bit samples: 8, 16, 24 or 32-bit PCM only")
    if not MIN_RATE <= rate <= MAX_RATE:
        raise OutFileError(f"{what} declares a sample rate of {rate} Hz, outside the "
                           f"{MIN_RATE}-{MAX_RATE} Hz the verifier reads")
    if not 1 <= channels <= MAX_CHANNELS:
        raise OutFileError(f"{what} declares {channels} channels; the verifier reads 1 to "
                           f"{MAX_CHANNELS}")


def decode_pcm(raw: bytes, width: int) -> np.ndarray:
    """Little-endian PCM bytes (whole samples) as float64 in [-1, 1]."""
    if width == 1:
        return (np.frombuffer(raw, dtype=np.uint8).astype(np.float64) - 128) / 128
    if width == 3:
        b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | b[:, 1] << 8 | b[:, 2] << 16
        return np.where(v >= 1 << 23, v - (1 << 24), v).astype(np.float64) / (1 << 23)
    return np.frombuffer(raw, dtype=f"<i{width}").astype(np.float64) / (1 << (8 * width - 1))


@dataclass(frozen=True)
class OutFile:
    """One output file, described when its run ended: where it is, what its
    header says, how much it holds and the digest of its payload (equal
    digests: bit-exact). ``blocks`` streams it again, checking it did not
    change."""

    path: Path
    name: str
    kind: str
    """``wav`` or ``npy``."""
    inode: tuple[int, int, int, int]
    """(device, inode, size, mtime_ns) when described."""
    offset: int
    size: int
    """Samples (frames x channels) or elements."""
    width: int
    """Bytes per sample or element."""
    digest: str
    rate: int = 0
    """wav: samples per second per channel."""
    channels: int = 1
    dtype: str = ""
    """npy: the array's dtype (``<f4``...)."""
    shape: tuple[int, ...] = ()

    def blocks(self, n: int = BLOCK_SAMPLES) -> Iterator[np.ndarray]:
        f, st = _open(self.path, self.name)
        with f:
            if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != self.inode:
                raise OutFileError(f"output file {_label(self.name)} changed after its run ended")
            f.seek(self.offset)
            h = hashlib.sha256()
            step = max(1, n // self.channels) * self.channels * self.width
            left = self.size * self.width
            while left > 0:
                raw = f.read(min(step, left))
                if not raw:
                    break
                h.update(raw)
                left -= len(raw)
                yield self._decode(raw)
            if left or h.hexdigest() != self.digest:
                raise OutFileError(f"output file {_label(self.name)} changed after its run ended")

    def _decode(self, raw: bytes) -> np.ndarray:
        if self.kind == "wav":
            return decode_pcm(raw, self.width)
        return np.frombuffer(raw, dtype=self.dtype).astype(np.float64)


def _digest(f: BinaryIO, offset: int, length: int, name: str) -> str:
    f.seek(offset)
    h = hashlib.sha256()
    left = length
    while left > 0:
        chunk = f.read(min(READ_BYTES, left))
        if not chunk:
            raise OutFileError(f"output file {_label(name)} is shorter than its header says")
        h.update(chunk)
        left -= len(chunk)
    return h.hexdigest()


def _bound_error(name: str, what: str, count: int, max_samples: int, key: str) -> OutFileError:
    return OutFileError(
        f"output file {_label(name)} holds {count} {what}, over the bound of {max_samples} per "
        f"file (the CPU a comparison may take); for longer outputs raise {key} in this "
        f"guard's [[quality]] table (at most {MAX_SAMPLES_CAP})")


def describe_wav(path: Path, name: str, max_samples: int = DEFAULT_MAX_SAMPLES) -> OutFile:
    """Check and describe a WAV output file (see the module docstring);
    OutFileError naming the file and the bound it is past."""
    f, st = _open(path, name)
    with f:
        hdr = parse_wav(f, st.st_size, name)
        if hdr.samples > max_samples:
            raise _bound_error(name, "samples (frames x channels)", hdr.samples, max_samples,
                               "max_samples")
        length = hdr.samples * hdr.width
        digest = _digest(f, hdr.offset, length, name)
    return OutFile(path=path, name=name, kind="wav",
                   inode=(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns), offset=hdr.offset,
                   size=hdr.samples, width=hdr.width, digest=digest, rate=hdr.rate,
                   channels=hdr.channels)


# ---- .npy ------------------------------------------------------------------------------

_NPY_KINDS = "biuf"
"""numpy dtype kinds a tensor file may hold: bool, signed, unsigned, float."""


def describe_npy(path: Path, name: str, max_elements: int = MAX_SAMPLES_CAP) -> OutFile:
    """Check and describe a .npy output file: a numeric dtype (no objects,
    no pickles), C order, the payload its shape says present; OutFileError
    otherwise."""
    what = f"output file {_label(name)}"
    f, st = _open(path, name)
    with f:
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        except Exception as e:  # noqa: BLE001 - any malformed header is the same error
            raise OutFileError(f"cannot read {what} as .npy ({type(e).__name__})") from None
        if dtype.kind not in _NPY_KINDS or dtype.hasobject or dtype.fields is not None:
            raise OutFileError(f"{what} holds dtype {str(dtype)[:40]}: numbers only "
                               "(bool, int, uint, float)")
        if fortran and len(shape) > 1:
            raise OutFileError(f"{what} is in Fortran order: save it C-ordered "
                               "(np.ascontiguousarray)")
        count = int(np.prod(shape, dtype=object))
        if count > max_elements:
            raise _bound_error(name, "elements", count, max_elements, "max_samples")
        offset = f.tell()
        length = count * dtype.itemsize
        if offset + length > st.st_size:
            raise OutFileError(f"{what} is shorter than its .npy header says")
        digest = _digest(f, offset, length, name)
    return OutFile(path=path, name=name, kind="npy",
                   inode=(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns), offset=offset,
                   size=count, width=dtype.itemsize, digest=digest, dtype=dtype.str,
                   shape=tuple(int(s) for s in shape))
