"""ChatClient against a real HTTP server on loopback (the simulated provider), plus MockTransport cases."""
from __future__ import annotations

import json
import pickle
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler
import tracemalloc
from email.utils import format_datetime
from datetime import datetime, timedelta, timezone

import httpx
import pytest

from evaljobs.providers import (ChatClient,
                                PermanentError,
                                ProviderError,
                                RateLimited,
                                TransientError,
                                close_clients,
                                get_client,
                                is_retryable,
                                parse_retry_after)
from helpers import serving, url_of

SECRET = "sk-test-SECRET123"


#: The options of this module's simulated provider (the ``sim`` fixture in tests/conftest.py).
SIM_OPTIONS = dict(retry_after=1.0)


@pytest.fixture
def client(sim):
    with ChatClient(sim.url, api_key=SECRET, timeout=5.0) as chat:
        yield chat


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def fail(client: ChatClient, text: str, model: str = "m") -> ProviderError:
    with pytest.raises(ProviderError) as info:
        client.complete(model, user(text))
    return info.value


def mock_client(handler, **kwargs) -> ChatClient:
    transport = httpx.MockTransport(handler)
    return ChatClient("http://provider.test/v1", api_key=SECRET, transport=transport, **kwargs)


def test_plain_answer_has_content_usage_and_assistant_message(client):
    answer = client.complete("fast", [
        {"role": "system", "content": "Be brief. [sim: say Paris is the capital.]"},
        {"role": "user", "content": "What is the capital of France?"}])
    assert answer.content == "Paris is the capital."
    assert answer.tool_calls == []
    assert answer.finish_reason == "stop"
    assert answer.input_tokens >= 10 and answer.output_tokens >= 5
    assert answer.raw_message == {"role": "assistant", "content": "Paris is the capital."}
    assert answer.latency_ms > 0
    assert answer.model == "fast"


def test_tool_call_turn_then_tool_result_follow_up(client):
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
    messages = user('Weather? [sim: call weather {"city": "Paris", "days": [1, 2]}] [sim: say It is sunny.]')
    first = client.complete("smart", messages, tools=tools, temperature=0.0, max_tokens=100)
    assert first.finish_reason == "tool_calls"
    assert [(c.name, c.arguments, c.arguments_error) for c in first.tool_calls] == [
        ("weather", {"city": "Paris", "days": [1, 2]}, None)]
    call_id = first.tool_calls[0].id
    assert first.raw_message["role"] == "assistant"
    assert first.raw_message["tool_calls"] == [{"id": call_id, "type": "function", "function": {
        "name": "weather", "arguments": json.dumps({"city": "Paris", "days": [1, 2]})}}]

    messages = messages + [first.raw_message,
                           {"role": "tool", "tool_call_id": call_id, "content": "sunny, 21C"}]
    second = client.complete("smart", messages, tools=tools)
    assert second.content == "It is sunny."
    assert second.tool_calls == [] and second.finish_reason == "stop"
    assert second.input_tokens > first.input_tokens


def test_invalid_tool_arguments_are_kept_raw_and_flagged():
    def handler(request):
        message = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{not json"}},
            {"id": "c2", "type": "function", "function": {"name": "search", "arguments": "[1]"}}]}
        return httpx.Response(200, json={"choices": [{"message": message, "finish_reason": "tool_calls"}]})

    with mock_client(handler) as chat:
        answer = chat.complete("m", user("x"))
    first, second = answer.tool_calls
    assert first.arguments == {"_raw": "{not json"} and "invalid JSON" in first.arguments_error
    assert second.arguments == {"_raw": "[1]"} and "not an object" in second.arguments_error
    assert answer.raw_message["tool_calls"][0]["function"]["arguments"] == "{not json"
    assert answer.content == "" and answer.input_tokens == 0


def test_429_with_retry_after_seconds_is_rate_limited(client):
    error = fail(client, "[sim: status 429 slow down]")
    assert type(error) is RateLimited
    assert error.retry_after == 1.0 and error.status == 429
    assert error.reason == "HTTP 429 from provider: slow down"
    assert is_retryable(error)


