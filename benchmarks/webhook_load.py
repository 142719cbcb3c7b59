"""Webhook front-door load test: deliveries per second and acknowledgement latency.

Starts ``rsi serve`` (uvicorn, one process, no workers: the front door alone)
over a fresh SQLite database, then ``--senders`` concurrent keep-alive
connections on loopback post signed real payloads (from
../shared/fixtures/github-webhooks) for ``--duration`` seconds. A share of
the posts are redeliveries of an id already sent. At the end the database is
counted: every accepted delivery must be stored exactly once, and every
redelivery must have been answered ``duplicate``.

    python benchmarks/webhook_load.py                 # 64 senders, 30 s
    python benchmarks/webhook_load.py --duration 10 --senders 32 --json
    python benchmarks/webhook_load.py --deliveries 2000 --kills 6 [--processes 2]

``--kills K``: the intake under crashes instead. ``--deliveries`` distinct
deliveries are sent; the server's whole process group is SIGKILLed K times,
evenly over the run, and restarted; a post that got no 2xx is sent again with
the same id (GitHub's redelivery). At the end every delivery must be stored
once with one event job (lost 0, duplicated 0).

Target: p99 acknowledgement latency under 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SECRET = "load-test-secret-0123"
EVENTS = ["issues/labeled.payload.json", "issue_comment/created.payload.json",
          "pull_request/closed.payload.json", "push/payload.json", "ping/payload.json",
          "workflow_run/completed.payload.json", "check_run/completed.payload.json"]


def _fixtures() -> list[tuple[str, bytes]]:
    base = ROOT.parent / "shared" / "fixtures" / "github-webhooks"
    out = []
    for rel in EVENTS:
        p = base / rel
        if p.is_file():
            out.append((rel.split("/")[0], p.read_bytes()))
    if not out:
        out.append(("ping", json.dumps({"zen": "Design for failure.", "hook_id": 1}).encode()))
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(port: int, event: str, body: bytes, delivery: str) -> bytes:
    from bot.webhook import sign

    head = (f"POST /webhook HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"X-GitHub-Event: {event}\r\nX-GitHub-Delivery: {delivery}\r\n"
            f"X-Hub-Signature-256: {sign(body, SECRET)}\r\nUser-Agent: GitHub-Hookshot/load\r\n"
            "\r\n")
    return head.encode() + body


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("server closed the connection")
    status = int(status_line.split()[1])
    length = 0
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    body = await reader.readexactly(length) if length else b""
    return status, body


async def _sender(port: int, deadline: float, payloads, sent: list, lat: list, stats: dict,
                  redeliver: float, rng: random.Random, rate: float = 0.0) -> None:
    """One keep-alive connection. ``rate`` > 0 paces it (deliveries/s of this
    sender); latency is then taken from the *intended* send time, so a stall
    counts against every request it delays (no coordinated omission)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    interval = 1.0 / rate if rate > 0 else 0.0
    next_at = time.perf_counter() + rng.random() * interval
    try:
        while time.perf_counter() < deadline:
            if interval:
                delay = next_at - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                intended = next_at
                next_at += interval
            else:
                intended = None
            event, body = payloads[rng.randrange(len(payloads))]
            if sent and rng.random() < redeliver:
                delivery, event, body = sent[rng.randrange(len(sent))]
                kind = "redelivery"
            else:
                delivery = str(uuid.uuid4())
                kind = "new"
                # a new delivery has a body of its own (the store refuses a body it
                # already processed under any delivery id: a replay)
                body = body.rstrip()[:-1] + f', "rsi_load_delivery": "{delivery}"}}'.encode()
            t0 = intended if intended is not None else time.perf_counter()
            writer.write(_request(port, event, body, delivery))
            await writer.drain()
            status, resp = await _read_response(reader)
            lat.append(time.perf_counter() - t0)
            outcome = json.loads(resp).get("outcome") if status == 202 else f"http {status}"
            stats[(kind, outcome)] = stats.get((kind, outcome), 0) + 1
            if kind == "new" and outcome == "accepted":
                sent.append((delivery, event, body))
    finally:
        writer.close()


