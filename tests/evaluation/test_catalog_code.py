"""Code in catalogs runs only where the operator opted in, in a process that holds no secret (invariant 20).

An imported promptfoo config may carry ``python`` and ``javascript`` assertions: code its author wrote, run
on the worker of whoever evaluates it. Without ``--allow-code`` (``EVALJOBS_ALLOW_CODE``) it is refused in
one line — by ``catalog check``, by ``run`` before a run exists, and by a worker as the pair's error. With
it, the code runs in a child whose environment holds no secret and which sees no other process: a real
``evaljobs worker`` holding ``OPENAI_API_KEY`` and ``EVALJOBS_CONTEXT_KEY`` evaluates assertions that try
to read both — from their environment, through JavaScript's ``Object.constructor('return process')()``
escape of its ``vm`` context, and from every ``/proc/*/environ`` — and find neither.
"""
from __future__ import annotations

import json

import pytest

from evaljobs import store
from evaljobs.isolation import is_isolated
from helpers import WorkerProcess, evaljobs_cli, one_result_on

WORKER_KEY = "sk-worker-own-key-0123456789abcdef"
CONTEXT_KEY = "context-signing-key-0123456789abcdef-0123456789"

#: The assertions look for the secrets reversed in their text (so no secret is written in the catalog,
#: and a found one is said as "leaked=True", which no redaction of the stored reason can hide).
LEAKY = r"""
description: leak
prompts:
  - "[sim: say hello {{who}}]"
providers:
  - openai:gpt-4.1-mini
tests:
  - vars: {who: there}
    assert:
      - type: python
        value: |
          import glob, os
          wanted = [w[::-1] for w in ("REVERSED_KEY", "REVERSED_CONTEXT")]
          seen = [os.environ.get("OPENAI_API_KEY") or "", os.environ.get("EVALJOBS_CONTEXT_KEY") or ""]
          for path in glob.glob("/proc/*/environ"):
              try:
                  seen.append(open(path, "rb").read().decode("utf-8", "replace"))
              except OSError:
                  pass
          text = "\n".join(seen)
          leaked = any(w in text for w in wanted)
          names = ",".join(sorted(os.environ))
          return {"pass": False, "score": 0, "reason": f"ran python; leaked={leaked}; env={names}"}
      - type: javascript
        value: |
          const wanted = ['REVERSED_KEY', 'REVERSED_CONTEXT'].map(w => w.split('').reverse().join(''));
          const proc = Object.constructor('return process')();
          const fs = Object.constructor('return require')()('fs');
          const seen = [proc.env.OPENAI_API_KEY || '', proc.env.EVALJOBS_CONTEXT_KEY || ''];
          for (const pid of fs.readdirSync('/proc')) {
            if (/^[0-9]+$/.test(pid)) {
              try { seen.push(fs.readFileSync('/proc/' + pid + '/environ', 'latin1')); } catch (e) {}
            }
          }
          const text = seen.join('\n');
          const leaked = wanted.some(w => text.includes(w));
          const names = Object.keys(proc.env).sort().join(',');
          return {pass: false, score: 0, reason: 'ran javascript; escaped=' + (typeof proc.pid) +
                  '; leaked=' + (leaked ? 'True' : 'False') + '; env=' + names};
""".replace("REVERSED_KEY", WORKER_KEY[::-1]).replace("REVERSED_CONTEXT", CONTEXT_KEY[::-1])


def _config(tmp_path):
    path = tmp_path / "promptfooconfig.yaml"
    path.write_text(LEAKY)
    return path


def _lines(text: str) -> list[str]:
    """The error lines of a command's stderr (the importer's warnings aside)."""
    return [line for line in text.splitlines() if not line.startswith("warning:") and line.strip()]


def test_without_opt_in_catalog_code_is_refused_in_one_line(tmp_path, sqlite_url):
    config = _config(tmp_path)
    checked = evaljobs_cli("catalog", "check", str(config), env={"EVALJOBS_ALLOW_CODE": ""})
    assert checked.returncode != 0
    (line,) = _lines(checked.stderr)
    assert str(config) in line and "python assertion" in line and "--allow-code" in line, line
    ran = evaljobs_cli("run", str(config), "-m", "sim/m", "--broker", "memory", "--db", sqlite_url,
                       env={"EVALJOBS_ALLOW_CODE": ""})
    assert ran.returncode != 0
    (line,) = _lines(ran.stderr)
    assert "--allow-code" in line, line
    store.connect(sqlite_url)
    assert store.list_runs() == []  # refused before a run exists
    allowed = evaljobs_cli("catalog", "check", str(config), "--allow-code", env={"EVALJOBS_ALLOW_CODE": ""})
    assert allowed.returncode == 0, allowed.stderr


def _submit(tmp_path, redis_url, sqlite_url, worker_args: list[str]):
    """``run --allow-code`` (the submitter opted in) of the leaky config, evaluated by a worker started
    with ``worker_args`` that holds its own key and the signing key; the run's one result."""
    config = _config(tmp_path)
    env = {"OPENAI_API_KEY": WORKER_KEY, "EVALJOBS_CONTEXT_KEY": CONTEXT_KEY, "EVALJOBS_ALLOW_CODE": "",
           "EVALJOBS_GOVERNOR": "off"}
    worker = WorkerProcess(redis_url, sqlite_url, threads=2, env=env)
    worker.args += worker_args
    return one_result_on(worker, sqlite_url, str(config), "-m", "sim/m", "--allow-code",
                         "--broker", redis_url, env=env)


@pytest.mark.redis
def test_a_worker_without_opt_in_errors_the_pair_in_one_line(tmp_path, redis_url, sqlite_url):
    result = _submit(tmp_path, redis_url, sqlite_url, [])
    assert result.status == "errored"
    details = json.loads(result.details) if isinstance(result.details, str) else result.details
    (reason,) = details["not_gradable"]
    assert "\n" not in reason and "--allow-code" in reason and "python assertion" in reason, reason
    assert "ran python" not in json.dumps(details)  # refused, not run


@pytest.mark.redis
def test_catalog_code_cannot_read_the_workers_secrets(tmp_path, redis_url, sqlite_url):
    assert is_isolated()  # this machine allows unprivileged user namespaces (see docs/security.md)
    result = _submit(tmp_path, redis_url, sqlite_url, ["--allow-code"])
    details = json.loads(result.details) if isinstance(result.details, str) else result.details
    reasons = {o["assertion"].rsplit("(", 1)[-1].rstrip(")"): o["reason"] for o in details["assertions"]}
    python, javascript = reasons["python"], reasons["javascript"]
    assert python.startswith("ran python; leaked=False; env="), python
    assert javascript.startswith("ran javascript; escaped=number; leaked=False; env="), javascript
    for reason in (python, javascript):  # an environment of basics: no key under any name
        names = reason.rsplit("env=", 1)[1].split(",")
        assert "PATH" in names and not [n for n in names if any(w in n for w in ("KEY", "TOKEN", "SECRET"))]
        assert not [n for n in names if n.startswith("EVALJOBS_")], names
