"""A worker's secrets are its own (invariant 20): a run's stored providers definition may name base URLs
and variables, but a worker sends a key only to a base URL its operator allowed and reads only the
variables it allows; anything else errors the pair in one line, before any request.

A real ``evaljobs worker`` process on real Redis evaluates runs submitted by ``evaljobs run --providers
FILE`` (another process, the submitter). "Anywhere" — where a hostile submitter wants the worker's key —
is a small HTTP server in this test that counts what it receives and answers like an OpenAI-compatible
API: it must receive nothing unless the worker's operator allowed it.
"""
from __future__ import annotations

import json

import pytest

from helpers import RecordingServer, WorkerProcess, evaljobs_cli, one_result_on

pytestmark = [pytest.mark.redis]

CATALOG = 'name: leak\nscenarios:\n  - key: hello\n    prompt: "say hello"\n    expect: {contains: [hello]}\n'
WORKER_KEY = "sk-worker-own-key-0123456789abcdef"
WORKER_AWS = "worker-aws-secret-0123456789abcdef"


#: What "anywhere" answers every request with: an OpenAI chat completion saying "hello".
ANSWER = json.dumps({"id": "x", "object": "chat.completion", "model": "m",
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": "hello"}}],
                     "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()


@pytest.fixture
def anywhere():
    """An OpenAI-compatible endpoint that records the headers of every request it is sent."""
    with RecordingServer(ANSWER, "/v1") as server:
        yield server


def _submit(tmp_path, redis_url, sqlite_url, providers_text: str, model: str, *, worker_args=(),
            worker_env=None, run_args=()):
    """``evaljobs run --providers FILE --wait`` by a submitter whose own variables are set (so its pre-flight
    passes), on a worker that holds its own keys and has no providers file; the run's one result."""
    providers = tmp_path / "providers.yaml"
    providers.write_text(providers_text)
    catalog = tmp_path / "leak.yaml"
    catalog.write_text(CATALOG)
    env = {"OPENAI_API_KEY": WORKER_KEY, "AWS_SECRET_ACCESS_KEY": WORKER_AWS, "EVALJOBS_PROVIDERS": "",
           "EVALJOBS_MAX_RETRIES": "0", **(worker_env or {})}  # the governor on: its prefetch path too
    worker = WorkerProcess(redis_url, sqlite_url, threads=2, env=env, log=tmp_path / "worker.log")
    worker.args += list(worker_args)
    submitter = {"OPENAI_API_KEY": "sk-submitter-key-0000000000", "AWS_SECRET_ACCESS_KEY": "submitter-aws-00",
                 "ACME_TEAM_TOKEN": "submitter-team-0000", "EVALJOBS_PROVIDERS": ""}
    return one_result_on(worker, sqlite_url, str(catalog), "-m", model, *run_args,
                         "--providers", str(providers), "--broker", redis_url, env=submitter)


@pytest.mark.parametrize("entry, model, said, run_args", [
    # the preset's OPENAI_API_KEY kept, the base URL the submitter's
    ("openai: {base_url: URL}", "openai/gpt-4o-mini", "would send this worker's OPENAI_API_KEY to URL", ()),
    # the batch lane: no batch is created there either
    ("openai: {base_url: URL}", "openai/gpt-4o-mini", "would send this worker's OPENAI_API_KEY to URL",
     ("--batch",)),
    # a variable the worker's operator never named for a provider
    ("acme: {api: openai, base_url: URL, api_key_env: AWS_SECRET_ACCESS_KEY}", "acme/m",
     "reads AWS_SECRET_ACCESS_KEY", ()),
    ("acme: {api: openai, base_url: URL, headers: {X-Leak: '${AWS_SECRET_ACCESS_KEY}'}}", "acme/m",
     "reads AWS_SECRET_ACCESS_KEY", ()),
    # an allowed variable, sent somewhere the operator did not allow
    ("acme: {api: openai, base_url: URL, api_key_env: OPENAI_API_KEY}", "acme/m",
     "would send this worker's OPENAI_API_KEY to URL", ()),
])
def test_a_stored_definition_cannot_send_a_workers_secret_anywhere(tmp_path, redis_url, sqlite_url, anywhere,
                                                                   entry, model, said, run_args):
    result = _submit(tmp_path, redis_url, sqlite_url,
                     "providers:\n  " + entry.replace("URL", anywhere.url) + "\n", model, run_args=run_args)
    assert anywhere.seen == []  # not one request: nothing of the worker's was sent, nor anything else
    assert result.status == "errored"
    error = result.error or ""
    assert "\n" not in error and said.replace("URL", anywhere.url) in error, error
    assert WORKER_KEY not in error and WORKER_AWS not in error
    log = (tmp_path / "worker.log").read_text()
    # said to the operator too, once (not per pair)
    assert log.count("not all honoured here") == 1 and error.split(": ", 1)[-1] in log


def test_an_endpoint_the_operator_allowed_gets_the_workers_key(tmp_path, redis_url, sqlite_url, anywhere):
    """The legitimate case: the worker's operator allowed the endpoint (``--allow-endpoint``): the run works,
    with the worker's key (its own, not the submitter's)."""
    result = _submit(tmp_path, redis_url, sqlite_url, f"providers:\n  openai: {{base_url: {anywhere.url}}}\n",
                     "openai/gpt-4o-mini", worker_args=["--allow-endpoint", anywhere.url])
    assert result.status == "passed", result.error
    assert anywhere.seen
    assert all(h.get("authorization") == f"Bearer {WORKER_KEY}" for h in anywhere.seen)


def test_a_variable_the_operator_allowed_is_read(tmp_path, redis_url, sqlite_url, anywhere):
    """``EVALJOBS_ALLOWED_ENV`` and ``EVALJOBS_ALLOWED_BASE_URLS`` (the settings behind the flags)."""
    result = _submit(tmp_path, redis_url, sqlite_url,
                     f"providers:\n  acme: {{api: openai, base_url: {anywhere.url}, "
                     "headers: {X-Team: '${ACME_TEAM_TOKEN}'}}\n", "acme/m",
                     worker_env={"ACME_TEAM_TOKEN": "team-token-0123456789",
                                 "EVALJOBS_ALLOWED_ENV": "ACME_TEAM_TOKEN",
                                 "EVALJOBS_ALLOWED_BASE_URLS": anywhere.url.rsplit("/v1", 1)[0]})
    assert result.status == "passed", result.error
    assert [h.get("x-team") for h in anywhere.seen] == ["team-token-0123456789"]


@pytest.mark.parametrize("url, allowed", [
    ("https://gw.example/v1", True),
    ("https://GW.example:443/v1/", True),  # the same root, written otherwise
    ("https://gw.example/v1/deployments/x", True),  # below the allowed path
    ("https://gw.example@evil.example/v1", False),  # user info, another host
    ("https://gw.example.evil.example/v1", False),
    ("http://gw.example/v1", False),  # another scheme
    ("https://gw.example:8443/v1", False),  # another port
    ("https://gw.example/v10", False),  # not below /v1: a path segment, not a prefix of text
    ("file:///etc/passwd", False),
])
def test_a_base_url_is_allowed_only_at_or_below_an_allowed_root(url, allowed):
    from evaljobs.catalog.allowance import Allowance

    assert Allowance.of([], ["https://gw.example/v1"]).sends("OPENAI_API_KEY", url) is allowed


@pytest.mark.parametrize("name, url, allowed", [
    ("OPENAI_API_KEY", "https://api.openai.com/v1", True),  # where the preset sends it
    ("ANTHROPIC_API_KEY", "https://api.anthropic.com/v1", True),
    ("ANTHROPIC_API_KEY", "https://api.openai.com/v1", False),  # another provider's URL: not its key's
    ("OPENAI_API_KEY", "https://api.groq.com/openai/v1", False),
    ("ACME_TOKEN", "https://api.openai.com/v1", True),  # EVALJOBS_ALLOWED_ENV: any of the own URLs
    ("ACME_TOKEN", "https://acme.example/v1", False),
    ("OPENAI_API_KEY", "https://llm.internal/v1/chat", True),  # EVALJOBS_ALLOWED_BASE_URLS: any variable
])
def test_a_workers_key_goes_only_where_its_own_providers_send_it(name, url, allowed):
    from evaljobs.catalog.modelspec import providers_from_definition

    own = providers_from_definition(None, "<built-in>")
    allowance = own.allowance(("https://llm.internal/v1",), ("ACME_TOKEN",))
    assert allowance.sends(name, url) is allowed


@pytest.mark.parametrize("args, said", [
    (["--allow-endpoint", "ftp://files.example/v1"], "EVALJOBS_ALLOWED_BASE_URLS: 'ftp://files.example/v1'"),
    (["--allow-endpoint", "https://bob:pw@llm.example/v1"], "no password in it"),
    (["--allow-env", "NOT-A-NAME"], "EVALJOBS_ALLOWED_ENV: 'NOT-A-NAME' is not an environment variable"),
])
def test_an_unusable_allowance_stops_the_worker_in_one_line(args, said):
    done = evaljobs_cli("worker", "--broker", "redis://127.0.0.1:9/0", *args)
    assert done.returncode != 0
    assert done.stderr.count("\n") == 1 and said in done.stderr, done.stderr
