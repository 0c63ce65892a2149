"""An OpenAI-compatible chat server that counts what it was sent — a provider evaljobs did not write.

Run as its own process (``python counting_provider.py --port P --cap 4``): it serves at most ``cap``
requests at once and answers every request beyond that ``429`` at once, like a provider with a
concurrency limit. It counts every request, every 429 and every answered request itself, so a test
compares evaljobs' figures with the provider's own, not with the simulator's counters. It imports
nothing from evaljobs.

``--announce`` adds the rate-limit headers OpenAI sends with every response (success or 429):
``x-ratelimit-limit-requests`` (the cap), ``x-ratelimit-remaining-requests`` (the free slots once this
request is done), ``x-ratelimit-reset-requests`` (a Go-style duration, e.g. ``1s``), and the token
family (``x-ratelimit-limit-tokens``, ``x-ratelimit-remaining-tokens``, ``x-ratelimit-reset-tokens``).

``GET /counts`` answers ``{"requests": n, "rate_limited": k, "answered": m, "max_in_flight": p}``.
"""
from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class CountingProvider:
    def __init__(self, cap: int, latency: float, announce: bool):
        self.cap = cap
        self.latency = latency
        self.announce = announce
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.requests = 0
        self.rate_limited = 0
        self.answered = 0

    def counts(self) -> dict[str, int]:
        with self.lock:
            return {"requests": self.requests, "rate_limited": self.rate_limited, "answered": self.answered,
                    "max_in_flight": self.max_in_flight}

    def limit_headers(self, remaining: int) -> dict[str, str]:
        if not self.announce:
            return {}
        return {"x-ratelimit-limit-requests": str(self.cap), "x-ratelimit-remaining-requests": str(remaining),
                "x-ratelimit-reset-requests": "1s", "x-ratelimit-limit-tokens": "1000000",
                "x-ratelimit-remaining-tokens": "999000", "x-ratelimit-reset-tokens": "6m0s"}


def handler_for(provider: CountingProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, body: dict, headers: dict[str, str]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/counts":
                self._send(200, provider.counts(), {})
            else:
                self._send(404, {"error": {"message": "not found"}}, {})

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            with provider.lock:
                provider.requests += 1
                refused = provider.in_flight >= provider.cap
                if refused:
                    provider.rate_limited += 1
                    remaining = 0
                else:
                    provider.in_flight += 1
                    provider.max_in_flight = max(provider.max_in_flight, provider.in_flight)
            if refused:
                self._send(429, {"error": {"message": "Rate limit reached: too many requests in flight",
                                           "type": "requests", "code": "rate_limit_exceeded"}},
                           provider.limit_headers(remaining))
                return
            try:
                time.sleep(provider.latency)
            finally:
                with provider.lock:
                    provider.in_flight -= 1
                    provider.answered += 1
                    remaining = provider.cap - provider.in_flight
            answer = {"id": "chatcmpl-count", "object": "chat.completion", "created": int(time.time()),
                      "model": body.get("model", "counting"),
                      "choices": [{"index": 0, "finish_reason": "stop",
                                   "message": {"role": "assistant", "content": "ok"}}],
                      "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}
            self._send(200, answer, provider.limit_headers(remaining))

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--cap", type=int, default=4)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--announce", action="store_true")
    args = parser.parse_args()
    provider = CountingProvider(args.cap, args.latency, args.announce)
    server = ThreadingHTTPServer((args.host, args.port), handler_for(provider))
    server.daemon_threads = True
    print(f"counting provider on port {args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
