"""Each wire format's exact request — method, path, query, headers, body — caught by a capture server.

The capture server is a real HTTP server on loopback that records what arrives
and answers with a canned reply, so these tests pin down the bytes each format
sends (Azure classic and v1, Anthropic, every OpenAI-compatible preset) and how
each format's answers, rate-limit headers and errors are read back.
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest

from evaljobs.catalog.modelspec import load_providers
from evaljobs.providers.client import ChatClient
from evaljobs.network.errors import PermanentError, RateLimited, TransientError
from evaljobs.providers.wire._common import join_url

KEY = "sk-capture-key-42"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
]
CONVERSATION = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "find refunds and returns"},
    {
        "role": "assistant",
        "content": "Searching.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "search", "arguments": '{"q": "refunds"}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "search", "arguments": '{"q": "returns"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "3 hits"},
    {"role": "tool", "tool_call_id": "call_2", "content": "no hits"},
]
OPENAI_ANSWER = {
    "id": "x",
    "object": "chat.completion",
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 7, "completion_tokens": 2},
}
ANTHROPIC_ANSWER = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
                    "content": [{"type": "text", "text": "Let me look."},
                                {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": "a"}},
                                {"type": "tool_use", "id": "toolu_2", "name": "search", "input": {"q": "b"}}],
                    "stop_reason": "tool_use", "stop_sequence": None,
                    "usage": {"input_tokens": 30, "output_tokens": 12, "cache_read_input_tokens": 5}}


class Capture:
    """Records every request; answers with the next queued reply (default: a chat answer for the path)."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.replies: list[tuple[int, dict[str, str], bytes]] = []
        capture = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                parts = urlsplit(self.path)
                capture.requests.append({"method": "POST", "path": parts.path, "query": parts.query,
                                         "headers": {k.lower(): v for k, v in self.headers.items()},
                                         "body": json.loads(body)})
                if capture.replies:
                    status, headers, data = capture.replies.pop(0)
                else:
                    answer = ANTHROPIC_ANSWER if parts.path.endswith("/messages") else OPENAI_ANSWER
                    status, headers, data = 200, {}, json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("content-type", headers.pop("content-type", "application/json"))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.root = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def capture():
    server = Capture()
    yield server
    server.close()


def only(capture: Capture) -> dict:
    assert len(capture.requests) == 1
    return capture.requests[0]


# -- OpenAI-compatible ----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_openai_request_exactly(capture, stream):
    if stream:
        events = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": "o"}}]},
                  {"choices": [{"index": 0, "delta": {"content": "k"}, "finish_reason": "stop"}]},
                  {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}}]
        data = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        capture.replies.append((200, {"content-type": "text/event-stream"}, data.encode()))
    with ChatClient(capture.root + "/v1", api_key=KEY, stream=stream) as client:
        answer = client.complete("gpt-x", CONVERSATION, tools=TOOLS, temperature=0.2)
    request = only(capture)
    assert (request["method"], request["path"], request["query"]) == ("POST", "/v1/chat/completions", "")
    headers = request["headers"]
    assert headers["authorization"] == f"Bearer {KEY}" and headers["content-type"] == "application/json"
    assert headers["accept"] == "application/json" and headers["user-agent"] == "evaljobs"
    assert "api-key" not in headers and "x-api-key" not in headers and "anthropic-version" not in headers
    expected = {"model": "gpt-x", "messages": CONVERSATION, "tools": TOOLS, "temperature": 0.2}
    if stream:
        expected.update(stream=True, stream_options={"include_usage": True})
    assert request["body"] == expected
    assert (answer.content, answer.input_tokens, answer.output_tokens) == ("ok", 7, 2)
    assert (answer.ttft_ms is not None) == stream


OPENAI_PRESETS = [name for name in load_providers().names
                  if load_providers().get(name).api == "openai" and load_providers().get(name).base_url]


