"""Sandbox: real containers; limits really enforced; kwargs for accelerators."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from harness import sandbox
from harness.agents.command import PRESETS
from harness.egress import EGRESS_IMAGE, EgressInfo, host_pattern, tinyproxy_config
from harness.sandbox import Mount, SandboxJob, container_kwargs
from harness.spec import RunnerProfile
from tests.netprobe import REACH, HostListener

PY = "python3"  # the image's own (harness.images): nothing of the host is mounted


def py_job(code: str, **kw) -> SandboxJob:
    return SandboxJob(command=[PY, "-c", code], **kw)


def test_kwargs_cpu_profile_is_locked_down():
    kw = container_kwargs(SandboxJob(command=["true"]), RunnerProfile(cpus=1.5, memory="512m", pids=64))
    assert kw["user"] == "1000:1000" and kw["cap_drop"] == ["ALL"]
    assert kw["security_opt"] == ["no-new-privileges"] and kw["read_only"] is True
    assert kw["network_mode"] == "none"
    assert kw["mem_limit"] == kw["memswap_limit"] == 512 * 1024**2
    assert kw["nano_cpus"] == 1_500_000_000 and kw["pids_limit"] == 64
    assert "device_requests" not in kw and "devices" not in kw


def test_kwargs_network_only_through_the_egress_proxy():
    job = SandboxJob(command=["true"], network=True)
    profile = RunnerProfile(allowed_hosts=["api.example.com"])
    with pytest.raises(ValueError, match="only given through an egress proxy"):
        container_kwargs(job, profile)
    info = EgressInfo(network="rsi-egress-x", proxy_url="http://rsi-egress:8888")
    kw = container_kwargs(job, profile, egress=info)
    assert kw["network"] == "rsi-egress-x" and "network_mode" not in kw
    env = kw["environment"]
    assert env["HTTP_PROXY"] == env["HTTPS_PROXY"] == env["https_proxy"] == "http://rsi-egress:8888"
    assert container_kwargs(SandboxJob(command=["true"]), profile, egress=info)["network_mode"] == "none"


def test_profile_network_needs_hosts_and_accelerators_need_devices():
    with pytest.raises(ValueError, match="network = true needs allowed_hosts"):
        RunnerProfile(network=True)
    assert RunnerProfile(allowed_hosts=["API.example.com"]).network is True
    for bad in ("http://x.com", "10.0.0.1", "x.com:443", "localhost", "a/b.com"):
        with pytest.raises(ValueError, match="write a DNS name"):
            RunnerProfile(allowed_hosts=[bad])
    with pytest.raises(ValueError, match="device = 'cuda' needs devices, the GPU ids"):
        RunnerProfile(device="cuda")
    with pytest.raises(ValueError, match="device = 'npu' needs devices"):
        RunnerProfile(device="npu")
    # a profile built around the validator still cannot get every GPU
    sneaky = RunnerProfile.model_construct(device="cuda", devices=[], env={}, cpus=1.0,
                                           memory="1g", pids=64, image="x")
    with pytest.raises(ValueError, match="must name its devices"):
        container_kwargs(SandboxJob(command=["true"]), sneaky)


def test_tinyproxy_config_denies_by_default():
    conf = tinyproxy_config(["api.example.com"], filter_path="/f")
    assert "FilterDefaultDeny Yes" in conf and "FilterURLs Off" in conf
    assert "ConnectPort 443" in conf and "ConnectPort 80" not in conf
    assert host_pattern("api.example.com") == r"^api\.example\.com$"
    rx = re.compile(host_pattern("*.example.com"))
    assert rx.match("a.b.example.com") and not rx.match("example.com.evil.net")
    assert not re.match(host_pattern("api.example.com"), "api.example.com.evil.net")


def test_kwargs_cuda():
    kw = container_kwargs(SandboxJob(command=["true"]), RunnerProfile(device="cuda", devices=["0", "3"]))
    (req,) = kw["device_requests"]
    assert req["DeviceIDs"] == ["0", "3"] and req["Capabilities"] == [["gpu"]]
    assert req.get("Count") in (None, 0)


def test_kwargs_npu():
    kw = container_kwargs(
        SandboxJob(command=["true"]),
        RunnerProfile(device="npu", devices=["0", "1"]),
        npu_devices_present=["/dev/davinci0", "/dev/davinci1"],
        paths_present=["/usr/local/Ascend/driver", "/usr/local/dcmi", "/usr/local/bin/npu-smi"],
    )
    assert kw["devices"] == [
        "/dev/davinci0:/dev/davinci0:rwm",
        "/dev/davinci1:/dev/davinci1:rwm",
        "/dev/davinci_manager:/dev/davinci_manager:rwm",
        "/dev/devmm_svm:/dev/devmm_svm:rwm",
        "/dev/hisi_hdc:/dev/hisi_hdc:rwm",
    ]
    for p in ("/usr/local/Ascend/driver", "/usr/local/dcmi", "/usr/local/bin/npu-smi"):
        assert kw["volumes"][p] == {"bind": p, "mode": "ro"}
    assert kw["environment"]["ASCEND_VISIBLE_DEVICES"] == "0,1"
    kw = container_kwargs(SandboxJob(command=["true"]), RunnerProfile(device="npu", devices=["2"]), npu_devices_present=[])
    assert kw["devices"][0] == "/dev/davinci2:/dev/davinci2:rwm"


def test_kwargs_mount_only_what_the_job_names():
    """No mount of the host's Python, venv or checkout: the image carries them."""
    kw = container_kwargs(SandboxJob(command=["true"], mounts=[Mount(source="/srv/x", target="/work/repo")]),
                          RunnerProfile())
    assert kw["volumes"] == {"/srv/x": {"bind": "/work/repo", "mode": "ro"}}
    assert not any(p in kw["environment"]["PATH"] for p in (sys.prefix, sys.base_prefix))


