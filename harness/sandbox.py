"""The sandbox: one Docker container per job, through the docker SDK.

Every container runs as uid 1000 with all capabilities dropped,
no-new-privileges, a read-only root filesystem (``/tmp`` is a tmpfs), CPU,
memory (no swap) and pid limits, and no network unless the job asks for it
(the runner profile decides for agents; verifier jobs never get it). A
wall-clock limit kills it; it is always removed. :func:`run` returns a
:class:`SandboxResult` for every outcome (exit code, output, timed out, OOM
killed, or the error that kept it from running): it does not raise.

Nothing of the host is mounted but what the job names (an agent's tree, its
TASK.md and scratch dir): the container's Python comes from its image
(:func:`harness.images.sandbox_image`: the default base image, which has no
Python, becomes the runtime image built for the sandbox; a profile's own
image is used as it is).

:func:`container_kwargs` is a pure function of the job and the profile (and of
the device nodes present, passed in), so the accelerator wiring can be tested
without accelerators:

* network: none (``network_mode="none"``) unless the job asks for it; then
  only the network :func:`harness.egress.agent_network` made (the one
  function that makes an agent's network: internal, no host address on its
  bridge, checked; the host is out of reach), with the egress proxy that
  reaches the profile's ``allowed_hosts`` other than the model gateway's
  upstream (``HTTP(S)_PROXY`` set) and the model gateway when the run has one.
  A job asking for network without them is refused;
* ``cpu``: nothing;
* ``cuda``: ``device_requests`` for the profile's GPU ids (they must be named);
* ``npu``: ``/dev/davinci<N>`` for the profile's indices (they must be named),
  ``/dev/davinci_manager``, ``/dev/devmm_svm``, ``/dev/hisi_hdc``, and the driver
  mounts ``/usr/local/Ascend/driver``, ``/usr/local/dcmi``,
  ``/usr/local/bin/npu-smi`` (read-only).
"""

from __future__ import annotations

import glob
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel, Field

from harness.containers import Mount as Mount
from harness.containers import docker_client as docker_client
from harness.containers import python_executable as python_executable
from harness.containers import sandbox_path as sandbox_path
from harness.egress import Egress, EgressInfo
from harness.gateway import ALIAS as GATEWAY_ALIAS
from harness.gateway import Gateway, GatewayRoute, check_allowed_hosts, upstream_host
from harness.images import ensure_runtime, sandbox_image
from harness.leaks import redact as _redact
from harness.sections import RunnerProfile, no_wildcard_over_model_api

SANDBOX_UID = "1000:1000"
NPU_CONTROL_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
NPU_DRIVER_MOUNTS = ("/usr/local/Ascend/driver", "/usr/local/dcmi", "/usr/local/bin/npu-smi")
LABEL = "rsi-bot.sandbox"
LOG_MAX_SIZE = "4m"
LOG_MAX_FILES = 2
"""Docker's log of a sandbox container is capped at LOG_MAX_FILES files of
LOG_MAX_SIZE (the oldest rotated away): an agent printing without end cannot
fill the host's disk, and the last LOG_MAX_SIZE at least is always there to read."""
LINE_CAP = 64 * 1024
"""A streamed line longer than this is delivered in pieces (never held whole)."""

log = logging.getLogger(__name__)


class SandboxJob(BaseModel):
    command: list[str]
    """argv; run as is (wrap in ``["/bin/sh", "-c", ...]`` for a shell)."""
    mounts: list[Mount] = Field(default_factory=list)
    workdir: str = "/tmp"
    env: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = 600
    network: bool = False
    name: str = ""
    tmpfs_size: str = "512m"


class SandboxResult(BaseModel):
    exit_code: int | None = None
    output: str = ""
    timed_out: bool = False
    oom_killed: bool = False
    duration_s: float = 0.0
    start_s: float = 0.0
    """Time from create to running (the harness's overhead)."""
    error: str | None = None
    """Why the container could not run (image missing, engine down...)."""
    output_cut: int = 0
    """Bytes of output not kept (only the last ``max_output`` are read)."""
    gateway: dict[str, Any] | None = None
    """The model gateway's meter of the run (:mod:`harness.gateway`), when one ran."""
    redacted: bool = False
    """A secret (or a disguise of one) was removed from the output."""

    @property
    def ok(self) -> bool:
        return self.error is None and not self.timed_out and self.exit_code == 0


