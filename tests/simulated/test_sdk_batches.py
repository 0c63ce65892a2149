"""The official openai and anthropic SDKs' batch clients against the simulated provider's batch APIs.

The wire-format cross-check for batches, as tests/simulated/test_sdk_wire.py is for chat: the SDKs parse
every object they get (``openai.types.Batch``, ``FileObject``, ``anthropic.types.messages
.MessageBatch``, the results JSONL), so the desk speaking what they accept is what the real
APIs speak. Batches end by the test's own :meth:`BatchDesk.end_batches` (no waiting on a clock).
"""
from __future__ import annotations

import io
import json

import pytest

# openai and anthropic are imported in the tests that use them, not here: every pytest-xdist worker
# collects this module, and the two SDKs cost ~2 s of CPU to import (only the worker running it pays).


#: A provider per test, reached by the SDK clients only (the ``sim`` fixture in tests/conftest.py); a batch
#: ends only when the test ends it (a delay no test waits for).
SIM_OPTIONS = dict(batch_delay=3600, export=False)
SIM_PER_TEST = True


def _openai_lines(prompts: dict[str, str], url: str = "/v1/chat/completions") -> bytes:
    """The input file's lines (Azure's: ``url`` ``/chat/completions``, the endpoint it names)."""
    return "".join(
        json.dumps(
            {
                "custom_id": cid,
                "method": "POST",
                "url": url,
                "body": {"model": "sim", "messages": [{"role": "user", "content": text}]},
            }
        )
        + "\n"
        for cid, text in prompts.items()
    ).encode()


def _by_id(text: str) -> dict[str, dict]:
    return {line["custom_id"]: line for line in map(json.loads, text.splitlines()) if line}


def test_openai_sdk_batch_round_trip_with_a_partial_failure(sim, oai):
    import openai

    file = oai.files.create(file=("requests.jsonl", io.BytesIO(_openai_lines({
        "ok-1": "[sim: say Paris]", "ok-2": "[sim: say Rome]", "bad-1": "[sim: status 500 boom]"}))),
        purpose="batch")
    assert file.purpose == "batch" and file.bytes > 0
    batch = oai.batches.create(
        input_file_id=file.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"evaljobs": "k1"},
    )
    assert batch.status == "in_progress" and batch.request_counts.total == 3
    assert batch.output_file_id is None and batch.metadata == {"evaljobs": "k1"}
    assert [b.id for b in oai.batches.list(limit=10).data] == [batch.id]

    assert sim.batches.end_batches() == 1
    done = oai.batches.retrieve(batch.id)
    assert done.status == "completed" and done.completed_at is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (2, 1)
    output = _by_id(oai.files.content(done.output_file_id).text)
    answers = {cid: openai.types.chat.ChatCompletion.model_validate(line["response"]["body"])
               for cid, line in output.items()}
    assert {cid: a.choices[0].message.content for cid, a in answers.items()} == {
        "ok-1": "Paris",
        "ok-2": "Rome",
    }
    assert all(line["response"]["status_code"] == 200 and line["error"] is None for line in output.values())
    errors = _by_id(oai.files.content(done.error_file_id).text)
    assert list(errors) == ["bad-1"] and errors["bad-1"]["response"]["status_code"] == 500
    assert "boom" in errors["bad-1"]["response"]["body"]["error"]["message"]

    stats = sim.stats()["batches"]
    assert stats["submitted"] == {"ok-1": 1, "ok-2": 1, "bad-1": 1} and stats["batches_created"] == 1
    assert sim.stats()["by_model"]["sim"]["batched"] == 3


def test_openai_sdk_cancel_and_expiry(sim, oai):
    def submit(ids):
        file = oai.files.create(file=("r.jsonl", io.BytesIO(_openai_lines({i: "[sim: say x]" for i in ids}))),
                                purpose="batch")
        return oai.batches.create(
            input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
        )

    cancelled = submit(["c-1", "c-2"])
    assert oai.batches.cancel(cancelled.id).status == "cancelling"
    after = oai.batches.retrieve(cancelled.id)
    assert after.status == "cancelled" and after.output_file_id is None
    lines = _by_id(oai.files.content(after.error_file_id).text)
    assert {cid: line["error"]["code"] for cid, line in lines.items()} == {"c-1": "batch_cancelled",
                                                                           "c-2": "batch_cancelled"}
    expired = submit(["e-1"])
    sim.batches.end_batches(expire=True)
    gone = oai.batches.retrieve(expired.id)
    assert gone.status == "expired" and gone.request_counts.failed == 1
    line = _by_id(oai.files.content(gone.error_file_id).text)["e-1"]
    assert line["response"] is None and line["error"]["code"] == "batch_expired"


