"""The model gateway in this process, between a real HTTP client and the real
scripted upstream (tests/fakemodel, FastAPI, every provider's wire format): it
injects the key, meters every call from the upstream's own accounting
(streaming included), holds the budget under concurrency, refuses what it
cannot meter, and hands no secret back. The attacks of issue 31 are replayed
here; before this gateway, each of them got through."""

from __future__ import annotations

import base64
import io
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from harness.gateway import (
    Api,
    GatewayConfig,
    answer_usage,
    check_allowed_hosts,
    make_server,
    parse_meter,
)
from tests.fakemodel.server import serve_in_thread, upstream_billed

KEY = "sk-upstream-real-key-0123456789"
TOKEN = "rsi-gw-run-token"
ANSWER = {"content": "hi", "usage": {"prompt_tokens": 1000, "completion_tokens": 50}}


@contextmanager
def upstream(scripts: dict[str, list[dict]]) -> Iterator[tuple[str, str]]:
    """(base URL, address to read its request log from)."""
    gen = serve_in_thread(scripts, api_key=KEY)
    base = next(gen)
    try:
        yield base, base
    finally:
        gen.close()


def seen(base: str) -> list[dict]:
    return httpx.get(base.removesuffix("/v1") + "/_rsi/requests", timeout=10).json()


@contextmanager
def gateway(up: str, **limits) -> Iterator[tuple[str, io.StringIO]]:
    log = io.StringIO()
    srv = make_server(GatewayConfig(upstream=up, token=TOKEN, **limits), KEY, host="127.0.0.1", port=0, out=log)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}/v1", log
    finally:
        srv.shutdown()


def call(base: str, api: str, model: str = "m", *, stream: bool = False, token: str = TOKEN,
         anthropic_auth: bool = False, **extra) -> httpx.Response:
    auth = {"x-api-key": token} if anthropic_auth else {"Authorization": f"Bearer {token}"}
    headers = {**auth, "X-Agent": "stray", "anthropic-version": "2023-06-01"}
    body: dict = {"model": model, **({"stream": True} if stream else {})}
    if api == "chat":
        path, body["messages"] = "/chat/completions", [{"role": "user", "content": "hello"}]
    elif api == "responses":
        path, body["input"] = "/responses", "hello"
    elif api == "messages":
        path, body["messages"], body["max_tokens"] = "/messages", [{"role": "user", "content": "hello"}], 256
        body["tools"] = [{"name": "Bash", "input_schema": {"type": "object"}}]
    else:
        path, body["input"] = "/embeddings", ["hello"]
    if api == "responses":
        body["tools"] = [{"type": "function", "name": "shell_command", "parameters": {}}]
    return httpx.post(f"{base}{path}", headers=headers, json={**body, **extra}, timeout=30)


CASES = [("chat", False), ("chat", True), ("responses", False), ("responses", True),
         ("messages", False), ("messages", True), ("embeddings", False)]


@pytest.mark.parametrize(("api", "stream"), CASES)
def test_every_route_is_metered_from_the_upstreams_own_accounting(api: str, stream: bool):
    steps = [ANSWER, {"content": "x", "bash": "ls", "usage": {"prompt_tokens": 777, "completion_tokens": 33,
                                                              "cached": 500}}]
    with upstream({"m": steps}) as (up, _), gateway(up, price_in_per_mtok=2.0, price_out_per_mtok=8.0) as (gw, log):
        for _ in range(2):
            r = call(gw, api, stream=stream, anthropic_auth=api == "messages")
            assert r.status_code == 200, r.text
            assert answer_usage(Api(api), r.content, r.headers["content-type"]) is not None
            assert r.headers["content-type"].startswith("text/event-stream" if stream else "application/json")
        assert call(gw, api, token="sk-guess").status_code == 401
        got = seen(up)
    assert len(got) == 2 and all(s["key_ok"] and s["stray_header"] is None for s in got)
    assert {s["auth"] for s in got} == {"x-api-key" if api == "messages" else "bearer"}
    meter = parse_meter(log.getvalue())
    billed = upstream_billed(got)
    assert billed["tokens_in"] == 1777 and (billed["tokens_out"] == 83 or api == "embeddings")
    assert {k: meter[k] for k in billed} == billed  # the ledger's usage is the upstream's, exactly
    assert meter["unmetered"] == meter["refused"] == 0 and meter["by_api"] == {api: billed}
    assert meter["cost_usd"] == pytest.approx((billed["tokens_in"] * 2 + billed["tokens_out"] * 8) / 1e6)
    assert KEY not in log.getvalue() and "hello" not in log.getvalue()  # totals only


