"""Noisy machine vs noisy benchmark (verifier.noise), pinning and per-run
context switches (verifier.isolation)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from verifier.isolation import Job, ProcessIsolation, parse_cpus, pin_env, run_job
from verifier.noise import NoiseReading, classify, explain_runs, machine_probe
from verifier.runner import RunRecord

RNG = np.random.default_rng(7)
WALL = np.exp(RNG.normal(0, 0.05, 60))


def test_steady_when_the_spread_is_small():
    assert classify(0.005, NoiseReading(wall=WALL))[0] == "steady"


def test_machine_when_cpu_time_is_steady_but_wall_time_is_not():
    cpu = np.exp(RNG.normal(0, 0.004, 60))
    source, note = classify(0.07, NoiseReading(wall=WALL, cpu=cpu))
    assert source == "machine" and "waited" in note


def test_machine_when_slow_runs_were_preempted_or_throttled():
    source, note = classify(0.07, NoiseReading(wall=WALL, cpu=WALL, involuntary=WALL * 1000))
    assert source == "machine" and "preempted" in note
    thr = np.where(np.arange(60) == 3, 0.05, 0.0) * WALL
    source, note = classify(0.07, NoiseReading(wall=WALL, cpu=WALL, throttled=thr))
    assert source == "machine" and "throttled" in note


def test_machine_when_the_fixed_probe_slows_with_the_runs():
    source, note = classify(0.07, NoiseReading(wall=WALL, cpu=WALL, probe=0.02 * WALL**3))
    assert source == "machine" and "fixed piece of CPU work" in note


def test_benchmark_when_its_own_work_varies():
    probe = 0.02 * np.exp(RNG.normal(0, 0.01, 60))
    source, note = classify(0.07, NoiseReading(wall=WALL, cpu=WALL * 1.01, probe=probe))
    assert source == "benchmark" and "its own work varies" in note


def test_explain_runs_reads_run_records():
    recs = [
        RunRecord(ok=True, wall_s=float(w), cpu_s=1.0, extra={"involuntary_switches": 5})
        for w in WALL
    ]
    assert "waited" in explain_runs(recs)
    same = [RunRecord(ok=True, wall_s=float(w), cpu_s=float(w)) for w in WALL]
    assert explain_runs(same) is None


def test_machine_probe_does_fixed_work():
    assert 0 < machine_probe(rounds=1) < 5


def test_parse_cpus_and_thread_settings():
    assert parse_cpus("0-2,5") == (0, 1, 2, 5)
    for bad in ("x", "3-1", "1,,2"):
        with pytest.raises(ValueError, match="cpuset list"):
            parse_cpus(bad)
    env = pin_env((0, 1), None)
    assert env["OMP_NUM_THREADS"] == "2" and env["MKL_NUM_THREADS"] == "2"
    assert pin_env((0, 1), 1)["OPENBLAS_NUM_THREADS"] == "1"


def test_process_isolation_pins_cpus_threads_and_counts_switches(tmp_path: Path):
    cpu = min(os.sched_getaffinity(0))
    iso = ProcessIsolation()
    iso.pin(str(cpu))
    script = (
        "import os; print(sorted(os.sched_getaffinity(0)), os.environ['OMP_NUM_THREADS'], "
        "os.environ.get('MKL_NUM_THREADS'))"
    )
    job = Job(f'python -c "{script}"', tmp_path, {"MKL_NUM_THREADS": "3"}, 60)
    res = run_job(iso, job)
    assert res.returncode == 0, res.stderr_tail
    assert res.stdout_tail.strip() == f"[{cpu}] 1 3"  # the benchmark's own env wins
    assert res.extra["voluntary_switches"] >= 0 and res.extra["involuntary_switches"] >= 0
    with pytest.raises(ValueError, match="not available"):
        ProcessIsolation().pin("4096")


@pytest.mark.docker
def test_container_isolation_pins_cpus_threads_and_counts_switches(tmp_path: Path):

    from tests.conftest import docker_unavailable_reason
    from verifier.isolation import ContainerIsolation, IsolationSpec

    why = docker_unavailable_reason()
    if why is not None:
        if os.environ.get("RSI_REQUIRE_DOCKER") == "1":
            pytest.fail(f"docker required but unavailable: {why}")
        pytest.skip(why)
    from tests.images import PY, runtime_image

    iso = ContainerIsolation(IsolationSpec.simple(runtime_image(), cpus=1, memory="1g"))
    cpu = min(os.sched_getaffinity(0))
    iso.pin(str(cpu))
    script = (
        "import os, time; time.sleep(0.4); "
        "print(sorted(os.sched_getaffinity(0)), os.environ['OMP_NUM_THREADS'])"
    )
    try:
        res = run_job(iso, Job(f'{PY} -c "{script}"', tmp_path, {}, 60))
    finally:
        iso.close()
    assert res.returncode == 0, res.stderr_tail
    assert res.stdout_tail.strip() == f"[{cpu}] 1"
    assert res.extra["voluntary_switches"] >= 1  # the sleep: sampled from the cgroup's processes
    assert "involuntary_switches" in res.extra and "throttled_s" in res.extra


def test_machine_when_the_fixed_probe_varies_as_much_as_the_benchmark():
    probe = 0.02 * np.exp(RNG.normal(0, 0.05, 60))  # independent of the runs, but as noisy
    source, note = classify(0.07, NoiseReading(wall=WALL, cpu=WALL, probe=probe))
    assert source == "machine" and "machine's speed varies" in note
