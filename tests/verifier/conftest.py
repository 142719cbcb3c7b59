"""Helpers for the verifier's tests: tiny benchmark checkouts and git repos."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# A real benchmark whose timed part is a sleep of work.txt's size (WORK_PER_S
# units a second), timed with the wall clock after it prints READY, the
# config's ready_pattern: so the verifier's own clock (the run's time after
# READY) sees the same window. A sleep's length does not move with CPU
# contention (only its wake-up does, by far less than any gain the tests ask
# about), so no decision here rests on how busy the machine is: a CPU-bound
# loop here let a neighbour on CI turn an honest +33% into a tail-latency
# failure and a "clock does not confirm" review. mode.txt switches on
# misbehaviours.
WORK_PER_S = 6_000_000  # work.txt units per second of the timed sleep

# The timed part every benchmark here shares (after it prints READY): ``el``,
# the sleep's length on the wall clock.
TIMED_SLEEP = f"""\
t = time.perf_counter()
time.sleep(int(open("work.txt").read()) / {WORK_PER_S})
el = time.perf_counter() - t
"""

BENCH = (
    textwrap.dedent(
        r"""
        import json, os, sys, time
        mode = open("mode.txt").read().strip() if os.path.exists("mode.txt") else ""
        print("READY", flush=True)
        if mode == "crash":
            print("Traceback: something broke", file=sys.stderr)
            sys.exit(3)
        if mode == "hang":
            time.sleep(60)
        if mode == "env":
            keep = ("RSI_", "HIDDEN_", "MY_", "GITHUB_TOKEN")
            out = {k: v for k, v in os.environ.items() if k.startswith(keep)}
            result = {"metrics": {"loop_s": 1.0}, "outputs": {"env": out}}
            json.dump(result, open(os.environ["RSI_RESULT"], "w"))
            sys.exit(0)
        """
    )
    + TIMED_SLEEP
    + textwrap.dedent(
        r"""
        if mode == "nowrite":
            sys.exit(0)
        if mode == "badjson":
            open(os.environ["RSI_RESULT"], "w").write("{oops")
            sys.exit(0)
        failed = 1 if mode == "failed" else 0
        texts = ["the cat sat on the mat", "hello world"]
        if mode == "garbled":
            texts = ["the dog sat on a hat", "hello word"]
        json.dump({"metrics": {"loop_s": el},
                   "samples": {"latency_s": [el / 4] * 4},
                   "outputs": {"texts": texts},
                   "counts": {"requests": 4, "failed": failed}}, open(os.environ["RSI_RESULT"], "w"))
        """
    )
)

CONFIG = f'''
[benchmarks.loop]
command = "{sys.executable} bench.py"
timeout_s = 30
ready_pattern = "READY"

[benchmarks.loop.metrics]
loop_s = "lower"

[objective]
benchmark = "loop"
metric = "loop_s"
min_gain = 0.05

# startup_s (the time to READY) is the interpreter's start: the same CPU-bound
# 25 ms in both arms, which a busy machine stretches at random by as much again.
# The default 1.1x bound on it would judge the machine, not the candidate (a CI
# run failed an honest +33% on it); these tests are about the timed part, so
# startup is guarded only against a candidate that triples it.
[[guards]]
metric = "startup_s"
max_ratio = 3.0

[verifier]
warmup = 1
initial_pairs = 8
step = 4
max_pairs = 16
# an accept's confirmation pairs (issue 29: 51 candidate runs before any
# accept, [verifier] accept_wild_rate) are tested by test_wild_runs.py and, in
# a real verification, by test_judge.py's first test (WILD_RULE); the others
# here are about something else and keep their runs few
accept_wild_rate = 0
# loop_s is self-reported: an accept needs the verifier's own clock to
# corroborate it (the cross-check); that clock reads the run's time after
# READY, which is the timed sleep, so an honest gain shows on it.
'''

BASE_WORK = 600_000  # a 100 ms timed sleep: most of the window after READY


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
                        'metric = "loop_s"\nmin_gain', 'metric = "wall_s"\nmin_gain'
                    ).replace('loop_s = "lower"', 'loop_s = "higher"')
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
