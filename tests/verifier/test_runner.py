"""One run as a fresh process, measured from outside."""

from __future__ import annotations

import sys
import time

from verifier.config import BenchmarkConfig
from verifier.runner import run_once, run_setup


def _bench(command: str, **kw) -> BenchmarkConfig:
    return BenchmarkConfig(name="b", command=command, **kw)


def test_good_run_measures_wall_startup_and_rss(checkout):
    d = checkout("a")
    rec = run_once(
        _bench(f"{sys.executable} bench.py", ready_pattern="READY", metrics={"loop_s": "lower"}),
        d,
    )
    assert rec.ok, rec.error
    assert rec.result.metrics["loop_s"] > 0
    assert 0 < rec.startup_s < rec.wall_s
    assert rec.peak_rss_mib > 1
    assert set(rec.measured()) == {"wall_s", "peak_rss_mib", "startup_s", "cpu_s"}
    assert 0 < rec.cpu_s < rec.wall_s * 4


def test_peak_rss_covers_the_process_tree(tmp_path):
    code = (
        "import subprocess,sys; subprocess.run([sys.executable,'-c',"
        "'b=bytearray(120*2**20); import time; time.sleep(0.4)'])"
    )
    (tmp_path / "w.py").write_text(
        code + "\nimport json,os; json.dump({}, open(os.environ['RSI_RESULT'],'w'))\n"
    )
    rec = run_once(_bench(f"{sys.executable} w.py"), tmp_path)
    assert rec.ok, rec.error
    assert rec.peak_rss_mib > 120


def test_crash_is_an_error_with_stderr_tail(checkout):
    rec = run_once(_bench(f"{sys.executable} bench.py"), checkout("a", mode="crash"))
    assert not rec.ok and rec.returncode == 3
    assert "exited with status 3" in rec.error
    assert "something broke" in rec.stderr_tail


def test_timeout_kills_the_whole_group(tmp_path):
    marker = tmp_path / "child_alive"
    # the shell starts a background grandchild that would touch the marker later
    cmd = f"(sleep 1.5; touch {marker}) & sleep 30"
    t0 = time.perf_counter()
    rec = run_once(_bench(cmd, timeout_s=0.5), tmp_path)
    assert time.perf_counter() - t0 < 5
    assert not rec.ok and rec.timed_out and "timed out after 0.5 s" in rec.error
    time.sleep(1.5)
    assert not marker.exists()


def test_missing_and_bad_results(checkout):
    b = _bench(f"{sys.executable} bench.py")
    rec = run_once(b, checkout("n", mode="nowrite"))
    assert not rec.ok and "did not write JSON to $RSI_RESULT" in rec.error
    rec = run_once(b, checkout("j", mode="badjson"))
    assert not rec.ok and "not valid JSON" in rec.error
    rec = run_once(_bench(f"{sys.executable} bench.py", metrics={"speed": "higher"}), checkout("m"))
    assert not rec.ok and "missing metric(s) 'speed'" in rec.error


def test_ready_pattern_that_never_appears(checkout):
    rec = run_once(_bench(f"{sys.executable} bench.py", ready_pattern="NEVER"), checkout("a"))
    assert not rec.ok and "never appeared on stdout" in rec.error


def test_environment(checkout, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "secret")
    monkeypatch.setenv("MY_VAR", "kept")
    b = _bench(
        f"{sys.executable} bench.py", env={"MY_ENV": "1"}, settings={"dtype": "fp16", "threads": 2}
    )
    rec = run_once(b, checkout("a", mode="env"), extra_env={"HIDDEN_SET": "/srv/x"})
    assert rec.ok, rec.error
    env = rec.result.outputs["env"]
    assert env["RSI_SETTING_DTYPE"] == "fp16" and env["RSI_SETTING_THREADS"] == "2"
    assert env["MY_ENV"] == "1" and env["HIDDEN_SET"] == "/srv/x"
    assert "MY_VAR" not in env  # an allowlist: the benchmark's own env passes what it needs
    assert "RSI_RESULT" in env and "RSI_OUTPUT_DIR" in env
    assert "GITHUB_TOKEN" not in env


def test_setup_runs_once_and_reports_failure(tmp_path):
    assert run_setup(_bench("true"), tmp_path) is None
    ok = run_setup(_bench("true", setup="echo built > built.txt"), tmp_path)
    assert ok.returncode == 0 and (tmp_path / "built.txt").exists()
    bad = run_setup(_bench("true", setup="echo nope >&2; exit 4"), tmp_path)
    assert bad.returncode == 4 and "nope" in bad.stderr_tail


def test_unstartable_command_returns_a_record(tmp_path):
    rec = run_once(_bench("true"), tmp_path / "does-not-exist")
    assert not rec.ok and rec.error
