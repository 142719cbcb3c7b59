"""Helpers for the verifier's tests: tiny benchmark checkouts and git repos."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# A real CPU workload: a loop whose size work.txt sets, timed with process time
# (steady on a loaded machine). mode.txt switches on misbehaviours.
BENCH = textwrap.dedent(
    r"""
    import json, os, sys, time
    work = int(open("work.txt").read())
    mode = open("mode.txt").read().strip() if os.path.exists("mode.txt") else ""
    if mode == "crash":
        print("Traceback: something broke", file=sys.stderr)
        sys.exit(3)
    if mode == "hang":
        time.sleep(60)
    if mode == "env":
        keep = ("RSI_", "HIDDEN_", "MY_", "GITHUB_TOKEN")
        out = {k: v for k, v in os.environ.items() if k.startswith(keep)}
        result = {"metrics": {"loop_cpu_s": 1.0}, "outputs": {"env": out}}
        json.dump(result, open(os.environ["RSI_RESULT"], "w"))
        sys.exit(0)
    print("READY", flush=True)
    t = time.process_time()
    s = 0
    for i in range(work):
        s += i * i
    el = time.process_time() - t
    if mode == "nowrite":
        sys.exit(0)
    if mode == "badjson":
        open(os.environ["RSI_RESULT"], "w").write("{oops")
        sys.exit(0)
    failed = 1 if mode == "failed" else 0
    texts = ["the cat sat on the mat", "hello world"]
    if mode == "garbled":
        texts = ["the dog sat on a hat", "hello word"]
    json.dump({"metrics": {"loop_cpu_s": el},
               "samples": {"latency_s": [el / 4] * 4},
               "outputs": {"texts": texts},
               "counts": {"requests": 4, "failed": failed}}, open(os.environ["RSI_RESULT"], "w"))
    """
)

CONFIG = f'''
[benchmarks.loop]
command = "{sys.executable} bench.py"
timeout_s = 30

[benchmarks.loop.metrics]
loop_cpu_s = "lower"

[objective]
benchmark = "loop"
metric = "loop_cpu_s"
min_gain = 0.05

[verifier]
warmup = 1
initial_pairs = 8
step = 4
max_pairs = 16
# loop_cpu_s is self-reported: an accept needs the verifier's own clock to
# corroborate it (the cross-check); the loop is most of each run, so it does.
'''

BASE_WORK = 600_000  # ~45 ms of loop: most of a run, so wall_s corroborates loop_cpu_s


def make_checkout(path: Path, work: int = BASE_WORK, mode: str = "", config: str = CONFIG) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "bench.py").write_text(BENCH)
    (path / "work.txt").write_text(str(work))
    if mode:
        (path / "mode.txt").write_text(mode)
    (path / ".rsi").mkdir(exist_ok=True)
    (path / ".rsi" / "config.toml").write_text(config)
    return path


def git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "HOME": str(repo),
        "PATH": "/usr/bin:/bin:/usr/local/bin",
    }
    p = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True
    )
    return p.stdout.strip()


@pytest.fixture
def checkout(tmp_path):
    def make(name: str, **kw) -> Path:
        return make_checkout(tmp_path / name, **kw)

    return make


@pytest.fixture(scope="module")
def target_repo(tmp_path_factory) -> Path:
    """A git repo with branches: main (base), fast, slow, same (a README change),
    loose (candidate rewrites the config), quick (20x less work)."""
    repo = tmp_path_factory.mktemp("target")
    git(repo, "init", "-q", "-b", "main")
    make_checkout(repo)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    for branch, change in [
        ("fast", lambda: (repo / "work.txt").write_text(str(int(BASE_WORK * 0.75)))),
        ("slow", lambda: (repo / "work.txt").write_text(str(int(BASE_WORK * 1.6)))),
        ("same", lambda: (repo / "README").write_text("docs only\n")),
        (
            "loose",
            lambda: (
                (repo / "work.txt").write_text(str(int(BASE_WORK * 1.6))),
                (repo / ".rsi" / "config.toml").write_text(
                    CONFIG.replace(
                        'metric = "loop_cpu_s"\nmin_gain', 'metric = "wall_s"\nmin_gain'
                    ).replace('loop_cpu_s = "lower"', 'loop_cpu_s = "higher"')
                ),
            ),
        ),
    ]:
        git(repo, "checkout", "-q", "-b", branch, "main")
        change()
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", branch)
    git(repo, "checkout", "-q", "main")
    return repo
