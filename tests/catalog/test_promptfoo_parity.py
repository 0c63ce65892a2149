"""Imported promptfoo suites get the verdicts promptfoo itself gives, shown by running promptfoo.

For each example config of promptfoo's public repository under ``tests/data/promptfoo`` (see SOURCE) and its
answers file (``tests/data/promptfoo/answers``), one simulated provider on loopback serves the same fixed
answers to the real promptfoo CLI (pinned; ``scripts/test`` installs it under ``.cache/promptfoo``) and to
evaljobs (the promptfoo importer, a real run through ``Session``). Models ``a1``, ``a2``... get an answer
written to pass, then answers written to fail; the judge (model ``judge``, for both tools' llm-rubric) passes
the first answer and those an entry lists under ``judge_passes``. The two verdicts of every (test, prompt,
model) must agree — pass/fail and score — unless the disagreement is listed, with its reason, in
docs/catalogs.md's table of known promptfoo differences; no row may be missing or errored on either side,
and each config's answers must pass some tests and fail others. Rows are matched by the prompt text both
tools rendered (promptfoo expands a glob var in the file system's order).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evaljobs.api import Session
from evaljobs.catalog.importers import load_any

# The configs' python/javascript assertions are their code: the parity run opts in (--allow-code).
pytestmark = pytest.mark.usefixtures("allow_code")

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "promptfoo"
PROMPTFOO_VERSION = "0.121.20"  # the version scripts/test installs
PROMPTFOO = ROOT / ".cache" / "promptfoo" / "node_modules" / ".bin" / "promptfoo"
ANSWER_FILES = sorted((DATA / "answers").glob("*.yaml"))


def _text(messages: list[dict]) -> str:
    return "\n".join(m["content"] if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
                     for m in messages)


class Script:
    """The fixed answers of one config, by a substring of the rendered prompt and the model's number."""

    def __init__(self, spec: dict):
        self.entries = spec["answers"]
        #: Real model names (a config whose verdicts depend on the model's price: `cost`), answering
        #: say[0], say[1]... in this order; both tools price their calls as the provider would bill them.
        self.priced = list(spec.get("models") or [])

    def __call__(self, model: str, messages: list[dict]) -> str | None:
        text = _text(messages)
        if model == "judge":  # promptfoo's llm-rubric and evaljobs' judge both read this JSON
            passes = {s.strip() for e in self.entries for s in [e["say"][0], *e.get("judge_passes", [])]}
            verdict = _judged(text).strip() in passes
            return json.dumps({"reason": "fixed verdict", "pass": verdict, "score": 1.0 if verdict else 0.0})
        number = self.priced.index(model) if model in self.priced else int(model.rsplit("a", 1)[-1]) - 1
        for entry in self.entries:
            if entry["when"] in text:
                return entry["say"][min(number, len(entry["say"]) - 1)]
        return f"(no fixed answer for this prompt: {text[:80]!r})"

    @property
    def models(self) -> list[str]:
        if self.priced:
            return self.priced
        return [f"a{n}" for n in range(1, max(len(e["say"]) for e in self.entries) + 1)]


def _judged(text: str) -> str:
    """The answer a judge prompt asks about: promptfoo's ``<Output>`` (the last: its system prompt has some),
    evaljobs' ``ANSWER:`` part."""
    if "\n</Output>" in text:
        return text.rsplit("<Output>\n", 1)[1].rsplit("\n</Output>", 1)[0]
    return text.rsplit("ANSWER:\n", 1)[-1]


