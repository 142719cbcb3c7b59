"""Attack tests (issue 18): what a benchmark process inherits, and what a
candidate's result can make the verifier say."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from verifier.isolation import Job, ProcessIsolation, run_job


def test_process_isolation_passes_an_allowlist_not_everything_but_known_secrets(tmp_path: Path):
    """A benchmark under process isolation prints its whole environment: the
    bot's database URL, the ssh agent socket and any other variable the
    verifier happens to hold are not there; PATH, the pins and RSI_RESULT are."""
    base = {
        "PATH": os.environ["PATH"], "HOME": str(tmp_path), "LANG": "C.UTF-8",
        "RSI_DATABASE_URL": "postgresql://rsi:hunter2@db/rsi",
        "SSH_AUTH_SOCK": "/tmp/ssh-XXXX/agent.1", "KUBECONFIG": "/root/.kube/config",
        "DOCKER_HOST": "unix:///var/run/docker.sock", "GITHUB_TOKEN": "ghs_x",
    }
    iso = ProcessIsolation(base_env=base)
    run_dir = tmp_path / "run"
    iso.prepare_dir(run_dir)
    cmd = f"{sys.executable} -c 'import json,os; json.dump(dict(os.environ), open(os.environ[\"RSI_RESULT\"], \"w\"))'"
    res = run_job(iso, Job(command=cmd, checkout=tmp_path, run_dir=run_dir, env={"RSI_SEED": "7"}))
    assert res.returncode == 0, res.stderr_tail
    env = json.loads((run_dir / "result.json").read_text())
    for leaked in ("RSI_DATABASE_URL", "SSH_AUTH_SOCK", "KUBECONFIG", "DOCKER_HOST", "GITHUB_TOKEN"):
        assert leaked not in env, leaked
    assert env["PATH"] == base["PATH"] and env["LANG"] == "C.UTF-8" and env["RSI_SEED"] == "7"
    assert env["RSI_RESULT"] == str(run_dir / "result.json")


FILL = """
import json, os
big = os.path.join(os.environ["RSI_OUTPUT_DIR"], "big.bin")
written = 0
try:
    with open(big, "wb") as fh:
        for _ in range(64):
            fh.write(b"x" * (1 << 20))
            written += 1 << 20
except OSError:
    pass
try:
    json.dump({"metrics": {"speed": 1.0}, "meta": {"written": written}}, open(os.environ["RSI_RESULT"], "w"))
except OSError:
    pass
"""


@pytest.mark.docker
def test_a_run_writing_past_its_run_dir_cap_is_an_error_naming_the_cap(tmp_path: Path):
    """A candidate writes 64 MiB into its output dir, past the 8 MiB cap of its
    run dir: the run is an error that names the cap, and the host's disk holds
    none of it (the run dir is a tmpfs in the container; nothing is copied)."""
    from tests.conftest import docker_unavailable_reason
    from verifier.config import BenchmarkConfig
    from verifier.isolation import ContainerIsolation, IsolationSpec
    from verifier.runner import run_once

    if (why := docker_unavailable_reason()) is not None:
        pytest.skip(why)
    from tests.images import PY, runtime_image

    spec = IsolationSpec.simple(runtime_image(), cpus=1, memory="512m").model_copy(update={"run_dir_mib": 8})
    iso = ContainerIsolation(spec)
    checkout = tmp_path / "c"
    checkout.mkdir()
    (checkout / "fill.py").write_text(FILL)
    work = tmp_path / "work"
    work.mkdir()
    try:
        bench = BenchmarkConfig(name="b", command=f"{PY} fill.py", metrics={"speed": "higher"},
                                timeout_s=120)
        rec = run_once(bench, checkout, isolation=iso, workdir=work)
    finally:
        iso.close()
    assert not rec.ok
    assert "size cap (8 MiB for /rsi/run" in rec.error, rec.error
    on_host = sum(p.stat().st_size for p in work.rglob("*") if p.is_file() and not p.is_symlink())
    assert on_host < 1024 * 1024, on_host


HIDDEN = "HIDDEN-EVAL the quick brown fox sings at dawn"


def test_a_result_key_or_output_path_never_quoted_into_an_error(tmp_path: Path):
    """Whatever names a candidate's result holds (unknown keys, undeclared
    metrics and their values, output paths), an error names the category and
    our own fields only: a hidden sentence placed there goes no further."""
    from verifier.protocol import ProtocolError, parse_result
    from verifier.quality import QualityError, load_tensor

    results = [
        {HIDDEN: 1},
        {"metrics": {HIDDEN: "x"}},
        {"metrics": {"speed": HIDDEN}},
        {"samples": {HIDDEN: []}},
        {"counts": {HIDDEN: -1}},
        {"counts": {"failed": HIDDEN}},
        {"metrics": {HIDDEN: 1.0}},  # the declared metric is missing: the error lists what it has
    ]
    for data in results:
        with pytest.raises(ProtocolError) as e:
            parse_result(json.dumps(data), expected_metrics=["speed"])
        assert HIDDEN not in str(e.value) and "HIDDEN" not in str(e.value), str(e.value)
    with pytest.raises(ProtocolError) as e:
        parse_result('{"metrics": {"speed": 1}, "' + HIDDEN + '" ')
    assert "HIDDEN" not in str(e.value)
    out = tmp_path / "outputs"
    (out / "real").mkdir(parents=True)
    (out / "link").symlink_to(out / "real")
    (out / "bad.npy").write_text(HIDDEN)
    (out / f"{HIDDEN}.pt7").write_text("x")
    for path in (f"{HIDDEN}.npy", f"../{HIDDEN}.npy", f"link/{HIDDEN}.npy", "bad.npy", f"{HIDDEN}.pt7"):
        with pytest.raises(QualityError) as e:
            load_tensor(path, out)
        assert "HIDDEN" not in str(e.value), (path, str(e.value))
