"""promptfoo's built-in assertions that are more than a substring or a regex, as promptfoo computes them.

Each function follows the promptfoo source it names (read at the version the
parity suite pins, ``tests/data/promptfoo/SOURCE``) and returns promptfoo's
``(pass, score, reason)``; ``negate`` is promptfoo's ``not-`` prefix
(``inverse``), which flips the pass and, where promptfoo does, the score.

Pure code, no process and no network: :mod:`evaljobs.evaluation.weighted` calls
:func:`check` for an entry ``{"kind": "promptfoo", "type": ..., "value": ...}``.
"""
from __future__ import annotations

import json
import math
import re
from collections import Counter
from typing import Any

import yaml

from evaljobs.catalog import yaml12

Verdict = tuple[bool, float, str]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _json_parse(text: str) -> Any:
    """``JSON.parse``: Python's json without NaN/Infinity (JavaScript refuses them)."""
    return json.loads(text, parse_constant=_reject_constant)


def is_json(text: str, negate: bool) -> Verdict:
    """src/assertions/json.ts ``handleIsJson`` (no schema): ``JSON.parse(output)`` succeeds."""
    try:
        _json_parse(text)
        passed = not negate
    except ValueError:
        passed = negate
    return (
        passed,
        1.0 if passed else 0.0,
        "Assertion passed" if passed else ("Expected output to be valid JSON"),
    )


def _slash_comments_to_hash(text: str) -> str:
    """src/util/json.ts ``convertSlashCommentsToHash``, simplified: a ``//`` outside quotes starts a
    comment."""
    out = []
    for line in text.split("\n"):
        quote, result, i = None, "", 0
        while i < len(line):
            ch = line[i]
            if quote:
                result += ch
                if ch == "\\" and i + 1 < len(line):
                    result += line[i + 1]
                    i += 1
                elif ch == quote:
                    quote = None
            elif ch == '"' or (ch == "'" and not (i and line[i - 1].isalpha())):
                quote = ch
                result += ch
            elif ch == "/" and line[i + 1:i + 2] == "/" and (i == 0 or line[i - 1] != ":"):
                result += "#" + line[i + 2:]
                break
            else:
                result += ch
            i += 1
        out.append(result)
    return "\n".join(out)


def extract_json_objects(text: str) -> list[Any]:
    """src/util/json.ts ``extractJsonObjects``: each ``{`` starts a candidate, read up to its balanced ``}``
    (braces still open at the end of the text are closed), parsed as YAML in JSON mode."""
    found: list[Any] = []
    limit = 100_000
    i = 0
    while i < len(text):
        if text[i] == "{":
            opened, closed, j = 1, 0, i + 1
            while j < min(i + limit, len(text)) and opened > closed:
                if text[j] == "{":
                    opened += 1
                if text[j] == "}":
                    closed += 1
                j += 1
                if opened == closed or j == len(text) or j == i + limit:
                    candidate = text[i:j] + "}" * max(opened - closed, 0)
                    try:
                        parsed = yaml12.load(_slash_comments_to_hash(candidate))
                    except (yaml.YAMLError, ValueError):
                        if opened == closed:
                            break
                        continue
                    if isinstance(parsed, (dict, list)):
                        found.append(parsed)
                        i = j - 1
                        break
        i += 1
    return found


def contains_json(text: str, negate: bool) -> Verdict:
    """src/assertions/json.ts ``handleContainsJson`` (no schema)."""
    objects = extract_json_objects(text)
    passed = (not objects) if negate else bool(objects)
    return (
        passed,
        1.0 if passed else 0.0,
        "Assertion passed" if passed else ("Expected output to contain valid JSON"),
    )


def levenshtein_distance(a: str, b: str) -> int:
    """Edit distance over UTF-16 code units, as ``fastest-levenshtein``'s ``distance`` counts them."""
    a16, b16 = a.encode("utf-16-le"), b.encode("utf-16-le")
    x = [a16[i:i + 2] for i in range(0, len(a16), 2)]
    y = [b16[i:i + 2] for i in range(0, len(b16), 2)]
    if len(x) < len(y):
        x, y = y, x
    previous = list(range(len(y) + 1))
    for i, cx in enumerate(x, 1):
        current = [i]
        for j, cy in enumerate(y, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (cx != cy)))
        previous = current
    return previous[-1]


def levenshtein(text: str, value: str, threshold: float | None, negate: bool) -> Verdict:
    """src/assertions/levenshtein.ts: passes when the distance is at most ``threshold`` (default 5)."""
    limit = 5 if threshold is None else threshold
    distance = levenshtein_distance(text, value)
    passed = (distance <= limit) != negate
    return passed, 1.0 if passed else 0.0, ("Assertion passed" if passed else
                                           f"Levenshtein distance {distance} vs threshold {limit:g}")


_CONTRACTIONS = [re.compile(rf"(?<!\w){p}(?!\w)", re.IGNORECASE | re.UNICODE) for p in (
    r"(can)(not)", r"(d)('ye)", r"(gim)(me)", r"(gon)(na)", r"(got)(ta)", r"(lem)(me)", r"(more)('n)",
    r"(wan)(na)(?= )", r"('t)(is)", r"('t)(was)")]


