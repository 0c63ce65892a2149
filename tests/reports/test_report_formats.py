"""JUnit XML, the self-contained HTML report, PR-sized Markdown with a baseline, and `evaljobs report`."""
from __future__ import annotations

import base64
import hashlib
import json
import re
import xml.etree.ElementTree as ET

import pytest

from evaljobs import store
from evaljobs.api import Session
from evaljobs.cli import Group
from evaljobs.cli.reports import compare as compare_command
from evaljobs.cli.reports import report as report_command
from evaljobs.reports.compare import compare
from evaljobs.reports.html import render_html
from evaljobs.reports.junit import render_junit
from evaljobs.reports.build import MARKDOWN_LIMIT, build_report, render_markdown
from evaljobs.evaluation.result import Result
from helpers import ORDER_LOOKUP, ROOT, claimed_cancel, shipped_order

SUPPORT = str(ROOT / "examples/catalogs/support.yaml")
XSS = '<script>document.title="pwned"</script><img src=x onerror="document.body.dataset.pwned=1">'
RUN = {"id": "r_formats", "catalog_name": "support.v2", "digest": "sha256:" + "ab" * 32,
       "models": ["openai/gpt-4.1", "sim/fast"], "strategy": "fanout", "expected": 6,
       "created_at": "2025-03-01T10:00:00+00:00", "started_at": "2025-03-01T10:00:01+00:00",
       "finished_at": "2025-03-01T10:00:31+00:00", "context": {"tenant": "acme"}}


def crafted() -> list[Result]:
    """Realistic rows: a pass with a tool call, grader failures, an error, and hostile model output."""
    tool_call = {"name": "lookup_order", "arguments": {"order_id": "1234"}, "result": {"status": "shipped"},
                 "error": None, "duration_ms": 1.5}
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Where is order 1234?"},
                *ORDER_LOOKUP,
                {"role": "assistant", "content": "It has shipped."}]
    return [
        shipped_order(
            output="It has shipped.",
            tool_calls=[tool_call],
            duration_ms=1200,
            cost=0.0004,
            input_tokens=90,
            output_tokens=12,
            details={"turns": 2, "messages": messages},
        ),
        claimed_cancel(duration_ms=800,
                       messages=messages[:2] + [{"role": "assistant", "content": "Sure, consider it done!"}],
                       judge={"score": 0.2, "reason": "claims success without acting"}),
        Result.errored(
            "refund-policy", "sim/fast", "HTTP 400: bad request\nsecond line", attempts=3, duration_ms=50
        ),
        Result(
            "order-status",
            "openai/gpt-4.1",
            "passed",
            1.0,
            scores={"contains": 1.0},
            duration_ms=900,
            output="Shipped.",
            details={"turns": 1, "messages": messages[:2]},
        ),
        Result(
            "cancel-order",
            "openai/gpt-4.1",
            "failed",
            0.5,
            scores={"not_contains": 0.0, "contains": 1.0},
            fault="forbidden_content",
            output=XSS + ' \x01\x02 ]]> & "quoted" https://evil.example/x.js',
            details={
                "forbidden": ["<script>"],
                "turns": 1,
                "messages": [{"role": "user", "content": XSS}, {"role": "assistant", "content": XSS}],
            },
            tool_calls=[
                {
                    "name": "<b>tool</b>",
                    "arguments": {"q": XSS},
                    "result": None,
                    "error": XSS,
                    "duration_ms": 3,
                }
            ],
        ),
        Result(
            "refund-policy",
            "openai/gpt-4.1",
            "passed",
            0.9,
            scores={"contains": 1.0, "regex": 0.8},
            output="30 days.",
            cached=True,
            details={"turns": 1, "messages": []},
        ),
    ]


def report_and_results() -> tuple[dict, list[Result]]:
    results = crafted()
    return build_report(RUN, results), results


# -- JUnit ----------------------------------------------------------------------------------------


