"""A tiny synthetic target repo for the bot's end-to-end tests.

Its benchmark sleeps ``delay_ms + extra_ms`` per request (two settings files),
so two independent patches make it faster: one merges, the other is rebased
onto the merge and judged again. A run takes a fraction of a second.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = '''\
import json, os, time, tomllib
delay = tomllib.load(open("app/settings.toml", "rb"))["delay_ms"]
extra = tomllib.load(open("app/extra.toml", "rb"))["extra_ms"]
lat, texts = [], []
t0 = time.perf_counter()
for i in range(4):
    s = time.perf_counter()
    time.sleep((delay + extra) / 1000.0)
    texts.append("the cat sat on the mat")
    lat.append(time.perf_counter() - s)
elapsed = time.perf_counter() - t0
with open(os.environ["RSI_RESULT"], "w") as fh:
    json.dump({"metrics": {"throughput": 4 / elapsed}, "samples": {"latency_s": lat},
               "outputs": {"transcripts": texts}, "counts": {"requests": 4, "failed": 0}}, fh)
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

[policy]
editable = ["app/**"]
protected = ["patches/**"]

[agent]
kind = "replay"
rounds = 2
round_timeout_s = 60
patches = ["patches/01-less-delay.patch", "patches/02-less-extra.patch"]
'''

PATCH_1 = '''\
Subject: [PATCH] Cut the per-request delay

--- a/app/settings.toml
+++ b/app/settings.toml
@@ -1 +1 @@
-delay_ms = 40
+delay_ms = 20
'''

PATCH_2 = '''\
Subject: [PATCH] Drop most of the extra work

--- a/app/extra.toml
+++ b/app/extra.toml
@@ -1 +1 @@
-extra_ms = 20
+extra_ms = 4
'''


def make_target_tree(root: Path, python: str = sys.executable) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for d in ("app", "bench", ".rsi", "patches"):
        (root / d).mkdir(exist_ok=True)
    (root / "bench" / "run.py").write_text(BENCH)
    (root / "app" / "settings.toml").write_text("delay_ms = 40\n")
    (root / "app" / "extra.toml").write_text("extra_ms = 20\n")
    (root / ".rsi" / "config.toml").write_text(CONFIG.replace("{python}", python))
    (root / "patches" / "01-less-delay.patch").write_text(PATCH_1)
    (root / "patches" / "02-less-extra.patch").write_text(PATCH_2)
    return root


def check_patches(root: Path) -> None:
    """Both patches apply on the initial tree (a self-check of this module)."""
    for p in sorted((root / "patches").glob("*.patch")):
        subprocess.run(["git", "apply", "--check", str(p)], cwd=root, check=True)
