"""The benchmark protocol: the JSON a benchmark writes to ``$RSI_RESULT``.

```json
{"metrics": {"throughput": 41.2, "latency_p95_s": 0.31},
 "samples": {"latency_s": [0.21, 0.25, 0.30]},
 "outputs": {"transcripts": ["the cat sat", "..."]},
 "counts":  {"requests": 64, "failed": 0},
 "meta":    {"anything": "free-form, recorded only"}}
```

``load_result`` validates strictly and raises ``ProtocolError`` with a message
a benchmark author can act on. The message names the category of the fault
(unknown key, bad type) and only OUR names (the sections above, the metrics
declared in ``.rsi/config.toml``, ``requests``/``failed``), never a string the
result holds: the result is the candidate's, and a verdict's reason travels to
the ledger and the next agent's TASK.md (a hidden input written as a key must
not travel with it). A missing or malformed result is an error,
never a zero. The file is read as the candidate's code left it, so only as a
regular file (``read_regular``: no symlink followed, no FIFO or device,
size-capped).

Environment of a run: ``RSI_RESULT``, ``RSI_OUTPUT_DIR`` (files for quality
guards and evaluators), ``RSI_SETTING_*``; a serving benchmark's server gets
``RSI_PORT``, its client ``RSI_SERVER_URL``; an evaluator ``RSI_INPUT_DIR``
(the run's output files, read-only).
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

TOP_LEVEL = ("metrics", "samples", "outputs", "counts", "meta")
MAX_RESULT_BYTES = 64 * 1024 * 1024


class ProtocolError(ValueError):
    """The benchmark's result is missing or does not follow the protocol."""


class BenchResult(BaseModel):
    """One validated benchmark result (one run)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    metrics: dict[str, float] = Field(default_factory=dict)
    samples: dict[str, tuple[float, ...]] = Field(default_factory=dict)
    outputs: dict[str, Any] = Field(default_factory=dict)
    counts: dict[str, int] = Field(default_factory=dict)
    meta: dict[str, Any] = Field(default_factory=dict)

    @property
    def failed(self) -> int:
        return self.counts.get("failed", 0)

    @classmethod
    def parse(cls, data: Any, *, expected_metrics: Iterable[str] = ()) -> BenchResult:
        """Validate a decoded JSON document; raise ProtocolError on any violation."""
        if not isinstance(data, dict):
            raise ProtocolError(f"the result must be a JSON object, got {_jtype(data)}")
        declared = frozenset(str(m) for m in expected_metrics)
        unknown = [k for k in data if k not in TOP_LEVEL]
        if unknown:
            raise ProtocolError(
                f"{len(unknown)} unknown top-level key(s) (not quoted: the result is untrusted); "
                f"allowed: {', '.join(TOP_LEVEL)}"
            )
        metrics = _table(data, "metrics")
        clean_metrics: dict[str, float] = {}
        for i, (k, v) in enumerate(metrics.items()):
            clean_metrics[k] = _number(v, _where("metrics", k, i, declared))
        samples = _table(data, "samples")
        clean_samples: dict[str, tuple[float, ...]] = {}
        for i, (k, v) in enumerate(samples.items()):
            where = _where("samples", k, i, declared)
            if not isinstance(v, list):
                raise ProtocolError(f"{where} must be a list of numbers, got {_jtype(v)}")
            if not v:
                raise ProtocolError(
                    f"{where} is empty: report at least one value or leave the series out"
                )
            clean_samples[k] = tuple(_number(x, f"{where}[{j}]") for j, x in enumerate(v))
        outputs = _table(data, "outputs")
        counts = _table(data, "counts")
        clean_counts: dict[str, int] = {}
        for i, (k, v) in enumerate(counts.items()):
            if (
                isinstance(v, bool)
                or not isinstance(v, (int, float))
                or float(v) != int(v)
                or v < 0
            ):
                where = _where("counts", k, i, frozenset({"requests", "failed"}))
                raise ProtocolError(f"{where} must be a non-negative integer, got {_jtype(v)}")
            clean_counts[k] = int(v)
        if "requests" in clean_counts and clean_counts.get("failed", 0) > clean_counts["requests"]:
            raise ProtocolError(
                f"counts.failed ({clean_counts['failed']}) exceeds counts.requests "
                f"({clean_counts['requests']})"
            )
        missing = [m for m in expected_metrics if m not in clean_metrics]
        if missing:
            have = sorted(m for m in clean_metrics if m in declared)
            raise ProtocolError(
                f"missing metric(s) {', '.join(map(repr, missing))} declared in .rsi/config.toml; "
                f"the result reports {len(clean_metrics)} metric(s)"
                + (f", of the declared ones: {', '.join(have)}" if have else ", none of them declared")
            )
        meta = _table(data, "meta")
        return cls(
            metrics=clean_metrics,
            samples=clean_samples,
            outputs=outputs,
            counts=clean_counts,
            meta=meta,
        )


def read_regular(path: str | Path, limit: int, what: str = "file") -> bytes:
    """Read a file written by untrusted code: opened with ``O_NOFOLLOW`` (a
    symlink is refused, never followed) and ``O_NONBLOCK`` (a FIFO cannot
    block the verifier), only a regular file, at most ``limit`` bytes.
    Raises ProtocolError (FileNotFoundError when there is nothing there)."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as e:
        if e.errno == errno.ELOOP or p.is_symlink():
            raise ProtocolError(
                f"the {what} {p.name} is a symlink; only regular files are read"
            ) from None
        raise ProtocolError(f"cannot open the {what} {p.name}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ProtocolError(
                f"the {what} {p.name} is not a regular file (a FIFO, device or directory); "
                "only regular files are read"
            )
        if st.st_size > limit:
            raise ProtocolError(
                f"the {what} {p.name} is {st.st_size} bytes, over the {limit} byte limit"
            )
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise ProtocolError(f"the {what} {p.name} grew over the {limit} byte limit")
        return data
    finally:
        os.close(fd)


