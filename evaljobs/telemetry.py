"""Where the code reports what it does, for whoever watches: metrics and traces plug in here.

Why a hook module at the bottom: the provider calls, the pair runner and the store sit in
different layers, and none of them may import ``prometheus_client`` or ``opentelemetry`` (optional
extras, and tens of milliseconds to import). They call the functions below; a worker started with
``--metrics-port`` adds an :class:`Observer` (:mod:`evaljobs.workers.metrics`), one with an OTLP
exporter configured installs a :class:`Tracer` (:mod:`evaljobs.workers.tracing`). With nothing
installed, a report is a loop over an empty tuple and a span is one shared no-op object: the
figures with both off are in BENCHMARKS.md.

Observers must not raise and must not block: they run on the pair's own thread.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager as ContextManager
from typing import Any, NamedTuple, Protocol


class ProviderCall(NamedTuple):
    """One request to a provider, as it ended (a response, or the failure that took its place)."""

    provider: str
    model: str
    #: ``ok``, ``429``, ``5xx``, ``4xx``, ``timeout``, ``network`` or ``error``: a bounded set.
    outcome: str
    latency: float                 # seconds, request sent to answer read (or failure)
    ttft: float | None = None      # seconds to the first streamed token; None when not streamed
    input_tokens: int = 0
    output_tokens: int = 0


class PairRecorded(NamedTuple):
    """A pair's result row committed for the first time (a redelivered pair is not reported again)."""

    model: str                     # the model spec, ``provider/model``
    status: str                    # passed, failed or errored
    duration: float                # seconds the evaluation took
    cost: float | None             # USD; None when the price is unknown (never counted as 0)


class Observer(Protocol):
    def provider_call(self, call: ProviderCall) -> None: ...

    def pair_recorded(self, pair: PairRecorded) -> None: ...


class Span(Protocol):
    def set_attribute(self, key: str, value: Any) -> None: ...

    def record_error(self, error: BaseException) -> None: ...


class Tracer(Protocol):
    """Opens spans; ``content`` says whether prompts and answers may be put on them."""

    content: bool

    def span(self, name: str, attributes: Mapping[str, Any] | None = None) -> ContextManager[Span]: ...


class _NoSpan:
    """The span of a process that traces nothing: one shared object, every method a no-op."""

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    def set_attribute(self, key: str, value: Any) -> None:
        return None

    def record_error(self, error: BaseException) -> None:
        return None


NO_SPAN = _NoSpan()
_observers: tuple[Observer, ...] = ()
_tracer: Tracer | None = None


def observe(observer: Observer) -> None:
    """Add ``observer`` (once) to this process's observers."""
    global _observers
    if observer not in _observers:
        _observers = (*_observers, observer)


def unobserve(observer: Observer) -> None:
    global _observers
    _observers = tuple(o for o in _observers if o is not observer)


def install_tracer(tracer: Tracer | None) -> None:
    """This process's tracer (None: trace nothing)."""
    global _tracer
    _tracer = tracer


def provider_call(call: ProviderCall) -> None:
    for observer in _observers:
        observer.provider_call(call)


def pair_recorded(pair: PairRecorded) -> None:
    for observer in _observers:
        observer.pair_recorded(pair)


def watched() -> bool:
    """Whether anything observes or traces (callers skip building a report nobody reads)."""
    return bool(_observers) or _tracer is not None


def span(name: str, attributes: Mapping[str, Any] | None = None) -> ContextManager[Span]:
    """A span named ``name`` under the current one; the shared no-op span when nothing traces."""
    tracer = _tracer
    if tracer is None:
        return NO_SPAN
    return tracer.span(name, attributes)


def trace_content() -> bool:
    """Whether prompts and answers may go on spans (``EVALJOBS_TRACE_CONTENT=1`` and tracing on)."""
    tracer = _tracer
    return tracer is not None and tracer.content


@contextlib.contextmanager
def observers(*added: Observer) -> Iterator[None]:
    """``added`` observe for the block (tests, a bench)."""
    for observer in added:
        observe(observer)
    try:
        yield
    finally:
        for observer in added:
            unobserve(observer)


__all__ = ["NO_SPAN", "Observer", "PairRecorded", "ProviderCall", "Span", "Tracer", "install_tracer",
           "observe", "observers", "pair_recorded", "provider_call", "span", "trace_content", "unobserve",
           "watched"]