def parse_memory(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", text.lower())
    if not m:
        raise ValueError(f"memory '{text}': write e.g. 512m or 4g")
    mult = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}[m.group(2)]
    return int(float(m.group(1)) * mult)


def present_npu_devices() -> list[str]:
    return sorted(p for p in glob.glob("/dev/davinci*") if re.fullmatch(r"/dev/davinci\d+", p))


def container_kwargs(
    job: SandboxJob,
    profile: RunnerProfile,
    *,
    npu_devices_present: Iterable[str] = (),
    paths_present: Iterable[str] | None = None,
    egress: EgressInfo | None = None,
) -> dict[str, Any]:
    """The keyword arguments for ``client.containers.create`` (pure). Raises
    ``ValueError`` for a job that wants network without an ``egress`` proxy, or an
    accelerator profile that does not name its devices."""
    from docker.types import DeviceRequest

    mem = parse_memory(profile.memory)
    env = {
        "HOME": "/tmp/home",
        "PATH": sandbox_path(),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        **profile.env,
        **job.env,
    }
    volumes: dict[str, dict[str, str]] = {}
    for m in job.mounts:
        volumes[m.source] = {"bind": m.target, "mode": "ro" if m.read_only else "rw"}
    kw: dict[str, Any] = {
        "image": profile.image,
        "command": list(job.command),
        "working_dir": job.workdir,
        "environment": env,
        "user": SANDBOX_UID,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "read_only": True,
        "tmpfs": {"/tmp": f"rw,exec,nosuid,size={job.tmpfs_size},mode=1777"},
        "mem_limit": mem,
        "memswap_limit": mem,
        "nano_cpus": int(profile.cpus * 1e9),
        "pids_limit": profile.pids,
        "volumes": volumes,
        "labels": {LABEL: "1"},
        "detach": True,
        "stdin_open": False,
        "tty": False,
        "init": True,
        "log_config": {"type": "json-file", "config": {"max-size": LOG_MAX_SIZE, "max-file": str(LOG_MAX_FILES)}},
    }
    if job.name:
        kw["name"] = job.name
    _network(kw, job, egress)
    if profile.device in ("cuda", "npu") and not profile.devices:
        raise ValueError(
            f"a {profile.device} runner profile must name its devices (devices = [\"0\"]); "
            "it would otherwise get every accelerator on the machine")
    if profile.device == "cuda":
        req = DeviceRequest(device_ids=[str(d) for d in profile.devices], capabilities=[["gpu"]])
        kw["device_requests"] = [req]
    elif profile.device == "npu":
        cards = [f"/dev/davinci{int(i)}" for i in profile.devices]
        devs = [*cards, *NPU_CONTROL_DEVICES]
        kw["devices"] = [f"{d}:{d}:rwm" for d in devs]
        have = None if paths_present is None else set(paths_present)
        for p in NPU_DRIVER_MOUNTS:
            if have is None or p in have:
                volumes[p] = {"bind": p, "mode": "ro"}
        kw["environment"].setdefault(
            "ASCEND_VISIBLE_DEVICES",
            ",".join(re.sub(r"\D", "", c) for c in cards),
        )
    return kw