async def _load(port: int, senders: int, duration: float, redeliver: float, seed: int,
                rate: float = 0.0):
    payloads = _fixtures()
    sent: list = []
    lat: list[float] = []
    stats: dict = {}
    rng = random.Random(seed)
    deadline = time.perf_counter() + duration
    t0 = time.perf_counter()
    await asyncio.gather(*(_sender(port, deadline, payloads, sent, lat, stats, redeliver,
                                   random.Random(rng.random()), rate / senders)
                           for _ in range(senders)))
    return time.perf_counter() - t0, sent, lat, stats


async def _kill_load(port: int, items: list, senders: int, kills: int, restart) -> dict:
    """Send every item until it is answered 2xx; SIGKILL and restart the server
    ``kills`` times, evenly over the run (``restart`` does both, blocking)."""
    queue: asyncio.Queue = asyncio.Queue()
    for it in items:
        queue.put_nowait(it)
    done: set[str] = set()
    outcomes: dict[str, int] = {}
    resent = [0]

    async def sender() -> None:
        conn = None
        while len(done) < len(items):
            try:
                delivery, event, body = queue.get_nowait()
            except asyncio.QueueEmpty:
                await asyncio.sleep(0.01)
                continue
            try:
                if conn is None:
                    conn = await asyncio.open_connection("127.0.0.1", port)
                conn[1].write(_request(port, event, body, delivery))
                await conn[1].drain()
                status, resp = await asyncio.wait_for(_read_response(conn[0]), 15)
            except (OSError, ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError,
                    ValueError, IndexError):
                status, resp = 0, b""
                if conn is not None:
                    conn[1].close()
                conn = None
            if status == 202:
                o = json.loads(resp).get("outcome")
                outcomes[o] = outcomes.get(o, 0) + 1
                done.add(delivery)
            else:  # no answer or 5xx: GitHub's redelivery sends it again, same id
                resent[0] += 1
                queue.put_nowait((delivery, event, body))
                await asyncio.sleep(0.05)
        if conn is not None:
            conn[1].close()

    async def killer() -> None:
        for k in range(kills):
            while len(done) < (k + 1) * len(items) // (kills + 1):
                await asyncio.sleep(0.005)
            await asyncio.to_thread(restart)

    t0 = time.perf_counter()
    await asyncio.gather(killer(), *(sender() for _ in range(senders)))
    return {"elapsed_s": round(time.perf_counter() - t0, 2), "outcomes": outcomes,
            "resent": resent[0]}


