"""Where a benchmark command runs: a fresh process group, or a fresh container.

Every command the verifier starts for a benchmark (setup, warm-up, measured
run, calibration run, a serving benchmark's server and client, an evaluator)
is one :class:`Job`, started by an :class:`Isolation` and measured from
outside by the :class:`Handle` it returns. Two implementations:

* :class:`ProcessIsolation`: a fresh process group on this host (``rsi
  verify`` on a laptop, unit tests). The checkout is not write-protected and
  ``/tmp`` is the host's: use it only where the candidate is trusted.
* :class:`ContainerIsolation`: a fresh Docker container per job (the docker
  SDK is imported only when one is built). See its docstring for what the
  container gets, and ``verifier/README.md`` for the isolation-spec JSON.

Measured per job, from outside: ``wall_s`` (start to exit of the command),
``peak_rss_mib``, ``cpu_s`` (user + system), ``ready_s`` (when the ready
pattern first appeared on the command's stdout, timed by the verifier).
Nothing here raises for a benchmark's behaviour: a failure is a
``CommandResult`` with ``error`` set.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import select
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, Protocol, cast

import psutil
from pydantic import BaseModel, ConfigDict, Field, field_validator

from .infra import is_engine_fault

if TYPE_CHECKING:
    import resource

TAIL_CHARS = 4000
POLL_S = 0.01
SWITCH_POLL_S = 0.1  # how often a container's processes' context switches are read
RUN_MOUNT = "/rsi/run"
RUN_DIR_MIB = 256
RUN_DIR_FULL_BYTES = 256 * 1024  # less free than this at the end: the run hit the cap
MAX_RUN_ENTRIES = 10_000
EXEC_START_TRIES = 3  # a job's exec not created (5xx) or not started (no pid): nothing of it ran
COPY_TRIES = 3  # a run dir's copy out of its container, tried again when tar's stream was cut
COPY_RETRY_S = 0.2  # times the try's index: the wait before a copy is tried again
SAID_BYTES = 512  # of a failed exec's stdout kept to say why (Docker's error text)
SAID_CHARS = 200
INPUT_MOUNT = "/rsi/input"
SRC_MOUNT = "/rsi/src"
CONTAINER_HOME = "/tmp/home"
SERVER_PORT = 8000
Role = Literal["setup", "run", "server", "client", "evaluator"]
_SECRET = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE|(^|_)API_?KEY|_KEY$|^AWS_|^GH_", re.IGNORECASE
)


@dataclass
class CommandResult:
    """What the verifier saw of one command (never raised, always returned)."""

    returncode: int | None
    wall_s: float
    timed_out: bool
    stdout_tail: str
    stderr_tail: str
    peak_rss_mib: float = 0.0
    ready_s: float | None = None
    error: str = ""
    cpu_s: float | None = None
    extra: dict = field(default_factory=dict)


@dataclass
class Job:
    """One command to run, and what it may see."""

    command: str
    checkout: Path
    """Its working directory (the arm's checkout, or Bk's for client/evaluator)."""
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 600.0
    role: Role = "run"
    ready_pattern: str | None = None
    run_dir: Path | None = None
    """Host dir, fresh per job: ``RSI_RESULT`` = result.json, ``RSI_OUTPUT_DIR`` = outputs/."""
    input_dir: Path | None = None
    """Host dir given read-only as ``RSI_INPUT_DIR`` (an evaluator's input)."""
    writable: bool = False
    """The checkout is writable (setup only)."""
    network: str | None = None
    """A private network of a serving run (container isolation)."""
    drop: tuple[str, ...] = ()
    """Names never passed on from the verifier's environment (process isolation)."""
    read_only_paths: tuple[str, ...] = ()
    """Host paths given read-only at the same path (hidden inputs on the runner)."""


#: What a benchmark process inherits from the verifier's environment (process
#: isolation): an allowlist of names a program needs to start, find its Python
#: and its accelerator, and nothing else. Everything the verifier means a job
#: to have (paths, pins, the hidden seed) is passed explicitly as ``extra``.
CHILD_ENV_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM",
    "TMPDIR", "TEMP", "TMP", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV",
    "PYTHONPATH", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED",
    "PYTHONHASHSEED", "PYTHONIOENCODING", "PYTHONUTF8", "LD_LIBRARY_PATH",
})
CHILD_ENV_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "ASCEND_", "HCCL_", "OMP_", "MKL_", "OPENBLAS_")


def child_env(
    base: dict[str, str] | None = None,
    extra: dict[str, str] | None = None,
    drop: tuple[str, ...] = (),
) -> dict[str, str]:
    """The allowlisted names of ``base`` (default: this process's env;
    :data:`CHILD_ENV_NAMES`, :data:`CHILD_ENV_PREFIXES`), never a credential-like
    name nor one in ``drop``, plus ``extra``."""
    env = {
        k: v
        for k, v in (os.environ if base is None else base).items()
        if (k in CHILD_ENV_NAMES or k.startswith(CHILD_ENV_PREFIXES))
        and not _SECRET.search(k) and k not in drop
    }
    env.update(extra or {})
    return env


#: Thread-count variables set to the pinned CPU count (or ``threads``) for
#: both arms alike, unless the benchmark's own env sets them.
THREAD_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "RSI_THREADS",
)


def parse_cpus(text: str) -> tuple[int, ...]:
    """A cpuset list (``"0-1"``, ``"2,4-5"``) as sorted CPU ids. Raises ValueError."""
    out: set[int] = set()
    for part in str(text).replace(" ", "").split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m or (m.group(2) and int(m.group(2)) < int(m.group(1))):
            raise ValueError(f"cpus {text!r}: write a cpuset list such as 0-1 or 2,4-5")
        out.update(range(int(m.group(1)), int(m.group(2) or m.group(1)) + 1))
    return tuple(sorted(out))


AUTO_SAMPLE_S = 1.0
"""How long ``resolve_cpus`` watches the CPUs before it picks the least busy."""


def cpu_busy(sample_s: float = AUTO_SAMPLE_S) -> dict[int, float]:
    """Each CPU's busy share (0..1) over ``sample_s`` seconds, from /proc/stat
    (user, nice, system, irq, softirq, steal against the total)."""

    def read() -> dict[int, tuple[int, int]]:
        out: dict[int, tuple[int, int]] = {}
        for line in Path("/proc/stat").read_text().splitlines():
            m = re.match(r"cpu(\d+)\s+(.*)", line)
            if m:
                v = [int(x) for x in m.group(2).split()]
                idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle + iowait
                out[int(m.group(1))] = (sum(v[:8]) - idle, sum(v[:8]))
        return out

    a = read()
    time.sleep(sample_s)
    b = read()
    busy: dict[int, float] = {}
    for cpu, (work, total) in b.items():
        w0, t0 = a.get(cpu, (work, total))
        busy[cpu] = (work - w0) / (total - t0) if total > t0 else 0.0
    return busy


