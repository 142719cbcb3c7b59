"""Sandbox: real containers; limits really enforced; kwargs for accelerators."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness import sandbox
from harness.sandbox import Mount, SandboxJob, container_kwargs, python_mounts
from harness.spec import RunnerProfile

PY = sys.executable


def py_job(code: str, **kw) -> SandboxJob:
    return SandboxJob(command=[PY, "-c", code], mounts=python_mounts(), **kw)


def test_kwargs_cpu_profile_is_locked_down():
    kw = container_kwargs(SandboxJob(command=["true"]), RunnerProfile(cpus=1.5, memory="512m", pids=64))
    assert kw["user"] == "1000:1000" and kw["cap_drop"] == ["ALL"]
    assert kw["security_opt"] == ["no-new-privileges"] and kw["read_only"] is True
    assert kw["network_mode"] == "none"
    assert kw["mem_limit"] == kw["memswap_limit"] == 512 * 1024**2
    assert kw["nano_cpus"] == 1_500_000_000 and kw["pids_limit"] == 64
    assert "device_requests" not in kw and "devices" not in kw


def test_kwargs_network_only_when_asked():
    kw = container_kwargs(SandboxJob(command=["true"], network=True), RunnerProfile())
    assert kw["network_mode"] == "bridge"


def test_kwargs_cuda():
    kw = container_kwargs(SandboxJob(command=["true"]), RunnerProfile(device="cuda"))
    (req,) = kw["device_requests"]
    assert req["Count"] == -1 and req["Capabilities"] == [["gpu"]]
    kw = container_kwargs(SandboxJob(command=["true"]), RunnerProfile(device="cuda", devices=["0", "3"]))
    assert kw["device_requests"][0]["DeviceIDs"] == ["0", "3"]


def test_kwargs_npu():
    kw = container_kwargs(
        SandboxJob(command=["true"]),
        RunnerProfile(device="npu"),
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


def test_python_mounts_same_paths_read_only():
    ms = python_mounts()
    assert all(m.source == m.target and m.read_only for m in ms)
    assert any(Path(sys.base_prefix).resolve() == Path(m.source) for m in ms)


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
