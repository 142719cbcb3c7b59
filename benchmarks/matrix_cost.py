"""What tiny-tts's deployment matrix costs per accepted candidate (issue 22).

The shipped ``[benchmarks.tts.matrix]`` (concurrency 2 | 4, ``pairs = 2``)
adds one cell to every verification whose primary cell accepts: ``pairs``
pairs of Bk and the candidate (and B0 once it differs from Bk) at 4 streams.
This measures every cell of the real tiny-tts (torch) for Bk = the example and
a candidate = the example with a demo patch, with ``verifier.cells.
measure_matrix`` (process isolation, the shipped guards and hidden seed), and
prints each cell's wall time, its gain and its guards, then the report's cell
table. The secondary cell's time is what the matrix adds to each accepted
candidate of the demo (the primary's is the verification's own).

    .venv/bin/python benchmarks/matrix_cost.py [--patch examples/demo-patches/02-...patch]
                                               [--pairs 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.report import render_matrix_table  # noqa: E402
from harness.spec import build_task  # noqa: E402
from harness.tomlout import dump_toml  # noqa: E402
from verifier.cells import measure_matrix  # noqa: E402
from verifier.verdict import Decision, Verdict  # noqa: E402

EXAMPLE = ROOT / "examples" / "tiny-tts"
PATCH = ROOT / "examples" / "demo-patches" / "02-cache-speaker-embedding.patch"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--patch", type=Path, default=PATCH)
    p.add_argument("--pairs", type=int, default=None, help="default: the matrix's own")
    args = p.parse_args()
    os.environ.setdefault("TTS_EVAL_SEED", "4242")
    tmp = Path(tempfile.mkdtemp(prefix="rsi-matrix-cost-"))
    try:
        bk, cand = tmp / "bk", tmp / "cand"
        for d in (bk, cand):
            shutil.copytree(EXAMPLE, d, ignore=shutil.ignore_patterns("__pycache__"))
        subprocess.run(["git", "apply", str(args.patch.resolve())], cwd=cand, check=True)
        data = tomllib.loads((EXAMPLE / ".rsi" / "config.toml").read_text())
        bench = data["benchmarks"]["tts"]
        for key in ("serve", "client", "evaluator"):
            bench[key] = bench[key].replace("python ", f"{sys.executable} ", 1)
        config = build_task(dump_toml(data), None, "matrix-cost").verify
        t0 = time.perf_counter()
        run = measure_matrix(bk, cand, config, pairs=args.pairs)
        total = time.perf_counter() - t0
        if run.error is not None:
            print(f"error: {run.error.stage}: {run.error.message}", file=sys.stderr)
            return 2
        for c in run.cells:
            print(f"{c.label:<20} {'primary' if c.primary else 'secondary':<9} pairs {c.pairs}  "
                  f"{c.duration_s:6.1f} s  gain {c.gain:+.1%}  "
                  f"failed: {', '.join(g.name for g in c.failed) or 'none'}")
        print(f"all cells: {total:.1f} s, {run.runs} runs ({os.getloadavg()[0]:.1f} load)")
        verdict = Verdict(schema="rsi.verdict/1", decision=Decision.ACCEPT, reason="",
                          cells=tuple(run.cells))
        print(render_matrix_table(verdict))
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
