"""A context provider that carries the W3C trace context (``traceparent``) of the enqueuing thread.

With it in a :class:`~.context.ContextMiddleware`, work enqueued from inside an OpenTelemetry span
is processed under that span: the enqueuing side captures ``traceparent`` (and ``tracestate``) with
OpenTelemetry's W3C propagator into the message options, and the worker side makes it the current
context around the actor, so the spans the actor opens — and the messages it sends in turn — belong
to the same trace, across processes and machines.

Costs nothing where nobody traces: OpenTelemetry is never imported by this module. A process that
has not imported ``opentelemetry`` has no current span to capture, and a worker that has not
imported it has nothing that would read the restored context, so both sides do nothing then. Only
the W3C trace context travels, never baggage (host data the operator did not choose to ship).
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["TraceContextProvider"]

_LOADED = "opentelemetry.context"


class TraceContextProvider:
    """Carries ``{"traceparent": …, "tracestate": …}`` when the enqueuing thread is inside a span."""

    name = "traceparent"

    def capture(self) -> Any:
        if _LOADED not in sys.modules:
            return None
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier)
        return carrier or None

    def restore(self, value: Any) -> Any:
        if _LOADED not in sys.modules or not isinstance(value, dict):
            return None
        from opentelemetry import context
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        carried = {k: v for k, v in value.items()
                   if k in ("traceparent", "tracestate") and isinstance(v, str)}
        return context.attach(TraceContextTextMapPropagator().extract(carried))

    def clear(self, token: Any) -> None:
        if token is None:
            return
        from opentelemetry import context

        context.detach(token)

    def __repr__(self) -> str:
        return "TraceContextProvider()"
