"""The new-user path, end to end, as a maintainer with no benchmark and no
GitHub App walks it (issue 20): a copy of an inference repo that has no
benchmark (``newuser_target``: a streaming text server) -> ``rsi init
--scaffold serving`` -> ``rsi config check`` -> ``rsi try`` with the user's own
patch -> what GitHub would show, and the task page in headless Chromium.

Every command runs as a user types it: ``python -m bot.cli ...`` in a
subprocess whose output is a pipe (so progress is one line per step)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import yaml

from harness.spec import build_task

HERE = Path(__file__).resolve().parent
TARGET = HERE / "newuser_target"
PATCH = HERE / "newuser_drop_pass.patch"
GIT_ID = {"GIT_AUTHOR_NAME": "Maintainer", "GIT_AUTHOR_EMAIL": "m@example.com",
          "GIT_COMMITTER_NAME": "Maintainer", "GIT_COMMITTER_EMAIL": "m@example.com"}


def rsi(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, **GIT_ID, "COLUMNS": "200"}
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    return subprocess.run([sys.executable, "-m", "bot.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, env={**os.environ, **GIT_ID}, check=True,
                          capture_output=True, text=True).stdout


@pytest.fixture
def user_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "tinygen"
    shutil.copytree(TARGET, repo)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "tinygen")
    return repo


def test_init_without_a_benchmark_says_how_to_get_one(user_repo):
    r = rsi("init", "--yes", cwd=user_repo)
    assert r.returncode == 2
    assert "rsi init --scaffold serving --serve" in r.stderr and "writing-a-benchmark.md" in r.stderr
    assert not (user_repo / ".rsi").exists()


def test_scaffolded_config_is_valid_guarded_and_runs_an_agent(user_repo):
    r = rsi("init", "--yes", "--scaffold", "serving", "--serve",
            "python -m tinygen.server --port $RSI_PORT", cwd=user_repo)
    assert r.returncode == 0, r.stderr
    text = (user_repo / ".rsi/config.toml").read_text()
    spec = build_task(text, None, "t")
    bench = spec.verify.benchmark()
    assert bench.serving and bench.client == "python bench/rsi/client.py" and bench.evaluator
    assert spec.verify.verifier.require_external  # a protected client exists
    assert {q.kind for q in spec.verify.quality} == {"wer", "output_length"}  # guards on outputs
    assert spec.agent.kind == "mini-swe-agent" and spec.agent.env == ["OPENAI_API_KEY"]
    assert bench.unit_of("throughput") == "request/s" and bench.unit_of("ttfa_p50_s") == "s"
    assert "bench/rsi/**" in spec.protected_paths()
    # the issue form speaks of this repo, not of tiny-tts
    form = (user_repo / ".github/ISSUE_TEMPLATE/rsi-proposal.yml").read_text()
    assert "tts" not in form and "tiny_tts" not in form and "vocoder" not in form
    holders = {b.get("id"): b.get("attributes", {}).get("placeholder")
               for b in yaml.safe_load(form)["body"]}
    assert holders["benchmark"] == "main" and holders["metric"] == "throughput"
    assert holders["editable"].startswith("tinygen/")
    r = rsi("config", "check", cwd=user_repo)
    assert r.returncode == 0 and "ok:" in r.stdout, r.stderr


def test_tuner_is_refused_without_knobs(user_repo):
    r = rsi("init", "--yes", "--scaffold", "inprocess", "--entry", "tinygen.model:generate",
            "--agent", "tuner", cwd=user_repo)
    assert r.returncode == 2 and "tuner" in r.stderr and "knobs" in r.stderr
    assert not (user_repo / ".rsi").exists()


def _quick(config: Path) -> None:
    """Smaller verifier settings, as a user trying it on a laptop would set them."""
    text = config.read_text()
    text = text.replace("require_external = true", "require_external = true\n"
                        "calibration_pairs = 4\nmax_pairs = 12\nfeasibility_power = 0.5")
    # The candidate does not touch the server's start: its startup ratio is 1.0 plus
    # this machine's noise, which at 12 pairs under load can put the point over the
    # default 1.1x bound. A wide startup guard leaves the outcome to the mechanism
    # under test (2.5x faster -> review), not to the noise.
    text += '\n[[guards]]\nmetric = "startup_s"\nmax_ratio = 2.0\n'
    config.write_text(text.replace("requests = 16", "requests = 8"))


@pytest.mark.slow
@pytest.mark.chromium
def test_new_user_path_end_to_end(user_repo, tmp_path):
    steps: list[tuple[str, float, str]] = []

    def step(name: str, *args: str) -> subprocess.CompletedProcess:
        t0 = time.monotonic()
        r = rsi(*args, cwd=user_repo)
        steps.append((name, time.monotonic() - t0, (r.stdout + r.stderr).strip().splitlines()[-1]))
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
        return r

    step("rsi init --scaffold serving", "init", "--yes", "--scaffold", "serving", "--serve",
         "python -m tinygen.server --port $RSI_PORT", "--min-gain", "0.3")
    _quick(user_repo / ".rsi/config.toml")
    step("rsi config check", "config", "check")
    git(user_repo, "add", "-A")
    git(user_repo, "commit", "-qm", "rsi init")
    head = git(user_repo, "rev-parse", "HEAD")
    out = tmp_path / "try"
    r = step("rsi try --agent replay --patch", "try", "--agent", "replay", "--patch", str(PATCH),
             "--rounds", "1", "--verify", "inprocess", "--out", str(out))
    for name, secs, last in steps:
        print(f"| {name} | {secs:.1f} s | {last[:120]} |")

    # progress on a pipe: one line per step, the estimate before any run
    lines = r.stdout.splitlines()
    assert "the candidate's code runs ON THIS HOST" in lines[0]  # --verify inprocess says so first
    assert any("step 2/4" in ln and "at most" in ln and "benchmark runs" in ln for ln in lines)
    assert any(ln.split("] ", 1)[-1].startswith("[estimate] ~") and " min" in ln for ln in lines)
    assert [ln for ln in lines if "step 4/4" in ln]
    # the user's repo is untouched: no branch, no commit
    assert git(user_repo, "rev-parse", "HEAD") == head
    assert git(user_repo, "branch", "--list", "rsi/*").strip() == ""

    gh = out / "github"
    status = (gh / "status-comment.md").read_text()
    assert "objective**: throughput of benchmark main, at least +30.0%" in status
    assert "? of benchmark ?" not in status and "latency_p95_s ≤ 1.1x" in status
    # PASSES 3 -> 1 is about 2.5x faster: a gain above 2x always asks for a review,
    # and a reviewed candidate gets a draft PR
    check = (gh / "check-1.md").read_text()
    assert check.startswith("rsi/verifier: ") and "request/s" in check
    assert "98% repeated interval" in check and "95% interval" not in check.split("|")[0]
    pr = (gh / "pr-1.md").read_text()
    assert pr.startswith("# rsi #1.1: ") and "rsi/verifier report" in pr
    assert "Needs review" in pr or "Accepted" in pr
    page = out / "page" / "index.html"
    html = page.read_text()
    assert 'class="candidate" data-n="1"' in html and "throughput" in html
    db = out / "task.sqlite"
    assert db.is_file()

    from tests.bot.test_web import _png_size, chromium

    browser = chromium()
    shot = tmp_path / "try-page.png"
    common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--no-first-run", "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*common, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'id="status" class="status finished"' in dom.stdout
    assert dom.stdout.count('class="candidate"') == 1
    shoot = subprocess.run([*common, "--window-size=1280,1800", f"--screenshot={shot}",
                            page.as_uri()], capture_output=True, text=True, timeout=120)
    assert shoot.returncode == 0 and shot.is_file(), shoot.stderr[-2000:]
    data = shot.read_bytes()
    assert _png_size(data) == (1280, 1800) and len(data) > 20_000  # not a blank page
    keep = os.environ.get("RSI_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / "try-page.png")


def test_the_wheel_carries_every_data_file_the_packages_read():
    """An install from the wheel (`make dist`) failed at the first agent round: the
    TASK.md template was not package data. Every non-Python file under the packages
    must match a package-data glob of pyproject.toml."""
    import fnmatch

    root = HERE.parents[1]
    data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    for pkg in ("bot", "harness", "verifier", "kernels"):
        for f in (root / pkg).rglob("*"):
            rel = f.relative_to(root / pkg).as_posix()
            if not f.is_file() or f.suffix in (".py", ".pyc") or f.name == "README.md":
                continue
            assert any(fnmatch.fnmatch(rel, g) for g in data.get(pkg, [])), f"{pkg}/{rel}"


def _template_module(name: str):
    import importlib.util

    path = HERE.parents[1] / "harness" / "templates" / name
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.modules.pop(spec.name, None)
    return mod


def test_ttfa_counts_real_output_not_the_first_byte():
    """A server that answers a blank line or an SSE keep-alive at once, before any
    output, must not look instant: those bytes do not stop the TTFA clock."""
    client = _template_module("rsi_client.py")
    for padding in (b"\n", b"  \r\n\t", b": keep-alive\n\n", b"data: \n\n", b"data:\n"):
        assert not client.first_real_output(padding), padding
    assert client.first_real_output(b": ping\n\ndata: hello\n")
    assert client.first_real_output(b"hello")


def test_scaffolded_inprocess_benchmark_runs_and_its_outputs_are_judged(user_repo, tmp_path):
    r = rsi("init", "--yes", "--scaffold", "inprocess", "--entry", "tinygen.model:generate",
            "--agent", "replay", cwd=user_repo)
    assert r.returncode == 0, r.stderr
    spec = build_task((user_repo / ".rsi/config.toml").read_text(), None, "t")
    bench = spec.benchmark
    # the verifier's own harness times the entry point (issue 29): no objective the
    # candidate's process reports, and require_external says it must stay so
    assert bench.entry == "tinygen.model:generate" and bench.inputs == "bench/rsi/prompts.txt"
    assert bench.command == "python bench/rsi/bench.py tinygen.model:generate"  # by hand only
    assert spec.verify.verifier.require_external
    assert {bench.metric_source(m) for m in ("throughput", "latency_p95_s", "ttfa_p50_s")} == {"harness"}
    assert bench.metric_source("startup_s") == "verifier"
    assert spec.verify.self_report_note() is None
    assert "bench/rsi/**" in spec.protected_paths()
    # by hand: the same calls
    out, result = tmp_path / "outputs", tmp_path / "result.json"
    env = {**os.environ, "RSI_RESULT": str(result), "RSI_OUTPUT_DIR": str(out),
           "RSI_SETTING_REQUESTS": "3"}
    subprocess.run([sys.executable, "bench/rsi/bench.py", "tinygen.model:generate"], cwd=user_repo,
                   env=env, check=True, timeout=120)
    res = json.loads(result.read_text())
    assert res["counts"] == {"requests": 3, "failed": 0}
    assert res["metrics"]["throughput"] > 0 and len(res["samples"]["ttfa_s"]) == 3
    assert all(0 < t <= lat for t, lat in zip(res["samples"]["ttfa_s"], res["samples"]["latency_s"], strict=True))
    ev = tmp_path / "eval.json"
    subprocess.run([sys.executable, "bench/rsi/evaluate.py"], cwd=user_repo, check=True, timeout=60,
                   env={**os.environ, "RSI_INPUT_DIR": str(out), "RSI_RESULT": str(ev)})
    texts = json.loads(ev.read_text())["outputs"]["texts"]
    assert len(texts) == 3 and all(":" in t for t in texts)  # tinygen's word:digest outputs
    # as the verifier runs it: its harness, then the protected evaluator on the outputs
    from verifier.runner import run_once

    quick = bench.model_copy(update={"requests": 3})
    rec = run_once(quick, user_repo, workdir=tmp_path, base_checkout=user_repo)
    assert rec.ok, (rec.error, rec.stderr_tail)
    assert rec.sources["throughput"] == "harness" and rec.startup_s is not None
    assert rec.result is not None and rec.result.counts == {"requests": 3, "failed": 0}
    assert rec.result.outputs["texts"] == [t for t in rec.result.outputs["texts"] if ":" in t]
    assert len(rec.result.outputs["texts"]) == 3
