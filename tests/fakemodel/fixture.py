"""The scripted model server in a container, reachable by a DNS name.

:class:`FakeModel` starts ``tests.fakemodel.server`` in a container of the
sandbox's runtime image (:mod:`harness.images`: Python, fastapi and uvicorn;
only this ``tests/fakemodel`` directory mounted, read-only: it plays the model
API, outside the sandbox) on its own docker network, under the alias :data:`HOST`. An
agent reaches it only through the egress proxy: pass :attr:`network` as the
proxy's upstream network and :data:`HOST` as the runner profile's only
allowed host; tinyproxy resolves the alias with docker's DNS on that network.
The test process reads what the server saw from the container's address.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from harness import sandbox
from harness.egress import discard
from harness.images import sandbox_image

HOST = "model.rsi.test"
PORT = 8000
LABEL = "rsi-bot.fakemodel"
REPO_ROOT = Path(__file__).resolve().parents[2]


class FakeModel:
    """``with FakeModel(scripts, api_key=...) as fm:`` a running scripted server."""

    def __init__(self, scripts: dict[str, list[dict]], *, api_key: str = "", image: str | None = None):
        self.scripts = scripts
        self.api_key = api_key
        self.image = sandbox_image(image or sandbox.RunnerProfile().image)
        self.client: Any = None  # docker SDK objects (untyped)
        self.network: Any = None
        self.container: Any = None
        self.dir: str | None = None
        self.address = ""

    @property
    def network_name(self) -> str:
        return self.network.name

    @property
    def base_url(self) -> str:
        """What the agent is told (through its proxy)."""
        return f"http://{HOST}:{PORT}/v1"

    def __enter__(self) -> FakeModel:
        try:
            self._start()
        except Exception:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        self.client = sandbox.docker_client()
        tag = uuid.uuid4().hex[:10]
        self.dir = tempfile.mkdtemp(prefix="rsi-fakemodel-")
        Path(self.dir, "script.json").write_text(json.dumps(self.scripts))
        Path(self.dir, "key").write_text(self.api_key)
        for p in (self.dir, f"{self.dir}/script.json", f"{self.dir}/key"):
            Path(p).chmod(0o755 if p == self.dir else 0o644)
        self.network = self.client.networks.create(f"rsi-fakemodel-{tag}", driver="bridge",
                                                   labels={LABEL: "1"})
        volumes = {str(Path(__file__).resolve().parent): {"bind": "/opt/rsi-test/tests/fakemodel", "mode": "ro"},
                   self.dir: {"bind": "/fakemodel", "mode": "ro"}}
        self.container = self.client.containers.create(
            self.image,
            [sandbox.python_executable(), "-m", "tests.fakemodel.server", "--script",
             "/fakemodel/script.json", "--api-key-file", "/fakemodel/key", "--port", str(PORT)],
            name=f"rsi-fakemodel-{tag}", user=sandbox.SANDBOX_UID, cap_drop=["ALL"],
            security_opt=["no-new-privileges"], read_only=True, tmpfs={"/tmp": "rw,size=16m"},
            working_dir="/opt/rsi-test", environment={"PYTHONPATH": "/opt/rsi-test", "HOME": "/tmp",
                                                      "PYTHONDONTWRITEBYTECODE": "1"},
            network=self.network.name, labels={LABEL: "1"}, detach=True, volumes=volumes,
            mem_limit=512 * 1024**2, pids_limit=64)
        self.network.disconnect(self.container)
        self.network.connect(self.container, aliases=[HOST])
        self.container.start()
        self._wait_ready()

    def _wait_ready(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.container.reload()
            if self.container.status not in ("created", "running"):
                raise RuntimeError(f"fake model server exited: {self.container.logs()[-2000:]!r}")
            nets = self.container.attrs["NetworkSettings"]["Networks"]
            ip = nets.get(self.network.name, {}).get("IPAddress")
            if ip:
                self.address = f"http://{ip}:{PORT}"
                try:
                    if httpx.get(f"{self.address}/health", timeout=2).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
            time.sleep(0.3)
        raise RuntimeError("fake model server did not answer /health in time")

    def requests(self, model: str | None = None) -> list[dict]:
        """What the server saw (optionally for one script), oldest first."""
        seen = httpx.get(f"{self.address}/_rsi/requests", timeout=10).json()
        return [r for r in seen if model is None or r["model"] == model]

    def close(self) -> None:
        discard(self.container, self.network)
        self.container = self.network = None
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
