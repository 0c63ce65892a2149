"""The official openai and anthropic SDKs against the simulated provider, over real loopback HTTP.

If the SDKs (which validate the wire format they parse: event names, chunk
shapes, error bodies, headers) accept our simulated endpoints, those endpoints
speak the real formats; our own client then runs against the same endpoints.
"""
from __future__ import annotations

import json

import pytest

# openai and anthropic are imported in the tests that use them, not here: every pytest-xdist worker
# collects this module, and the two SDKs cost ~2 s of CPU to import (only the worker running it pays).

from evaljobs.providers.client import ChatClient
from evaljobs.network.errors import PermanentError, RateLimited, TransientError

TOOLS_OPENAI = [{"type": "function", "function": {
    "name": "search", "description": "Search the docs",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]
TOOLS_ANTHROPIC = [
    {
        "name": "search",
        "description": "Search the docs",
        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    }
]
TWO_CALLS = (
    'find it [sim: call search {"q": "refunds"}] [sim: call search {"q": "returns"}] [sim: say Found both]'
)


#: The options of this module's simulated provider (the ``sim`` fixture in tests/conftest.py).
SIM_OPTIONS = dict(stream_interval=0.001)


# -- OpenAI SDK -------------------------------------------------------------------------------------


def test_openai_sdk_plain(oai):
    answer = oai.chat.completions.create(model="sim", messages=[
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "hi [sim: say Paris]"}])
    assert answer.choices[0].message.content == "Paris"
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage.prompt_tokens > 0 and answer.usage.completion_tokens > 0


def test_openai_sdk_tools_two_calls_then_answer(oai):
    messages = [{"role": "user", "content": TWO_CALLS}]
    first = oai.chat.completions.create(model="sim", messages=messages, tools=TOOLS_OPENAI)
    calls = first.choices[0].message.tool_calls
    assert first.choices[0].finish_reason == "tool_calls"
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("search", {"q": "refunds"}), ("search", {"q": "returns"})]
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    messages += [
        {"role": "tool", "tool_call_id": c.id, "content": f"result {i}"} for i, c in enumerate(calls)
    ]
    second = oai.chat.completions.create(model="sim", messages=messages, tools=TOOLS_OPENAI)
    assert second.choices[0].message.content == "Found both"


def test_openai_sdk_streaming_text_tools_and_usage(oai):
    text_stream = oai.chat.completions.create(
        model="sim", stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "[sim: say a fairly long answer that spans several chunks]"}])
    chunks = list(text_stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == \
        "a fairly long answer that spans several chunks"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    # The SDK's own accumulator (chat.completions.stream) rebuilds the tool calls from the deltas.
    with oai.chat.completions.stream(model="sim", messages=[{"role": "user", "content": TWO_CALLS}],
                                     tools=TOOLS_OPENAI) as stream:
        final = stream.get_final_completion()
    calls = final.choices[0].message.tool_calls
    assert [json.loads(c.function.arguments) for c in calls] == [{"q": "refunds"}, {"q": "returns"}]
    assert final.choices[0].finish_reason == "tool_calls"


def test_openai_sdk_errors(oai):
    import openai

    with pytest.raises(openai.RateLimitError) as limited:
        oai.chat.completions.create(model="sim", messages=[{"role": "user", "content": "[sim: ratelimit 3]"}])
    assert limited.value.status_code == 429
    assert limited.value.response.headers["retry-after"] == "3"
    with pytest.raises(openai.InternalServerError) as failed:
        oai.chat.completions.create(
            model="sim", messages=[{"role": "user", "content": "[sim: status 500 boom]"}]
        )
    assert failed.value.status_code == 500 and "boom" in str(failed.value)


def test_azure_openai_sdk_against_the_deployment_path(sim):
    import openai

    client = openai.AzureOpenAI(
        azure_endpoint=sim.url[: -len("/v1")], api_key="az-key", api_version="2024-10-21", max_retries=0
    )
    try:
        answer = client.chat.completions.create(model="my-deployment",
                                                messages=[{"role": "user", "content": "[sim: say hello]"}])
    finally:
        client.close()
    assert answer.choices[0].message.content == "hello"


# -- Anthropic SDK ----------------------------------------------------------------------------------


def test_anthropic_sdk_plain_with_system(ant):
    message = ant.messages.create(model="sim", max_tokens=100, system="be brief",
                                  messages=[{"role": "user", "content": "hi [sim: say Paris]"}])
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == "Paris"
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0


def test_anthropic_sdk_tool_use_two_calls_then_tool_results(ant):
    messages = [{"role": "user", "content": TWO_CALLS}]
    first = ant.messages.create(model="sim", max_tokens=200, tools=TOOLS_ANTHROPIC, messages=messages)
    uses = [b for b in first.content if b.type == "tool_use"]
    assert first.stop_reason == "tool_use"
    assert [(u.name, u.input) for u in uses] == [("search", {"q": "refunds"}), ("search", {"q": "returns"})]
    messages.append({"role": "assistant", "content": [b.model_dump() for b in first.content]})
    messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": u.id, "content": "r"}
                                                 for u in uses]})
    second = ant.messages.create(model="sim", max_tokens=200, tools=TOOLS_ANTHROPIC, messages=messages)
    assert second.content[0].text == "Found both" and second.stop_reason == "end_turn"


