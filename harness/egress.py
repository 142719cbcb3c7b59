"""The agent's only way out: an egress proxy that reaches the allowed hosts only.

An agent container has no network unless its runner profile names the hosts
it may reach (``allowed_hosts``, e.g. its model API). Then :class:`Egress`
sets up, for that one run:

* an ``--internal`` docker network whose bridge has no host address
  (``com.docker.network.bridge.inhibit_ipv4``, :data:`NO_HOST_ADDRESS`):
  nothing on it is routable beyond its members, link-local metadata
  addresses and the host included. A plain ``--internal`` network is not
  enough: the host holds its gateway address, so its members reach every
  service on the host bound to ``0.0.0.0`` (and through the host's INPUT
  chain, docker0's address too), around the proxy. :func:`check_no_host_address`
  refuses a network the engine gave a host address anyway;
* a tinyproxy container (Debian's package, in ``rsi-bot/egress:bookworm``,
  built by ``scripts/setup-docker.sh``) on that network and on the upstream
  network(s) (the default bridge unless told otherwise), with a filter that
  denies every host except the allowed ones (``FilterDefaultDeny``), CONNECT
  only to port 443;
* for the agent: the internal network's name and ``HTTP(S)_PROXY`` pointing at
  the proxy (:class:`EgressInfo`, consumed by ``sandbox.container_kwargs``).

Everything is removed when the run ends. :func:`tinyproxy_config` and
:func:`host_pattern` are pure (tested on their text).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.containers import docker_client
from harness.sections import check_hosts as check_hosts  # where the profile checks its hosts

EGRESS_IMAGE = os.environ.get("RSI_EGRESS_IMAGE", "rsi-bot/egress:bookworm")
PROXY_PORT = 8888
PROXY_ALIAS = "rsi-egress"
LABEL = "rsi-bot.egress"


class EgressError(RuntimeError):
    """The proxy could not be set up (image missing, engine error)."""


NO_HOST_ADDRESS = {"com.docker.network.bridge.inhibit_ipv4": "true"}
"""Driver options of the agent's network: docker gives the host no address on its bridge."""


def check_no_host_address(network: Any) -> None:
    """Raise EgressError when this host holds an address of ``network``'s
    subnets (its gateway): the agent would reach the host around the proxy.
    Seen from this process's network namespace: run the harness on the host
    (a harness in a container of its own cannot see the host's interfaces)."""
    import ipaddress
    import socket

    import psutil

    network.reload()
    nets = [ipaddress.ip_network(c["Subnet"], strict=False)
            for c in (network.attrs.get("IPAM") or {}).get("Config") or [] if c.get("Subnet")]
    held = [a.address for addrs in psutil.net_if_addrs().values() for a in addrs
            if a.family in (socket.AF_INET, socket.AF_INET6)
            and any(ipaddress.ip_address(a.address.split("%")[0]) in n for n in nets)]
    if held:
        raise EgressError(f"the docker engine gave this host the address {held[0]} on the agent's "
                          "network, so an agent would reach the host around the proxy: use a "
                          "docker engine whose bridge driver honours "
                          "com.docker.network.bridge.inhibit_ipv4 (docker >= 1.13)")


def agent_network(client: Any) -> Any:
    """The one function that makes a network an agent or a candidate joins:
    ``--internal``, no host address on its bridge (:data:`NO_HOST_ADDRESS`), no
    IPv6, checked (:func:`check_no_host_address`) before anyone joins it, and
    removed again when the check fails. It takes no options: no caller, preset
    or host list can ask for one without these. Everything else that starts a
    container for an agent or a candidate gives it ``network_mode="none"`` (or
    a server's own loopback-only namespace, in the verifier)."""
    network = client.networks.create(f"rsi-egress-{uuid.uuid4().hex[:12]}", driver="bridge",
                                     internal=True, enable_ipv6=False, options=dict(NO_HOST_ADDRESS),
                                     labels={LABEL: "1"})
    try:
        check_no_host_address(network)
        opts = network.attrs.get("Options") or {}
        if not network.attrs.get("Internal") or any(opts.get(k) != v for k, v in NO_HOST_ADDRESS.items()):
            raise EgressError(f"the docker engine made the agent's network {network.name} without "
                              f"--internal or {', '.join(NO_HOST_ADDRESS)}: refusing it")
    except BaseException:
        discard(network=network)
        raise
    return network


@dataclass(frozen=True)
class EgressInfo:
    network: str
    """The internal network the agent container joins (and nothing else)."""
    proxy_url: str
    """``http://rsi-egress:8888``: what HTTP(S)_PROXY says ("" when no host but the
    model gateway's is allowed: the network then has no proxy at all)."""

    def environment(self) -> dict[str, str]:
        env: dict[str, str] = {}
        if not self.proxy_url:
            return env
        for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            env[k] = self.proxy_url
        env["NO_PROXY"] = env["no_proxy"] = "localhost,127.0.0.1"
        return env


