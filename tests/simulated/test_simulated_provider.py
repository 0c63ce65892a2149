"""The simulated provider: directives, turn logic, limits, faults and counters, over real loopback HTTP."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from evaljobs.providers import ChatClient, PermanentError, ProviderError, RateLimited, TransientError
from evaljobs.simulated import SimulatedProvider, parse_simulate_options
from evaljobs.simulated import server as simulated
from evaljobs.testing import ManualClock
from helpers import wait_until

REPO = Path(__file__).resolve().parents[2]
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}},
         {"type": "function", "function": {"name": "other", "parameters": {"type": "object"}}}]




@pytest.fixture
def client(sim):
    with ChatClient(sim.url, timeout=5.0) as chat:
        yield chat


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def outcome(chat: ChatClient, text: str, model: str = "m") -> str:
    try:
        return chat.complete(model, user(text)).content
    except ProviderError as error:
        return f"{type(error).__name__}:{error.status}"


def test_directives_apply_per_model(client):
    messages = [{"role": "system", "content": "[sim@fast: say A] [sim@smart: say B]"},
                {"role": "user", "content": "Which?"}]
    assert client.complete("fast", messages).content == "A"
    assert client.complete("smart", messages).content == "B"
    assert client.complete("other", messages).content == "Answer to: Which?"
    shared = user("[sim: say everyone] [sim@llama3:8b: status 503]")
    assert client.complete("anyone", shared).content == "everyone"
    with pytest.raises(TransientError):
        client.complete("llama3:8b", shared)


def test_directives_never_appear_in_answers(client):
    text = 'Tell me [sim@nobody: say hidden] about {"json": [1]} and [sim: echo] Paris.'
    assert client.complete("m", user(text)).content == 'Tell me about {"json": [1]} and Paris.'
    answer = client.complete("m", user("Summarise [sim@nobody: say x] this text."))
    assert answer.content == "Answer to: Summarise this text."


def test_arguments_may_contain_brackets_and_say_text_may_contain_quotes(client):
    messages = user('[sim: call lookup {"q": "a]b", "ids": [1, [2]]}] [sim: say He said "hi]')
    first = client.complete("m", messages)
    assert first.tool_calls[0].arguments == {"q": "a]b", "ids": [1, [2]]}
    messages += [first.raw_message, {"role": "tool", "tool_call_id": "call_1", "content": "r"}]
    assert client.complete("m", messages).content == 'He said "hi'


def test_multi_turn_call_then_say_then_summary(client):
    script = '[sim: call lookup {"id": 7}] [sim: call other] [sim: say Found it.]'
    messages = [{"role": "system", "content": script}, {"role": "user", "content": "Find order 7"}]
    first = client.complete("smart", messages, tools=TOOLS)
    assert first.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments) for c in first.tool_calls] == [
        ("call_1", "lookup", {"id": 7}), ("call_2", "other", {})]
    messages += [first.raw_message,
                 {"role": "tool", "tool_call_id": "call_1", "content": "order 7: shipped"},
                 {"role": "tool", "tool_call_id": "call_2", "content": "nothing"}]
    second = client.complete("smart", messages, tools=TOOLS)
    assert second.content == "Found it." and second.tool_calls == []

    # Steps exhausted and the last message is a tool result: a deterministic summary.
    messages = [{"role": "user", "content": "[sim: call lookup {}]"}]
    first = client.complete("smart", messages, tools=TOOLS)
    messages += [first.raw_message, {"role": "tool", "tool_call_id": first.tool_calls[0].id,
                                     "content": "  the   result [sim: say injected]"}]
    assert client.complete("smart", messages, tools=TOOLS).content == "Done: lookup: the result"


def test_without_directives_a_tool_model_calls_the_first_tool_once(client):
    messages = user("Look something up")
    first = client.complete("my-tool-model", messages, tools=TOOLS)
    assert [(c.name, c.arguments) for c in first.tool_calls] == [("lookup", {})]
    messages += [first.raw_message, {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "42"}]
    assert client.complete("my-tool-model", messages, tools=TOOLS).content == "Done: lookup: 42"
    assert client.complete("plain", user("Look something up"), tools=TOOLS).content == (
        "Answer to: Look something up")
    long_prompt = "y" * 500
    assert client.complete("plain", user(long_prompt)).content == "Answer to: " + "y" * 200


def test_max_tokens_cuts_the_answer(client):
    answer = client.complete("m", user("[sim: say " + "word " * 40 + "]"), max_tokens=5)
    assert len(answer.content) == 20 and answer.finish_reason == "length"


def test_bad_directives_are_answered_400_naming_the_message(client):
    with pytest.raises(PermanentError, match=r"unknown sim directive action 'dance' in message 2"):
        client.complete("m", [{"role": "system", "content": "ok"},
                              {"role": "user", "content": "[sim: dance]"}])
    with pytest.raises(PermanentError, match=r"call lookup.*arguments are not JSON"):
        client.complete("m", user("[sim: call lookup {oops}]"))
    with pytest.raises(PermanentError, match=r"status '200' is not an HTTP error code"):
        client.complete("m", user("[sim: status 200]"))


def test_fail_first_fails_each_conversation_n_times(client):
    text = "[sim: fail-first 2 503] [sim: say recovered]"
    results = [outcome(client, text) for _ in range(4)]
    assert results == ["TransientError:503", "TransientError:503", "recovered", "recovered"]
    # Another model (so another conversation) has its own count; 429s carry a retry hint.
    with pytest.raises(RateLimited) as info:
        client.complete("other", user("[sim: fail-first 1 429] [sim: say ok]"))
    assert info.value.retry_after == 1.0
    assert client.complete("other", user("[sim: fail-first 1 429] [sim: say ok]")).content == "ok"


def test_max_concurrent_answers_429_immediately():
    with SimulatedProvider(latency=1.0, max_concurrent=2, retry_after=0.5) as sim, \
            ChatClient(sim.url, timeout=5.0) as chat, ThreadPoolExecutor(8) as pool:
        def call(i: int):
            started = time.perf_counter()
            try:
                chat.complete("m", user(f"q{i}"))
                return "ok", time.perf_counter() - started, None
            except RateLimited as error:
                return "429", time.perf_counter() - started, error.retry_after

        results = list(pool.map(call, range(8)))
        stats, log = sim.stats(), sim.calls()
    limited = [r for r in results if r[0] == "429"]
    assert len(limited) >= 1 and len(results) - len(limited) >= 2
    assert all(retry == 0.5 for _, _, retry in limited)
    # Refused at once, not after waiting for a slot: as the provider logged it, each 429 was answered while
    # the two calls that held the slots when it arrived were still in flight (an order, not a duration:
    # a loaded machine's stalls move both alike).
    admitted = [c for c in log if c["status"] == 200]
    for refused in (c for c in log if c["status"] == 429):
        holding = [c for c in admitted if c["arrived"] <= refused["arrived"] < c["answered"]]
        assert len(holding) == 2 and all(refused["answered"] < c["answered"] for c in holding), (refused, log)
    assert stats["peak_in_flight"] == 2
    assert stats["rate_limited"] == len(limited) and stats["completed"] == 8 - len(limited)


def test_rpm_is_a_sliding_window():
    """The window is timed on the provider's clock: moved by hand across its end, not slept through."""
    clock = ManualClock()
    with SimulatedProvider(rpm=3, clock=clock) as sim, ChatClient(sim.url, timeout=5.0) as chat:
        answers = [chat.complete("m", user(f"q{i}")) for i in range(2)]
        clock.advance(20.0)
        answers.append(chat.complete("m", user("q2")))  # the window: 1000, 1000, 1020
        with pytest.raises(RateLimited) as info:
            chat.complete("m", user("q3"))
        assert info.value.retry_after == 40.0  # until the first two leave the window
        assert [a.headers["x-ratelimit-remaining-requests"] for a in answers] == ["2", "1", "0"]
        assert answers[0].headers["x-ratelimit-limit-requests"] == "3"
        clock.advance(39.5)
        with pytest.raises(RateLimited) as info:
            chat.complete("m", user("q4"))
        assert info.value.retry_after == 0.5
        clock.advance(0.5)  # 60 s after the first two: both slots free again, the third still held
        assert [chat.complete("m", user(q)).content for q in ("q5", "q6")] == [
            "Answer to: q5",
            "Answer to: q6",
        ]
        with pytest.raises(RateLimited) as info:
            chat.complete("m", user("q7"))
        assert info.value.retry_after == 20.0
        assert sim.stats()["rate_limited"] == 3


