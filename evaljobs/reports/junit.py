"""JUnit XML for CI systems (Jenkins, GitLab, GitHub Actions reporters), so failures show natively.

Shape: ``<testsuites>`` → one ``<testsuite>`` per model → one ``<testcase>`` per
scenario. A failed pair carries ``<failure message=fault type=fault>`` with the
grader's details (scores per criterion, missing or forbidden strings, expected
tools not called, the judge's reason, the answer); an errored pair carries
``<error>``. ``classname`` is ``catalog.model`` with the dots inside the model
replaced by ``_``, because Jenkins reads the last dot as the package/class
split; the exact model spec is the suite's name and a property.

With epochs (``--epochs N``) there is still one ``<testcase>`` per scenario: it fails
when the scenario's epoch pass rate is under its pass threshold, and the failure body
(or ``<system-out>`` when it passed) lists every epoch's result and the statistics.

A partial report (a run that did not finish: cancelled, interrupted, still running) says so the way CI
systems show: each ``<testsuite>`` carries the property ``partial`` (the run's state, what finished and
the command that resumes it), the ``<testsuites>`` name ends ``(partial: N/M pairs)``, and each
scenario × model with no result yet is a ``<testcase>`` with
``<error type="not_finished" message="not finished: …">`` — an error, not a skip: reporters show skipped
tests as neutral, and a run that did not finish must not read as green. With epochs, a scenario whose
epochs are only partly in keeps its test case with the property ``missing_epochs``.

Domain code: no Dramatiq, peewee or httpx. ElementTree does the XML escaping;
characters XML 1.0 cannot carry at all (most C0 controls, lone surrogates) are
dropped first.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import datetime
from typing import Any, Iterable

from evaljobs.evaluation.graders import as_json as _json
from evaljobs.evaluation.graders import graders
from evaljobs.evaluation.result import ERRORED, FAILED, Result
from evaljobs.reports._format import cost_line, pct
from evaljobs.reports.caching import cache_note
from evaljobs.reports.judged import decided
from evaljobs.reports.variance import pair_line

_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
#: Longest answer, argument or result text copied into a failure body.
TEXT_CAP = 2000
_MESSAGE_CAP = 300


def clean(text: Any) -> str:
    """Text XML 1.0 can carry: control characters (except tab, newline, CR) removed."""
    return _INVALID_XML.sub("", "" if text is None else str(text))


def _clip(text: str, limit: int = TEXT_CAP) -> str:
    return text if len(text) <= limit else text[:limit] + f"…[{len(text) - limit} more characters]"


def grade_lines(result: Result) -> list[str]:
    """The grader's account of one pair, one fact per line (also useful in logs)."""
    lines = [f"status: {result.status}  score: {result.score:.3f}  fault: {result.fault or '-'}"]
    if result.error:
        lines.append(f"error: {result.error}")
    if result.scores:
        scores = sorted(result.scores.items())
        lines.append("scores: " + ", ".join(f"{name}={value:.3f}" for name, value in scores))
    details = result.details or {}
    for grader in graders():  # each criterion says what its details tell of the answer
        lines.extend(grader.explain(details))
    if details.get("failed_gates"):
        lines.append("failed gates: " + ", ".join(details["failed_gates"]))
    if isinstance(details.get("weighted"), dict):  # a promptfoo test graded by weight
        lines.append(f"weighted assertions: {details['weighted'].get('reason')}")
    for name, quote in (
        (details.get("diagnosis") or {}).items() if isinstance(details.get("diagnosis"), dict) else []
    ):
        lines.append(f"{name.replace('_', ' ')}: {quote}")
    for reason in details.get("not_gradable") or []:
        lines.append(f"not gradable: {reason}")
    judge = details.get("judge")
    if isinstance(judge, dict):
        score = "-" if judge.get("score") is None else f"{float(judge['score']):.3f}"
        reason = judge.get("reason") or ""
        lines.append(f"judge ({judge.get('model') or '?'}): {score}{decided(judge)} {reason}".rstrip())
        if judge.get("raw"):
            lines.append(f"judge answer: {judge['raw']}")
        if judge.get("prompt"):
            lines.append(f"judge prompt: {judge['prompt']}")
    elif judge:
        lines.append(f"judge: {judge}")
    for call in result.tool_calls or []:
        outcome = f"error {call.get('error')}" if call.get("error") else _clip(_json(call.get("result")), 300)
        arguments = _clip(_json(call.get("arguments") or {}), 300)
        lines.append(f"tool call: {call.get('name')}({arguments}) -> {outcome}")
    if result.output:
        lines.append("answer: " + _clip(result.output))
    if result.cached:
        lines.append("(cached replay)")
    return lines


