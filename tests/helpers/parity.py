"""What the parity suites share: fixed answers served by the simulated provider, and the evaljobs side.

A parity suite grades the same answers with a source tool and with evaljobs. The answers are fixed per
sample: each sample of a real dataset is copied once per answer, with a ``[sim: say "…"]`` directive
(a JSON string, so the answer comes back byte for byte — leading spaces, line breaks, brackets) added to
its last user message. The copies go to both tools, so both see the same prompts and the same replies
from the same simulated provider on loopback.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any


def say(answer: str) -> str:
    """A directive the simulated provider answers with exactly ``answer``."""
    text = json.dumps(answer)  # ASCII only: non-ASCII letters become \\u escapes
    for char in "[]{}":  # brackets would end (or open) the directive: escape them inside the JSON string
        text = text.replace(char, f"\\u{ord(char):04x}")
    return f"[sim: say {text}]"


def with_answer(content: Any, answer: str) -> Any:
    """A sample's input (a prompt string or chat messages) with the directive for ``answer`` appended to the
    last user message."""
    if isinstance(content, str):
        return f"{content}\n{say(answer)}"
    messages = [dict(m) for m in content]
    last = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    messages[last]["content"] = f"{messages[last]['content']}\n{say(answer)}"
    return messages


def answer_variants(reference: str) -> list[str]:
    """Answers written to pass and to fail the usual reference-answer checks: exact, surrounded by spaces,
    punctuation, quotes or Markdown bold, in a sentence, another case, a prefix of it, a refusal, an 'ANSWER:'
    line, a trailing line break."""
    ref = reference
    stripped = ref.strip()
    variants = [
        ref,
        f" {stripped}",
        f"{stripped}.",
        f"The answer is {stripped}.",
        f"{stripped} is my answer",
        stripped.upper(),
        stripped.lower(),
        f"the {stripped}!",
        f"ANSWER: {stripped}",
        f"Let me think.\nANSWER: {stripped}",
        stripped[: max(1, len(stripped) // 2)],
        "I do not know.",
        f"**{stripped}**",
        f"'{stripped}'",
        f"{stripped}\n",
        f"I think it is {stripped}, but I am not sure.",
        f"Answer: {stripped}",
    ]
    return list(dict.fromkeys(v for v in variants if v))


def expand(records: Iterable[tuple[str, dict[str, Any]]], input_field: str, references: Any,
           ) -> list[tuple[str, str, dict[str, Any]]]:
    """``(key, answer, record)`` for every record × answer variant: the record copied with the directive.

    ``records`` are ``(key, record)``; ``references(record)`` gives the reference the variants derive from.
    The copy's ``id`` is ``KEY-vN``.
    """
    out = []
    for key, record in records:
        for number, answer in enumerate(answer_variants(references(record))):
            copy = dict(record)
            copy[input_field] = with_answer(record[input_field], answer)
            copy["id"] = f"{key}-v{number}"
            out.append((copy["id"], answer, copy))
    return out


def write_jsonl(path: Path, records: Sequence[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def run_evaljobs(catalog_path: Path, db_url: str, **load: Any) -> dict[str, tuple[str, str]]:
    """Run an imported catalog through the real pipeline (threads strategy, the simulated provider of
    ``EVALJOBS_SIM_URL``): ``{scenario key: (status, answer as stored)}``."""
    from evaljobs.api import Session

    with Session(db=db_url, broker="memory", width=8) as session:
        catalog = session.load(str(catalog_path), **load)
        info = session.submit(catalog, ["sim/parity"], strategy="threads")
        assert info.status == "complete", (info.id, info.status)
        return {r.scenario_key: (r.status, r.output) for r in session.results(info.id)}


def disagreements(ours: dict[str, str], theirs: dict[str, str], known: dict[str, str] | None = None,
                  ) -> tuple[list[str], int]:
    """Keys whose verdicts differ (unless listed in ``known``, key -> reason), and how many were compared.
    A key missing on either side is a disagreement."""
    known = known or {}
    keys = sorted(set(ours) | set(theirs))
    differ = [f"{k}: evaljobs {ours.get(k, 'missing')}, source {theirs.get(k, 'missing')}" for k in keys
              if ours.get(k) != theirs.get(k) and k not in known]
    return differ, len(keys)