@pytest.mark.docker
def test_runs_as_non_root_without_capabilities():
    res = sandbox.run(
        py_job("import os; print(os.getuid(), os.getgid()); print(open('/proc/self/status').read())"),
        RunnerProfile(),
    )
    assert res.ok, res
    assert res.output.startswith("1000 1000")
    assert "CapEff:\t0000000000000000" in res.output
    assert "NoNewPrivs:\t1" in res.output


@pytest.mark.docker
def test_network_really_off():
    code = (
        "import socket\n"
        "try:\n"
        "    socket.create_connection(('1.1.1.1', 53), timeout=3); print('CONNECTED')\n"
        "except OSError as e:\n"
        "    print('BLOCKED', e)\n"
        "print(sorted(n for _, n in socket.if_nameindex()))\n"
    )
    res = sandbox.run(py_job(code), RunnerProfile())
    assert res.ok, res
    assert "BLOCKED" in res.output and "CONNECTED" not in res.output
    assert "['lo']" in res.output  # no interface but loopback


@pytest.mark.docker
def test_memory_limit_really_enforced():
    res = sandbox.run(
        py_job("b = bytearray(400 * 1024 * 1024); print('allocated', len(b))"),
        RunnerProfile(memory="128m"),
    )
    assert res.oom_killed, res
    assert res.exit_code == 137 and "allocated" not in res.output


@pytest.mark.docker
def test_timeout_kills_and_container_removed():
    import docker

    res = sandbox.run(SandboxJob(command=["sleep", "60"], timeout_s=2, name="rsi-test-timeout"), RunnerProfile())
    assert res.timed_out and not res.ok
    assert res.duration_s < 30
    with pytest.raises(docker.errors.NotFound):
        docker.from_env().containers.get("rsi-test-timeout")


@pytest.mark.docker
def test_pids_limit():
    code = (
        "import os, time\n"
        "n = 0\n"
        "try:\n"
        "    for _ in range(200):\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(5); os._exit(0)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print('FORK FAILED after', n)\n"
    )
    res = sandbox.run(py_job(code, timeout_s=30), RunnerProfile(pids=32))
    assert "FORK FAILED" in res.output, res