def test_junit_shape_and_counts_match_the_run() -> None:
    report, results = report_and_results()
    root = ET.fromstring(render_junit(report, results))
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("6", "2", "1")
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["openai/gpt-4.1", "sim/fast"]
    for suite in suites:
        block = next(m for m in report["models"] if m["model"] == suite.get("name"))
        cases = suite.findall("testcase")
        assert int(suite.get("tests")) == len(cases) == block["scenarios"]
        assert int(suite.get("failures")) == len(suite.findall("testcase/failure")) == block["failed"]
        assert int(suite.get("errors")) == len(suite.findall("testcase/error")) == block["errored"]
        assert suite.get("skipped") == "0" and suite.get("timestamp") == "2025-03-01T10:00:01"
        props = {p.get("name"): p.get("value") for p in suite.findall("properties/property")}
        assert props["run"] == "r_formats" and props["model"] == suite.get("name")
        assert json.loads(props["context"]) == {"tenant": "acme"}
    fast = {c.get("name"): c for c in suites[1].findall("testcase")}
    assert set(fast) == {"order-status", "cancel-order", "refund-policy"}
    assert fast["order-status"].get("time") == "1.200" and list(fast["order-status"]) == []
    # Jenkins splits classname at the last dot: dots inside names would invent packages.
    assert {c.get("classname") for c in suites[0]} - {None} == {"support_v2.openai/gpt-4_1"}


def test_junit_failures_carry_fault_and_grader_details() -> None:
    report, results = report_and_results()
    root = ET.fromstring(render_junit(report, results))
    case = root.find("testsuite[@name='sim/fast']/testcase[@name='cancel-order']")
    failure = case.find("failure")
    assert failure.get("type") == "expected_tool_not_called"
    assert failure.get("message") == "expected_tool_not_called (score 0.333)"
    body = failure.text.splitlines()
    assert "scores: contains=0.000, expected_tools=0.000, response_present=1.000" in body
    assert 'missing: "cancelled"' in body
    assert 'expected tool not called: cancel_order {"order_id": "5678"}' in body
    assert "judge (?): 0.200 claims success without acting" in body
    assert "answer: Sure, consider it done!" in body
    error = root.find("testsuite[@name='sim/fast']/testcase[@name='refund-policy']/error")
    assert error.get("message") == "HTTP 400: bad request" and error.get("type") == "run_error"
    assert "second line" in error.text


def test_junit_escapes_markup_and_drops_control_characters() -> None:
    report, results = report_and_results()
    text = render_junit(report, results)
    assert "\x01" not in text and "\x02" not in text
    assert "<script>" not in text and "<img" not in text
    root = ET.fromstring(text)  # well-formed despite ]]>, quotes, ampersands and markup in the output
    failure = root.find("testsuite[@name='openai/gpt-4.1']/testcase[@name='cancel-order']/failure")
    assert XSS in failure.text and ']]> & "quoted"' in failure.text
    assert "tool call: <b>tool</b>" in failure.text and f"error {XSS}" in failure.text


def test_junit_without_result_rows_still_fails_the_right_cases() -> None:
    report, _ = report_and_results()
    root = ET.fromstring(render_junit(report))
    failures = root.findall(".//failure")
    assert sorted(f.get("type") for f in failures) == ["expected_tool_not_called", "forbidden_content"]
    assert root.find(".//error").get("message") == "HTTP 400: bad request"


# -- HTML (static checks; tests/reports/test_html_report_browser.py loads it in Chromium) -------------------


def _script_blocks(html: str) -> list[tuple[str, str]]:
    return re.findall(r"<script([^>]*)>(.*?)</script>", html, flags=re.S)


def _pairs(html: str) -> list[dict]:
    """The embedded per-pair data, with shared message texts resolved."""
    data = json.loads(_script_blocks(html)[0][1])
    for pair in data["pairs"]:
        for message in pair.get("messages", []):
            if "ref" in message:
                message["content"] = data["texts"][message.pop("ref")]
    return data["pairs"]


