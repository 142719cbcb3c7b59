"""Attack (issue 30, high): a container reads the bot's own checkout.

The documented non-Docker run keeps the bot's state next to its checkout
(``rsi-bot.db``, ``rsi-state/``, ``rsi-app/`` with the GitHub App's private
key). Before, every agent, verifier and gateway container had the checkout
mounted read-only (with the host's Python and venv): an agent read and
committed a planted App key and the bot's SQLite store. Now a container's
Python is its image's (:mod:`harness.images`) and nothing of the host is
mounted but what the run works on.

Each test plants a fake App key, a SQLite store and a state dir in this
checkout, then looks for them, and for the host's Python, venv and checkout
paths, from inside the real container of each kind: an agent preset (through
``CommandAgent.run``, the loop's own path), a verifier job (the harness's
isolation spec), and the model gateway.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import sqlite3
import sys
import uuid
from pathlib import Path

import pytest

from harness import images, sandbox
from harness.agents.command import CommandAgent
from harness.egress import agent_network, discard
from harness.gateway import Gateway
from harness.spec import RunnerProfile, load_task
from harness.verification import isolation_spec
from tests.harness.target import make_target
from tests.harness.test_agents import ctx_for
from verifier.isolation import ContainerIsolation, IsolationSpec, Job, run_job

ROOT = Path(__file__).resolve().parents[2]
HOST_PATHS = sorted({str(ROOT), sys.prefix, sys.base_prefix, os.path.realpath(sys.prefix), "/var/cache/rsi-ci"})

PROBE = """
import json, os, sys
token, host_paths = sys.argv[1], json.loads(sys.argv[2])
hits = []
for root, dirs, files in os.walk("/"):
    if root == "/":
        dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
    hits += [os.path.join(root, n) for n in dirs + files if token in n]
mounts = [line.split()[4] for line in open("/proc/self/mountinfo")]
print("RESULT " + json.dumps({"hits": hits, "host_paths": [p for p in host_paths if os.path.exists(p)],
                              "mounts": mounts, "python": sys.executable}))
"""


def probe_command() -> str:
    code = base64.b64encode(PROBE.encode()).decode()
    return f"python3 -c \"import base64; exec(base64.b64decode('{code}'))\""


def result(text: str) -> dict:
    line = next(x for x in text.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@pytest.fixture()
def planted():
    """The bot's state as the documented non-Docker run leaves it, next to this
    checkout, each name carrying a token; removed afterwards."""
    token = f"rsi30plant{uuid.uuid4().hex[:10]}"
    made = [ROOT / f"rsi-app-{token}", ROOT / f"rsi-state-{token}", ROOT / f"rsi-bot-{token}.db"]
    try:
        made[0].mkdir()
        (made[0] / f"app-{token}.private-key.pem").write_text(
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEfake" + token + "\n-----END RSA PRIVATE KEY-----\n")
        made[1].mkdir()
        (made[1] / f"state-{token}.json").write_text(json.dumps({"installation_token": token}))
        with sqlite3.connect(made[2]) as db:
            db.execute("create table secrets (v text)")
            db.execute("insert into secrets values (?)", (token,))
        assert all(p.exists() for p in made)  # the host does hold them
        yield token
    finally:
        for p in made:
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def assert_nothing_of_the_host(out: dict, token: str) -> None:
    assert out["hits"] == [], out["hits"]  # no planted key, store or state, wherever it looked
    assert out["host_paths"] == [], out["host_paths"]  # no host Python, venv or checkout path
    assert not any(m.startswith(("/root", "/var/cache", "/work/wt")) for m in out["mounts"]), out["mounts"]
    assert out["python"].startswith("/usr/bin/") or out["python"].startswith(images.AGENTS_ROOT), out["python"]


@pytest.mark.docker
@pytest.mark.parametrize("preset", ["mini-swe-agent", "aider", "claude-code"])
def test_an_agent_container_cannot_read_the_bots_checkout(planted, tmp_path: Path, preset: str):
    repo = make_target(tmp_path, python="python3")
    ctx = ctx_for(repo, tmp_path)
    agent = CommandAgent.preset(preset, environ={})
    agent.template = f"{probe_command()} {planted} '{json.dumps(HOST_PATHS)}'"
    out = agent.run(ctx)
    seen = result(out.log)
    assert_nothing_of_the_host(seen, planted)
    mounts = set(seen["mounts"])
    assert {"/work/repo", "/rsi/TASK.md", "/rsi/out"} <= mounts  # what the run works on, and only that


@pytest.mark.docker
def test_a_verifier_job_cannot_read_the_bots_checkout(planted, tmp_path: Path):
    repo = make_target(tmp_path, python="python3")
    spec = isolation_spec(load_task(repo, None, "t"))
    assert spec["image"].startswith(images.RUNTIME_REPO + ":") and not spec["base_kwargs"].get("volumes")
    iso = ContainerIsolation(IsolationSpec.model_validate(spec))
    run_dir = tmp_path / "run"
    iso.prepare_dir(run_dir)
    try:
        cmd = f"{probe_command()} {planted} '{json.dumps(HOST_PATHS)}'"
        res = run_job(iso, Job(cmd, repo, timeout_s=120, role="run", run_dir=run_dir))
    finally:
        iso.close()
    assert res.returncode == 0, res.stderr_tail
    assert_nothing_of_the_host(result(res.stdout_tail), planted)


@pytest.mark.docker
def test_the_gateway_container_mounts_nothing(planted):
    client = sandbox.docker_client()
    net = agent_network(client)
    gw = Gateway("http://model.rsi.test:8000/v1", "sk-test-0123456789", network=net.name, client=client,
                 image=RunnerProfile().image)
    try:
        gw.__enter__()
        gw.container.reload()
        assert gw.container.attrs["Mounts"] == []
        assert gw.container.image.tags and gw.container.image.tags[0].startswith(images.RUNTIME_REPO + ":")
        ex = gw.container.exec_run(["python3", "-c", PROBE, planted, json.dumps(HOST_PATHS)], user="65534:65534")
        assert ex.exit_code == 0, ex.output
        assert_nothing_of_the_host(result(ex.output.decode()), planted)
    finally:
        gw.close()
        discard(network=net)
