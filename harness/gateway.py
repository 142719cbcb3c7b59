"""The model gateway: the agent's only way to its model, and the one meter of it.

No agent holds a model key. For each run the harness starts this small relay
in a container of its own, on the agent's internal egress network (alias
:data:`ALIAS`) and on the upstream network(s), and tells the agent the
gateway's URL with a token good for this run only (:meth:`GatewayInfo.environment`:
``OPENAI_BASE_URL``/``OPENAI_API_BASE``, ``ANTHROPIC_BASE_URL``, and the
token as ``OPENAI_API_KEY``, ``CODEX_API_KEY`` and ``ANTHROPIC_API_KEY``). The gateway:

* checks the run token (``Authorization: Bearer`` or Anthropic's ``x-api-key``),
  drops every other header the agent sent but the wire-format ones
  (:data:`PASSED_HEADERS`), and forwards the call to the one upstream base URL
  with the real key (read from its own environment at start, then removed);
* relays only the routes it can meter (:data:`ROUTES`): OpenAI chat
  completions, OpenAI responses, Anthropic messages and embeddings, streaming
  or not, plus ``GET /v1/models`` (no tokens). Anything else is 404, never relayed;
* **fails closed**: every answer is metered from the upstream's own accounting
  before a byte of it reaches the agent: the ``usage`` object of a JSON answer,
  or the usage events of a stream (chat completions: the last chunk's ``usage``,
  which the gateway turns on by forcing ``stream_options.include_usage``;
  responses: ``response.completed``/``incomplete``/``failed``; Anthropic:
  ``message_start`` plus the last ``message_delta``). A stream is buffered
  whole and checked, then sent (the agent gets its events at once, at the
  end: an unmetered stream never reaches it, at the price of no incremental
  tokens). A successful answer without a valid usage is refused (502) and
  charged at its worst (:class:`Bound`: or the whole budget left where the
  request set no output cap);
* scrubs every answer: the agent gets our own headers only (``Content-Type``
  from a fixed list, ``Content-Length``), and a body with the key in it, as
  written or in a disguise :mod:`harness.leaks` knows (reversed, base64/32,
  hex, URL-encoded, split), gets it replaced by ``[REDACTED]``; a JSON body
  whose ``\\uXXXX`` escapes spell the key is withheld whole;
* enforces the task's budgets itself (``[agent] max_tokens``, ``max_cost_usd``,
  what is left of them when the round starts; priced with
  ``price_in_per_mtok``/``price_out_per_mtok``): a call is admitted with a
  reservation of its worst case (:class:`Bound`: its body's bytes plus
  :data:`OVERHEAD` tokens in, its own output cap out), concurrently with others
  while all reservations fit in what is left, else alone (it waits for the
  calls in flight). So concurrency never overruns a budget more than a single
  call does: the worst overrun is one call's usage beyond what was left when it
  went upstream (should an upstream bill a call beyond its bound, ignoring its
  output cap, the calls in flight then may add theirs, and every later call
  goes alone). Once spent, every further call is refused (HTTP 429,
  ``insufficient_quota``, with the reason; 400 on Anthropic's route: :data:`BUDGET_STATUS`);
* prints one ``RSI-METER {...}`` line (running totals per API, never a prompt
  or a key) to its log after each call, which the harness reads at the end of
  the run: that is the ledger's ``usage`` (``source = "gateway"``).

The wire formats' usage objects are read with pydantic models of our own
(:class:`ChatUsage`, :class:`ResponsesUsage`, :class:`AnthropicUsage`: the
fields of ``openai.types.CompletionUsage``, ``openai.types.responses.ResponseUsage``
and ``anthropic.types.Usage``), strict (a count is a JSON integer, 0..10^12,
or the answer is unmetered). Not the SDKs' own types: those build answers
with ``construct()`` (no validation, any field may be missing, made for
forward compatibility, the opposite of failing closed), and would add the
``openai`` and ``anthropic`` packages (tens of MB, ~0.5 s of import each) to a
relay that needs three usage objects; not LiteLLM (its usage helpers normalise
leniently too, and its import is seconds and hundreds of MB). Its proxy
was weighed before: it brings FastAPI, its own budget store (Postgres/Prisma)
and hundreds of routes we would have to lock down; this relay is the standard
library and httpx (already a dependency), starts in well under a second in the
runtime image (:mod:`harness.images`: nothing of the host is mounted into its
container), keeps no database, and its whole attack surface is readable here.

``python -m harness.gateway`` runs the server (config in ``RSI_GATEWAY_CONFIG``,
the key in ``RSI_GATEWAY_KEY``); :class:`Gateway` runs it in a container;
:func:`make_server` runs it in this process (tests, the latency benchmark).
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.sections import wildcard_over

ALIAS = "rsi-model-gateway"
PORT = 4000
PREFIX = "/v1"
METER_MARK = "RSI-METER "
READY_MARK = "RSI-GATEWAY listening"
MAX_BODY = 16 * 1024 * 1024
MAX_RESPONSE = 32 * 1024 * 1024
MAX_TOKENS = 10**12
OVERHEAD = 1024
"""Tokens a call may be billed beyond its body's bytes (message framing, a
provider's tool-use system prompt): the input side of a call's :class:`Bound`."""
LABEL = "rsi-bot.gateway"
ANTHROPIC_VERSION = "2023-06-01"
PASSED_HEADERS = ("anthropic-version", "anthropic-beta", "openai-beta")
"""The agent's headers that reach the upstream (wire-format versions; no credential)."""
CONTENT_TYPES = ("application/json", "text/event-stream")