def test_retry_after_ms_takes_precedence_over_retry_after(client):
    error = fail(client, "[sim: ratelimit 0.25]")
    assert isinstance(error, RateLimited)
    assert error.retry_after == 0.25  # Retry-After says 1 (rounded up), retry-after-ms says 250


def test_parse_retry_after_forms():
    now = datetime(2025, 1, 1, tzinfo=timezone.utc)
    date = format_datetime(now + timedelta(seconds=30), usegmt=True)
    assert parse_retry_after({"Retry-After": "2"}) == 2.0
    assert parse_retry_after({"Retry-After": "1.5"}) == 1.5
    assert parse_retry_after({"Retry-After": date}, now=now.timestamp()) == 30.0
    past = format_datetime(now, usegmt=True)
    assert parse_retry_after({"Retry-After": past}, now=now.timestamp() + 5) == 0.0
    assert parse_retry_after({"retry-after-ms": "1500", "Retry-After": "9"}) == 1.5
    assert parse_retry_after({"retry-after-ms": "soon", "Retry-After": "9"}) == 9.0
    assert parse_retry_after({"Retry-After": "whenever"}) is None
    assert parse_retry_after({"Retry-After": "-3"}) is None
    assert parse_retry_after({}) is None


def test_429_with_only_an_http_date_retry_after():
    when = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=120), usegmt=True)

    def handler(request):
        return httpx.Response(429, headers={"Retry-After": when}, json={"error": {"message": "quota"}})

    with mock_client(handler) as chat, pytest.raises(RateLimited) as info:
        chat.complete("m", user("x"))
    assert 100 < info.value.retry_after <= 120


@pytest.mark.parametrize("code", [500, 502, 503, 408])
def test_5xx_and_408_are_transient(client, code):
    error = fail(client, f"[sim: status {code} upstream trouble]")
    assert type(error) is TransientError
    assert error.status == code and error.reason == f"HTTP {code} from provider: upstream trouble"
    assert is_retryable(error)


@pytest.mark.parametrize("code", [400, 401, 404, 422])
def test_other_4xx_are_permanent_with_the_provider_message(client, code):
    error = fail(client, f"[sim: status {code} model does not exist]")
    assert type(error) is PermanentError
    assert error.reason == f"HTTP {code} from provider: model does not exist"
    assert not is_retryable(error)


def test_provider_message_is_cut_to_200_chars():
    def handler(request):
        return httpx.Response(400, json={"error": {"message": "x" * 5000}})

    with mock_client(handler) as chat, pytest.raises(PermanentError) as info:
        chat.complete("m", user("x"))
    message = info.value.reason.removeprefix("HTTP 400 from provider: ")
    assert len(message) == 200 and message.endswith("…")


def test_timeout_is_transient_and_names_the_timeout(sim):
    with ChatClient(sim.url, timeout=0.2) as chat:  # the answer would take 30 s: only the timeout ends it
        error = fail(chat, "[sim: sleep 30]")
    assert type(error) is TransientError
    assert "timed out after 0.2 s" in error.reason


def test_malformed_json_is_permanent(client):
    error = fail(client, "[sim: malformed]")
    assert type(error) is PermanentError and error.reason.startswith("malformed JSON in response body")


def test_truncated_body_is_transient(client):
    error = fail(client, "[sim: truncate]")
    assert type(error) is TransientError and error.reason.startswith("response body truncated")


def test_connection_reset_is_transient(client):
    error = fail(client, "[sim: reset]")
    assert type(error) is TransientError and "connection reset" in error.reason


def test_connection_refused_is_transient():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with ChatClient(f"http://127.0.0.1:{port}/v1", api_key=SECRET, timeout=2.0) as chat:
        error = fail(chat, "hello")
    assert type(error) is TransientError
    assert error.reason.startswith(f"cannot connect to http://127.0.0.1:{port}/v1")