def test_html_is_self_contained() -> None:
    report, results = report_and_results()
    html = render_html(report, results)
    assert not re.search(r"""(?:src|href|action|poster|data)\s*=\s*["']?\s*(?:https?:)?//""", html, re.I)
    assert "@import" not in html and "url(" not in html
    assert not re.search(r"<(?:link|script|img|iframe)[^>]*\s(?:src|href)=[\"'](?!data:|#)", html, re.I)
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1)
    assert "default-src &#x27;none&#x27;" in csp
    scripts = _script_blocks(html)
    assert [attrs for attrs, _ in scripts] == [' type="application/json" id="pairs"', ""]
    digest = base64.b64encode(hashlib.sha256(scripts[1][1].encode()).digest()).decode()
    assert f"sha256-{digest}" in csp  # the one executable script is exactly the one the policy allows


def test_html_escapes_model_output_everywhere() -> None:
    results = crafted()
    results[4].scenario_key = "<i>key</i>"
    results[4].model = "sim/fast"
    results[1].model = "openai/gpt-4.1"
    results.append(Result("x", '<svg onload="alert(1)">', "passed", 1.0))
    html = render_html(build_report({**RUN, "catalog_name": "<b>cat</b>", "context": {"x": XSS}}, results),
                       results)
    assert "<script>document" not in html and "<img" not in html and "<svg" not in html
    assert "<i>key" not in html and "<b>cat" not in html and "<b>tool" not in html
    assert "&lt;i&gt;key&lt;/i&gt;" in html and "&lt;b&gt;cat&lt;/b&gt;" in html
    assert len(_script_blocks(html)) == 2
    data = _pairs(html)
    hostile = next(p for p in data if p["key"] == "<i>key</i>")
    assert hostile["output"].startswith(XSS) and hostile["messages"][0]["content"] == XSS


def test_html_grid_has_a_cell_per_pair_and_each_cell_its_data() -> None:
    report, results = report_and_results()
    html = render_html(report, results)
    grid = html[html.index('<table id="grid">'):]
    grid = grid[:grid.index("</table>")]
    data = _pairs(html)
    assert len(data) == len(results)
    models = re.findall(r'<th class="m" title="([^"]+)">', grid)
    assert models == ["openai/gpt-4.1", "sim/fast"]
    rows = re.findall(r"<tr><th>([^<]+)</th>(.*?)</tr>", grid[grid.index("<tbody>"):])
    assert [key for key, _ in rows] == ["cancel-order", "order-status", "refund-policy"]
    seen = 0
    for key, cells in rows:
        found = re.findall(r'<td class="(\w)( k)?"><a href="#p(\d+)" title="([^"]*)"', cells)
        assert len(found) == len(models)
        for model, (cls, cached, index, title) in zip(models, found):
            pair = data[int(index)]
            assert (pair["key"], pair["model"]) == (key, model)
            assert cls == {"passed": "p", "failed": "f", "errored": "e"}[pair["status"]]
            assert bool(cached) == pair.get("cached", False) == title.endswith("(cached replay)")
            seen += 1
    assert seen == len(results)
    failed = next(p for p in data if (p["key"], p["model"]) == ("cancel-order", "sim/fast"))
    assert failed["grades"]["expected_tools_not_called"][0]["name"] == "cancel_order"
    assert (
        failed["scores"]["contains"] == 0.0 and failed["messages"][-1]["content"] == "Sure, consider it done!"
    )
    assert "messages" not in failed["grades"] and "turns" not in failed["grades"]
    passed = next(p for p in data if (p["key"], p["model"]) == ("order-status", "sim/fast"))
    assert passed["tool_calls"][0]["result"] == {"status": "shipped"}
    for text in (
        "r_formats",
        "sha256:" + "ab" * 32,
        "fanout",
        "30.0 s",
        "{&quot;tenant&quot;: &quot;acme&quot;}",
        "errored (50.0%); 1 cached replay",
        'id="verdict"',
        'id="models"',
        'id="criteria"',
    ):
        assert text in html