def test_rpm_retry_after_reports_the_window():
    with SimulatedProvider(rpm=1) as sim, ChatClient(sim.url, timeout=5.0) as chat:
        chat.complete("m", user("first"))
        with pytest.raises(RateLimited) as info:
            chat.complete("m", user("second"))
    assert 59 < info.value.retry_after <= 60


def _failure_pattern(seed: int, prompts: list[str]) -> set[str]:
    with SimulatedProvider(error_rate=0.3, seed=seed) as sim, ChatClient(sim.url, timeout=5.0) as chat:
        failed = {p for p in prompts if outcome(chat, p).startswith("TransientError:500")}
        assert sim.stats()["errors"].get("500", 0) == len(failed)
        return failed


def test_error_rate_is_deterministic_per_seed():
    prompts = [f"prompt {i}" for i in range(60)]
    first = _failure_pattern(7, prompts)
    assert _failure_pattern(7, list(reversed(prompts))) == first  # order does not matter
    assert _failure_pattern(8, prompts) != first
    assert 6 <= len(first) <= 32


def test_stats_counters_and_endpoints(sim, client):
    sim.reset_stats()
    answers = [client.complete("fast", user("hello there")),
               client.complete("smart", user("[sim: call lookup {}]"), tools=TOOLS)]
    for text in ("[sim: status 500]", "[sim: status 429]", "[sim: malformed]"):
        outcome(client, text, model="smart")
    with httpx.Client(base_url=sim.url.removesuffix("/v1")) as http:
        stats = http.get("/stats").json()
        assert http.get("/health").json() == {"status": "ok"}
        models = [m["id"] for m in http.get("/v1/models").json()["data"]]
        assert http.post("/stats/reset").json() == {"status": "reset"}
        after = http.get("/stats").json()
        assert http.get("/nowhere").status_code == 404
        assert http.get("/v1/chat/completions").status_code == 405
    assert set(stats) == set(sim.stats())  # the same shape as the Python API
    assert (stats["requests"], stats["completed"], stats["rate_limited"]) == (5, 2, 1)
    assert stats["errors"] == {"500": 1} and stats["faults"] == {"malformed": 1}
    assert stats["tool_call_turns"] == 1 and stats["in_flight"] == 0 and stats["peak_in_flight"] == 1
    assert stats["input_tokens"] == sum(a.input_tokens for a in answers)
    assert stats["output_tokens"] == sum(a.output_tokens for a in answers)
    assert stats["by_model"]["fast"]["completed"] == 1 and stats["by_model"]["fast"]["requests"] == 1
    assert stats["by_model"]["smart"]["requests"] == 4 and stats["by_model"]["smart"]["tool_call_turns"] == 1
    assert {"fast", "smart"} <= set(models)
    assert (after["requests"], after["completed"], after["by_model"]) == (0, 0, {})


