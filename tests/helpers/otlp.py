"""An OTLP/HTTP trace receiver on loopback: what an OpenTelemetry collector would be sent, decoded.

``POST /v1/traces`` bodies are ``ExportTraceServiceRequest`` protobufs (gzip or not), decoded with
``opentelemetry-proto``; every span is kept with its resource's service name.
"""
from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: dict[str, Any]


def _value(any_value: Any) -> Any:
    which = any_value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, which) if which else None


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path == "/v1/traces":
                    receiver._receive(ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def _receive(self, request: ExportTraceServiceRequest) -> None:
        got = []
        for resource_spans in request.resource_spans:
            attributes = resource_spans.resource.attributes
            service = next((_value(a.value) for a in attributes if a.key == "service.name"), "")
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    got.append(ReceivedSpan(service, span.name, span.trace_id.hex(), span.span_id.hex(),
                                            span.parent_span_id.hex(), span.kind,
                                            {a.key: _value(a.value) for a in span.attributes}))
        with self._lock:
            self.spans.extend(got)
            self.requests += 1

    def snapshot(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self.spans)

    def wait_for(self, condition: Callable[[list[ReceivedSpan]], bool],
                 timeout: float = 120.0) -> list[ReceivedSpan]:
        deadline = time.monotonic() + timeout
        while not condition(self.snapshot()) and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.snapshot()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