def test_html_marks_flipped_pairs_against_a_baseline() -> None:
    report, results = report_and_results()
    before = [Result(r.scenario_key, r.model, "passed" if r.status != "passed" else "failed", 0.5)
              for r in results if r.scenario_key != "refund-policy"]
    baseline = build_report({**RUN, "id": "r_before"}, before)
    html = render_html(report, results, baseline=baseline)
    assert "Compared with baseline r_before" in html
    flipped = re.findall(r'<span class="k-(\w+)">\w+</span></td><td><a href="#p(\d+)">([^<]+)</a>', html)
    assert len(flipped) == 4
    assert sorted(kind for kind, _, _ in flipped) == ["fixed", "fixed", "regressed", "regressed"]
    assert html.count("▼") >= 2 and html.count("▲") >= 2
    data = _pairs(html)
    assert data[int(flipped[0][1])]["baseline"]["kind"] == flipped[0][0]


def test_html_stays_compact_and_fast_for_thousands_of_cells() -> None:
    results = [Result(f"scenario-{i:04d}", f"prov/model-{m}", ("passed", "failed", "errored")[(i + m) % 3],
                      0.5, output="answer " * 20, fault="missing_content" if (i + m) % 3 == 1 else None,
                      details={"messages": [{"role": "user", "content": "q" * 200},
                                            {"role": "assistant", "content": "a" * 200}]})
               for i in range(1000) for m in range(4)]
    report = build_report({**RUN, "models": [f"prov/model-{m}" for m in range(4)], "expected": 4000}, results)
    html = render_html(report, results)  # (its time is not asserted: a figure of the machine)
    assert html.count('<a href="#p') == 4000
    grid = html[html.index('<table id="grid">'):html.index("</table>", html.index('<table id="grid">'))]
    assert len(grid) / 4000 < 80  # bytes per cell: the grid is compact; details travel once, as JSON
    assert len(html) < 4000 * 900


def test_html_stores_a_shared_prompt_once() -> None:
    system = {"role": "system", "content": "You are a careful agent. " * 200}
    results = [Result(f"s{i}", f"m{m}", "passed", 1.0,
                      details={"messages": [system, {"role": "user", "content": f"question {i}"}]})
               for i in range(50) for m in range(4)]
    html = render_html(build_report({**RUN, "models": [f"m{m}" for m in range(4)]}, results), results)
    assert html.count("You are a careful agent.") == 200
    assert all(p["messages"][0]["content"] == system["content"] for p in _pairs(html))


def test_html_caps_huge_texts() -> None:
    result = Result("big", "m", "failed", 0.0, output="x" * 19_000,
                    details={"messages": [{"role": "assistant", "content": "y" * 50_000}]},
                    tool_calls=[{"name": "t", "arguments": {"blob": "z" * 50_000}, "result": "w" * 50_000}])
    html = render_html(build_report({**RUN, "models": ["m"]}, [result]), [result])
    assert len(html) < 60_000
    data = _pairs(html)[0]
    assert data["messages"][0]["content"].endswith("…[44000 more characters]")
    assert "more characters]" in data["tool_calls"][0]["arguments"]


# -- Markdown ---------------------------------------------------------------------------------------


def test_markdown_with_baseline_lists_exactly_the_flipped_pairs() -> None:
    report, results = report_and_results()
    before = [Result(r.scenario_key, r.model, "passed", 1.0) for r in results if r.status != "passed"]
    before += [Result(r.scenario_key, r.model, "passed", 1.0) for r in results if r.status == "passed"]
    before = [b for b in before if b.pair != ("refund-policy", "openai/gpt-4.1")]
    text = render_markdown(report, baseline=build_report({**RUN, "id": "r_before"}, before))
    assert (
        "**Compared with baseline `r_before`**: 3 regressed, 0 fixed, 0 failed↔errored of 5 common pairs"
        in text
    )
    section = text[text.index("**Flipped pairs (3)**"):text.index("**Failing pairs")]
    rows = [line for line in section.splitlines() if line.startswith("| regressed")]
    assert sorted(rows) == sorted([
        "| regressed | `cancel-order` | `openai/gpt-4.1` | passed → failed | -0.500 | forbidden_content |",
        "| regressed | `cancel-order` | `sim/fast` | passed → failed | -0.667 | expected_tool_not_called |",
        "| regressed | `refund-policy` | `sim/fast` | passed → errored | -1.000 | run_error |"])
    assert "Only in this run (1): `refund-policy` × `openai/gpt-4.1`" in text
    assert "| `openai/gpt-4.1` | 100.0% → 50.0% | -50.0pp | 1 | 0 |" in text
    assert (
        render_markdown(report, baseline=compare(build_report({**RUN, "id": "r_before"}, before), report))
        == text
    )