def test_openai_sdk_refusals_are_api_errors(sim, oai):
    import openai

    with pytest.raises(openai.NotFoundError):
        oai.batches.retrieve("batch_nope")
    file = oai.files.create(file=("r.jsonl", io.BytesIO(_openai_lines({"same": "a"}) * 2)), purpose="batch")
    with pytest.raises(openai.BadRequestError) as twice:
        oai.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert "appears twice" in str(twice.value)
    assert sim.stats()["batches"]["batches_created"] == 0


def test_azure_openai_sdk_batch_paths(sim):
    import openai

    client = openai.AzureOpenAI(
        azure_endpoint=sim.url[: -len("/v1")], api_key="az-key", api_version="2024-10-21", max_retries=0
    )
    try:
        file = client.files.create(
            file=("r.jsonl", io.BytesIO(_openai_lines({"az-1": "[sim: say hello]"}, "/chat/completions"))),
            purpose="batch",
        )
        batch = client.batches.create(
            input_file_id=file.id, endpoint="/chat/completions", completion_window="24h"
        )
        sim.batches.end_batches()
        done = client.batches.retrieve(batch.id)
        output = _by_id(client.files.content(done.output_file_id).text)
    finally:
        client.close()
    assert output["az-1"]["response"]["body"]["choices"][0]["message"]["content"] == "hello"


def test_anthropic_sdk_batch_round_trip(sim, ant):
    def params(text):
        return {"model": "sim", "max_tokens": 100, "messages": [{"role": "user", "content": text}]}

    batch = ant.messages.batches.create(requests=[
        {"custom_id": "a-1", "params": params("[sim: say Paris]")},
        {"custom_id": "a-2", "params": params('[sim: call search {"q": "x"}] [sim: say found]')},
        {"custom_id": "a-bad", "params": params("[sim: status 529 overloaded]")}])
    assert batch.processing_status == "in_progress" and batch.request_counts.processing == 3
    assert batch.results_url is None
    assert [b.id for b in ant.messages.batches.list(limit=5).data] == [batch.id]
    sim.batches.end_batches()
    ended = ant.messages.batches.retrieve(batch.id)
    assert ended.processing_status == "ended" and ended.ended_at is not None
    assert (ended.request_counts.succeeded, ended.request_counts.errored) == (2, 1)
    results = {r.custom_id: r.result for r in ant.messages.batches.results(batch.id)}
    assert results["a-1"].type == "succeeded" and results["a-1"].message.content[0].text == "Paris"
    assert [b.type for b in results["a-2"].message.content] == ["tool_use"]
    assert results["a-2"].message.stop_reason == "tool_use"
    assert results["a-bad"].type == "errored" and results["a-bad"].error.error.type == "overloaded_error"


