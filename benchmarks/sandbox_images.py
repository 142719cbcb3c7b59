"""What images built for the sandbox cost (issue 30): their build time, and the
start time of every container of a run (target: <= 0.5 s).

Build times: each image is built anew under a throwaway tag from the same
inputs (``docker build --no-cache``; the .debs and wheels come from the
cache, as on a CI machine that ran ``scripts/build-images.sh`` before, and
nothing is downloaded unless the cache is empty), then the tag is removed.
``--builds runtime`` (the default) times only the runtime image (this
checkout's packages: what a change to the code rebuilds); ``--builds agents``
the agents image (the presets' venvs and claude-code's and codex's native
binaries), ``--builds agents-cached`` the same without ``--no-cache`` (what a
new npm pin rebuilds: the venvs' layers are reused); ``--builds all`` also
the python image (Debian's Python + rsi-bot's dependencies with torch) and
the agents image: minutes on two busy cores. ``--builds env`` times the
target's own environment (``images.target_image``, issue 30) built on the
runtime image, from a requirements file (one local wheel: no index) and from
a Dockerfile (``FROM ${RSI_RUNTIME}`` plus a file), each first built and then
found again by its digest, and adds the start rows of its containers.

Start times, per container (median and max of ``--runs``), on the runtime and
agents images, and for comparison on the base image (117 MB, no Python: what
the old way started, with the host's Python mounted):

* ``sandbox.run``: create -> running (``SandboxResult.start_s``, an agent's
  container; the job is ``true``);
* the verifier's job container (``ContainerIsolation.start``): create, start,
  cgroup found, the command exec'd;
* a whole verifier job running ``python3 -c pass`` (start to removal).

    .venv/bin/python benchmarks/sandbox_images.py [--runs 10] [--builds runtime|all|none]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness import images, sandbox  # noqa: E402
from harness.spec import RunnerProfile  # noqa: E402
from verifier.isolation import ContainerIsolation, IsolationSpec, Job  # noqa: E402


def timed_builds(which: str) -> list[tuple[str, float, str]]:
    python = images.python_tag(images._base_id())
    rows = []
    steps = [("runtime", lambda tag: images.build_runtime(python, tag=tag, no_cache=True))]
    if which in ("agents", "agents-cached"):
        steps = [(which, lambda tag: images.build_agents(python, tag=tag, no_cache=which == "agents"))]
    if which == "all":
        steps = [("python", lambda tag: images.build_python(tag=tag, no_cache=True)),
                 ("agents", lambda tag: images.build_agents(python, tag=tag, no_cache=True)), *steps]
    for name, build in steps:
        tag = f"rsi-bot/bench-{name}:{uuid.uuid4().hex[:8]}"
        t0 = time.perf_counter()
        build(tag)
        took = time.perf_counter() - t0
        size = subprocess.run(["docker", "image", "inspect", "--format", "{{.Size}}", tag],
                              capture_output=True, text=True).stdout.strip()
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)
        rows.append((name, took, f"{int(size) / 2**20:.0f} MiB" if size.isdigit() else "?"))
    return rows


def env_builds(workdir: Path) -> tuple[list[tuple[str, float, str]], str]:
    """The target's environment built (then found again) from a requirements
    file and from a Dockerfile; the rows, and the requirements image's tag."""
    from tests.harness.target import wheel

    on = images.ensure_runtime()
    tree = workdir / "b0"
    (tree / "env").mkdir(parents=True)
    wheel(tree / "env", "bench")
    (tree / "env" / "requirements.txt").write_text("./rsienvdep-1.0-py3-none-any.whl\n")
    (tree / "env" / "bench.Dockerfile").write_text("ARG RSI_RUNTIME\nFROM ${RSI_RUNTIME}\nCOPY requirements.txt /opt/\n")
    rows, tags = [], []
    for decl in ("env/requirements.txt", "env/bench.Dockerfile"):
        subprocess.run(["docker", "rmi", "-f", images.env_tag(decl, tree, on)], capture_output=True)
        for what in ("built", "found by digest"):
            t0 = time.perf_counter()
            tag = images.target_image(decl, tree, on)
            rows.append((f"env {decl} ({what})", time.perf_counter() - t0, ""))
        tags.append(tag)
    subprocess.run(["docker", "rmi", "-f", tags[1]], capture_output=True)
    return rows, tags[0]


def sandbox_starts(image: str, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        res = sandbox.run(sandbox.SandboxJob(command=["true"], timeout_s=60), RunnerProfile(image=image))
        if not res.ok:
            raise SystemExit(f"sandbox.run on {image} failed: {res.error or res.output}")
        out.append(res.start_s)
    return out


def verifier_starts(image: str, runs: int) -> tuple[list[float], list[float]]:
    iso = ContainerIsolation(IsolationSpec.simple(image, cpus=1, memory="1g"))
    starts, whole = [], []
    with tempfile.TemporaryDirectory() as tmp:
        checkout = Path(tmp)
        for _ in range(runs):
            t0 = time.perf_counter()
            handle = iso.start(Job("python3 -c pass" if image != images.BASE_IMAGE else "true", checkout,
                                   timeout_s=60))
            starts.append(time.perf_counter() - t0)
            res = handle.wait()
            whole.append(time.perf_counter() - t0)
            if res.returncode != 0:
                raise SystemExit(f"a verifier job on {image} failed: {res.stderr_tail or res.error}")
    iso.close()
    return starts, whole


def row(label: str, values: list[float]) -> str:
    return f"| {label} | {statistics.median(values):.3f} | {max(values):.3f} | {len(values)} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--builds", choices=("runtime", "agents", "agents-cached", "env", "all", "none"),
                    default="runtime")
    args = ap.parse_args()
    runtime = images.ensure_runtime()
    agents = images.agents_image()
    env = None
    workdir = tempfile.TemporaryDirectory()
    if args.builds != "none":
        print("| image built anew (--no-cache, but agents-cached) | seconds | size |\n| --- | --- | --- |")
        rows: list[tuple[str, float, str]] = []
        if args.builds == "env":
            rows, env = env_builds(Path(workdir.name))
        else:
            rows = timed_builds(args.builds)
        for name, took, size in rows:
            print(f"| {name} | {took:.1f} | {size} |")
        print()
    print("| container start | median s | max s | runs |\n| --- | --- | --- | --- |")
    for label, image in (("runtime", runtime), ("agents", agents)):
        print(row(f"sandbox.run create->running, {label}", sandbox_starts(image, args.runs)), flush=True)
    verifier_images = [("base (no Python)", images.BASE_IMAGE), ("runtime", runtime)]
    if env:
        verifier_images.append(("target's environment", env))
    for label, image in verifier_images:
        starts, whole = verifier_starts(image, args.runs)
        print(row(f"verifier job create->exec'd, {label}", starts), flush=True)
        print(row(f"verifier job whole ({'true' if image == images.BASE_IMAGE else 'python3 -c pass'}), {label}",
                  whole), flush=True)
    print(f"\nruntime image: {runtime}\nagents image: {agents}")
    if env:
        subprocess.run(["docker", "rmi", "-f", env], capture_output=True)
    workdir.cleanup()


if __name__ == "__main__":
    main()