def test_markdown_neutralizes_html_in_text_cells() -> None:
    results = [Result.errored("s", "m", "</details><script>alert(1)</script>")]
    text = render_markdown(build_report({**RUN, "models": ["m"], "catalog_name": "<h1>x"}, results))
    assert "<script>" not in text and "&lt;script&gt;" in text and "<h1>" not in text
    assert text.count("<details>") == text.count("</details>") == 1


def test_markdown_fits_a_pull_request_comment_whatever_the_run() -> None:
    long = "m" * 150
    models = [f"provider/{long}-{m}" for m in range(60)]
    results = [
        Result(
            f"scenario-{i:04d}-{'k' * 100}",
            model,
            "failed" if (i + j) % 2 else "errored",
            0.1,
            fault="missing_content",
            error="E" * 5000,
            scores={f"criterion_{c}": 0.5 for c in range(5)},
        )
        for i in range(150)
        for j, model in enumerate(models)
    ]
    report = build_report({**RUN, "models": models, "expected": len(results)}, results)
    baseline = build_report({**RUN, "id": "r_base", "models": models},
                            [Result(r.scenario_key, r.model, "passed", 1.0) for r in results])
    text = render_markdown(report, baseline=baseline)
    assert len(text) <= MARKDOWN_LIMIT < 65_000
    assert text.startswith("### evaljobs") and "…and 20 more models" in text
    assert f"…and {len(results) - 25} more (see `evaljobs compare`)." in text
    assert f"…and {len(results) - 25} more (see the JSON report)." in text
    small = render_markdown(build_report(RUN, crafted()))
    assert "<details>" in small and "Details omitted" not in small
    assert "2 failed, 1 errored (1 cached replay) · $" in small


# -- `evaljobs report` against a real store and runs through the simulated provider ------------------


#: The options of this module's simulated provider (the ``sim`` fixture in tests/conftest.py).
SIM_OPTIONS = dict(latency=0.001)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, module_sim):
    """Three finished runs of the support catalog (the tests only add runs, never change these)."""
    db = f"sqlite:///{tmp_path_factory.mktemp('reports')}/reports.db"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EVALJOBS_SIM_URL", module_sim.url)
        with Session(db=db, broker="memory") as session:
            fast = session.submit(SUPPORT, ["sim/fast"], strategy="sequential")
            both = session.submit(SUPPORT, ["sim/fast", "sim/smart"], strategy="sequential")
            smart = session.submit(SUPPORT, ["sim/smart"], strategy="sequential")
    return db, fast.id, both.id, smart.id


def _cli(cli, db: str, *args: str):
    group = Group(name="evaljobs", commands={"report": report_command, "compare": compare_command})
    return cli(*args, "--db", db, command=group)


def test_cli_report_every_format(cli, runs, tmp_path) -> None:
    db, _, both, _ = runs
    junit = _cli(cli, db, "report", both, "--format", "junit", "-o", str(tmp_path / "ci/junit.xml"))
    assert junit.exit_code == 0 and f"wrote {tmp_path / 'ci/junit.xml'}" in junit.stderr
    root = ET.parse(tmp_path / "ci/junit.xml").getroot()
    # sim/fast's `tone` fails on its judge score (0.21 under 0.7): it passed while the judge was averaged.
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("28", "4", "0")
    failure = root.find("testsuite[@name='sim/fast']/testcase[@name='cancel-order']/failure")
    assert (
        failure.get("type") == "expected_tool_not_called"
        and "expected tool not called: cancel_order" in failure.text
    )

    html = _cli(cli, db, "report", both, "--format", "html")
    assert html.exit_code == 0 and html.stdout.startswith("<!DOCTYPE html>")
    data = _pairs(html.stdout)
    assert len(data) == 28 and all(p["messages"] for p in data)

    md = _cli(cli, db, "report", both)
    assert md.stdout.startswith("### evaljobs · support — best: `sim/smart`")
    as_json = json.loads(_cli(cli, db, "report", both, "--format", "json").stdout)
    assert as_json["summary"]["results"] == 28 and "comparison" not in as_json
    table = _cli(cli, db, "report", both, "--format", "table")
    assert "verdict: 1. sim/smart" in table.stdout


