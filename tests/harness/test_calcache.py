"""The runner's store (harness.calcache): a calibration kept under what it
measured and reused only while that holds; the one measuring lane; and the
loop reusing B0's calibration across tasks with the real in-process verifier."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.agents import ReplayAgent
from harness.calcache import CalibrationKey, RunnerStore, default_root
from harness.loop import run_task
from harness.spec import load_task
from harness.verification import InProcessVerifier
from verifier.calibrate import Calibration
from verifier.fingerprint import collect
from verifier.verdict import RunError

from .target import commit_all, make_target, sh


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    repo = make_target(tmp_path, python=sys.executable)
    cfg = repo / ".rsi" / "config.toml"
    # a min_gain no A/A noise on any machine makes infeasible: whether a stored
    # calibration is reused rests on its key alone, never on how busy the machine is
    cfg.write_text(cfg.read_text().replace("min_gain = 0.1", "min_gain = 5.0"))
    commit_all(repo, "feasible at any noise")
    return repo


def _cal(**kw) -> Calibration:
    return Calibration.from_log_ratios([0.01, -0.012, 0.004, 0.0, -0.003, 0.008], max_pairs=8,
                                       benchmark="speed", metric="throughput", fingerprint=collect(), **kw)


def _key(repo: Path, spec=None, tree: str | None = None, where: dict | None = None) -> CalibrationKey:
    spec = spec or load_task(repo, None, "t")
    return CalibrationKey.of(spec, tree or sh(repo, "rev-parse", "main^{tree}"),
                             where or {"backend": "inprocess"})


def test_a_calibration_is_found_under_exactly_what_it_measured(repo: Path, tmp_path: Path):
    store = RunnerStore(tmp_path / "runner")
    key = _key(repo)
    assert store.get(key) is None
    cal = _cal()
    store.put(key, cal, measured_s=42.0)
    hit = store.get(key)
    assert hit is not None and hit.calibration == cal and hit.measured_s == 42.0
    # another tree, another benchmark config, another isolation: never this one
    assert store.get(_key(repo, tree="0" * 40)) is None
    other = load_task(repo, "```toml\n[verifier]\ncalibration_pairs = 5\n```", "t")
    assert store.get(_key(repo, spec=other)) is None
    assert store.get(_key(repo, where={"backend": "sandbox", "image_id": "sha256:x"})) is None
    # the entry is host-only
    entry = next((tmp_path / "runner" / "calibrations").glob("*.json"))
    assert entry.stat().st_mode & 0o077 == 0


def test_what_is_no_longer_true_is_not_reused(repo: Path, tmp_path: Path):
    now = [1000.0]
    store = RunnerStore(tmp_path / "runner", max_age_s=3600, clock=lambda: now[0])
    key = _key(repo)
    store.put(key, _cal(), 10.0)
    now[0] += 3599
    assert store.get(key) is not None
    now[0] += 2
    assert store.get(key) is None  # too old
    # a calibration with an error is never kept
    store2 = RunnerStore(tmp_path / "runner2")
    failed = Calibration(benchmark="speed", error=RunError(stage="calibration", message="boom"))
    store2.put(key, failed, 10.0)
    assert store2.get(key) is None
    # measured on another machine (its fingerprint differs from this one's now)
    fp = collect().model_copy(update={"cpu_model": "another CPU"})
    store2.put(key, _cal().model_copy(update={"fingerprint": fp}), 10.0)
    assert store2.get(key) is None


def test_an_entry_that_is_not_what_the_store_wrote_is_a_miss(repo: Path, tmp_path: Path):
    store = RunnerStore(tmp_path / "runner")
    key = _key(repo)
    store.put(key, _cal(), 10.0)
    path = next((tmp_path / "runner" / "calibrations").glob("*.json"))
    path.write_text("{not json")
    assert store.get(key) is None and not path.exists()  # removed
    other = _key(repo, tree="1" * 40)
    store.put(other, _cal(), 10.0)
    path.symlink_to(next(p for p in path.parent.glob("*.json")))
    assert store.get(key) is None  # a link is never followed


def test_the_runner_dir_is_chosen_by_the_environment(tmp_path: Path):
    assert default_root({"RSI_RUNNER_DIR": "off"}) is None
    assert default_root({"RSI_RUNNER_DIR": str(tmp_path)}) == tmp_path
    assert default_root({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "rsi-bot" / "runner"
    with pytest.raises(ValueError, match="RSI_CALIBRATION_MAX_AGE_H"):
        os.environ["RSI_CALIBRATION_MAX_AGE_H"] = "a week"
        try:
            RunnerStore(tmp_path)
        finally:
            del os.environ["RSI_CALIBRATION_MAX_AGE_H"]


HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
open(sys.argv[2], "w").close()
while not os.path.exists(sys.argv[3]):
    time.sleep(0.02)
"""


