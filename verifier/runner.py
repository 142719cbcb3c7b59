"""Run one benchmark repetition, measured from outside, through an isolation.

``run_once`` never raises: it returns a ``RunRecord`` with ``ok`` False and
the reason, the exit code and the tail of stderr when anything goes wrong (a
crash, a timeout, a missing or malformed result, a ready pattern that never
appeared, a server that never became ready).

A repetition is one of:

* in-process (``command``): one job in the arm's checkout; ``wall_s`` is its
  run time, ``startup_s`` the time until ``ready_pattern`` on its stdout;
* serving (``serve`` + ``client``): the candidate's server in the arm's
  checkout, readiness by ``ready_path`` (polled by the verifier until HTTP
  200) or ``ready_pattern`` (on the server's stdout) -> ``startup_s``; then
  the protected client from B0's checkout (``base_checkout``) with
  ``RSI_SERVER_URL``. ``wall_s`` is the client's run time (the load window),
  ``peak_rss_mib`` and ``cpu_s`` are the server's. Hidden inputs go to the
  client only;
* then, with ``evaluator``: a protected job from B0's checkout reads
  the run's output files (``RSI_INPUT_DIR``, read-only) and its result's
  ``outputs`` and ``metrics`` replace the run's entries of the same name.

Every metric of the result records its source (``RunRecord.sources``):
``benchmark`` (the candidate's process), ``client``, ``evaluator``; what the
verifier measures itself (``measured()``) is source ``verifier``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import BenchmarkConfig
from .isolation import (
    TAIL_CHARS,
    CommandResult,
    Handle,
    Isolation,
    Job,
    ProcessIsolation,
    child_env,
    run_job,
)
from .protocol import BenchResult, ProtocolError, load_result

__all__ = [
    "TAIL_CHARS",
    "CommandResult",
    "RunRecord",
    "child_env",
    "run_once",
    "run_seed",
    "run_session",
    "run_setup",
]
READY_POLL_S = 0.02


@dataclass
class RunRecord:
    ok: bool
    wall_s: float = 0.0
    peak_rss_mib: float = 0.0
    startup_s: float | None = None
    cpu_s: float | None = None
    result: BenchResult | None = None
    returncode: int | None = None
    timed_out: bool = False
    error: str = ""
    stderr_tail: str = ""
    stdout_tail: str = ""
    output_dir: str = ""
    output_bases: list[str] = field(default_factory=list)
    """Dirs where output paths resolve (the evaluator's outputs first, then the run's)."""
    sources: dict[str, str] = field(default_factory=dict)
    """metric or ``outputs.<key>`` -> who reported it (benchmark, client, evaluator)."""
    extra: dict = field(default_factory=dict)
    work_dir: str = ""
    checkout: str = ""
    """The checkout the run saw (its fresh export; removed after the run)."""

    def measured(self) -> dict[str, float]:
        out = {"wall_s": self.wall_s, "peak_rss_mib": self.peak_rss_mib}
        if self.startup_s is not None:
            out["startup_s"] = self.startup_s
        if self.cpu_s is not None:
            out["cpu_s"] = self.cpu_s
        return out


def _common_env(bench: BenchmarkConfig) -> dict[str, str]:
    return {**bench.env, **bench.setting_env()}


def _paths(hidden: dict[str, str]) -> tuple[str, ...]:
    """Hidden values that are paths on this runner: given read-only to the jobs
    that see hidden inputs (container isolation mounts them at the same path)."""
    return tuple(sorted({v for v in hidden.values() if os.path.isabs(v) and os.path.exists(v)}))


def run_once(
    bench: BenchmarkConfig,
    checkout: Path,
    *,
    extra_env: dict[str, str] | None = None,
    drop_env: tuple[str, ...] = (),
    workdir: Path | None = None,
    isolation: Isolation | None = None,
    base_checkout: Path | None = None,
) -> RunRecord:
    """One repetition of ``bench`` in ``checkout``. Never raises.

    ``extra_env`` holds the hidden inputs (given to the benchmark process in
    process mode, to the client and evaluator only when serving);
    ``base_checkout`` (default: ``checkout``) is where the client and the
    evaluator run from. Result and output files go to a fresh directory under
    ``workdir`` (the caller removes it); without ``workdir`` a temporary one is
    removed at once and ``output_dir`` is empty."""
    iso = isolation or ProcessIsolation()
    try:
        work = Path(tempfile.mkdtemp(prefix="rsi-run-", dir=workdir))
    except OSError as e:
        return RunRecord(ok=False, error=f"verifier could not make a run dir: {e!r}")
    try:
        rec = _run_once(
            bench, Path(checkout), Path(base_checkout or checkout), iso,
            hidden=dict(extra_env or {}), drop=drop_env, work=work,
        )  # fmt: skip
    except Exception as e:  # noqa: BLE001 - a runner returns, it does not raise
        rec = _crashed(e)
    rec.work_dir = str(work)
    if workdir is None:
        shutil.rmtree(work, ignore_errors=True)
        rec.output_dir, rec.output_bases = "", []
    return rec


def _crashed(e: Exception) -> RunRecord:
    """The record of a run the verifier itself could not carry out (the
    machine's fault, when :mod:`verifier.infra` says so)."""
    from .infra import INFRA_PREFIX, explain, is_infrastructure

    return RunRecord(ok=False, error=INFRA_PREFIX + explain(e) if is_infrastructure(e)
                     else f"verifier could not run the benchmark: {e!r}")


def _run_once(
    bench: BenchmarkConfig,
    checkout: Path,
    base: Path,
    iso: Isolation,
    *,
    hidden: dict[str, str],
    drop: tuple[str, ...],
    work: Path,
) -> RunRecord:
    run_dir = work / "run"
    run_dir.mkdir()
    iso.prepare_dir(run_dir)
    if bench.serving:
        rec = _serving(bench, checkout, base, iso, hidden=hidden, drop=drop, run_dir=run_dir)
    elif bench.entry:  # the verifier's timing harness (issue 29: verifier/harness.py)
        rec = _harnessed(bench, checkout, base, iso, hidden=hidden, drop=drop, run_dir=run_dir)
    else:
        env = {**_common_env(bench), **hidden}
        job = Job(
            bench.command or "", checkout, env, bench.timeout_s,
            ready_pattern=bench.ready_pattern, run_dir=run_dir, drop=drop,
            read_only_paths=_paths(hidden),
        )  # fmt: skip
        rec = _record(run_job(iso, job), bench, "the benchmark")
    rec.output_dir = str(run_dir / "outputs")
    rec.output_bases = [rec.output_dir]
    if rec.error:
        return rec
    if bench.ready_pattern and rec.startup_s is None:
        rec.error = f"ready_pattern {bench.ready_pattern!r} never appeared on stdout"
        return rec
    origin = bench.reporter
    own = [m for m in bench.metrics if m not in bench.evaluator_metrics]
    if not _load(rec, run_dir / "result.json", own, origin):
        return rec
    if bench.evaluator:
        _evaluate(bench, base, iso, rec, hidden=hidden, drop=drop, work=work)
        if rec.error:
            return rec
    rec.ok = True
    return rec


def _harnessed(
    bench: BenchmarkConfig,
    checkout: Path,
    base: Path,
    iso: Isolation,
    *,
    hidden: dict[str, str],
    drop: tuple[str, ...],
    run_dir: Path,
) -> RunRecord:
    """An ``entry`` run: the verifier's harness (its own text, never the
    checkout's) in the arm's checkout, the inputs from the base checkout; the
    result counts only when its MAC under this run's key and every output's
    digest check out (``harness.check``)."""
    from . import harness

    try:
        inputs = harness.inputs_path(base, bench.inputs or "")
    except ValueError as e:
        return RunRecord(ok=False, error=f"the timing harness: {e}")
    extra, key = harness.job_env(bench.entry or "", inputs, bench.requests, hidden)
    job = Job(
        harness.command(), checkout, {**_common_env(bench), **hidden, **extra}, bench.timeout_s,
        ready_pattern=harness.READY_PATTERN, run_dir=run_dir, drop=drop,
        read_only_paths=(*_paths(hidden), str(inputs)),
    )  # fmt: skip
    rec = _record(run_job(iso, job), bench, "the timing harness")
    if not rec.error:
        rec.error = harness.check(run_dir, key)
    return rec


def _record(cr: CommandResult, bench: BenchmarkConfig, what: str) -> RunRecord:
    rec = RunRecord(
        ok=False,
        wall_s=cr.wall_s,
        peak_rss_mib=cr.peak_rss_mib,
        startup_s=cr.ready_s,
        cpu_s=cr.cpu_s,
        returncode=cr.returncode,
        timed_out=cr.timed_out,
        stderr_tail=cr.stderr_tail,
        stdout_tail=cr.stdout_tail,
        extra=dict(cr.extra),
    )
    rec.error = _failure(cr, bench, what)
    return rec


def _failure(cr: CommandResult, bench: BenchmarkConfig, what: str) -> str:
    if cr.error:
        return f"{what}: {cr.error}"
    left = int(cr.extra.get("leftover_processes") or 0)
    if left:
        return (
            f"{what} left {left} process(es) running after it exited (killed): a result "
            "they could still rewrite is not trusted; a benchmark must wait for its own "
            "processes before it exits"
        )
    if cr.timed_out:
        return f"{what} timed out after {bench.timeout_s:g} s (it was killed, with everything it started)"
    if cr.returncode != 0:
        how = (
            f"was killed by signal {-cr.returncode}"
            if cr.returncode is not None and cr.returncode < 0
            else f"exited with status {cr.returncode}"
        )
        return f"{what} {how}"
    return ""


def _load(rec: RunRecord, path: Path, expected: list[str], origin: str) -> bool:
    try:
        rec.result = load_result(path, expected_metrics=expected)
    except ProtocolError as e:
        rec.error = f"bad result: {e}"
        return False
    except Exception as e:  # noqa: BLE001
        rec.error = f"could not read the result: {e!r}"
        return False
    rec.sources = {m: origin for m in rec.result.metrics}
    rec.sources.update({f"outputs.{k}": origin for k in rec.result.outputs})
    return True


def _await_ready(
    server: Handle, bench: BenchmarkConfig, port: int, deadline: float
) -> float | None:
    """Seconds from the server's start until it is ready (None: never): its
    ``ready_pattern`` appeared on its stdout, then ``ready_path`` answered 200
    (polled by the verifier), whichever of the two the benchmark declares."""
    if bench.ready_pattern and server.wait_ready(max(0.0, deadline - time.perf_counter())) is None:
        return None
    if not bench.ready_path:
        return server.wait_ready(0)
    while time.perf_counter() < deadline and server.running():
        if server.http_status(port, bench.ready_path, 1.0) == 200:  # from inside its network
            return time.perf_counter() - server.t0
        time.sleep(READY_POLL_S)
    return None


def _never_ready(server, bench: BenchmarkConfig) -> RunRecord:
    """The record of a server that never became ready (stopped here), saying why."""
    alive = server.running()
    sr = server.stop()
    how = (
        f"GET {bench.ready_path} never answered 200"
        if bench.ready_path
        else (f"ready_pattern {bench.ready_pattern!r} never appeared on its stdout")
    )
    rec = _record(sr, bench, "the server")
    end = " in time" if alive else f"; it exited with status {sr.returncode}"
    rec.error = f"the server never became ready: {how}{end}"
    return rec


def _serving(
    bench: BenchmarkConfig,
    checkout: Path,
    base: Path,
    iso: Isolation,
    *,
    hidden: dict[str, str],
    drop: tuple[str, ...],
    run_dir: Path,
) -> RunRecord:
    """Server of the arm + protected client of the base, on a private network."""
    common = _common_env(bench)
    port = iso.server_port()
    deadline = time.perf_counter() + bench.timeout_s
    with iso.private_network() as net:
        server = iso.start(
            Job(
                bench.serve or "", checkout, {**common, "RSI_PORT": str(port)}, bench.timeout_s,
                role="server", ready_pattern=bench.ready_pattern, network=net, drop=drop,
            )
        )  # fmt: skip
        try:
            ready = _await_ready(server, bench, port, deadline)
            if ready is None:
                return _never_ready(server, bench)
            client = _client_job(bench, base, common, hidden, f"http://{server.host}:{port}",
                                 deadline, run_dir, net, drop)  # fmt: skip
            cr = run_job(iso, client)
            alive = server.running()
        finally:
            sr = server.stop()
    rec = _record(cr, bench, "the client")
    rec.startup_s, rec.peak_rss_mib, rec.cpu_s = ready, sr.peak_rss_mib, sr.cpu_s
    rec.extra = {**sr.extra, "client_cpu_s": cr.cpu_s, "network": net}
    names = [x.get("container") for x in (sr.extra, cr.extra) if x.get("container")]
    if names:
        rec.extra["containers"] = names
    rec.stderr_tail = _tails("server", sr.stderr_tail, "client", cr.stderr_tail)
    rec.stdout_tail = _tails("server", sr.stdout_tail, "client", cr.stdout_tail)
    if not rec.error and not alive:
        rec.error = f"the server exited (status {sr.returncode}) before the client finished"
    return rec


def _tails(a: str, ta: str, b: str, tb: str) -> str:
    parts = [f"[{name}]\n{t}" for name, t in ((a, ta), (b, tb)) if t.strip()]
    return "\n".join(parts)[-TAIL_CHARS:]


def _evaluate(
    bench: BenchmarkConfig,
    base: Path,
    iso: Isolation,
    rec: RunRecord,
    *,
    hidden: dict[str, str],
    drop: tuple[str, ...],
    work: Path,
    box: Any = None,
) -> None:
    """Run the protected evaluator on the run's output files (in ``box``:
    ``Isolation.box``); merge its result."""
    eval_dir = work / "eval"
    eval_dir.mkdir()
    iso.prepare_dir(eval_dir)
    cr = run_job(iso, _evaluator_job(bench, base, rec, hidden, drop, work), box)
    err = _failure(cr, bench, "the evaluator")
    if err:
        rec.error = err
        rec.stderr_tail = _tails("run", rec.stderr_tail, "evaluator", cr.stderr_tail)
        return
    probe = RunRecord(ok=False)
    if not _load(probe, eval_dir / "result.json", list(bench.evaluator_metrics), "evaluator"):
        rec.error = f"the evaluator's {probe.error}"
        return
    assert rec.result is not None and probe.result is not None
    mine, theirs = rec.result, probe.result
    rec.result = BenchResult(
        metrics={**mine.metrics, **theirs.metrics},
        samples=dict(mine.samples),
        outputs={**mine.outputs, **theirs.outputs},
        counts=dict(mine.counts),
        meta=dict(mine.meta),
    )
    rec.sources.update(probe.sources)
    rec.output_bases = [str(eval_dir / "outputs"), rec.output_dir]


def _client_job(
    bench: BenchmarkConfig, base: Path, common: dict[str, str], hidden: dict[str, str],
    url: str, deadline: float, run_dir: Path, net: str | None, drop: tuple[str, ...],
) -> Job:  # fmt: skip
    """The protected client's job (from ``base``) against the server at
    ``url``, on the server's network, until ``deadline``."""
    return Job(
        bench.client or "", base, {**common, **hidden, "RSI_SERVER_URL": url},
        max(1.0, deadline - time.perf_counter()),
        role="client", run_dir=run_dir, network=net, drop=drop, read_only_paths=_paths(hidden),
    )  # fmt: skip


def _evaluator_job(
    bench: BenchmarkConfig, base: Path, rec: RunRecord, hidden: dict[str, str],
    drop: tuple[str, ...], work: Path,
) -> Job:  # fmt: skip
    """The evaluator's job for the run ``rec`` (its outputs its input)."""
    return Job(
        bench.evaluator or "", base, {**_common_env(bench), **hidden}, bench.timeout_s,
        role="evaluator", run_dir=work / "eval", input_dir=Path(rec.output_dir), drop=drop,
        read_only_paths=_paths(hidden),
    )  # fmt: skip


def run_seed(seed: str, index: int) -> str:
    """``RSI_SEED`` of client run ``index`` of a session (``runs_per_start`` >
    1): a decimal integer derived from the hidden seed and the run's index in
    its session, so every run of a session sends its own request texts and run
    ``index`` of every arm's sessions the same ones (quality guards compare
    them index by index)."""
    import hashlib

    digest = hashlib.sha256(f"rsi-run-seed:{seed}:{index}".encode()).digest()
    return str(int.from_bytes(digest[:7], "big"))


def run_session(
    bench: BenchmarkConfig,
    checkout: Path,
    k: int,
    *,
    extra_env: dict[str, str] | None = None,
    drop_env: tuple[str, ...] = (),
    workdir: Path | None = None,
    isolation: Isolation | None = None,
    base_checkout: Path | None = None,
) -> list[RunRecord]:
    """A session of a serving benchmark (``runs_per_start`` = ``k``): one
    server start of ``checkout``, then ``k`` client runs from ``base_checkout``
    against it, each a full measured run (its own fresh run dir under
    ``workdir``, its result, its outputs, its evaluator), each with its own
    ``RSI_SEED`` (``run_seed``). ``startup_s`` is measured once and given to
    every run of the session (one sample per session: the judge averages a
    session's runs); ``peak_rss_mib`` is the server's peak over the session,
    ``cpu_s`` its CPU time over the session shared evenly among the runs. The
    server is killed after the last client run (or the first that failed:
    the list ends with that run's record). Never raises. ``k`` = 1 or an
    in-process benchmark: ``[run_once(...)]``."""
    iso = isolation or ProcessIsolation()
    base = Path(base_checkout or checkout)
    if k <= 1 or not bench.serving:
        return [
            run_once(
                bench, checkout, extra_env=extra_env, drop_env=drop_env, workdir=workdir,
                isolation=iso, base_checkout=base,
            )
        ]  # fmt: skip
    works: list[Path] = []
    # the session's runs in a dir of its own: the evaluators' box holds it (and nothing else)
    session = Path(tempfile.mkdtemp(prefix="rsi-session-", dir=workdir))
    session.chmod(0o711)  # their user enters it; nobody lists it
    try:
        recs = _session(
            bench, Path(checkout), base, iso, hidden=dict(extra_env or {}), drop=drop_env,
            k=k, session=session, works=works,
        )  # fmt: skip
    except Exception as e:  # noqa: BLE001 - a runner returns, it does not raise
        recs = [_crashed(e)]
    for rec, work in zip(recs, works, strict=False):
        rec.work_dir = str(work)
    if workdir is None:
        shutil.rmtree(session, ignore_errors=True)
        for rec in recs:
            rec.output_dir, rec.output_bases = "", []
    return recs


def _session(
    bench: BenchmarkConfig,
    checkout: Path,
    base: Path,
    iso: Isolation,
    *,
    hidden: dict[str, str],
    drop: tuple[str, ...],
    k: int,
    session: Path,
    works: list[Path],
) -> list[RunRecord]:
    """``run_session``'s body: the server held across the ``k`` client jobs
    (``Handle`` kept, killed after the last), then each run's result read and
    its evaluator run, after the server is gone (as in a single run). The
    client jobs share one box (``Isolation.box``: a container exec'd K times,
    emptied between runs), and so do the evaluators, whose box holds the
    session's own runs (``session``, a dir of its own) read-only."""
    common = _common_env(bench)
    port = iso.server_port()
    deadline = time.perf_counter() + bench.timeout_s
    clients: list[tuple[CommandResult, bool, Path, dict[str, str]]] = []
    with iso.private_network() as net:
        server = iso.start(
            Job(
                bench.serve or "", checkout, {**common, "RSI_PORT": str(port)},
                bench.timeout_s * k, role="server", ready_pattern=bench.ready_pattern,
                network=net, drop=drop,
            )
        )  # fmt: skip
        try:
            ready = _await_ready(server, bench, port, deadline)
            if ready is None:
                return [_never_ready(server, bench)]
            url = f"http://{server.host}:{port}"
            with contextlib.ExitStack() as boxes:  # the clients' box, gone before the server
                box = None
                for i in range(k):
                    work = Path(tempfile.mkdtemp(prefix="rsi-run-", dir=session))
                    work.chmod(0o711)
                    works.append(work)
                    run_dir = work / "run"
                    run_dir.mkdir()
                    iso.prepare_dir(run_dir)
                    mine = dict(hidden)
                    if "RSI_SEED" in mine:
                        mine["RSI_SEED"] = run_seed(mine["RSI_SEED"], i)
                    client = _client_job(bench, base, common, mine, url, deadline, run_dir, net, drop)
                    if i == 0:
                        box = boxes.enter_context(_box(iso, client))
                    cr = run_job(iso, client, box)
                    alive = server.running()
                    clients.append((cr, alive, work, mine))
                    if _failure(cr, bench, "the client") or not alive:
                        break
                    deadline = time.perf_counter() + bench.timeout_s
        finally:
            sr = server.stop()
    with contextlib.ExitStack() as boxes:
        return _session_records(bench, base, iso, clients, sr, ready, k, net, drop, boxes, session)


def _box(iso: Isolation, job: Job, input_root: Path | None = None):
    """``iso.box`` (an isolation without one: each job on its own)."""
    box = getattr(iso, "box", None)
    return box(job, input_root) if box is not None else contextlib.nullcontext(None)


def _session_records(
    bench: BenchmarkConfig, base: Path, iso: Isolation,
    clients: list[tuple[CommandResult, bool, Path, dict[str, str]]], sr: CommandResult,
    ready: float | None, k: int, net: str | None, drop: tuple[str, ...],
    boxes: contextlib.ExitStack, session: Path,
) -> list[RunRecord]:  # fmt: skip
    """Each client run's record, its result read and its evaluator run (in
    one box for the session, opened at the first evaluator)."""
    recs: list[RunRecord] = []
    ebox: Any = None
    share = None if sr.cpu_s is None else sr.cpu_s / len(clients)
    for i, (cr, alive, work, mine) in enumerate(clients):
        rec = _record(cr, bench, "the client")
        rec.startup_s, rec.peak_rss_mib, rec.cpu_s = ready, sr.peak_rss_mib, share
        rec.extra = {**sr.extra, "client_cpu_s": cr.cpu_s, "network": net,
                     "session_run": i, "session_runs": k}  # fmt: skip
        names = [x.get("container") for x in (sr.extra, cr.extra) if x.get("container")]
        if names:
            rec.extra["containers"] = names
        rec.stderr_tail = _tails("server", sr.stderr_tail, "client", cr.stderr_tail)
        rec.stdout_tail = _tails("server", sr.stdout_tail, "client", cr.stdout_tail)
        if not rec.error and not alive:
            rec.error = f"the server exited (status {sr.returncode}) before the client finished"
        run_dir = work / "run"
        rec.output_dir = str(run_dir / "outputs")
        rec.output_bases = [rec.output_dir]
        recs.append(rec)
        if rec.error:
            break
        own = [m for m in bench.metrics if m not in bench.evaluator_metrics]
        if not _load(rec, run_dir / "result.json", own, bench.reporter):
            break
        if bench.evaluator:
            if ebox is None:
                ebox = boxes.enter_context(_box(iso, _evaluator_job(bench, base, rec, mine, drop, work),
                                                session))  # fmt: skip
            _evaluate(bench, base, iso, rec, hidden=mine, drop=drop, work=work, box=ebox)
            if rec.error:
                break
        rec.ok = True
    return recs


def run_setup(
    bench: BenchmarkConfig,
    checkout: Path,
    *,
    extra_env: dict[str, str] | None = None,
    drop_env: tuple[str, ...] = (),
    isolation: Isolation | None = None,
) -> CommandResult | None:
    """Run the benchmark's ``setup`` once in ``checkout`` (None when it has
    none); the only job whose checkout is writable. A serving benchmark's
    setup (the candidate's code) never sees hidden inputs."""
    if not bench.setup:
        return None
    hidden = {} if bench.serving else dict(extra_env or {})
    job = Job(
        bench.setup, Path(checkout), {**_common_env(bench), **hidden}, bench.timeout_s,
        role="setup", writable=True, drop=drop_env, read_only_paths=_paths(hidden),
    )  # fmt: skip
    return run_job(isolation or ProcessIsolation(), job)
