"""A streaming HTTP server for tinygen: POST /generate {"prompt": ...}; GET /health."""

from __future__ import annotations

import argparse
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tinygen.model import generate


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # the body ends when the connection closes

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def do_POST(self) -> None:
        if self.path != "/generate":
            self.send_response(404)
            self.end_headers()
            return
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        prompt = json.loads(body or b"{}").get("prompt", "")
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.end_headers()
        for chunk in generate(prompt):
            self.wfile.write(chunk.encode())
            self.wfile.flush()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=int(os.environ.get("RSI_PORT", "8000")))
    args = p.parse_args()
    server = ThreadingHTTPServer(("0.0.0.0", args.port), Handler)
    print("READY", flush=True)
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
