"""``rsi init`` on a repo with a load generator (issue 17.7): the config it
writes is a serving benchmark whose objective must be measured outside the
candidate (``require_external = true``), and it passes ``rsi config check``."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

from typer.testing import CliRunner

from bot.cli import build_app
from harness.onboard import detect
from harness.spec import CONFIG_PATH, build_task
from tests.harness import target

CLIENT = '''\
import json, os, urllib.request
url = os.environ["RSI_SERVER_URL"]
lat = [0.1]
json.dump({"metrics": {"throughput": 1.0}, "samples": {"latency_s": lat}},
          open(os.environ["RSI_RESULT"], "w"))
'''


def rsi(*args: str):
    return CliRunner().invoke(build_app(), list(args), catch_exceptions=False)


def _repo(tmp_path: Path, client: bool) -> Path:
    repo = tmp_path / "target"
    (repo / "bench").mkdir(parents=True)
    (repo / "bench" / ("client.py" if client else "run.py")).write_text(CLIENT if client else target.BENCH)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    return repo


def test_a_repo_with_a_client_gets_require_external(tmp_path):
    repo = _repo(tmp_path, client=True)
    found = detect(repo)
    assert found.client == "python bench/client.py" and found.command is None
    # the client is not a benchmark command: without the server's command, init asks for it
    r = rsi("init", "--repo", str(repo), "--yes")
    assert r.exit_code == 2 and "--command" in r.output
    r = rsi("init", "--repo", str(repo), "--yes", "--command", "python -m app.server")
    assert r.exit_code == 0, r.output
    text = (repo / CONFIG_PATH).read_text()
    cfg = tomllib.loads(text)
    bench = cfg["benchmarks"]["main"]
    assert bench["serve"] == "python -m app.server" and bench["client"] == "python bench/client.py"
    assert "command" not in bench
    assert cfg["verifier"]["require_external"] is True
    spec = build_task(text, None, "t")  # a config the bot accepts
    assert spec.verify.verifier.require_external
    assert spec.verify.benchmarks["main"].metric_source("throughput") == "client"
    assert "bench/client.py" in spec.protected_paths()
    assert rsi("config", "check", "--repo", str(repo)).exit_code == 0


def test_a_repo_without_a_client_keeps_its_command(tmp_path):
    repo = _repo(tmp_path, client=False)
    r = rsi("init", "--repo", str(repo), "--yes")
    assert r.exit_code == 0, r.output
    cfg = tomllib.loads((repo / CONFIG_PATH).read_text())
    assert cfg["benchmarks"]["main"]["command"] == "python bench/run.py"
    # no client: the objective is the verifier's clock on the run, never the benchmark's
    # own report (issue 29), and require_external keeps it so
    assert cfg["objective"]["metric"] == "wall_s"
    assert cfg["verifier"] == {"require_external": True}