def test_a_stream_is_metered_even_when_the_agent_asks_for_no_usage():
    """The gateway forces ``stream_options.include_usage`` on: an agent cannot
    turn the stream's usage chunk off."""
    with upstream({"m": [ANSWER]}) as (up, _), gateway(up) as (gw, log):
        r = call(gw, "chat", stream=True, stream_options={"include_usage": False})
        assert r.status_code == 200 and b'"usage"' in r.content
    assert parse_meter(log.getvalue())["tokens_in"] == 1000


# ---- the attacks of issue 31, replayed -------------------------------------------------


def test_attack_responses_billed_beyond_the_budget_are_stopped():
    """Before: five ``/v1/responses`` calls billed 10,000 tokens each all got
    through a 1,000-token budget, metered at 0. Now: the first is metered
    (10,000, run alone: it set no output cap) and the rest are refused."""
    big = {"content": "x", "usage": {"prompt_tokens": 9000, "completion_tokens": 1000}}
    with upstream({"m": [big]}) as (up, _), gateway(up, max_tokens=1000) as (gw, log):
        codes = [call(gw, "responses").status_code for _ in range(5)]
        assert len(seen(up)) == 1
    assert codes == [200, 429, 429, 429, 429]
    meter = parse_meter(log.getvalue())
    assert meter["tokens_in"] + meter["tokens_out"] == 10_000 and meter["refused"] == 4
    assert "token budget spent: 10,000 tokens used this round, 1,000 were left" in meter["refusal"]


@pytest.mark.parametrize(("api", "stream"), CASES)
def test_attack_an_answer_without_usage_is_withheld_and_counted_at_its_worst(api: str, stream: bool):
    """Before: five usage-less answers were all relayed (``unmetered 5``). Now
    none reaches the agent; each counts at its worst (body bytes + overhead in,
    its output cap out), or, with no output cap, spends the budget."""
    with upstream({"m": [{"content": "secret plan", "usage": None}]}) as (up, _), \
            gateway(up, max_tokens=10**6) as (gw, log):
        rs = [call(gw, api, stream=stream) for _ in range(5)]
    meter = parse_meter(log.getvalue())
    assert rs[0].status_code == 502 and "carried no usage the gateway could meter" in rs[0].json()["error"]["message"]
    assert all(b"secret plan" not in r.content for r in rs)
    capped = api in ("messages", "embeddings")  # the others set no output cap here
    if capped:
        assert meter["unmetered"] == 5 and meter["tokens_in"] > 5 * 1024
    else:  # the first spends the budget: the rest never go upstream
        assert meter["unmetered"] == 1 and meter["refused"] == 4
        assert "could not meter" in meter["refusal"] and [r.status_code for r in rs[1:]] == [429] * 4