@pytest.mark.parametrize("name", OPENAI_PRESETS)
def test_every_openai_compatible_preset_posts_to_its_path_with_a_bearer_key(capture, name):
    preset = load_providers().get(name)
    path = urlsplit(preset.base_url).path
    with ChatClient(capture.root + path, api_key=KEY, wire=preset.api) as client:
        client.complete("some-model", [{"role": "user", "content": "hi"}])
    request = only(capture)
    assert request["path"] == path.rstrip("/") + "/chat/completions" and request["query"] == ""
    assert request["headers"]["authorization"] == f"Bearer {KEY}"
    assert request["body"] == {"model": "some-model", "messages": [{"role": "user", "content": "hi"}]}
    assert set(OPENAI_PRESETS) >= {
        "openai",
        "gemini",
        "openrouter",
        "groq",
        "together",
        "deepseek",
        "mistral",
        "fireworks",
        "ollama",
        "vllm",
    }


# -- Azure OpenAI -----------------------------------------------------------------------------------


def test_azure_classic_names_the_deployment_in_the_path_with_api_version_and_api_key(capture):
    with ChatClient(capture.root, api_key=KEY, wire="azure", api_version="2024-10-21") as client:
        client.complete("my-gpt4o", [{"role": "user", "content": "hi"}], max_tokens=5)
    request = only(capture)
    assert request["path"] == "/openai/deployments/my-gpt4o/chat/completions"
    assert request["query"] == "api-version=2024-10-21"
    assert request["headers"]["api-key"] == KEY and "authorization" not in request["headers"]
    assert request["body"] == {"model": "my-gpt4o", "messages": [{"role": "user", "content": "hi"}],
                               "max_tokens": 5}


def test_azure_deployment_url_keeps_its_query_string_at_the_end(capture):
    """The bug this replaces: ?api-version=… ended up before /chat/completions."""
    base = capture.root + "/openai/deployments/dep-1?api-version=2024-06-01"
    with ChatClient(base, api_key=KEY, wire="azure", api_version="2099-01-01") as client:
        client.complete("ignored", [{"role": "user", "content": "hi"}])
    request = only(capture)
    assert (request["path"], request["query"]) == ("/openai/deployments/dep-1/chat/completions",
                                                   "api-version=2024-06-01")
    # The same base URL spoken as plain OpenAI keeps the query where it belongs too.
    assert join_url(base, "/chat/completions") == (capture.root + "/openai/deployments/dep-1/chat/completions"
                                                   "?api-version=2024-06-01")


def test_azure_v1_endpoint_posts_to_chat_completions_with_the_deployment_as_model(capture):
    with ChatClient(
        capture.root + "/openai/v1/", api_key=KEY, wire="azure", api_version="2024-10-21"
    ) as client:
        client.complete("my-gpt4o", [{"role": "user", "content": "hi"}])
    request = only(capture)
    assert (request["path"], request["query"]) == ("/openai/v1/chat/completions", "")
    assert request["headers"]["api-key"] == KEY and "authorization" not in request["headers"]
    assert request["body"]["model"] == "my-gpt4o"


# -- Anthropic Messages ---------------------------------------------------------------------------


def test_anthropic_request_exactly(capture):
    with ChatClient(capture.root + "/v1", api_key=KEY, wire="anthropic") as client:
        answer = client.complete("claude-x", CONVERSATION, tools=TOOLS, temperature=0)
    request = only(capture)
    assert (request["method"], request["path"], request["query"]) == ("POST", "/v1/messages", "")
    headers = request["headers"]
    assert headers["x-api-key"] == KEY and headers["anthropic-version"] == "2023-06-01"
    assert headers["content-type"] == "application/json" and "authorization" not in headers
    assert request["body"] == {
        "model": "claude-x", "max_tokens": 4096, "system": "be brief", "temperature": 0,
        "tools": [{"name": "search", "description": "Search",
                   "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "find refunds and returns"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Searching."},
                {"type": "tool_use", "id": "call_1", "name": "search", "input": {"q": "refunds"}},
                {"type": "tool_use", "id": "call_2", "name": "search", "input": {"q": "returns"}}]},
            # Both tool results travel in ONE user turn: the API wants the roles to alternate.
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "3 hits"},
                {"type": "tool_result", "tool_use_id": "call_2", "content": "no hits"}]},
        ]}
    assert answer.content == "Let me look." and answer.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments) for c in answer.tool_calls] == [("toolu_1", "search", {"q": "a"}),
                                                                        ("toolu_2", "search", {"q": "b"})]
    assert (answer.input_tokens, answer.output_tokens) == (35, 12)
    # The assistant turn is kept in the OpenAI shape, so the conversation continues in one shape.
    assert answer.raw_message["tool_calls"][1] == {"id": "toolu_2", "type": "function",
                                                   "function": {"name": "search", "arguments": '{"q": "b"}'}}