def _network(kw: dict[str, Any], job: SandboxJob, egress: EgressInfo | None) -> None:
    """No network, or only the egress proxy's internal network (never a bridge)."""
    if not job.network:
        kw["network_mode"] = "none"
        return
    if egress is None:
        raise ValueError("this job asks for network, and network is only given through an "
                         "egress proxy: name the hosts in the runner profile's allowed_hosts")
    kw["network"] = egress.network
    kw["environment"].update(egress.environment())


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` without any secret: exact (4 chars or more), and in the
    disguises :mod:`harness.leaks` knows (reversed, base64, hex... of a secret
    of 8 chars or more)."""
    secrets = [s for s in secrets if s]
    for s in secrets:
        if len(s) >= 4:
            text = text.replace(s, "[REDACTED]")
    return _redact(text, secrets)


def _stream(container, on_output: Callable[[str], None], secrets: list[str], sent: list[int]) -> None:
    """Deliver complete lines as they come; ``sent[0]`` counts them. The rest
    (a last line without newline, or a tail the stream lost when the container
    exited) is delivered from the final logs by :func:`run`."""
    buf = ""
    try:
        for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
            buf += chunk.decode("utf-8", errors="replace")
            *lines, buf = buf.split("\n")
            while len(buf) > LINE_CAP:  # a line without end is delivered in pieces, never held whole
                lines.append(buf[:LINE_CAP])
                buf = buf[LINE_CAP:]
            for line in lines:
                sent[0] += 1
                try:
                    on_output(redact(line, secrets))
                except Exception:  # noqa: BLE001 - a watcher must not break the run
                    log.debug("on_output failed", exc_info=True)
    except Exception:  # noqa: BLE001 - the container went away: the result says why
        log.debug("log stream ended", exc_info=True)


def _tail(container, limit: int) -> tuple[bytes, int]:
    """The last ``limit`` bytes of a container's output, read as a stream (never
    held whole), and how many bytes before them were dropped."""
    keep = bytearray()
    total = 0
    for chunk in container.logs(stream=True, follow=False, stdout=True, stderr=True):
        total += len(chunk)
        keep += chunk
        if len(keep) > 2 * limit:
            del keep[:-limit]
    if len(keep) > limit:
        del keep[:-limit]
    return bytes(keep), total - len(keep)


def _egress(job: SandboxJob, profile: RunnerProfile, gateway: GatewayRoute | None, client,
            upstream_networks: list[str]) -> Egress | None:
    """The run's egress (its internal network, and a proxy for the allowed
    hosts other than the model gateway's upstream), or None without network.
    ``ValueError`` (the run's error) when a wildcard of the profile's
    ``allowed_hosts`` covers a model API's host (the gateway's upstream, or a
    base URL the profile's ``env`` names), or the upstream is not named
    exactly: the agent could reach it around the gateway. Checked here, on
    every run, whatever made the profile (:func:`harness.gateway.check_allowed_hosts`)."""
    if not job.network:
        return None
    hosts = [h.strip().lower().rstrip(".") for h in profile.allowed_hosts]
    no_wildcard_over_model_api(profile.env, hosts)
    if gateway is not None:
        check_allowed_hosts(gateway.upstream, hosts)
        up = upstream_host(gateway.upstream)
        hosts = [h for h in hosts if h != up]  # the model is reached through the gateway only
    elif not hosts:
        raise ValueError("an egress proxy needs at least one allowed host")
    return Egress(hosts, client=client, upstream_networks=upstream_networks)


def run(
    job: SandboxJob,
    profile: RunnerProfile,
    *,
    secrets: Iterable[str] = (),
    client=None,
    max_output: int = 200_000,
    on_output: Callable[[str], None] | None = None,
    upstream_networks: Iterable[str] = ("bridge",),
    gateway: GatewayRoute | None = None,
) -> SandboxResult:
    """Run ``job`` in a fresh container; always remove it; never raise.
    ``secrets`` are removed from the returned output and from the lines
    streamed to ``on_output`` (called from a helper thread, line by line).
    Only the last ``max_output`` bytes of the output are read (docker keeps
    at most :data:`LOG_MAX_SIZE`). With ``gateway`` (a network job), the model
    API is reached through a model gateway (:mod:`harness.gateway`) that holds
    the key; the container gets the gateway's URL and a run token instead, and
    the result carries the gateway's meter."""
    secrets = list(secrets)
    upstream_networks = list(upstream_networks)
    streamer = None
    sent = [0]
    t0 = time.monotonic()
    container = None
    result = SandboxResult()
    egress = None
    gw = None
    try:
        client = client or docker_client()
        egress = _egress(job, profile, gateway, client, upstream_networks)
        info = egress.__enter__() if egress is not None else None
        kw = container_kwargs(
            job,
            profile,
            npu_devices_present=present_npu_devices() if profile.device == "npu" else (),
            paths_present=[p for p in NPU_DRIVER_MOUNTS if os.path.exists(p)],
            egress=info,
        )
        kw["image"] = sandbox_image(kw["image"])
        if gateway is not None and info is not None:
            gw = Gateway(gateway.upstream, gateway.key, network=info.network, client=client, image=ensure_runtime(),
                         upstream_networks=upstream_networks, max_tokens=gateway.max_tokens,
                         max_cost_usd=gateway.max_cost_usd, price_in_per_mtok=gateway.price_in_per_mtok,
                         price_out_per_mtok=gateway.price_out_per_mtok)
            env = kw["environment"]
            env.update(gw.__enter__().environment())
            for name in ("NO_PROXY", "no_proxy"):
                if name in env:
                    env[name] = f"{env[name]},{GATEWAY_ALIAS}"
        kw.setdefault("name", f"rsi-{uuid.uuid4().hex[:12]}")
        container = client.containers.create(**kw)
        container.start()
        if on_output is not None:
            streamer = threading.Thread(target=_stream, args=(container, on_output, secrets, sent), daemon=True)
            streamer.start()
        t_started = time.monotonic()
        result.start_s = t_started - t0
        remaining = max(1.0, job.timeout_s)
        try:
            status = container.wait(timeout=remaining)
            result.exit_code = int(status.get("StatusCode", -1))
        except Exception as exc:  # noqa: BLE001 - requests' ReadTimeout / ConnectionError on timeout
            if time.monotonic() - t_started < remaining - 1:
                raise  # not the clock: the engine failed; reported as an error below
            result.timed_out = True
            log.debug("container timed out (%s); killing it", exc)
            try:
                container.kill()
            except Exception:  # noqa: BLE001
                log.debug("kill failed", exc_info=True)
            try:
                status = container.wait(timeout=30)
                result.exit_code = int(status.get("StatusCode", -1))
            except Exception:  # noqa: BLE001
                result.exit_code = None
        try:
            container.reload()
            result.oom_killed = bool(container.attrs.get("State", {}).get("OOMKilled"))
        except Exception:  # noqa: BLE001
            log.debug("reload failed", exc_info=True)
        try:
            data, cut = _tail(container, max_output)
            text = data.decode("utf-8", errors="replace")
            result.output_cut = cut
            result.output = f"[... {cut} bytes cut ...]\n{text}" if cut else text
            if streamer is not None and on_output is not None:  # a streamer streams to on_output
                streamer.join(timeout=5)
                rest = text.split("\n")[sent[0]:] if not cut else []
                if rest and rest[-1] == "":
                    rest.pop()
                for line in rest:
                    try:
                        on_output(redact(line, secrets))
                    except Exception:  # noqa: BLE001
                        log.debug("on_output failed", exc_info=True)
        except Exception as exc:  # noqa: BLE001
            result.output = f"[logs unavailable: {exc}]"
    except Exception as exc:  # noqa: BLE001 - every failure becomes a result
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        if streamer is not None:
            streamer.join(timeout=5)
        if container is not None:
            try:
                container.remove(force=True)
            except Exception:  # noqa: BLE001
                log.warning("could not remove container %s", getattr(container, "id", "?"), exc_info=True)
        if gw is not None:
            result.gateway = gw.meter() or {"calls": 0, "tokens_in": 0, "tokens_out": 0}
            gw.close()
        if egress is not None:
            egress.close()
        result.duration_s = time.monotonic() - t0
    clean = redact(result.output, secrets)
    result.redacted = clean != result.output
    result.output = clean
    if result.error:
        result.error = redact(result.error, secrets)
    return result

