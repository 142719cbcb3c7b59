"""The sandbox backend: the verifier as a host process with per-run container
isolation, in a host-only scratch dir; anything but a clean, consistent
report is an ``error`` verdict.

A stand-in "python" (a shell script) plays the verifier's CLI, so these tests
check the harness's side of the contract without Docker; the real CLI runs in
``test_e2e.py``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from harness.spec import load_task
from harness.verification import SandboxVerifier, isolation_spec
from verifier.isolation import IsolationSpec
from verifier.verdict import Verdict

from .target import make_target

IMAGE = "rsi-bot/runtime:0123456789abcdef"  # what SandboxVerifier would resolve the default image to

FAKE = """#!/bin/sh
# a stand-in for `python -I -m verifier ...`: records how it was called
shift 3
printf '%s\\n' "$@" > "{log}/argv"
stat -c %a . > "{log}/mode"
pwd > "{log}/cwd"
env > "{log}/env"
cp isolation.json "{log}/isolation.json"
echo 'RSI-PROGRESS {{"phase": "measure", "message": "pair 1"}}' >&2
echo 'benchmark noise'
[ -f "{log}/sleep" ] && sleep 30
[ -f "{log}/report" ] && cp "{log}/report" report.json
exit $(cat "{log}/code")
"""


@pytest.fixture()
def fake(tmp_path: Path):
    log = tmp_path / "log"
    log.mkdir()
    script = tmp_path / "fake-python"
    script.write_text(FAKE.format(log=log))
    script.chmod(0o755)
    return script, log


@pytest.fixture()
def spec(tmp_path: Path):
    repo = make_target(tmp_path, python=sys.executable)
    return load_task(repo, None, "t")


def verify(fake, spec, tmp_path, *, code: int, report: str | None, environ=None, progress=None):
    script, log = fake
    (log / "code").write_text(str(code))
    if report is not None:
        (log / "report").write_text(report)
    v = SandboxVerifier(work_root=tmp_path, python=str(script), environ=environ or {"PATH": os.environ["PATH"]},
                        image=IMAGE)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(exist_ok=True)
    b.mkdir(exist_ok=True)
    return v.verify(a, b, spec, b0=None, shas={"bk": "1" * 40, "candidate": "2" * 40}, calibration=None,
                    progress=progress)


def accept() -> str:
    return Verdict(decision="accept", reason="throughput +20%").to_json()


def test_a_clean_run_is_the_verifiers_verdict_and_streams_progress(fake, spec, tmp_path: Path):
    seen = []
    v = verify(fake, spec, tmp_path, code=0, report=accept(), progress=lambda m, d: seen.append((m, d.get("phase"))))
    assert v.decision == "accept" and v.reason == "throughput +20%"
    assert ("pair 1", "measure") in seen and seen[0][1] == "container"
    _, log = fake
    argv = (log / "argv").read_text().split("\n")
    assert argv[0] == "verify-dirs" and argv[argv.index("--isolation") + 1] == "container"
    spec_file = argv[argv.index("--isolation-spec") + 1]
    assert (log / "mode").read_text().strip() == "700"  # host-only scratch dir
    assert not Path(spec_file).exists() and not Path((log / "cwd").read_text().strip()).exists()  # removed
    iso = IsolationSpec.model_validate_json((log / "isolation.json").read_text())
    assert iso.image == IMAGE and iso.base_kwargs["user"] == "1000:1000"
    assert iso.base_kwargs["cap_drop"] == ["ALL"] and iso.base_kwargs["mem_limit"] == 4 * 1024**3
    assert not iso.base_kwargs.get("volumes")  # nothing of the host: the image carries Python


@pytest.mark.parametrize(
    ("code", "report", "why"),
    [
        (3, None, "exit code 3"),
        (0, None, "left no report"),
        (1, "accept", "exited with code 1 but its report says accept"),
        (0, "{not json", "unreadable verdict"),
        (-9, "accept", "exit code"),
    ],
)
def test_anything_but_a_consistent_report_is_an_error(fake, spec, tmp_path: Path, code, report, why):
    v = verify(fake, spec, tmp_path, code=code if code >= 0 else 137, report=accept() if report == "accept" else report)
    assert v.decision == "error" and why in v.reason, v.reason
    assert v.shas["candidate"] == "2" * 40


def test_the_verifier_gets_no_bot_secrets(fake, spec, tmp_path: Path):
    environ = {"PATH": os.environ["PATH"], "HOME": "/root", "GITHUB_APP_PRIVATE_KEY": "pk",
               "RSI_WEBHOOK_SECRET": "whs", "ANTHROPIC_API_KEY": "sk", "DATABASE_URL": "postgres://u:p@h/db"}
    verify(fake, spec, tmp_path, code=0, report=accept(), environ=environ)
    env = (fake[1] / "env").read_text()
    for leaked in ("GITHUB_APP_PRIVATE_KEY", "RSI_WEBHOOK_SECRET", "ANTHROPIC_API_KEY", "DATABASE_URL"):
        assert leaked not in env
    assert "RSI_PROGRESS_JSON=1" in env
    # the image its runs run in goes into the fingerprint: a calibration in another image is not comparable
    assert f"RSI_CONTAINER_IMAGE={IMAGE}" in env.splitlines()


def test_a_verifier_that_hangs_is_killed_and_is_an_error(fake, spec, tmp_path: Path, monkeypatch):
    (fake[1] / "sleep").write_text("")
    monkeypatch.setattr(SandboxVerifier, "_timeout", lambda self, spec, calibrate: 1.0)
    t0 = time.monotonic()
    v = verify(fake, spec, tmp_path, code=0, report=accept())
    assert v.decision == "error" and "timed out" in v.reason and time.monotonic() - t0 < 20


def test_calibration_failures_raise_with_the_reason(fake, spec, tmp_path: Path):
    script, log = fake
    (log / "code").write_text("2")
    v = SandboxVerifier(work_root=tmp_path, python=str(script), environ={"PATH": os.environ["PATH"]}, image=IMAGE)
    with pytest.raises(RuntimeError, match="left no report|exit code 2"):
        v.calibrate(tmp_path, spec)
    assert (log / "argv").read_text().startswith("calibrate-dir\n")


def test_isolation_spec_for_accelerators(tmp_path: Path):
    from .target import CONFIG

    cfg = CONFIG.replace("{python}", sys.executable) + (
        '\n[runner]\nprofile = "gpu"\n[runner.profiles.gpu]\ndevice = "cuda"\ndevices = ["0", "1"]\n'
        'memory = "8g"\ncpus = 4\n')
    from harness.spec import build_task

    d = isolation_spec(build_task(cfg, "", "t"), image=IMAGE)
    assert json.loads(json.dumps(d)) == d
    assert d["base_kwargs"]["device_requests"][0]["device_ids"] == ["0", "1"]
    assert d["base_kwargs"]["nano_cpus"] == 4 * 10**9 and "command" not in d["base_kwargs"]
    IsolationSpec.model_validate(d)


def test_the_time_limit_follows_the_typed_verifier_settings():
    """Per run: the benchmark's timeout plus a container's start and stop; as
    many runs as the verifier can make. Unset settings are the verifier's own
    defaults, never a copy of them."""
    from harness.spec import build_task
    from verifier.config import VerifierSettings

    from .target import CONFIG

    off = CONFIG.replace("{python}", sys.executable)  # the target turns the wild-run rule off
    cfg = off.replace("accept_wild_rate = 0\n", "")  # the verifier's default: on
    spec = build_task(cfg, "", "t")  # timeout_s 60, warmup 0, max_pairs 8, calibration_pairs 3
    assert SandboxVerifier()._timeout(spec, True) == 90 * (2 * 3 + 2) + 60
    d = VerifierSettings()
    # an accept's confirmation pairs may reach accept_max_runs (issue 29); 6 h at most
    assert SandboxVerifier()._timeout(spec, False) == min(
        90 * (3 * d.accept_max_runs + 3) + 60, 6 * 3600
    )
    spec_off = build_task(off, "", "t")
    assert spec_off.verify.verifier.accept_wild_rate == 0
    assert SandboxVerifier()._timeout(spec_off, False) == 90 * (3 * 8 + 3) + 60
    bare = build_task(cfg.replace("calibration_pairs = 3\n", "").replace("warmup = 0\n", ""), "", "t")
    assert SandboxVerifier()._timeout(bare, True) == 90 * (2 * d.calibration_pairs + 2 * d.warmup + 2) + 60


@pytest.mark.docker
def test_containers_a_killed_verifier_left_are_reaped():
    from harness import sandbox
    from harness.verification import RUN_LABEL, reap_containers

    client = sandbox.docker_client()
    c = client.containers.create(os.environ.get("RSI_BASE_IMAGE", "rsi-bot/base:bookworm"), ["sleep", "600"],
                                 labels={RUN_LABEL: "test-reap"}, network_mode="none")
    c.start()
    assert reap_containers("test-reap") == 1
    assert client.containers.list(all=True, filters={"label": f"{RUN_LABEL}=test-reap"}) == []


def test_hidden_host_paths_stay_out_of_every_containers_base(tmp_path: Path):
    """A hidden input on the runner's disk is given only to the jobs that may
    read it (the verifier mounts it per job). In the base kwargs it would reach
    every container, the candidate's own server and setup included."""
    from .target import CONFIG

    secret = tmp_path / "hidden-prompts"
    secret.mkdir()
    cfg = CONFIG.replace("{python}", sys.executable) + f'\n[hidden]\nenv = {{ PROMPTS = "{secret}" }}\n'
    from harness.spec import build_task

    spec = build_task(cfg, "", "t")
    assert spec.verify.hidden.env == {"PROMPTS": str(secret)}
    d = isolation_spec(spec, image=IMAGE)
    volumes = d["base_kwargs"].get("volumes") or {}
    assert str(secret) not in volumes and all(str(secret) not in str(v) for v in volumes.values())
