"""Leak detection against the disguises of tests/harness/test_leaks.py, for
one or two checkouts (issue 30.3: before and after).

For each disguise, a fresh tree holding only that file (and a clean one) is
scanned by the checkout's own ``harness.agents.command.scrub_secrets`` (what
the harness runs on an agent's tree) in a fresh process; the table says
whether the secret was found, the file refused as unscannable, or missed.

    .venv/bin/python benchmarks/leak_disguises.py [--before /work/main]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.harness.test_leaks import DISGUISES, KEY  # noqa: E402

CHILD = r"""
import json, sys, time
from pathlib import Path
from harness.agents.command import scrub_secrets
t0 = time.process_time()
got = scrub_secrets(Path(sys.argv[1]), [sys.argv[2]])
print(json.dumps({"got": got, "cpu_s": time.process_time() - t0}))
"""


def scan(code_root: Path, tree: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(code_root)}
    out = subprocess.run([sys.executable, "-c", CHILD, str(tree), KEY], env=env, capture_output=True,
                         text=True, timeout=600, cwd=tempfile.gettempdir())
    if out.returncode != 0:
        return "crashed: " + (out.stderr.strip().splitlines() or ["?"])[-1][:60]
    res = json.loads(out.stdout)
    got = res["got"]
    what = ("missed" if not got else "refused" if "not scannable" in got[0] else "found")
    return f"{what} ({res['cpu_s']:.2f} s CPU)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, help="another checkout's root (e.g. /work/main)")
    args = ap.parse_args()
    roots = ([("before", args.before)] if args.before else []) + [("after", ROOT)]
    print("| disguise | " + " | ".join(label for label, _ in roots) + " |")
    print("|---|" + "---|" * len(roots))
    for name, make in DISGUISES.items():
        cells = []
        for _label, root in roots:
            with tempfile.TemporaryDirectory(prefix="rsi-leak-") as tmp:
                fn, data = make()
                (Path(tmp) / fn).write_bytes(data)
                (Path(tmp) / "clean.py").write_text("print('hello')\n")
                cells.append(scan(root, Path(tmp)))
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