def test_token_usage_is_deterministic_and_grows_with_the_prompt(client):
    short = client.complete("m", user("[sim: say ok]"))
    again = client.complete("m", user("[sim: say ok]"))
    longer = client.complete("m", user("[sim: say ok]" + " context" * 100), tools=TOOLS)
    assert (short.input_tokens, short.output_tokens) == (again.input_tokens, again.output_tokens)
    assert short.output_tokens == 1 and longer.input_tokens > short.input_tokens + 200


def test_latency_is_simulated_and_calls_overlap():
    with SimulatedProvider(latency=0.2, jitter=0.05) as sim, ChatClient(sim.url, timeout=5.0) as chat, \
            ThreadPoolExecutor(64) as pool:
        latencies = list(pool.map(lambda i: chat.complete("m", user(f"q{i}")).latency_ms, range(64)))
        stats = sim.stats()
    assert min(latencies) >= 140
    # The calls overlap (not back to back): the provider itself saw at least 16 in flight at once.
    # No wall-clock bound: under `scripts/test --stress` 64 calls of 0.2 s took 2.04 s.
    assert stats["completed"] == 64 and stats["peak_in_flight"] >= 16


def test_sleep_directive_adds_latency(client):
    started = time.perf_counter()
    assert client.complete("m", user("[sim: sleep 0.15] [sim: say late]")).content == "late"
    assert time.perf_counter() - started >= 0.15


