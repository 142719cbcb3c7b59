"""How the loop calls the verifier: in this process, or as its own host process
with every benchmark run in its own container.

Both backends take checkout paths (the loop gives them fresh exports of the
committed shas) and return the verifier's own records (``Verdict``,
``Calibration``), so the loop does not care where the measurement
ran.

* :class:`SandboxVerifier` (the default of ``rsi run``): the verifier's own CLI
  (``python -m verifier verify-dirs`` / ``calibrate-dir``) runs as a HOST
  subprocess with ``--isolation container --isolation-spec FILE``: the
  verifier's process (statistics, decision, report) never shares a container,
  a user or a writable dir with candidate code; it starts one fresh container
  per benchmark run itself (``verifier/isolation.py``). The isolation spec is
  built here from :func:`harness.sandbox.container_kwargs` for the runner
  profile (image, uid, limits, devices, Python mounts). Its scratch dir
  (config, calibration, spec, report) is host-only (0700) and mounted by no
  container. The environment is clean of the bot's secrets. Its
  ``RSI-PROGRESS`` lines stream back as progress events.
* :class:`InProcessVerifier`: the same calls in this process (unit tests,
  quick local runs; no isolation of benchmark runs beyond fresh processes).

A verifier that fails (exits with a code that is not its verdict's, times
out, leaves no valid report) is an ``error`` verdict: never an exception,
never a regression.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from harness import sandbox
from harness.spec import TaskSpec

if TYPE_CHECKING:
    from verifier.calibrate import Calibration
    from verifier.verdict import Verdict

Progress = Callable[[str, dict], None]


def calibration_ok(cal: Calibration | None, min_gain: float) -> tuple[bool, str]:
    if cal is None:
        return True, "no calibration"
    return cal.ok_for(min_gain)


def error_verdict(stage: str, message: str, stderr_tail: str = "", shas: dict | None = None):
    from verifier.verdict import RunError, Verdict

    return Verdict(
        decision="error",
        reason=message,
        error=RunError(stage=stage, message=message, stderr_tail=stderr_tail[-4000:]),
        shas=dict(shas or {}),
    )


class VerifierBackend(Protocol):
    name: str

    def calibrate(self, ref: Path, spec: TaskSpec, *, progress: Progress | None = None) -> Calibration: ...

    def verify(
        self,
        baseline: Path,
        candidate: Path,
        spec: TaskSpec,
        *,
        b0: Path | None,
        shas: dict[str, str],
        calibration: Calibration | None,
        progress: Progress | None = None,
    ) -> Verdict: ...


def _progress_adapter(progress: Progress | None):
    """The verifier's ``ProgressEvent`` (a dataclass) as the loop's ``(message, fields)``."""
    if progress is None:
        return None
    import dataclasses

    def cb(ev) -> None:
        data = dataclasses.asdict(ev)
        progress(str(data.get("message") or data.get("phase") or ""), data)

    return cb


class InProcessVerifier:
    name = "inprocess"

    def measures_where(self, spec: TaskSpec) -> dict[str, Any]:
        """Where its runs run, for a kept calibration's key (``harness.calcache``):
        fresh processes of this interpreter."""
        return {"backend": self.name, "python": sys.executable}

    def calibrate(self, ref: Path, spec: TaskSpec, *, progress: Progress | None = None) -> Calibration:
        from verifier.calibrate import calibrate

        return calibrate(Path(ref), spec.verify, progress=_progress_adapter(progress))

    def verify(self, baseline, candidate, spec, *, b0, shas, calibration, progress=None):
        from verifier.judge import verify

        try:
            return verify(
                Path(baseline),
                Path(candidate),
                spec.verify,
                b0=Path(b0) if b0 else None,
                shas=shas,
                calibration=calibration,
                progress=_progress_adapter(progress),
            )
        except Exception as exc:  # noqa: BLE001 - the verifier must not take the loop down
            return error_verdict("verifier", f"verifier raised {type(exc).__name__}: {exc}", shas=shas)


REPORT_MAX_BYTES = 32 * 1024 * 1024
EXIT_ACCEPT, EXIT_OTHER, EXIT_INFRA, EXIT_CANDIDATE = 0, 1, 2, 3  # verifier.cli's exit codes
KEEP_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "DOCKER_HOST", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY")
RUN_LABEL = "rsi-bot.verify-run"


@dataclass
class VerifierRun:
    """One host run of ``python -m verifier``: exit code, output tail, report text."""

    returncode: int | None
    timed_out: bool
    output: str
    report: str | None
    report_error: str = ""
    duration_s: float = 0.0

    def why(self) -> str:
        if self.timed_out:
            return f"timed out after {self.duration_s:.0f} s"
        tail = " | ".join(self.output.strip().splitlines()[-5:])[-800:]
        return f"exit code {self.returncode}: {tail}" if tail else f"exit code {self.returncode}"


def isolation_spec(spec: TaskSpec, *, image: str | None = None, tree: Path | None = None) -> dict[str, Any]:
    """``{"image", "base_kwargs"}`` for the verifier's ContainerIsolation: the
    runner profile's container settings (uid, no capabilities, limits,
    devices; no mount: the image holds Python, rsi-bot's dependencies and
    ``verifier.probe``: ``image``, else :func:`harness.images.sandbox_image`
    of the profile's), without what the verifier sets per run (command,
    workdir, network, name).

    Hidden inputs are NOT in the base: every container would get them,
    the candidate's server and setup included. The verifier mounts a hidden
    host path read-only only into the jobs that may see it (the protected
    client and evaluator, or the in-process benchmark).

    With the profile's ``environment`` (the target's own environment) and
    ``tree`` (B0's tree, where its declaration is read: never a candidate's),
    the image is the target's environment image built on that one
    (:func:`harness.images.target_image`; :class:`harness.images.ImageError`
    when it cannot be built)."""
    profile = spec.runner.active
    job = sandbox.SandboxJob(command=["true"], network=False)
    kw = sandbox.container_kwargs(
        job,
        profile,
        npu_devices_present=sandbox.present_npu_devices() if profile.device == "npu" else (),
        paths_present=[p for p in sandbox.NPU_DRIVER_MOUNTS if os.path.exists(p)],
    )
    # only what ContainerIsolation takes; it sets the rest (command, network, name...) per run
    from verifier.isolation import ALLOWED_KWARGS

    if image is None:
        image = sandbox.sandbox_image(kw["image"])
        if profile.environment and tree is not None:
            from harness.images import target_image

            image = target_image(profile.environment, Path(tree), image)
    base = {k: v for k, v in kw.items() if k in ALLOWED_KWARGS}
    if "device_requests" in base:  # as DeviceRequest's own keyword names (device_ids, not DeviceIDs)
        base["device_requests"] = [
            {"driver": r.driver, "count": r.count, "device_ids": list(r.device_ids or []),
             "capabilities": r.capabilities, "options": dict(r.options or {})}
            for r in base["device_requests"]
        ]
    return json.loads(json.dumps({"image": image, "base_kwargs": base}))


def verifier_env(environ: dict[str, str], spec: TaskSpec) -> dict[str, str]:
    """The verifier process's environment: what it needs, never the bot's
    secrets; the hidden seed only when the task names one."""
    from harness.gitutil import is_secret_name

    env = {k: environ[k] for k in KEEP_ENV if environ.get(k) and not is_secret_name(k)}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["RSI_PROGRESS_JSON"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    seed = spec.verify.hidden.seed_env
    if seed and environ.get(seed):
        env[seed] = environ[seed]
    return env


def run_verifier(argv: list[str], *, cwd: Path, env: dict[str, str], timeout_s: float,
                 on_line: Callable[[str], None] | None = None, python: str | None = None) -> VerifierRun:
    """Run ``python -I -m verifier ARGV`` in ``cwd`` as its own session; its
    output streams to ``on_line``; on timeout the whole session is killed.
    Never raises; the report is read by the caller."""
    t0 = time.monotonic()
    tail: deque[str] = deque(maxlen=400)
    try:
        proc = subprocess.Popen(
            [python or sys.executable, "-I", "-m", "verifier", *argv], cwd=str(cwd), env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )
    except OSError as exc:
        return VerifierRun(None, False, f"could not start the verifier: {exc}", None)
    assert proc.stdout is not None  # stdout=PIPE
    stdout = proc.stdout

    def pump() -> None:
        for raw in iter(stdout.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            tail.append(line[-2000:])
            if on_line is not None:
                try:
                    on_line(line)
                except Exception:  # noqa: BLE001 - a watcher must not break the run
                    pass

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_session(proc)
    reader.join(timeout=10)
    stdout.close()
    return VerifierRun(proc.returncode, timed_out, "\n".join(tail), None, duration_s=time.monotonic() - t0)


def _kill_session(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM to the verifier's session (it removes its containers), SIGKILL after a grace."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def reap_containers(run_id: str) -> int:
    """Remove every container one verifier invocation left (a verifier killed
    on timeout cannot remove its own): they carry its ``RUN_LABEL``."""
    try:
        client = sandbox.docker_client()
        left = client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={run_id}"})
    except Exception:  # noqa: BLE001 - no engine: nothing of ours can be running
        return 0
    for c in left:
        try:
            c.remove(force=True)
        except Exception:  # noqa: BLE001
            pass
    return len(left)


def read_report(root: Path, name: str = "report.json") -> tuple[str | None, str]:
    """The report the verifier left in its host-only dir: a regular file, no
    link, size-capped. (text, "") or (None, why)."""
    from harness.agents.base import UnsafeFile, read_agent_file

    try:
        text = read_agent_file(root, name, max_bytes=REPORT_MAX_BYTES)
    except (UnsafeFile, OSError) as exc:
        return None, f"report refused: {exc}"
    return (text, "") if text else (None, "no report written")


class SandboxVerifier:
    """The verifier as a host process, each benchmark run in its own
    container: ``python -m verifier calibrate-dir|verify-dirs ...
    --isolation container --isolation-spec FILE`` in a fresh host-only
    scratch dir (0700, mounted by no container), removed afterwards."""

    name = "sandbox"

    def __init__(self, *, work_root: Path | None = None, environ: dict[str, str] | None = None,
                 python: str | None = None, image: str | None = None):
        """``image``: the containers' image (default: :func:`harness.images.sandbox_image` of the profile's)."""
        self.work_root = work_root
        self.image = image
        self.environ = environ if environ is not None else dict(os.environ)
        self.python = python
        self.last: VerifierRun | None = None

    def measures_where(self, spec: TaskSpec) -> dict[str, Any]:
        """Where its runs run, for a kept calibration's key (``harness.calcache``):
        the isolation spec (image, limits, devices, mounts) and the image's id, so
        a rebuilt image is measured again."""
        iso = isolation_spec(spec)
        image_id = ""
        try:
            image_id = sandbox.docker_client().images.get(iso["image"]).id
        except Exception:  # noqa: BLE001 - no engine here: the tag alone (the runs will say why)
            pass
        return {"backend": self.name, "python": self.python or sys.executable, "isolation": iso,
                "image_id": image_id}

    def _timeout(self, spec: TaskSpec, calibrate: bool) -> float:
        v, k = spec.verify.verifier, spec.benchmark.per_start
        per_run = spec.benchmark.timeout_s + 30  # + a container's start and stop
        if calibrate:
            runs = 2 * v.calibration_pairs * k + 2 * v.warmup + 2
        else:
            # an accept's confirmation pairs (issue 29) may reach accept_max_runs
            runs = 3 * v.most_candidate_runs(k) + 3 * v.warmup + 3
            if spec.benchmark.matrix is not None:  # the other cells after an accept
                runs += spec.benchmark.matrix.runs_after_accept(v.warmup, per_start=k)
        return min(per_run * runs + 60, 6 * 3600)

    def _run(self, spec: TaskSpec, argv: list[str], files: dict[str, str], timeout_s: float, progress,
             tree: Path | None = None) -> VerifierRun:
        """``tree``: where the target's environment is declared (B0's, or the calibrated ref's)."""
        import shutil

        if spec.runner.active.environment and self.image is None and progress:
            progress(f"the target's environment image ({spec.runner.active.environment}, built once)",
                     {"phase": "environment"})
        iso = isolation_spec(spec, image=self.image, tree=tree)
        root = Path(tempfile.mkdtemp(prefix="rsi-verify-", dir=self.work_root))  # 0700, ours alone
        run_id = uuid.uuid4().hex
        iso["base_kwargs"]["labels"] = {**iso["base_kwargs"].get("labels", {}), RUN_LABEL: run_id}
        try:
            files = {"config.toml": spec.verifier_config_text(), "isolation.json": json.dumps(iso, indent=1), **files}
            for name, text in files.items():
                fd = os.open(root / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "w") as fh:
                    fh.write(text)
            argv = [a.replace("{root}", str(root)) for a in argv]
            argv += ["--isolation", "container", "--isolation-spec", str(root / "isolation.json")]
            if progress:
                progress(f"verifier: {argv[0]}, each run in its own container", {"phase": "container"})
            env = verifier_env(self.environ, spec)
            env["RSI_CONTAINER_IMAGE"] = iso["image"]  # the fingerprint's: runs in another image are not comparable
            run = run_verifier(argv, cwd=root, env=env, timeout_s=timeout_s,
                               on_line=_progress_lines(progress) if progress else None, python=self.python)
            if not run.timed_out:
                run.report, run.report_error = read_report(root)
            self.last = run
            return run
        finally:
            reap_containers(run_id)
            shutil.rmtree(root, ignore_errors=True)

    def calibrate(self, ref, spec, *, progress=None):
        argv = ["calibrate-dir", str(ref), "--config", "{root}/config.toml", "--report", "{root}/report.json"]
        run = self._run(spec, argv, {}, self._timeout(spec, True), progress, tree=Path(ref))
        if run.returncode not in (EXIT_ACCEPT, EXIT_OTHER, EXIT_INFRA, EXIT_CANDIDATE) or run.report is None:
            raise RuntimeError(f"the verifier failed: {run.why()}" + (f" ({run.report_error})" if run.report_error else ""))
        from verifier.calibrate import Calibration

        try:
            return Calibration.model_validate_json(run.report)
        except ValueError as exc:  # an unreadable report is a failure, with the reason
            raise RuntimeError(f"unreadable calibration from the verifier: {exc}") from None

    def verify(self, baseline, candidate, spec, *, b0, shas, calibration, progress=None):
        argv = ["verify-dirs", str(baseline), str(candidate), "--config", "{root}/config.toml",
                "--report", "{root}/report.json"]
        files = {}
        if b0:
            argv += ["--b0", str(b0)]
        for k, v in (shas or {}).items():
            argv += ["--sha", f"{k}={v}"]
        if calibration is not None:
            files["calibration.json"] = calibration.model_dump_json()
            argv += ["--calibration", "{root}/calibration.json"]
        from harness.images import ImageError

        try:  # the target's environment from B0's tree: a candidate's copy of the declaration is never read
            run = self._run(spec, argv, files, self._timeout(spec, False), progress, tree=Path(b0 or baseline))
        except ImageError as exc:
            return error_verdict("sandbox", f"the target's environment image: {exc}", "", shas)
        return verdict_of(run, shas)


