"""Catalog regexes cannot hang a worker (issue 29 item 3), and keep ``re``'s verdicts.

Every catalog pattern is matched by :mod:`evaljobs.catalog.patterns` (the ``regex`` library in its
``re``-compatible mode, with a timeout): a pattern with nested repeats ends within the pair's
deadline as an ``errored`` pair naming the pattern; a pattern the engine would read differently
from ``re`` is refused at check time in one line; every other pattern gives ``re``'s verdict.
"""
from __future__ import annotations

import re
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaljobs import store
from evaljobs.api import Session
from evaljobs.catalog import CatalogError, loads_catalog, patterns
from evaljobs.catalog.importers.promptfoo_assertions import JSON_REGEX, _nowhere


def catalog(answer: str, pattern: str) -> str:
    return (f"name: regexes\nscenarios:\n  - key: nested\n    prompt: \"[sim: say {answer}]\"\n"
            f"    expect: {{regex: ['{pattern}']}}\n")


def run_in_thread(function, bound: float = 120.0):
    """Run ``function`` on a thread; fail (instead of hanging the suite) if it has not ended by ``bound``."""
    box: dict = {}

    def target():
        try:
            box["value"] = function()
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(bound)
    assert not thread.is_alive(), f"still running after {bound} s: the pattern hangs the worker"
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_nested_repeats_against_a_33_character_answer_end_within_the_pairs_deadline(sqlite_url,
                                                                                  simulated_provider):
    """The issue's case: ``^(a+)+$`` against 33 characters ran past 60 s under a 10 s limit in ``re``."""
    simulated_provider(latency=0.0)
    answer = "a" * 32 + "b"
    with Session(db=sqlite_url) as session:
        info = run_in_thread(
            lambda: session.submit(
                loads_catalog(catalog(answer, "^(a+)+$"), source="n.yaml"),
                ["sim/a"],
                strategy="sequential",
                time_limit=10,
            )
        )
    (result,) = store.list_results(info.id)
    assert result.output == answer
    assert result.status == "failed" and result.details["unmatched_regex"] == ["^(a+)+$"]  # re's verdict


def test_a_pattern_that_runs_past_the_deadline_errors_the_pair_naming_the_pattern(
    sqlite_url, simulated_provider
):
    """``^(a|aa)+$`` on 41 characters backtracks for hours in any backtracking engine: cut at the deadline."""
    simulated_provider(latency=0.0)
    with Session(db=sqlite_url) as session:
        info = run_in_thread(lambda: session.submit(
            loads_catalog(catalog("a" * 40 + "b", "^(a|aa)+$"), source="n.yaml"), ["sim/a"],
            strategy="sequential", time_limit=1.5))
    (result,) = store.list_results(info.id)
    assert result.status == "errored"
    assert result.error.startswith("timed out after 1.5 s") and "regex /^(a|aa)+$/ ran past" in result.error
    assert info.persisted == info.expected == 1 and info.status == "failed"  # ended: every pair errored


def test_without_a_deadline_one_match_is_bounded_by_max_match_seconds(monkeypatch):
    monkeypatch.setattr(patterns, "MAX_MATCH_SECONDS", 0.2)
    with pytest.raises(patterns.PatternTimeout, match=r"ran past 0.2 s on a 41-character answer"):
        run_in_thread(lambda: patterns.search("^(a|aa)+$", "a" * 40 + "b"))


def test_a_deadline_already_past_cuts_the_match_at_once():
    def past_deadline():
        with patterns.deadline_scope(time.monotonic() - 1):
            return patterns.search("^(a|aa)+$", "a" * 40 + "b")

    with pytest.raises(patterns.PatternTimeout, match="ran past 0.001 s"):
        run_in_thread(past_deadline)


# --------------------------------------------------------------------------- refused at check time, one line