class Api(StrEnum):
    """The wire formats the gateway relays, and meters."""

    CHAT = "chat"
    RESPONSES = "responses"
    MESSAGES = "messages"
    EMBEDDINGS = "embeddings"


ROUTES: dict[str, Api] = {
    "/chat/completions": Api.CHAT,
    "/responses": Api.RESPONSES,
    "/messages": Api.MESSAGES,
    "/embeddings": Api.EMBEDDINGS,
}
"""POST routes (below :data:`PREFIX`) and their wire formats; nothing else is
relayed but ``GET /models`` (costs no tokens)."""


class GatewayConfig(BaseModel):
    """What one run's gateway is told (never the key)."""

    upstream: str
    """The real base URL, ``http(s)://host[:port]/path`` ending where the
    routes go (``https://api.openai.com/v1``, ``https://api.anthropic.com/v1``)."""
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
        raise ValueError(f"model API base URL {url!r}: write an http(s) URL such as 'https://api.openai.com/v1'")
    return parts.hostname.lower()


def check_allowed_hosts(upstream: str, allowed: Iterable[str]) -> None:
    """``ValueError`` unless the model API's host is in ``allowed`` by its exact
    name and no wildcard there covers it: the agent would reach the upstream
    around the gateway (with a key of its own, unmetered)."""
    up = upstream_host(upstream)
    hosts = [str(h).strip().lower().rstrip(".") for h in allowed]
    h = wildcard_over(up, hosts)
    if h:
        raise ValueError(
            f"allowed host {h!r} covers the model API's host {up!r}: the agent could reach it around the "
            f"model gateway (which holds the key and meters every call); list {up!r} by its exact name and "
            "name the other hosts the agent needs exactly, without a wildcard over it")
    if up not in hosts:
        raise ValueError(f"the model API host {up!r} is not in the runner profile's allowed_hosts: add it "
                         f"(allowed_hosts = [\"{up}\"]); the agent reaches it through the model gateway only")


# ---- usage: the upstream's own accounting ------------------------------------------