@pytest.mark.docker
def test_read_only_root_and_mounts(tmp_path: Path):
    (tmp_path / "ro").mkdir()
    (tmp_path / "rw").mkdir()
    (tmp_path / "rw").chmod(0o777)
    code = (
        "import pathlib\n"
        "for p in ['/etc/x', '" + str(tmp_path / "ro" / "x") + "', '" + str(tmp_path / "rw" / "x") + "', '/tmp/rsi-write-probe']:\n"
        "    try:\n"
        "        pathlib.Path(p).write_text('1'); print('WROTE', p)\n"
        "    except OSError:\n"
        "        print('DENIED', p)\n"
    )
    job = py_job(code)
    job.mounts += [Mount(source=str(tmp_path / "ro"), target=str(tmp_path / "ro")),
                   Mount(source=str(tmp_path / "rw"), target=str(tmp_path / "rw"), read_only=False)]
    res = sandbox.run(job, RunnerProfile())
    assert "DENIED /etc/x" in res.output and f"DENIED {tmp_path}/ro/x" in res.output
    assert f"WROTE {tmp_path}/rw/x" in res.output and "WROTE /tmp/rsi-write-probe" in res.output


@pytest.mark.docker
def test_errors_are_returned_not_raised():
    res = sandbox.run(SandboxJob(command=["true"]), RunnerProfile(image="rsi-bot/does-not-exist:0"))
    assert res.error and not res.ok and res.exit_code is None


@pytest.mark.docker
def test_secrets_redacted():
    res = sandbox.run(
        SandboxJob(command=["/bin/sh", "-c", "echo key=$API_KEY"], env={"API_KEY": "sk-very-secret-123"}),
        RunnerProfile(),
        secrets=["sk-very-secret-123"],
    )
    assert "sk-very-secret-123" not in res.output and "key=[REDACTED]" in res.output


@pytest.mark.docker
def test_output_streams_line_by_line_redacted():
    lines: list[str] = []
    res = sandbox.run(
        SandboxJob(command=["/bin/sh", "-c", "echo one; sleep 0.3; echo two $K; printf three"], env={"K": "sekrit-1"}),
        RunnerProfile(),
        secrets=["sekrit-1"],
        on_output=lines.append,
    )
    assert res.ok and lines == ["one", "two [REDACTED]", "three"]


# ------------------------------------------------ agent network: the egress proxy

AGENT_PROBE = """
import json, os, urllib.request, urllib.error, socket
out = {}
def get(url, proxy=True):
    h = urllib.request.ProxyHandler() if proxy else urllib.request.ProxyHandler({})
    try:
        with urllib.request.build_opener(h).open(url, timeout=10) as r:
            return r.status, r.read().decode()[:40]
    except urllib.error.HTTPError as e:
        return e.code, ""
    except Exception as e:
        return "error", type(e).__name__
out["allowed"] = get("http://model-api.test:8080/hello.txt")
out["off_list"] = get("http://other-api.test:8080/hello.txt")
out["metadata"] = get("http://169.254.169.254/latest/meta-data/")
out["direct"] = get("http://model-api.test:8080/hello.txt", proxy=False)
try:
    socket.create_connection(("1.1.1.1", 53), timeout=3); out["raw"] = "connected"
except OSError as e:
    out["raw"] = "blocked"
print("RESULT " + json.dumps(out))
"""


@pytest.fixture
def model_api(tmp_path):
    """A small HTTP server, the "model API", on an internal network of its own,
    reachable as model-api.test and as other-api.test (the same server: only the
    proxy's list tells them apart)."""
    import docker

    if subprocess.run(["docker", "image", "inspect", EGRESS_IMAGE], capture_output=True).returncode:
        pytest.fail(f"{EGRESS_IMAGE} missing: run scripts/setup-docker.sh") \
            if os.environ.get("RSI_REQUIRE_DOCKER") else pytest.skip(f"{EGRESS_IMAGE} missing")
    client = docker.from_env()
    tag = uuid.uuid4().hex[:8]
    www = tmp_path / "www"
    www.mkdir()
    (www / "hello.txt").write_text("hello from the model api")
    os.chmod(tmp_path, 0o755)
    net = client.networks.create(f"rsi-test-api-{tag}", driver="bridge", internal=True)
    server = None
    try:
        mounts = {str(www): {"bind": "/srv", "mode": "ro"}}
        server = client.containers.create(
            sandbox.sandbox_image(RunnerProfile().image), [PY, "-m", "http.server", "8080", "-d", "/srv"],
            name=f"rsi-test-api-{tag}", user="1000:1000", volumes=mounts, detach=True,
            network=net.name)
        net.disconnect(server)
        net.connect(server, aliases=["model-api.test", "other-api.test"])
        server.start()
        yield net.name
    finally:
        if server is not None:
            server.remove(force=True)
        net.remove()


