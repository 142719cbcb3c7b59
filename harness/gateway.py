"""The model gateway: the agent's only way to its model, and the one meter of it.

An agent that talks to an OpenAI-compatible endpoint (its runner profile's
``env`` names ``OPENAI_API_BASE``) never holds the endpoint's key. For each
run the harness starts this small relay in a container of its own, on the
agent's internal egress network (alias :data:`ALIAS`) and on the upstream
network(s), and tells the agent ``OPENAI_API_BASE=http://rsi-model-gateway:4000/v1``
and ``OPENAI_API_KEY=<a token good for this run only>``. The gateway:

* checks the run token (``Authorization: Bearer``), drops every other header
  the agent sent, and forwards the call to the real base URL with the real key
  (read from its own environment at start, then removed from it);
* meters every call from the upstream's own OpenAI ``usage`` (tokens in and
  out), prices it with the task's ``[agent] price_in_per_mtok`` /
  ``price_out_per_mtok`` and prints one ``RSI-METER {...}`` line (running
  totals, never a prompt or a key) to its log, which the harness reads at the
  end of the run: that is the ledger's ``usage`` (``source = "gateway"``);
* enforces the task's budgets itself: the round starts with what is left of
  ``[agent] max_tokens`` and ``max_cost_usd``; once spent, every further call
  is refused (HTTP 429, ``insufficient_quota``, with the reason). Calls go
  upstream one at a time, so a budget is overrun by one call at most;
* refuses what it cannot meter: ``stream: true`` (the presets run without
  streaming) and bodies over :data:`MAX_BODY`.

A small relay of our own rather than LiteLLM's proxy: it is ~300 lines on the
standard library and httpx (already a dependency), starts in well under a
second in the runtime image (harness.images), keeps no database, and its
whole attack surface is readable here; LiteLLM's proxy would bring FastAPI,
its own budget store (Postgres/Prisma for budgets) and hundreds of routes we
would have to lock down, to use one of them.

``python -m harness.gateway`` runs the server (config in ``RSI_GATEWAY_CONFIG``,
the key in ``RSI_GATEWAY_KEY``); :class:`Gateway` runs it in a container;
:func:`make_server` runs it in this process (tests, the latency benchmark).
"""

from __future__ import annotations

import hmac
import json
import math
import os
import secrets
import socket
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, Field

ALIAS = "rsi-model-gateway"
PORT = 4000
PREFIX = "/v1"
METER_MARK = "RSI-METER "
READY_MARK = "RSI-GATEWAY listening"
MAX_BODY = 16 * 1024 * 1024
MAX_RESPONSE = 32 * 1024 * 1024
MAX_TOKENS = 10**12
LABEL = "rsi-bot.gateway"


class GatewayConfig(BaseModel):
    """What one run's gateway is told (never the key)."""

    upstream: str
    """The real OpenAI-compatible base URL (``http(s)://host[:port]/path``)."""
    token: str
    """The run token the agent holds instead of the key."""
    max_tokens: int | None = Field(None, ge=0)
    """Tokens left of the task's budget when the round starts."""
    max_cost_usd: float | None = Field(None, ge=0)
    price_in_per_mtok: float | None = Field(None, ge=0)
    price_out_per_mtok: float | None = Field(None, ge=0)