@pytest.mark.parametrize("pattern, says", [
    ("[[:alpha:]]+", "is ambiguous (Possible nested set"),
    ("[a&&b]", "is ambiguous (Possible set intersection"),
    ("(unclosed", "does not compile"),
])
def test_a_pattern_the_engine_would_read_differently_is_one_catalog_line(cli, pattern, says, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(catalog("hi", pattern), encoding="utf-8")
    result = cli("catalog", "check", str(path))
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "c.yaml:5" in lines[0] and f"expect.regex {pattern!r} {says}" in lines[0], lines[0]
    with pytest.raises(CatalogError):
        loads_catalog(catalog("hi", pattern), source="c.yaml")


def test_a_promptfoo_regex_the_engine_refuses_is_refused_by_the_importer():
    from evaljobs.catalog.importers import promptfoo_assertions

    out: dict = {}
    with pytest.raises(promptfoo_assertions._BadValue, match=r"regex '\[\[:digit:\]\]' is ambiguous"):
        promptfoo_assertions._assertion(
            "regex", "[[:digit:]]", {"type": "regex", "value": "[[:digit:]]"}, out
        )
    assert out == {}


# --------------------------------------------------------------------------- same verdict as re

#: Patterns catalogs and the importers write: lookarounds (promptfoo's not-*), backreferences,
#: inline flags, anchors, Unicode classes, the JSON test — each read by re and by the engine.
PATTERNS = [
    r"order #\d+",
    r"^\s*yes\b",
    r"(?i)refund",
    r"(?i)\bKELVIN\b",
    r"\A\s*Hello",
    r"done\Z",
    r"done$",
    r"(\w+) \1",
    r"(?P<w>a|b)(?P=w)",
    r"(?<=\$)\d+(?:\.\d{2})?",
    r"(?<!not )allowed",
    r"colou?r",
    r"^(a+)+$",
    r"[^\x00-\x7f]",
    r"\bstraße\b",
    r"(?s)start.*end",
    r"(?m)^- item$",
    r"[\u00e9e]t\u00e9",
    r"\d{4}-\d{2}-\d{2}",
    r"(?x) a \s b  # spaced",
    r"a{2,3}?",
    r"(?:ab)*c",
    r"\W+",
    r"[.?!]$",
    _nowhere(r"(?i)forbidden"),
    _nowhere(re.escape("a.b")),
    JSON_REGEX,
    r"\A(?!\s*(?:\{[\s\S]*\}|\[[\s\S]*\])\s*\Z)",
]
TEXTS = [
    "",
    "order #123 shipped",
    "  yes, of course",
    "REFUND issued",
    "the \u212a KELVIN sign",
    "Hello there",
    "all done",
    "all done\n",
    "done \n",
    "the the end",
    "abba",
    "price $12.50",
    "not allowed",
    "allowed",
    "color colour",
    "aaaa",
    "aaaab",
    "caf\u00e9",
    "Stra\u00dfe straße",
    "start\nmiddle\nend",
    "- item\n- other",
    "\u00e9t\u00e9",
    "2026-12-01",
    "a b",
    "aab",
    "ababc",
    "!!",
    "Why?",
    "nothing forbidden here",
    "FORBIDDEN",
    "a.b",
    "axb",
    '{"a": 1}',
    " [1, 2] ",
    "not json",
    "\u0663\u0664",
    "\u00c9T\u00c9",
]


@pytest.fixture(params=["inline", "helper thread"])
def path(request, monkeypatch):
    """Both ways a match runs: inline, and (no inline budget at all) on a helper thread."""
    if request.param == "helper thread":
        monkeypatch.setattr(patterns, "INLINE_SECONDS", 1e-9)
    return request.param


@pytest.mark.parametrize("pattern", PATTERNS)
def test_the_engine_gives_re_s_verdict_on_every_pattern_both_accept(pattern, path):
    assert patterns.problem(pattern) is None
    for text in TEXTS:
        for flags in (0, re.IGNORECASE):
            expected = re.search(pattern, text, flags)
            assert patterns.search(pattern, text, flags) == (expected is not None), (pattern, text, flags)
            found = patterns.find(pattern, text, flags)  # what Inspect's pattern() grader reads: the groups
            assert (found and (found.group(0), found.groups())) == (expected and (expected.group(0),
                                                                                   expected.groups()))


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.sampled_from("abAB $.#1\n\u00e9\u00c9\u212a_-"), max_size=30),
       pattern=st.sampled_from(PATTERNS))
def test_the_engine_gives_re_s_verdict_on_any_text(text, pattern):
    for flags in (0, re.IGNORECASE):
        assert patterns.search(pattern, text, flags) == (re.search(pattern, text, flags) is not None)