def test_anthropic_sdk_cancel_and_expiry(sim, ant):
    import anthropic

    params = {"model": "sim", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    first = ant.messages.batches.create(requests=[{"custom_id": "x-1", "params": params}])
    assert ant.messages.batches.cancel(first.id).processing_status == "canceling"
    assert ant.messages.batches.retrieve(first.id).request_counts.canceled == 1
    assert [r.result.type for r in ant.messages.batches.results(first.id)] == ["canceled"]
    second = ant.messages.batches.create(requests=[{"custom_id": "y-1", "params": params}])
    sim.batches.end_batches(expire=True)
    assert ant.messages.batches.retrieve(second.id).request_counts.expired == 1
    assert [r.result.type for r in ant.messages.batches.results(second.id)] == ["expired"]
    with pytest.raises(anthropic.BadRequestError) as bad:
        ant.messages.batches.create(requests=[{"custom_id": "has space", "params": params}])
    assert "custom_id" in str(bad.value)


def test_a_window_shorter_than_the_delay_expires_the_rest(simulated_provider):
    import anthropic

    clock = [1000.0]
    sim = simulated_provider(batch_delay=30, batch_window=10, export=False)
    sim.batches.clock = lambda: clock[0]
    client = anthropic.Anthropic(base_url=sim.url[: -len("/v1")], api_key="k", max_retries=0)
    try:
        params = {"model": "sim", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
        batch = client.messages.batches.create(requests=[{"custom_id": f"r-{i}", "params": params}
                                                         for i in range(6)])
        clock[0] += 9
        assert client.messages.batches.retrieve(batch.id).processing_status == "in_progress"
        clock[0] += 1
        counts = client.messages.batches.retrieve(batch.id).request_counts
    finally:
        client.close()
    assert (counts.succeeded, counts.expired) == (2, 4)  # a third of the delay: a third answered


# -- our client on the same endpoints ---------------------------------------------------------------


def _requests(prefix: str, texts: list[str]):
    from evaljobs.providers.batches import BatchRequest

    return [BatchRequest(f"{prefix}-{i}", "sim", [{"role": "system", "content": "be brief"},
                                                 {"role": "user", "content": text}], max_tokens=50)
            for i, text in enumerate(texts)]


@pytest.mark.parametrize("wire", ["openai", "anthropic", "azure"])
def test_our_batch_client_submit_status_results(sim, wire):
    from evaljobs.providers import batches
    from evaljobs.network.errors import PermanentError, TransientError

    base = sim.url[: -len("/v1")] if wire == "azure" else sim.url
    with batches.BatchClient(base, api_key="k", wire=wire, api_version="2024-10-21") as client:
        submitted = client.submit(
            _requests(
                "p",
                [
                    "[sim: say Paris]",
                    '[sim: call search {"q": "x"}] [sim: say ok]',
                    "[sim: status 500 boom]",
                    "[sim: status 400 nope]",
                ],
            ),
            key="run1-b1",
        )
        assert submitted.state == batches.OPEN and submitted.total == 4
        assert client.status(submitted.id).state == batches.OPEN
        with pytest.raises(PermanentError):
            client.results(submitted.id)
        sim.batches.end_batches()
        ended = client.status(submitted.id)
        assert (ended.state, ended.total, ended.done, ended.failed) == (batches.ENDED, 4, 4, 2)
        items = {item.custom_id: item for item in client.results(submitted.id)}
    assert items["p-0"].outcome == batches.SUCCEEDED and items["p-0"].completion.content == "Paris"
    assert items["p-0"].completion.input_tokens > 0
    assert [c.name for c in items["p-1"].completion.tool_calls] == ["search"]
    assert items["p-1"].completion.finish_reason == "tool_calls"
    assert items["p-2"].outcome == batches.ERRORED and isinstance(items["p-2"].error, TransientError)
    assert "boom" in items["p-2"].reason
    assert items["p-3"].outcome == batches.ERRORED and isinstance(items["p-3"].error, PermanentError)
    assert sim.stats()["batches"]["submitted"] == {f"p-{i}": 1 for i in range(4)}


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_find_names_the_batch_a_crashed_submitter_created(sim, wire):
    """What recovery asks after a crash between the provider's answer and the commit of the batch id."""
    import time

    from evaljobs.providers import batches

    with batches.BatchClient(sim.url, api_key="k", wire=wire) as client:
        before = time.time()
        assert client.find("run2-b1", ["q-0", "q-1"], since=before) is None  # nothing submitted: submit
        other = client.submit(_requests("o", ["[sim: say a]", "[sim: say b]"]), key="run2-b0")
        mine = client.submit(_requests("q", ["[sim: say a]", "[sim: say b]"]), key="run2-b1")
        found = client.find("run2-b1", ["q-0", "q-1"], since=before)
        if wire == "openai":
            assert found == mine.id  # the key is in the batch's metadata
        else:
            assert found == batches.UNDECIDED  # Message Batches carry no metadata: told by their results
            sim.batches.end_batches()
            assert client.find("run2-b1", ["q-0", "q-1"], since=before) == mine.id
        assert other.id != mine.id
        cancelled = client.cancel(mine.id)
        assert cancelled.id == mine.id
    assert sim.stats()["batches"]["submitted"] == {"o-0": 1, "o-1": 1, "q-0": 1, "q-1": 1}


def test_expired_and_cancelled_requests_say_so(sim):
    from evaljobs.providers import batches

    with batches.BatchClient(sim.url, api_key="k", wire="openai") as client:
        first = client.submit(_requests("x", ["[sim: say a]"]), key="k1")
        client.cancel(first.id)
        assert [(i.outcome, i.reason.split(":")[0]) for i in client.results(first.id)] == [
            (batches.CANCELLED, "batch_cancelled")]
        second = client.submit(_requests("y", ["[sim: say a]"]), key="k2")
        sim.batches.end_batches(expire=True)
        assert [(i.outcome, i.reason.split(":")[0]) for i in client.results(second.id)] == [
            (batches.EXPIRED, "batch_expired")]
