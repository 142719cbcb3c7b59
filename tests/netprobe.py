"""A listener on this host and a probe script that tries to reach it: the
proof, in tests, that a candidate's server, a client or an agent has no route
to the host (issue 17)."""

from __future__ import annotations

import socket
import textwrap
import threading
import time

import psutil

#: Tries every address a job could reach the host at (each given one, and the
#: default gateway of each of its routes) on the host listener's port.
REACH = textwrap.dedent(
    r"""
    import json, os, socket, struct

    def targets(given):
        out = list(given)
        try:
            for line in open("/proc/net/route").read().splitlines()[1:]:
                gw = int(line.split()[2], 16)
                if gw:
                    out.append(socket.inet_ntoa(struct.pack("<I", gw)))
        except OSError:
            pass
        return sorted(set(out))

    def reach(given, port):
        from concurrent.futures import ThreadPoolExecutor

        def one(host):
            try:
                socket.create_connection((host, port), timeout=3).close()
                return "reached"
            except OSError as e:
                return type(e).__name__

        hosts = targets(given)
        with ThreadPoolExecutor(max_workers=16) as pool:
            return dict(zip(hosts, pool.map(one, hosts)))
    """
)


class HostListener:
    """A TCP listener on this host bound to 0.0.0.0 (a runner service an
    attacker wants), counting the connections it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("0.0.0.0", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[str] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, addr = self.sock.accept()
            except OSError:
                return
            self.accepted.append(addr[0])
            conn.close()

    def addresses(self) -> list[str]:
        """Every IPv4 address of this host but loopback (docker0's among them)."""
        return sorted({a.address for addrs in psutil.net_if_addrs().values() for a in addrs
                       if a.family == socket.AF_INET and not a.address.startswith("127.")})

    def close(self) -> None:
        self.sock.close()

    def wait_for(self, n: int, timeout_s: float = 10.0) -> int:
        """The number of accepted connections once it reaches ``n`` (or the timeout passes):
        the accepting thread records each one after the connecting side returns."""
        deadline = time.monotonic() + timeout_s
        while len(self.accepted) < n and time.monotonic() < deadline:
            time.sleep(0.01)
        return len(self.accepted)

    def sanity_check(self) -> None:
        """This host reaches the listener at its own first address: a probe that
        reaches nothing is telling the truth."""
        socket.create_connection((self.addresses()[0], self.port), timeout=2).close()
        assert self.wait_for(1) == 1