def resolve_cpus(text: str | None, *, sample_s: float = AUTO_SAMPLE_S) -> str | None:
    """``[verifier] cpus`` as a cpuset list: ``"auto"`` is half the CPUs this
    process may use (at least one), ``"auto:N"`` N of them, in both cases the
    least busy over ``sample_s`` seconds (ties: the highest ids, away from
    CPU 0's interrupts); a list stays as it is; None stays None. A
    verification resolves it once: every run of both arms then shares the set."""
    if not text or not str(text).startswith("auto"):
        return text
    m = re.fullmatch(r"auto(?::(\d+))?", str(text))
    allowed = sorted(os.sched_getaffinity(0))
    if not m:
        raise ValueError(f"cpus {text!r}: write auto, auto:N or a cpuset list such as 0-1")
    n = int(m.group(1)) if m.group(1) else max(1, len(allowed) // 2)
    if not 1 <= n <= len(allowed):
        raise ValueError(
            f"cpus {text!r}: {n} CPU(s) asked, {len(allowed)} available to the verifier"
        )
    busy = cpu_busy(sample_s)
    ranked = sorted(allowed, key=lambda c: (round(busy.get(c, 1.0), 2), -c))
    return ",".join(map(str, sorted(ranked[:n])))


def pin_env(cpus: tuple[int, ...], threads: int | None) -> dict[str, str]:
    """Thread settings for pinned runs: ``threads``, else one per pinned CPU."""
    n = threads or len(cpus)
    return {k: str(n) for k in THREAD_VARS} if n else {}


def switches(pids) -> dict[int, tuple[int, int]]:
    """pid -> (voluntary, involuntary) context switches so far, from /proc."""
    out = {}
    for pid in pids:
        try:
            st = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        f = dict(line.split(":", 1) for line in st.splitlines() if ":" in line)
        with contextlib.suppress(KeyError, ValueError):
            out[pid] = (
                int(f["voluntary_ctxt_switches"]),
                int(f["nonvoluntary_ctxt_switches"]),
            )
    return out


class Handle(Protocol):
    """A started job."""

    host: str
    """Where the verifier (and a client) reach a server job."""
    t0: float
    """``time.perf_counter()`` when the command started."""

    def wait_ready(self, timeout_s: float) -> float | None:
        """Seconds from start until the ready pattern appeared (None: not yet / never)."""

    def running(self) -> bool: ...

    def http_status(self, port: int, path: str, timeout_s: float) -> int | None:
        """The HTTP status a ``GET path`` to this server job's ``port`` answers,
        asked from inside its network (None: no answer)."""

    def wait(self) -> CommandResult:
        """Until the command exits or its timeout passes; everything it left is killed."""

    def stop(self) -> CommandResult:
        """Kill it now (a server after its client finished) and return what was measured."""


class Isolation(Protocol):
    kind: str

    def start(self, job: Job, box: Any = None) -> Handle: ...

    def box(self, job: Job, input_root: Path | None = None) -> contextlib.AbstractContextManager[Any]:
        """Where one session's jobs of ``job``'s kind run in turn (the K
        client runs, or the K evaluators, of a ``runs_per_start`` session);
        yields what ``start`` takes as ``box`` (None: each job on its own)."""

    def private_network(self) -> contextlib.AbstractContextManager[str | None]:
        """A network private to one serving run (None where not needed): the
        server job starts first on it, the client then joins it."""

    def server_port(self) -> int: ...

    def prepare_dir(self, path: Path) -> None:
        """Make a fresh run dir writable by the job (and nobody else)."""

    def close(self) -> None: ...


def run_job(isolation: Isolation, job: Job, box: Any = None) -> CommandResult:
    """Start ``job`` (in ``box``: ``Isolation.box``) and wait for it; never raises."""
    try:
        return (isolation.start(job, box) if box is not None else isolation.start(job)).wait()
    except Exception as e:  # noqa: BLE001 - a runner returns, it does not raise
        from .infra import INFRA_PREFIX, explain, is_infrastructure

        why = INFRA_PREFIX + explain(e) if is_infrastructure(e) else f"could not run the command: {e!r}"
        return CommandResult(None, 0.0, False, "", "", error=why)


# ---- output capture (shared) ----------------------------------------------------


class _Output:
    """Tails of stdout and stderr, and the time the ready pattern first showed."""

    def __init__(self, ready_pattern: str | None, t0: float):
        self.ready_re = re.compile(ready_pattern) if ready_pattern else None
        self.t0 = t0
        self.out: deque[str] = deque(maxlen=60)
        self.err: deque[str] = deque(maxlen=200)
        self.ready_at: float | None = None
        self.ready = threading.Event()
        self._partial = ""

    def stdout(self, data: bytes) -> None:
        text = self._partial + data.decode("utf-8", "replace")
        *lines, self._partial = text.split("\n")
        self._partial = self._partial[-TAIL_CHARS:]
        for line in lines:
            self._line(line + "\n")

    def _line(self, line: str) -> None:
        if self.ready_re is not None and self.ready_at is None and self.ready_re.search(line):
            self.ready_at = time.perf_counter() - self.t0
            self.ready.set()
        self.out.append(line[-TAIL_CHARS:])

    def stderr(self, data: bytes) -> None:
        self.err.append(data.decode("utf-8", "replace")[-TAIL_CHARS:])

    def finish(self) -> None:
        if self._partial:
            self._line(self._partial)
            self._partial = ""

    def tails(self) -> tuple[str, str]:
        return "".join(self.out)[-TAIL_CHARS:], "".join(self.err)[-TAIL_CHARS:]

    def wait_ready(self, timeout_s: float, running: Callable[[], bool]) -> float | None:
        """Seconds from the start to the ready pattern; None when it did not show
        within ``timeout_s`` or the command ended first."""
        deadline = time.perf_counter() + timeout_s
        while time.perf_counter() < deadline and self.ready_at is None and running():
            self.ready.wait(0.02)
        return self.ready_at


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- processes ----------------------------------------------------------------------


def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total


def _kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _http_status(host: str, port: int, path: str, timeout_s: float) -> int | None:
    """``GET http://host:port/path`` from this process (no proxy): its status, or None."""
    try:
        with _NO_PROXY.open(f"http://{host}:{port}{path}", timeout=timeout_s) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except (OSError, urllib.error.URLError, ValueError):
        return None


#: The readiness probe of a server container, run by ``docker exec`` in it as
#: ``nobody`` (the candidate's user cannot trace or signal it): bash's
#: ``/dev/tcp`` needs no tool from the image but bash. argv: port, path, timeout.
PROBE_SCRIPT = (
    'exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 2\n'
    "printf 'GET %s HTTP/1.0\\r\\nHost: 127.0.0.1\\r\\nConnection: close\\r\\n\\r\\n' \"$2\" >&3\n"
    'IFS= read -r -n 64 -t "$3" line <&3 || exit 3\n'  # a status line, never a flood
    "printf '%s\\n' \"$line\"\n"
)
PROBE_USER = "65534:65534"


def parse_status_line(text: str) -> int | None:
    """``HTTP/1.x NNN ...`` -> NNN (None for anything else)."""
    m = re.match(r"HTTP/\d(?:\.\d)? (\d{3})\b", text.strip())
    return int(m.group(1)) if m else None


class ProcessHandle:
    """A command in its own process group (session) on this host."""

    host = "127.0.0.1"

    def __init__(self, job: Job, env: dict[str, str], cpus: tuple[int, ...] = ()):
        self.job = job
        self.t0 = time.perf_counter()
        self.output = _Output(job.ready_pattern, self.t0)
        pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        self.proc = subprocess.Popen(
            job.command,
            shell=True,
            cwd=str(job.checkout),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=pin,  # noqa: PLW1509 - only sched_setaffinity, before exec
        )
        self.readers = [
            threading.Thread(target=self._read, args=(pipe, sink), daemon=True)
            for pipe, sink in (
                (self.proc.stdout, self.output.stdout),
                (self.proc.stderr, self.output.stderr),
            )
        ]
        for r in self.readers:
            r.start()
        try:
            self.ps: psutil.Process | None = psutil.Process(self.proc.pid)
        except psutil.Error:
            self.ps = None
        self.peak = 0
        self.status: int | None = None
        self.usage: resource.struct_rusage | None = None

    @staticmethod
    def _read(pipe, sink) -> None:
        for chunk in iter(lambda: pipe.read1(65536), b""):
            sink(chunk)

    def wait_ready(self, timeout_s: float) -> float | None:
        return self.output.wait_ready(timeout_s, self.running)

    def http_status(self, port: int, path: str, timeout_s: float) -> int | None:
        return _http_status(self.host, port, path, timeout_s)

    def running(self) -> bool:
        return self.status is None and self._poll(block=False) is None

    def _poll(self, block: bool):
        try:
            pid, st, usage = os.wait4(self.proc.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            pid, st, usage = self.proc.pid, 0, None
        if pid:
            self.status, self.usage = st, usage
            if usage is not None:  # a run shorter than one poll: the kernel's high-water mark
                self.peak = max(self.peak, usage.ru_maxrss * 1024)
            return st
        return None

    def wait(self) -> CommandResult:
        deadline = self.t0 + self.job.timeout_s
        timed_out = False
        while self.status is None and self._poll(block=False) is None:
            if self.ps is not None:
                self.peak = max(self.peak, _tree_rss(self.ps))
            if time.perf_counter() > deadline:
                timed_out = True
                self._terminate()
                break
            time.sleep(POLL_S)
        return self._finish(timed_out)

    def stop(self) -> CommandResult:
        if self.status is None and self._poll(block=False) is None:
            self._terminate()
        return self._finish(False)

    def _terminate(self, grace_s: float = 2.0) -> None:
        _kill_group(self.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and self._poll(block=False) is None:
            time.sleep(0.01)
        _kill_group(self.proc.pid)
        if self.status is None:
            self._poll(block=True)

    def _finish(self, timed_out: bool) -> CommandResult:
        wall = time.perf_counter() - self.t0
        _kill_group(self.proc.pid)  # anything the command left in its group goes too
        for r in self.readers:
            r.join(timeout=2.0)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                with contextlib.suppress(Exception):
                    pipe.close()
        self.output.finish()
        out, err = self.output.tails()
        rc = os.waitstatus_to_exitcode(self.status) if self.status is not None else -9
        cpu = self.usage.ru_utime + self.usage.ru_stime if self.usage is not None else None
        extra: dict[str, int] = {}
        if self.usage is not None:  # the command and the children it waited for
            extra["voluntary_switches"] = int(self.usage.ru_nvcsw)
            extra["involuntary_switches"] = int(self.usage.ru_nivcsw)
        return CommandResult(
            returncode=rc,
            wall_s=wall,
            timed_out=timed_out,
            stdout_tail=out,
            stderr_tail=err,
            peak_rss_mib=self.peak / (1024 * 1024),
            ready_s=self.output.ready_at,
            cpu_s=cpu,
            extra=extra,
        )


class ProcessIsolation:
    """Today's behaviour: each job is a fresh process group on this host; the
    group is killed when the job ends. ``cpu_s`` and the context switches
    cover the main process and the children it waited for. The checkout is
    NOT write-protected. ``pin``: every job on the same CPUs (affinity) with
    the same thread settings."""

    kind = "process"

    def __init__(self, base_env: dict[str, str] | None = None):
        self.base_env = base_env
        self.cpus: tuple[int, ...] = ()
        self.pinned_env: dict[str, str] = {}

    def pin(self, cpus: str | None, threads: int | None = None) -> None:
        """Run every job on ``cpus`` (a cpuset list) with thread settings for them."""
        if cpus:
            want = parse_cpus(cpus)
            bad = sorted(set(want) - set(os.sched_getaffinity(0)))
            if bad:
                raise ValueError(f"cpus {cpus!r}: CPU(s) {bad} are not available to the verifier")
            self.cpus = want
        if cpus or threads:
            self.pinned_env = pin_env(self.cpus, threads)

    def start(self, job: Job, box: Any = None) -> ProcessHandle:
        if not Path(job.checkout).is_dir():
            raise FileNotFoundError(f"checkout {job.checkout} is not a directory")
        paths: dict[str, str] = {}
        if job.run_dir is not None:
            paths["RSI_RESULT"] = str(job.run_dir / "result.json")
            paths["RSI_OUTPUT_DIR"] = str(job.run_dir / "outputs")
        if job.input_dir is not None:
            paths["RSI_INPUT_DIR"] = str(job.input_dir)
        env = child_env(self.base_env, {**self.pinned_env, **job.env, **paths}, drop=job.drop)
        return ProcessHandle(job, env, self.cpus)

    @contextlib.contextmanager
    def private_network(self) -> Iterator[str | None]:
        yield None

    def box(self, job: Job, input_root: Path | None = None) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext(None)  # a process is all a job needs

    def server_port(self) -> int:
        return _free_port()

    def prepare_dir(self, path: Path) -> None:
        (path / "outputs").mkdir(parents=True, exist_ok=True)

    def close(self) -> None:
        pass


# ---- containers ---------------------------------------------------------------------

#: Keys of ``base_kwargs`` the spec may set (docker SDK ``containers.create`` names).
ALLOWED_KWARGS = frozenset(
    {
        "user", "cap_drop", "security_opt", "read_only", "mem_limit", "memswap_limit",
        "nano_cpus", "cpuset_cpus", "cpu_shares", "pids_limit", "devices", "device_requests",
        "volumes", "environment", "tmpfs", "init", "labels", "shm_size", "ulimits",
        "mem_swappiness", "oom_kill_disable",
    }
)  # fmt: skip
#: Keys the verifier sets itself: accepted in a spec (the harness's container_kwargs
#: has them) and replaced.
REPLACED_KWARGS = frozenset(
    {"image", "command", "working_dir", "detach", "stdin_open", "tty", "name", "network_mode",
     "network", "auto_remove", "entrypoint"}
)  # fmt: skip


class IsolationSpec(BaseModel):
    """The container settings ``ContainerIsolation`` starts every job with
    (JSON: ``{"image": ..., "base_kwargs": {...}}``; see the README)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    image: str = Field(min_length=1)
    base_kwargs: dict[str, Any] = Field(default_factory=dict)
    run_dir_mib: int = Field(RUN_DIR_MIB, ge=1, le=1024 * 1024)
    """Size cap of each job's run dir (``/rsi/run``, a tmpfs): results and outputs together."""

    @field_validator("base_kwargs")
    @classmethod
    def _keys(cls, kw: dict[str, Any]) -> dict[str, Any]:
        bad = sorted(set(kw) - ALLOWED_KWARGS - REPLACED_KWARGS)
        if bad:
            raise ValueError(
                f"base_kwargs: unsupported key(s) {', '.join(bad)}; allowed: "
                f"{', '.join(sorted(ALLOWED_KWARGS))}"
            )
        user = str(kw.get("user", "1000:1000"))
        if user.split(":")[0] in ("0", "root", ""):
            raise ValueError("base_kwargs.user: benchmark code never runs as root; use 1000:1000")
        return {k: v for k, v in kw.items() if k not in REPLACED_KWARGS}

    @classmethod
    def from_file(cls, path: Path) -> IsolationSpec:
        try:
            return cls.model_validate_json(Path(path).read_text())
        except OSError as e:
            raise ValueError(f"cannot read the isolation spec {path}: {e}") from None

    @classmethod
    def simple(
        cls, image: str, *, cpus: float | None = None, memory: str | None = None
    ) -> IsolationSpec:
        """A spec from flags: the image, optional CPU and memory limits. Nothing
        of this host is mounted: the image carries the benchmark's Python and
        what it imports (``rsi-bot/runtime:<tag>``, ``python -m harness.images
        tag``, for rsi-bot's own; a target's own image for its stack)."""
        kw: dict[str, Any] = {
            "environment": {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
                            "PATH": "/usr/local/bin:/usr/bin:/bin"},
            "pids_limit": 512,
        }
        if cpus is not None:
            kw["nano_cpus"] = int(cpus * 1e9)
        if memory is not None:
            kw["mem_limit"] = kw["memswap_limit"] = _parse_memory(memory)
        return cls(image=image, base_kwargs=kw)


def _parse_memory(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", text.lower())
    if not m:
        raise ValueError(f"memory '{text}': write e.g. 512m or 4g")
    return int(float(m.group(1)) * 1024 ** "_kmgt".index(m.group(2) or "_"))


class Cgroup:
    """A container's cgroup, found from one of its processes (v1 or v2)."""

    def __init__(self, pid: int, root: Path = Path("/sys/fs/cgroup"), proc: str | None = None):
        """``proc``: the text of ``/proc/<pid>/cgroup`` (read when not given)."""
        self.v1: dict[str, Path] = {}
        self.v2: Path | None = None
        proc = Path(f"/proc/{pid}/cgroup").read_text() if proc is None else proc
        for line in proc.splitlines():
            _, controllers, path = line.split(":", 2)
            rel = path.lstrip("/")
            if controllers == "":
                self.v2 = root / rel
            for c in controllers.split(","):
                if c in ("memory", "cpuacct", "cpu"):
                    self.v1[c] = root / controllers / rel
        where = self.v1.get("memory", self.v2)
        if where is None or not where.is_dir():
            raise RuntimeError(f"the cgroup of pid {pid} is not readable here ({where})")

    @staticmethod
    def _stat(path: Path) -> dict[str, int]:
        out = {}
        for line in path.read_text().splitlines():
            k, _, v = line.partition(" ")
            with contextlib.suppress(ValueError):
                out[k] = int(v)
        return out

    def pids(self) -> list[int]:
        where = self.v1.get("memory", self.v2)
        assert where is not None
        return [int(x) for x in (where / "cgroup.procs").read_text().split()]

    def tree_rss(self, skip: int) -> int:
        """Sum of the resident set sizes of the cgroup's processes but ``skip``
        (the container's idle PID 1): the same meaning as process isolation's."""
        total = 0
        for pid in self.pids():
            if pid != skip:
                with contextlib.suppress(psutil.Error):
                    total += psutil.Process(pid).memory_info().rss
        return total

    def cpu_s(self) -> float:
        if "cpuacct" in self.v1:
            return int((self.v1["cpuacct"] / "cpuacct.usage").read_text()) / 1e9
        assert self.v2 is not None
        return self._stat(self.v2 / "cpu.stat")["usage_usec"] / 1e6

    def throttled_s(self) -> float | None:
        try:
            if "cpu" in self.v1:
                return self._stat(self.v1["cpu"] / "cpu.stat").get("throttled_time", 0) / 1e9
            if self.v2 is not None:
                return self._stat(self.v2 / "cpu.stat").get("throttled_usec", 0) / 1e6
        except OSError:
            return None
        return None


def _lchown_tree(path: Path, uid: int, gid: int) -> None:
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(root, name), uid, gid)
    os.lchown(path, uid, gid)


#: Jobs whose result the command itself writes: a process left running after
#: the command exits could rewrite it, so leftovers fail the run.
LEFTOVER_ROLES = frozenset({"run"})

#: How long a box waits, after killing every process of a job's user, for
#: them to be gone before it gives the box up (``ContainerHandle._release``).
BOX_KILL_WAIT_S = 2.0


class ContainerHandle:
    """One job in its own fresh container (see :class:`ContainerIsolation`)."""

    def __init__(self, iso: ContainerIsolation, job: Job, box: ContainerBox | None = None):
        self.iso, self.job, self.box = iso, job, box
        self.api = iso.client.api
        if box is None:
            kw = iso.create_kwargs(job)
            self.name = kw["name"]
            self.container = iso.client.containers.create(**kw)
        else:  # the session's container: its previous job's processes are gone, its dirs empty
            self.name, self.container = box.name, box.container
        self.cid = self.container.id
        self.exec_id: str | None = None
        self.result: CommandResult | None = None
        self.host = "127.0.0.1"
        try:
            self._begin()
        except Exception:
            if box is None:
                self._remove()
            else:  # the session's container, in an unknown state: not used again
                self._close_pidfd()
                box.broken = True
            raise

    def _begin(self) -> None:
        job, iso = self.job, self.iso
        if self.box is None:
            self.container.start()
            self.container.reload()
            self.init_pid = int(self.container.attrs["State"]["Pid"])
        else:
            self.init_pid = self.box.init_pid
        self.cgroup = Cgroup(self.init_pid)
        if job.network and job.role == "server":
            iso.netns_owner[job.network] = self.cid  # the client joins this namespace
        self.cpu0 = self.cgroup.cpu_s()
        thr = self.cgroup.throttled_s()
        self.thr0 = thr if thr is not None else 0.0
        env = {**iso.env, **job.env, **iso.paths(job, self.box), "HOME": CONTAINER_HOME}
        outputs = f'mkdir -p {RUN_MOUNT}/outputs && ' if job.run_dir is not None else ""
        wrapper = outputs + 'mkdir -p "$HOME" && exec /bin/sh -c "$1"'
        argv = ["/bin/sh", "-c", wrapper, "rsi-job", job.command]
        self.peak = 0
        self.sw: dict[int, tuple[int, int]] = {}
        self.end: float | None = None
        self.reader: threading.Thread | None = None
        self.pidfd: int | None = None
        for attempt in range(EXEC_START_TRIES):
            if attempt:
                if self.reader is not None:  # the exec that never started: its stream has ended
                    self.reader.join(timeout=5.0)
                time.sleep(COPY_RETRY_S * attempt)
            try:
                self.exec_id = self.api.exec_create(self.cid, argv, user=iso.user, environment=env,
                                                    workdir=SRC_MOUNT)["Id"]  # fmt: skip
            except Exception as e:
                if attempt + 1 < EXEC_START_TRIES and is_engine_fault(e):
                    continue  # a job runs only once its exec is started: nothing of it ran
                raise
            self.t0 = time.perf_counter()
            self.output = _Output(job.ready_pattern, self.t0)
            stream = self.api.exec_start(self.exec_id, stream=True, demux=True)
            self.reader = threading.Thread(target=self._read, args=(stream,), daemon=True)
            self.reader.start()
            self.pidfd, started = self._exec_pidfd()
            if started:
                break
        if self.pidfd is None:
            # already gone before its pid could be watched (or never started,
            # on every try): the same end as any other (leftovers killed and
            # counted, the cgroup read)
            self._mark_end()

    def _exec_pidfd(self) -> tuple[int | None, bool]:
        """A pidfd of the job's process, and whether it started at all: an
        exec the runtime failed to start (seen on a loaded machine: Docker's
        error text on stdout, status 126) has no pid, and nothing of the job
        ran, so ``_begin`` starts it again; a job that ran, however briefly,
        has one and is never started twice."""
        deadline = time.perf_counter() + 10
        while time.perf_counter() < deadline:
            info = self.api.exec_inspect(self.exec_id)
            if info.get("Pid"):
                try:
                    return os.pidfd_open(int(info["Pid"])), True
                except ProcessLookupError:
                    return None, True
            if not info.get("Running") and info.get("ExitCode") is not None:
                return None, False
            time.sleep(0.002)
        return None, True

    def _read(self, stream) -> None:
        with contextlib.suppress(Exception):  # the container went away: the result says why
            for out, err in stream:
                if out:
                    self.output.stdout(out)
                if err:
                    self.output.stderr(err)

    def running(self) -> bool:
        if self.end is None and self.pidfd is not None:
            if select.select([self.pidfd], [], [], 0)[0]:
                self._mark_end()
        return self.end is None

    def _mark_end(self, exited: bool = True) -> None:
        self.end = time.perf_counter()
        # First, before anything else: a process the command left behind could
        # still rewrite its result. Kill every one of them at once and count them.
        check = exited and self.job.role in LEFTOVER_ROLES
        self.leftover = self._kill_leftovers() if check else 0
        if self.box is not None:  # before its run dir is copied out; the next job inherits none
            self._kill_all()
        self._sample()
        with contextlib.suppress(OSError):
            self.cpu1 = self.cgroup.cpu_s()
            self.thr1 = self.cgroup.throttled_s()

    def _kill_leftovers(self) -> int:
        """Kill the job's processes still alive after its command exited (the
        container's idle PID 1 and its init are not the job's); their number."""
        try:
            pids = self.cgroup.pids()
        except OSError:
            return 0
        uid = int(self.iso.user.split(":")[0])
        left = 0
        for pid in pids:
            if pid == self.init_pid:
                continue
            try:
                st = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            fields = dict(line.split(":", 1) for line in st.splitlines() if ":" in line)
            if fields.get("State", "").strip().startswith("Z"):
                continue
            if int(fields.get("Uid", "-1").split()[0]) != uid:
                continue
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            left += 1
        return left

    def _sample(self) -> None:
        with contextlib.suppress(OSError):
            self.peak = max(self.peak, self.cgroup.tree_rss(self.init_pid))
            # cgroup v1/v2 keep no context-switch counts: sum the job's processes'
            # own counters, sampled while they live (short-lived children are missed)
            now = time.perf_counter()
            if now - getattr(self, "_sw_at", 0.0) < SWITCH_POLL_S:
                return
            self._sw_at = now
            pids = [p for p in self.cgroup.pids() if p != self.init_pid]
            for pid, (v, i) in switches(pids).items():
                old = self.sw.get(pid, (0, 0))
                self.sw[pid] = (max(v, old[0]), max(i, old[1]))

    def wait_ready(self, timeout_s: float) -> float | None:
        return self.output.wait_ready(timeout_s, self.running)

    def http_status(self, port: int, path: str, timeout_s: float) -> int | None:
        """Asked from inside the container's own network namespace (the
        verifier has no route into it: it holds nothing but loopback)."""
        if not re.fullmatch(r"/[\x21-\x7e]*", path):
            return None  # no space or control character reaches the request line
        try:
            exec_id = self.api.exec_create(
                self.cid,
                ["/bin/bash", "-c", PROBE_SCRIPT, "rsi-probe", str(int(port)), path,
                 str(max(1, round(timeout_s)))],
                user=PROBE_USER, environment={}, workdir="/",
            )["Id"]
            out = self.api.exec_start(exec_id, demux=False) or b""
        except Exception:  # noqa: BLE001 - the container went away: not ready
            return None
        return parse_status_line(out[:200].decode("latin-1"))

    def wait(self) -> CommandResult:
        deadline = self.t0 + self.job.timeout_s
        poller = select.poll()
        if self.pidfd is not None:
            poller.register(self.pidfd, select.POLLIN)
        timed_out = False
        while self.end is None:
            self._sample()
            if poller.poll(int(POLL_S * 1000)):
                self._mark_end()
                break
            if time.perf_counter() > deadline:
                timed_out = True
                self._mark_end(exited=False)
                break
        return self._finish(timed_out)

    def stop(self) -> CommandResult:
        if self.running():
            self._mark_end()
        return self._finish(False)

    def _finish(self, timed_out: bool) -> CommandResult:
        if self.result is not None:
            return self.result
        wall = (self.end or time.perf_counter()) - self.t0
        cpu1 = getattr(self, "cpu1", None)
        thr1 = getattr(self, "thr1", None)
        cap_error = ""
        if self.job.run_dir is not None:
            if timed_out:  # what may still run must not write while the results are copied
                with contextlib.suppress(Exception):
                    self._kill_leftovers()
            cap_error = self._copy_out()
        if self.box is None:
            with contextlib.suppress(Exception):
                self.container.kill()  # the whole cgroup dies: nothing outlives the job
        exit_code = self._exit_code()
        if self.reader is not None:
            self.reader.join(timeout=5.0)
        if self.box is None:
            self._remove()
        else:
            self._release()
        self.output.finish()
        out, err = self.output.tails()
        extra: dict[str, Any] = {"container": self.name}
        if getattr(self, "leftover", 0):
            extra["leftover_processes"] = self.leftover
        if thr1 is not None:
            extra["throttled_s"] = max(0.0, thr1 - self.thr0)
        if getattr(self, "sw", None):
            extra["voluntary_switches"] = sum(v for v, _ in self.sw.values())
            extra["involuntary_switches"] = sum(i for _, i in self.sw.values())
        self.result = CommandResult(
            returncode=-9 if timed_out else exit_code,
            wall_s=wall,
            timed_out=timed_out,
            stdout_tail=out,
            stderr_tail=err,
            peak_rss_mib=self.peak / (1024 * 1024),
            ready_s=self.output.ready_at,
            cpu_s=None if cpu1 is None else max(0.0, cpu1 - self.cpu0),
            error=cap_error or ("" if timed_out or exit_code is not None else "the job's exit status is unknown"),
            extra=extra,
        )
        return self.result

    def _exec_out(self, argv: list[str], limit: int) -> _Capped:
        """stdout of ``argv`` run in the job's container as the job's user, as a
        stream of at most ``limit`` bytes (then :class:`_CapExceeded`); its
        ``exit_code()`` once read to the end."""
        eid = self.api.exec_create(self.cid, argv, user=self.iso.user, workdir="/")["Id"]
        return _Capped(self.api.exec_start(eid, stream=True, demux=True), limit, self.api, eid)

    def _copy_out(self) -> str:
        """Copy the run dir (a tmpfs in the container) into the job's host
        ``run_dir``: regular files, directories, symlinks and FIFOs as such (the
        host reads results only as regular files, never through a link), no
        devices, no path leaving the dir, at most :data:`MAX_RUN_ENTRIES`
        entries and the tmpfs's size. An error naming the cap when the run hit
        it (or its copy went over), else "".

        A copy is whole only when ``tar`` exited 0 (1: a file changed while it
        was read, the archive is still whole) after the stream ended: a tar
        cut short at a member's boundary reads as a shorter archive, and an
        exec the runtime failed to start (seen on a loaded machine) streams
        Docker's error text instead of an archive. Such a copy is undone and
        tried again (:data:`COPY_TRIES` in all: the job is over, its run dir
        stays as it left it); an error saying what tar or Docker said after
        the last."""
        cap = self.iso.spec.run_dir_mib * 1024 * 1024
        cap_text = f"{self.iso.spec.run_dir_mib} MiB"
        free: int | None = getattr(self, "run_free", None)  # a box's kill read it already
        try:
            if free is None:
                free = _free_bytes(b"".join(self._exec_out(["stat", "-f", "-c", "%a %S", RUN_MOUNT], 4096)))
        except Exception:  # noqa: BLE001 - unknown: judged by the copy's size below
            free = None
        if free is not None and free < RUN_DIR_FULL_BYTES:
            return (f"the run dir hit its size cap ({cap_text} for {RUN_MOUNT}: results and outputs "
                    "together); the run's results are not read")
        assert self.job.run_dir is not None  # _copy_out runs only for a job with a run dir
        dest = Path(self.job.run_dir)
        before = _entries(dest)
        why = ""
        for attempt in range(COPY_TRIES):
            if attempt:
                _remove_new(dest, before)
                time.sleep(COPY_RETRY_S * attempt)
            try:
                why = self._copy_once(dest, cap)
            except _CapExceeded:
                _remove_new(dest, before)
                return f"the run dir's copy went over its size cap ({cap_text}); the run's results are not read"
            except _TooManyEntries:
                _remove_new(dest, before)
                return (f"the run dir holds more than {MAX_RUN_ENTRIES} entries (its cap); "
                        "the run's results are not read")
            if not why:
                return ""
        _remove_new(dest, before)
        return f"the run dir could not be copied out of the job's container ({why}; {COPY_TRIES} tries)"

    def _copy_once(self, dest: Path, cap: int) -> str:
        """One copy of the run dir into ``dest``: "" when whole, else why not
        (what is extracted of it stays for the caller to undo)."""
        import tarfile

        try:
            stream = self._exec_out(["tar", "-C", RUN_MOUNT, "-cf", "-", "."], cap + 16 * 1024 * 1024)
        except Exception as e:  # noqa: BLE001 - the daemon refused the exec
            return f"the copy could not be started: {type(e).__name__}"
        try:
            with tarfile.open(fileobj=cast(IO[bytes], stream), mode="r|") as tar:
                for n, m in enumerate(tar):
                    if n > MAX_RUN_ENTRIES:
                        raise _TooManyEntries
                    _extract(tar, m, dest)
            stream.drain()  # the end-of-archive padding: the exec ends once its stream is read
        except _CapExceeded:
            raise
        except (tarfile.TarError, OSError) as e:
            return f"{type(e).__name__}{stream.said()}"
        code = stream.exit_code()
        if code not in (0, 1):
            return f"tar's exit status {code}{stream.said()}"
        return ""

    def _exit_code(self, wait_s: float = 5.0) -> int | None:
        """The command's exit status as Docker recorded it (it marks an exec done
        only once its output streams close: the kill above closes them)."""
        deadline = time.perf_counter() + wait_s
        while time.perf_counter() < deadline:
            try:
                info = self.api.exec_inspect(self.exec_id)
            except Exception:  # noqa: BLE001
                return None
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            time.sleep(0.01)
        return None

    def _release(self) -> None:
        """Hand the box back for the session's next job (every process of the
        job's user killed by ``_kill_all`` when it ended): the run dir, ``/tmp`` and
        ``/dev/shm`` emptied; a box where a process of the job's user is still
        alive, or that could not be emptied, is ``broken`` (the next job gets
        a fresh container)."""
        self._close_pidfd()
        box = self.box
        assert box is not None
        status, _ = self._exec_status(["find", RUN_MOUNT, "/tmp", "/dev/shm", "-mindepth", "1", "-delete"])
        # a killed process leaves the list once it has taken the signal: wait for that
        deadline = time.perf_counter() + BOX_KILL_WAIT_S
        while (alive := self._kill_leftovers()) and time.perf_counter() < deadline:
            time.sleep(0.005)
        if status != 0 or alive:
            box.broken = True

    def _kill_all(self) -> None:
        """Kill every process of the job's user in the box: ``kill(-1,
        SIGKILL)`` from inside, as that user. The kernel signals them all in
        one pass that no fork can slip past (a walk over the cgroup's pids
        from the host misses a process that forks and exits in a loop).
        The same exec reads the run dir's free space for ``_copy_out`` (one
        exec fewer per job: nothing of the job writes there any more)."""
        self._kill_leftovers()
        argv = ["/bin/sh", "-c", f"kill -9 -1; stat -f -c '%a %S' {RUN_MOUNT} 2>/dev/null || true"]
        with contextlib.suppress(Exception):  # unknown: _copy_out reads it itself
            self.run_free = _free_bytes(self._exec_status(argv)[1])

    def _exec_status(self, argv: list[str]) -> tuple[int | None, bytes]:
        """Exit status (None: it could not be run) and output of ``argv``
        exec'd in the container as the job's user."""
        try:
            eid = self.api.exec_create(self.cid, argv, user=self.iso.user, workdir="/")["Id"]
            out = self.api.exec_start(eid) or b""
            return self.api.exec_inspect(eid).get("ExitCode"), out
        except Exception:  # noqa: BLE001 - the container went away
            return None, b""

    def _close_pidfd(self) -> None:
        pidfd: int | None = getattr(self, "pidfd", None)
        if pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(pidfd)
            self.pidfd = None

    def _remove(self) -> None:
        self._close_pidfd()
        try:
            self.container.remove(force=True)
        except Exception as e:  # noqa: BLE001
            if "No such container" not in str(e):
                raise


def _free_bytes(stat_out: bytes) -> int:
    """``stat -f -c '%a %S'`` output -> free bytes (ValueError/IndexError: none)."""
    blocks, size = stat_out.split()[:2]
    return int(blocks) * int(size)


class _CapExceeded(OSError):
    """A copy out of a job's container went over its cap."""


class _TooManyEntries(Exception):
    """A run dir's copy holds more than :data:`MAX_RUN_ENTRIES` entries."""


class _Capped:
    """A file-like ``read`` over a docker exec's demuxed stdout stream, at most
    ``limit`` bytes; keeps the start of stdout (what Docker said when it
    failed to start the exec: its text comes in place of the output)."""

    def __init__(self, stream, limit: int, api=None, exec_id: str = ""):
        self.it = iter(stream)
        self.limit = limit
        self.total = 0
        self.buf = b""
        self.head = b""
        self.api = api
        self.exec_id = exec_id

    def _more(self) -> bool:
        for out, _err in self.it:
            if out:
                self.total += len(out)
                if self.total > self.limit:
                    raise _CapExceeded(f"over {self.limit} bytes")
                if len(self.head) < SAID_BYTES:
                    self.head += out[: SAID_BYTES - len(self.head)]
                self.buf += out
                return True
        return False

    def read(self, n: int = -1) -> bytes:
        while (n < 0 or len(self.buf) < n) and self._more():
            pass
        if n < 0:
            n = len(self.buf)
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def __iter__(self):
        while self._more() or self.buf:
            data, self.buf = self.buf, b""
            yield data

    def drain(self) -> None:
        """Read the stream to its end (still under its cap)."""
        while self._more():
            self.buf = b""
        self.buf = b""

    def exit_code(self, wait_s: float = 5.0) -> int | None:
        """The exec's exit status once its stream has ended (None: unknown)."""
        if self.api is None:
            return None
        deadline = time.perf_counter() + wait_s
        while True:
            try:
                info = self.api.exec_inspect(self.exec_id)
            except Exception:  # noqa: BLE001 - the container went away
                return None
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            if time.perf_counter() > deadline:
                return None
            time.sleep(0.01)

    def said(self) -> str:
        """``: <what was said>`` when stdout did not start as an archive
        (Docker's text of an exec it failed to start), printable characters
        only, short; else "" (tar's own stderr names the run's files: the
        job's words, never quoted in a verdict)."""
        if not self.head or _looks_like_tar(self.head):
            return ""
        text = self.head.decode("utf-8", "replace")
        text = " ".join("".join(c if c.isprintable() else " " for c in text).split())[:SAID_CHARS]
        return f": {text}" if text else ""


def _looks_like_tar(head: bytes) -> bool:
    """Whether a stream's start may be an archive (or a piece of one): a tar
    header holds NUL bytes in its first fields (the name's padding, the
    mode's end), text from Docker holds none."""
    return b"\0" in head


def _entries(dest: Path) -> set[str]:
    """Every path under ``dest``, relative to it (links not followed)."""
    out: set[str] = set()
    for root, dirs, files in os.walk(dest):
        rel = os.path.relpath(root, dest)
        out.update(os.path.normpath(os.path.join(rel, n)) for n in dirs + files)
    return out


def _remove_new(dest: Path, before: set[str], rel: str = "") -> None:
    """Undo a copy into ``dest``: remove every path not in ``before``
    (``_entries`` of it before the copy; links as links, never followed)."""
    import shutil

    for p in (dest / rel).iterdir():
        r = os.path.join(rel, p.name) if rel else p.name
        if r in before:
            if p.is_dir() and not p.is_symlink():
                _remove_new(dest, before, r)
        elif p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                p.unlink()


def _extract(tar, m, dest: Path) -> None:
    """One tar member into ``dest``, never outside it, never through a link."""
    import tarfile

    parts = [p for p in Path(m.name).parts if p not in (".", "")]
    if not parts or any(p == ".." for p in parts) or Path(m.name).is_absolute():
        return
    parent = dest.joinpath(*parts[:-1])
    for i in range(len(parts) - 1):  # every dir on the way is a real dir we made
        d = dest.joinpath(*parts[: i + 1])
        if d.is_symlink() or (d.exists() and not d.is_dir()):
            return
    parent.mkdir(parents=True, exist_ok=True)
    path = parent / parts[-1]
    if path.is_symlink() or path.exists() and not path.is_dir():
        return
    if m.isdir():
        path.mkdir(exist_ok=True)
    elif m.isreg():
        src = tar.extractfile(m)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "wb") as fh:
            while chunk := src.read(1 << 20):
                fh.write(chunk)
    elif m.issym():
        os.symlink(m.linkname, path)  # kept as a link: the host reads results with O_NOFOLLOW
    elif m.type == tarfile.FIFOTYPE:
        os.mkfifo(path, 0o644)


class ContainerBox:
    """A container kept for the jobs of one session that are alike: the K
    client runs of a ``runs_per_start`` session (all joining its server's
    namespace), or their K evaluators. Each job is ``docker exec``'d in it as
    in a fresh container (the same mounts, user, limits and network, its own
    environment, its run dir copied out when it ends); between jobs, every
    process of the job's user is killed and the run dir and ``/tmp`` are
    emptied, so a job inherits nothing of the previous one but the image.

    What it holds is what the session's jobs need and nothing more: the
    measuring checkout (B0's protected client or evaluator, read-only) and,
    for evaluators, the session's own runs (``input_root``, read-only), each
    job reading its run's outputs (``RSI_INPUT_DIR`` under it). Every job in
    a box runs the same protected code on the same arm's outputs; a job
    that would need other mounts, or a box that could not be emptied
    (``broken``), gets a fresh container."""

    container: Any
    name: str
    init_pid: int
    broken: bool

    def __init__(self, iso: ContainerIsolation, job: Job, input_root: Path | None = None):
        self.iso, self.role, self.checkout = iso, job.role, Path(job.checkout)
        self.network, self.writable = job.network, job.writable
        self.run_dir = job.run_dir is not None  # the tmpfs at RUN_MOUNT
        self.read_only_paths = tuple(job.read_only_paths)
        self.input_root = None if input_root is None else Path(input_root)
        template = dataclasses.replace(job, input_dir=self.input_root)
        # an init as PID 1 reaps what a job orphans: a fresh container per job
        # never lives long enough for zombies to matter, a box would fill its
        # pids limit with them
        kw = {**iso.create_kwargs(template), "init": True}
        self.name = kw["name"]
        self.container = iso.client.containers.create(**kw)
        self.broken = False
        try:
            self.container.start()
            self.container.reload()
            self.init_pid = int(self.container.attrs["State"]["Pid"])
        except Exception:
            self.close()
            raise

    def input_path(self, input_dir: Path) -> str:
        """``input_dir`` (under ``input_root``) as the box's jobs see it."""
        assert self.input_root is not None
        rel = Path(input_dir).relative_to(self.input_root)
        return f"{INPUT_MOUNT}/{rel.as_posix()}" if rel.parts else INPUT_MOUNT

    def fits(self, job: Job) -> bool:
        """``job`` can run here: the box is sound and holds exactly the
        mounts and network ``job`` would get in a container of its own."""
        if self.broken or job.role != self.role or job.writable != self.writable:
            return False
        if (job.run_dir is not None) != self.run_dir:
            return False
        if Path(job.checkout) != self.checkout or job.network != self.network:
            return False
        if tuple(job.read_only_paths) != self.read_only_paths:
            return False
        if job.input_dir is None:
            return self.input_root is None
        if self.input_root is None:
            return False
        return Path(job.input_dir).is_relative_to(self.input_root)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.container.remove(force=True)


class ContainerIsolation:
    """Every job in its own fresh Docker container, killed and removed at its end.

    The container of a job gets, on top of the spec's ``base_kwargs``:

    * the checkout at ``/rsi/src`` (the working directory), read-only; only a
      ``setup`` job gets its arm's checkout read-write (the checkout is then
      chowned to the sandbox user when the verifier runs as root);
    * a fresh tmpfs ``/tmp`` with ``HOME=/tmp/home`` (nothing persists between jobs);
    * a read-only root filesystem, all capabilities dropped, ``no-new-privileges``;
    * no network: a job's network namespace holds nothing but loopback
      (``network_mode="none"``). A serving run's client joins its server's
      namespace (``network_mode="container:<server>"``) and reaches it at
      ``127.0.0.1``; the verifier polls the server's ``ready_path`` with a
      probe exec'd in the server's container as ``nobody``. No bridge, no
      host address, no route: a candidate's server (or a client) reaches
      nothing on the host, not even a service bound to ``0.0.0.0`` (a
      ``--internal`` docker network still gives its containers the host's
      bridge address);
    * the job's own result dir (a host dir created fresh for it, the only
      writable mount) at ``/rsi/run``: ``RSI_RESULT=/rsi/run/result.json``,
      ``RSI_OUTPUT_DIR=/rsi/run/outputs``; an evaluator's input read-only at
      ``/rsi/input`` (``RSI_INPUT_DIR``).

    The K client runs of a ``runs_per_start`` session share one container
    (and its K evaluators another): :class:`ContainerBox`, emptied between
    jobs.

    PID 1 is a ``sleep`` running as ``nobody``, so the command (run through
    ``docker exec`` as the spec's ``user``, 1000:1000 by default) cannot end
    the container early. The verifier times the command with a pidfd, reads
    the cgroup (``cpu_s`` = CPU time of the container, user + system;
    ``peak_rss_mib`` = the largest sum of RSS over the cgroup's processes,
    polled every 10 ms; ``throttled_s``), then kills the container: its whole
    cgroup dies, and it is removed.

    Isolation spec JSON (``--isolation-spec FILE``)::

        {"image": "rsi-bot/runtime:0123456789abcdef",
         "base_kwargs": {"user": "1000:1000", "cap_drop": ["ALL"],
                         "security_opt": ["no-new-privileges"], "mem_limit": 4294967296,
                         "memswap_limit": 4294967296, "nano_cpus": 2000000000,
                         "pids_limit": 512,
                         "volumes": {"/data/models": {"bind": "/data/models", "mode": "ro"}},
                         "environment": {"PATH": "...", "PYTHONUNBUFFERED": "1"},
                         "devices": ["/dev/davinci0:/dev/davinci0:rwm"],
                         "device_requests": [{"Driver": "", "Count": -1, "DeviceIDs": [],
                                              "Capabilities": [["gpu"]], "Options": {}}]}}

    ``base_kwargs`` uses docker SDK ``containers.create`` names; the keys in
    ``ALLOWED_KWARGS`` are used, those in ``REPLACED_KWARGS`` (command, name,
    network_mode, ...) are accepted and replaced, any other key is refused.
    Every volume is mounted read-only whatever its mode says.
    """

    kind = "container"

    def __init__(self, spec: IsolationSpec, client=None):
        if client is None:
            import docker  # lazily: the verifier imports without docker

            client = docker.from_env(timeout=120)
        self.client = client
        self.spec = spec
        kw = dict(spec.base_kwargs)
        self.user = str(kw.pop("user", "1000:1000"))
        self.env = {str(k): str(v) for k, v in dict(kw.pop("environment", {}) or {}).items()}
        self.base = kw
        self.netns_owner: dict[str, str] = {}
        """private network name -> the id of the server container whose namespace it is."""

    def pin(self, cpus: str | None, threads: int | None = None) -> None:
        """Every job's container on ``cpus`` (``cpuset_cpus``) with thread
        settings for them; thread variables the spec sets stay as they are."""
        pinned: tuple[int, ...] = ()
        if cpus:
            pinned = parse_cpus(cpus)
            self.base["cpuset_cpus"] = ",".join(map(str, pinned))
        elif self.base.get("cpuset_cpus"):
            pinned = parse_cpus(str(self.base["cpuset_cpus"]))
        for k, v in pin_env(pinned, threads).items():
            self.env.setdefault(k, v)

    def paths(self, job: Job, box: ContainerBox | None = None) -> dict[str, str]:
        out = {}
        if job.run_dir is not None:
            out = {
                "RSI_RESULT": f"{RUN_MOUNT}/result.json",
                "RSI_OUTPUT_DIR": f"{RUN_MOUNT}/outputs",
            }
        if job.input_dir is not None:
            out["RSI_INPUT_DIR"] = INPUT_MOUNT if box is None else box.input_path(job.input_dir)
        return out

    def create_kwargs(self, job: Job) -> dict[str, Any]:
        """``containers.create`` arguments for ``job`` (pure but for the spec)."""
        kw = {k: v for k, v in self.base.items() if k not in ("volumes", "tmpfs")}
        volumes = {
            src: {"bind": (m or {}).get("bind", src), "mode": "ro"}
            for src, m in dict(self.base.get("volumes") or {}).items()
        }
        volumes[str(Path(job.checkout).resolve())] = {
            "bind": SRC_MOUNT,
            "mode": "rw" if job.writable else "ro",
        }
        if job.input_dir is not None:
            volumes[str(job.input_dir)] = {"bind": INPUT_MOUNT, "mode": "ro"}
        for path in job.read_only_paths:
            volumes.setdefault(path, {"bind": path, "mode": "ro"})
        size = re.search(r"size=([^,]+)", str((self.base.get("tmpfs") or {}).get("/tmp", "")))
        if "device_requests" in kw:
            kw["device_requests"] = [_device_request(r) for r in kw["device_requests"]]
        kw.update(
            image=self.spec.image,
            command=["sleep", "infinity"],
            user="65534:65534",
            working_dir="/",
            volumes=volumes,
            tmpfs={
                "/tmp": f"rw,exec,nosuid,nodev,size={size.group(1) if size else '1g'},mode=1777",
                # the run dir: a tmpfs of a fixed size, copied out under caps when the job ends
                **({RUN_MOUNT: f"rw,nosuid,nodev,size={self.spec.run_dir_mib}m,mode=0777"}
                   if job.run_dir is not None else {}),
            },
            read_only=True,
            cap_drop=["ALL"],
            security_opt=sorted({*kw.get("security_opt", ()), "no-new-privileges"}),
            detach=True,
            name=f"rsi-verify-{job.role}-{uuid.uuid4().hex[:12]}",
            labels={**dict(kw.get("labels") or {}), "rsi-bot.verifier": job.role},
        )
        kw["network_mode"] = "none"
        if job.network and job.role != "server":
            owner = self.netns_owner.get(job.network)
            if owner is None:
                raise ValueError(f"private network {job.network!r}: start its server job first")
            kw["network_mode"] = f"container:{owner}"
        return kw

    def start(self, job: Job, box: ContainerBox | None = None) -> ContainerHandle:
        if not Path(job.checkout).is_dir():
            raise FileNotFoundError(f"checkout {job.checkout} is not a directory")
        if job.writable and os.geteuid() == 0:
            uid, gid = (int(x) for x in (self.user + ":" + self.user).split(":")[:2])
            _lchown_tree(Path(job.checkout), uid, gid)
        if box is not None and not box.fits(job):
            box = None  # broken, or another kind of job: its own container
        return ContainerHandle(self, job, box)

    @contextlib.contextmanager
    def box(self, job: Job, input_root: Path | None = None) -> Iterator[ContainerBox | None]:
        """One container for a session's jobs like ``job`` (its K client runs,
        or its K evaluators), each ``docker exec``'d in turn instead of a
        container each: see :class:`ContainerBox`. Removed at the end."""
        box = ContainerBox(self, job, input_root)
        try:
            yield box
        finally:
            box.close()

    @contextlib.contextmanager
    def private_network(self) -> Iterator[str | None]:
        """The network namespace of the run's server container (no docker
        network is created): the server starts in its own loopback-only
        namespace, the client joins it (with ``runs_per_start`` K > 1: K client
        runs in turn in one box, emptied between them, the server's ``Handle``
        kept across them; ``runner.run_session``)."""
        name = f"rsi-verify-netns-{uuid.uuid4().hex[:12]}"
        try:
            yield name
        finally:
            self.netns_owner.pop(name, None)

    def server_port(self) -> int:
        return SERVER_PORT

    def prepare_dir(self, path: Path) -> None:
        (path / "outputs").mkdir(parents=True, exist_ok=True)
        uid, gid = (int(x) for x in (self.user + ":" + self.user).split(":")[:2])
        for p in (path, path / "outputs"):
            try:
                os.chown(p, uid, gid)
            except PermissionError:
                os.chmod(p, 0o777)  # its parent is private (0700): only this job mounts it

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()


def _device_request(r: Any):
    from docker.types import DeviceRequest

    if isinstance(r, DeviceRequest) or not isinstance(r, dict):
        return r
    api = {"Driver": "driver", "Count": "count", "DeviceIDs": "device_ids",
           "Capabilities": "capabilities", "Options": "options"}  # fmt: skip
    kw = {api.get(k, k): v for k, v in r.items() if v is not None}
    return DeviceRequest(**kw)


def from_options(
    kind: str,
    spec_file: Path | None = None,
    *,
    image: str | None = None,
    cpus: float | None = None,
    memory: str | None = None,
) -> Isolation:
    """The CLI's choice: ``process``, or ``container`` with a spec file or a
    simple spec from ``image``/``cpus``/``memory``. Raises ValueError."""
    if kind == "process":
        if spec_file or image:
            raise ValueError("--isolation-spec and --image need --isolation container")
        return ProcessIsolation()
    if kind != "container":
        raise ValueError(f"--isolation must be 'process' or 'container', got {kind!r}")
    if spec_file is not None and image is not None:
        raise ValueError("give --isolation-spec or --image, not both")
    if spec_file is not None:
        spec = IsolationSpec.from_file(spec_file)
    elif image is not None:
        spec = IsolationSpec.simple(image, cpus=cpus, memory=memory)
    else:
        raise ValueError("--isolation container needs --isolation-spec FILE or --image IMAGE")
    return ContainerIsolation(spec)