def _seconds(ms: Any) -> str:
    return f"{(float(ms or 0)) / 1000.0:.3f}"


def _timestamp(run: dict[str, Any]) -> str | None:
    """ISO 8601 without a zone, as the Ant JUnit schema wants."""
    text = run.get("started_at") or run.get("created_at")
    if not text:
        return None
    try:
        return datetime.fromisoformat(str(text)).replace(tzinfo=None, microsecond=0).isoformat()
    except ValueError:
        return None


def _classname(catalog: str, model: str) -> str:
    return f"{catalog.replace('.', '_')}.{model.replace('.', '_')}"


def _cost(report: dict[str, Any], model: str) -> str | None:
    """The model's cost as every report says it (``$X``, ``≥ $X (cost unknown for N pairs)``, unknown)."""
    block = next((m for m in report["models"] if m["model"] == model), None)
    return cost_line(block, block["scenarios"]) if block else None


def _cache(report: dict[str, Any], model: str) -> str | None:
    """The model's prompt-cache tokens and saving as every report says them; None without caching."""
    block = next((m for m in report["models"] if m["model"] == model), None)
    return cache_note(block.get("cache"), lead="") or None if block else None


def _pass_rate(report: dict[str, Any], model: str) -> str | None:
    """The model's pass rate, the one every view shows (the test cases count scenarios, and with epochs a
    scenario passes on its epoch pass rate: tests - failures is "scenarios passed", another number)."""
    block = next((m for m in report["models"] if m["model"] == model), None)
    return pct(block["pass_rate"]) if block else None


def _self_judge(run: dict[str, Any]) -> str | None:
    """``--allow-self-judge``: the models that judged their own answers."""
    return ", ".join(run["self_judge"]) if run.get("self_judge") else None


def _props(parent: ET.Element, values: Iterable[tuple[str, Any]]) -> None:
    props = ET.SubElement(parent, "properties")
    for name, value in values:
        if value is not None:
            ET.SubElement(props, "property", name=clean(name), value=clean(value))


def _suite_props(report: dict[str, Any], catalog: str, model: str) -> list[tuple[str, Any]]:
    """The properties every model's test suite carries, with or without epochs."""
    run = report["run"]
    return [
        ("run", run.get("id")),
        ("catalog", catalog),
        ("digest", run.get("digest")),
        ("model", model),
        ("strategy", run.get("strategy")),
        ("pass_rate", _pass_rate(report, model)),
        ("cost", _cost(report, model)),
        ("prompt_cache", _cache(report, model)),
        ("self_judge", _self_judge(run)),
    ]


NOT_FINISHED = "not_finished"


def _partial_line(partial: dict[str, Any]) -> str:
    return (f"run is {partial['status']}, {partial['finished']}/{partial['expected']} pairs finished, "
            f"{len(partial.get('missing') or [])} missing; resume it with `{partial['resume']}`")


def _missing_epochs(report: dict[str, Any]) -> dict[tuple[str, str], list[int]]:
    """(scenario, model) → its epochs with no result yet, in the order the run lists its pairs."""
    missing: dict[tuple[str, str], list[int]] = {}
    for pair in (report.get("partial") or {}).get("missing_pairs") or []:
        missing.setdefault((pair["scenario_key"], pair["model"]), []).append(int(pair.get("epoch") or 0))
    return missing