def known_differences() -> dict[str, str]:
    """docs/catalogs.md's table of known promptfoo differences: ``{assertion type or feature: why}``."""
    text = (ROOT / "docs" / "catalogs.md").read_text(encoding="utf-8")
    section = text.split("### promptfoo: known differences", 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[2]
    return rows


def run_promptfoo(config: Path, models: list[str], url: str, tmp: Path) -> list[dict]:
    if not PROMPTFOO.exists():
        pytest.fail(f"promptfoo {PROMPTFOO_VERSION} is not installed under .cache/promptfoo: run "
                    f"scripts/test, which installs it (it needs Node.js 20+ and npm)")
    out = tmp / f"{config.parent.name}.json"
    env = dict(os.environ, PROMPTFOO_DISABLE_TELEMETRY="1", PROMPTFOO_DISABLE_UPDATE="1", NO_COLOR="1",
               PROMPTFOO_CONFIG_DIR=str(tmp / "promptfoo-home"), PROMPTFOO_DISABLE_SHARING="1",
               OPENAI_API_KEY="sim", OPENAI_BASE_URL=url, PROMPTFOO_CACHE_ENABLED="false",
               # The configs' python assertions run in this interpreter: promptfoo's default, `python` on
               # PATH, may be a version manager's shim (pyenv's runs ~40 shell processes a call).
               PROMPTFOO_PYTHON=sys.executable)
    command = [str(PROMPTFOO), "eval", "-c", str(config), "--no-cache", "--no-write", "--no-table",
               "-o", str(out), "--providers", *[f"openai:chat:{m}" for m in models],
               "--grader", "openai:chat:judge", "-j", "4"]
    done = subprocess.run(command, cwd=config.parent, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert out.exists(), f"promptfoo wrote no results ({done.returncode}): {done.stderr[-2000:]}"
    return json.loads(out.read_text())["results"]["results"]


def run_evaljobs(config: Path, models: list[str], tmp: Path, url: str | None = None,
                 priced: bool = False) -> tuple[list, list[list[str]]]:
    """``priced``: the models are OpenAI's own names, called as ``openai/MODEL`` at the openai preset's
    published prices (its base URL pointed at ``url``), as promptfoo prices them from its own table."""
    providers = None
    if priced:
        providers = tmp / "providers.yaml"
        providers.write_text(f'providers:\n  openai: {{base_url: "{url}", api_key_env: null, '
                             f'stream: false}}\n')
    with Session(db=f"sqlite:///{tmp / 'evaljobs.db'}",
                 providers=str(providers) if providers else None) as session:
        catalog = session.load(config, lenient=True)
        run = session.submit(catalog, [f"{'openai' if priced else 'sim'}/{m}" for m in models],
                             strategy="sequential", judge_model="sim/judge")
        results = session.results(run.id)
    # One group per prompt, its scenarios in the order of the tests: promptfoo's promptIdx and testIdx.
    groups = load_any(config, lenient=True).data["groups"]
    return results, [[(s["key"], s.get("prompt")) for s in group["scenarios"]] for group in groups]


@pytest.mark.parametrize("answers", ANSWER_FILES, ids=[p.stem for p in ANSWER_FILES])
def test_every_verdict_agrees_with_promptfoo(answers, tmp_path, simulated_provider):
    spec = yaml.safe_load(answers.read_text(encoding="utf-8"))
    config = DATA / spec["config"]
    script = Script(spec)
    provider = simulated_provider(answers=script)  # EVALJOBS_SIM_URL points at it for evaljobs' run
    compared, documented, disagreements, verdicts = run_both(config, script, provider.url, tmp_path)
    assert verdicts == {True, False}, f"{spec['config']}: the answers must pass some tests and fail others"
    print(f"{spec['config']}: {compared} verdicts compared, {documented} documented differences")
    assert not disagreements, "\n".join(disagreements)


def run_both(config: Path, script: Script, url: str, tmp: Path) -> tuple[int, int, list[str], set[bool]]:
    """Both tools on ``config`` against the simulated provider at ``url`` serving ``script``'s answers
    (``EVALJOBS_SIM_URL`` set to it): (verdicts compared, documented differences, disagreements,
    promptfoo's verdicts seen)."""
    theirs = run_promptfoo(config, script.models, url, tmp)
    ours, groups = run_evaljobs(config, script.models, tmp, url, priced=bool(script.priced))
    return (*compare(theirs, ours, groups, str(config.relative_to(DATA)) if config.is_relative_to(DATA) else
                     str(config)), {bool(row["success"]) for row in theirs})


def compare(theirs: list[dict], ours: list, groups: list[list[tuple[str, str | None]]],
            name: str) -> tuple[int, int, list[str]]:
    """Every evaljobs result against promptfoo's row for the same (model, prompt, test): pass/fail and score.
    A row whose test uses a type listed in docs/catalogs.md's known differences may differ (or be refused
    by evaljobs as not gradable); any other difference is a disagreement. Both tools must have every row,
    and neither may error."""
    labels: list[str] = []
    for row in sorted(theirs, key=lambda r: r["promptIdx"]):
        label = row["prompt"].get("label") or row["prompt"]["raw"]
        if label not in labels:
            labels.append(label)
    by_key, by_text = {}, {}
    for row in sorted(theirs, key=lambda r: r["testIdx"]):
        model = row["provider"]["id"].rsplit(":", 1)[-1]
        prompt = labels.index(row["prompt"].get("label") or row["prompt"]["raw"])
        by_key[(model, prompt, row["testIdx"])] = row
        by_text.setdefault((model, prompt, row["prompt"]["raw"]), []).append(row)
    known = known_differences()
    disagreements, compared, documented = [], 0, 0
    assert len(ours) == len(theirs), f"{name}: {len(ours)} evaljobs results, {len(theirs)} promptfoo rows"
    for result in ours:
        model = result.model.split("/", 1)[1]
        prompt = next(i for i, group in enumerate(groups) if result.scenario_key in dict(group))
        keys = [key for key, _ in groups[prompt]]
        text = dict(groups[prompt])[result.scenario_key]
        if text is None:  # a chat: promptfoo's testIdx is the scenario's place among the prompt's tests
            row = by_key.get((model, prompt, keys.index(result.scenario_key)))
        else:  # the row that asked the same text (a glob var's files come in the file system's order there)
            same = [key for key, other in groups[prompt] if other == text]
            rows = by_text.get((model, prompt, text), [])
            row = rows[same.index(result.scenario_key)] if len(rows) == len(same) else None
        where = f"{name} {result.scenario_key} {model}"
        assert row is not None, f"{where}: no promptfoo row"
        listed = [t for t in _types(row) if t in known]
        if listed and result.status == "errored" and result.fault == "not_gradable":
            documented += 1  # refused by name (see the table), and promptfoo may need what evaljobs lacks
            continue
        assert row.get("failureReason") != 2 and not (row.get("error") and not row.get("gradingResult")), \
            f"{where}: promptfoo errored: {row.get('error')}"
        answer = (row.get("response") or {}).get("output")
        if not isinstance(answer, str):  # promptfoo's provider parsed it (a json_schema response_format)
            answer = json.dumps(answer) if json.loads(result.output) != answer else result.output
        assert result.output == answer, \
            f"{where}: the two tools got different answers: {result.output!r} vs {answer!r}"
        compared += 1
        same = (result.status == "passed") == bool(row["success"]) and abs(result.score - row["score"]) < 1e-6
        if same:
            continue
        if listed:
            documented += 1
        else:
            verdict = "pass" if row["success"] else "fail"
            disagreements.append(f"{where}: promptfoo {verdict} {row['score']:.4f}, "
                                 f"evaljobs {result.status} {result.score:.4f} ({result.fault}; "
                                 f"{json.dumps(result.details.get('not_gradable') or '')[:200]}); "
                                 f"types {_types(row)}")
    assert compared + documented == len(theirs)
    return compared, documented, disagreements


def _types(row: dict) -> list[str]:
    """The assertion types of a promptfoo row (its test's, defaultTest's included)."""
    found = []
    for assertion in (row.get("testCase") or {}).get("assert") or []:
        found.append(assertion.get("type") or "")
        found += [a.get("type") or "" for a in assertion.get("assert") or []]
    return [t for t in found if t]


def test_known_differences_table_is_read():
    """The table the parity test accepts differences from exists and names each by type, with a reason."""
    rows = known_differences()
    assert rows and all(re.search(r"\w", why) for why in rows.values())
