"""The verifier's error rates through its command line, on a benchmark whose
noise we control: `rsi calibrate` then `rsi verify --calibration`.

The benchmark (a real git repo, run by the real CLI in fresh processes) does no
work: each run reports ``value_s = factor * exp(N(0, sigma))``, drawn from a
seeded generator keyed on a run counter, so that a whole calibrate + verify is
fixed by its seed and never by this machine's timing. ``sigma`` comes from the
CV in a file outside the repo (the "machine"), which the caller changes between
calibration and verification; ``factor`` is the checkout's own (``factor.txt``:
1.0 for the base, e.g. 1.3 for a slower candidate).

Scenarios (an identical candidate unless said otherwise):

* fresh: calibrated and verified at CV 8%;
* stale: calibrated at CV 2%, verified at CV 8% (the machine got 4x noisier);
* quiet: CV 2% throughout (a sanity row).

Usage: python benchmarks/verifier_blackbox.py [--runs 20] [--scenario stale]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BENCH = textwrap.dedent(
    r"""
    import json, math, os, random
    machine = os.environ["NOISE_DIR"]
    cv, seed = open(os.path.join(machine, "cv.txt")).read().split()
    counter = os.path.join(machine, "counter.txt")
    n = int(open(counter).read()) if os.path.exists(counter) else 0
    open(counter, "w").write(str(n + 1))
    factor = float(open("factor.txt").read())
    sigma = math.sqrt(math.log1p(float(cv) ** 2))
    rng = random.Random(int(seed) * 1_000_003 + n)
    value = factor * math.exp(rng.gauss(0.0, sigma))
    json.dump({"metrics": {"value_s": value}}, open(os.environ["RSI_RESULT"], "w"))
    """
)

CONFIG = """
[benchmarks.noisy]
command = "{python} -I -S bench.py"
timeout_s = 30

[benchmarks.noisy.metrics]
value_s = "lower"

[objective]
benchmark = "noisy"
metric = "value_s"
min_gain = {min_gain}

[verifier]
warmup = 0
cross_check = false
default_guards = false

[hidden.env]
NOISE_DIR = "{machine}"
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def make_repo(root: Path, *, min_gain: float = 0.05, slower: float = 1.3) -> tuple[Path, Path]:
    """A git repo with branches main (factor 1.0), same (an identical commit's
    tree) and slow (factor ``slower``); and its machine dir. Returns (repo, machine)."""
    repo, machine = root / "repo", root / "machine"
    repo.mkdir(parents=True)
    machine.mkdir()
    (repo / ".rsi").mkdir()
    (repo / "bench.py").write_text(BENCH)
    (repo / "factor.txt").write_text("1.0\n")
    (repo / ".rsi" / "config.toml").write_text(
        CONFIG.format(python=sys.executable, min_gain=min_gain, machine=machine)
    )
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    _git(repo, "branch", "same")
    _git(repo, "checkout", "-q", "-b", "slow")
    (repo / "factor.txt").write_text(f"{slower}\n")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "slower")
    _git(repo, "checkout", "-q", "main")
    return repo, machine


def set_machine(machine: Path, cv: float, seed: int) -> None:
    """The machine's noise from now on (the run counter goes on)."""
    (machine / "cv.txt").write_text(f"{cv} {seed}\n")


def calibrate_then_verify(
    repo: Path, machine: Path, *, cal_cv: float, cv: float, seed: int, candidate: str = "same"
) -> dict:
    """`calibrate main` at ``cal_cv``, then `verify main CANDIDATE --calibration`
    at ``cv``, through the CLI in this process. Returns the verdict (JSON
    dict), the first line of `verify`'s output and the exit codes."""
    from typer.testing import CliRunner

    from verifier.cli import app

    runner = CliRunner()
    cal, out = machine / f"cal-{seed}.json", machine / f"verdict-{seed}-{candidate}.json"
    (machine / "counter.txt").write_text("0")
    set_machine(machine, cal_cv, seed)
    # the run order is replayed from a fixed seed (the product draws a secret one per
    # verification): with the noise keyed on the run counter, the seed then fixes
    # the whole outcome
    c = runner.invoke(app, ["calibrate", "main", "--repo", str(repo), "--report", str(cal)])
    set_machine(machine, cv, seed)
    v = runner.invoke(
        app,
        ["verify", "main", candidate, "--repo", str(repo), "--calibration", str(cal)]
        + ["--report", str(out), "--seed", "0"],
    )
    if not out.exists():
        raise RuntimeError(f"no verdict: {v.output}\n{v.exception!r}")
    first = next((line for line in v.output.splitlines() if line.strip()), "")
    return dict(
        verdict=json.loads(out.read_text()),
        first_line=first,
        output=v.output,
        calibrate_exit=c.exit_code,
        verify_exit=v.exit_code,
    )


SCENARIOS = {"fresh": (0.08, 0.08), "stale": (0.02, 0.08), "quiet": (0.02, 0.02)}


def table(runs: int, scenarios: list[str], candidate: str = "same") -> None:
    print(
        "| scenario | CV cal -> verify | candidate | runs | accept | reject (slower) "
        "| reject (short) | inconclusive | mean pairs |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name in scenarios:
        cal_cv, cv = SCENARIOS[name]
        counts: Counter = Counter()
        pairs = []
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="rsi-blackbox-") as tmp:
            repo, machine = make_repo(Path(tmp))
            for seed in range(runs):
                r = calibrate_then_verify(
                    repo, machine, cal_cv=cal_cv, cv=cv, seed=seed, candidate=candidate
                )
                v = r["verdict"]
                kind = v["decision"]
                if kind == "reject":
                    kind += " (slower)" if "slower by" in v["reason"] else " (short)"
                counts[kind] += 1
                pairs.append(v["pairs"])
        print(
            f"| {name} | {cal_cv:.0%} -> {cv:.0%} | {candidate} | {runs} | {counts['accept']} | "
            f"{counts['reject (slower)']} | {counts['reject (short)']} | "
            f"{counts['inconclusive']} | {sum(pairs) / len(pairs):.1f} |",
            flush=True,
        )
        print(f"  ({name}: {time.perf_counter() - t0:.0f}s)", file=sys.stderr, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    ap.add_argument("--candidate", default="same", choices=("same", "slow"))
    args = ap.parse_args()
    table(args.runs, args.scenario or ["fresh", "stale"], args.candidate)


if __name__ == "__main__":
    main()
