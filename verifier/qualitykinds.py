"""The quality kinds: one declaration per ``[[quality]] kind``.

Each kind declares what it reads (a key of the result's ``outputs``, or the
run's output files with their extension), its parameter model (the
``[[quality]]`` keys it takes, with their constraints) and a one-line summary.
``config.QualityGuard`` refuses a kind not declared here at config time
(with a "did you mean"), and refuses a key the kind does not take;
``quality.KINDS`` pairs every declaration with its comparator and fails at
import when one has none, so a kind is never judged by another's comparator.

This module imports nothing of the verifier (``config`` and ``quality`` both
read it): adding a kind is a declaration here, a comparator in
``quality.COMPARATORS`` and its row in docs/configuration.md.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = [
    "KIND_NAMES",
    "QUALITY_KINDS",
    "MAX_SAMPLES_CAP",
    "SPECTRAL_MAX_DB",
    "KindDecl",
    "kind_param_problems",
    "unknown_kind_message",
]

#: Default bound of a ``spectral`` guard: the worst file's log-mel distance to
#: the reference arm's, in dB. Calibrated on tiny-tts audio (docs/configuration.md
#: has the table): honest changes (the demo's good patches and knobs, float16
#: round trip, 1e-4 noise, +0.1% gain) measure at most 0.015 dB; audible ones
#: (8-bit samples 0.27-0.31, noise at 40/30/20 dB SNR 0.31/1.0/2.8 and up,
#: another speaker 3.2, dropped frames, time stretch, band limits 5-24) at
#: least 0.27: 0.1 dB leaves a factor 6.7 below it and 2.7 above.
SPECTRAL_MAX_DB = 0.1
#: The most a waveform or spectral guard's ``max_samples`` (samples per output
#: file: its CPU bound) may be raised to: one byte per sample fills the 256 MiB
#: an output file may hold (``outfiles.MAX_SAMPLES_CAP``; the same number, kept
#: here so that this module imports nothing of ours).
MAX_SAMPLES_CAP = 256 * 1024 * 1024


class _Params(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    benchmark: str | None = None


class WerParams(_Params):
    output: str
    reference: str | None = None
    max: float | None = Field(None, ge=0)
    max_delta: float | None = None


class OutputLengthParams(_Params):
    output: str
    max_change: float = Field(0.02, ge=0)


class AllcloseParams(_Params):
    output: str
    dtype: str | None = None
    rtol: float | None = Field(None, ge=0)
    atol: float | None = Field(None, ge=0)


class WaveformParams(_Params):
    files: str
    min_snr_db: float | None = None
    max_samples: int | None = Field(None, ge=1, le=MAX_SAMPLES_CAP)


class TensorParams(_Params):
    files: str
    dtype: str | None = None
    rtol: float | None = Field(None, ge=0)
    atol: float | None = Field(None, ge=0)


class SpectralParams(_Params):
    files: str
    max_db: float | None = Field(None, gt=0)
    max_samples: int | None = Field(None, ge=1, le=MAX_SAMPLES_CAP)


@dataclass(frozen=True)
class KindDecl:
    """One quality kind: its name, what it reads, its parameters."""

    name: str
    reads: Literal["outputs", "files"]
    params: type[_Params]
    summary: str
    file_ext: str = ""
    """For ``reads == "files"``: how the files are read (``wav`` or ``npy``)."""


QUALITY_KINDS: dict[str, KindDecl] = {
    d.name: d
    for d in (
        KindDecl("wer", "outputs", WerParams, "word error rate of transcripts"),
        KindDecl("output_length", "outputs", OutputLengthParams, "relative change of an output's length"),
        KindDecl("allclose", "outputs", AllcloseParams, "tensors within per-dtype tolerances"),
        KindDecl("waveform", "files", WaveformParams, "WAV files' SNR in dB", "wav"),
        KindDecl("tensor", "files", TensorParams, ".npy files within per-dtype tolerances", "npy"),
        KindDecl("spectral", "files", SpectralParams, "WAV files' log-mel spectral distance in dB", "wav"),
    )
}
KIND_NAMES: tuple[str, ...] = tuple(QUALITY_KINDS)


def unknown_kind_message(kind: object) -> str:
    """Why ``kind`` is refused: the known kinds and the nearest one."""
    text = str(kind)
    near = difflib.get_close_matches(text, KIND_NAMES, n=1, cutoff=0.6)
    hint = f"; did you mean '{near[0]}'?" if near else ""
    return f"unknown quality kind {text[:40]!r}{hint} (known kinds: {', '.join(KIND_NAMES)})"


def kind_param_problems(kind: str, given: dict[str, object], where: str) -> list[str]:
    """Problems of the ``[[quality]]`` keys ``given`` (``kind`` excluded)
    against ``kind``'s parameter model: a key the kind does not take, a
    missing required key, a value out of its range; one message each, saying
    what to change."""
    decl = QUALITY_KINDS[kind]
    fields = decl.params.model_fields
    out = []
    for key, value in given.items():
        if key in fields:
            continue
        if key == "files":
            readers = ", ".join(k for k, d in QUALITY_KINDS.items() if d.reads == "files")
            out.append(f"{where}: files is for the kinds that read output files ({readers}); "
                       "remove files")
        elif key == "output":
            out.append(f"{where}: reads files, not outputs.{str(value)[:40]}; remove output")
        else:
            near = difflib.get_close_matches(key, list(fields), n=1, cutoff=0.6)
            hint = f"; did you mean '{near[0]}'?" if near else ""
            out.append(f"{where}: '{key}' is not a parameter of kind '{kind}'{hint} "
                       f"(it takes: {', '.join(fields)})")
    try:
        decl.params.model_validate({k: v for k, v in given.items() if k in fields})
    except ValidationError as e:
        for err in e.errors():
            key = ".".join(str(p) for p in err.get("loc", ()))
            if err.get("type") != "missing":
                out.append(f"{where}: {key}: {err.get('msg', 'invalid')}")
            elif key == "files":
                out.append(f'{where}: give files, a glob of output files '
                           f'(e.g. files = "*.{decl.file_ext}")')
            elif key == "output":
                out.append(f"{where}: give output, the key in the result's outputs to check")
            else:
                out.append(f"{where}: kind '{kind}' needs '{key}'")
    return out