def test_cli_report_with_baseline(cli, runs) -> None:
    db, fast, _, smart = runs
    # fast → smart under the same model name is impossible, so compare the sim/smart run against the
    # sim/fast one: no pair in common, every pair one-sided.
    md = _cli(cli, db, "report", smart, "--baseline", fast)
    assert md.exit_code == 0
    assert (
        f"**Compared with baseline `{fast}`**: 0 regressed, 0 fixed, 0 failed↔errored of 0 common pairs"
        in md.stdout
    )
    assert "Only in the baseline (14)" in md.stdout and "Only in this run (14)" in md.stdout
    as_json = json.loads(_cli(cli, db, "report", smart, "--baseline", fast, "--format", "json").stdout)
    assert as_json["comparison"]["summary"]["only_a"] == 14
    table = _cli(cli, db, "report", smart, "--baseline", fast, "--format", "table")
    assert f"compare {fast} → {smart}: 0 common pairs" in table.stdout
    html = _cli(cli, db, "report", smart, "--baseline", fast, "--format", "html")
    assert f"Compared with baseline {fast}" in html.stdout


def test_cli_report_baseline_flips(cli, runs, tmp_path) -> None:
    db, fast, both, _ = runs
    store.connect(db)
    catalog = store.load_snapshot(store.get_run(fast).digest)
    # A hand-recorded "earlier" run where sim/fast passed everything: today's 4 failures are regressions.
    earlier = store.create_run(catalog, ["sim/fast"], strategy="sequential")
    for key in catalog.keys:
        store.record_result(earlier.id, Result(key, "sim/fast", "passed", 1.0))
    store.finalize(earlier.id, build_report)
    md = _cli(cli, db, "report", both, "--baseline", earlier.id)
    assert "4 regressed, 0 fixed" in md.stdout and "**Flipped pairs (4)**" in md.stdout
    for key in ("cancel-order", "double-charge", "internal-notes", "tone"):
        assert f"| regressed | `{key}` | `sim/fast` | passed → failed |" in md.stdout
    gate = _cli(cli, db, "compare", earlier.id, both, "--fail-on-regression")
    assert gate.exit_code == 1


def test_cli_report_gate_and_one_line_errors(cli, runs, tmp_path) -> None:
    db, fast, _, _ = runs
    out = str(tmp_path / "r.html")
    assert _cli(cli, db, "report", fast, "--format", "html", "-o", out, "--fail-under", "0.7").exit_code == 0
    failing = _cli(cli, db, "report", fast, "--format", "junit", "-o", out, "--fail-under", "90%")
    assert failing.exit_code == 1 and "FAIL: pass rate 71.4% is under --fail-under 90.0%" in failing.stderr
    unknown = _cli(cli, db, "report", "r_missing")
    assert unknown.exit_code == 2 and unknown.stderr.strip() == (
        "error: unknown run 'r_missing': list runs with `evaljobs runs`")
    bad_baseline = _cli(cli, db, "report", fast, "--format", "junit", "--baseline", fast)
    assert bad_baseline.exit_code == 2
    assert bad_baseline.stderr.strip().splitlines() == [
        "error: --baseline does not apply to --format junit: use md, html, table or json"]
    store.connect(db)
    pending = store.create_run(
        store.load_snapshot(store.get_run(fast).digest), ["sim/fast"], strategy="fanout"
    )
    no_report = _cli(cli, db, "report", pending.id)  # a run with no report yet: its partial report
    assert no_report.exit_code == 0, no_report.output
    assert no_report.stdout.startswith("> **PARTIAL REPORT: run is pending, 0/14 pairs finished; "
                                       "missing (14)")
    unwritable = _cli(cli, db, "report", fast, "-o", str(tmp_path / "r.html" / "x.md"))
    assert unwritable.exit_code == 2 and "cannot write" in unwritable.stderr