def kill_main(args) -> int:
    """``--kills``: the intake under SIGKILLs of the whole server (see the docstring)."""
    import signal

    import httpx

    tmp = Path(tempfile.mkdtemp(prefix="rsi-kill-"))
    db = args.database_url or f"sqlite:///{tmp}/bot.db"
    port = _free_port()
    env = {**os.environ, "RSI_WEBHOOK_SECRET": SECRET, "RSI_GITHUB_TOKEN": "unused",
           "RSI_DATABASE_URL": db, "RSI_WORKERS": "0", "RSI_STATE_DIR": str(tmp / "state"),
           "RSI_REDELIVER_INTERVAL_S": "0",
           "PYTHONPATH": os.pathsep.join([str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))}
    log = open(tmp / "serve.log", "ab")
    server: list[subprocess.Popen] = []
    recover: list[float] = []

    def start() -> None:
        server.append(subprocess.Popen(
            [sys.executable, "-m", "bot.service_cli", "serve", "--port", str(port), "--workers",
             "0", "--processes", str(args.processes)], env=env, stdout=log,
            stderr=subprocess.STDOUT, cwd=str(ROOT), start_new_session=True))
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError("rsi serve did not come up: " + (tmp / "serve.log").read_text()[-2000:])

    def restart() -> None:
        t0 = time.time()
        os.killpg(server[-1].pid, signal.SIGKILL)
        server[-1].wait(30)
        start()
        recover.append(time.time() - t0)

    payloads = _fixtures()
    rng = random.Random(args.seed)
    items = []
    for _ in range(args.deliveries):
        event, body = payloads[rng.randrange(len(payloads))]
        delivery = str(uuid.uuid4())
        items.append((delivery, event,
                      body.rstrip()[:-1] + f', "rsi_load_delivery": "{delivery}"}}'.encode()))
    start()
    try:
        run = asyncio.run(_kill_load(port, items, args.senders, args.kills, restart))
    finally:
        try:
            os.killpg(server[-1].pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        server[-1].wait(30)
    from bot.store import Store

    store = Store(db)
    stored = set(_delivery_ids(store))
    events = store.jobs(kind="event")
    per_delivery: dict[str, int] = {}
    for j in events:
        d = j.payload.get("delivery_id")
        per_delivery[d] = per_delivery.get(d, 0) + 1
    ids = [d for d, _, _ in items]
    result = {"deliveries": len(ids), "kills": args.kills, "processes": args.processes,
              "database": "sqlite" if db.startswith("sqlite") else db.split("://")[0],
              "senders": args.senders, **run,
              "recovery_s_max": round(max(recover), 2) if recover else None,
              "stored": len(stored & set(ids)), "lost": len(set(ids) - stored),
              "duplicated": sum(n - 1 for n in per_delivery.values() if n > 1)
              + max(0, len(events) - len(per_delivery)),
              "host_load_1min": round(os.getloadavg()[0], 2)}
    result["nothing_lost_or_duplicated"] = result["lost"] == 0 and result["duplicated"] == 0
    print(json.dumps(result) if args.json else
          "\n".join(f"{k:28} {v}" for k, v in result.items()))
    return 0 if result["nothing_lost_or_duplicated"] else 1


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    i = min(len(values) - 1, max(0, int(round(q * (len(values) - 1)))))
    return values[i]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--senders", type=int, default=64)
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of load")
    ap.add_argument("--redeliver", type=float, default=0.05,
                    help="share of posts that repeat an already-accepted delivery id")
    ap.add_argument("--database-url", default=None, help="default: a fresh SQLite file")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--processes", type=int, default=1, help="rsi serve --processes")
    ap.add_argument("--rate", type=float, default=300.0,
                    help="offered deliveries/s of the paced phase (0: skip it)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--kills", type=int, default=0,
                    help="SIGKILL and restart the server this many times (the intake under crashes)")
    ap.add_argument("--deliveries", type=int, default=2000, help="with --kills: how many")
    args = ap.parse_args(argv)
    if args.kills:
        return kill_main(args)

    tmp = Path(tempfile.mkdtemp(prefix="rsi-load-"))
    db = args.database_url or f"sqlite:///{tmp}/bot.db"
    port = _free_port()
    env = {**os.environ, "RSI_WEBHOOK_SECRET": SECRET, "RSI_GITHUB_TOKEN": "unused",
           "RSI_DATABASE_URL": db, "RSI_WORKERS": "0", "RSI_STATE_DIR": str(tmp / "state"),
           "PYTHONPATH": os.pathsep.join([str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))}
    log = open(tmp / "serve.log", "wb")
    server = subprocess.Popen([sys.executable, "-m", "bot.service_cli", "serve", "--port",
                               str(port), "--workers", "0", "--processes", str(args.processes)],
                              env=env, stdout=log,
                              stderr=subprocess.STDOUT, cwd=str(ROOT))
    try:
        import httpx

        deadline = time.time() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.time() > deadline:
                print((tmp / "serve.log").read_text()[-3000:], file=sys.stderr)
                return 2
            time.sleep(0.1)
        import psutil

        procs = [psutil.Process(server.pid)] + psutil.Process(server.pid).children(recursive=True)

        def cpu() -> float:
            return sum(sum(p.cpu_times()[:2]) for p in procs if p.is_running())

        # Phase 1, saturation: every sender posts as fast as it is answered
        # (closed loop: latency is bounded below by senders / throughput).
        # Phase 2, paced: the same senders offer --rate deliveries/s in all,
        # latency measured from the intended send time.
        phases = []
        sent, stats = [], {}
        plan = [("saturation", 0.0)] + ([("paced", args.rate)] if args.rate > 0 else [])
        for name, rate in plan:
            cpu0, client0 = cpu(), time.process_time()
            elapsed, p_sent, lat, p_stats = asyncio.run(
                _load(port, args.senders, args.duration, args.redeliver, args.seed, rate))
            phases.append({
                "phase": name, "offered_per_s": rate or None, "duration_s": round(elapsed, 2),
                "requests": len(lat), "deliveries_per_s": round(len(lat) / elapsed, 1),
                "ack_p50_ms": round(_pct(lat, 0.50) * 1000, 2),
                "ack_p99_ms": round(_pct(lat, 0.99) * 1000, 2),
                "ack_max_ms": round(max(lat) * 1000, 2) if lat else None,
                "server_cpu_ms_per_delivery": round((cpu() - cpu0) / max(len(lat), 1) * 1000, 3),
                "client_cpu_share": round((time.process_time() - client0) / elapsed, 2),
            })
            sent.extend(p_sent)
            for k, n in p_stats.items():
                stats[k] = stats.get(k, 0) + n
        load1 = os.getloadavg()[0]
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()

    from bot.store import Store

    store = Store(db)
    rows = store.count_deliveries()
    jobs = sum(store.job_counts().values())
    stored_ids = {row for row in _delivery_ids(store)}
    sent_ids = [d for d, _, _ in sent]
    accepted = stats.get(("new", "accepted"), 0)
    duplicates_answered = stats.get(("redelivery", "duplicate"), 0)
    errors = {f"{k}:{o}": n for (k, o), n in stats.items()
              if not ((k == "new" and o == "accepted") or (k == "redelivery" and o == "duplicate"))}
    result = {
        "senders": args.senders, "processes": args.processes, "phases": phases,
        "accepted": accepted, "redeliveries_answered_duplicate": duplicates_answered,
        "rows_deliveries": rows, "rows_jobs": jobs,
        "lost": len(set(sent_ids) - stored_ids), "duplicated": rows - len(set(sent_ids)),
        "unexpected_answers": errors, "target_p99_ms": 50,
        "host_cpus": os.cpu_count(), "host_load_1min": round(load1, 2),
    }
    ok = (result["lost"] == 0 and result["duplicated"] == 0 and rows == accepted == jobs
          and not errors)
    result["nothing_lost_or_duplicated"] = ok
    if args.json:
        print(json.dumps(result))
    else:
        _print_table(result)
    return 0 if ok else 1


def _print_table(result: dict) -> None:
    cols = ["phase", "offered_per_s", "deliveries_per_s", "ack_p50_ms", "ack_p99_ms",
            "ack_max_ms", "server_cpu_ms_per_delivery", "requests"]
    rows = [[str(ph.get(c) if ph.get(c) is not None else "max") for c in cols]
            for ph in result["phases"]]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    print(f"webhook load: {result['senders']} senders on loopback, "
          f"{result['processes']} server process(es), {result['host_cpus']} CPUs, "
          f"load {result['host_load_1min']}")
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
    print(f"accepted {result['accepted']}, stored {result['rows_deliveries']}, jobs "
          f"{result['rows_jobs']}, lost {result['lost']}, duplicated {result['duplicated']}, "
          f"redeliveries answered duplicate {result['redeliveries_answered_duplicate']}, "
          f"unexpected answers {result['unexpected_answers'] or 'none'}")
    print(f"nothing lost or duplicated: {result['nothing_lost_or_duplicated']}; "
          f"target p99 < {result['target_p99_ms']} ms")


def _delivery_ids(store) -> list[str]:
    from sqlalchemy import select

    from bot.store import Delivery

    with store.tx() as s:
        return list(s.scalars(select(Delivery.id)))


if __name__ == "__main__":
    sys.exit(main())
