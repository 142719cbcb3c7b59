"""How long `rsi try` takes a new user on the scaffolded benchmark (issue 33).

As a maintainer with no benchmark walks it (tests/bot/test_new_user.py): a copy
of tests/bot/newuser_target (tinygen, a streaming text server) -> ``rsi init
--yes --scaffold serving`` with the scaffold's default settings -> commit ->
``rsi try --agent replay --patch tests/bot/newuser_drop_pass.patch`` (one
round), ``--runs`` times in a row on the same runner, each in a fresh output
dir. Every ``rsi try`` runs as a user types it (``python -m bot.cli``, output
a pipe); its lines are timestamped here as they arrive.

The table: per try, its wall time, the time until B0 was measured (the
calibration, or its reuse from the runner's calibration store), the longest
quiet spell (no output line), the verdict, and whether the calibration was
reused. The calibration store is a fresh temporary dir unless ``--store``
names one, so the first try measures and the later ones may reuse.

    .venv/bin/python benchmarks/try_time.py [--runs 2] [--verify sandbox|inprocess] [--min-gain 0.05]

Targets: every try under 15 minutes on this machine; no quiet spell over 60 s.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "tests" / "bot" / "newuser_target"
PATCH = ROOT / "tests" / "bot" / "newuser_drop_pass.patch"
GIT_ID = {"GIT_AUTHOR_NAME": "Maintainer", "GIT_AUTHOR_EMAIL": "m@example.com",
          "GIT_COMMITTER_NAME": "Maintainer", "GIT_COMMITTER_EMAIL": "m@example.com"}


def _env(store: Path) -> dict[str, str]:
    env = {**os.environ, **GIT_ID, "COLUMNS": "200", "RSI_CALIBRATION_CACHE": str(store)}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, env={**os.environ, **GIT_ID}, check=True,
                   capture_output=True)


def make_repo(parent: Path) -> Path:
    repo = parent / "tinygen"
    shutil.copytree(TARGET, repo)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "tinygen")
    return repo


def rsi_init(repo: Path, env: dict[str, str], min_gain: float) -> None:
    r = subprocess.run([sys.executable, "-m", "bot.cli", "init", "--yes", "--scaffold", "serving",
                        "--serve", "python -m tinygen.server --port $RSI_PORT", "--min-gain",
                        str(min_gain)], cwd=repo, env=env,
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise SystemExit(f"rsi init failed: {r.stderr[-2000:]}")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "rsi init")


def one_try(repo: Path, out: Path, env: dict[str, str], verify: str, limit_s: float,
            echo: bool) -> dict:
    argv = [sys.executable, "-m", "bot.cli", "try", "--agent", "replay", "--patch", str(PATCH),
            "--out", str(out), "--verify", verify]
    t0 = time.monotonic()
    lines: list[tuple[float, str]] = []
    proc = subprocess.Popen(argv, cwd=repo, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    timer = threading.Timer(limit_s, proc.kill)
    timer.start()
    assert proc.stdout is not None
    for line in proc.stdout:
        t = time.monotonic() - t0
        lines.append((t, line.rstrip("\n")))
        if echo:
            print(f"  {t:7.1f}s | {line.rstrip()}", flush=True)
    rc = proc.wait()
    timer.cancel()
    wall = time.monotonic() - t0
    times = [0.0] + [t for t, _ in lines] + [wall]
    quiet = max(b - a for a, b in zip(times, times[1:], strict=False))
    baseline = next((t for t, s in lines if "[baseline]" in s or "[refused]" in s), None)
    text = "\n".join(s for _, s in lines)
    verdict = re.search(r"\[candidate\] #1 (\w+)", text)
    return {"rc": rc, "wall": wall, "baseline": baseline, "quiet": quiet,
            "verdict": verdict.group(1) if verdict else "-",
            "reused": "reusing B0's calibration" in text, "killed": wall >= limit_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=2, help="tries in a row on the same runner")
    ap.add_argument("--verify", default="sandbox", help="sandbox (Docker) | inprocess")
    ap.add_argument("--store", type=Path, default=None, help="the calibration store (default: fresh)")
    ap.add_argument("--limit-s", type=float, default=1800, help="kill a try after this long")
    ap.add_argument("--quiet", action="store_true", help="do not echo the tries' lines")
    ap.add_argument("--min-gain", type=float, default=0.05, help="rsi init --min-gain (its default: 0.05)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rsi-try-time-") as tmp:
        parent = Path(tmp)
        store = args.store or parent / "calibrations"
        env = _env(store)
        repo = make_repo(parent)
        rsi_init(repo, env, args.min_gain)
        rows = []
        for i in range(args.runs):
            print(f"try {i + 1}/{args.runs} ...", flush=True)
            rows.append(one_try(repo, parent / f"out{i}", env, args.verify, args.limit_s,
                                not args.quiet))
    print()
    print(f"rsi try on the scaffolded serving benchmark (tinygen, min_gain {args.min_gain:g}), "
          f"--verify {args.verify}, "
          f"load {os.getloadavg()[0]:.1f} at the end")
    print("| try | exit | wall | B0 measured at | longest quiet | verdict | calibration |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for i, r in enumerate(rows, 1):
        b = f"{r['baseline']:.0f} s" if r["baseline"] is not None else "-"
        print(f"| {i} | {r['rc']}{' (killed)' if r['killed'] else ''} | {r['wall']:.0f} s "
              f"({r['wall'] / 60:.1f} min) | {b} | {r['quiet']:.0f} s | {r['verdict']} | "
              f"{'reused' if r['reused'] else 'measured'} |")
    if len(rows) > 1 and rows[0]["baseline"] is not None and rows[-1]["baseline"] is not None:
        print(f"calibration time saved by reuse: {rows[0]['baseline'] - rows[-1]['baseline']:.0f} s")


if __name__ == "__main__":
    main()