def host_pattern(host: str) -> str:
    """The extended regular expression tinyproxy's filter matches the host with."""
    if host.startswith("*."):
        return r"^([a-z0-9-]+\.)+" + re.escape(host[2:]).replace(r"\-", "-") + "$"
    return "^" + re.escape(host).replace(r"\-", "-") + "$"


def tinyproxy_config(hosts: Sequence[str], *, filter_path: str, port: int = PROXY_PORT) -> str:
    """tinyproxy.conf for a proxy that reaches ``hosts`` only."""
    if not hosts:
        raise ValueError("an egress proxy needs at least one allowed host")
    return "\n".join([
        f"Port {port}",
        "Listen 0.0.0.0",
        "Timeout 600",
        "MaxClients 64",
        "LogLevel Info",
        "DisableViaHeader Yes",
        f'Filter "{filter_path}"',
        "FilterType ere",
        "FilterURLs Off",
        "FilterDefaultDeny Yes",
        "ConnectPort 443",
        "",
    ])


class Egress:
    """``with Egress(hosts) as info:`` the internal network and its proxy, for one run."""

    def __init__(self, hosts: Sequence[str], *, client=None,
                 upstream_networks: Sequence[str] = ("bridge",), image: str = EGRESS_IMAGE,
                 ready_timeout_s: float = 20.0):
        self.hosts = check_hosts(hosts)  # none: the internal network only (the model gateway's)
        self.client = client
        self.upstream = list(upstream_networks)
        self.image = image
        self.ready_timeout_s = ready_timeout_s
        self.network: Any = None  # docker SDK objects (untyped)
        self.container: Any = None
        self.confdir: str | None = None

    def __enter__(self) -> EgressInfo:
        try:
            return self._start()
        except Exception as exc:
            self.close()
            raise EgressError(f"could not start the egress proxy: {exc}") from exc

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> EgressInfo:
        if self.client is None:
            self.client = docker_client()
        self.network = agent_network(self.client)
        if not self.hosts:  # the model gateway's network only: no proxy on it
            return EgressInfo(network=self.network.name, proxy_url="")
        self.confdir = tempfile.mkdtemp(prefix="rsi-egress-")
        os.chmod(self.confdir, 0o755)
        with open(os.path.join(self.confdir, "filter"), "w") as fh:
            fh.write("\n".join(host_pattern(h) for h in self.hosts) + "\n")
        with open(os.path.join(self.confdir, "tinyproxy.conf"), "w") as fh:
            fh.write(tinyproxy_config(self.hosts, filter_path="/etc/rsi-egress/filter"))
        for name in ("filter", "tinyproxy.conf"):
            os.chmod(os.path.join(self.confdir, name), 0o644)
        tag = self.network.name.removeprefix("rsi-egress-")
        self.container = self.client.containers.create(
            self.image, ["tinyproxy", "-d", "-c", "/etc/rsi-egress/tinyproxy.conf"],
            name=f"rsi-egress-{tag}", user="65534:65534", cap_drop=["ALL"],
            security_opt=["no-new-privileges"], read_only=True,
            tmpfs={"/tmp": "rw,size=16m", "/run": "rw,size=1m"}, mem_limit=128 * 1024**2,
            pids_limit=64, network=self.upstream[0], labels={LABEL: "1"}, detach=True,
            volumes={self.confdir: {"bind": "/etc/rsi-egress", "mode": "ro"}})
        for extra in self.upstream[1:]:
            self.client.networks.get(extra).connect(self.container)
        self.network.connect(self.container, aliases=[PROXY_ALIAS])
        self.container.start()
        self._wait_ready()
        return EgressInfo(network=self.network.name,
                          proxy_url=f"http://{PROXY_ALIAS}:{PROXY_PORT}")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            self.container.reload()
            if self.container.status not in ("created", "running"):
                raise EgressError(f"tinyproxy exited: {self.container.logs()[-2000:]!r}")
            if b"listening on" in self.container.logs().lower() or \
                    b"accepting connections" in self.container.logs().lower():
                return
            time.sleep(0.1)
        raise EgressError("tinyproxy did not start listening in time")

    def close(self) -> None:
        discard(self.container, self.network)
        self.container = self.network = None
        if self.confdir:
            shutil.rmtree(self.confdir, ignore_errors=True)
            self.confdir = None


def discard(container: Any = None, network: Any = None) -> None:
    """Remove a container, then its network; best effort (both carry labels that
    a later cleanup finds)."""
    try:
        if container is not None:
            container.remove(force=True)
    except Exception:  # noqa: BLE001 - best effort; labelled for cleanup
        pass
    try:
        if network is not None:
            network.remove()
    except Exception:  # noqa: BLE001
        pass