def test_stop_cancels_in_flight_requests_and_frees_the_port():
    sim = SimulatedProvider().start()
    chat = ChatClient(sim.url, timeout=5.0)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(outcome, chat, "[sim: sleep 30]")
        assert wait_until(lambda: sim.stats()["in_flight"] == 1, 5, 0.005)  # the request is being served
        sim.stop()
        assert pending.result(timeout=5).startswith("TransientError")  # 30 s of sleep, cut at the stop
    chat.close()
    with SimulatedProvider(port=sim.port) as again:  # the port is free again
        assert again.port == sim.port


def test_start_reports_a_busy_port():
    with SimulatedProvider() as sim, pytest.raises(OSError):
        SimulatedProvider(port=sim.port).start()


def test_serve_forever_prints_its_url_and_stops_on_sigterm():
    env = dict(os.environ, PYTHONPATH=str(REPO))
    code = "from evaljobs.simulated import SimulatedProvider; SimulatedProvider().serve_forever()"
    process = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = process.stderr.readline()
        url = line.strip().rsplit(" ", 1)[-1]
        assert line.startswith("simulated provider listening on http://127.0.0.1:")
        assert httpx.get(url.removesuffix("/v1") + "/health").json() == {"status": "ok"}
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=5) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_parse_simulate_options():
    assert parse_simulate_options("latency=4.6,jitter=0.5,max_concurrent=8,rpm=600,error_rate=0.01") == {
        "latency": 4.6, "jitter": 0.5, "max_concurrent": 8, "rpm": 600, "error_rate": 0.01}
    assert parse_simulate_options(" port=0 , seed=3, retry-after=2, rpm=none ,") == {
        "port": 0, "seed": 3, "retry_after": 2.0, "rpm": None}
    assert parse_simulate_options("") == {}
    with pytest.raises(ValueError, match=r"^unknown simulate option 'latncy'; known: host, port"):
        parse_simulate_options("latncy=4")
    with pytest.raises(ValueError, match=r"^simulate option latency='fast' is not a number$"):
        parse_simulate_options("latency=fast")
    with pytest.raises(ValueError, match=r"^simulate option max_concurrent='2.5' is not an integer$"):
        parse_simulate_options("max_concurrent=2.5")
    with pytest.raises(ValueError, match=r"error_rate=1.5 must be between 0 and 1"):
        parse_simulate_options("error_rate=1.5")
    with pytest.raises(ValueError, match=r"'latency' is not key=value"):
        parse_simulate_options("latency")
    with pytest.raises(ValueError, match=r"latency=-1 must be a number of seconds >= 0"):
        SimulatedProvider(latency=-1)


def test_conversation_counts_stay_bounded(monkeypatch):
    monkeypatch.setattr(simulated, "MAX_TRACKED_CONVERSATIONS", 4)
    with SimulatedProvider() as sim, ChatClient(sim.url, timeout=5.0) as chat:
        text = "[sim: fail-first 1 500] [sim: say fine]"
        assert outcome(chat, text) == "TransientError:500"
        for i in range(2):  # recently seen conversations are kept, the oldest are forgotten
            outcome(chat, f"other {i}")
            assert outcome(chat, text) == "fine"
        for i in range(6):
            outcome(chat, f"filler {i}")
        assert outcome(chat, text) == "TransientError:500"
