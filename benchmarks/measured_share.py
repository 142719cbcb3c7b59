"""The share of a verification's wall time spent in measured windows (issue 33, item 1).

A verification's runs, as the judge makes them (``verifier.measure.Session``:
setup, warm-up, ABBA pairs of two arms, every run on a fresh export, a serving
run = the candidate's server started, made ready, then the protected client),
on two serving fixtures:

* ``slowstart``: benchmarks/fixtures/slowstart, a server that loads for 20 s
  (``--load-s``) before it answers, then 16 requests;
* ``tiny-tts``: the demo's target (examples/tiny-tts), with its hidden seed.

Both arms are the same checkout (the runs' cost does not depend on the
verdict). Per fixture: the runs, the verification's wall time, the time in
measured windows (each measured run's ``wall_s``: the client's load window),
its share, and the time spent starting servers (``startup_s``, once per
server start of a measured run or session).

``--runs-per-start 1,8``: a row per K (``[benchmarks.<b>] runs_per_start``:
K measured client runs per server start; a pair is then a session pair). K > 1
needs hidden inputs: the row adds ``[hidden] seed`` (a fresh one) to the
fixture's config (slowstart's client draws its prompts from ``RSI_SEED``).

    .venv/bin/python benchmarks/measured_share.py [--fixtures slowstart,tiny-tts] [--pairs 6]
        [--load-s 20] [--requests 16] [--isolation process|container] [--runs-per-start 1,8]

``--isolation container``: every job in a container of the runtime image (the
sandbox verifier's), 2 CPUs and 4 GiB (the demo's runner profile), a fresh
container per server, client and evaluator, as a verification runs them.

Targets (issue 33): >= 70% on slowstart and >= 60% on tiny-tts once several
client runs share one server start; today every run starts its own server.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from verifier.config import VerifyConfig  # noqa: E402
from verifier.isolation import from_options  # noqa: E402
from verifier.measure import Session, hidden_env  # noqa: E402

FIXTURES = {"slowstart": ROOT / "benchmarks" / "fixtures" / "slowstart",
            "tiny-tts": ROOT / "examples" / "tiny-tts"}


def measure(name: str, pairs: int, load_s: float, isolation: str, tmp: Path, k: int = 1,
            requests: int | None = None) -> dict:  # fmt: skip
    src = tmp / f"{name}-k{k}"
    shutil.copytree(FIXTURES[name], src, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    text = (src / ".rsi" / "config.toml").read_text()
    if name == "slowstart":
        text = text.replace("--load-s 20", f"--load-s {load_s:g}")
        if requests:  # a longer load window per run
            text = text.replace("requests = 16", f"requests = {requests}")
    if k > 1 and "[hidden]" not in text:
        text += f"\n[hidden]\nseed = {secrets.randbelow(2**31)}\n"
    config = VerifyConfig.from_toml(text)
    # the primary cell's runs (a verification's sequential test); a matrix's
    # other cells are measured the same way after an accept
    bench = config.benchmark(config.objective.benchmark).model_copy(update={"runs_per_start": k})
    v = config.verifier
    seed_env = config.hidden.seed_env
    if seed_env and not os.environ.get(seed_env):
        os.environ[seed_env] = str(secrets.randbelow(2**31))
    env, drop = hidden_env(config)
    windows: list[float] = []
    starts: list[float] = []

    def on_run(arm, rec, index) -> None:
        windows.append(rec.wall_s)
        if not rec.extra.get("session_run"):  # a session's startup_s is one start
            starts.append(rec.startup_s or 0.0)

    iso = None
    if isolation != "process":  # the runtime image, as a sandbox verifier's jobs use it
        from harness.images import ensure_runtime

        iso = from_options(isolation, image=ensure_runtime(), cpus=2.0, memory="4g")  # the demo's profile
    t0 = time.monotonic()
    with Session(bench, {"a": src, "b": src}, seed=None, extra_env=env, drop_env=drop, on_run=on_run,
                 isolation=iso, base_checkout=src) as s:
        err = s.setup() or s.warmup(v.warmup) or s.add_pairs(pairs)
        runs = s.runs
    wall = time.monotonic() - t0
    if iso is not None:
        iso.close()
    if err is not None:
        raise SystemExit(f"{name}: {err.message}\n{err.stderr_tail[-2000:]}")
    return {"fixture": name, "k": k, "runs": runs, "measured_runs": len(windows), "wall": wall,
            "measured": sum(windows), "startup": sum(starts),
            "share": sum(windows) / wall if wall else 0.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fixtures", default="slowstart,tiny-tts")
    ap.add_argument("--pairs", type=int, default=6, help="ABBA pairs (a verification stops at 6 or more)")
    ap.add_argument("--load-s", type=float, default=20.0, help="slowstart's model load")
    ap.add_argument("--isolation", default="process", help="process | container")
    ap.add_argument("--requests", type=int, default=None, help="slowstart's requests per run (16)")
    ap.add_argument("--runs-per-start", default="1",
                    help="comma-separated K values (runs_per_start), a row each")
    args = ap.parse_args()
    ks = [int(x) for x in args.runs_per_start.split(",")]
    bindir = str(Path(sys.executable).parent)
    os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    rows = []
    with tempfile.TemporaryDirectory(prefix="rsi-share-") as tmp:
        for name in args.fixtures.split(","):
            for k in ks:
                print(f"{name}, runs_per_start = {k} ...", flush=True)
                rows.append(measure(name, args.pairs, args.load_s, args.isolation, Path(tmp), k,
                                    args.requests))
    print()
    print(f"measured share of a verification's wall time: {args.pairs} pairs + warm-up, "
          f"--load-s {args.load_s:g}{f' --requests {args.requests}' if args.requests else ''}, "
          f"--isolation {args.isolation}, load {os.getloadavg()[0]:.1f} at the end")
    print("| fixture | runs_per_start | runs (measured) | wall | in measured windows | share "
          "| starting servers |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['fixture']} | {r['k']} | {r['runs']} ({r['measured_runs']}) | {r['wall']:.0f} s | "
              f"{r['measured']:.0f} s | {r['share']:.0%} | {r['startup']:.0f} s |")


if __name__ == "__main__":
    main()