@pytest.mark.docker
def test_agent_reaches_only_its_allowed_hosts(model_api, monkeypatch):
    import json

    from harness import egress

    made = []  # this run's agent network (other tests' may exist on a shared engine)

    def recording(client):
        net = real(client)
        made.append(net.name)
        return net

    real = egress.agent_network
    monkeypatch.setattr(egress, "agent_network", recording)
    profile = RunnerProfile(allowed_hosts=["model-api.test"])
    res = sandbox.run(py_job(AGENT_PROBE, network=True, timeout_s=120), profile,
                      upstream_networks=[model_api])
    assert res.ok, res
    line = next(x for x in res.output.splitlines() if x.startswith("RESULT "))
    out = json.loads(line[len("RESULT "):])
    assert out["allowed"] == [200, "hello from the model api"], out
    assert out["off_list"][0] == 403, out  # the proxy's filter refused it
    assert out["metadata"][0] == 403, out  # link-local metadata: refused too
    assert out["direct"][0] == "error", out  # no route around the proxy
    assert out["raw"] == "blocked", out
    # nothing of this run is left behind: no proxy container on its egress network, not the network
    import docker

    client = docker.from_env()
    (name,) = made
    assert not client.containers.list(all=True, filters={"label": "rsi-bot.egress", "network": name})
    assert not [n for n in client.networks.list(filters={"label": "rsi-bot.egress"}) if n.name == name]


@pytest.mark.docker
def test_network_job_without_hosts_is_an_error_not_a_bridge():
    res = sandbox.run(py_job("print('ran')", network=True), RunnerProfile())
    assert not res.ok and "at least one allowed host" in (res.error or ""), res


HOST_PROBE = REACH + """
spec = json.loads(os.environ["HOST_SPEC"])
import urllib.request
with urllib.request.build_opener(urllib.request.ProxyHandler()).open(
        "http://model-api.test:8080/hello.txt", timeout=10) as r:
    proxied = [r.status, r.read().decode()[:40]]
try:  # IPv6: the host's bridge keeps a link-local address; the agent must have none to use it
    inet6 = [line.split()[-1] for line in open("/proc/net/if_inet6") if line.split()[-1] != "lo"]
except OSError:
    inet6 = []
print("RESULT " + json.dumps({"proxied": proxied, "host": reach(spec["hosts"], spec["port"]),
                              "inet6": inet6}))
"""


@pytest.mark.docker
def test_an_agent_reaches_its_proxy_and_nothing_on_the_host(model_api):
    """Attack: an agent connects, around its proxy, to a service on the runner
    bound to 0.0.0.0, at every host address and at its network's gateway. A
    plain ``--internal`` network gave it the host's bridge address (and docker0's
    through the host's INPUT chain); a bridge without a host address gives it
    nothing, while the proxy still answers."""
    import json

    listener = HostListener()
    try:
        listener.sanity_check()
        hosts = listener.addresses()  # once: other sessions add and remove docker networks
        spec = json.dumps({"hosts": hosts, "port": listener.port})
        job = py_job(HOST_PROBE, network=True, timeout_s=120, env={"HOST_SPEC": spec})
        res = sandbox.run(job, RunnerProfile(allowed_hosts=["model-api.test"]),
                          upstream_networks=[model_api])
        assert res.ok, res
        line = next(x for x in res.output.splitlines() if x.startswith("RESULT "))
        out = json.loads(line[len("RESULT "):])
        assert out["proxied"] == [200, "hello from the model api"], out
        assert set(out["host"]) > set(hosts), out  # the gateway was tried too
        assert "reached" not in out["host"].values(), out
        assert out["inet6"] == [], out  # no IPv6 interface: no link-local route to the bridge either
        assert len(listener.accepted) == 1, listener.accepted  # the sanity check's only
    finally:
        listener.close()


# ------------------------- every agent preset x every egress shape: no way to the host

