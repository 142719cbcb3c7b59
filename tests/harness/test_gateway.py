"""The model gateway in this process, between a real HTTP client and a real
upstream server: it injects the key, meters from the upstream's usage, holds
the budget, and refuses what it cannot meter."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from harness.gateway import GatewayConfig, make_server, parse_meter

KEY = "sk-upstream-real-key-0123456789"
TOKEN = "rsi-gw-run-token"


@contextmanager
def upstream(usage: dict | None = None) -> Iterator[tuple[str, list[dict]]]:
    seen: list[dict] = []

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append({"path": self.path, "auth": self.headers.get("Authorization"),
                         "leaked": self.headers.get("X-Agent"), "body": body})
            out = {"choices": [{"message": {"role": "assistant", "content": "hi"}}]}
            if usage is not None:
                out["usage"] = usage
            data = json.dumps(out).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}/v1", seen
    finally:
        srv.shutdown()


@contextmanager
def gateway(up: str, **limits) -> Iterator[tuple[str, io.StringIO]]:
    log = io.StringIO()
    srv = make_server(GatewayConfig(upstream=up, token=TOKEN, **limits), KEY, host="127.0.0.1", port=0, out=log)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}/v1", log
    finally:
        srv.shutdown()


def chat(base: str, token: str = TOKEN, **extra) -> httpx.Response:
    return httpx.post(f"{base}/chat/completions", headers={"Authorization": f"Bearer {token}", "X-Agent": "x"},
                      json={"model": "m", "messages": [{"role": "user", "content": "hello"}], **extra}, timeout=30)


def test_the_gateway_injects_the_key_and_meters_every_call():
    with upstream({"prompt_tokens": 100, "completion_tokens": 20}) as (up, seen), \
            gateway(up, price_in_per_mtok=2.0, price_out_per_mtok=8.0) as (gw, log):
        for _ in range(3):
            r = chat(gw)
            assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "hi"
        assert chat(gw, token="sk-guess").status_code == 401
    assert len(seen) == 3
    assert all(s["auth"] == f"Bearer {KEY}" and s["leaked"] is None and s["path"] == "/v1/chat/completions"
               for s in seen)
    meter = parse_meter(log.getvalue())
    assert meter == {"calls": 3, "tokens_in": 300, "tokens_out": 60, "cost_usd": pytest.approx(0.00108),
                     "refused": 0, "unmetered": 0, "refusal": ""}
    assert KEY not in log.getvalue() and "hello" not in log.getvalue()  # totals only


def test_the_gateway_holds_the_token_budget_itself():
    with upstream({"prompt_tokens": 1000, "completion_tokens": 50}) as (up, seen), \
            gateway(up, max_tokens=1500) as (gw, log):
        assert chat(gw).status_code == 200  # 1,050 used
        assert chat(gw).status_code == 200  # 2,100 used: a call overruns by itself at most
        r = chat(gw)
        assert r.status_code == 429
        err = r.json()["error"]
        assert err["code"] == "rsi_budget_spent" and "token budget spent: 2,100 tokens used" in err["message"]
    assert len(seen) == 2  # the refused call never went upstream
    meter = parse_meter(log.getvalue())
    assert meter["refused"] == 1 and meter["tokens_in"] + meter["tokens_out"] == 2100


def test_the_gateway_holds_the_cost_budget_and_refuses_what_it_cannot_meter():
    with upstream({"prompt_tokens": 1_000_000, "completion_tokens": 0}) as (up, seen), \
            gateway(up, max_cost_usd=1.0, price_in_per_mtok=1.5, price_out_per_mtok=1.5) as (gw, log):
        assert chat(gw, stream=True).status_code == 400
        assert chat(gw).status_code == 200
        assert chat(gw).status_code == 429
    assert len(seen) == 1
    assert "cost budget spent" in parse_meter(log.getvalue())["refusal"]


def test_a_reply_without_usage_is_counted_as_unmetered():
    with upstream(None) as (up, _), gateway(up) as (gw, log):
        assert chat(gw).status_code == 200
    assert parse_meter(log.getvalue())["unmetered"] == 1


def test_leaks_are_found_in_every_disguise_and_nothing_else():
    import base64
    import binascii
    from urllib.parse import quote

    from harness import leaks

    key = "sk-live-9f8e7d6c5b4a3210"
    disguises = [
        key, key[::-1], " ".join(key), "\n".join(key),
        base64.b64encode(f"api_key = '{key}'\n".encode()).decode(),
        base64.b64encode(f"xy{key}".encode()).decode(),  # another alignment
        base64.urlsafe_b64encode(f"x{key}".encode()).decode(),
        base64.b32encode(f"abc{key}".encode()).decode(),
        binascii.hexlify(key.encode()).decode().upper(),
        quote(f"k={key}", safe=""), "".join(f"%{b:02x}" for b in key.encode()),
    ]
    for text in disguises:
        assert leaks.found(text, [key]), text
        assert not leaks.found(leaks.redact(text, [key]), [key]), text
    source = "".join(p.read_text() for p in sorted(Path(leaks.__file__).parent.glob("*.py")))
    assert not leaks.found(source, [key])  # no false alarm on ordinary text
    assert leaks.host_secrets({"OPENAI_API_KEY": key, "DB_PASSWORD": "changeme", "PATH": "/usr/bin:/bin/x"}) == [key]
