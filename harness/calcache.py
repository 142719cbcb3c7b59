"""The runner's own memory of what it measured: calibrations kept and reused,
and the one measuring lane (issue 33).

A calibration (A/A pairs of one checkout, ``verifier.calibrate``) says how
noisy a benchmark is on a machine. It stays true as long as what it measured
does, so it is stored under a key made of exactly that, and any task or
``rsi try`` on the same runner that would measure the same thing again reuses
it instead (``make demo`` spent 118 s calibrating B0 on every run):

=================  ==========================================================
key part           what
=================  ==========================================================
``runner``         the fingerprint's comparable fields (CPU, accelerator,
                   driver, CUDA/CANN, torch) and the host name
``tree``           the git tree of the measured commit (B0's; a merged Bk's)
``config``         the objective's benchmark (command, serve/client,
                   settings, matrix...), the objective metric, the whole
                   ``[verifier]`` table and the hidden inputs, as a digest
``isolation``      how runs ran: the backend (sandbox / inprocess) and, for
                   containers, the isolation spec with the image's id
``verifier``       a digest of the verifier package's own code: a calibration
                   measured by other statistics is never read as this one's
=================  ==========================================================

What keeps a reused calibration honest is the verifier itself: every look of
a verification from 6 pairs on checks the calibration's spread against the
pairs' own (``stats.noise_check``) and sets a stale one aside. Here, a stored
calibration is reused only when it has no error, its fingerprint is
comparable with this machine's now, it is younger than ``max_age_s`` (7 days
by default; ``RSI_CALIBRATION_MAX_AGE_H``), and (the loop's rule) it finds
the task's ``min_gain`` feasible; otherwise B0 is measured again and the new
calibration replaces it.

The store is host-only: a directory of the runner (0700, this user's, refused
when anyone else may write it) that no container mounts, written atomically
by the harness from the verifier's own record,
read back size-capped without following links and validated as a
``Calibration``; anything else is a miss (and removed). Every hit is
appended to ``hits.jsonl`` with the seconds it saved (the measurement's own
wall time).

The measuring lane (:meth:`RunnerStore.lane`): every calibration and
verification on a runner holds one host-wide lock (``measure.lock``,
``fcntl.flock``), so paired runs never share the machine with another
verification's load, whichever task, agent or process started them; agents
work on beside it.

Where: ``$RSI_RUNNER_DIR`` (``off`` turns both off), else
``$XDG_CACHE_HOME/rsi-bot/runner``, else ``~/.cache/rsi-bot/runner``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from harness.spec import TaskSpec
    from verifier.calibrate import Calibration

SCHEMA: Final = "rsi.calibration-store/1"
MAX_ENTRY_BYTES: Final = 1024 * 1024
DEFAULT_MAX_AGE_S: Final = 7 * 24 * 3600.0
ENV_DIR: Final = "RSI_RUNNER_DIR"
ENV_MAX_AGE_H: Final = "RSI_CALIBRATION_MAX_AGE_H"
VERIFIER_DIR: Final = Path(__file__).resolve().parents[1] / "verifier"


def default_root(environ: dict[str, str] | None = None) -> Path | None:
    """The runner's store dir, or None when ``$RSI_RUNNER_DIR`` is ``off``."""
    env = os.environ if environ is None else environ
    chosen = env.get(ENV_DIR, "").strip()
    if chosen.lower() in ("off", "none", "0", "false"):
        return None
    if chosen:
        return Path(chosen).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rsi-bot" / "runner"


