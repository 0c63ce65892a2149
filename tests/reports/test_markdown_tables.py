"""Markdown reports render as GitHub renders them: every table parses as one table under its own header.

markdown-it-py (CommonMark plus GFM tables, the rules of a pull-request comment) parses the Markdown
report of real runs on the simulated provider — a judged catalog, a catalog run with epochs, the
``init`` starter, a run against a baseline — and of crafted reports (errors full of pipes and newlines,
one too long for a comment). For each delimiter row (``|---|``) in the text there must be exactly one
parsed table whose header is the line above it: a table glued to the one before it (no blank line)
would parse as rows of that table, its header lost.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import ROOT
from markdown_it import MarkdownIt

from evaljobs.api import Session
from evaljobs.starter import init_project
from evaljobs.evaluation.result import Result
from evaljobs.reports.build import MARKDOWN_LIMIT, build_report, render_markdown

_DELIMITER = re.compile(r"^\|(\s*:?-+:?\s*\|)+\s*$")
_PARSER = MarkdownIt("commonmark").enable("table")


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", row.strip().strip("|"))]


def parsed_tables(text: str) -> list[tuple[list[str], int]]:
    """(header cells as inline source, body rows) of every table markdown-it finds."""
    tokens = _PARSER.parse(text)
    tables, header, rows, where = [], [], 0, None
    for token in tokens:
        if token.type == "table_open":
            header, rows = [], 0
        elif token.type in ("thead_open", "tbody_open"):
            where = token.type
        elif token.type == "inline" and where == "thead_open":
            header.append(token.content.strip())
        elif token.type == "tr_open" and where == "tbody_open":
            rows += 1
        elif token.type == "table_close":
            tables.append((header, rows))
            where = None
    return tables


def assert_tables_render(text: str) -> int:
    """Every delimiter row of ``text`` starts one parsed table whose header is the row above it."""
    lines = text.splitlines()
    expected = [_cells(lines[i - 1]) for i, line in enumerate(lines) if i and _DELIMITER.match(line)]
    found = parsed_tables(text)
    assert [header for header, _ in found] == expected, text
    return len(found)




def _run(session: Session, catalog: Path, models: list[str], **options) -> str:
    return session.wait(
        session.submit(str(catalog), models, strategy="sequential", **options).id, timeout=300
    ).id


def test_the_judge_table_and_the_criteria_table_are_two_tables(session) -> None:
    run = _run(session, ROOT / "examples" / "catalogs" / "support.yaml", ["sim/fast", "sim/smart"])
    text = session.report(run, "md")
    assert "**Judge**" in text and "| Criterion | Model |" in text
    assert assert_tables_render(text) >= 4  # models, failing pairs, judge, criteria, tokens
    headers = [header[0] for header, _ in parsed_tables(text)]
    assert "Criterion" in headers and "Scenario" in headers


def test_epochs_baseline_and_starter_reports_parse_table_by_table(session, tmp_path) -> None:
    variance = ROOT / "examples" / "catalogs" / "variance.yaml"
    first = _run(session, variance, ["sim/fast", "sim/smart"], epochs=3)
    second = _run(session, variance, ["sim/fast", "sim/smart"], epochs=3)
    with_epochs = session.report(second, "md")
    assert "**Epochs: 3 per pair**" in with_epochs
    assert_tables_render(with_epochs)
    against = session.report(second, "md", baseline=first)
    assert "Compared with baseline" in against
    assert_tables_render(against)
    init_project(tmp_path / "starter")
    starter = _run(session, tmp_path / "starter" / "catalog.yaml", ["sim/fast", "sim/smart"])
    assert assert_tables_render(session.report(starter, "md")) >= 4


RUN = {"id": "r_0123456789ab", "catalog_name": "support | pipes", "digest": "f" * 64, "models": ["a", "b|c"],
       "strategy": "fanout", "created_at": "2025-01-01T00:00:00+00:00",
       "finished_at": "2025-01-01T00:01:00+00:00", "expected": 4}


def _result(key: str, model: str, status: str, **extra) -> Result:
    return Result(scenario_key=key, model=model, status=status, score=1.0 if status == "passed" else 0.0,
                  duration_ms=10, cost=0.001, input_tokens=3, output_tokens=2, **extra)


def test_crafted_reports_keep_their_tables_whole() -> None:
    judge = {
        "model": "sim/judge",
        "score": 0.2,
        "reason": "said | nothing\nat all",
        "raw": '{"score": | 0.2}',
    }
    results = [
        _result("s|1", "a", "passed", scores={"contains": 1.0, "judge": 1.0}),
        _result(
            "s2",
            "a",
            "failed",
            fault="wrong_tool",
            error="a | b\n| c |",
            details={"judge": judge},
            scores={"contains": 0.0, "judge": 0.2},
        ),
        _result("s|1", "b|c", "errored", fault="run_error", error="---|---\n|x|"),
        _result("s2", "b|c", "passed", scores={"contains": 1.0}),
    ]
    report = build_report(RUN, results)
    text = render_markdown(report, baseline=build_report({**RUN, "id": "r_before"}, results[:2]))
    assert assert_tables_render(text) >= 5
    many = [_result(f"s{i:04d}", "a", "failed", fault="wrong_tool", error="x" * 300,
                    details={"judge": {**judge, "reason": "y" * 300}}, scores={"judge": 0.1})
            for i in range(400)]
    long = render_markdown(build_report({**RUN, "models": ["a"], "expected": 400}, many))
    assert len(long) <= MARKDOWN_LIMIT
    assert_tables_render(long)


def test_the_check_itself_catches_a_table_glued_to_the_one_before() -> None:
    glued = "| A | B |\n|---|---|\n| 1 | 2 |\n| C | D |\n|---|---|\n| 3 | 4 |\n"
    with pytest.raises(AssertionError):
        assert_tables_render(glued)
    assert assert_tables_render(glued.replace("| 2 |\n| C", "| 2 |\n\n| C")) == 2