def test_anthropic_sdk_streaming_text_and_tools(ant):
    with ant.messages.stream(
        model="sim",
        max_tokens=200,
        messages=[{"role": "user", "content": "[sim: say streamed in several pieces here]"}],
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) > 1 and "".join(pieces) == "streamed in several pieces here"
    assert final.stop_reason == "end_turn" and final.usage.output_tokens > 0
    with ant.messages.stream(model="sim", max_tokens=200, tools=TOOLS_ANTHROPIC,
                             messages=[{"role": "user", "content": TWO_CALLS}]) as stream:
        final = stream.get_final_message()
    assert [b.input for b in final.content if b.type == "tool_use"] == [{"q": "refunds"}, {"q": "returns"}]
    assert final.stop_reason == "tool_use"


def test_anthropic_sdk_errors(ant):
    import anthropic

    with pytest.raises(anthropic.RateLimitError) as limited:
        ant.messages.create(
            model="sim", max_tokens=10, messages=[{"role": "user", "content": "[sim: ratelimit 2]"}]
        )
    assert limited.value.status_code == 429 and limited.value.response.headers["retry-after"] == "2"
    assert limited.value.body["error"]["type"] == "rate_limit_error"
    with pytest.raises(anthropic.InternalServerError) as failed:
        ant.messages.create(model="sim", max_tokens=10,
                            messages=[{"role": "user", "content": "[sim: status 500 boom]"}])
    assert failed.value.body["error"] == {"type": "api_error", "message": "boom"}
    with pytest.raises(anthropic.BadRequestError) as bad:  # like the real API: max_tokens is required
        ant.post("/v1/messages", body={"model": "sim", "messages": [{"role": "user", "content": "x"}]},
                 cast_to=anthropic.types.Message)
    assert "max_tokens" in str(bad.value)


# -- our client on the same endpoints ---------------------------------------------------------------


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
@pytest.mark.parametrize("stream", [False, True])
def test_our_client_two_tool_calls_then_answer(sim, wire, stream):
    with ChatClient(sim.url, api_key="k", wire=wire, stream=stream) as client:
        messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": TWO_CALLS}]
        first = client.complete("sim", messages, tools=TOOLS_OPENAI)
        assert first.finish_reason == "tool_calls"
        assert [(c.name, c.arguments) for c in first.tool_calls] == [("search", {"q": "refunds"}),
                                                                     ("search", {"q": "returns"})]
        assert first.input_tokens > 0 and first.output_tokens > 0
        assert (first.ttft_ms is not None) == stream
        if stream:
            assert 0 < first.ttft_ms <= first.latency_ms
        messages.append(first.raw_message)
        messages += [{"role": "tool", "tool_call_id": c.id, "content": "r"} for c in first.tool_calls]
        second = client.complete("sim", messages, tools=TOOLS_OPENAI)
        assert (second.content, second.finish_reason) == ("Found both", "stop")


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
@pytest.mark.parametrize("stream", [False, True])
def test_our_client_maps_errors(sim, wire, stream):
    with ChatClient(sim.url, api_key="k", wire=wire, stream=stream) as client:
        with pytest.raises(RateLimited) as limited:
            client.complete("sim", [{"role": "user", "content": "[sim: ratelimit 2]"}])
        assert limited.value.retry_after == 2.0
        with pytest.raises(TransientError) as failed:
            client.complete("sim", [{"role": "user", "content": "[sim: status 500 boom]"}])
        assert "boom" in failed.value.reason
        with pytest.raises(PermanentError) as bad:
            client.complete("sim", [{"role": "user", "content": "[sim: status 400 nope]"}])
        assert bad.value.status == 400
        if wire == "anthropic":
            assert "invalid_request_error: nope" in bad.value.reason


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_a_truncated_stream_is_an_error_not_an_empty_answer(sim, wire):
    with ChatClient(sim.url, api_key="k", wire=wire, stream=True) as client:
        with pytest.raises(TransientError) as cut:
            client.complete(
                "sim", [{"role": "user", "content": ("[sim: say a long enough answer] [sim: truncate]")}]
            )
    assert "truncated" in cut.value.reason or "incomplete" in cut.value.reason


def test_stream_true_to_the_simulated_provider_is_answered_not_empty(sim):
    """The bug this replaces: stream=true to the simulated provider gave an empty answer and no error."""
    with ChatClient(sim.url, api_key="k") as client:
        answer = client.complete("sim", [{"role": "user", "content": "[sim: say Paris]"}], stream=True)
    assert answer.content == "Paris" and answer.ttft_ms is not None
