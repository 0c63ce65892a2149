"""The canonical body of a catalog and its digest.

The body is the resolved catalog (defaults applied, scenarios sorted by key)
as plain JSON data: it is what a run snapshots, and its sha256 is the digest
that says whether two catalogs mean the same thing, however they are written.
"""
from __future__ import annotations

import functools
import hashlib
import json
from typing import Any, Iterator

from evaljobs.catalog.criteria import criteria as criteria_table
from evaljobs.catalog.criteria import expect_body, value_keys
from evaljobs.catalog.model import SET_ENTRIES, Catalog, Expect, Scenario, Tool
from evaljobs.catalog.toolspec import LIVE_KINDS


def build_catalog(name: str, description: str, scenarios: list[Scenario], source: str,
                  epochs: int = 1, *, scenario_digests: bool = False) -> Catalog:
    """The catalog of these validated scenarios, sorted by key, with its canonical body and digest; the
    order they are given in is kept as :attr:`Catalog.order` (what reports list them by).

    ``scenario_digests``: also keep each scenario's :func:`scenario_digest`, taken from the canonical text the
    catalog's digest hashes anyway (a snapshot read back by a worker, which stamps every result row with its
    scenario's digest: computed apart, that was a second body and JSON text per pair)."""
    ordered = tuple(sorted(scenarios, key=lambda s: s.key))
    kept: dict[str, str] | None = {} if scenario_digests else None
    digest = _streamed_digest(name, description, ordered, epochs, kept)
    return Catalog(name=name, scenarios=ordered, digest=digest,
                   make_body=functools.partial(_catalog_body, name, description, ordered, epochs),
                   source=source, description=description, epochs=epochs,
                   written=tuple(s.key for s in scenarios), scenario_digests=kept)


def _catalog_body(name: str, description: str, ordered: tuple[Scenario, ...], epochs: int) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "description": description,
                            "scenarios": [_scenario_body(s) for s in ordered]}
    if epochs != 1:  # only when set: catalogs without epochs keep their digest
        body["defaults"] = {"epochs": epochs}
    return body


#: Scenarios written to the digest at a time.
_CHUNK = 1000


def _streamed_digest(name: str, description: str, ordered: tuple[Scenario, ...], epochs: int,
                     scenario_digests: dict[str, str] | None = None) -> str:
    """``digest_of(_catalog_body(...))`` without the body or its JSON text: the same canonical JSON,
    hashed a thousand scenarios at a time (100,000 scenarios' body and text took 250 MB).

    ``scenario_digests``: filled with each scenario's :func:`scenario_digest`, from its own part of that text
    (a list's canonical JSON is its items' joined by ``,``)."""
    head = {key: value for key, value in _catalog_body(name, description, (), epochs).items()
            if key != "scenarios"}
    hasher = hashlib.sha256()
    # "scenarios" sorts after every other top-level key: the head's keys, then the list, then "}".
    hasher.update((_canonical(head)[:-1] + ',"scenarios":[').encode("utf-8"))
    for start in range(0, len(ordered), _CHUNK):
        if start:
            hasher.update(b",")
        if scenario_digests is None:
            chunk = _canonical([_scenario_body(s) for s in ordered[start:start + _CHUNK]])
            hasher.update(chunk[1:-1].encode("utf-8"))
            continue
        texts = [_canonical(_scenario_body(s)).encode("utf-8") for s in ordered[start:start + _CHUNK]]
        for s, text in zip(ordered[start:start + _CHUNK], texts):
            scenario_digests[s.key] = "sha256:" + hashlib.sha256(text).hexdigest()
        hasher.update(b",".join(texts))
    hasher.update(b"]}")
    return "sha256:" + hasher.hexdigest()


def scenario_digest(scenario: Scenario) -> str:
    """The digest of one scenario's canonical form: equal digests mean the scenario is unchanged
    (``--reuse``)."""
    return digest_of(_scenario_body(scenario))


def verdict_digest(scenario: str | None, judge_model: str | None) -> str | None:
    """What decides a pair's verdict, as one digest: its scenario's digest (conversation, expectations,
    judge rubric, graders) and, for a judged scenario, the judge model the run judges it with. An unjudged
    scenario's is its scenario's digest alone. None when the scenario's is unknown."""
    if scenario is None or not judge_model:
        return scenario
    return digest_of({"scenario": scenario, "judge_model": judge_model})


def is_judged(scenario: Scenario) -> bool:
    """Whether an LLM judge takes part in the scenario's verdict (a judged criterion it expects and grades
    or gates, ``Criterion.judged``, or a weighted list's judge entries)."""
    if scenario.expect.weighted:  # a weighted list calls the judge for each of its judge entries
        return any(entry.get("kind") == "judge" for entry in _entries(scenario.expect.assertions))
    expect, criteria = scenario.expect, scenario.criteria
    return any(c.judged and c.present(expect)
               and (criteria is None or c.name in criteria or c.name in expect.gates)
               for c in criteria_table())


