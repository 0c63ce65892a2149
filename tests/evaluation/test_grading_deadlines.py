"""Grading keeps the pair's time limit (issue 40, items 6-9), on the in-process broker too.

The answers of the issue, served byte for byte by the simulated provider, graded by a real
``evaljobs run`` process under a time limit: a 200,000-character answer against a
``levenshtein`` value, 100,000 quotes for ``rouge-n``, 100,000 ``{`` for ``contains-json`` and
JSON nested 200,000 deep for ``is-json`` each get their verdict (they ran past 60 s, or errored
``RecursionError``). A grader that cannot finish — Myers' algorithm on two 1,000,000-character
strings with no useful threshold, a JavaScript assertion that loops — is stopped at the pair's
deadline and the pair recorded ``errored``, ``timed out after 3 s (ELAPSED s elapsed; grading: …)``.
Each verdict is also checked against a reference (the full edit-distance table, Python's json) on
the inputs both can read.
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evaljobs import store
from evaljobs.evaluation import promptfoo_checks
from helpers.paths import CHILD_PYTHONPATH
from helpers import WorkerProcess

#: "Did not hang": far above the limits used here, far below a hang (the issue saw > 60 s a pair).
HANG = 120.0
LIMIT = 3.0
ELAPSED = re.compile(r"^timed out after 3 s \((\d+\.\d+) s elapsed; grading: ")


def evaljobs_run(catalog: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``python -m evaljobs run CATALOG -m sim/a ARGS`` in a real process on the in-process broker."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("EVALJOBS_")}
    full["PYTHONPATH"] = CHILD_PYTHONPATH
    full["EVALJOBS_DATABASE_URL"] = f"sqlite:///{catalog.parent}/evaljobs.db"
    full.update(env)
    return subprocess.run([sys.executable, "-m", "evaljobs", "run", str(catalog), "-m", "sim/a", *args],
                          env=full, cwd=catalog.parent, capture_output=True, text=True, timeout=HANG)


def scenario(key: str, answer: str, entry: dict) -> dict:
    """A scenario whose answer is exactly ``answer`` and graded by one assertion ``entry``."""
    return {"key": key, "prompt": "[sim: say " + json.dumps(answer) + "]",
            "expect": {"assertions": [{"kind": "promptfoo", **entry} if "kind" not in entry else entry]}}


def results(folder: Path) -> dict[str, store.Result]:
    store.connect(f"sqlite:///{folder}/evaljobs.db")
    (run,) = store.list_runs()
    return {r.scenario_key: r for r in store.list_results(run.id)}


def test_the_issues_answers_get_their_verdict_within_the_time_limit(tmp_path):
    rnd = random.Random(40)
    answer = "".join(rnd.choice("abcdefghij ") for _ in range(200_000))
    catalog = tmp_path / "graders.yaml"
    catalog.write_text(json.dumps({"name": "graders", "scenarios": [
        scenario("levenshtein", answer, {"type": "levenshtein", "value": "hello"}),
        scenario("levenshtein-close", answer, {"type": "levenshtein", "value": "x" + answer[1:-1] + "y"}),
        scenario("rouge", '"' * 100_000, {"type": "rouge-n", "value": "hello world"}),
        scenario("contains-json", "{" * 100_000, {"type": "contains-json"}),
        scenario("is-json", "[" * 200_000 + "]" * 200_000, {"type": "is-json"}),
        scenario("not-json", "[" * 200_000 + "]" * 199_999, {"type": "is-json"}),
    ]}))
    # 30 s, not the issue's 10: each takes about a second on a loaded machine (verified by hand under 10 s,
    # RELIABILITY.md); the margin keeps the test stable on a busier one. Without the fixes these ran for
    # minutes to hours (HANG ends the test).
    done = evaljobs_run(catalog, env={"EVALJOBS_TIME_LIMIT": "30"})
    assert "Traceback" not in done.stderr, done.stderr
    got = {key: (r.status, r.error) for key, r in results(tmp_path).items()}
    assert got == {"levenshtein": ("failed", None), "levenshtein-close": ("passed", None),
                   "rouge": ("failed", None), "contains-json": ("failed", None), "is-json": ("passed", None),
                   "not-json": ("failed", None)}, got


@pytest.mark.skipif(shutil.which("node") is None, reason="the JavaScript case needs Node.js on PATH")
@pytest.mark.parametrize("broker", ["memory", pytest.param("redis", marks=pytest.mark.redis)])
def test_a_grader_still_running_at_the_deadline_is_stopped_and_the_pair_errors_with_its_limit(
    broker, request, tmp_path, allow_code
):
    """On the in-process broker nothing else would stop it; on a Redis worker Dramatiq's time limit did,
    30 s late and with its own reason."""
    rnd = random.Random(41)
    long = "".join(rnd.choice("abcdefghij") for _ in range(1_000_000))
    catalog = tmp_path / "slow.yaml"
    catalog.write_text(json.dumps({"name": "slow", "scenarios": [
        scenario("levenshtein", long, {"type": "levenshtein", "value": "Q" + long[1:-1] + "Q",
                                       "threshold": 1e9}),
        scenario("javascript", "hello", {"kind": "javascript", "code": "while (true) {}\nreturn true"}),
    ]}))
    if broker == "memory":
        done = evaljobs_run(catalog, "--time-limit", str(LIMIT), "--allow-code", env={})
    else:
        redis_url = request.getfixturevalue("redis_url")
        database = f"sqlite:///{tmp_path}/evaljobs.db"
        with WorkerProcess(redis_url, database, threads=2, log=tmp_path / "worker.log"):
            done = evaljobs_run(catalog, "--time-limit", str(LIMIT), "--allow-code", "--broker", redis_url,
                                "--wait", env={})
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1, (done.stdout, done.stderr)  # every pair errored: exit 1, not a hang
    stored = results(tmp_path)
    assert sorted(stored) == ["javascript", "levenshtein"]
    for key, result in stored.items():
        assert result.status == "errored", (key, result.status, result.error)
        match = ELAPSED.match(result.error or "")
        assert match, result.error
        assert float(match.group(1)) >= LIMIT - 0.01, result.error  # the real time, not the limit restated
    assert "levenshtein was still running at the pair's deadline" in stored["levenshtein"].error
    assert "javascript" in stored["javascript"].error.lower()


def _table_distance(a: str, b: str) -> int:
    """The full edit-distance table over UTF-16 code units: the reference the fast paths must equal."""
    x, y = promptfoo_checks._code_units(a), promptfoo_checks._code_units(b)
    previous = list(range(len(y) + 1))
    for i, cx in enumerate(x, 1):
        current = [i]
        for j, cy in enumerate(y, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (cx != cy)))
        previous = current
    return previous[-1]


def test_banded_and_bit_parallel_distances_equal_the_full_table():
    rnd = random.Random(6)
    for _ in range(600):
        alphabet = rnd.choice(["ab", "abcdefgh", "a\U0001F600\u00e9b"])
        a = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 30)))
        b = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 30))) if rnd.random() < 0.5 else (
            a[:rnd.randint(0, len(a))] + rnd.choice(alphabet) + a[rnd.randint(0, len(a)):])
        exact = _table_distance(a, b)
        assert promptfoo_checks.levenshtein_distance(a, b) == exact, (a, b)
        for bound in range(8):
            got = promptfoo_checks.levenshtein_distance(a, b, bound)
            assert got == exact if exact <= bound else got > bound, (a, b, bound, got, exact)


def test_the_iterative_json_reader_agrees_with_pythons_json_where_both_read():
    rnd = random.Random(7)

    def value(depth: int = 0):
        pick = rnd.random()
        if depth > 4 or pick < 0.3:
            return rnd.choice([1, -2.5e10, "a\"\\\n\u00e9", True, None, 0, "", 10 ** 30])
        if pick < 0.65:
            return [value(depth + 1) for _ in range(rnd.randint(0, 3))]
        return {f"k{i}": value(depth + 1) for i in range(rnd.randint(0, 3))}

    for _ in range(3000):
        text = json.dumps(value(), indent=rnd.choice([None, 1]), ensure_ascii=rnd.random() < 0.5)
        if rnd.random() < 0.5:
            at = rnd.randrange(len(text) + 1)
            edit = rnd.choice(["", ",", "]", "}", '"', " ", ":", "x"])
            text = text[:at] + edit + text[at + rnd.randint(0, 2):]
        try:
            json.loads(text)
            expected = True
        except ValueError:
            expected = False
        assert promptfoo_checks._json_valid(text) is expected, text


def test_a_5000_digit_integer_is_json_as_javascript_reads_it():
    assert promptfoo_checks.is_json("1" * 5000, False)[0]


def test_candidates_nested_past_the_readers_depth_are_refused_without_reading_and_only_those():
    """The 3,000 nested objects of the issue: the 2,000 deepest candidates are answered from one pass over
    the brackets; every one so answered is one the YAML reader refuses."""
    import yaml

    from evaljobs.catalog import yaml12

    text = '{"ab":' * 3000 + "1" + "}" * 3000
    depths = promptfoo_checks._Depths(text)
    refused = [(start, stop) for start, stop, _ in promptfoo_checks._candidates(text)
               if depths.refused(start, stop)]
    assert len(refused) == 3000 - promptfoo_checks.YAML_MAX_DEPTH
    for start, stop in refused[::250] + refused[-1:]:
        with pytest.raises(yaml.YAMLError):
            yaml12.load(text[start:stop])
    # quotes that hide brackets from the reader are read as it reads them; a quote it reads otherwise
    # ('a:"' is a plain scalar) leaves the candidate to the reader
    assert promptfoo_checks._Depths('{"x{":' + "[" * 1001).refused(0, 6 + 1001)
    assert not promptfoo_checks._Depths('{a:"}' + "[" * 1001).refused(0, 5 + 1001)
    assert promptfoo_checks.contains_json(text, False)[0]
