"""How the loop calls the verifier: in this process, or in a fresh container.

Both backends take worktree paths and return the verifier's own records
(``Verdict``; a calibration as a plain dict), so the loop does not care where
the measurement ran.

* :class:`SandboxVerifier` (the default of ``rsi run``): every calibration and
  every verification is a fresh container (no network, the runner profile's
  CPU, memory, pid limits and accelerator), with the worktrees mounted at their
  own paths and hidden inputs mounted read-only. Inside, it runs the
  verifier's own CLI (``python -m verifier calibrate-dir`` / ``verify-dirs``):
  the verifier stays runnable alone, and nothing of the harness runs there.
* :class:`InProcessVerifier`: the same calls in this process (unit tests,
  quick local runs).

A container that fails (engine down, timeout, OOM) becomes an ``error``
verdict, never an exception and never a regression.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from harness import sandbox
from harness.spec import TaskSpec

Progress = Callable[[str, dict], None]


def calibration_to_dict(cal: Any) -> dict[str, Any]:
    if cal is None:
        return {}
    if isinstance(cal, dict):
        return cal
    if hasattr(cal, "model_dump"):
        return cal.model_dump(mode="json")
    import dataclasses

    if dataclasses.is_dataclass(cal):
        return json.loads(json.dumps(dataclasses.asdict(cal), default=str))
    return {k: v for k, v in vars(cal).items() if not k.startswith("_")}


def calibration_from_dict(d: dict[str, Any] | None) -> Any:
    """Back to the verifier's Calibration object (None when there is none)."""
    if not d:
        return None
    from verifier import calibrate as vc

    cls = vc.Calibration
    if hasattr(cls, "model_validate"):
        return cls.model_validate(d)
    return cls(**d)


def calibration_ok(cal: Any, min_gain: float) -> tuple[bool, str]:
    obj = calibration_from_dict(cal) if isinstance(cal, dict) else cal
    if obj is None:
        return True, "no calibration"
    return obj.ok_for(min_gain)


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

    def calibrate(self, ref: Path, spec: TaskSpec, *, progress: Progress | None = None) -> dict[str, Any]: ...

    def verify(
        self,
        baseline: Path,
        candidate: Path,
        spec: TaskSpec,
        *,
        b0: Path | None,
        shas: dict[str, str],
        calibration: dict[str, Any] | None,
        progress: Progress | None = None,
    ): ...


def _progress_adapter(progress: Progress | None):
    if progress is None:
        return None

    def cb(*args, **kw):
        ev = args[0] if args else kw
        data: dict[str, Any]
        if hasattr(ev, "model_dump"):
            data = ev.model_dump(mode="json")
        elif hasattr(ev, "__dataclass_fields__"):
            import dataclasses

            data = json.loads(json.dumps(dataclasses.asdict(ev), default=str))
        elif isinstance(ev, dict):
            data = ev
        else:
            data = {"message": str(ev)}
        progress(str(data.get("message") or data.get("phase") or ""), data)

    return cb


class InProcessVerifier:
    name = "inprocess"

    def calibrate(self, ref: Path, spec: TaskSpec, *, progress: Progress | None = None) -> dict[str, Any]:
        from verifier.calibrate import calibrate

        cal = calibrate(Path(ref), spec.verify, progress=_progress_adapter(progress))
        return calibration_to_dict(cal)

    def verify(self, baseline, candidate, spec, *, b0, shas, calibration, progress=None):
        from verifier.judge import verify

        try:
            return verify(
                Path(baseline),
                Path(candidate),
                spec.verify,
                b0=Path(b0) if b0 else None,
                shas=shas,
                calibration=calibration_from_dict(calibration),
                progress=_progress_adapter(progress),
            )
        except Exception as exc:  # noqa: BLE001 - the verifier must not take the loop down
            return error_verdict("verifier", f"verifier raised {type(exc).__name__}: {exc}", shas=shas)


