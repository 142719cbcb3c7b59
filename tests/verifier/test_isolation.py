"""Per-run isolation: the spec, process isolation, and (marked ``docker``) a
fresh container per run: nothing outlives a run or passes between runs, the
checkout and other runs' dirs are out of reach, serving and evaluator jobs run
from the protected base, and results are read only as regular files."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
import uuid
from pathlib import Path

import psutil
import pytest

from tests.netprobe import REACH, HostListener
from verifier.config import BenchmarkConfig
from verifier.isolation import (
    ContainerIsolation,
    IsolationSpec,
    Job,
    from_options,
)
from verifier.runner import run_once, run_setup

PY = "python3"  # the image's own (tests/images.py); nothing of the host is mounted

PROBE = textwrap.dedent(
    r"""
    import json, os, subprocess, sys, time
    mode = sys.argv[1]
    out = {}
    res = os.environ["RSI_RESULT"]
    if mode == "leak":
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", os.environ["TOKEN"]],
                         start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if mode == "state":
        marks = ["/tmp/rsi-marker", os.path.join(os.environ["HOME"], "rsi-marker")]
        out["seen"] = [os.path.exists(m) for m in marks]
        for m in marks:
            open(m, "w").write("cached")
    if mode == "write":
        for key, path in (("checkout", "pwned.txt"),
                          ("other", os.path.join(os.environ.get("OTHER_RUN", "/nonexistent"),
                                                 "result.json"))):
            try:
                open(path, "w").write('{"metrics": {"speed": 1000}}')
                out[key] = "written"
            except OSError as e:
                out[key] = type(e).__name__
    if mode == "symlink":
        os.symlink("/etc/hostname", res)
        sys.exit(0)
    if mode == "fifo":
        os.mkfifo(res)
        sys.exit(0)
    if mode == "files":
        d = os.environ["RSI_OUTPUT_DIR"]
        open(os.path.join(d, "0.txt"), "w").write("hello world")
        open(os.path.join(d, "1.txt"), "w").write("good bye")
        out["transcripts"] = ["bogus"]
    print("READY", flush=True)
    json.dump({"metrics": {"speed": 1.0, "heard": 99.0}, "outputs": out}, open(res, "w"))
    """
)

SERVER = textwrap.dedent(
    r"""
    import json, os
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/env":
                keep = ("RSI_SEED", "HIDDEN_")
                body = json.dumps({k: v for k, v in os.environ.items() if k.startswith(keep)})
            else:
                body = "ok" if self.path == "/health" else "x" * 64
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    ThreadingHTTPServer(("0.0.0.0", int(os.environ["RSI_PORT"])), H).serve_forever()
    """
)

CLIENT = textwrap.dedent(
    r"""
    import json, os, time, urllib.request, wave
    url = os.environ["RSI_SERVER_URL"]
    get = urllib.request.build_opener(urllib.request.ProxyHandler({})).open
    lat = []
    t0 = time.perf_counter()
    for _ in range(5):
        t = time.perf_counter()
        get(url + "/work").read()
        lat.append(time.perf_counter() - t)
    window = time.perf_counter() - t0
    server_env = json.loads(get(url + "/env").read())
    d = os.environ["RSI_OUTPUT_DIR"]
    open(os.path.join(d, "0.txt"), "w").write("served words")
    with wave.open(os.path.join(d, "0.wav"), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(bytes(range(256)) * 8)
    json.dump({"metrics": {"throughput": 5 / window},
               "samples": {"latency_s": lat},
               "outputs": {"server_env": server_env, "client_seed": os.environ.get("RSI_SEED")},
               "counts": {"requests": 5, "failed": 0}}, open(os.environ["RSI_RESULT"], "w"))
    """
)

EVALUATE = textwrap.dedent(
    r"""
    import json, os, pathlib
    inp = pathlib.Path(os.environ["RSI_INPUT_DIR"])
    texts = [p.read_text() for p in sorted(inp.glob("*.txt"))]
    try:
        open(inp / "tamper.txt", "w").write("x")
        tamper = "written"
    except OSError as e:
        tamper = type(e).__name__
    json.dump({"outputs": {"transcripts": texts, "input_write": tamper},
               "metrics": {"heard": float(len(texts))}}, open(os.environ["RSI_RESULT"], "w"))
    """
)


def _checkout(path: Path) -> Path:
    (path / "bench").mkdir(parents=True)
    (path / "probe.py").write_text(PROBE)
    (path / "server.py").write_text(SERVER)
    (path / "bench" / "client.py").write_text(CLIENT)
    (path / "bench" / "evaluate.py").write_text(EVALUATE)
    return path


def _bench(mode: str = "", **kw) -> BenchmarkConfig:
    if "serve" not in kw:
        kw.setdefault("command", f"{PY} probe.py {mode}")
    kw.setdefault("metrics", {"speed": "higher"} if "serve" not in kw else {"throughput": "higher"})
    kw.setdefault("timeout_s", 60)
    return BenchmarkConfig(name="b", **kw)


def _serving(**kw) -> BenchmarkConfig:
    return _bench(
        serve=f"{PY} server.py",
        client=f"{PY} bench/client.py",
        ready_path="/health",
        samples={"latency_s": "lower"},
        **kw,
    )


@pytest.fixture(scope="module")
def docker_iso():
    from tests.conftest import docker_unavailable_reason

    why = docker_unavailable_reason()
    if why is not None:
        if os.environ.get("RSI_REQUIRE_DOCKER") == "1":
            pytest.fail(f"docker required but unavailable: {why}")
        pytest.skip(why)
    from tests.images import runtime_image

    iso = ContainerIsolation(IsolationSpec.simple(runtime_image(), cpus=1, memory="1g"))
    yield iso
    iso.close()


# ---- the spec (fast) --------------------------------------------------------------------


def test_spec_refuses_root_and_unknown_keys_and_replaces_ours():
    with pytest.raises(ValueError, match="never runs as root"):
        IsolationSpec(image="x", base_kwargs={"user": "0:0"})
    with pytest.raises(ValueError, match="unsupported key.*privileged"):
        IsolationSpec(image="x", base_kwargs={"privileged": True})
    spec = IsolationSpec(
        image="img",
        base_kwargs={"command": ["x"], "network_mode": "bridge", "mem_limit": 1 << 30},
    )
    assert spec.base_kwargs == {"mem_limit": 1 << 30}


def test_container_kwargs_of_a_run_and_a_setup(tmp_path):
    spec = IsolationSpec(
        image="img",
        base_kwargs={
            "user": "1000:1000",
            "volumes": {"/opt/py": {"bind": "/opt/py", "mode": "rw"}},
            "tmpfs": {"/tmp": "rw,size=256m"},
            "environment": {"PATH": "/opt/py/bin"},
            "security_opt": ["seccomp=default"],
        },
    )
    iso = ContainerIsolation(spec, client=object())
    run_dir = tmp_path / "run"
    kw = iso.create_kwargs(Job("x", tmp_path, run_dir=run_dir))
    assert kw["image"] == "img" and kw["network_mode"] == "none" and kw["read_only"]
    assert kw["cap_drop"] == ["ALL"] and "no-new-privileges" in kw["security_opt"]
    assert kw["user"] == "65534:65534" and kw["command"] == ["sleep", "infinity"]
    assert kw["volumes"]["/opt/py"]["mode"] == "ro"  # every spec volume is read-only
    assert kw["volumes"][str(tmp_path.resolve())] == {"bind": "/rsi/src", "mode": "ro"}
    assert str(run_dir) not in kw["volumes"]  # the run dir is a tmpfs of a fixed size, copied out
    assert "size=256m" in kw["tmpfs"]["/tmp"] and "size=256m" in kw["tmpfs"]["/rsi/run"]
    rw = [v for v in kw["volumes"].values() if v["mode"] == "rw"]
    assert rw == []  # no host dir is writable by a run
    setup = iso.create_kwargs(Job("x", tmp_path, role="setup", writable=True))
    assert setup["volumes"][str(tmp_path.resolve())]["mode"] == "rw"
    # a serving run: the server in a loopback-only namespace, the client in the server's
    server = iso.create_kwargs(Job("x", tmp_path, role="server", network="net1"))
    assert server["network_mode"] == "none" and "network" not in server
    with pytest.raises(ValueError, match="start its server job first"):
        iso.create_kwargs(Job("x", tmp_path, role="client", network="net1"))
    iso.netns_owner["net1"] = "abc123"
    client = iso.create_kwargs(Job("x", tmp_path, role="client", network="net1"))
    assert client["network_mode"] == "container:abc123" and "network" not in client
    assert iso.paths(Job("x", tmp_path, run_dir=run_dir, input_dir=tmp_path)) == {
        "RSI_RESULT": "/rsi/run/result.json",
        "RSI_OUTPUT_DIR": "/rsi/run/outputs",
        "RSI_INPUT_DIR": "/rsi/input",
    }


def test_the_readiness_probe_reads_a_status_line_only():
    from verifier.isolation import PROBE_SCRIPT, parse_status_line

    assert parse_status_line("HTTP/1.0 200 OK\r") == 200
    assert parse_status_line("HTTP/1.1 503 Service Unavailable\r\n") == 503
    assert parse_status_line("") is None and parse_status_line("200 OK") is None
    assert "-n 64" in PROBE_SCRIPT  # a server flooding the probe sends the verifier 64 bytes


def test_spec_file_and_cli_choices(tmp_path):
    f = tmp_path / "spec.json"
    f.write_text(json.dumps({"image": "img", "base_kwargs": {"pids_limit": 64}}))
    assert IsolationSpec.from_file(f).base_kwargs == {"pids_limit": 64}
    assert from_options("process").kind == "process"
    with pytest.raises(ValueError, match="needs --isolation-spec FILE or --image"):
        from_options("container")
    with pytest.raises(ValueError, match="must be 'process' or 'container'"):
        from_options("vm")
    simple = IsolationSpec.simple("img", cpus=1.5, memory="2g")
    assert simple.base_kwargs["nano_cpus"] == 1_500_000_000
    assert simple.base_kwargs["mem_limit"] == 2 << 30


def test_a_simple_spec_mounts_nothing_of_this_host():
    """The image carries the benchmark's Python: neither this host's Python
    prefix, nor its venv, nor this checkout is mounted."""
    kw = IsolationSpec.simple("img", cpus=1).base_kwargs
    assert "volumes" not in kw
    assert not any(p in kw["environment"]["PATH"] for p in (sys.prefix, sys.base_prefix))


# ---- process isolation (fast) ----------------------------------------------------------


@pytest.mark.parametrize("mode, needle", [("symlink", "symlink"), ("fifo", "not a regular file")])
def test_a_symlink_or_fifo_result_is_an_error_not_followed(tmp_path, mode, needle):
    rec = run_once(_bench(mode), _checkout(tmp_path / "c"))
    assert not rec.ok and needle in rec.error and "bad result" in rec.error


def test_serving_and_evaluator_with_processes(tmp_path):
    base, cand = _checkout(tmp_path / "base"), _checkout(tmp_path / "cand")
    (cand / "bench" / "client.py").write_text("raise SystemExit('the candidate client ran')")
    bench = _serving(evaluator=f"{PY} bench/evaluate.py", evaluator_metrics=("heard",),
                     metrics={"throughput": "higher", "heard": "higher"})  # fmt: skip
    rec = run_once(bench, cand, base_checkout=base, extra_env={"HIDDEN_X": "1", "RSI_SEED": "7"})
    assert rec.ok, rec.error + rec.stderr_tail
    r = rec.result
    assert r.metrics["throughput"] > 0 and len(r.samples["latency_s"]) == 5
    assert r.outputs["server_env"] == {}  # hidden inputs never reach the server
    assert r.outputs["client_seed"] == "7"
    assert r.outputs["transcripts"] == ["served words"] and r.metrics["heard"] == 1.0
    assert rec.sources["throughput"] == "client" and rec.sources["heard"] == "evaluator"
    assert rec.startup_s is not None and 0 < rec.startup_s and rec.cpu_s is not None


def test_a_server_that_never_gets_ready_is_an_error(tmp_path):
    c = _checkout(tmp_path / "c")
    bench = _serving().model_copy(update={"ready_path": "/nope-never", "timeout_s": 2})
    (c / "server.py").write_text(SERVER.replace('self.path == "/health"', "False").replace(
        "self.send_response(200)", "self.send_response(404 if self.path.startswith('/nope') else 200)"
    ))  # fmt: skip
    t = time.perf_counter()
    rec = run_once(bench, c)
    assert not rec.ok and "never became ready" in rec.error and "/nope-never" in rec.error
    assert time.perf_counter() - t < 10


# ---- container isolation (docker) --------------------------------------------------------


def _alive(token: str) -> list[int]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        if token in " ".join(p.info["cmdline"] or ()):
            out.append(p.pid)
    return out


@pytest.mark.docker
def test_a_background_process_does_not_outlive_its_run(docker_iso, tmp_path):
    token = f"rsi-leak-{uuid.uuid4().hex}"
    c = _checkout(tmp_path / "c")
    rec = run_once(_bench("leak", env={"TOKEN": token}), c, isolation=docker_iso)
    # the leftover is killed at once and the run fails: a process that
    # outlives the command could still rewrite its result after the exit
    assert not rec.ok
    assert "left 1 process(es) running after it exited" in rec.error
    assert rec.extra["leftover_processes"] == 1
    time.sleep(0.2)
    assert _alive(token) == []
    # the same benchmark under process isolation does leave it behind (the
    # reason verification of untrusted code uses containers)
    token2 = f"rsi-leak-{uuid.uuid4().hex}"
    run_once(_bench("leak", env={"TOKEN": token2}), c)
    left = _alive(token2)
    for pid in left:
        psutil.Process(pid).kill()
    assert left


@pytest.mark.docker
def test_tmp_and_home_do_not_persist_between_runs(docker_iso, tmp_path):
    c = _checkout(tmp_path / "c")
    first = run_once(_bench("state", ready_pattern="READY"), c, isolation=docker_iso)
    second = run_once(_bench("state", ready_pattern="READY"), c, isolation=docker_iso)
    assert first.ok and second.ok, first.error + second.error
    assert first.result.outputs["seen"] == [False, False]
    assert second.result.outputs["seen"] == [False, False]
    assert first.cpu_s and first.cpu_s > 0 and first.peak_rss_mib > 1 and first.startup_s


@pytest.mark.docker
def test_a_run_cannot_write_the_checkout_or_another_runs_dir(docker_iso, tmp_path):
    c = _checkout(tmp_path / "c")
    work = tmp_path / "work"
    work.mkdir()
    first = run_once(_bench("write"), c, isolation=docker_iso, workdir=work)
    assert first.ok, first.error
    other = Path(first.work_dir) / "run"
    before = (other / "result.json").read_bytes()
    rec = run_once(_bench("write"), c, isolation=docker_iso, workdir=work,
                   extra_env={"OTHER_RUN": str(other)})  # fmt: skip
    assert rec.ok, rec.error
    assert rec.result.outputs["checkout"] == "OSError"  # read-only file system
    assert rec.result.outputs["other"] in ("FileNotFoundError", "PermissionError", "OSError")
    assert not (c / "pwned.txt").exists()
    assert (other / "result.json").read_bytes() == before
    # setup alone may write its checkout
    setup = run_setup(_bench("x", setup="echo built > built.txt"), c, isolation=docker_iso)
    assert setup.returncode == 0 and (c / "built.txt").read_text().strip() == "built"


@pytest.mark.docker
@pytest.mark.parametrize("mode, needle", [("symlink", "symlink"), ("fifo", "not a regular file")])
def test_container_symlink_or_fifo_result_is_an_error(docker_iso, tmp_path, mode, needle):
    rec = run_once(_bench(mode), _checkout(tmp_path / "c"), isolation=docker_iso)
    assert not rec.ok and needle in rec.error


@pytest.mark.docker
def test_serving_benchmark_end_to_end_in_containers(docker_iso, tmp_path):
    import docker

    base, cand = _checkout(tmp_path / "base"), _checkout(tmp_path / "cand")
    (cand / "bench" / "client.py").write_text("raise SystemExit('the candidate client ran')")
    bench = _serving(evaluator=f"{PY} bench/evaluate.py", evaluator_metrics=("heard",),
                     metrics={"throughput": "higher", "heard": "higher"})  # fmt: skip
    rec = run_once(bench, cand, base_checkout=base, isolation=docker_iso,
                   extra_env={"HIDDEN_X": "1", "RSI_SEED": "7"})  # fmt: skip
    assert rec.ok, rec.error + rec.stderr_tail
    r = rec.result
    assert r.metrics["throughput"] > 0 and r.counts["requests"] == 5
    assert r.outputs["server_env"] == {} and r.outputs["client_seed"] == "7"
    assert r.outputs["transcripts"] == ["served words"]  # the evaluator's, from the files
    assert r.outputs["input_write"] == "OSError"  # the evaluator's input is read-only
    assert rec.sources["outputs.transcripts"] == "evaluator"
    assert rec.startup_s and rec.cpu_s and rec.peak_rss_mib > 1
    # nothing of this run is left: no container, no network (other sessions may
    # run theirs at the same time, so only this run's are looked for)
    client = docker.from_env()
    assert rec.extra.get("containers") and rec.extra.get("network")
    left = [c.name for c in client.containers.list(all=True, ignore_removed=True) if c.name in rec.extra["containers"]]
    assert left == []
    assert client.networks.list(names=[rec.extra["network"]]) == []


REACHING_SERVER = REACH + textwrap.dedent(
    r"""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    spec = json.load(open("hosts.json"))
    found = json.dumps(reach(spec["hosts"], spec["port"])).encode()

    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            data = found if self.path == "/reach" else b"ok"
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    ThreadingHTTPServer(("0.0.0.0", int(os.environ["RSI_PORT"])), H).serve_forever()
    """
)

REACHING_CLIENT = REACH + textwrap.dedent(
    r"""
    import time, urllib.request
    spec = json.load(open("hosts.json"))
    get = urllib.request.build_opener(urllib.request.ProxyHandler({})).open
    t0 = time.perf_counter()
    server_saw = json.loads(get(os.environ["RSI_SERVER_URL"] + "/reach").read())
    window = time.perf_counter() - t0
    json.dump({"metrics": {"throughput": 1 / window}, "samples": {"latency_s": [window]},
               "outputs": {"server": server_saw, "client": reach(spec["hosts"], spec["port"])},
               "counts": {"requests": 1, "failed": 0}}, open(os.environ["RSI_RESULT"], "w"))
    """
)


@pytest.mark.docker
def test_a_served_candidate_and_its_client_reach_nothing_on_the_host(docker_iso, tmp_path):
    """Attack: a candidate's server (and a client) connect to a service on the
    runner bound to 0.0.0.0, at every host address and at their gateway. On an
    ``--internal`` docker network they reached the gateway (the host's bridge
    address) and docker0's address; in the server's loopback-only namespace,
    nothing, while the client still reaches the server."""
    listener = HostListener()
    try:
        base, cand = _checkout(tmp_path / "base"), _checkout(tmp_path / "cand")
        hosts = listener.addresses()  # once: other sessions add and remove docker networks
        spec = json.dumps({"hosts": hosts, "port": listener.port})
        for d in (base, cand):
            (d / "hosts.json").write_text(spec)
        (cand / "server.py").write_text(REACHING_SERVER)
        (base / "bench" / "client.py").write_text(REACHING_CLIENT)
        listener.sanity_check()
        rec = run_once(_serving(), cand, base_checkout=base, isolation=docker_iso)
        assert rec.ok, rec.error + rec.stderr_tail
        seen = rec.result.outputs
        assert set(seen["server"]) >= set(hosts)  # every address was tried
        assert "reached" not in seen["server"].values(), seen
        assert "reached" not in seen["client"].values(), seen
        assert len(listener.accepted) == 1, listener.accepted  # only the sanity check's
    finally:
        listener.close()


@pytest.mark.docker
def test_evaluator_outputs_replace_the_runs_own(docker_iso, tmp_path):
    base, cand = _checkout(tmp_path / "base"), _checkout(tmp_path / "cand")
    (cand / "bench" / "evaluate.py").write_text("raise SystemExit('candidate evaluator')")
    bench = _bench("files", evaluator=f"{PY} bench/evaluate.py", evaluator_metrics=("heard",),
                   metrics={"speed": "higher", "heard": "higher"})  # fmt: skip
    rec = run_once(bench, cand, base_checkout=base, isolation=docker_iso)
    assert rec.ok, rec.error + rec.stderr_tail
    assert rec.result.outputs["transcripts"] == ["hello world", "good bye"]
    assert rec.result.metrics["heard"] == 2.0 and rec.sources["heard"] == "evaluator"
    assert rec.sources["speed"] == "benchmark"


# ---- the CLI ------------------------------------------------------------------------------

CLI_CONFIG = f"""
[benchmarks.probe]
command = "{PY} probe.py plain"
timeout_s = 60
[benchmarks.probe.metrics]
speed = "higher"
[objective]
benchmark = "probe"
metric = "wall_s"
min_gain = 0.5
[verifier]
warmup = 0
initial_pairs = 7
step = 2
max_pairs = 7
"""


def test_cli_refuses_bad_isolation_options(tmp_path):
    from typer.testing import CliRunner

    from verifier.cli import app

    c = _checkout(tmp_path / "c")
    (c / ".rsi").mkdir()
    (c / ".rsi" / "config.toml").write_text(CLI_CONFIG)
    runner = CliRunner()
    res = runner.invoke(app, ["verify-dirs", str(c), str(c), "--isolation", "container"])
    assert res.exit_code == 2 and "needs --isolation-spec FILE or --image" in res.output
    res = runner.invoke(app, ["calibrate-dir", str(c), "--cpus", "1"])
    assert res.exit_code == 2 and "--cpus and --memory need --isolation container" in res.output


@pytest.mark.docker
def test_cli_verify_dirs_in_containers_with_a_spec_file(docker_iso, tmp_path):
    from typer.testing import CliRunner

    from verifier.cli import app
    from verifier.verdict import Verdict

    base, cand = _checkout(tmp_path / "base"), _checkout(tmp_path / "cand")
    (base / ".rsi").mkdir()
    (base / ".rsi" / "config.toml").write_text(CLI_CONFIG)
    spec = tmp_path / "spec.json"
    from tests.images import runtime_image

    spec.write_text(IsolationSpec.simple(runtime_image(), cpus=1, memory="1g").model_dump_json())
    report = tmp_path / "verdict.json"
    res = CliRunner().invoke(app, [
        "verify-dirs", str(base), str(cand), "--isolation", "container",
        "--isolation-spec", str(spec), "--report", str(report),
    ])  # fmt: skip
    assert res.exit_code in (0, 1), res.output
    v = Verdict.from_json(report.read_text())
    assert v.decision in ("reject", "inconclusive") and v.runs == 14
    src = {m.name: m.source for m in v.metrics}
    assert src["wall_s"] == src["cpu_s"] == src["peak_rss_mib"] == "verifier"
    assert src["speed"] == "benchmark"


@pytest.mark.docker
def test_a_hanging_run_is_killed_at_its_timeout(docker_iso, tmp_path):
    c = _checkout(tmp_path / "c")
    t = time.perf_counter()
    rec = run_once(_bench("x", command="sleep 60", timeout_s=1.0), c, isolation=docker_iso)
    assert not rec.ok and rec.timed_out and "timed out after 1 s" in rec.error
    assert time.perf_counter() - t < 8


@pytest.mark.docker
def test_hidden_paths_are_given_read_only(docker_iso, tmp_path):
    c = _checkout(tmp_path / "c")
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "inputs.txt").write_text("secret prompts")
    cmd = (
        f"{PY} -c \"import json,os; p=os.environ['HIDDEN_DIR']; t=open(p+'/inputs.txt').read(); "
        "w='denied'\ntry:\n open(p+'/x','w')\n w='written'\nexcept OSError: pass\n"
        "json.dump({'metrics': {'speed': 1}, 'outputs': {'t': t, 'w': w}}, "
        "open(os.environ['RSI_RESULT'],'w'))\""
    )
    rec = run_once(_bench("x", command=cmd), c, isolation=docker_iso,
                   extra_env={"HIDDEN_DIR": str(hidden)})  # fmt: skip
    assert rec.ok, rec.error + rec.stderr_tail
    assert rec.result.outputs == {"t": "secret prompts", "w": "denied"}


def test_cgroup_reading_v1_and_v2(tmp_path):
    from verifier.isolation import Cgroup

    v2 = tmp_path / "v2" / "system.slice" / "docker-abc.scope"
    v2.mkdir(parents=True)
    (v2 / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\nthrottled_usec 300000\n")
    (v2 / "memory.stat").write_text("anon 1048576\nfile 999999999\nfile_mapped 1048576\n")
    (v2 / "cgroup.procs").write_text(f"{os.getpid()}\n")
    cg = Cgroup(1, tmp_path / "v2", proc="0::/system.slice/docker-abc.scope\n")
    assert cg.cpu_s() == 2.5 and cg.throttled_s() == 0.3
    assert cg.pids() == [os.getpid()] and cg.tree_rss(skip=0) > 1 << 20
    v1 = tmp_path / "v1"
    for ctl in ("memory", "cpu,cpuacct"):
        (v1 / ctl / "docker" / "abc").mkdir(parents=True)
    (v1 / "cpu,cpuacct" / "docker" / "abc" / "cpuacct.usage").write_text("1500000000\n")
    (v1 / "cpu,cpuacct" / "docker" / "abc" / "cpu.stat").write_text("throttled_time 5000000\n")
    (v1 / "memory" / "docker" / "abc" / "memory.stat").write_text(
        "rss 10\ntotal_rss 4096\ntotal_mapped_file 4096\ntotal_cache 1000000\n"
    )
    proc = "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/docker/abc\n"
    cg = Cgroup(1, v1, proc=proc)
    assert cg.cpu_s() == 1.5 and cg.throttled_s() == 0.005
    with pytest.raises(RuntimeError, match="not readable"):
        Cgroup(1, tmp_path / "none", proc="0::/gone\n")


SERVING_CONFIG = f"""
[benchmarks.web]
serve = "{PY} server.py"
client = "{PY} bench/client.py"
ready_path = "/health"
evaluator = "{PY} bench/evaluate.py"
evaluator_metrics = ["heard"]
timeout_s = 60
[benchmarks.web.metrics]
throughput = "higher"
heard = "higher"
[benchmarks.web.samples]
latency_s = "lower"
[objective]
benchmark = "web"
metric = "throughput"
min_gain = 0.5
[[guards]]
metric = "heard"
min_ratio = 1.0
required = true
[[quality]]
kind = "waveform"
files = "*.wav"
min_snr_db = 40
[[quality]]
kind = "wer"
output = "transcripts"
max_delta = 0.0
[verifier]
require_external = true
warmup = 0
initial_pairs = 7
step = 2
max_pairs = 7
default_guards = false
"""


def test_a_serving_verification_with_processes(tmp_path):
    from verifier.config import VerifyConfig
    from verifier.judge import verify

    base, cand = _checkout(tmp_path / "base"), _checkout(tmp_path / "cand")
    v = verify(base, cand, VerifyConfig.from_toml(SERVING_CONFIG))
    assert v.decision in ("reject", "inconclusive"), v.reason  # the same code: no gain
    assert v.runs == 14 or v.decision == "reject"
    src = {m.name: m.source for m in v.metrics}
    assert src["throughput"] == src["latency_p95_s"] == "client"
    assert src["heard"] == "evaluator" and src["startup_s"] == src["cpu_s"] == "verifier"
    by_kind = {(g.kind, g.against): g for g in v.guards}
    assert by_kind[("waveform", "bk")].status == "pass"
    assert "identical" in by_kind[("waveform", "bk")].detail
    assert by_kind[("wer", "bk")].status == "pass"


@pytest.mark.docker
def test_exit_status_and_a_child_holding_stdout(docker_iso, tmp_path):
    c = _checkout(tmp_path / "c")
    rec = run_once(_bench("x", command="echo broken >&2; exit 3"), c, isolation=docker_iso)
    assert not rec.ok and "exited with status 3" in rec.error and "broken" in rec.stderr_tail
    t = time.perf_counter()
    held = f"sleep 30 & {PY} probe.py plain"  # the sleep keeps the stdout pipe open
    rec = run_once(_bench("x", command=held), c, isolation=docker_iso)
    # the run ends when its command exits, not when the pipe closes; the sleep
    # it left behind is killed and fails the run (it could rewrite the result)
    assert not rec.ok and "left 1 process(es) running" in rec.error
    assert rec.wall_s < 3 and time.perf_counter() - t < 8


def test_device_requests_from_json_in_either_spelling(tmp_path):
    from docker.types import DeviceRequest

    for req in (
        {"Driver": "", "Count": -1, "DeviceIDs": [], "Capabilities": [["gpu"]], "Options": {}},
        {"driver": "", "count": -1, "device_ids": [], "capabilities": [["gpu"]], "options": {}},
    ):
        spec = IsolationSpec(image="img", base_kwargs={"device_requests": [req]})
        kw = ContainerIsolation(spec, client=object()).create_kwargs(Job("x", tmp_path))
        (got,) = kw["device_requests"]
        assert isinstance(got, DeviceRequest) and got.count == -1
        assert got.capabilities == [["gpu"]]


def test_docker_errors_are_one_sentence_with_the_fix_never_the_baselines():
    """A missing image or a stopped daemon is the machine's failure: its run error
    says what to do, and the verdict's stage is infrastructure, not baseline."""
    import docker.errors
    import requests.exceptions

    from verifier.config import VerifyConfig
    from verifier.infra import explain
    from verifier.isolation import run_job
    from verifier.measure import Session
    from verifier.runner import RunRecord

    assert "make docker-image" in explain(docker.errors.ImageNotFound("rsi-bot/base:nope"))
    assert "start Docker" in explain(docker.errors.DockerException("Error while fetching server API version"))
    assert "start Docker" in explain(requests.exceptions.ConnectionError("refused"))
    assert "docker group" in explain(docker.errors.APIError("permission denied while trying"))

    class NoImage:
        def start(self, job):
            raise docker.errors.ImageNotFound("No such image: rsi-bot/base:nope")

    cr = run_job(NoImage(), None)
    assert cr.error.startswith("infrastructure: a Docker image is missing")
    cfg = VerifyConfig.from_toml(
        '[benchmarks.b]\ncommand = "x"\n[benchmarks.b.metrics]\nm = "higher"\n'
        '[objective]\nbenchmark = "b"\nmetric = "m"\n')
    s = Session(cfg.benchmark(), {"bk": "/nonexistent"}, seed=0)
    err = s._fail("bk", RunRecord(ok=False, error=f"the benchmark: {cr.error}"), "the baseline")
    assert err.stage == "infrastructure" and "baseline" not in err.message
    assert err.message.startswith("a Docker image is missing") and "make docker-image" in err.message


# How the copy of a run dir out of its container is spoilt on a loaded machine:
# the runtime fails to start the exec (Docker streams its error text in place
# of the archive), or tar is cut short at a member's boundary (a shorter
# archive that tarfile reads without complaint).
SPOILT_COPY = {
    "exec-refused": ["tar-that-is-not-there"],
    "cut-short": ["/bin/sh", "-c", "tar -C /rsi/run -cf - ./result.json | head -c 1024; exit 137"],
}


def _spoil_copies(monkeypatch, how: str, times: int) -> list[list[str]]:
    """The first ``times`` copies of a run dir out of a container spoilt as
    ``how`` (the real engine runs the spoilt exec); the copies' argvs."""
    import docker

    real = docker.APIClient.exec_create
    seen: list[list[str]] = []

    def exec_create(self, container, cmd, *a, **kw):
        if isinstance(cmd, list) and cmd[:1] == ["tar"]:
            seen.append(cmd)
            if len(seen) <= times:
                cmd = SPOILT_COPY[how]
        return real(self, container, cmd, *a, **kw)

    monkeypatch.setattr(docker.APIClient, "exec_create", exec_create)
    return seen


@pytest.mark.docker
@pytest.mark.parametrize("how", sorted(SPOILT_COPY))
def test_a_spoilt_copy_of_the_run_dir_is_undone_and_tried_again(docker_iso, tmp_path, monkeypatch, how):
    """CI saw a baseline's run end as an error ("the run dir could not be
    copied out ... (ReadError)") on a loaded machine. A copy is whole only
    when tar's archive parses and tar exited 0; a spoilt one is undone and
    tried again, so the run's result and every output file arrive."""
    c = _checkout(tmp_path / "c")
    tries = _spoil_copies(monkeypatch, how, times=1)
    work = tmp_path / "work"
    work.mkdir()
    rec = run_once(_bench("files"), c, isolation=docker_iso, workdir=work)
    assert rec.ok, rec.error
    assert len(tries) == 2
    out = Path(rec.work_dir) / "run" / "outputs"
    assert sorted(p.name for p in out.iterdir()) == ["0.txt", "1.txt"]
    assert (out / "1.txt").read_text() == "good bye"


@pytest.mark.docker
@pytest.mark.parametrize("how", sorted(SPOILT_COPY))
def test_a_copy_spoilt_every_time_is_an_error_that_says_why_and_leaves_nothing(
    docker_iso, tmp_path, monkeypatch, how
):
    """Spoilt on every try, the run is an error saying why (Docker's own
    words when it refused the exec; tar's status when it was cut short), and
    none of a partial copy is left where a later step could read it."""
    c = _checkout(tmp_path / "c")
    tries = _spoil_copies(monkeypatch, how, times=99)
    work = tmp_path / "work"
    work.mkdir()
    rec = run_once(_bench("files"), c, isolation=docker_iso, workdir=work)
    assert not rec.ok
    assert len(tries) == 3
    assert "could not be copied out of the job's container" in rec.error and "3 tries" in rec.error
    if how == "exec-refused":
        assert "OCI runtime exec failed" in rec.error, rec.error
    else:
        assert "tar's exit status 137" in rec.error, rec.error
    run_dir = Path(rec.work_dir) / "run"
    assert sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*")) == ["outputs"]  # as it was


def _on_job_creates(monkeypatch, times: int, spoil) -> list[list[str]]:
    """The first ``times`` requests to create a job's exec handed to
    ``spoil(container, cmd)``, which returns the command to create instead or
    raises; every request (and every other exec) reaches the real engine."""
    import docker

    real = docker.APIClient.exec_create
    seen: list[list[str]] = []

    def exec_create(self, container, cmd, *a, **kw):
        if isinstance(cmd, list) and "rsi-job" in cmd:
            seen.append(cmd)
            if len(seen) <= times:
                cmd = spoil(container, cmd)
        return real(self, container, cmd, *a, **kw)

    monkeypatch.setattr(docker.APIClient, "exec_create", exec_create)
    return seen


def _spoil_job_starts(monkeypatch, times: int) -> list[list[str]]:
    """The first ``times`` execs of a job's command replaced by one the real
    runtime fails to start (no pid; Docker's text on stdout, status 126)."""
    return _on_job_creates(monkeypatch, times, lambda container, cmd: SPOILT_COPY["exec-refused"])


@pytest.mark.docker
def test_a_job_the_runtime_failed_to_start_is_started_again_and_one_that_ran_never_is(
    docker_iso, tmp_path, monkeypatch
):
    """An exec the runtime could not start has no pid: nothing of the job ran,
    so it is started again and the run is whole. A job that ran and exited
    126 itself, printing Docker's words, is a failed run, started once (a
    candidate cannot buy itself a second try)."""
    c = _checkout(tmp_path / "c")
    starts = _spoil_job_starts(monkeypatch, times=2)
    rec = run_once(_bench("files"), c, isolation=docker_iso)
    assert rec.ok, rec.error
    assert len(starts) == 3
    assert rec.result.metrics["speed"] == 1.0
    monkeypatch.undo()
    starts = _spoil_job_starts(monkeypatch, times=0)
    fake = "echo 'OCI runtime exec failed: exec failed: unable to start container process'; exit 126"
    rec = run_once(_bench(command=fake), c, isolation=docker_iso)
    assert not rec.ok and len(starts) == 1
    monkeypatch.undo()
    starts = _spoil_job_starts(monkeypatch, times=99)
    rec = run_once(_bench("files"), c, isolation=docker_iso)
    assert not rec.ok and len(starts) == 3
    assert "126" in rec.error and "OCI runtime exec failed" in rec.stdout_tail, rec.error


def _falter_job_creates(monkeypatch, times: int, status: int) -> list[list[str]]:
    """The first ``times`` requests to create a job's exec answered by the
    engine's own error type with ``status`` (5xx: the engine failed under load,
    no exec exists; 4xx: the request itself is refused), as docker-py raises
    it."""
    import docker
    import requests

    def refuse(container, cmd):
        response = requests.Response()
        response.status_code = status
        response.reason = "Internal Server Error" if status >= 500 else "Conflict"
        response.url = f"http+docker://localhost/containers/{container}/exec"
        raise docker.errors.APIError(
            f"{status} Server Error", response=response, explanation="context deadline exceeded"
        )

    return _on_job_creates(monkeypatch, times, refuse)


@pytest.mark.docker
def test_a_job_exec_the_engine_failed_to_create_is_asked_for_again_and_a_refused_one_is_not(
    docker_iso, tmp_path, monkeypatch
):
    """A server error (5xx) creating a job's exec means no exec exists and
    nothing of the job ran: it is asked for again, and the run is whole. A
    refusal (4xx) is an answer asking again would not change: the run ends at
    once as the machine's error, saying Docker's words; so does a 5xx on
    every try, after three."""
    c = _checkout(tmp_path / "c")
    creates = _falter_job_creates(monkeypatch, times=2, status=500)
    rec = run_once(_bench("files"), c, isolation=docker_iso)
    assert rec.ok, rec.error
    assert len(creates) == 3
    assert rec.result.metrics["speed"] == 1.0
    monkeypatch.undo()
    creates = _falter_job_creates(monkeypatch, times=99, status=500)
    rec = run_once(_bench("files"), c, isolation=docker_iso)
    assert not rec.ok and len(creates) == 3
    assert "infrastructure: Docker refused a request" in rec.error, rec.error
    assert "context deadline exceeded" in rec.error, rec.error
    monkeypatch.undo()
    creates = _falter_job_creates(monkeypatch, times=1, status=409)
    rec = run_once(_bench("files"), c, isolation=docker_iso)
    assert not rec.ok and len(creates) == 1
    assert "infrastructure: Docker refused a request (409" in rec.error, rec.error
