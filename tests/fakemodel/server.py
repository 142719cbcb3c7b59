"""A scripted OpenAI-compatible chat-completions server (FastAPI).

Each *script* is a list of steps, chosen by the request's ``model`` name (its
last path part: ``openai/mini-ok`` plays the script ``mini-ok``), and played in
order, one step per request; the last step repeats when the script runs out.
A step is a dict:

* ``content``: the assistant's text (aider's SEARCH/REPLACE blocks, a finish);
* ``bash``: a shell command returned as a ``bash`` tool call (mini-swe-agent);
* ``usage``: ``{"prompt_tokens": n, "completion_tokens": m}`` (default 100/20);
* ``status``: an HTTP error status to answer instead (e.g. 500).

Every request is recorded (model, message texts, whether the bearer token
matched ``--api-key``; never the token itself) and served back at
``GET /_rsi/requests``. Run it with ``python -m tests.fakemodel.server
--script FILE.json --port N`` (the container fixture in
``tests/fakemodel/fixture.py`` does).
"""

from __future__ import annotations

import argparse
import hmac
import json
import threading
import time
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

DEFAULT_USAGE = {"prompt_tokens": 100, "completion_tokens": 20}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}]
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def completion(step: dict, model: str) -> dict:
    """The chat.completion object for one scripted step."""
    usage = {**DEFAULT_USAGE, **step.get("usage", {})}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    message: dict[str, Any] = {"role": "assistant", "content": step.get("content", "")}
    finish = "stop"
    if "bash" in step:
        message["tool_calls"] = [{
            "id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": step["bash"]})},
        }]
        finish = "tool_calls"
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion",
        "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }


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
        return {"object": "list", "data": [{"id": k, "object": "model"} for k in scripts]}

    @app.get("/_rsi/requests")
    def requests() -> list[dict]:
        with lock:
            return list(seen)

    @app.post("/v1/chat/completions")
    @app.post("/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        model = str(body.get("model", ""))
        name = model.rsplit("/", 1)[-1]
        token = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        with lock:
            i = cursor.get(name, 0)
            cursor[name] = i + 1
            seen.append({"model": name, "step": i, "stream": bool(body.get("stream")),
                         "key_ok": bool(api_key) and hmac.compare_digest(token, api_key),
                         "messages": [_text(m.get("content")) for m in body.get("messages", [])]})
        script = scripts.get(name)
        if not script:
            return JSONResponse({"error": {"message": f"no script '{name}'", "type": "not_found"}}, 404)
        step = script[min(i, len(script) - 1)]
        if step.get("status"):
            return JSONResponse({"error": {"message": "scripted failure", "type": "server_error"}},
                                int(step["status"]))
        if body.get("stream"):
            return JSONResponse({"error": {"message": "streaming is not scripted; disable it"}}, 400)
        return JSONResponse(completion(step, model))

    return app


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