def _entries(entries: Any) -> Iterator[dict[str, Any]]:
    for entry in entries:
        yield entry
        if entry.get("kind") == "set":
            yield from _entries(entry.get(SET_ENTRIES) or [])


def scenario_verdict_digest(scenario: Scenario, run_judge_model: str | None = None,
                            default_judge_model: str | None = None, *, digest: str | None = None) -> str:
    """:func:`verdict_digest` of ``scenario`` in a run whose ``--judge-model`` is ``run_judge_model`` and
    whose providers file names ``default_judge_model``: the judge is decided as the run decides it (the run's,
    else the scenario's own, else the providers file's), from the run's configuration, never from whether
    the judge happened to be called (a pair that failed a gate first was not judged, and still compares).
    ``digest``: the scenario's :func:`scenario_digest` when the caller has it (``Catalog.scenario_digests``).
    """
    judge = (run_judge_model or scenario.judge_model or default_judge_model) if is_judged(scenario) else None
    return verdict_digest(digest or scenario_digest(scenario), judge) or ""


def judge_model_of(details: Any) -> str | None:
    """The judge model a pair's stored details name (None: not judged, or not recorded)."""
    judge = details.get("judge") if isinstance(details, dict) else None
    model = judge.get("model") if isinstance(judge, dict) else None
    return model if isinstance(model, str) and model else None


def digest_of(body: dict[str, Any]) -> str:
    """``sha256:`` of the canonical JSON of a catalog body."""
    return "sha256:" + hashlib.sha256(_canonical(body).encode("utf-8")).hexdigest()


def _canonical(value: Any) -> str:
    """The canonical JSON text the digests cover."""
    return _CANONICAL(value)


#: ``json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` without building an
#: encoder per call (``json.dumps`` does whenever it is given options): a pair's verdict digest is one.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode


def _tool_body(t: Tool) -> dict[str, Any]:
    body = {"name": t.name, "description": t.description, "parameters": t.parameters,
            "returns": t.returns, "returns_by": t.returns_by}
    for kind in LIVE_KINDS:  # only when set: canned catalogs keep their digest
        if getattr(t, kind) is not None:
            body[kind] = getattr(t, kind)
    return body


def _expect_body(e: Expect) -> dict[str, Any]:
    """The criteria's keys (``Criterion.body``; a key criteria declare whole, ``Key``, always when it always
    was, else only when set), then how they combine: later fields only when set, so catalogs that do not use
    them keep their digest."""
    body = expect_body(e)
    for key in value_keys():
        if key.always_in_body or e.value(key.name) is not None:
            body[key.name] = e.value(key.name)
    # Grading rules: without them a snapshot read back (a worker process, a rerun, show) graded the scenario
    # another way than the run that stored it.
    optional = {"gate": list(e.gates), "weighted": e.weighted or None, "diagnose": list(e.diagnose)}
    body.update({k: v for k, v in optional.items() if v})
    if e.threshold is not None:  # 0 is a threshold (it never fails), not "no threshold"
        body["threshold"] = e.threshold
    return body


def _conversation(s: Scenario) -> tuple[str | None, list[dict[str, Any]]]:
    """(system, messages) as a catalog writes them. The validator lifts a leading system message into
    ``system``; when the conversation still starts with one (OpenAI evals samples with several), the body
    keeps the lifted one as the first message instead, so reading the body lifts the same one again
    (``system`` plus a leading system message is refused in a catalog, as ambiguous)."""
    messages = [dict(m) for m in s.messages]
    if s.system is not None and messages and messages[0].get("role") == "system":
        return None, [{"role": "system", "content": s.system}, *messages]
    return s.system, messages


def _scenario_body(s: Scenario) -> dict[str, Any]:
    e = s.expect
    system, messages = _conversation(s)
    return {
        "key": s.key,
        "messages": messages,
        "system": system,
        "tools": [_tool_body(t) for t in s.tools],
        "expect": _expect_body(e),
        "tags": list(s.tags),
        "notes": s.notes,
        "group": s.group,
        "temperature": s.temperature,
        "max_turns": s.max_turns,
        "criteria": list(s.criteria) if s.criteria is not None else None,
        "pass_threshold": s.pass_threshold,
        "judge_model": s.judge_model,
        # Only when set: catalogs without weights keep their digest.
        **({"weights": dict(s.weights)} if s.weights else {}),
        **({"seed": s.seed} if s.seed is not None else {}),  # likewise: catalogs without a seed keep theirs
    }


__all__ = ["build_catalog", "digest_of", "is_judged", "judge_model_of", "scenario_digest",
           "scenario_verdict_digest", "verdict_digest"]