def test_one_measuring_lane_per_runner_across_threads_and_processes(tmp_path: Path):
    root = tmp_path / "runner"
    store = RunnerStore(root)
    waited: list[str] = []
    inside = threading.Event()
    release = threading.Event()

    def first() -> None:
        with store.lane():
            inside.set()
            release.wait(10)

    t = threading.Thread(target=first)
    t.start()
    assert inside.wait(10)
    got = threading.Event()

    def second() -> None:
        with store.lane(on_wait=lambda: waited.append("thread")):
            got.set()

    t2 = threading.Thread(target=second)
    t2.start()
    time.sleep(0.3)
    assert not got.is_set()  # the lane is held: the second cannot be in it
    release.set()
    t.join(10)
    t2.join(10)
    assert got.is_set() and waited == ["thread"]

    # another process holding the lane (flock on measure.lock): this one waits for it
    held, free = tmp_path / "held", tmp_path / "free"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(root / "measure.lock"), str(held), str(free)])
    try:
        for _ in range(500):
            if held.exists():
                break
            time.sleep(0.02)
        assert held.exists()
        got.clear()
        t3 = threading.Thread(target=second)
        t3.start()
        time.sleep(0.3)
        assert not got.is_set()
        free.touch()
        t3.join(20)
        assert got.is_set() and waited == ["thread", "thread"]
    finally:
        free.touch()
        proc.wait(20)


def test_the_loop_reuses_b0s_calibration_across_tasks_on_the_same_runner(repo: Path, tmp_path: Path):
    store = RunnerStore(tmp_path / "runner")
    backend = InProcessVerifier()

    def task(tid: str, proposal: str | None = None) -> list:
        events: list = []
        spec = load_task(repo, proposal, tid)
        res = run_task(repo, spec, state_dir=tmp_path / f"state-{tid}", agent=ReplayAgent([]),
                       verifier=backend, on_event=events.append, store=store)
        assert res.calibration is not None and res.calibration.error is None
        return [e.message for e in events]

    first = task("a")
    assert any("measuring B0" in m for m in first) and not any("reusing" in m for m in first)
    second = task("b")
    assert any("reusing B0's calibration" in m and "s of measuring saved" in m for m in second)
    assert not any("measuring B0" in m for m in second)
    assert any("calibration reused" in m for m in second)
    assert [h["what"] for h in store.hits()] == ["B0"]
    # the benchmark measured differently: B0 is measured again
    third = task("c", "```toml\n[verifier]\ncalibration_pairs = 4\n```")
    assert any("measuring B0" in m for m in third)
    # B0 itself changed (a new tree): measured again
    (repo / "app" / "settings.toml").write_text('# speed settings\ndelay_ms = 24\nmode = "plain"\n')
    commit_all(repo, "another B0")
    fourth = task("d")
    assert any("measuring B0" in m for m in fourth)
    assert len(store.hits()) == 1


def test_a_store_or_entry_others_may_write_is_not_trusted(repo: Path, tmp_path: Path):
    store = RunnerStore(tmp_path / "runner")
    key = _key(repo)
    store.put(key, _cal(), 10.0)
    entry = next((tmp_path / "runner" / "calibrations").glob("*.json"))
    entry.chmod(0o666)
    assert store.get(key) is None
    entry.chmod(0o600)
    assert store.get(key) is not None
    (tmp_path / "runner").chmod(0o777)
    with pytest.raises(OSError, match="writable by no one else"):
        store.get(key)
