"""Attack (issue 30, low): a daemon our scripts start keeps its caller's descriptors.

``scripts/setup-docker.sh`` started ``dockerd`` with every descriptor the
calling script held open: a lock the caller held stayed held for the daemon's
whole life (and a pipe the caller read never saw its end). The daemons now
start through ``scripts/without-fds.sh``, which closes every descriptor above
2 before it execs them. Each test holds a real ``flock`` on a descriptor of a
calling shell, starts a long-lived stand-in daemon the way the scripts do,
lets the caller exit, and takes the lock again from a fresh open.
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WITHOUT_FDS = ROOT / "scripts" / "without-fds.sh"

CALLER = """
exec 9>"$LOCK"
flock 9                                # the calling script's lock, held on fd 9
exec 7>"$PIPE_END"                     # and some other descriptor of its own
{start} sleep 60 >/dev/null 2>&1 &     # the daemon, started as the scripts start theirs
echo "DAEMON $!"
"""


def run_caller(tmp_path: Path, start: str) -> int:
    """Run the calling script to its end; the stand-in daemon's pid."""
    env = {"PATH": os.environ["PATH"], "LOCK": str(tmp_path / "lock"), "PIPE_END": str(tmp_path / "pipe")}
    out = subprocess.run(["bash", "-c", CALLER.format(start=start)], env=env, capture_output=True, text=True,
                         timeout=30, check=True)
    m = re.search(r"DAEMON (\d+)", out.stdout)
    assert m, out
    return int(m.group(1))


def lock_is_free(path: Path) -> bool:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def held(pid: int, path: Path) -> list[str]:
    fds = Path(f"/proc/{pid}/fd")
    return [p.name for p in fds.iterdir() if os.path.realpath(p) == str(path)]


def stop(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.parametrize(("start", "keeps"), [("", True), (f"bash {WITHOUT_FDS}", False)],
                         ids=["inherited (before)", "without-fds.sh"])
def test_a_daemon_holds_none_of_its_callers_descriptors(tmp_path: Path, start: str, keeps: bool):
    pid = run_caller(tmp_path, start)
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0] != b"sleep":
            assert time.monotonic() < deadline, "the stand-in daemon did not start"
            time.sleep(0.02)
        # the caller has exited: only the daemon can still hold its lock
        assert lock_is_free(tmp_path / "lock") is not keeps
        assert bool(held(pid, tmp_path / "lock")) is keeps
        assert bool(held(pid, tmp_path / "pipe")) is keeps
        assert sorted(int(p.name) for p in Path(f"/proc/{pid}/fd").iterdir())[:3] == [0, 1, 2]
    finally:
        stop(pid)


def test_without_fds_refuses_no_command():
    out = subprocess.run(["bash", str(WITHOUT_FDS)], capture_output=True, text=True, timeout=10)
    assert out.returncode == 2 and "usage" in out.stderr


def test_the_setup_scripts_start_their_daemons_without_our_descriptors():
    """Where the scripts start a daemon, they start it through without-fds.sh."""
    docker = (ROOT / "scripts" / "setup-docker.sh").read_text()
    postgres = (ROOT / "scripts" / "setup-postgres.sh").read_text()
    starts = [line for line in docker.splitlines() if re.search(r"\bdockerd\b.*&\s*\)?\s*$", line)]
    assert starts and all("without-fds.sh" in line for line in starts), starts
    starts = [line for line in postgres.splitlines() if "pg_ctlcluster" in line and " start" in line]
    assert starts and all("without-fds.sh" in line for line in starts), starts
