"""The latency the model gateway adds to one model call.

Two measurements, each the median (and p95) over N sequential chat calls of
the time a client waits, direct to the model endpoint vs through the gateway;
the difference is what the gateway adds:

* ``inprocess``: a stdlib upstream and the gateway (``make_server``) in this
  process on localhost: the relay's own work (auth, body read, JSON parse,
  upstream call with keep-alive, metering, the meter line);
* ``--docker``: the real pieces: the scripted model server in its container
  (tests/fakemodel) and the gateway in its own container (``Gateway``, as a
  sandbox run starts it), both reached from this host over their docker
  network: the extra container hop included.

    .venv/bin/python benchmarks/gateway_latency.py [--calls 200] [--docker]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.gateway import GatewayConfig, make_server  # noqa: E402

BODY = {"model": "openai/bench", "messages": [{"role": "user", "content": "x" * 2000}]}
REPLY = json.dumps({"choices": [{"message": {"role": "assistant", "content": "ok"}}],
                    "usage": {"prompt_tokens": 500, "completion_tokens": 5}}).encode()


def timed(client: httpx.Client, url: str, token: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r = client.post(url, json=BODY, headers={"Authorization": f"Bearer {token}"})
        r.raise_for_status()
        out.append(time.perf_counter() - t)
    return out


def report(name: str, direct: list[float], via: list[float]) -> None:
    def q(xs: list[float], p: float) -> float:
        return sorted(xs)[min(len(xs) - 1, int(p * len(xs)))] * 1000

    d, g = statistics.median(direct) * 1000, statistics.median(via) * 1000
    print(f"{name}: direct median {d:.2f} ms (p95 {q(direct, .95):.2f}), through the gateway median "
          f"{g:.2f} ms (p95 {q(via, .95):.2f}): the gateway adds {g - d:.2f} ms per call (median)")


def inprocess(n: int) -> None:
    class Up(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(REPLY)))
            self._headers_buffer.append(b"\r\n")  # one write (no Nagle stall): a fair "direct"
            self.wfile.write(b"".join(self._headers_buffer) + REPLY)
            self._headers_buffer = []

    up = ThreadingHTTPServer(("127.0.0.1", 0), Up)
    threading.Thread(target=up.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{up.server_port}/v1"
    gw = make_server(GatewayConfig(upstream=base, token="t"), "k", host="127.0.0.1", port=0, out=io.StringIO())
    threading.Thread(target=gw.serve_forever, daemon=True).start()
    with httpx.Client(trust_env=False) as c:
        timed(c, f"{base}/chat/completions", "k", 20)  # warm-up
        timed(c, f"http://127.0.0.1:{gw.server_port}/v1/chat/completions", "t", 20)
        direct = timed(c, f"{base}/chat/completions", "k", n)
        via = timed(c, f"http://127.0.0.1:{gw.server_port}/v1/chat/completions", "t", n)
    report("inprocess", direct, via)
    up.shutdown()
    gw.shutdown()


def docker(n: int) -> None:
    from harness import sandbox
    from harness.gateway import Gateway
    from tests.fakemodel.fixture import FakeModel

    step = {"content": "ok", "usage": {"prompt_tokens": 500, "completion_tokens": 5}}
    client = sandbox.docker_client()
    with FakeModel({"bench": [step]}, api_key="sk-bench") as fm:
        net = client.networks.create(f"rsi-gwbench-{time.time_ns()}", driver="bridge", internal=True)
        gw = Gateway(f"http://{fm.address.split('//')[1]}/v1", "sk-bench", network=net.name, client=client,
                     image=fm.image, upstream_networks=[fm.network_name])
        try:
            info = gw.__enter__()
            gw.container.reload()
            ip = gw.container.attrs["NetworkSettings"]["Networks"][fm.network_name]["IPAddress"]
            with httpx.Client(trust_env=False, timeout=30) as c:
                timed(c, f"{fm.address}/v1/chat/completions", "sk-bench", 20)
                timed(c, f"http://{ip}:4000/v1/chat/completions", info.token, 20)
                direct = timed(c, f"{fm.address}/v1/chat/completions", "sk-bench", n)
                via = timed(c, f"http://{ip}:4000/v1/chat/completions", info.token, n)
            report("docker", direct, via)
        finally:
            gw.close()
            net.remove()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--docker", action="store_true", help="also measure the real containers")
    a = ap.parse_args()
    inprocess(a.calls)
    if a.docker:
        docker(a.calls)


if __name__ == "__main__":
    main()