def _digest(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


_VERIFIER_CODE: list[str] = []


def verifier_code_digest() -> str:
    """The verifier package's sources, as one digest (computed once per process)."""
    if not _VERIFIER_CODE:
        h = hashlib.sha256()
        for p in sorted(VERIFIER_DIR.glob("*.py")):
            h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
        _VERIFIER_CODE.append(h.hexdigest())
    return _VERIFIER_CODE[0]


def runner_identity() -> dict[str, Any]:
    """This runner, as a calibration's key sees it: the fingerprint's comparable
    fields and the host name."""
    import socket

    from verifier.fingerprint import collect

    fp = collect()
    return {"key": list(fp.comparable_key()), "host": socket.gethostname()}


def config_digest(spec: TaskSpec, pairs: int | None = None) -> str:
    """What in the task decides what a calibration measures: the objective's
    benchmark, its metric, the ``[verifier]`` table (``calibration_pairs``
    replaced by ``pairs`` when given) and the hidden inputs."""
    v = spec.verify
    settings = v.verifier.model_dump(mode="json")
    if pairs is not None:
        settings["calibration_pairs"] = pairs
    return _digest({
        "benchmark": v.objective.benchmark,
        "bench": v.benchmark(v.objective.benchmark).model_dump(mode="json"),
        "metric": v.objective.metric,
        "verifier": settings,
        "hidden": v.hidden.model_dump(mode="json"),
    })


@dataclass(frozen=True)
class CalibrationKey:
    """What a calibration measured (see the module's table); ``digest`` names it."""

    runner: str
    tree: str
    config: str
    isolation: str
    verifier: str

    @property
    def digest(self) -> str:
        return _digest([self.runner, self.tree, self.config, self.isolation, self.verifier])

    @classmethod
    def of(cls, spec: TaskSpec, tree: str, isolation: dict[str, Any], *, pairs: int | None = None,
           runner: dict[str, Any] | None = None) -> CalibrationKey:
        return cls(runner=_digest(runner if runner is not None else runner_identity()), tree=tree,
                   config=config_digest(spec, pairs), isolation=_digest(isolation),
                   verifier=verifier_code_digest())


@dataclass(frozen=True)
class Hit:
    """A stored calibration found for a key."""

    calibration: Calibration
    measured_at: float
    """Unix time the calibration was stored."""
    measured_s: float
    """Wall seconds its measurement took: what reusing it saves."""

    @property
    def age_s(self) -> float:
        return max(0.0, time.time() - self.measured_at)


class RunnerStore:
    """Calibrations by key, the hit log and the measuring lane, under ``root``."""

    def __init__(self, root: Path, *, max_age_s: float | None = None,
                 clock: Callable[[], float] = time.time):
        self.root = Path(root)
        if max_age_s is None:
            hours = os.environ.get(ENV_MAX_AGE_H, "").strip()
            try:
                max_age_s = float(hours) * 3600 if hours else DEFAULT_MAX_AGE_S
            except ValueError:
                raise ValueError(f"${ENV_MAX_AGE_H}={hours!r}: give the hours as a number, "
                                 "e.g. 24") from None
        self.max_age_s = max_age_s
        self.clock = clock
        self._thread_lane = threading.Lock()

    @classmethod
    def default(cls) -> RunnerStore | None:
        root = default_root()
        return cls(root) if root is not None else None

    # -- files ------------------------------------------------------------
    def _dir(self, sub: str = "") -> Path:
        """``root`` (or ``root/sub``), made 0700 when missing; refused when it is
        a link, another user's, or writable by anyone else."""
        dirs = [self.root, self.root / sub] if sub else [self.root]
        for d in dirs:
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
            st = os.lstat(d)
            if not stat.S_ISDIR(st.st_mode):
                raise OSError(f"{d}: the runner's store must be a plain directory, not a link")
            if st.st_uid != os.getuid() or st.st_mode & 0o022:
                raise OSError(f"{d}: the runner's store must be this user's and writable by no one "
                              f"else (chmod 700 {d}, or set {ENV_DIR})")
        return dirs[-1]

    def _path(self, key: CalibrationKey) -> Path:
        return self._dir("calibrations") / f"{key.digest}.json"

    def get(self, key: CalibrationKey) -> Hit | None:
        """The stored calibration for ``key`` when it may be reused, else None:
        no entry, unreadable, another key, an error, too old, or measured on a
        machine whose fingerprint differs from this one's now."""
        from verifier.calibrate import Calibration
        from verifier.fingerprint import collect, differences

        path = self._path(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError:
            path.unlink(missing_ok=True)
            return None
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
                return None  # only what this user wrote, writable by no one else
            data = fh.read(MAX_ENTRY_BYTES + 1)
        try:
            if len(data) > MAX_ENTRY_BYTES:
                raise ValueError("too large")
            entry = json.loads(data)
            if entry.get("schema") != SCHEMA or entry.get("key") != key.digest:
                raise ValueError("not this key's entry")
            cal = Calibration.model_validate(entry["calibration"])
            at, took = float(entry["measured_at"]), float(entry["measured_s"])
        except (ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)
            return None
        if cal.error is not None or self.clock() - at > self.max_age_s:
            return None
        if cal.fingerprint is not None and differences(cal.fingerprint, collect()):
            return None
        return Hit(calibration=cal, measured_at=at, measured_s=took)

    def put(self, key: CalibrationKey, cal: Calibration, measured_s: float) -> None:
        """Keep ``cal`` (never one with an error) under ``key``; atomic."""
        if cal.error is not None:
            return
        entry = {"schema": SCHEMA, "key": key.digest, "measured_at": self.clock(),
                 "measured_s": round(measured_s, 3), "tree": key.tree,
                 "calibration": json.loads(cal.model_dump_json())}
        path = self._path(key)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(entry))
        os.replace(tmp, path)

    def note_hit(self, key: CalibrationKey, hit: Hit, what: str) -> None:
        """Append one line to ``hits.jsonl``: when, what, the seconds saved."""
        line = json.dumps({"at": self.clock(), "key": key.digest[:16], "what": what,
                           "saved_s": round(hit.measured_s, 3)})
        fd = os.open(self._dir() / "hits.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW,
                     0o600)
        with os.fdopen(fd, "a") as fh:
            fh.write(line + "\n")

    def hits(self) -> list[dict[str, Any]]:
        """Every hit noted so far (for reports: ``benchmarks/try_time.py``)."""
        path = self.root / "hits.jsonl"
        if not path.is_file() or path.is_symlink():
            return []
        out = []
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    # -- the measuring lane -------------------------------------------------
    @contextlib.contextmanager
    def lane(self, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
        """Hold the runner's one measuring lane: threads of this process queue on
        a lock, other processes on ``measure.lock`` (``flock``; released when
        the holder exits, however it ends). ``on_wait`` is called once when the
        lane is busy, before waiting."""
        told = False
        if not self._thread_lane.acquire(blocking=False):
            if on_wait is not None:
                on_wait()
                told = True
            self._thread_lane.acquire()
        try:
            fd = os.open(self._dir() / "measure.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    if on_wait is not None and not told:
                        on_wait()
                    fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # releases the flock
        finally:
            self._thread_lane.release()