@pytest.mark.parametrize("stop, finish", [("end_turn", "stop"), ("max_tokens", "length"),
                                          ("stop_sequence", "stop"), ("tool_use", "tool_calls")])
def test_anthropic_stop_reasons(capture, stop, finish):
    capture.replies.append((200, {}, json.dumps(dict(ANTHROPIC_ANSWER, stop_reason=stop)).encode()))
    with ChatClient(capture.root + "/v1", api_key=KEY, wire="anthropic") as client:
        assert client.complete("c", [{"role": "user", "content": "x"}]).finish_reason == finish


def test_anthropic_rate_limit_headers_reach_the_governor_names(capture):
    headers = {"anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "0",
               "anthropic-ratelimit-requests-reset": "2099-01-01T00:00:00Z",
               "anthropic-ratelimit-tokens-remaining": "1000", "retry-after": "7"}
    capture.replies.append((200, dict(headers), json.dumps(ANTHROPIC_ANSWER).encode()))
    with ChatClient(capture.root + "/v1", api_key=KEY, wire="anthropic") as client:
        answer = client.complete("c", [{"role": "user", "content": "x"}])
    assert answer.headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert answer.headers["x-ratelimit-remaining-requests"] == "0"
    assert answer.headers["x-ratelimit-remaining-tokens"] == "1000"
    assert answer.headers["x-ratelimit-reset-requests"].endswith("s")
    from evaljobs.governor.permits import _quota_spent

    spent, reset = _quota_spent(answer.headers)
    assert spent and reset > 3600  # the governor sees the quota spent until the reset time


@pytest.mark.parametrize("status, kind, error", [
    (429, "rate_limit_error", RateLimited), (529, "overloaded_error", TransientError),
    (500, "api_error", TransientError), (401, "authentication_error", PermanentError),
    (400, "invalid_request_error", PermanentError), (404, "not_found_error", PermanentError)])
def test_anthropic_error_types_map_to_ours(capture, status, kind, error):
    body = {"type": "error", "error": {"type": kind, "message": f"bad things with key {KEY}"}}
    capture.replies.append((status, {"retry-after": "4"} if status == 429 else {}, json.dumps(body).encode()))
    with ChatClient(capture.root + "/v1", api_key=KEY, wire="anthropic") as client:
        with pytest.raises(error) as info:
            client.complete("c", [{"role": "user", "content": "x"}])
    assert type(info.value) is error
    assert info.value.reason == f"HTTP {status} from provider: {kind}: bad things with key ***"
    if error is RateLimited:
        assert info.value.retry_after == 4.0


def test_a_rotated_key_replaces_the_header_of_each_format(capture):
    for wire, header, value in (("anthropic", "x-api-key", "new-key"), ("azure", "api-key", "new-key"),
                                ("openai", "authorization", "Bearer new-key")):
        capture.requests.clear()
        with ChatClient(capture.root + "/openai/v1", api_key=KEY, wire=wire, api_version="v") as client:
            client.set_api_key("new-key")
            client.complete("m", [{"role": "user", "content": "x"}])
        assert capture.requests[0]["headers"][header] == value
        assert KEY not in json.dumps(capture.requests[0]["headers"])


def test_every_wire_format_a_providers_file_may_name_has_a_module():
    from evaljobs.providers.wire import WIRE_FORMATS, wire_format

    assert {wire_format(name).name for name in WIRE_FORMATS} == set(WIRE_FORMATS)