def test_huge_body_over_the_cap_is_refused_without_buffering_it(sim):
    with ChatClient(sim.url, timeout=5.0, max_response_bytes=100_000) as chat:
        tracemalloc.start()
        try:
            error = fail(chat, "[sim: huge 50MB]")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert type(error) is PermanentError
    assert error.reason.startswith("response too large (> 100000 bytes")
    assert peak < 5_000_000


def test_huge_body_under_the_cap_is_read(client):
    answer = client.complete("m", user("[sim: huge 300000]"))
    assert len(answer.content) == 300_000 and answer.output_tokens == 75_000


def test_streamed_body_without_content_length_stops_at_the_cap():
    sent = []

    def chunks():
        for _ in range(50):  # 50 MB if read whole
            sent.append(1)
            yield b"x" * 1_000_000

    def handler(request):
        return httpx.Response(200, content=chunks())

    with mock_client(handler, max_response_bytes=1_500_000) as chat, pytest.raises(PermanentError) as info:
        chat.complete("m", user("x"))
    assert info.value.reason == "response too large (> 1500000 bytes)"
    assert len(sent) <= 3


@pytest.mark.parametrize("body, expected", [
    ({"id": "x", "object": "chat.completion"}, "no choices[0].message"),
    ({"choices": []}, "no choices[0].message"),
    ({"choices": [{"message": "hello"}]}, "no choices[0].message"),
    ({"error": {"message": "context length exceeded"}}, "context length exceeded"),
    ([1, 2], "no choices[0].message"),
    ({"choices": [{"message": {"role": "assistant", "tool_calls": [{"function": {}}]}}]}, "no function name"),
])
def test_unexpected_json_is_permanent(body, expected):
    with mock_client(lambda request: httpx.Response(200, json=body)) as chat, \
            pytest.raises(PermanentError) as info:
        chat.complete("m", user("x"))
    assert expected in info.value.reason


def test_request_body_carries_the_options():
    seen = {}

    def handler(request):
        seen.update(json.loads(request.content), auth=request.headers.get("authorization"),
                    path=request.url.path, extra_header=request.headers.get("x-team"))
        return httpx.Response(200, json={"choices": [{"message": {"role": "assistant", "content": "ok"}}],
                                         "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
                              headers={"x-ratelimit-remaining-requests": "41", "server": "mock"})

    tools = [{"type": "function", "function": {"name": "t"}}]
    with ChatClient("http://provider.test/v1/", api_key=SECRET, headers={"X-Team": "evals"},
                    transport=httpx.MockTransport(handler)) as chat:
        answer = chat.complete("gpt", user("hi"), tools=tools, temperature=0.5, max_tokens=7,
                               extra={"seed": 3})
    assert seen["path"] == "/v1/chat/completions" and seen["auth"] == f"Bearer {SECRET}"
    assert seen["extra_header"] == "evals"
    assert (seen["model"], seen["tools"], seen["temperature"], seen["max_tokens"], seen["seed"]) == (
        "gpt", tools, 0.5, 7, 3)
    assert answer.headers == {"x-ratelimit-remaining-requests": "41"}
    assert (answer.input_tokens, answer.output_tokens) == (3, 1)


def test_connections_are_kept_alive_and_reused(sim):
    sim.reset_stats()
    with ChatClient(sim.url, timeout=5.0) as chat:
        for i in range(20):
            chat.complete("m", user(f"question {i}"))
    assert sim.stats()["connections"] == 1


def test_the_api_key_never_appears_in_errors(sim):
    prompts = ["[sim: status 401 Incorrect API key provided: sk-test-SECRET123]",
               "[sim: status 500 auth header was Bearer sk-test-SECRET123]", "[sim: status 429]",
               "[sim: reset]", "[sim: truncate]", "[sim: malformed]", "[sim: sleep 1]"]
    with ChatClient(sim.url, api_key=SECRET, timeout=0.3) as chat:
        errors = [fail(chat, prompt) for prompt in prompts]
    for error in errors:
        for text in (str(error), repr(error), error.reason, repr(pickle.dumps(error))):
            assert SECRET not in text and "SECRET123" not in text
        assert error.__context__ is None and error.__cause__ is None
    assert errors[0].reason == "HTTP 401 from provider: Incorrect API key provided: ***"
    assert "Bearer ***" in errors[1].reason


def test_errors_survive_pickling_with_their_fields():
    for error in (RateLimited("HTTP 429 from provider: x", retry_after=2.5),
                  TransientError("HTTP 503 from provider: y", status=503), PermanentError("bad", status=400)):
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and copy.reason == error.reason and copy.status == error.status
        assert getattr(copy, "retry_after", None) == getattr(error, "retry_after", None)


@pytest.fixture
def header_echo():
    """A plain HTTP server whose answer is the Authorization header it received."""
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["content-length"]))
            message = {"role": "assistant", "content": self.headers.get("authorization")}
            body = json.dumps({"choices": [{"message": message}]}).encode()
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    with serving(Handler) as server:
        yield url_of(server)