def _not_finished(suite: ET.Element, classname: str, key: str, epochs: list[int], run_epochs: int,
                  partial: dict[str, Any]) -> None:
    """The test case of a scenario × model with no result yet (a partial report)."""
    case = ET.SubElement(suite, "testcase", classname=classname, name=clean(key), time="0.000")
    which = f" (epochs {', '.join(map(str, epochs))})" if run_epochs > 1 else ""
    node = ET.SubElement(case, "error", type=NOT_FINISHED,
                         message=clean(f"not finished: run is {partial['status']}; "
                                       f"resume it with `{partial['resume']}`"))
    node.text = clean(f"no result yet{which}: {_partial_line(partial)}")


def _with_not_finished(root: ET.Element, suites: dict[str, ET.Element], report: dict[str, Any],
                       catalog: str, listed: set[tuple[str, str]]) -> None:
    """Add the partial report's unfinished pairs (those without a test case) and its ``partial`` property."""
    partial = report.get("partial")
    if not partial:
        return
    line = _partial_line(partial)
    run_epochs = int((report.get("epochs") or {}).get("epochs") or 1)
    for (key, model), epochs in _missing_epochs(report).items():
        suite = suites.get(model)
        if suite is None or (key, model) in listed:
            continue
        _not_finished(suite, _classname(catalog, clean(model)), key, epochs, run_epochs, partial)
        for element in (suite, root):
            element.set("tests", str(int(element.get("tests") or 0) + 1))
            element.set("errors", str(int(element.get("errors") or 0) + 1))
    for suite in suites.values():  # suite properties: what every JUnit schema allows and reporters show
        found = suite.find("properties")
        if found is not None:
            ET.SubElement(found, "property", name="partial", value=clean(line))
    root.set("name", f"{root.get('name')} (partial: {partial['finished']}/{partial['expected']} pairs)")


def render_junit(report: dict[str, Any], results: Iterable[Result] | None = None) -> str:
    """The run as JUnit XML. ``results`` (the run's rows) add the grader details; without
    them failures carry only what the report keeps (fault, score, error)."""
    run = report["run"]
    catalog = clean(run.get("catalog_name") or "catalog")
    if report.get("epochs"):
        return _render_epochs(report, results)
    by_pair = {r.pair: r for r in results or []}
    rows = report["results"]
    root = ET.Element("testsuites", name=f"evaljobs {catalog}", tests=str(len(rows)),
                      failures=str(sum(1 for r in rows if r["status"] == FAILED)),
                      errors=str(sum(1 for r in rows if r["status"] == ERRORED)),
                      time=_seconds(sum(r["duration_ms"] for r in rows)))
    stamp = _timestamp(run)
    models = [m["model"] for m in report["models"]]
    suites: dict[str, ET.Element] = {}
    for index, model in enumerate(models):
        mine = [r for r in rows if r["model"] == model]
        suite = suites[model] = ET.SubElement(root, "testsuite", name=clean(model), id=str(index),
                                              tests=str(len(mine)),
                              failures=str(sum(1 for r in mine if r["status"] == FAILED)),
                              errors=str(sum(1 for r in mine if r["status"] == ERRORED)), skipped="0",
                              time=_seconds(sum(r["duration_ms"] for r in mine)))
        if stamp:
            suite.set("timestamp", stamp)
        context = run.get("context")
        shown = _json(context) if context else None
        _props(suite, [*_suite_props(report, catalog, model), ("context", shown)])
        for row in mine:
            result = by_pair.get((row["scenario_key"], model))
            _testcase(suite, _classname(catalog, clean(model)), row, result)
    _with_not_finished(root, suites, report, catalog, {(r["scenario_key"], r["model"]) for r in rows})
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _testcase(suite: ET.Element, classname: str, row: dict[str, Any], result: Result | None) -> None:
    case = ET.SubElement(suite, "testcase", classname=classname, name=clean(row["scenario_key"]),
                         time=_seconds(row["duration_ms"]))
    if row["status"] == FAILED:
        fault = row.get("fault") or "failed"
        body = grade_lines(result) if result else [f"score: {row['score']:.3f}  fault: {fault}"]
        node = ET.SubElement(case, "failure", message=clean(f"{fault} (score {row['score']:.3f})"),
                             type=clean(fault))
        node.text = clean("\n".join(body))
    elif row["status"] == ERRORED:
        error = row.get("error") or (result.error if result else None) or "errored"
        first = error.strip().splitlines()[0] if error.strip() else "errored"
        node = ET.SubElement(case, "error", message=clean(_clip(first, _MESSAGE_CAP)),
                             type=clean(row.get("fault") or "run_error"))
        node.text = clean("\n".join(grade_lines(result)) if result else error)