def upstream_host(url: str) -> str:
    """The host of an upstream base URL; ``ValueError`` for anything but http(s)://host."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
        raise ValueError(f"OPENAI_API_BASE {url!r}: write an http(s) URL such as 'https://api.openai.com/v1'")
    return parts.hostname.lower()


class Meter:
    """Running totals of one run, and the budget check (thread-safe)."""

    def __init__(self, cfg: GatewayConfig):
        self.cfg = cfg
        self.lock = threading.Lock()
        self.calls = self.tokens_in = self.tokens_out = self.refused = self.unmetered = 0
        self.cost_usd: float | None = (
            0.0 if cfg.price_in_per_mtok is not None and cfg.price_out_per_mtok is not None else None)
        self.refusal = ""

    def spent(self) -> str | None:
        """Why no more calls may go upstream, or None."""
        c = self.cfg
        used = self.tokens_in + self.tokens_out
        if c.max_tokens is not None and used >= c.max_tokens:
            return f"token budget spent: {used:,} tokens used this round, {c.max_tokens:,} were left"
        if c.max_cost_usd is not None and self.cost_usd is not None and self.cost_usd >= c.max_cost_usd:
            return f"cost budget spent: ${self.cost_usd:.4f} used this round, ${c.max_cost_usd:.4f} was left"
        return None

    def refuse(self, why: str) -> None:
        self.refused += 1
        self.refusal = why

    def record(self, body: Any) -> None:
        usage = body.get("usage") if isinstance(body, dict) else None
        self.calls += 1
        if not isinstance(usage, dict):
            self.unmetered += 1
            return
        tin, tout = _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
        self.tokens_in += tin
        self.tokens_out += tout
        price_in, price_out = self.cfg.price_in_per_mtok, self.cfg.price_out_per_mtok
        if self.cost_usd is not None and price_in is not None and price_out is not None:
            self.cost_usd += (tin * price_in + tout * price_out) / 1e6

    def totals(self) -> dict[str, Any]:
        return {"calls": self.calls, "tokens_in": self.tokens_in, "tokens_out": self.tokens_out,
                "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 6),
                "refused": self.refused, "unmetered": self.unmetered, "refusal": self.refusal}


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return 0
    return int(min(max(value, 0), MAX_TOKENS))


def _error(message: str, kind: str = "rsi_gateway", code: str = "rsi_gateway") -> bytes:
    return json.dumps({"error": {"message": f"rsi model gateway: {message}", "type": kind, "code": code}}).encode()


def make_server(cfg: GatewayConfig, key: str, *, host: str = "0.0.0.0", port: int = PORT,
                out=None) -> ThreadingHTTPServer:
    """The gateway's HTTP server (not yet serving); meter lines go to ``out``
    (default stdout)."""
    import httpx

    upstream = cfg.upstream.rstrip("/")
    upstream_host(upstream)
    meter = Meter(cfg)
    one_at_a_time = threading.Lock()
    client = httpx.Client(trust_env=False, timeout=httpx.Timeout(600.0, connect=15.0))
    sink = out or sys.stdout

    def emit() -> None:
        sink.write(METER_MARK + json.dumps(meter.totals()) + "\n")
        sink.flush()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "rsi-gateway"
        sys_version = ""
        _headers_buffer: list[bytes]  # http.server's own, undeclared in its stubs

        def log_message(self, *args: Any) -> None:  # nothing an agent sent reaches a log
            pass

        def setup(self) -> None:
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            # headers and body in one write: no Nagle / delayed-ACK stall (~40 ms) between them
            self._headers_buffer.append(b"\r\n")
            self.wfile.write(b"".join(self._headers_buffer) + body)
            self._headers_buffer = []

        def _authorized(self) -> bool:
            got = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
            if hmac.compare_digest(got.encode(), cfg.token.encode()):
                return True
            self._send(401, _error("the run token is wrong (use the OPENAI_API_KEY this run was given)",
                                   "invalid_request_error", "invalid_api_key"))
            return False

        def _target(self) -> str | None:
            path = self.path.split("?", 1)[0]
            if path == "/health":
                self._send(200, b'{"ok": true}')
                return None
            if not (path == PREFIX or path.startswith(PREFIX + "/")) or ".." in path:
                self._send(404, _error(f"only {PREFIX}/... is relayed"))
                return None
            return upstream + path[len(PREFIX):]

        def _relay(self, method: str, url: str, body: bytes | None) -> tuple[int, bytes, str] | None:
            headers = {"Accept": "application/json"}
            if body is not None:
                headers["Content-Type"] = "application/json"
            if key:
                headers["Authorization"] = f"Bearer {key}"
            try:
                with client.stream(method, url, content=body, headers=headers) as resp:
                    chunks, size = [], 0
                    for chunk in resp.iter_bytes():
                        size += len(chunk)
                        if size > MAX_RESPONSE:
                            self._send(502, _error(f"the upstream's answer is over {MAX_RESPONSE} bytes"))
                            return None
                        chunks.append(chunk)
                    return resp.status_code, b"".join(chunks), resp.headers.get("content-type", "application/json")
            except httpx.HTTPError as exc:
                self._send(502, _error(f"the upstream could not be reached ({type(exc).__name__})",
                                       "api_connection_error", "upstream_unreachable"))
                return None

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            url = self._target()
            if url is None or not self._authorized():
                return
            got = self._relay("GET", url, None)
            if got is not None:
                self._send(*got)

        def do_POST(self) -> None:  # noqa: N802
            url = self._target()
            if url is None or not self._authorized():
                return
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                self._send(411, _error("a Content-Length is required"))
                return
            if length < 0 or length > MAX_BODY:
                self._send(413, _error(f"request body over {MAX_BODY} bytes"))
                return
            body = self.rfile.read(length)
            try:
                data = json.loads(body)
            except ValueError:
                self._send(400, _error("the request body is not JSON"))
                return
            if isinstance(data, dict) and data.get("stream"):
                self._send(400, _error("streaming is not relayed (it cannot be metered here): "
                                       "run the agent without streaming", "invalid_request_error"))
                return
            with one_at_a_time:
                why = meter.spent()
                if why is not None:
                    meter.refuse(why)
                    emit()
                    self._send(429, _error(f"{why}; no more model calls this round",
                                           "insufficient_quota", "rsi_budget_spent"))
                    return
                got = self._relay("POST", url, body)
                if got is None:
                    return
                status, payload, ctype = got
                if 200 <= status < 300:
                    try:
                        meter.record(json.loads(payload))
                    except ValueError:
                        meter.record(None)
                    emit()
            self._send(status, payload, ctype)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    server.meter = meter  # type: ignore[attr-defined]
    return server


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m harness.gateway``: serve until killed."""
    cfg = GatewayConfig.model_validate_json(os.environ.pop("RSI_GATEWAY_CONFIG", "{}"))
    key = os.environ.pop("RSI_GATEWAY_KEY", "")
    server = make_server(cfg, key)
    print(READY_MARK, flush=True)
    server.serve_forever()