def test_get_client_is_one_pooled_client_per_endpoint(header_echo, monkeypatch):
    monkeypatch.setenv("EVALJOBS_TEST_KEY", "sk-one")
    try:
        first = get_client(header_echo, "EVALJOBS_TEST_KEY", timeout=5.0)
        assert get_client(header_echo + "/", "EVALJOBS_TEST_KEY", timeout=5.0) is first
        assert get_client(header_echo, "EVALJOBS_TEST_KEY", timeout=6.0) is not first
        assert get_client(header_echo, None, timeout=5.0) is not first
        assert get_client(header_echo, "EVALJOBS_TEST_KEY", 5.0, {"x-team": "a"}) is not first
        assert first.complete("m", user("hi")).content == "Bearer sk-one"

        monkeypatch.setenv("EVALJOBS_TEST_KEY", "sk-two")  # a rotated key reaches the shared client
        assert get_client(header_echo, "EVALJOBS_TEST_KEY", timeout=5.0) is first
        assert first.complete("m", user("hi")).content == "Bearer sk-two"
        assert "sk-two" not in repr(first)
    finally:
        close_clients()
    assert first.closed
    assert get_client(header_echo, "EVALJOBS_TEST_KEY", timeout=5.0) is not first
    close_clients()


def test_pool_caps_connections_and_reuses_them(simulated_provider):
    fresh = simulated_provider(latency=0.05, export=False)
    with ChatClient(fresh.url, timeout=5.0, max_connections=3) as chat, ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(lambda i: chat.complete("m", user(f"q{i}")).content, range(24)))
        stats = fresh.stats()
    assert answers == [f"Answer to: q{i}" for i in range(24)]
    assert stats["connections"] == 3 and stats["peak_in_flight"] == 3


def test_a_call_times_out_waiting_for_a_pooled_connection():
    gate, entered = threading.Event(), threading.Event()

    def handler(request):
        entered.set()
        gate.wait(5)
        return httpx.Response(200, json={"choices": [{"message": {"role": "assistant", "content": "late"}}]})

    with mock_client(handler, timeout=0.2, max_connections=1) as chat, ThreadPoolExecutor(1) as pool:
        holder = pool.submit(chat.complete, "m", user("first"))
        assert entered.wait(5)  # the first call holds the only connection
        started = time.perf_counter()
        error = fail(chat, "second")
        assert time.perf_counter() - started > 0.15  # it waited its 0.2 s (the connection is held 5 s)
        gate.set()
        with pytest.raises(TransientError, match="timed out after 0.2 s reading the response body"):
            holder.result(timeout=5)  # the whole call is bounded too, not only each read
        assert chat.complete("m", user("third")).content == "late"  # the connection went back to the pool
    assert type(error) is TransientError
    assert error.reason == "timed out after 0.2 s waiting for a free pooled connection (1 in use)"


def test_closed_client_refuses_calls(sim):
    chat = ChatClient(sim.url, timeout=5.0)
    chat.close()
    with pytest.raises(PermanentError, match="is closed"):
        chat.complete("m", user("x"))