def load_result(path: str | Path, *, expected_metrics: Iterable[str] = ()) -> BenchResult:
    """Read and validate the result file a benchmark wrote (a regular file,
    never followed through a link, at most ``MAX_RESULT_BYTES``)."""
    p = Path(path)
    try:
        data = read_regular(p, MAX_RESULT_BYTES, "result file")
    except FileNotFoundError:
        raise ProtocolError(
            f"no result file: the benchmark did not write JSON to $RSI_RESULT ({p})"
        ) from None
    if not data:
        raise ProtocolError(f"the result file is empty ({p}): write a JSON object to $RSI_RESULT")
    text = data.decode("utf-8", errors="replace")
    return parse_result(text, expected_metrics=expected_metrics)


def parse_result(text: str, *, expected_metrics: Iterable[str] = ()) -> BenchResult:
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except ProtocolError:
        raise
    except json.JSONDecodeError as e:
        raise ProtocolError(
            f"the result is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}"
        ) from None
    return BenchResult.parse(data, expected_metrics=expected_metrics)


def _reject_constant(name: str):
    raise ProtocolError(
        f"the result contains {name}: report finite numbers only (NaN/Infinity are not allowed)"
    )


def _table(data: dict, key: str) -> dict:
    v = data.get(key, {})
    if not isinstance(v, dict):
        raise ProtocolError(f"'{key}' must be a JSON object, got {_jtype(v)}")
    return v


def _where(section: str, key: str, index: int, ours: frozenset[str]) -> str:
    """How an error names an entry of a section: by its key when the key is one
    of ours (a declared metric, ``requests``), else by its position only."""
    if key in ours:
        return f"{section}.{key}"
    return f"{section}: entry #{index + 1} (a key not declared in .rsi/config.toml, not quoted)"


def _number(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ProtocolError(f"{where} must be a number, got {_jtype(v)}")
    f = float(v)
    if not math.isfinite(f):
        raise ProtocolError(f"{where} is not finite: report finite numbers only")
    return f


def _jtype(v: Any) -> str:
    return {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        type(None): "null",
    }.get(type(v), type(v).__name__)
