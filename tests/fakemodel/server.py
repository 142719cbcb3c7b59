"""A scripted model server (FastAPI) speaking the providers' wire formats.

Routes (each streaming and not, in the provider's own format):

* ``POST /v1/chat/completions``: OpenAI chat completions (a stream's last
  chunk carries ``usage`` when the request asks ``stream_options.include_usage``);
* ``POST /v1/responses``: OpenAI responses (always a stream for codex:
  ``response.created`` ... ``response.completed`` with ``usage``);
* ``POST /v1/messages``: Anthropic messages (``message_start`` with the input
  usage, ``message_delta`` with the output's);
* ``POST /v1/embeddings``; ``GET /v1/models``.

Each *script* is a list of steps, chosen by the request's ``model`` name (its
last path part: ``openai/mini-ok`` plays the script ``mini-ok``), and played in
order, one step per request; the last step repeats when the script runs out.
On the messages and responses routes a request without ``tools`` (an agent's
side call: a title, a quota check) is answered ``ok`` without taking a step.
A step is a dict:

* ``content``: the assistant's text (aider's SEARCH/REPLACE blocks, a finish);
* ``bash``: a shell command returned as a call of the request's shell tool
  (``bash`` for mini-swe-agent, ``Bash`` for claude-code, ``shell``/
  ``shell_command``/``exec_command`` for codex: whichever the request offers);
* ``usage``: ``{"prompt_tokens": n, "completion_tokens": m}`` (default 100/20;
  ``"cached": k`` bills k of the input as Anthropic's cache reads), or
  ``null``: the answer carries no usage at all (an attack on the meter);
* ``status``: an HTTP error status to answer instead (e.g. 500);
* ``echo_key``: answer 401 with an error body that echoes the bearer/x-api-key
  it was sent, as written and base64-encoded (an attack on the key).

Every request is recorded (route, model, message texts, whether the bearer
token matched ``--api-key-file``, what was billed; never the token itself)
and served back at ``GET /_rsi/requests``. Run it with ``python -m
tests.fakemodel.server --script FILE.json --port N`` (the container fixture in
``tests/fakemodel/fixture.py`` does).
"""

from __future__ import annotations

import argparse
import base64
import hmac
import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

DEFAULT_USAGE = {"prompt_tokens": 100, "completion_tokens": 20}
SIDE_USAGE = {"prompt_tokens": 30, "completion_tokens": 2}
SHELL_TOOLS = ("bash", "Bash", "shell_command", "shell", "exec_command")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}]
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _tool_names(body: dict) -> list[str]:
    names = []
    for t in body.get("tools") or []:
        if isinstance(t, dict):
            fn = t.get("function") if isinstance(t.get("function"), dict) else t
            names.append(str(fn.get("name", "")))
    return names


def shell_call(step: dict, body: dict) -> tuple[str, dict] | None:
    """(tool name, arguments) running the step's ``bash`` with the request's shell tool."""
    if "bash" not in step:
        return None
    offered = _tool_names(body)
    name = next((t for t in SHELL_TOOLS if t in offered), "bash")
    cmd = step["bash"]
    if name == "shell":
        return name, {"command": ["bash", "-lc", cmd]}
    if name == "exec_command":
        return name, {"cmd": cmd}
    if name == "Bash":
        return name, {"command": cmd, "description": "run a shell command"}
    return name, {"command": cmd}


def billed(step: dict) -> dict | None:
    if "usage" in step and step["usage"] is None:
        return None
    return {**DEFAULT_USAGE, **step.get("usage", {})}


def sse(events: list[tuple[str | None, dict | str]]) -> bytes:
    out = []
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        out.append(f"{head}data: {data if isinstance(data, str) else json.dumps(data)}\n\n")
    return "".join(out).encode()


# ---- OpenAI chat completions ----------------------------------------------------------


def completion(step: dict, model: str, body: dict | None = None) -> dict:
    """The chat.completion object for one scripted step."""
    usage = billed(step)
    message: dict[str, Any] = {"role": "assistant", "content": step.get("content", "")}
    finish = "stop"
    call = shell_call(step, body or {})
    if call:
        message["tool_calls"] = [{
            "id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
            "function": {"name": call[0], "arguments": json.dumps(call[1])},
        }]
        finish = "tool_calls"
    out = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion",
        "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    }
    if usage is not None:
        out["usage"] = {"prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"],
                        "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]}
    return out


def chat_stream(step: dict, model: str, body: dict) -> bytes:
    full = completion(step, model, body)
    base = {k: full[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    msg, finish = full["choices"][0]["message"], full["choices"][0]["finish_reason"]
    chunks: list[dict] = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
    text = msg.get("content") or ""
    for i in range(0, len(text), 40):
        chunks.append({**base, "choices": [{"index": 0, "delta": {"content": text[i:i + 40]}}]})
    for j, tc in enumerate(msg.get("tool_calls", [])):
        chunks.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [{**tc, "index": j}]}}]})
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    opts = body.get("stream_options")
    if isinstance(opts, dict) and opts.get("include_usage") and "usage" in full:
        chunks.append({**base, "choices": [], "usage": full["usage"]})
    return sse([(None, c) for c in chunks] + [(None, "[DONE]")])


