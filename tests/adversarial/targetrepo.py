"""The adversarial suite's target repo: ``tests/adversarial/target`` copied
into a fresh git repo, with a repo config for one of two modes.

* ``inproc``: ``bench/run.py`` answers every request in its own process and
  reports throughput from its own timer (the candidate's code runs in it);
  ``READY`` is printed right before the timed loop, so the verifier can time
  the same window from outside and cross-check the claim.
* ``inproc-cpu``: the same benchmark judged on ``cpu_s``, the run's CPU time
  read by the verifier from its cgroup: far steadier than a wall-clock rate on
  a shared machine (measured here under load ~7 on 2 cores: CPU time within
  +-15%, throughput within 3x), for the cases whose cheat does not target
  the benchmark's own report;
* ``serving``: the candidate's ``app/server.py`` (``serve``), the protected
  load generator ``bench/client.py`` (``client``) and the protected
  ``bench/evaluate.py`` (``evaluator``), which scores the answer files a run
  left against the reference for the hidden seed.

Settings are minimal so that one verification takes well under a minute:
no warm-up, 4 pairs first (a clear reject stops there), up to 20 (so that
calibration on a busy 2-core machine, per-pair spread up to ~20%, does not
refuse the task), 8 calibration pairs, and ``min_gain = 0.30``: the honest
speedup is ~1.4-1.85x on every lens (its own timer, served, ``cpu_s``), and
every cheat, had it worked, would show ~1.6x. The suite
tests the trust boundary, not the precision of guards: the benchmarks report
no latency series (no p99 guard on 24 requests), and explicit loose guards
replace the tight
defaults on startup time and memory (a run of ~0.5 s on a shared 2-core
machine is too short for a 10% startup or 2% memory bound to be judged
without noise). Serving: ``require_external``, the evaluator reports
``accuracy`` (guarded: never lower than the reference's).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from .candidates import TARGET

HIDDEN_SEED_ENV = "ADV_HIDDEN_SEED"
"""Runner variable holding the hidden seed (``RSI_SEED`` of verifier runs)."""
HIDDEN_SEED = "90210"

_COMMON_TAIL = f"""
[verifier]
warmup = 0
initial_pairs = 4
step = 4
max_pairs = 20
calibration_pairs = 8

[hidden]
seed_env = "{HIDDEN_SEED_ENV}"

[policy]
editable = ["app/**"]
protected = ["bench/**", "tests/**"]
max_changed_lines = 150

[agent]
kind = "replay"
rounds = 1
round_timeout_s = 120
max_straight_rejections = 50
"""

INPROC_CONFIG = """\
[benchmarks.answers]
command = "{python} bench/run.py"
timeout_s = 60
ready_pattern = "READY"

[benchmarks.answers.metrics]
throughput = "higher"

[objective]
benchmark = "answers"
metric = "throughput"
min_gain = 0.30

[[guards]]
metric = "startup_s"
max_ratio = 5.0

[[guards]]
metric = "peak_rss_mib"
max_ratio = 1.5

[[quality]]
kind = "wer"
output = "answers"
max = 0.0

[[quality]]
kind = "output_length"
output = "answers"
max_change = 0.02
""" + _COMMON_TAIL

SERVING_CONFIG = """\
[benchmarks.answers]
serve = "{python} app/server.py"
ready_path = "/health"
client = "{python} bench/client.py"
evaluator = "{python} bench/evaluate.py"
evaluator_metrics = ["accuracy"]
timeout_s = 60

[benchmarks.answers.metrics]
throughput = "higher"
accuracy = "higher"

[objective]
benchmark = "answers"
metric = "throughput"
min_gain = 0.30

[[guards]]
metric = "accuracy"
min_delta = 0.0

[[guards]]
metric = "startup_s"
max_ratio = 3.0

[[guards]]
metric = "peak_rss_mib"
max_ratio = 1.5

[[quality]]
kind = "output_length"
output = "answers"
max_change = 0.02
""" + _COMMON_TAIL.replace("calibration_pairs = 8\n", "calibration_pairs = 8\nrequire_external = true\n")

CPU_CONFIG = INPROC_CONFIG.replace(
    'metric = "throughput"\nmin_gain = 0.30', 'metric = "cpu_s"\nmin_gain = 0.30'
)
assert CPU_CONFIG != INPROC_CONFIG

CONFIGS = {"inproc": INPROC_CONFIG, "inproc-cpu": CPU_CONFIG, "serving": SERVING_CONFIG}


def git(cwd: Path, *args: str, input: str | None = None) -> str:
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        input=input,
        env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
             "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": str(cwd),
             "GIT_CONFIG_NOSYSTEM": "1"},
    ).stdout.strip()


def make_target_repo(root: Path, mode: str, *, python: str) -> Path:
    """A fresh git repo (branch ``main``) of the target with the ``mode``'s config."""
    repo = Path(root) / f"target-{mode}"
    shutil.copytree(TARGET, repo, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (repo / ".rsi").mkdir()
    (repo / ".rsi" / "config.toml").write_text(CONFIGS[mode].replace("{python}", python))
    (repo / ".gitignore").write_text("__pycache__/\n*.pyc\n.rsi-adv-*\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "the adversarial target")
    return repo


def make_patch(repo: Path, out: Path, subject: str, edits: dict[str, str]) -> Path:
    """``git format-patch`` of ``edits`` (path -> new text) on top of main, made
    in a throw-away worktree; ``repo`` is left as it was."""
    wt = out.parent / f".wt-{out.stem}"
    git(repo, "worktree", "add", "-q", "--detach", str(wt), "main")
    try:
        for path, text in edits.items():
            (wt / path).write_text(text)
        git(wt, "add", "-A")
        git(wt, "commit", "-q", "-m", subject)
        out.write_text(git(wt, "format-patch", "-1", "--stdout") + "\n")
    finally:
        git(repo, "worktree", "remove", "--force", str(wt))
    return out
