"""[verifier] cpus = "auto": the least busy CPUs, chosen once per verification
(and per calibration), every run of both arms pinned to them, the set recorded
in the fingerprint (verifier.isolation.resolve_cpus)."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from verifier import isolation
from verifier.calibrate import calibrate
from verifier.config import ConfigError, VerifyConfig
from verifier.judge import verify
from verifier.verdict import Decision

# a benchmark that appends the CPUs it may run on (and its thread setting) to a
# log outside the checkout, one line per run; with "-" (a container), it fails
# unless it runs on exactly the CPUs given
BENCH = textwrap.dedent(
    """
    import json, os, sys
    cpus = sorted(os.sched_getaffinity(0))
    if sys.argv[1] == "-":  # in a container: fail unless on the CPUs expected
        if cpus != json.loads(sys.argv[2]):
            sys.exit(f"on CPUs {cpus}")
    else:
        with open(sys.argv[1], "a") as f:
            f.write(json.dumps([open("arm.txt").read(), cpus, os.environ.get("OMP_NUM_THREADS")]))
            f.write(chr(10))
    import time
    t = time.process_time()
    s = sum(i * i for i in range(20000))
    json.dump({"metrics": {"work_s": time.process_time() - t + 1e-4}}, open(os.environ["RSI_RESULT"], "w"))
    """
)


def _config(log: Path, cpus: str) -> str:
    return textwrap.dedent(
        f"""
        [benchmarks.b]
        command = "{sys.executable} bench.py {log}"
        timeout_s = 30
        [benchmarks.b.metrics]
        work_s = "lower"
        [objective]
        benchmark = "b"
        metric = "work_s"
        min_gain = 0.05
        [verifier]
        cpus = "{cpus}"
        warmup = 0
        initial_pairs = 2
        step = 2
        max_pairs = 8
        calibration_pairs = 2
        default_guards = false
        cross_check = false
        """
    )


def _checkout(path: Path, config: str) -> Path:
    path.mkdir(parents=True)
    (path / "bench.py").write_text(BENCH)
    (path / "arm.txt").write_text(path.name)
    (path / ".rsi").mkdir()
    (path / ".rsi" / "config.toml").write_text(config)
    return path


def test_auto_takes_the_least_busy_cpus(monkeypatch):
    monkeypatch.setattr(isolation.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    busy = {0: 0.9, 1: 0.1, 2: 0.5, 3: 0.1}
    monkeypatch.setattr(isolation, "cpu_busy", lambda sample_s=1.0: busy)
    assert isolation.resolve_cpus("auto") == "1,3"  # half of the 4, the least busy
    assert isolation.resolve_cpus("auto:1") == "3"  # a tie: the higher id, away from CPU 0
    assert isolation.resolve_cpus("auto:3") == "1,2,3"
    busy[3] = 0.95  # a neighbour moved onto CPU 3
    assert isolation.resolve_cpus("auto:1") == "1"
    assert isolation.resolve_cpus("0-1") == "0-1"  # a list stays as written
    assert isolation.resolve_cpus(None) is None
    with pytest.raises(ValueError, match="5 CPU.s. asked, 4 available"):
        isolation.resolve_cpus("auto:5")
    with pytest.raises(ValueError, match="auto, auto:N or a cpuset list"):
        isolation.resolve_cpus("auto:x")


def test_cpu_busy_reads_every_cpu_from_proc_stat():
    busy = isolation.cpu_busy(0.2)
    assert set(os.sched_getaffinity(0)) <= set(busy)
    assert all(0.0 <= b <= 1.0 for b in busy.values())


def test_the_config_takes_auto_and_refuses_anything_else():
    base = "[benchmarks.b]\ncommand = 'x'\n[objective]\nbenchmark = 'b'\nmetric = 'wall_s'\n"
    for ok in ("auto", "auto:1", "0-1", "2,4-5"):
        assert VerifyConfig.from_toml(base + f"[verifier]\ncpus = '{ok}'\n").verifier.cpus == ok
    for bad in ("automatic", "auto:", "0-", "all"):
        with pytest.raises(ConfigError):
            VerifyConfig.from_toml(base + f"[verifier]\ncpus = '{bad}'\n")


def test_a_verification_runs_both_arms_on_the_auto_set_and_records_it(tmp_path, monkeypatch):
    """One choice per verification: every run of both arms on it (the runs see
    that affinity and one thread per CPU); the verdict's fingerprint says which."""
    allowed = sorted(os.sched_getaffinity(0))
    want = allowed[-1]
    calls = []

    def busy(sample_s=1.0):
        calls.append(sample_s)  # the machine's load: all but the last allowed CPU busy
        return {c: (0.0 if c == want else 0.9) for c in allowed}

    monkeypatch.setattr(isolation, "cpu_busy", busy)
    log = tmp_path / "runs.jsonl"
    cfg = _config(log, "auto:1")
    base = _checkout(tmp_path / "base", cfg)
    cand = _checkout(tmp_path / "cand", cfg)
    v = verify(base, cand, VerifyConfig.from_toml(cfg))
    assert v.decision != Decision.ERROR, v.reason
    assert v.fingerprint is not None and v.fingerprint.extra["cpuset"] == str(want)
    assert len(calls) == 1  # chosen once, not per run or per arm
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert {r[0] for r in runs} >= {"base", "cand"} and len(runs) >= 4
    assert all(r[1] == [want] and r[2] == "1" for r in runs), runs

    log.unlink()
    cal = calibrate(base, VerifyConfig.from_toml(cfg))
    assert cal.error is None, cal.error
    assert cal.fingerprint is not None and cal.fingerprint.extra["cpuset"] == str(want)
    assert all(json.loads(line)[1] == [want] for line in log.read_text().splitlines())


@pytest.mark.docker
def test_auto_cpus_reach_every_container(tmp_path, monkeypatch):
    """With container isolation the chosen set is the containers' cpuset
    (docker's HostConfig.CpusetCpus): every run inside sees only it (the
    benchmark fails otherwise)."""
    from tests.conftest import docker_unavailable_reason
    from verifier.isolation import ContainerIsolation, IsolationSpec

    why = docker_unavailable_reason()
    if why is not None:
        if os.environ.get("RSI_REQUIRE_DOCKER") == "1":
            pytest.fail(f"docker required but unavailable: {why}")
        pytest.skip(why)
    allowed = sorted(os.sched_getaffinity(0))
    want = allowed[0]
    monkeypatch.setattr(
        isolation, "cpu_busy", lambda sample_s=1.0: {c: float(c != want) for c in allowed}
    )
    from tests.images import runtime_image

    image = runtime_image()
    cfg = _config(Path("- [%d]" % want), "auto:1").replace(sys.executable, "python3")
    base = _checkout(tmp_path / "base", cfg)
    cand = _checkout(tmp_path / "cand", cfg)
    iso = ContainerIsolation(IsolationSpec.simple(image, cpus=1, memory="1g"))
    try:
        v = verify(base, cand, VerifyConfig.from_toml(cfg), isolation=iso)
    finally:
        iso.close()
    assert v.decision != Decision.ERROR, v.reason  # a run on other CPUs fails: an error
    assert v.fingerprint is not None and v.fingerprint.extra["cpuset"] == str(want)
    assert v.runs >= 4