MATRIX_PROBE = REACH + """
import base64, urllib.request
spec = json.loads(base64.b64decode(sys.argv[1]))
via_proxy = {}
if os.environ.get("HTTP_PROXY"):  # ask the proxy for the host too: it must refuse, never connect
    for host in spec["hosts"]:
        try:
            with urllib.request.build_opener(urllib.request.ProxyHandler()).open(
                    f"http://{host}:{spec['port']}/", timeout=5) as r:
                via_proxy[host] = r.status
        except urllib.error.HTTPError as e:
            via_proxy[host] = e.code
        except Exception as e:
            via_proxy[host] = type(e).__name__
ifaces = sorted(n for _, n in socket.if_nameindex())
print("RESULT " + json.dumps({"host": reach(spec["hosts"], spec["port"]), "via_proxy": via_proxy,
                              "ifaces": ifaces, "proxy": os.environ.get("HTTP_PROXY", ""),
                              "gateway": os.environ.get("OPENAI_API_BASE", "")}))
"""

MODEL_BASE = "http://model-api.test:8080/v1"
EGRESS_SHAPES = {
    # name: (allowed_hosts, through the model gateway)
    "no hosts": ([], False),
    "model host only": (["model-api.test"], False),  # a proxy to it: only a custom command without a base URL
    "gateway": (["model-api.test"], True),  # the model host is the only host: no proxy at all
    "gateway and proxy": (["model-api.test", "other-api.test"], True),
}
CUSTOM = "command"
"""A custom ``[agent] command`` (no preset): the one agent that may have a proxy to its model host."""


@pytest.fixture(scope="module")
def host_listener():
    listener = HostListener()
    listener.sanity_check()
    yield listener
    listener.close()