def test_attack_an_anthropic_stream_cut_before_its_output_usage_is_withheld():
    """A stream whose ``message_delta`` carries no usage: the input is known,
    the output is not; not relayed."""
    events = (b'event: message_start\ndata: {"type":"message_start","message":{"usage":'
              b'{"input_tokens":5,"output_tokens":1}}}\n\nevent: message_delta\ndata: {"type":"message_delta",'
              b'"delta":{}}\n\n')
    assert answer_usage(Api.MESSAGES, events, "text/event-stream") is None
    for bad in ({"prompt_tokens": -1, "completion_tokens": 3}, {"prompt_tokens": True, "completion_tokens": 3},
                {"prompt_tokens": "9", "completion_tokens": 3}, {"prompt_tokens": 1e30, "completion_tokens": 3},
                {"completion_tokens": 3}):
        assert answer_usage(Api.CHAT, json.dumps({"usage": bad}).encode(), "application/json") is None, bad


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_attack_an_upstream_that_echoes_the_key_hands_none_of_it_over(api: str):
    """Before: an error body echoing the key reached the agent. Now it is
    redacted, as written and base64-encoded; the agent gets our headers only."""
    with upstream({"m": [{"echo_key": True}]}) as (up, _), gateway(up) as (gw, _log):
        r = call(gw, api)
    assert r.status_code == 401 and "[REDACTED]" in r.text
    b64 = base64.b64encode(f"key={KEY}".encode()).decode()
    assert KEY not in r.text and b64[4:30] not in r.text
    assert set(r.headers) <= {"content-type", "content-length", "server", "date"}


def test_attack_a_key_spelled_in_json_escapes_is_withheld_whole():
    from harness.gateway import scrub

    escaped = json.dumps({"error": {"message": "".join(f"\\u{ord(c):04x}" for c in KEY)}}).replace("\\\\", "\\")
    assert json.loads(escaped)["error"]["message"] == KEY and KEY not in escaped
    assert scrub(escaped.encode(), [KEY]) is None
    assert scrub(b'{"ok": "caf\\u00e9"}', [KEY]) == b'{"ok": "caf\\u00e9"}'


def test_attack_a_wildcard_over_the_upstream_is_a_config_error():
    """Before: ``*.openai.com`` let the agent reach the upstream around the
    gateway. Now it is refused when the runner profile is read, and again when
    a run starts."""
    from harness.sections import RunnerProfile

    with pytest.raises(ValueError, match=r"'\*\.openai\.com' covers the model API's host 'api\.openai\.com'"):
        RunnerProfile(allowed_hosts=["*.openai.com", "api.openai.com"],
                      env={"OPENAI_API_BASE": "https://api.openai.com/v1"})
    with pytest.raises(ValueError, match="covers the model API's host"):
        check_allowed_hosts("https://api.anthropic.com/v1", ["*.anthropic.com"])
    with pytest.raises(ValueError, match="not in the runner profile's allowed_hosts"):
        check_allowed_hosts("https://api.anthropic.com/v1", ["pypi.org"])
    check_allowed_hosts("https://api.anthropic.com/v1", ["api.anthropic.com", "*.pypi.org"])


def test_what_cannot_be_metered_is_never_relayed():
    with upstream({"m": [ANSWER]}) as (up, _), gateway(up) as (gw, _log):
        auth = {"Authorization": f"Bearer {TOKEN}"}
        for path in ("/completions", "/messages/batches", "/responses/resp_1/cancel", "/files", "/audio/speech"):
            r = httpx.post(f"{gw}{path}", headers=auth, json={"model": "m"}, timeout=10)
            assert r.status_code == 404 and "not relayed" in r.text, path
        assert httpx.get(f"{gw}/responses/resp_1", headers=auth, timeout=10).status_code == 404
        assert call(gw, "responses", background=True).status_code == 400
        assert httpx.get(f"{gw}/models", headers=auth, timeout=10).status_code == 200
        assert not [s for s in seen(up) if s["route"] != "models"]


# ---- budgets under concurrency ----------------------------------------------------------


def _storm(gw: str, api: str, n: int, **extra) -> list[int]:
    codes: list[int] = []
    lock = threading.Lock()

    def one() -> None:
        r = call(gw, api, **extra)
        with lock:
            codes.append(r.status_code)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return codes


