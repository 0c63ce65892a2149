"""OpenTelemetry traces: one trace per run, across worker processes, under the span the host submitted from.

An OTLP/HTTP receiver in the test (decoding with ``opentelemetry-proto``) gets what the workers export;
the host's own span reaches them through the context middleware's built-in ``traceparent`` provider.
"""
from __future__ import annotations

import pytest
from helpers import Fleet, OtlpReceiver, wait_until
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from evaljobs import telemetry
from evaljobs.api import Session
from evaljobs.catalog import loads_catalog
from evaljobs.config import Settings
from evaljobs.workers import tracing

CATALOG = """
name: traced
defaults:
  judge_model: sim/judge
scenarios:
  - key: plain-1
    prompt: "[sim: say alpha SECRET-PROMPT-1]"
    expect: {contains: [alpha]}
  - key: plain-2
    prompt: "[sim: say beta SECRET-PROMPT-2]"
    expect: {contains: [beta]}
  - key: tools
    prompt: "[sim: call lookup {\\"id\\": \\"7\\"}] [sim: say found 7 SECRET-PROMPT-3]"
    tools:
      - name: lookup
        parameters: {type: object, properties: {id: {type: string}}}
        returns: {ok: true}
    expect: {contains: ["found"], tools: [lookup]}
  - key: judged
    prompt: "[sim: say sorry, happy to help SECRET-PROMPT-4]"
    expect:
      judge: "Apologises and offers help. [sim@judge: say {\\"score\\": 0.9, \\"reason\\": \\"kind\\"}]"
"""
MODELS = ["sim/fast", "sim/smart"]


def _ancestors(span, by_id) -> list[str]:
    names = []
    while span.parent_id and span.parent_id in by_id:
        span = by_id[span.parent_id]
        names.append(span.span_id)
    return names


@pytest.mark.redis
def test_one_trace_for_a_fanout_run_across_two_worker_processes(redis_url, sqlite_url, tmp_path,
                                                                simulated_provider):
    simulated_provider(latency=0.01)
    receiver = OtlpReceiver()
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    fleet = Fleet(redis_url, sqlite_url, tmp_path / "logs", count=2, threads=2, env=env).start()
    host = TracerProvider(resource=Resource({"service.name": "host-app"}))
    host.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{receiver.url}/v1/traces")))
    catalog = loads_catalog(CATALOG, source="traced.yaml")
    pairs = len(catalog.scenarios) * len(MODELS)
    try:
        assert wait_until(lambda: all(Fleet.ready(w) for w in fleet.workers), 120), fleet.log_text()
        with Session(db=sqlite_url, broker=redis_url) as session:
            with host.get_tracer("host").start_as_current_span("POST /evaluate") as submitting:
                info = session.submit(catalog, MODELS)
            assert session.wait(info.id, timeout=120, poll=0.5).status == "complete"
        host.force_flush()
        spans = receiver.wait_for(lambda got: sum(s.name == "evaluate_pair" for s in got) >= pairs
                                  and any(s.name == "finalize_run" for s in got))
    finally:
        fleet.stop()
        host.shutdown()
        receiver.close()
    trace_id = format(submitting.get_span_context().trace_id, "032x")
    root_id = format(submitting.get_span_context().span_id, "016x")
    assert {s.trace_id for s in spans} == {trace_id}  # one trace for the whole run
    by_id = {s.span_id: s for s in spans}
    names = [s.name for s in spans]
    assert names.count("start_run") == 1 and names.count("finalize_run") >= 1
    assert by_id[next(s.parent_id for s in spans if s.name == "start_run")].name == "POST /evaluate"
    pair_spans = [s for s in spans if s.name == "evaluate_pair"]
    assert {(s.attributes["evaljobs.scenario.key"], s.attributes["evaljobs.model"]) for s in pair_spans} == \
        {(c.key, m) for c in catalog.scenarios for m in MODELS}
    for span in pair_spans:  # every pair under the submitting span, through start_run's message
        assert root_id in _ancestors(span, by_id), span
    chats = [s for s in spans if s.name.startswith("chat ")]
    models = {s.attributes["gen_ai.request.model"] for s in chats}
    assert {"fast", "smart", "judge"} <= models
    for chat in chats:
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert isinstance(chat.attributes["gen_ai.usage.input_tokens"], int)
        assert isinstance(chat.attributes["gen_ai.usage.output_tokens"], int)
        assert by_id[chat.parent_id].name in ("evaluate_pair", "judge")
    tools = [s for s in spans if s.name == "execute_tool lookup"]
    assert len(tools) == 2 and all(s.attributes["gen_ai.tool.name"] == "lookup" for s in tools)
    assert sum(s.name == "judge" for s in spans) == 2
    assert sum(s.name == "record_result" for s in spans) == pairs
    everything = repr([s.attributes for s in spans])
    assert "SECRET-PROMPT" not in everything  # no prompt text unless EVALJOBS_TRACE_CONTENT=1
    assert {s.service for s in spans} == {"host-app", "evaljobs-worker"}


@pytest.mark.parametrize("content", [False, True])
def test_prompts_and_answers_go_on_spans_only_when_asked(tmp_path, simulated_provider, content):
    simulated_provider(latency=0.0)
    exporter = InMemorySpanExporter()
    tracing.start(Settings(trace_content=content), exporter=exporter)
    try:
        with Session(db=f"sqlite:///{tmp_path}/runs.db") as session:
            catalog = loads_catalog(CATALOG, source="traced.yaml")
            info = session.submit(catalog, ["sim/fast"], strategy="sequential")
        assert info.status == "complete"
    finally:
        tracing.stop()
    assert not telemetry.watched()
    chats = [s for s in exporter.get_finished_spans() if s.name == "chat fast"]
    assert len(chats) == 5  # the tool scenario takes two turns
    prompts = " ".join(str(s.attributes.get("gen_ai.input.messages", "")) for s in chats)
    answers = " ".join(str(s.attributes.get("gen_ai.output.messages", "")) for s in chats)
    if content:
        assert "SECRET-PROMPT-1" in prompts and "alpha SECRET-PROMPT-1" in answers
    else:
        assert prompts.strip() == "" and answers.strip() == ""


def test_the_trace_context_provider_carries_only_traceparent_and_puts_it_back():
    from evaljobs_middleware.tracecontext import TraceContextProvider
    from opentelemetry import baggage, context, trace

    provider = TraceContextProvider()
    assert provider.capture() is None  # no span: nothing to carry
    tracer = TracerProvider().get_tracer("t")
    with tracer.start_as_current_span("submit") as span:
        token = context.attach(baggage.set_baggage("tenant", "acme"))
        try:
            carried = provider.capture()
        finally:
            context.detach(token)
    ids = span.get_span_context()
    expected = f"00-{ids.trace_id:032x}-{ids.span_id:016x}-{int(ids.trace_flags):02x}"
    assert carried == {"traceparent": expected}  # never the baggage
    restored = provider.restore(carried)
    try:
        current = trace.get_current_span().get_span_context()
        assert (current.trace_id, current.span_id, current.is_remote) == (ids.trace_id, ids.span_id, True)
    finally:
        provider.clear(restored)
    assert not trace.get_current_span().get_span_context().is_valid
