"""A loopback HTTP endpoint that records what reaches it: "anywhere", where a hostile run would send a
worker's secrets (tests/providers/test_worker_secrets.py, tests/tools/test_tool_secrets.py). A server we did
not write counts the requests, not evaljobs' own counters."""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class RecordingServer(ThreadingHTTPServer):
    """Answers every GET/POST with ``answer`` (JSON) and keeps each request's headers (lower-cased names),
    in order, in :attr:`seen`; ``/…?to=URL`` on a path starting ``/hop`` answers a 307 redirect to URL.
    ``url`` is its root plus ``path``. A context manager: serving inside, stopped on leaving."""

    def __init__(self, answer: bytes, path: str = ""):
        self.answer = answer
        self.seen: list[dict[str, str]] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Recorded)
        self.url = f"http://127.0.0.1:{self.server_address[1]}{path}"

    def __enter__(self) -> RecordingServer:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
        self.server_close()


class _Recorded(BaseHTTPRequestHandler):
    server: RecordingServer

    def do_POST(self):  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.lock:
            self.server.seen.append({k.lower(): v for k, v in self.headers.items()})
        if self.path.startswith("/hop") and "?to=" in self.path:
            self.send_response(307)
            self.send_header("Location", self.path.split("?to=", 1)[1])
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()  # HTTP/1.0: the body ends when the connection closes
        self.wfile.write(self.server.answer)

    do_GET = do_POST  # noqa: N815

    def log_message(self, *args: Any) -> None:
        pass