@pytest.mark.parametrize("capped", [True, False])
def test_the_budget_holds_under_concurrent_calls(capped: bool):
    """32 calls at once against a 5,000-token budget, each billed 1,050. With an
    output cap they go side by side while their reservations fit; without one
    each goes alone. Either way the budget is overrun by one call at most
    (whatever the scheduling: by the admission's mechanism, not by timing)."""
    with upstream({"m": [ANSWER]}) as (up, _), gateway(up, max_tokens=5000) as (gw, log):
        extra = {"max_tokens": 60} if capped else {}
        codes = _storm(gw, "chat", 32, **extra)
        billed = upstream_billed(seen(up))
    meter = parse_meter(log.getvalue())
    used = meter["tokens_in"] + meter["tokens_out"]
    assert used == billed["tokens_in"] + billed["tokens_out"] and codes.count(200) == billed["calls"]
    assert 5000 <= used <= 5000 + 1050 and codes.count(429) == 32 - billed["calls"]
    assert meter["over_reservation"] == 0


def test_the_cost_budget_holds():
    with upstream({"m": [{"content": "x", "usage": {"prompt_tokens": 1_000_000, "completion_tokens": 0}}]}) as (
            up, _), gateway(up, max_cost_usd=1.0, price_in_per_mtok=1.5, price_out_per_mtok=1.5) as (gw, log):
        assert call(gw, "chat", stream=True).status_code == 200
        assert call(gw, "chat").status_code == 429
    assert "cost budget spent" in parse_meter(log.getvalue())["refusal"]


def test_leaks_are_found_in_every_disguise_and_nothing_else():
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


def test_a_spent_budget_on_anthropics_route_is_final_for_its_clients():
    """Anthropic's clients retry every 429 (claude-code for minutes): there the
    refusal is a 400 in Anthropic's error shape, as a spent credit balance is."""
    with upstream({"m": [ANSWER]}) as (up, _), gateway(up, max_tokens=500) as (gw, _log):
        assert call(gw, "messages", stream=True).status_code == 200
        r = call(gw, "messages", stream=True)
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "invalid_request_error" and "token budget spent" in r.json()["error"]["message"]


def test_every_preset_goes_through_the_gateway_with_its_providers_api():
    """With network, each preset's model is behind the gateway (the provider's
    own URL when the profile names none); a custom command only when the
    profile names a base URL."""
    from harness.agents.command import CommandAgent
    from harness.sections import RunnerProfile

    net = RunnerProfile(allowed_hosts=["api.anthropic.com", "api.openai.com"])
    assert CommandAgent.preset("claude-code").upstream(net) == ("https://api.anthropic.com/v1", "ANTHROPIC_API_KEY")
    for kind in ("codex", "aider", "mini-swe-agent"):
        assert CommandAgent.preset(kind).upstream(net) == ("https://api.openai.com/v1", "OPENAI_API_KEY")
    local = RunnerProfile(allowed_hosts=["model.rsi.test"], env={"ANTHROPIC_BASE_URL": "http://model.rsi.test:8000"})
    assert CommandAgent.preset("claude-code").upstream(local) == ("http://model.rsi.test:8000/v1", "ANTHROPIC_API_KEY")
    assert CommandAgent(template="run").upstream(local) == ("http://model.rsi.test:8000/v1", "ANTHROPIC_API_KEY")
    assert CommandAgent(template="run").upstream(net) is None


def test_an_upstream_that_cannot_be_reached_bills_nothing():
    """Nothing was sent: the call is not counted, the budget stays."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    s.close()
    with gateway(dead, max_tokens=1000) as (gw, log):
        r1, r2 = call(gw, "chat"), call(gw, "chat")
    assert r1.status_code == r2.status_code == 502 and "could not be reached" in r1.text
    meter = parse_meter(log.getvalue())
    assert meter["calls"] == meter["unmetered"] == meter["refused"] == 0
