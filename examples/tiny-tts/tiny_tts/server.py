"""The tiny-tts HTTP server: streaming synthesis over HTTP/1.1.

::

    python -m tiny_tts.server [--host 0.0.0.0] [--port $RSI_PORT or 8000]

Builds the model, synthesizes one warm-up utterance, then listens and prints
``READY``. Endpoints:

* ``GET /health``: 200 ``{"status": "ok", ...}`` (the server only listens once
  the model is built and warmed up).
* ``POST /synthesize`` with a JSON body ``{"text": "the cat sat", "style": 7}``
  (``style``: the speaker, 0 .. 2**31-1, default 0; or the text itself as
  ``text/plain``, speaker 0): 200 and the audio as it is synthesized,
  16-bit little-endian mono PCM at 16 kHz (``Content-Type: audio/L16``), sent
  with chunked transfer encoding, one HTTP chunk per synthesized chunk (160 ms
  of audio). Words outside the vocabulary, or a malformed body, are a 400
  before any audio; a failure while streaming cuts the response short (no
  final empty chunk), which a client sees as a failed request.

Every request runs in its own thread (``ThreadingHTTPServer``); the engine
(``tiny_tts.pipeline.TTSServer``) is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 64 * 1024
WARMUP_TEXT = "the cat sat on the mat"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # chunked transfer encoding
    server_version = "tiny-tts/1"
    engine = None  # set by serve()

    def log_message(self, fmt: str, *args) -> None:  # no per-request lines on stderr
        pass

    def _reply(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path.split("?")[0] == "/health":
            from .model import SAMPLE_RATE

            self._reply(200, {"status": "ok", "sample_rate": SAMPLE_RATE})
        else:
            self._reply(404, {"error": f"no such path: {self.path}"})

    def do_POST(self) -> None:  # noqa: N802
        if self.path.split("?")[0] != "/synthesize":
            self._reply(404, {"error": f"no such path: {self.path}"})
            return
        try:
            text, style = self._text()
            from .text import encode

            encode(text)  # unknown words: a 400 before any audio
        except ValueError as e:
            self._reply(400, {"error": str(e)})
            return
        self._stream(text, style)

    def _text(self) -> tuple[str, int]:
        """The request's text and speaker (style)."""
        from .model import MAX_STYLE

        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= MAX_BODY:
            raise ValueError(f"the body must hold 1 to {MAX_BODY} bytes (Content-Length: {length})")
        body = self.rfile.read(length).decode("utf-8", errors="strict")
        style = 0
        if (self.headers.get("Content-Type") or "").startswith("application/json"):
            data = json.loads(body)
            if not isinstance(data, dict) or not isinstance(data.get("text"), str):
                raise ValueError('the JSON body must be {"text": "...", "style": 0}')
            style = data.get("style", 0)
            if type(style) is not int or not 0 <= style <= MAX_STYLE:
                raise ValueError(f"style must be an integer 0 .. {MAX_STYLE}, got {style!r}")
            body = data["text"]
        if not body.strip():
            raise ValueError("empty text")
        return body, style

    def _stream(self, text: str, style: int) -> None:
        from .model import SAMPLE_RATE

        self.send_response(200)
        self.send_header("Content-Type", f"audio/L16; rate={SAMPLE_RATE}; channels=1")
        self.send_header("X-Sample-Rate", str(SAMPLE_RATE))
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for chunk in self.engine.synthesize(text, style):
                if chunk.pcm:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk.pcm), chunk.pcm))
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:  # noqa: BLE001 - cut the response short: the client counts a failure
            traceback.print_exc()
            self.close_connection = True


def build_engine():
    """The model with its seeded weights and the engine, warmed up by one utterance."""
    from . import model as tts_model
    from .pipeline import TTSServer

    engine = TTSServer(tts_model.build(seed=0))
    for _ in engine.synthesize(WARMUP_TEXT):
        pass
    return engine


def serve(host: str, port: int) -> None:
    engine = build_engine()
    Handler.engine = engine
    httpd = ThreadingHTTPServer((host, port), Handler)
    httpd.daemon_threads = True
    stop = threading.Event()

    def _shutdown(signum, frame) -> None:  # noqa: ARG001
        if not stop.is_set():
            stop.set()
            threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _shutdown)
    signal.signal(signal.SIGINT, _shutdown)
    print(f"READY http://{host}:{httpd.server_address[1]}", flush=True)
    try:
        httpd.serve_forever(poll_interval=0.1)
    finally:
        httpd.server_close()
        engine.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default=os.environ.get("RSI_HOST", "0.0.0.0"))
    p.add_argument("--port", type=int, default=int(os.environ.get("RSI_PORT") or 8000))
    args = p.parse_args(argv)
    serve(args.host, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