# ---- OpenAI responses -----------------------------------------------------------------


def response_object(step: dict, model: str, body: dict) -> dict:
    usage = billed(step)
    items: list[dict] = []
    if step.get("content"):
        items.append({"type": "message", "id": f"msg_{uuid.uuid4().hex[:12]}", "role": "assistant",
                      "status": "completed",
                      "content": [{"type": "output_text", "text": step["content"], "annotations": []}]})
    call = shell_call(step, body)
    if call:
        items.append({"type": "function_call", "id": f"fc_{uuid.uuid4().hex[:12]}", "status": "completed",
                      "call_id": f"call_{uuid.uuid4().hex[:12]}", "name": call[0], "arguments": json.dumps(call[1])})
    out = {"id": f"resp_{uuid.uuid4().hex[:12]}", "object": "response", "created_at": int(time.time()),
           "status": "completed", "model": model, "output": items}
    if usage is not None:
        out["usage"] = {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"],
                        "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"],
                        "input_tokens_details": {"cached_tokens": 0},
                        "output_tokens_details": {"reasoning_tokens": 0}}
    return out


def responses_stream(step: dict, model: str, body: dict) -> bytes:
    full = response_object(step, model, body)
    started = {k: v for k, v in full.items() if k != "usage"} | {"status": "in_progress", "output": []}
    events: list[tuple[str | None, dict | str]] = [("response.created", {"type": "response.created",
                                                                          "response": started})]
    for i, item in enumerate(full["output"]):
        events.append(("response.output_item.added", {"type": "response.output_item.added", "output_index": i,
                                                       "item": item}))
        if item["type"] == "message":
            events.append(("response.output_text.delta", {"type": "response.output_text.delta", "output_index": i,
                                                           "item_id": item["id"], "content_index": 0,
                                                           "delta": item["content"][0]["text"]}))
        events.append(("response.output_item.done", {"type": "response.output_item.done", "output_index": i,
                                                      "item": item}))
    if "usage" in full:
        events.append(("response.completed", {"type": "response.completed", "response": full}))
    return sse(events)


# ---- Anthropic messages ---------------------------------------------------------------


def anthropic_usage(usage: dict) -> dict:
    cached = int(usage.get("cached", 0))
    return {"input_tokens": usage["prompt_tokens"] - cached, "output_tokens": usage["completion_tokens"],
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached}


def message_object(step: dict, model: str, body: dict) -> dict:
    usage = billed(step)
    content: list[dict] = []
    if step.get("content"):
        content.append({"type": "text", "text": step["content"]})
    call = shell_call(step, body)
    if call:
        content.append({"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:12]}", "name": call[0],
                        "input": call[1]})
    out = {"id": f"msg_{uuid.uuid4().hex[:12]}", "type": "message", "role": "assistant", "model": model,
           "content": content, "stop_reason": "tool_use" if call else "end_turn", "stop_sequence": None}
    if usage is not None:
        out["usage"] = anthropic_usage(usage)
    return out


