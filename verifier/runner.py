"""Run one benchmark repetition as a fresh process, measured from outside.

``run_once`` never raises: it returns a ``RunRecord`` with ``ok`` False and
the reason, the exit code and the tail of stderr when anything goes wrong (a
crash, a timeout, a missing or malformed result, a ready pattern that never
appeared).

Measured here: ``wall_s`` (spawn to exit), ``peak_rss_mib`` (the largest sum of
RSS over the whole process tree, polled every 10 ms), ``startup_s`` (time until the
benchmark's ``ready_pattern`` first appears on stdout).

The child's environment is this process's, minus credentials (tokens, secrets,
passwords, keys), plus the benchmark's ``env``, ``RSI_SETTING_*``, the hidden
env, ``RSI_SEED`` (from the hidden seed variable), ``RSI_RESULT`` and
``RSI_OUTPUT_DIR`` (a fresh directory for output files).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from .config import BenchmarkConfig
from .protocol import BenchResult, ProtocolError, load_result

TAIL_CHARS = 4000
POLL_S = 0.01
_SECRET = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE|(^|_)API_?KEY|_KEY$|^AWS_|^GH_", re.IGNORECASE
)


@dataclass
class RunRecord:
    ok: bool
    wall_s: float = 0.0
    peak_rss_mib: float = 0.0
    startup_s: float | None = None
    result: BenchResult | None = None
    returncode: int | None = None
    timed_out: bool = False
    error: str = ""
    stderr_tail: str = ""
    stdout_tail: str = ""
    output_dir: str = ""

    def measured(self) -> dict[str, float]:
        out = {"wall_s": self.wall_s, "peak_rss_mib": self.peak_rss_mib}
        if self.startup_s is not None:
            out["startup_s"] = self.startup_s
        return out


@dataclass
class CommandResult:
    returncode: int | None
    wall_s: float
    timed_out: bool
    stdout_tail: str
    stderr_tail: str
    peak_rss_mib: float = 0.0
    ready_s: float | None = None
    error: str = ""
    extra: dict = field(default_factory=dict)


def child_env(
    base: dict[str, str] | None = None,
    extra: dict[str, str] | None = None,
    drop: tuple[str, ...] = (),
) -> dict[str, str]:
    env = {
        k: v
        for k, v in (os.environ if base is None else base).items()
        if not _SECRET.search(k) and k not in drop
    }
    env.update(extra or {})
    return env


def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    try:
        procs = [proc] + proc.children(recursive=True)
    except psutil.Error:
        return 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _terminate(pid: int, grace_s: float = 2.0):
    """SIGTERM the group, give the leader ``grace_s`` to exit, then SIGKILL the
    group; returns the leader's wait status."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    deadline = time.monotonic() + grace_s
    status = None
    while time.monotonic() < deadline:
        try:
            got, st, _ = os.wait4(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if got:
            status = st
            break
        time.sleep(0.01)
    _kill_group(pid)
    if status is None:
        try:
            _, status, _ = os.wait4(pid, 0)
        except ChildProcessError:
            return None
    return status


def run_command(
    command: str,
    *,
    cwd: Path,
    env: dict[str, str],
    timeout_s: float,
    ready_pattern: str | None = None,
    measure: bool = True,
) -> CommandResult:
    """Run a shell command in its own process group; never raises."""
    ready_re = re.compile(ready_pattern) if ready_pattern else None
    out_tail: deque[str] = deque(maxlen=60)
    ready_at: list[float] = []
    with tempfile.TemporaryFile() as err_file:
        t0 = time.perf_counter()
        try:
            proc = subprocess.Popen(
                command,
                shell=True,
                cwd=str(cwd),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err_file,
                start_new_session=True,
            )
        except OSError as e:
            return CommandResult(
                None, 0.0, False, "", "", error=f"could not start the command: {e}"
            )

        def read_stdout() -> None:
            assert proc.stdout is not None
            for raw in iter(proc.stdout.readline, b""):
                line = raw.decode("utf-8", "replace")
                if ready_re is not None and not ready_at and ready_re.search(line):
                    ready_at.append(time.perf_counter() - t0)
                out_tail.append(line)

        reader = threading.Thread(target=read_stdout, daemon=True)
        reader.start()
        try:
            ps = psutil.Process(proc.pid)
        except psutil.Error:
            ps = None
        peak = 0
        timed_out = False
        status = None
        deadline = t0 + timeout_s
        while True:
            try:
                pid, st, usage = os.wait4(proc.pid, os.WNOHANG)
            except ChildProcessError:
                pid, st, usage = proc.pid, 0, None
            if pid:
                status = st
                # A run shorter than one poll is never sampled: the kernel's
                # own high-water mark of the main process is the floor.
                if measure and usage is not None:
                    peak = max(peak, usage.ru_maxrss * 1024)
                break
            if measure and ps is not None:
                peak = max(peak, _tree_rss(ps))
            if time.perf_counter() > deadline:
                timed_out = True
                status = _terminate(proc.pid)
                break
            time.sleep(POLL_S)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status) if status is not None else -9
        # anything the benchmark left behind in its group goes too
        _kill_group(proc.pid)
        reader.join(timeout=2.0)
        if proc.stdout is not None:
            proc.stdout.close()
        err_file.seek(0, os.SEEK_END)
        size = err_file.tell()
        err_file.seek(max(0, size - TAIL_CHARS))
        err_tail = err_file.read().decode("utf-8", "replace")
    peak_mib = peak / (1024 * 1024)
    return CommandResult(
        returncode=proc.returncode,
        wall_s=wall,
        timed_out=timed_out,
        stdout_tail="".join(out_tail)[-TAIL_CHARS:],
        stderr_tail=err_tail,
        peak_rss_mib=peak_mib,
        ready_s=ready_at[0] if ready_at else None,
    )


