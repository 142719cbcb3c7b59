"""A tiny synthetic target repo for harness tests: a benchmark whose speed a
settings file controls (``delay_ms`` per request), in a fresh git repo."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

BENCH = '''\
import json, os, sys, time, tomllib
sys.path.insert(0, os.getcwd())
from app import core
cfg = tomllib.load(open("app/settings.toml", "rb"))
delay = cfg["delay_ms"] / 1000.0
lat, texts = [], []
t0 = time.perf_counter()
for i in range(4):
    s = time.perf_counter()
    time.sleep(delay)
    texts.append(core.transcribe(i))
    lat.append(time.perf_counter() - s)
elapsed = time.perf_counter() - t0
out = {"metrics": {"throughput": 4 / elapsed}, "samples": {"latency_s": lat},
       "outputs": {"transcripts": texts}, "counts": {"requests": 4, "failed": 0}}
with open(os.environ["RSI_RESULT"], "w") as fh:
    json.dump(out, fh)
'''

CORE = '''\
WORDS = ["the", "cat", "sat", "on", "the", "mat"]


def transcribe(i):
    return " ".join(WORDS)
'''

CONFIG = '''\
[benchmarks.speed]
command = "{python} bench/run.py"
timeout_s = 60

[benchmarks.speed.metrics]
throughput = "higher"

[benchmarks.speed.samples]
latency_s = "lower"

[objective]
benchmark = "speed"
metric = "throughput"
min_gain = 0.1

[[guards]]
metric = "latency_p95_s"
max_ratio = 1.5
required = true

[[quality]]
kind = "output_length"
output = "transcripts"
max_change = 0.05

[verifier]
warmup = 0
initial_pairs = 6
step = 2
max_pairs = 8
# these tests are about the loop, not the wild-run rule (tests/verifier/test_wild_runs.py):
# an accept after ~16 runs, not the ~100 an accept needs by default
accept_wild_rate = 0
calibration_pairs = 3
alpha = 0.05
bootstrap = 10000

[[knobs]]
name = "delay"
file = "app/settings.toml"
key = "delay_ms"
values = [25, 18, 32]

[policy]
editable = ["app/**"]
protected = ["tests/**"]
max_changed_lines = 50

[agent]
kind = "tuner"
rounds = 4
round_timeout_s = 60
max_straight_rejections = 3
'''


def sh(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
        env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
             "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": str(cwd)},
    ).stdout.strip()


def make_target(root: Path, *, python: str, delay_ms: int = 25, config: str | None = None) -> Path:
    repo = root / "target"
    (repo / "app").mkdir(parents=True)
    (repo / "bench").mkdir()
    (repo / ".rsi").mkdir()
    (repo / "tests").mkdir()
    (repo / "bench" / "run.py").write_text(BENCH)
    (repo / "app" / "__init__.py").write_text("")
    (repo / "app" / "core.py").write_text(CORE)
    (repo / "app" / "settings.toml").write_text(f"# speed settings\ndelay_ms = {delay_ms}\nmode = \"plain\"\n")
    (repo / "tests" / "test_core.py").write_text("def test_ok():\n    assert True\n")
    (repo / ".rsi" / "config.toml").write_text((config or CONFIG).replace("{python}", python))
    sh(repo, "init", "-q", "-b", "main")
    sh(repo, "add", "-A")
    sh(repo, "commit", "-q", "-m", "initial")
    return repo


def commit_all(repo: Path, message: str) -> str:
    sh(repo, "add", "-A")
    sh(repo, "commit", "-q", "-m", message)
    return sh(repo, "rev-parse", "HEAD")


def make_patch(repo: Path, out: Path, message: str, edits: dict[str, str]) -> Path:
    """A ``git format-patch`` file of ``edits`` (path -> new text) on top of
    main, made on a throwaway branch; the repo is left as it was."""
    sh(repo, "checkout", "-q", "-b", "patch-tmp")
    for path, text in edits.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    commit_all(repo, message)
    out.write_text(sh(repo, "format-patch", "-1", "--stdout") + "\n")
    sh(repo, "checkout", "-q", "main")
    sh(repo, "branch", "-q", "-D", "patch-tmp")
    return out


FASTER_SETTINGS = '# speed settings\ndelay_ms = 17\nmode = "plain"\n'
TRUNCATED_CORE = CORE.replace('" ".join(WORDS)', "WORDS[0]")


def wheel(folder: Path, mark: str, name: str = "rsienvdep") -> Path:
    """A pure-Python wheel of one module, ``{name}.MARK = mark`` (made here: no index)."""
    path = folder / f"{name}-1.0-py3-none-any.whl"
    info = f"{name}-1.0.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}.py", f"MARK = {mark!r}\n")
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", f"{name}.py,,\n{info}/METADATA,,\n{info}/WHEEL,,\n{info}/RECORD,,\n")
    return path