def messages_stream(step: dict, model: str, body: dict) -> bytes:
    full = message_object(step, model, body)
    usage = full.get("usage")
    start = {k: v for k, v in full.items() if k not in ("content", "usage")} | {
        "content": [], "stop_reason": None}
    if usage:
        start["usage"] = {**usage, "output_tokens": 1}
    events: list[tuple[str | None, dict | str]] = [("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(full["content"]):
        if block["type"] == "text":
            events += [("content_block_start", {"type": "content_block_start", "index": i,
                                                "content_block": {"type": "text", "text": ""}}),
                       ("content_block_delta", {"type": "content_block_delta", "index": i,
                                                "delta": {"type": "text_delta", "text": block["text"]}})]
        else:
            events += [("content_block_start", {"type": "content_block_start", "index": i,
                                                "content_block": {**block, "input": {}}}),
                       ("content_block_delta", {"type": "content_block_delta", "index": i,
                                                "delta": {"type": "input_json_delta",
                                                          "partial_json": json.dumps(block["input"])}})]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    delta: dict[str, Any] = {"type": "message_delta",
                             "delta": {"stop_reason": full["stop_reason"], "stop_sequence": None}}
    if usage:
        delta["usage"] = {"output_tokens": usage["output_tokens"]}
    events += [("message_delta", delta), ("message_stop", {"type": "message_stop"})]
    return sse(events)


# ---- the app ----------------------------------------------------------------------------


ROUTES = ("chat", "responses", "messages", "embeddings")


def make_app(scripts: dict[str, list[dict]], *, api_key: str = "") -> FastAPI:
    app = FastAPI()
    lock = threading.Lock()
    cursor: dict[str, int] = {}
    seen: list[dict] = []

    @app.get("/health")
    def health() -> dict:
        return {"ok": True}

    @app.get("/v1/models")
    def models() -> dict:
        return {"object": "list", "data": [{"id": k, "object": "model", "created": 0, "owned_by": "rsi"}
                                           for k in scripts]}

    @app.get("/_rsi/requests")
    def requests() -> list[dict]:
        with lock:
            return list(seen)

    async def play(request: Request, route: str) -> Response:
        body = await request.json()
        model = str(body.get("model", ""))
        name = model.rsplit("/", 1)[-1]
        token = (request.headers.get("authorization", "").removeprefix("Bearer ").strip()
                 or request.headers.get("x-api-key", "").strip())
        side = route in ("messages", "responses") and not body.get("tools")
        with lock:
            i = -1 if side else cursor.get(name, 0)
            if not side:
                cursor[name] = i + 1
        script = scripts.get(name)
        step: dict = {"content": "ok", "usage": SIDE_USAGE} if side else (
            script[min(i, len(script) - 1)] if script else {})
        stream = bool(body.get("stream"))
        record = {"route": route, "model": name, "step": i, "stream": stream,
                  "key_ok": bool(api_key) and hmac.compare_digest(token, api_key),
                  "auth": "x-api-key" if request.headers.get("x-api-key") else "bearer",
                  "stray_header": request.headers.get("x-agent"),
                  "messages": [_text(m.get("content")) for m in body.get("messages", body.get("input", []))
                               if isinstance(m, dict)] if isinstance(body.get("messages", body.get("input")), list)
                  else [_text(body.get("input"))],
                  "billed": None}
        try:
            if not script and not side:
                return JSONResponse({"error": {"message": f"no script '{name}'", "type": "not_found"}}, 404)
            if step.get("echo_key"):
                leak = {"message": f"invalid api key: {token}",
                        "type": "authentication_error",
                        "param": base64.b64encode(f"key={token}".encode()).decode()}
                return JSONResponse({"error": leak}, 401)
            if step.get("status"):
                return JSONResponse({"error": {"message": "scripted failure", "type": "server_error"}},
                                    int(step["status"]))
            usage = billed(step)
            if route == "chat":
                opts = body.get("stream_options")
                usage_sent = usage is not None and (not stream or (isinstance(opts, dict) and opts.get("include_usage")))
            else:
                usage_sent = usage is not None
            record["billed"] = usage  # what this upstream charges for the call, sent or not
            record["usage_sent"] = usage_sent
            if route == "embeddings":
                inp = body.get("input")
                n = len(inp) if isinstance(inp, list) else 1
                out: dict[str, Any] = {"object": "list", "model": model, "data": [
                    {"object": "embedding", "index": k, "embedding": [0.0, 0.5, 1.0]} for k in range(n)]}
                if usage is not None:
                    out["usage"] = {"prompt_tokens": usage["prompt_tokens"], "total_tokens": usage["prompt_tokens"]}
                    record["billed"] = {**usage, "completion_tokens": 0}
                return JSONResponse(out)
            if not stream:
                make = {"chat": completion, "responses": response_object, "messages": message_object}[route]
                return JSONResponse(make(step, model, body))
            play_stream = {"chat": chat_stream, "responses": responses_stream, "messages": messages_stream}[route]
            return Response(play_stream(step, model, body), media_type="text/event-stream")
        finally:
            with lock:
                seen.append(record)

    @app.post("/v1/chat/completions")
    @app.post("/chat/completions")
    async def chat(request: Request) -> Response:
        return await play(request, "chat")

    @app.post("/v1/responses")
    async def responses(request: Request) -> Response:
        return await play(request, "responses")

    @app.post("/v1/messages")
    async def messages(request: Request) -> Response:
        return await play(request, "messages")

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> Response:
        return await play(request, "embeddings")

    return app


def upstream_billed(requests: list[dict]) -> dict[str, int]:
    """What the upstream charged over ``requests`` (its own accounting)."""
    got = [r["billed"] for r in requests if r.get("billed")]
    return {"calls": len(got), "tokens_in": sum(b["prompt_tokens"] for b in got),
            "tokens_out": sum(b["completion_tokens"] for b in got)}


def serve_in_thread(scripts: dict[str, list[dict]], *, api_key: str = "", host: str = "127.0.0.1"
                    ) -> Iterator[str]:
    """Run the app in this process (a generator: yields its base URL, stops when closed)."""
    import socket

    import uvicorn

    sock = socket.socket()
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(make_app(scripts, api_key=api_key), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://{host}:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--script", required=True, help="JSON file: {model name: [steps]}")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--host", default="0.0.0.0")
    ap.add_argument("--api-key-file", default="", help="file holding the bearer token to check")
    a = ap.parse_args(argv)
    with open(a.script) as fh:
        scripts = json.load(fh)
    key = open(a.api_key_file).read().strip() if a.api_key_file else ""
    uvicorn.run(make_app(scripts, api_key=key), host=a.host, port=a.port, log_level="warning")


if __name__ == "__main__":
    main()