def _render_epochs(report: dict[str, Any], results: Iterable[Result] | None) -> str:
    """One test case per scenario × model over its epochs (see the module docstring)."""
    run = report["run"]
    catalog = clean(run.get("catalog_name") or "catalog")
    by_ident = {r.ident: r for r in results or []}
    pairs = report["epochs"]["pairs"]
    rows = {(r["scenario_key"], r["model"], r.get("epoch", 0)): r for r in report["results"]}
    failed = [p for p in pairs if not p.get("ok", p["passed"] == p["epochs"])]
    root = ET.Element(
        "testsuites",
        name=f"evaljobs {catalog}",
        tests=str(len(pairs)),
        failures=str(len(failed)),
        errors="0",
        time=_seconds(sum(r["duration_ms"] for r in report["results"])),
    )
    stamp = _timestamp(run)
    suites: dict[str, ET.Element] = {}
    unfinished = _missing_epochs(report)
    for index, model in enumerate(m["model"] for m in report["models"]):
        mine = [p for p in pairs if p["model"] == model]
        suite = suites[model] = ET.SubElement(root, "testsuite", name=clean(model), id=str(index),
                                              tests=str(len(mine)),
                              failures=str(sum(1 for p in mine if p in failed)), errors="0", skipped="0",
                              time=_seconds(sum(r["duration_ms"] for k, r in rows.items() if k[1] == model)))
        if stamp:
            suite.set("timestamp", stamp)
        _props(suite, [*_suite_props(report, catalog, model), ("epochs", report["epochs"]["epochs"])])
        for pair in mine:
            key = pair["scenario_key"]
            epochs = [rows.get((key, model, e)) for e in range(pair["epochs"])]
            case = ET.SubElement(
                suite,
                "testcase",
                classname=_classname(catalog, clean(model)),
                name=clean(key),
                time=_seconds(sum(r["duration_ms"] for r in epochs if r)),
            )
            threshold = pair.get("threshold")
            summary = pair_line(pair) + ("" if threshold is None else f" · threshold {threshold:g}")
            body = [summary, ""]
            for epoch, row in enumerate(epochs):
                if row is None:
                    continue
                detail = f" [{row['fault']}]" if row.get("fault") else ""
                error = f": {row['error']}" if row.get("error") else ""
                body.append(f"epoch {epoch}: {row['status']} (score {row['score']:.3f}){detail}{error}")
                result = by_ident.get((key, model, epoch))
                if result is not None and row["status"] != "passed":
                    body += ["  " + line for line in grade_lines(result)]
            if pair in failed:
                node = ET.SubElement(
                    case,
                    "failure",
                    type="epoch_pass_rate",
                    message=clean(
                        f"{pair['passed']}/{pair['epochs']} epochs passed, under the threshold {threshold:g}"
                        if threshold is not None
                        else f"{pair['passed']}/{pair['epochs']} epochs passed"
                    ),
                )
                node.text = clean(_clip("\n".join(body), TEXT_CAP * 4))
            else:
                ET.SubElement(case, "system-out").text = clean(_clip("\n".join(body), TEXT_CAP * 4))
            missing = unfinished.get((key, model))
            if pair["flaky"] or missing:
                _props(case, [("flaky", "true" if pair["flaky"] else None),
                              ("missing_epochs", ", ".join(map(str, missing)) if missing else None)])
    _with_not_finished(root, suites, report, catalog, {(p["scenario_key"], p["model"]) for p in pairs})
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
