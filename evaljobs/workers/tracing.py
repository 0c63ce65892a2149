"""OpenTelemetry traces of a run: a span per actor message, per pair, per provider call, tool and commit.

On when OpenTelemetry's own variables name an exporter endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``; the SDK reads the rest: headers, protocol options,
``OTEL_SERVICE_NAME``, ``OTEL_BSP_*``). Spans go over OTLP/HTTP (protobuf) in batches. With no
endpoint nothing here is imported and :mod:`evaljobs.telemetry` keeps its shared no-op span.

What a trace holds (one per run, under the span the host submitted from when it was traced — the
trace context rides the context middleware, :mod:`evaljobs_middleware.tracecontext`):

* ``start_run``, ``evaluate_scenario`` / ``evaluate_pairs`` / ``evaluate_model`` and ``finalize_run``:
  one span per message (:class:`ActorSpans`); the pair messages ``start_run`` sends are its children;
* ``evaluate_pair`` per pair and epoch; under it ``chat MODEL`` per provider request (GenAI semantic
  conventions: ``gen_ai.operation.name``, ``gen_ai.request.model``, ``gen_ai.usage.input_tokens`` …),
  ``execute_tool NAME`` per tool call, ``judge`` for the LLM judge, and ``record_result`` for the
  database commit.

Prompts and answers go on spans only with ``EVALJOBS_TRACE_CONTENT=1`` (``gen_ai.input.messages``,
``gen_ai.output.messages``), redacted like every other output.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import dramatiq
from dramatiq.broker import MessageProxy
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from evaljobs import telemetry
from evaljobs.config import Settings
from evaljobs.redact import redact_text

INSTRUMENTATION = "evaljobs"


class _Span:
    """An OpenTelemetry span behind :class:`evaljobs.telemetry.Span`."""

    __slots__ = ("span",)

    def __init__(self, span: trace.Span) -> None:
        self.span = span

    def set_attribute(self, key: str, value: Any) -> None:
        if isinstance(value, str) and key.startswith("gen_ai.") and key.endswith("messages"):
            value = redact_text(value)
        self.span.set_attribute(key, value)

    def record_error(self, error: BaseException) -> None:
        self.span.set_status(Status(StatusCode.ERROR, redact_text(str(error))[:500]))


class OtelTracer:
    """:class:`evaljobs.telemetry.Tracer` on an OpenTelemetry tracer."""

    def __init__(self, tracer: trace.Tracer, *, content: bool = False) -> None:
        self.tracer = tracer
        self.content = content

    @contextlib.contextmanager
    def span(self, name: str, attributes: Mapping[str, Any] | None = None) -> Iterator[_Span]:
        kind = SpanKind.CLIENT if attributes and "gen_ai.operation.name" in attributes \
            and attributes["gen_ai.operation.name"] == "chat" else SpanKind.INTERNAL
        # Exceptions are not recorded as span events: their text may quote a prompt; record_error
        # sets the redacted status instead.
        with self.tracer.start_as_current_span(name, kind=kind, attributes=dict(attributes or {}),
                                               record_exception=False) as span:
            yield _Span(span)


class ActorSpans(dramatiq.Middleware):
    """One span per message processed, named after its actor, child of the carried trace context.

    Goes after the context middleware (which restores ``traceparent``): before-hooks run in list
    order and after-hooks in reverse, so the span starts under the restored context and ends
    before it is cleared.
    """

    def __init__(self, tracer: trace.Tracer, provider: TracerProvider | None = None) -> None:
        self.tracer = tracer
        self.provider = provider
        self._open = threading.local()

    def before_process_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        attributes: dict[str, Any] = {"messaging.system": "dramatiq", "messaging.operation.type": "process",
                                      "messaging.destination.name": message.queue_name,
                                      "messaging.message.id": message.message_id}
        if message.args:
            attributes["evaljobs.run.id"] = str(message.args[0])
        span = self.tracer.start_span(message.actor_name, kind=SpanKind.CONSUMER, attributes=attributes)
        token = otel_context.attach(trace.set_span_in_context(span))
        self._open.current = (span, token)

    def after_process_message(self, broker: dramatiq.Broker, message: MessageProxy, *,
                              result: Any = None, exception: BaseException | None = None) -> None:
        current = getattr(self._open, "current", None)
        self._open.current = None
        if current is None:
            return
        span, token = current
        if exception is not None:
            span.set_status(Status(StatusCode.ERROR, type(exception).__name__))
        otel_context.detach(token)
        span.end()

    def after_skip_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        self.after_process_message(broker, message)

    def after_worker_shutdown(self, broker: dramatiq.Broker, worker: Any) -> None:
        # A Dramatiq worker process ends with os._exit (multiprocessing): no atexit flush.
        if self.provider is not None:
            self.provider.force_flush(10_000)


_lock = threading.Lock()
_provider: TracerProvider | None = None


def start(settings: Settings, *, exporter: SpanExporter | None = None) -> ActorSpans:
    """Trace this process: install the tracer :mod:`evaljobs.telemetry` uses; the middleware to add."""
    global _provider
    with _lock:
        if _provider is None:
            resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
            if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
                resource = resource.merge(Resource({"service.name": "evaljobs-worker"}))
            _provider = TracerProvider(resource=resource)
            _provider.add_span_processor(BatchSpanProcessor(exporter or OTLPSpanExporter()))
        tracer = _provider.get_tracer(INSTRUMENTATION)
        telemetry.install_tracer(OtelTracer(tracer, content=settings.trace_content))
        return ActorSpans(tracer, _provider)


def stop() -> None:
    """Flush what is pending and stop tracing."""
    global _provider
    with _lock:
        telemetry.install_tracer(None)
        if _provider is not None:
            _provider.shutdown()
            _provider = None


__all__ = ["ActorSpans", "OtelTracer", "start", "stop"]