@pytest.mark.docker
@pytest.mark.parametrize("shape", list(EGRESS_SHAPES))
@pytest.mark.parametrize("preset", [*sorted(PRESETS), CUSTOM])
def test_no_preset_and_no_egress_shape_reaches_the_host(model_api, host_listener, tmp_path: Path, preset, shape):
    """Attack: an agent connects to a service on the runner bound to 0.0.0.0,
    at every host address and its network's gateway, directly and through its
    proxy. With the model gateway as the only allowed host, the agent's
    network used to be made without ``inhibit_ipv4`` and unchecked, and an
    agent reached the host listener. Every network now comes from
    ``egress.agent_network``, for every preset and shape. A preset never has
    the proxy-only shape: it always speaks through the gateway, and a profile
    that names no base URL points it at its provider's own host, which is not
    allowed here, so it is refused before anything runs."""
    import base64
    import json

    from harness.agents.command import CommandAgent
    from tests.harness.target import make_target
    from tests.harness.test_agents import ctx_for

    hosts, via_gateway = EGRESS_SHAPES[shape]
    base_env = "ANTHROPIC_BASE_URL" if preset == "claude-code" else "OPENAI_API_BASE"
    env = {base_env: MODEL_BASE} if via_gateway else {}
    profile = RunnerProfile(allowed_hosts=hosts, env=env)
    before = len(host_listener.accepted)
    addrs = host_listener.addresses()  # once: other sessions add and remove docker networks
    spec = base64.b64encode(json.dumps({"hosts": addrs, "port": host_listener.port}).encode())
    code = base64.b64encode(MATRIX_PROBE.encode()).decode()
    keys = {"OPENAI_API_KEY": "sk-matrix-0123456789", "ANTHROPIC_API_KEY": "sk-ant-matrix-0123456789"}
    probe = f"python3 -c \"import base64, sys; exec(base64.b64decode('{code}'))\" {spec.decode()}"
    if preset == CUSTOM:
        agent = CommandAgent(template=probe, environ=keys, profile=profile, upstream_networks=(model_api,))
    else:
        agent = CommandAgent.preset(preset, environ=keys, profile=profile, upstream_networks=(model_api,))
        agent.template = probe  # the preset's image, env, gateway and egress; our probe as its program
    ctx = ctx_for(make_target(tmp_path, python="python3"), tmp_path)
    out = agent.run(ctx)
    if preset != CUSTOM and hosts and not via_gateway:  # never around the gateway: refused before it ran
        assert out.error and "is not in the runner profile's allowed_hosts" in out.error, out.error
        assert "through the model gateway only" in out.error and "RESULT " not in out.log, out
        assert host_listener.wait_for(before + 1, timeout_s=1) == before, host_listener.accepted
        return
    line = next((x for x in out.log.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, (out.error, out.log[-2000:])
    seen = json.loads(line[len("RESULT "):])
    assert "reached" not in seen["host"].values(), seen
    assert all(v == 403 or isinstance(v, str) for v in seen["via_proxy"].values()), seen  # refused, never relayed
    assert host_listener.wait_for(before + 1, timeout_s=1) == before, host_listener.accepted  # nothing arrived
    if not hosts:
        assert seen["ifaces"] == ["lo"], seen  # no network at all
    else:
        assert set(seen["host"]) > set(addrs), seen  # the network's gateway was tried too
        assert bool(seen["proxy"]) == (set(hosts) != {"model-api.test"} or not via_gateway), seen
        assert bool(seen["gateway"]) == via_gateway, seen


@pytest.mark.docker
@pytest.mark.parametrize("where", ["gateway's upstream", "profile env"])
def test_a_wildcard_over_the_model_api_is_refused_at_run_time(where: str):
    """Attack: a profile that skipped its own validation (``model_copy``, as the
    loop's overrides do) allows ``*.example.com`` while the model API is
    ``api.example.com``: the agent would reach the upstream around the gateway.
    The sandbox's egress refuses it on every run, before it makes a network
    or a container: with a gateway (``check_allowed_hosts``) and without one
    (a base URL the profile's env names)."""
    from harness.gateway import GatewayRoute

    client = sandbox.docker_client()
    profile = RunnerProfile(allowed_hosts=["api.example.com"]).model_copy(update={
        "allowed_hosts": ["pypi.org", "*.EXAMPLE.com"],
        "env": {"OPENAI_API_BASE": "https://api.example.com/v1"} if where == "profile env" else {}})
    route = GatewayRoute(upstream="https://api.example.com/v1", key="sk-wild-0123456789") \
        if where == "gateway's upstream" else None
    res = sandbox.run(py_job("print('ran')", network=True), profile, client=client, gateway=route)
    assert not res.ok and "'*.example.com' covers the model API's host 'api.example.com'" in (res.error or ""), res
    assert "ran" not in res.output and res.gateway is None
    exact = RunnerProfile(allowed_hosts=["api.example.com"]).model_copy(update={"allowed_hosts": ["pypi.org"]})
    res = sandbox.run(py_job("print('ran')", network=True), exact, client=client,
                      gateway=GatewayRoute(upstream="https://api.example.com/v1", key="sk-wild-0123456789"))
    assert not res.ok and "'api.example.com' is not in the runner profile's allowed_hosts" in (res.error or ""), res


class _Network:
    """The docker SDK's Network as far as ``agent_network`` uses it (the engine's answer)."""

    def __init__(self, subnet: str, options: dict[str, str]):
        self.name = "rsi-egress-test"
        self.attrs = {"IPAM": {"Config": [{"Subnet": subnet}]}, "Internal": True, "Options": options}
        self.removed = False

    def reload(self) -> None:
        pass

    def remove(self) -> None:
        self.removed = True


class _Networks:
    def __init__(self, subnet: str, honour: bool = True):
        self.subnet, self.honour, self.asked, self.made = subnet, honour, [], []

    def create(self, name, **kw):
        self.asked.append(kw)
        self.made.append(_Network(self.subnet, kw.get("options", {}) if self.honour else {}))
        return self.made[-1]


def test_agent_network_is_always_internal_without_a_host_address_and_checked():
    """The one maker of agent networks asks for no host address every time and
    refuses (and removes) a network the engine made otherwise: one this host
    holds an address of, or one without the option."""
    from harness.egress import NO_HOST_ADDRESS, EgressError, agent_network

    client = type("C", (), {})()
    client.networks = _Networks("198.18.251.0/24")  # no address of this host's
    net = agent_network(client)
    (kw,) = client.networks.asked
    assert kw["internal"] is True and kw["options"] == NO_HOST_ADDRESS and kw["enable_ipv6"] is False
    assert not net.removed
    client.networks = _Networks("127.0.0.0/8")  # this host holds 127.0.0.1: reachable around the proxy
    with pytest.raises(EgressError, match="gave this host the address"):
        agent_network(client)
    assert client.networks.made[0].removed
    client.networks = _Networks("198.18.251.0/24", honour=False)  # an engine that ignored the option
    with pytest.raises(EgressError, match="refusing it"):
        agent_network(client)
    assert client.networks.made[0].removed
