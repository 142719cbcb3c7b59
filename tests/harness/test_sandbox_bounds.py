"""Attack test (issue 18, point 3): an agent that prints without end fills
neither the host's disk (docker's log of its container is capped) nor the
worker's memory (its output is read as a bounded tail)."""

from __future__ import annotations

import os
import threading
import tracemalloc
import uuid

import pytest

from harness import sandbox
from harness.sandbox import SandboxJob, parse_memory
from harness.spec import RunnerProfile

FLOOD_MIB = 100


def watch_log_size(name: str, stop: threading.Event, seen: list[int]) -> None:
    """The largest size docker's log file of container ``name`` reached."""
    client = sandbox.docker_client()
    while not stop.is_set():
        try:
            path = client.api.inspect_container(name)["LogPath"]
            if path:  # the live file and its rotated predecessors
                seen.append(sum(os.path.getsize(p) for p in (path, *(f"{path}.{i}" for i in range(1, 9)))
                                if os.path.exists(p)))
        except Exception:  # noqa: BLE001 - not created yet, or already removed
            pass
        stop.wait(0.05)


@pytest.mark.docker
def test_an_agent_printing_100_mib_fills_neither_the_docker_log_nor_the_worker():
    name = f"rsi-flood-{uuid.uuid4().hex[:10]}"
    # 100 MiB of output in 1 KiB lines, then a last line the reader must still get
    cmd = f"yes $(printf '%01023d' 0) | head -c {FLOOD_MIB * 1024 * 1024}; echo THE-END"
    job = SandboxJob(command=["/bin/sh", "-c", cmd], name=name, timeout_s=300)
    stop, sizes = threading.Event(), []
    watcher = threading.Thread(target=watch_log_size, args=(name, stop, sizes), daemon=True)
    watcher.start()
    tracemalloc.start()
    try:
        res = sandbox.run(job, RunnerProfile(), max_output=200_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        stop.set()
        watcher.join()
    assert res.ok, res.error
    cap = 8 * 1024 * 1024
    assert parse_memory(sandbox.LOG_MAX_SIZE) * sandbox.LOG_MAX_FILES == cap
    assert sizes, "docker's log file was never seen (is the engine on this host?)"
    assert max(sizes) <= cap + 256 * 1024, max(sizes)  # a json-file entry over
    # the worker never held the output whole (it was 100 MiB; the old reader held it all)
    assert peak < 32 * 1024 * 1024, peak
    assert res.output.rstrip().endswith("THE-END")  # the tail is what is kept
    assert len(res.output) < 200_000 + 100 and res.output_cut > 0
    # docker rotated its log away at the cap: what was left to read is under it
    assert res.output_cut + 200_000 <= cap