def verdict_of(run: VerifierRun, shas: dict | None):
    """The verdict of one verifier run: its report, when the report is valid
    and its decision is what the exit code says; else an ``error`` verdict."""
    from verifier.verdict import Verdict

    if run.timed_out or run.returncode not in (EXIT_ACCEPT, EXIT_OTHER, EXIT_INFRA, EXIT_CANDIDATE):
        return error_verdict("sandbox", f"the verifier failed: {run.why()}", run.output, shas)
    if run.report is None:
        return error_verdict("sandbox", f"the verifier left no report ({run.report_error}); {run.why()}",
                             run.output, shas)
    try:
        verdict = Verdict.from_json(run.report)
    except ValueError as exc:
        return error_verdict("sandbox", f"unreadable verdict from the verifier: {exc}", run.output, shas)
    from verifier.cli import exit_code

    expected = exit_code(verdict)
    if run.returncode != expected:
        return error_verdict("sandbox", f"the verifier exited with code {run.returncode} but its report says "
                             f"{verdict.decision}", run.output, shas)
    return verdict


def _progress_lines(progress: Progress):
    """Turn the verifier's ``RSI-PROGRESS {json}`` lines (streamed out of its
    container) back into progress callbacks; other lines are ignored."""
    from verifier.cli import PROGRESS_PREFIX

    def on_output(line: str) -> None:
        start = line.find(PROGRESS_PREFIX)
        if start < 0:
            return
        try:
            data = json.loads(line[start + len(PROGRESS_PREFIX):])
        except ValueError:
            return
        if isinstance(data, dict):
            progress(str(data.get("message") or data.get("phase") or ""), data)

    return on_output


def make_backend(kind: str | None = None) -> VerifierBackend:
    kind = kind or os.environ.get("RSI_VERIFY_MODE") or "sandbox"
    if kind in ("inprocess", "in-process", "local"):
        return InProcessVerifier()
    if kind == "sandbox":
        return SandboxVerifier()
    if ":" in kind:  # "package.module:factory", e.g. a site's own backend
        import importlib

        mod, _, attr = kind.partition(":")
        return getattr(importlib.import_module(mod), attr)()
    raise ValueError(f"unknown verification mode '{kind}'; use sandbox, inprocess or module:factory")
