"""Hostile edges (issue 16): what a hostile user or network does at the edges, against real parts.

Each test here is a row of RELIABILITY.md's "Hostile edges" table.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from evaljobs import config
from evaljobs.errors import ConfigurationError
from workers import ROOT, WorkerProcess, wait_until

GOOD_KEY = "k" * 32
CATALOG = """
name: edges
scenarios:
  - key: hello
    prompt: "[sim: say hi]"
    expect: {contains: [hi]}
"""


def evaljobs(*args: str, env: dict[str, str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m evaljobs ARGS`` in a real process (settings are read there, from ``env``)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("EVALJOBS_")}
    full["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), str(ROOT)])
    full.update(env)
    return subprocess.run([sys.executable, "-m", "evaljobs", *args], env=full, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


# -- 2. context signing fails closed ---------------------------------------------------------------

@pytest.mark.parametrize("key, what", [("", "set but empty"), ("   ", "set but empty"),
                                       ("short-key", "9 bytes"), ("k" * 31, "31 bytes")])
def test_an_empty_or_short_context_key_is_refused_not_taken_for_unsigned(key, what):
    with pytest.raises(ConfigurationError) as caught:
        config.Settings.from_env({"EVALJOBS_CONTEXT_KEY": key})
    message = str(caught.value)
    assert "\n" not in message and f"EVALJOBS_CONTEXT_KEY is {what}" in message
    assert "unset the variable to run unsigned" in message
    assert key.strip() == "" or key not in message  # the (short) secret itself is never echoed


def test_only_an_unset_key_means_unsigned():
    assert config.Settings.from_env({}).context_key is None
    assert config.Settings.from_env({}).signing == "unsigned"
    assert config.Settings.from_env({"EVALJOBS_CONTEXT_KEY": GOOD_KEY}).signing == "signed"
    with pytest.raises(ConfigurationError):
        config.Settings().replace(context_key="")  # a flag or a file cannot sneak one in either


@pytest.mark.redis
@pytest.mark.parametrize("key", ["", "too-short"])
def test_worker_and_submit_refuse_to_start_with_a_bad_key(key, redis_url, tmp_path):
    db = f"sqlite:///{tmp_path}/evaljobs.db"
    (tmp_path / "c.yaml").write_text(CATALOG)
    env = {"EVALJOBS_CONTEXT_KEY": key, "EVALJOBS_DATABASE_URL": db}
    worker = evaljobs("worker", "--broker", redis_url, "--threads", "1", env=env, cwd=tmp_path)
    submit = evaljobs("run", "c.yaml", "-m", "sim/a", "--broker", redis_url, "--no-wait", env=env, cwd=tmp_path)
    local = evaljobs("run", "c.yaml", "-m", "sim/a", env=env, cwd=tmp_path)
    for done in (worker, submit, local):
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2, (done.args, done.stdout, done.stderr)
        assert len(lines) == 1 and lines[0].startswith("error: EVALJOBS_CONTEXT_KEY is "), done.stderr
        assert "Traceback" not in done.stdout + done.stderr
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        assert client.keys("*") == []  # nothing was enqueued
    finally:
        client.close()


@pytest.mark.redis
@pytest.mark.parametrize("key, line", [
    (None, "Context signing off (no signing key)"),
    (GOOD_KEY, "Context signing on: a context without a valid signature is dead-lettered"),
])
def test_a_worker_logs_once_at_start_which_signing_mode_it_is_in(key, line, redis_url, tmp_path):
    log = tmp_path / "worker.log"
    env = {"EVALJOBS_CONTEXT_KEY": key} if key else {}
    worker = WorkerProcess(redis_url, f"sqlite:///{tmp_path}/evaljobs.db", threads=1, env=env, log=log)
    if key is None:
        worker.env.pop("EVALJOBS_CONTEXT_KEY", None)
    with worker:
        assert wait_until(lambda: "Worker process is ready" in log.read_text(errors="replace"), 60), \
            log.read_text(errors="replace")
    text = log.read_text(errors="replace")
    assert text.count("Context signing ") == 1, text
    assert line in text, text