def run_once(
    bench: BenchmarkConfig,
    checkout: Path,
    *,
    extra_env: dict[str, str] | None = None,
    drop_env: tuple[str, ...] = (),
    workdir: Path | None = None,
) -> RunRecord:
    """One repetition of ``bench`` in ``checkout``. Never raises.

    Result and output files go to a fresh directory under ``workdir`` (the
    caller removes it); without ``workdir`` a temporary one is removed at once
    and ``output_dir`` is empty."""
    rec = _run_once(bench, checkout, extra_env=extra_env, drop_env=drop_env, workdir=workdir)
    if workdir is None and rec.output_dir:
        shutil.rmtree(Path(rec.output_dir).parent, ignore_errors=True)
        rec.output_dir = ""
    return rec


def _run_once(
    bench: BenchmarkConfig,
    checkout: Path,
    *,
    extra_env: dict[str, str] | None,
    drop_env: tuple[str, ...],
    workdir: Path | None,
) -> RunRecord:
    try:
        tmp = Path(tempfile.mkdtemp(prefix="rsi-run-", dir=workdir))
        result_path = tmp / "result.json"
        out_dir = tmp / "outputs"
        out_dir.mkdir()
        env = child_env(
            extra={
                **bench.env,
                **bench.setting_env(),
                **(extra_env or {}),
                "RSI_RESULT": str(result_path),
                "RSI_OUTPUT_DIR": str(out_dir),
            },
            drop=drop_env,
        )
        cr = run_command(
            bench.command,
            cwd=Path(checkout),
            env=env,
            timeout_s=bench.timeout_s,
            ready_pattern=bench.ready_pattern,
        )
    except Exception as e:  # noqa: BLE001 - a runner returns, it does not raise
        return RunRecord(ok=False, error=f"verifier could not run the benchmark: {e!r}")
    rec = RunRecord(
        ok=False,
        wall_s=cr.wall_s,
        peak_rss_mib=cr.peak_rss_mib,
        startup_s=cr.ready_s,
        returncode=cr.returncode,
        timed_out=cr.timed_out,
        stderr_tail=cr.stderr_tail,
        stdout_tail=cr.stdout_tail,
        output_dir=str(out_dir),
    )
    if cr.error:
        rec.error = cr.error
        return rec
    if cr.timed_out:
        rec.error = f"timed out after {bench.timeout_s:g} s (the whole process group was killed)"
        return rec
    if cr.returncode != 0:
        how = (
            f"killed by signal {-cr.returncode}"
            if cr.returncode is not None and cr.returncode < 0
            else f"exited with status {cr.returncode}"
        )
        rec.error = f"the benchmark {how}"
        return rec
    if bench.ready_pattern and cr.ready_s is None:
        rec.error = f"ready_pattern {bench.ready_pattern!r} never appeared on stdout"
        return rec
    try:
        rec.result = load_result(result_path, expected_metrics=list(bench.metrics))
    except ProtocolError as e:
        rec.error = f"bad result: {e}"
        return rec
    except Exception as e:  # noqa: BLE001
        rec.error = f"could not read the result: {e!r}"
        return rec
    rec.ok = True
    return rec


def run_setup(
    bench: BenchmarkConfig,
    checkout: Path,
    *,
    extra_env: dict[str, str] | None = None,
    drop_env: tuple[str, ...] = (),
) -> CommandResult | None:
    """Run the benchmark's ``setup`` once in ``checkout`` (None when it has none)."""
    if not bench.setup:
        return None
    env = child_env(extra={**bench.env, **bench.setting_env(), **(extra_env or {})}, drop=drop_env)
    try:
        return run_command(
            bench.setup, cwd=Path(checkout), env=env, timeout_s=bench.timeout_s, measure=False
        )
    except Exception as e:  # noqa: BLE001
        return CommandResult(None, 0.0, False, "", "", error=f"could not run setup: {e!r}")