def test_get_client_names_a_missing_key_variable(sim, monkeypatch):
    monkeypatch.delenv("EVALJOBS_MISSING_KEY", raising=False)
    with pytest.raises(PermanentError, match="environment variable EVALJOBS_MISSING_KEY is not set"):
        get_client(sim.url, "EVALJOBS_MISSING_KEY")


class _RecordingHandler(BaseHTTPRequestHandler):
    """Answers every POST with a one-line completion and records the request line and headers."""

    seen: list[tuple[str, dict[str, str]]] = []

    def do_POST(self):  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers.get("content-length") or 0))
        type(self).seen.append((self.requestline, {k.lower(): v for k, v in self.headers.items()}))
        body = json.dumps({"choices": [{"message": {"role": "assistant", "content": "hi"},
                                        "finish_reason": "stop"}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # quiet
        pass


@pytest.fixture
def recording_server():
    _RecordingHandler.seen = []
    with serving(_RecordingHandler) as server:
        yield server


@pytest.mark.parametrize("no_proxy", [None, "provider.invalid"])
def test_an_http_proxy_from_the_environment_is_used_unless_no_proxy_names_the_host(
    recording_server, monkeypatch, no_proxy
):
    """Requests go to the transport directly (not through httpx.Client), which must not lose
    what the client did with trust_env: HTTP_PROXY and NO_PROXY."""
    port = recording_server.server_address[1]
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "no_proxy",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
    if no_proxy:
        monkeypatch.setenv("NO_PROXY", no_proxy)
    client = ChatClient("http://provider.invalid/v1", api_key=SECRET, timeout=5)
    try:
        if no_proxy:
            with pytest.raises(TransientError, match="cannot connect to http://provider.invalid/v1"):
                client.complete("m", [{"role": "user", "content": "x"}])
            assert _RecordingHandler.seen == []
            return
        completion = client.complete("m", [{"role": "user", "content": "x"}])
    finally:
        client.close()
    assert completion.content == "hi"
    [(request_line, headers)] = _RecordingHandler.seen
    # absolute form: a proxy
    assert request_line == "POST http://provider.invalid/v1/chat/completions HTTP/1.1"
    assert headers["authorization"] == f"Bearer {SECRET}"
    assert headers["user-agent"] == "evaljobs" and headers["accept"] == "application/json"
    assert headers["content-type"] == "application/json" and "gzip" in headers["accept-encoding"]


def test_requests_carry_the_default_headers_without_a_proxy(recording_server, monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    port = recording_server.server_address[1]
    with ChatClient(f"http://127.0.0.1:{port}/v1", headers={"X-Team": "evals"}, timeout=5) as client:
        assert client.complete("m", [{"role": "user", "content": "x"}]).content == "hi"
    [(request_line, headers)] = _RecordingHandler.seen
    assert request_line == "POST /v1/chat/completions HTTP/1.1"
    assert headers["host"] == f"127.0.0.1:{port}" and headers["x-team"] == "evals"
    assert "authorization" not in headers


def test_plain_http_transports_share_one_context_that_loads_no_ca_and_accepts_no_certificate(client):
    """A width-16 run opens 16 connections to an http:// provider at once: they share one context (none is
    built per connection), which reads no CA bundle and, were TLS ever attempted, would refuse it."""
    import ssl

    from evaljobs.providers.client import _ssl_for

    assert client.complete("fast", [{"role": "user", "content": "x"}]).content  # calls go out through it
    contexts = {_ssl_for(httpx.URL(client.base_url), None) for _ in range(3)}
    [context] = contexts
    assert isinstance(context, ssl.SSLContext)
    assert context.cert_store_stats()["x509"] == 0
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    # a TLS endpoint, or TLS through an https:// proxy, gets the verifying context, never this one
    assert _ssl_for(httpx.URL("https://api.example.com/v1"), None) is not context
    assert _ssl_for(httpx.URL("http://provider.example/v1"), "https://proxy.example:3128") is not context