class SandboxVerifier:
    """Each call is one fresh container running the verifier's own CLI:
    ``python -m verifier calibrate-dir`` or ``python -m verifier verify-dirs``,
    with the worktrees mounted at their own paths and the merged config, the
    calibration and the report in a scratch dir."""

    name = "sandbox"

    def __init__(self, *, work_root: Path | None = None, environ: dict[str, str] | None = None):
        self.work_root = work_root
        self.environ = environ if environ is not None else dict(os.environ)
        self.last: sandbox.SandboxResult | None = None

    def _timeout(self, spec: TaskSpec, calibrate: bool) -> float:
        v = spec.config.get("verifier", {})
        per_run = float(spec.benchmark.get("timeout_s", 600))
        if calibrate:
            runs = 2 * int(v.get("calibration_pairs", 6)) + 2 * int(v.get("warmup", 1)) + 2
        else:
            runs = 3 * int(v.get("max_pairs", 30)) + 3 * int(v.get("warmup", 1)) + 3
        return min(per_run * runs + 60, 6 * 3600)

    def _job(self, spec: TaskSpec, argv: list[str], files: dict[str, str], dirs: list[Path],
             timeout_s: float, progress) -> tuple[sandbox.SandboxResult, str | None]:
        import shutil

        root = Path(tempfile.mkdtemp(prefix="rsi-verify-", dir=self.work_root))
        try:
            os.chmod(root, 0o777)
            (root / "config.toml").write_text(spec.verifier_config_text())
            for name, text in files.items():
                (root / name).write_text(text)
            for f in root.iterdir():
                os.chmod(f, 0o644)
            mounts = [*sandbox.python_mounts(), sandbox.Mount(source=str(root), target=str(root), read_only=False)]
            ro = not spec.runner.active.writable_checkouts
            for d in dirs:
                mounts.append(sandbox.Mount(source=str(d), target=str(d), read_only=ro))
            env: dict[str, str] = {}
            hidden = spec.hidden
            for value in hidden.env.values():
                if os.path.isabs(value) and os.path.exists(value):
                    mounts.append(sandbox.Mount(source=value, target=value, read_only=True))
            if hidden.seed_env and self.environ.get(hidden.seed_env):
                env[hidden.seed_env] = self.environ[hidden.seed_env]
            env["RSI_PROGRESS_JSON"] = "1"
            argv = [a.replace("{root}", str(root)) for a in argv]
            job = sandbox.SandboxJob(
                command=[sys.executable, "-m", "verifier", *argv],
                mounts=mounts,
                workdir=str(root),
                env=env,
                timeout_s=timeout_s,
                network=False,
            )
            if progress:
                progress(f"verifier container: {argv[0]}", {"phase": "container"})
            secrets = [v for k, v in env.items() if k != "RSI_PROGRESS_JSON"]
            res = sandbox.run(job, spec.runner.active, secrets=secrets,
                              on_output=_progress_lines(progress) if progress else None)
            self.last = res
            out = root / "report.json"
            return res, (out.read_text() if out.exists() else None)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def calibrate(self, ref, spec, *, progress=None):
        argv = ["calibrate-dir", str(ref), "--config", "{root}/config.toml", "--report", "{root}/report.json"]
        res, text = self._job(spec, argv, {}, [Path(ref)], self._timeout(spec, True), progress)
        if text is None:
            raise RuntimeError(f"calibration container failed: {_why(res)}")
        return json.loads(text)

    def verify(self, baseline, candidate, spec, *, b0, shas, calibration, progress=None):
        argv = ["verify-dirs", str(baseline), str(candidate), "--config", "{root}/config.toml",
                "--report", "{root}/report.json"]
        files = {}
        if b0:
            argv += ["--b0", str(b0)]
        for k, v in (shas or {}).items():
            argv += ["--sha", f"{k}={v}"]
        if calibration:
            files["calibration.json"] = json.dumps(calibration)
            argv += ["--calibration", "{root}/calibration.json"]
        dirs = [Path(baseline), Path(candidate)] + ([Path(b0)] if b0 else [])
        res, text = self._job(spec, argv, files, dirs, self._timeout(spec, False), progress)
        from verifier.verdict import Verdict

        if text is None:
            return error_verdict("sandbox", f"verifier container failed: {_why(res)}", res.output, shas)
        try:
            return Verdict.from_json(text)
        except ValueError as exc:
            return error_verdict("sandbox", f"unreadable verdict from the container: {exc}", res.output, shas)


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


def _why(res: sandbox.SandboxResult) -> str:
    if res.error:
        return res.error
    if res.timed_out:
        return f"timed out after {res.duration_s:.0f} s"
    if res.oom_killed:
        return "out of memory"
    tail = " | ".join(res.output.strip().splitlines()[-5:])
    return f"exit code {res.exit_code}: {tail[-800:]}"


def make_backend(kind: str | None = None) -> VerifierBackend:
    kind = kind or os.environ.get("RSI_VERIFY_MODE", "sandbox")
    if kind in ("inprocess", "in-process", "local"):
        return InProcessVerifier()
    if kind == "sandbox":
        return SandboxVerifier()
    if ":" in kind:  # "package.module:factory", e.g. a site's own backend
        import importlib

        mod, _, attr = kind.partition(":")
        return getattr(importlib.import_module(mod), attr)()
    raise ValueError(f"unknown verification mode '{kind}'; use sandbox, inprocess or module:factory")
