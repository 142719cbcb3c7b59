"""The model gateway: the latency it adds per call, the worst budget overrun
under concurrency, and the attacks of issue 31 replayed against it.

Latency: the median (and p95) over N sequential calls of the time a client
waits, direct to the model endpoint vs through the gateway; the difference is
what the gateway adds:

* ``inprocess``: the scripted upstream (tests/fakemodel, FastAPI) and the
  gateway (``make_server``) in this process on localhost, one row per wire
  format x streaming: the relay's own work (auth, body read, JSON parse,
  admission, upstream call with keep-alive, buffering a stream, metering from
  its usage, scrubbing the answer for the key, the meter line);
* ``--docker``: the real pieces: the scripted model server in its container
  and the gateway in its own container (``Gateway``, as a sandbox run starts
  it), reached from this host over their docker network.

``--overrun``: R rounds of C concurrent calls (each billed 1,050 tokens)
against a 5,000-token budget, with and without an output cap: the worst
overrun seen, against the bound (one call's usage).

``--attacks [--gateway FILE]``: the attacks of issue 31 against a gateway
module (default: this checkout's; ``git show 0e6dd7f:harness/gateway.py >
/tmp/gw_before.py`` for the one before), one row per attack.

    .venv/bin/python benchmarks/gateway_latency.py [--calls 200] [--docker] [--overrun] [--attacks]
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import io
import statistics
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import gateway as current  # noqa: E402
from tests.fakemodel.server import serve_in_thread, upstream_billed  # noqa: E402

KEY = "sk-bench-upstream-key-0123456789"
STEP = {"content": "ok", "usage": {"prompt_tokens": 500, "completion_tokens": 5}}
PROMPT = "x" * 2000


def body(api: str, stream: bool, **extra) -> tuple[str, dict]:
    b: dict = {"model": "bench", **({"stream": True} if stream else {}), **extra}
    if api == "chat":
        return "/chat/completions", {**b, "messages": [{"role": "user", "content": PROMPT}]}
    if api == "responses":
        return "/responses", {**b, "input": PROMPT, "tools": [{"type": "function", "name": "shell"}]}
    if api == "messages":
        return "/messages", {**b, "max_tokens": 64, "messages": [{"role": "user", "content": PROMPT}],
                             "tools": [{"name": "Bash", "input_schema": {}}]}
    return "/embeddings", {**b, "input": [PROMPT]}


def timed(client: httpx.Client, base: str, token: str, api: str, stream: bool, n: int) -> list[float]:
    path, b = body(api, stream)
    if stream and api == "chat":
        b["stream_options"] = {"include_usage": True}  # what the gateway forces: the same answer direct
    headers = {"Authorization": f"Bearer {token}", "x-api-key": token}
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r = client.post(base + path, json=b, headers=headers)
        r.raise_for_status()
        out.append(time.perf_counter() - t)
    return out


def q(xs: list[float], p: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(p * len(xs)))] * 1000


def start_gateway(mod: ModuleType, up: str, **limits):
    log = io.StringIO()
    srv = mod.make_server(mod.GatewayConfig(upstream=up, token="t", **limits), KEY, host="127.0.0.1", port=0,
                          out=log)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_port}/v1", log


CASES = [("chat", False), ("chat", True), ("responses", False), ("responses", True),
         ("messages", False), ("messages", True), ("embeddings", False)]


def inprocess(n: int) -> None:
    gen = serve_in_thread({"bench": [STEP]}, api_key=KEY)
    up = next(gen)
    srv, gw, _ = start_gateway(current, up)
    print(f"inprocess, {n} sequential calls each (ms):")
    print(f"{'api':<11} {'stream':<6} {'direct p50':>10} {'p95':>7} {'gateway p50':>11} {'p95':>7} {'added p50':>9}")
    with httpx.Client(trust_env=False, timeout=30) as c:
        for api, stream in CASES:
            timed(c, up, KEY, api, stream, 10)
            timed(c, gw, "t", api, stream, 10)
            d, g = timed(c, up, KEY, api, stream, n), timed(c, gw, "t", api, stream, n)
            dm, gm = statistics.median(d) * 1000, statistics.median(g) * 1000
            print(f"{api:<11} {str(stream).lower():<6} {dm:>10.2f} {q(d, .95):>7.2f} {gm:>11.2f} "
                  f"{q(g, .95):>7.2f} {gm - dm:>9.2f}")
    srv.shutdown()
    gen.close()


def docker(n: int) -> None:
    from harness import sandbox
    from harness.gateway import Gateway
    from tests.fakemodel.fixture import FakeModel

    client = sandbox.docker_client()
    with FakeModel({"bench": [STEP]}, api_key=KEY) as fm:
        net = client.networks.create(f"rsi-gwbench-{time.time_ns()}", driver="bridge", internal=True)
        gw = Gateway(f"http://{fm.address.split('//')[1]}/v1", KEY, network=net.name, client=client,
                     image=fm.image, upstream_networks=[fm.network_name])
        try:
            info = gw.__enter__()
            gw.container.reload()
            ip = gw.container.attrs["NetworkSettings"]["Networks"][fm.network_name]["IPAddress"]
            print(f"docker (the gateway in its container), {n} sequential calls each (ms):")
            with httpx.Client(trust_env=False, timeout=30) as c:
                for api, stream in (("chat", False), ("messages", True)):
                    timed(c, f"{fm.address}/v1", KEY, api, stream, 10)
                    timed(c, f"http://{ip}:4000/v1", info.token, api, stream, 10)
                    d = timed(c, f"{fm.address}/v1", KEY, api, stream, n)
                    g = timed(c, f"http://{ip}:4000/v1", info.token, api, stream, n)
                    dm, gm = statistics.median(d) * 1000, statistics.median(g) * 1000
                    print(f"{api:<11} {str(stream).lower():<6} direct {dm:.2f} (p95 {q(d, .95):.2f}), gateway "
                          f"{gm:.2f} (p95 {q(g, .95):.2f}): adds {gm - dm:.2f}")
        finally:
            gw.close()
            net.remove()


def overrun(rounds: int, calls: int) -> None:
    budget, each = 5000, 1050
    step = {"content": "ok", "usage": {"prompt_tokens": 1000, "completion_tokens": 50}}
    print(f"overrun: {rounds} rounds of {calls} concurrent chat calls (each billed {each}), budget {budget}:")
    for capped in (True, False):
        worst, through = 0, []
        for _ in range(rounds):
            gen = serve_in_thread({"bench": [step]}, api_key=KEY)
            up = next(gen)
            srv, gw, _ = start_gateway(current, up, max_tokens=budget)
            path, b = body("chat", False, **({"max_tokens": 60} if capped else {}))

            def one(gw: str = gw, path: str = path, b: dict = b) -> None:
                httpx.post(gw + path, json=b, headers={"Authorization": "Bearer t"}, timeout=60)

            threads = [threading.Thread(target=one) for _ in range(calls)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            used = upstream_billed(httpx.get(up[:-3] + "/_rsi/requests").json())
            worst = max(worst, used["tokens_in"] + used["tokens_out"] - budget)
            through.append(used["calls"])
            srv.shutdown()
            gen.close()
        print(f"  output cap {'set' if capped else 'unset'}: calls through {min(through)}-{max(through)}, "
              f"worst overrun {worst} tokens ({100 * worst / budget:.0f}% of the budget; bound: one call, {each})")


def load(path: str | None) -> ModuleType:
    if not path:
        return current
    spec = importlib.util.spec_from_file_location("gateway_under_test", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def attacks(mod: ModuleType) -> None:
    def run(step: dict, api: str, n: int, stream: bool = False, **limits) -> tuple[list[httpx.Response], dict, dict]:
        gen = serve_in_thread({"bench": [step]}, api_key=KEY)
        up = next(gen)
        srv, gw, log = start_gateway(mod, up, **limits)
        path, b = body(api, stream)
        rs = [httpx.post(gw + path, json=b, headers={"Authorization": "Bearer t"}, timeout=30) for _ in range(n)]
        billed = upstream_billed(httpx.get(up[:-3] + "/_rsi/requests").json())
        srv.shutdown()
        gen.close()
        return rs, mod.parse_meter(log.getvalue()) or {}, billed

    rows = []
    rs, m, b = run({"content": "x", "usage": {"prompt_tokens": 9000, "completion_tokens": 1000}}, "responses", 5,
                   max_tokens=1000)
    rows.append(("5 x /v1/responses billed 10,000, budget 1,000",
                 f"{sum(r.status_code == 200 for r in rs)} relayed, upstream billed {b['tokens_in'] + b['tokens_out']:,}, "
                 f"metered {m.get('tokens_in', 0) + m.get('tokens_out', 0):,}"))
    rs, m, b = run({"content": "x", "usage": None}, "chat", 5)
    rows.append(("5 answers without usage", f"{sum(r.status_code == 200 for r in rs)} relayed to the agent, "
                 f"unmetered {m.get('unmetered', 0)}, refused {m.get('refused', 0)}"))
    rs, m, b = run({"echo_key": True}, "chat", 1)
    b64 = base64.b64encode(f"key={KEY}".encode()).decode()[4:30]
    rows.append(("upstream echoes the key (plain + base64)",
                 f"key in the agent's answer: plain {KEY in rs[0].text}, base64 {b64 in rs[0].text}"))
    for api in ("chat", "messages"):
        rs, m, b = run({"content": "x", "usage": {"prompt_tokens": 700, "completion_tokens": 30}}, api, 2, stream=True)
        rows.append((f"streamed {api} (2 calls, billed {b['tokens_in'] + b['tokens_out']:,})",
                     f"status {rs[0].status_code}, metered {m.get('tokens_in', 0) + m.get('tokens_out', 0):,}"))
    rs, m, b = run({"content": "x", "usage": {"prompt_tokens": 700, "completion_tokens": 30}}, "messages", 2)
    rows.append((f"Anthropic /v1/messages (2 calls, billed {b['tokens_in'] + b['tokens_out']:,})",
                 f"status {rs[0].status_code}, metered {m.get('tokens_in', 0) + m.get('tokens_out', 0):,}"))
    width = max(len(r[0]) for r in rows)
    for a, o in rows:
        print(f"{a:<{width}}  {o}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--docker", action="store_true", help="also measure the real containers")
    ap.add_argument("--overrun", action="store_true", help="the worst budget overrun under concurrency")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--attacks", action="store_true", help="replay the attacks of issue 31 (no latency)")
    ap.add_argument("--gateway", help="a gateway module file to attack instead of this checkout's")
    a = ap.parse_args()
    if a.attacks:
        attacks(load(a.gateway))
        return
    inprocess(a.calls)
    if a.overrun:
        overrun(a.rounds, a.concurrency)
    if a.docker:
        docker(a.calls)


if __name__ == "__main__":
    main()