# ---- the container ----------------------------------------------------------------


def parse_meter(logs: str) -> dict[str, Any] | None:
    """The last ``RSI-METER`` line of a gateway's log, or None."""
    for line in reversed(logs.splitlines()):
        if line.startswith(METER_MARK):
            try:
                data = json.loads(line[len(METER_MARK):])
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
    return None


@dataclass(frozen=True)
class GatewayRoute:
    """What a run's gateway relays to, with what key, within what budget (kept
    in memory only: never written, never passed to the agent's container)."""

    upstream: str
    key: str = field(repr=False)
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    price_in_per_mtok: float | None = None
    price_out_per_mtok: float | None = None


@dataclass(frozen=True)
class GatewayInfo:
    base_url: str
    token: str

    def environment(self) -> dict[str, str]:
        """What the agent is told: the gateway's URL and the run token (no key)."""
        return {"OPENAI_API_BASE": self.base_url, "OPENAI_BASE_URL": self.base_url,
                "OPENAI_API_KEY": self.token}


class Gateway:
    """``with Gateway(cfg, key, network=...) as info:`` the relay in its own
    container, on the agent's internal ``network`` (alias :data:`ALIAS`) and
    the ``upstream_networks``; :meth:`meter` reads its totals."""

    def __init__(self, upstream: str, key: str, *, network: str, client, image: str,
                 upstream_networks: Sequence[str] = ("bridge",), max_tokens: int | None = None,
                 max_cost_usd: float | None = None, price_in_per_mtok: float | None = None,
                 price_out_per_mtok: float | None = None, ready_timeout_s: float = 30.0):
        self.cfg = GatewayConfig(upstream=upstream, token=f"rsi-gw-{secrets.token_hex(16)}",
                                 max_tokens=max_tokens, max_cost_usd=max_cost_usd,
                                 price_in_per_mtok=price_in_per_mtok, price_out_per_mtok=price_out_per_mtok)
        upstream_host(upstream)
        self.key = key
        self.network = network
        self.client = client
        self.image = image
        self.upstream = list(upstream_networks)
        self.ready_timeout_s = ready_timeout_s
        self.container: Any = None  # a docker SDK container (untyped)

    def __enter__(self) -> GatewayInfo:
        try:
            return self._start()
        except Exception as exc:
            self.close()
            raise RuntimeError(f"could not start the model gateway: {exc}") from exc

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> GatewayInfo:
        from harness import containers, images

        # our code and its Python are the runtime image's content: nothing of the host is mounted
        self.container = self.client.containers.create(
            images.sandbox_image(self.image), [containers.python_executable(), "-m", "harness.gateway"],
            name=f"rsi-gateway-{uuid.uuid4().hex[:12]}", user="65534:65534", cap_drop=["ALL"],
            security_opt=["no-new-privileges"], read_only=True, tmpfs={"/tmp": "rw,size=16m"},
            working_dir="/tmp", mem_limit=256 * 1024**2, memswap_limit=256 * 1024**2, pids_limit=64,
            environment={"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
                         "HOME": "/tmp", "RSI_GATEWAY_CONFIG": self.cfg.model_dump_json(),
                         "RSI_GATEWAY_KEY": self.key},
            network=self.upstream[0], labels={LABEL: "1"}, detach=True,
            log_config={"type": "json-file", "config": {"max-size": "1m", "max-file": "1"}})
        for extra in self.upstream[1:]:
            self.client.networks.get(extra).connect(self.container)
        self.client.networks.get(self.network).connect(self.container, aliases=[ALIAS])
        self.container.start()
        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            self.container.reload()
            logs = self.container.logs(tail=50)
            if READY_MARK.encode() in logs:
                break
            if self.container.status not in ("created", "running"):
                raise RuntimeError(f"the gateway exited: {logs[-1500:].decode(errors='replace')}")
            if time.monotonic() > deadline:
                raise RuntimeError("the gateway did not start listening in time")
            time.sleep(0.1)
        return GatewayInfo(base_url=f"http://{ALIAS}:{PORT}{PREFIX}", token=self.cfg.token)

    def meter(self) -> dict[str, Any] | None:
        """The run's totals (its last meter line), or None when it metered nothing."""
        if self.container is None:
            return None
        try:
            logs = self.container.logs(stdout=True, stderr=False, tail=200)
        except Exception:  # noqa: BLE001 - the caller treats no meter as no calls known
            return None
        return parse_meter(logs.decode("utf-8", errors="replace"))

    def close(self) -> None:
        from harness.egress import discard

        discard(self.container)
        self.container = None


if __name__ == "__main__":
    main()