def treebank_tokenize(text: str) -> list[str]:
    """js-rouge's ``treeBankTokenize`` (src/tokenize.ts, the Penn Treebank rules). Its paired-quote
    heuristics are simplified: a ``"`` opens a quote at the start or after a space, bracket or ``<``."""
    text = re.sub(r"\s+", " ", text).strip()
    if not text:
        return []
    inside = False
    parts = []
    for index, quote in enumerate(re.split(r'(``|\'\'|")', text)):
        if index % 2 == 0:
            parts.append(quote)
            continue
        before = "".join(parts)[-1:] if parts else ""
        inside = quote == "``" or (not inside and (not before or before in " ([{<"))
        parts.append(" `` " if inside else " '' ")
    parse = "".join(parts)
    parse = parse.replace("...", " ... ")
    parse = re.sub(r"[:,](?!\d)", lambda m: f" {m.group(0)} ", parse)
    parse = re.sub(r"[;@#$%&]", lambda m: f" {m.group(0)} ", parse)
    parse = re.sub(r"([^.])(?<!\b[A-Za-z]\.[A-Za-z])(\.)([\])}>'\s]*)$", r"\1 \2\3 ", parse)
    parse = re.sub(r"[?!]", lambda m: f" {m.group(0)} ", parse)
    parse = re.sub(r"[\][(){}<>]", lambda m: f" {m.group(0)} ", parse)
    parse = parse.replace("--", " -- ")
    parse = f" {parse} "
    parse = re.sub(r"([^'])' ", r"\1 ' ", parse)
    parse = re.sub(r"'([sSmMdD]) ", r" '\1 ", parse)
    parse = re.sub(r"('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) ", r" \1 ", parse)
    for contraction in _CONTRACTIONS:
        parse = contraction.sub(lambda m: " " + " ".join(g for g in m.groups()) + " ", parse)
    parse = re.sub(r" {2,}", " ", parse).strip(" ")
    return parse.split(" ")


def rouge_n_score(candidate: str, reference: str, n: int = 1) -> float:
    """src/assertions/rouge.ts ``rougeNScore``: clipped n-gram overlap, F1 (beta 1), lower-cased inputs."""
    cand, ref = treebank_tokenize(candidate.lower()), treebank_tokenize(reference.lower())
    if len(cand) < n or len(ref) < n:
        return 0.0
    cand_grams = Counter(tuple(cand[i:i + n]) for i in range(len(cand) - n + 1))
    ref_grams = Counter(tuple(ref[i:i + n]) for i in range(len(ref) - n + 1))
    overlap = sum(min(count, ref_grams[gram]) for gram, count in cand_grams.items())
    if not overlap:
        return 0.0
    precision = overlap / sum(cand_grams.values())
    recall = overlap / sum(ref_grams.values())
    return 2 * precision * recall / (recall + precision)


def rouge_n(text: str, value: str, threshold: float | None, negate: bool) -> Verdict:
    """src/assertions/rouge.ts ``handleRougeScore`` (``rouge-n``; threshold default 0.75)."""
    limit = 0.75 if threshold is None else threshold
    score = rouge_n_score(text, value)
    passed = (score >= limit) != negate
    return passed, 1 - score if negate else score, f"ROUGE-N score {score:.2f} vs threshold {limit:g}"


def bleu_score(candidate: str, references: list[str]) -> float:
    """src/assertions/bleu.ts ``calculateBleuScore``: 1- to 4-gram precisions, weights 0.25, brevity
    penalty."""
    words = candidate.lower().strip().split()
    if not candidate or not references:
        raise ValueError("Invalid inputs")
    ref_lengths = [len(r.lower().strip().split()) for r in references]
    closest = ref_lengths[0]
    for length in ref_lengths[1:]:
        if abs(length - len(words)) < abs(closest - len(words)):
            closest = length

    def grams(tokens: list[str], n: int) -> list[str]:
        return [" ".join(tokens[i:i + n]) for i in range(len(tokens) - n + 1)] if 0 < n <= len(tokens) else []

    total = 0.0
    for n in range(1, 5):
        cand = Counter(grams(words, n))
        clipped = 0
        for reference in references:
            ref = Counter(grams(reference.lower().strip().split(), n))
            clipped = max(clipped, sum(min(c, ref[g]) for g, c in cand.items()))
        count = sum(cand.values())
        precision = clipped / count if count else 0.0
        total += 0.25 * math.log(precision if precision else 1e-7)
    penalty = 1.0 if len(words) > closest else math.exp(1 - len(words) / closest) if closest else 1.0
    return penalty * math.exp(total)


def bleu(text: str, value: Any, threshold: float | None, negate: bool) -> Verdict:
    """src/assertions/bleu.ts ``handleBleuScore`` (threshold default 0.5)."""
    limit = 0.5 if threshold is None else threshold
    try:
        score = bleu_score(text, value if isinstance(value, list) else [value])
    except ValueError as exc:  # promptfoo's assertion errors: a failed assertion
        return False, 0.0, str(exc)
    passed = (score >= limit) != negate
    return passed, 1 - score if negate else score, f"BLEU score {score:.4f} vs threshold {limit:g}"


def check(entry: dict[str, Any], text: str) -> Verdict:
    """One ``promptfoo`` entry on the answer text."""
    kind, value, threshold, negate = entry["type"], entry.get("value"), entry.get("threshold"), bool(
        entry.get("negate"))
    if kind == "is-json":
        return is_json(text, negate)
    if kind == "contains-json":
        return contains_json(text, negate)
    if kind == "levenshtein":
        return levenshtein(text, str(value), threshold, negate)
    if kind == "rouge-n":
        return rouge_n(text, str(value), threshold, negate)
    if kind == "bleu":
        return bleu(text, value, threshold, negate)
    raise ValueError(f"unknown promptfoo check {kind!r}")


__all__ = ["bleu_score", "check", "extract_json_objects", "levenshtein_distance", "rouge_n_score",
           "treebank_tokenize"]
