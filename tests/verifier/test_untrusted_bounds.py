"""Attack tests (issue 18): what a benchmark process inherits, and what a
candidate's result can make the verifier say."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

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