class _Usage(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


_Count = Field(ge=0, le=MAX_TOKENS)


class ChatUsage(_Usage):
    """``openai.types.CompletionUsage`` (chat completions; embeddings have no
    ``completion_tokens``)."""

    prompt_tokens: int = _Count
    completion_tokens: int = Field(0, ge=0, le=MAX_TOKENS)


class ResponsesUsage(_Usage):
    """``openai.types.responses.ResponseUsage``."""

    input_tokens: int = _Count
    output_tokens: int = _Count


class AnthropicUsage(_Usage):
    """``anthropic.types.Usage``: ``input_tokens`` leaves out the cached part,
    billed as ``cache_creation_input_tokens`` and ``cache_read_input_tokens``."""

    input_tokens: int = _Count
    output_tokens: int = _Count
    cache_creation_input_tokens: int | None = Field(None, ge=0, le=MAX_TOKENS)
    cache_read_input_tokens: int | None = Field(None, ge=0, le=MAX_TOKENS)


@dataclass(frozen=True)
class Tokens:
    """One call's tokens in and out, as the upstream billed them."""

    tokens_in: int
    tokens_out: int


def _tokens(api: Api, usage: Any) -> Tokens | None:
    """The tokens of one usage object of ``api``'s format, or None when it is not one."""
    try:
        if api in (Api.CHAT, Api.EMBEDDINGS):
            c = ChatUsage.model_validate(usage)
            return Tokens(c.prompt_tokens, c.completion_tokens)
        if api is Api.RESPONSES:
            r = ResponsesUsage.model_validate(usage)
            return Tokens(r.input_tokens, r.output_tokens)
        a = AnthropicUsage.model_validate(usage)
        cached = (a.cache_creation_input_tokens or 0) + (a.cache_read_input_tokens or 0)
        return Tokens(a.input_tokens + cached, a.output_tokens)
    except ValidationError:
        return None


def sse_events(payload: bytes) -> list[Any]:
    """The JSON ``data:`` of each event of a server-sent-events body (others skipped)."""
    out = []
    text = payload.decode("utf-8", errors="replace").replace("\r\n", "\n")
    for block in text.split("\n\n"):
        data = "\n".join(line[5:].removeprefix(" ") for line in block.split("\n") if line.startswith("data:"))
        if not data or data == "[DONE]":
            continue
        try:
            out.append(json.loads(data))
        except ValueError:
            continue
    return out


def _stream_usage(api: Api, events: list[Any]) -> Tokens | None:
    events = [e for e in events if isinstance(e, dict)]
    if api is Api.CHAT:  # the last chunk carries it (stream_options.include_usage)
        used = [e["usage"] for e in events if e.get("usage") is not None]
        return _tokens(api, used[-1]) if used else None
    if api is Api.RESPONSES:
        done = [e.get("response") for e in events
                if e.get("type") in ("response.completed", "response.incomplete", "response.failed")]
        return _tokens(api, done[-1].get("usage")) if done and isinstance(done[-1], dict) else None
    if api is Api.MESSAGES:  # message_start: input (and a first output); message_delta: cumulative output
        starts = [e.get("message") for e in events if e.get("type") == "message_start"]
        deltas = [e.get("usage") for e in events if e.get("type") == "message_delta"]
        if len(starts) != 1 or not isinstance(starts[0], dict) or not deltas:
            return None
        first, last = starts[0].get("usage"), deltas[-1]
        if not isinstance(first, dict) or not isinstance(last, dict):
            return None
        return _tokens(api, {**first, **{k: v for k, v in last.items() if v is not None}})
    return None


def answer_usage(api: Api, payload: bytes, content_type: str) -> Tokens | None:
    """What the upstream billed for one successful answer (a JSON body or an
    event stream), or None when the answer does not say (it is then refused)."""
    if content_type.split(";")[0].strip().lower() == "text/event-stream":
        return _stream_usage(api, sse_events(payload))
    try:
        body = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    if api is Api.RESPONSES and body.get("status") in ("queued", "in_progress"):
        return None  # billed later, where the gateway does not see it
    return _tokens(api, body.get("usage"))


# ---- requests: what is relayed, and its worst case ------------------------------------


@dataclass(frozen=True)
class Bound:
    """The most one call can be billed: ``tokens_in`` (its body's bytes plus
    :data:`OVERHEAD`: no tokenizer makes more tokens than bytes of text) and
    ``tokens_out`` (its own output cap; None when it set none: unbounded)."""

    tokens_in: int
    tokens_out: int | None


def _cap(data: dict, *names: str) -> int | None:
    for n in names:
        v = data.get(n)
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            return v
    return None


def prepare(api: Api, data: Any, size: int) -> tuple[dict, Bound] | str:
    """The body to send upstream and the call's :class:`Bound`, or why it is
    refused (what the gateway could not meter)."""
    if not isinstance(data, dict):
        return "the request body is not a JSON object"
    body = dict(data)
    n = data.get("n", 1)
    n = n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else 1
    if api is Api.CHAT:
        out = _cap(data, "max_completion_tokens", "max_tokens")
        out = None if out is None else out * n
        if data.get("stream"):  # the upstream's own count, as the stream's last chunk
            opts = data.get("stream_options")
            body["stream_options"] = {**(opts if isinstance(opts, dict) else {}), "include_usage": True}
    elif api is Api.RESPONSES:
        if data.get("background"):
            return "background responses are not relayed (billed later, where the gateway cannot meter them)"
        out = _cap(data, "max_output_tokens")
    elif api is Api.MESSAGES:
        out = _cap(data, "max_tokens")
    else:
        out = 0
    return body, Bound(size + OVERHEAD, out)


# ---- the meter and the budget -----------------------------------------------------------


@dataclass
class Ticket:
    """One admitted call: its reservation, and whether it went alone."""

    bound: Bound
    tokens: int
    cost: float
    alone: bool


class Meter:
    """Running totals of one run, and the budget: admission with reservations (thread-safe)."""

    def __init__(self, cfg: GatewayConfig):
        self.cfg = cfg
        self.cond = threading.Condition()
        self.calls = self.tokens_in = self.tokens_out = self.refused = self.unmetered = 0
        self.by_api: dict[str, dict[str, int]] = {}
        self.cost_usd: float | None = (
            0.0 if cfg.price_in_per_mtok is not None and cfg.price_out_per_mtok is not None else None)
        self.refusal = ""
        self.exhausted = ""  # an unbounded call went unmetered: the budget counts as spent
        self.inflight = 0
        self.reserved_tokens = 0
        self.reserved_cost = 0.0
        self.alone = False
        self.over_reservation = 0  # calls billed beyond their bound (its assumption broken: then one at a time)

    @property
    def budgeted(self) -> bool:
        return self.cfg.max_tokens is not None or (self.cfg.max_cost_usd is not None and self.cost_usd is not None)

    def _price(self, tin: int, tout: int) -> float:
        pin, pout = self.cfg.price_in_per_mtok, self.cfg.price_out_per_mtok
        return 0.0 if pin is None or pout is None else (tin * pin + tout * pout) / 1e6

    def spent(self) -> str | None:
        """Why no more calls may go upstream, or None."""
        c = self.cfg
        used = self.tokens_in + self.tokens_out
        if self.exhausted:
            return self.exhausted
        if c.max_tokens is not None and used >= c.max_tokens:
            return f"token budget spent: {used:,} tokens used this round, {c.max_tokens:,} were left"
        if c.max_cost_usd is not None and self.cost_usd is not None and self.cost_usd >= c.max_cost_usd:
            return f"cost budget spent: ${self.cost_usd:.4f} used this round, ${c.max_cost_usd:.4f} was left"
        return None

    def _fits(self, bound: Bound) -> bool:
        if bound.tokens_out is None or self.over_reservation:  # a broken bound: one call at a time from then on
            return False
        c, worst = self.cfg, bound.tokens_in + bound.tokens_out
        if c.max_tokens is not None and self.tokens_in + self.tokens_out + self.reserved_tokens + worst > c.max_tokens:
            return False
        if c.max_cost_usd is not None and self.cost_usd is not None and (
                self.cost_usd + self.reserved_cost + self._price(bound.tokens_in, bound.tokens_out) > c.max_cost_usd):
            return False
        return True

    def admit(self, bound: Bound) -> Ticket | str:
        """A ticket to go upstream (blocks while it must wait to go alone), or
        why the call is refused (recorded)."""
        with self.cond:
            while True:
                why = self.spent()
                if why is not None:
                    self.refused += 1
                    self.refusal = why
                    return why
                if not self.budgeted:
                    alone = False
                elif self.alone:  # a call that did not fit is upstream: everyone waits
                    self.cond.wait()
                    continue
                elif self._fits(bound):
                    alone = False
                elif self.inflight:  # it would not fit beside the others: it goes alone, after them
                    self.cond.wait()
                    continue
                else:
                    alone = True
                out = bound.tokens_out or 0
                t = Ticket(bound, bound.tokens_in + out, self._price(bound.tokens_in, out), alone)
                self.inflight += 1
                self.alone = self.alone or alone
                if not alone:
                    self.reserved_tokens += t.tokens
                    self.reserved_cost += t.cost
                return t

    def settle(self, ticket: Ticket, api: Api, used: Tokens | None, *, billed: bool = True) -> None:
        """The call is back: count what the upstream billed (``used``); a
        billed answer without it counts at its worst (``ticket.bound``, or the
        whole budget where it had no output cap). ``billed=False``: the
        upstream refused the call (an error status): nothing counted."""
        with self.cond:
            self.inflight -= 1
            if ticket.alone:
                self.alone = False
            else:
                self.reserved_tokens -= ticket.tokens
                self.reserved_cost -= ticket.cost
            if billed:
                self.calls += 1
                if used is None:
                    self.unmetered += 1
                    b = ticket.bound
                    used = Tokens(b.tokens_in, b.tokens_out or 0)
                    if b.tokens_out is None:
                        self.exhausted = ("an answer the gateway could not meter (no usage from the upstream) "
                                          "had no output cap: the budget counts as spent")
                elif not ticket.alone and used.tokens_in + used.tokens_out > ticket.tokens:
                    self.over_reservation += 1
                self.tokens_in += used.tokens_in
                self.tokens_out += used.tokens_out
                row = self.by_api.setdefault(api.value, {"calls": 0, "tokens_in": 0, "tokens_out": 0})
                row["calls"] += 1
                row["tokens_in"] += used.tokens_in
                row["tokens_out"] += used.tokens_out
                if self.cost_usd is not None:
                    self.cost_usd += self._price(used.tokens_in, used.tokens_out)
            self.cond.notify_all()

    def totals(self) -> dict[str, Any]:
        with self.cond:
            return {"calls": self.calls, "tokens_in": self.tokens_in, "tokens_out": self.tokens_out,
                    "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 6),
                    "refused": self.refused, "unmetered": self.unmetered, "refusal": self.refusal,
                    "by_api": {k: dict(v) for k, v in self.by_api.items()},
                    "over_reservation": self.over_reservation}


# ---- scrubbing ---------------------------------------------------------------------------


def scrub(payload: bytes, held: Sequence[str]) -> bytes | None:
    """``payload`` with every secret the gateway holds redacted (as written or
    disguised, :mod:`harness.leaks`), or None when it cannot be: JSON
    escapes (``\\uXXXX``, ``\\/``) in a body whose decoded text holds one
    (the body is then withheld whole: redacting inside the escapes would
    hand the agent broken JSON, and what the escapes spell is what its
    client reads)."""
    from harness import leaks

    if not held:
        return payload
    text = payload.decode("latin-1")  # byte for byte: the secrets are ASCII
    if "\\u" in text or "\\/" in text:
        try:
            plain = json.dumps(json.loads(payload), ensure_ascii=False)
        except ValueError:  # an event stream: each event's data
            plain = json.dumps(sse_events(payload), ensure_ascii=False)
        if leaks.found(plain, held):
            return None
    if leaks.found(text, held):
        payload = leaks.redact(text, held).encode("latin-1")
    return payload


def _error(message: str, kind: str = "rsi_gateway", code: str = "rsi_gateway", api: Api | None = None) -> bytes:
    """An error body in the route's wire format (Anthropic's for messages)."""
    text = f"rsi model gateway: {message}"
    if api is Api.MESSAGES:
        return json.dumps({"type": "error", "error": {"type": kind, "message": text}}).encode()
    return json.dumps({"error": {"message": text, "type": kind, "code": code}}).encode()


BUDGET_STATUS = {Api.MESSAGES: 400}
"""The status of a budget refusal per wire format (default 429 ``insufficient_quota``,
which OpenAI clients such as codex take as final): Anthropic's clients retry
every 429 (claude-code for minutes), and Anthropic itself answers a spent
credit balance with 400 ``invalid_request_error``, which they take as final."""


def make_server(cfg: GatewayConfig, key: str, *, host: str = "0.0.0.0", port: int = PORT,
                out=None) -> ThreadingHTTPServer:
    """The gateway's HTTP server (not yet serving); meter lines go to ``out``
    (default stdout)."""
    import httpx

    upstream = cfg.upstream.rstrip("/")
    upstream_host(upstream)
    meter = Meter(cfg)
    held = [s for s in (key,) if s]
    client = httpx.Client(trust_env=False, timeout=httpx.Timeout(600.0, connect=15.0),
                          limits=httpx.Limits(max_connections=64, max_keepalive_connections=16))
    sink = out or sys.stdout
    sink_lock = threading.Lock()

    def emit() -> None:
        line = METER_MARK + json.dumps(meter.totals()) + "\n"
        with sink_lock:
            sink.write(line)
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
            try:
                self.wfile.write(b"".join(self._headers_buffer) + body)
            except OSError:  # the agent hung up; the call is metered all the same
                pass
            self._headers_buffer = []

        def _authorized(self) -> bool:
            bearer = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
            got = bearer or self.headers.get("x-api-key", "").strip()
            if hmac.compare_digest(got.encode(), cfg.token.encode()):
                return True
            self._send(401, _error("the run token is wrong (use the API key this run was given)",
                                   "invalid_request_error", "invalid_api_key"))
            return False

        def _path(self) -> str | None:
            """The route below :data:`PREFIX`, or None (answered)."""
            path = self.path.split("?", 1)[0]
            if path == "/health":
                self._send(200, b'{"ok": true}')
                return None
            if not (path == PREFIX or path.startswith(PREFIX + "/")) or ".." in path or "//" in path:
                self._send(404, _error(f"only {PREFIX}/... is relayed"))
                return None
            return path[len(PREFIX):]

        def _relay(self, method: str, url: str, api: Api | None, body: bytes | None,
                   ) -> tuple[int, bytes, str] | str:
            """(status, body, content type) of the upstream's whole answer, or why none came."""
            headers = {"Accept": "application/json, text/event-stream"}
            if body is not None:
                headers["Content-Type"] = "application/json"
            for name in PASSED_HEADERS:
                if self.headers.get(name):
                    headers[name] = self.headers[name]
            if api is Api.MESSAGES:
                headers.setdefault("anthropic-version", ANTHROPIC_VERSION)
                if key:
                    headers["x-api-key"] = key
            elif key:
                headers["Authorization"] = f"Bearer {key}"
            try:
                with client.stream(method, url, content=body, headers=headers) as resp:
                    chunks, size = [], 0
                    for chunk in resp.iter_bytes():
                        size += len(chunk)
                        if size > MAX_RESPONSE:
                            return f"the upstream's answer is over {MAX_RESPONSE} bytes"
                        chunks.append(chunk)
                    ctype = resp.headers.get("content-type", "").split(";")[0].strip().lower()
                    return resp.status_code, b"".join(chunks), ctype if ctype in CONTENT_TYPES else CONTENT_TYPES[0]
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # never sent: never billed
                return 0, _error(f"the upstream could not be reached ({type(exc).__name__})",
                                 "api_connection_error", "upstream_unreachable", api), CONTENT_TYPES[0]
            except httpx.HTTPError as exc:
                return f"the upstream broke off ({type(exc).__name__})"

        def _answer(self, status: int, payload: bytes, ctype: str) -> None:
            clean = scrub(payload, held)
            if clean is None:
                self._send(502, _error("the upstream's answer carried the gateway's key; withheld"))
            else:
                self._send(status, clean, ctype)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = self._path()
            if path is None or not self._authorized():
                return
            if not (path == "/models" or (path.startswith("/models/") and path.count("/") == 2)):
                self._send(404, _error(f"GET {PREFIX}{path} is not relayed (only {PREFIX}/models)"))
                return
            got = self._relay("GET", upstream + path, None, None)
            if isinstance(got, str):
                self._send(502, _error(got, "api_connection_error", "upstream_unreachable"))
            elif got[0] == 0:
                self._send(502, got[1])
            else:
                self._answer(*got)

        def do_POST(self) -> None:  # noqa: N802
            path = self._path()
            if path is None or not self._authorized():
                return
            api = ROUTES.get(path)
            if api is None:
                self._send(404, _error(f"POST {PREFIX}{path} is not relayed: the gateway relays only what it "
                                       f"can meter ({', '.join(PREFIX + r for r in ROUTES)})"))
                return
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                self._send(411, _error("a Content-Length is required"))
                return
            if length < 0 or length > MAX_BODY:
                self._send(413, _error(f"request body over {MAX_BODY} bytes"))
                return
            raw = self.rfile.read(length)
            try:
                prepared = prepare(api, json.loads(raw), len(raw))
            except ValueError:
                prepared = "the request body is not JSON"
            if isinstance(prepared, str):
                self._send(400, _error(prepared, "invalid_request_error", api=api))
                return
            body, bound = prepared
            ticket = meter.admit(bound)
            if isinstance(ticket, str):
                emit()
                status = BUDGET_STATUS.get(api, 429)
                self._send(status, _error(f"{ticket}; no more model calls this round",
                                          "insufficient_quota" if status == 429 else "invalid_request_error",
                                          "rsi_budget_spent", api))
                return
            got: tuple[int, bytes, str] | str = "the gateway failed"
            used = None
            try:
                got = self._relay("POST", upstream + path, api, json.dumps(body).encode())
                if not isinstance(got, str) and 200 <= got[0] < 300:
                    used = answer_usage(api, got[1], got[2])
            finally:  # an answer that may have been billed and says nothing counts at its worst
                ok = isinstance(got, str) or 200 <= got[0] < 300
                meter.settle(ticket, api, used, billed=ok)
                emit()
            if not isinstance(got, str) and got[0] == 0:  # not reached: nothing sent, nothing billed
                self._send(502, got[1])
                return
            if isinstance(got, str):
                self._send(502, _error(f"{got}; counted at its worst", "api_connection_error",
                                       "upstream_unreachable", api))
                return
            status, payload, ctype = got
            if 200 <= status < 300 and used is None:
                self._send(502, _error("the upstream's answer carried no usage the gateway could meter; "
                                       "withheld, and counted at its worst", "api_error", "rsi_unmetered", api))
                return
            self._answer(status, payload, ctype)

    class Server(ThreadingHTTPServer):
        request_queue_size = 128  # an agent's parallel calls wait in the backlog, not refused (default 5)
        daemon_threads = True

    server = Server((host, port), Handler)
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
        """What the agent is told: the gateway's URL and the run token (no key),
        in the names each client reads (OpenAI SDKs and LiteLLM; codex; the
        Anthropic SDK and claude-code, whose base URL has no ``/v1``)."""
        root = self.base_url.removesuffix(PREFIX)
        return {"OPENAI_API_BASE": self.base_url, "OPENAI_BASE_URL": self.base_url,
                "OPENAI_API_KEY": self.token, "CODEX_API_KEY": self.token,
                "ANTHROPIC_BASE_URL": root, "ANTHROPIC_API_BASE": root, "ANTHROPIC_API_KEY": self.token}


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
