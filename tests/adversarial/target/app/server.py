"""The candidate's HTTP server: ``POST /answer`` (body: a request text)
answers with ``work.answer``; ``GET /health`` is 200 once it serves."""

import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.getcwd())

from app import work  # noqa: E402


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _send(self, code: int, body: str) -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path == "/health":
            self._send(200, "ok")
        else:
            self._send(404, "not found")

    def do_POST(self) -> None:  # noqa: N802
        if self.path != "/answer":
            self._send(404, "not found")
            return
        n = int(self.headers.get("Content-Length") or 0)
        text = self.rfile.read(n).decode()
        self._send(200, work.answer(text))

    def log_message(self, *args) -> None:
        pass


def main() -> None:
    server = ThreadingHTTPServer(("0.0.0.0", int(os.environ.get("RSI_PORT") or 8000)), Handler)
    print("READY", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
