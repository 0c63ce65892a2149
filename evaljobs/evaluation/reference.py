"""Reference answers: a reply compared with a sample's ``ideal``/``target`` answers as the source tool
compares it.

An imported sample keeps its source's grading semantics, because the same reply
can pass one tool's check and fail another's (``" 42"`` passes OpenAI evals'
``Includes`` and fails its ``Match``; ``"The answer is 42."`` passes Inspect's
``match()`` and fails OpenAI evals' ``Match``). Each grader follows the tool's own
code, named where it is implemented:

- OpenAI evals (openai/evals, commit 4bfc1f58): ``match`` is ``record_and_check_match``
  (evals/api.py: ``sampled.startswith(option)``), ``includes`` / ``includes_ignore_case`` are
  ``Includes`` (evals/elsuite/basic/includes.py with ``utils.get_answer``: ``rfind``, lower-cased
  with ``ignore_case``), ``fuzzy_match`` is ``utils.fuzzy_match`` (evals/elsuite/utils.py).
- Inspect (inspect-ai 0.3.280, src/inspect_ai/scorer/): ``inspect_includes`` is ``includes()``
  (_match.py: ``casefold``), ``inspect_match`` is ``match()`` with its defaults (``location="end"``,
  ``ignore_case=True``, ``numeric=False``: _common.py ``match_str``), ``inspect_exact`` is
  ``exact()`` (_classification.py ``max_exact_score``), ``inspect_pattern:REGEX`` is
  ``pattern(REGEX)`` (_pattern.py) and ``inspect_answer:letter|word|line`` is ``answer(...)``
  (_answer.py with the patterns of inspect_ai/_util/pattern.py). Any of several targets passes
  (``str_match_scorer`` returns CORRECT on the first target that matches).

Pure functions: no I/O.
"""
from __future__ import annotations

import math
import re
import string
from collections.abc import Sequence

from evaljobs.catalog import patterns

_PUNCTUATION = set(string.punctuation)

#: inspect_ai/_util/pattern.py (inspect-ai 0.3.280): what ``answer(pattern)`` extracts after "ANSWER:".
ANSWER_PATTERNS = {
    "letter": r"(?is)ANSWER\s*:\s*([A-Za-z])(?:[^\w]|\n|$)(?!.*ANSWER\s*:)",
    "word": r"(?is)ANSWER\s*:\s*(\S+?)(?=[.,;:!?]?\s*(?:\n|$))(?!.*ANSWER\s*:)",
    "line": r"(?i)ANSWER\s*:\s*([^\n]+)\s*\Z",
}


def normalize_answer(text: str) -> str:
    """OpenAI evals' ``normalize``: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def ideal_matches(answer: str, ideal: str, grader: str) -> bool:
    """One reference answer, compared the way OpenAI evals' eval classes (or Inspect's scorers) compare it."""
    return reference_matches(answer, [ideal], grader)


def reference_matches(answer: str, references: Sequence[str], grader: str) -> bool:
    """Whether ``answer`` passes against any of ``references`` under ``grader`` (``name`` or ``name:arg``)."""
    name, _, arg = grader.partition(":")
    if name == "inspect_pattern":
        return _pattern_matches(answer, references, arg)
    if name == "inspect_answer":
        return _pattern_matches(answer, references, ANSWER_PATTERNS[arg])
    if name == "inspect_exact":
        return _exact(answer, references)
    check = _CHECKS[name]
    return any(check(answer, reference) for reference in references)


def _match(answer: str, ideal: str) -> bool:  # evals.record_and_check_match, no separator
    return answer.startswith(ideal)


def _includes(answer: str, ideal: str) -> bool:  # Includes(ignore_case=False): get_answer's rfind
    return answer.rfind(ideal) != -1


def _includes_ignore_case(answer: str, ideal: str) -> bool:  # Includes(ignore_case=True)
    return answer.lower().rfind(ideal.lower()) != -1


def _fuzzy_match(answer: str, ideal: str) -> bool:  # evals.elsuite.utils.fuzzy_match
    a, b = normalize_answer(answer), normalize_answer(ideal)
    if a == "" or b == "":
        return a == b
    return a in b or b in a


def _inspect_includes(answer: str, target: str) -> bool:  # includes(ignore_case=True)
    return target.casefold() in answer.casefold()


def _strip_punctuation(text: str) -> str:  # inspect_ai._util.text.strip_punctuation
    return text.strip(string.whitespace + string.punctuation)


def _inspect_match(answer: str, target: str) -> bool:  # match(): match_str(location="end", ignore_case=True)
    value, wanted = answer.strip().casefold(), target.strip().casefold()
    return _strip_punctuation(value).endswith(_strip_punctuation(wanted))


_CHECKS = {
    "match": _match,
    "includes": _includes,
    "includes_ignore_case": _includes_ignore_case,
    "fuzzy_match": _fuzzy_match,
    "inspect_includes": _inspect_includes,
    "inspect_match": _inspect_match,
}


def _pattern_matches(answer: str, targets: Sequence[str], pattern: str) -> bool:
    """pattern(pattern, ignore_case=True, match_all=False): the first capture group (or the whole match when
    the pattern has none) equal to one of the targets, both lower-cased; no match is INCORRECT."""
    found = patterns.find(pattern, answer, patterns.IGNORECASE)  # re's semantics, bounded in time
    if found is None:
        return False
    lowered = [t.lower() for t in targets]
    groups = found.groups() or (found.group(0),)
    return any(isinstance(group, str) and group.lower() in lowered for group in groups)


# exact(): _classification.py's normalization, token by token.

def _is_finite_number(text: str) -> bool:  # inspect_ai._util.text.is_finite_number
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _remove_punctuation(text: str) -> str:
    if _is_finite_number(text):
        return text
    stripped = _strip_punctuation(text)
    if _is_finite_number(stripped):
        return stripped
    return "".join(ch for ch in text if ch not in _PUNCTUATION)


def _normalize_token(token: str) -> str:
    token = _remove_punctuation(token.casefold())
    if _is_finite_number(token):
        token = str(float(token))
    token = re.sub(r"\b(a|an|the)\b", " ", token, flags=re.UNICODE)
    return " ".join(token.split())


def exact_normalize(text: str) -> str:
    """Inspect's ``_normalize`` (no stop words): tokens split on spaces and hyphens, each normalized."""
    tokens = [_normalize_token(token) for token in re.split(" |-", text)]
    return " ".join(token for token in tokens if token.strip()).strip()


def _exact(answer: str, targets: Sequence[str]) -> bool:
    """exact(): the normalized answer equals a normalized target; a target empty after normalization
    never matches."""
    normalized = exact_normalize(answer)
    return any(exact_normalize(target) and exact_normalize(target) == normalized for target in targets)


__all__ = ["ANSWER_PATTERNS", "exact_normalize", "ideal_matches", "normalize_answer", "reference_matches"]