@pytest.mark.parametrize("name", ["openai", "anthropic", "azure"])
@pytest.mark.parametrize("stream", [False, True])
def test_the_simulated_provider_speaks_every_wire_format_through_its_table(sim, name, stream):
    """The server side of each format is looked up in ``SERVER_WIRES`` by the same names as the client's."""
    from evaljobs.providers.wire import WIRE_FORMATS
    from evaljobs.simulated.wire import SERVER_WIRES

    assert set(SERVER_WIRES) == set(WIRE_FORMATS) and name in WIRE_FORMATS
    base = sim.url[: -len("/v1")] if name == "azure" else sim.url
    with ChatClient(base, api_key=KEY, wire=name, api_version="2024-10-21") as client:
        done = client.complete("sim", [{"role": "user", "content": "[sim: say Paris]"}], max_tokens=20,
                               stream=stream)
        with pytest.raises(PermanentError, match="nope"):
            client.complete("sim", [{"role": "user", "content": "[sim: status 400 nope]"}], max_tokens=20)
    assert done.content == "Paris" and done.input_tokens > 0


# -- credentials in headers: (issue 39) -------------------------------------------------------------


@pytest.mark.parametrize("wire", ["openai", "anthropic", "azure"])
@pytest.mark.parametrize("header", ["api-key", "x-api-key", "authorization", "x-portkey-api-key"])
def test_a_credential_in_headers_is_sent_on_every_wire_format(capture, wire, header):
    """Azure's api-key (or a gateway's own header) used to be dropped on the OpenAI wire."""
    base = capture.root + ("/openai/v1" if wire == "azure" else "/v1")
    with ChatClient(base, headers={header: "Bearer hdr-secret-7" if header == "authorization"
                                   else "hdr-secret-7"}, wire=wire) as client:
        client.complete("m", [{"role": "user", "content": "x"}])
    sent = only(capture)["headers"]
    assert sent[header.lower()].endswith("hdr-secret-7")
    # Next to a key variable, the header as written wins over the key's own auth header of that name.
    capture.requests.clear()
    with ChatClient(base, api_key=KEY, headers={header: "hdr-secret-7"}, wire=wire) as client:
        client.complete("m", [{"role": "user", "content": "x"}])
    assert only(capture)["headers"][header.lower()] == "hdr-secret-7"


def test_azure_full_deployment_url_with_a_header_key_needs_no_azure_variable(cli, capture, tmp_path,
                                                                             monkeypatch):
    """`api-key: ${AZURE_KEY}` satisfies pre-flight; the full …/chat/completions?api-version URL works;
    the key is scrubbed from what is printed when the provider echoes it."""

    from evaljobs.providers.client import close_clients
    from evaljobs.providers.preflight import problems

    monkeypatch.delenv("AZURE_OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("AZURE_KEY", "azure-header-secret-99")
    url = capture.root + "/openai/deployments/dep-1/chat/completions?api-version=2024-10-21"
    path = tmp_path / "providers.yaml"
    path.write_text(f'providers:\n  azure:\n    base_url: "{url}"\n'
                    '    headers: {api-key: "${AZURE_KEY}"}\n')
    providers = load_providers(path)
    assert problems(providers, ["azure/dep-1"]) == []
    try:
        check = ["providers", "check", "--providers", str(path), "-m", "azure/dep-1"]
        result = cli(*check)
        assert result.exit_code == 0, result.output
        request = only(capture)
        assert (request["path"], request["query"]) == ("/openai/deployments/dep-1/chat/completions",
                                                       "api-version=2024-10-21")
        assert request["headers"]["api-key"] == "azure-header-secret-99"
        listed = cli("providers", "list", "--providers", str(path)).output
        assert "header:api-key" in listed and "azure-header-secret-99" not in listed
        capture.replies.append((401, {}, b'{"error": {"message": "bad key azure-header-secret-99"}}'))
        failed = cli(*check)
        assert failed.exit_code == 1 and "bad key ***" in failed.output
        assert "azure-header-secret-99" not in failed.output
    finally:
        close_clients()
