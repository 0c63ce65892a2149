"""promptfoo's built-in assertions that are more than a substring or a regex, as promptfoo computes them.

Each function follows the promptfoo source it names (read at the version the
parity suite pins, ``tests/data/promptfoo/SOURCE``) and returns promptfoo's
``(pass, score, reason)``; ``negate`` is promptfoo's ``not-`` prefix
(``inverse``), which flips the pass and, where promptfoo does, the score.

Pure code, no process and no network: :mod:`evaljobs.evaluation.weighted` calls
:func:`check` for an entry ``{"kind": "promptfoo", "type": ..., "value": ...}``.
"""
from __future__ import annotations

import bisect
import json
import math
import re
import sys
from collections import Counter
from typing import Any, Iterator, cast

import yaml

from evaljobs.catalog import yaml12
from evaljobs.evaluation import grading_deadline

Verdict = tuple[bool, float, str]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _json_parse(text: str) -> Any:
    """``JSON.parse``: Python's json without NaN/Infinity (JavaScript refuses them); integers are kept as
    text (JavaScript reads a 5,000-digit integer, Python's ``int`` refuses it)."""
    return json.loads(text, parse_constant=_reject_constant, parse_int=str)


_JSON_SPACE = re.compile(r"[ \t\n\r]*")
_JSON_SCALAR = re.compile(r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"'
                          r"|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|true|false|null")
_JSON_KEY = re.compile(r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"[ \t\n\r]*:')


def _space(text: str, pos: int) -> int:
    """Past the JSON whitespace at ``pos``."""
    return cast(re.Match, _JSON_SPACE.match(text, pos)).end()


def _json_valid(text: str) -> bool:
    """Whether ``text`` is JSON, read without recursion: JavaScript's ``JSON.parse`` takes any depth
    (200,000 nested arrays parse in V8), where Python's json stops at its recursion limit."""
    pos = _space(text, 0)
    closers: list[str] = []
    steps = 0
    while True:
        steps += 1
        if not steps % (grading_deadline.EVERY * 16):
            grading_deadline.checkpoint("is-json")
        char = text[pos:pos + 1]  # a value is due here
        if char in ("[", "{"):
            pos = _space(text, pos + 1)
            if text[pos:pos + 1] == ("]" if char == "[" else "}"):
                pos += 1
            else:
                closers.append("]" if char == "[" else "}")
                if char == "{":
                    key = _JSON_KEY.match(text, pos)
                    if key is None:
                        return False
                    pos = _space(text, key.end())
                continue
        else:
            scalar = _JSON_SCALAR.match(text, pos)
            if scalar is None:
                return False
            pos = scalar.end()
        while True:  # a value ended: a comma, a closer, or the end of the text
            pos = _space(text, pos)
            if not closers:
                return pos == len(text)
            char = text[pos:pos + 1]
            if char == closers[-1]:
                closers.pop()
                pos += 1
                continue
            if char != ",":
                return False
            pos = _space(text, pos + 1)
            if closers[-1] == "}":
                key = _JSON_KEY.match(text, pos)
                if key is None:
                    return False
                pos = _space(text, key.end())
            break


def is_json(text: str, negate: bool) -> Verdict:
    """src/assertions/json.ts ``handleIsJson`` (no schema): ``JSON.parse(output)`` succeeds."""
    try:
        _json_parse(text)
        valid = True
    except ValueError:
        valid = False
    except RecursionError:  # nested deeper than Python's json reads: read again without recursion
        valid = _json_valid(text)
    passed = valid != negate
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


#: promptfoo's ``maxJsonLength``: a candidate is read at most this far past its ``{``.
MAX_JSON_LENGTH = 100_000
_BRACES = re.compile(r"[{}]")
_COLLECTION_KEY = re.compile(r"\{[ \t\r\n]*[{\[]")


def _candidates(text: str) -> Iterator[tuple[int, int, int]]:
    """promptfoo's candidates, in its order: ``(start, end, braces to append)`` for each ``{`` that gets a
    parse. promptfoo scans forward from every ``{`` counting braces (quadratic on ``{{{…``); one pass with
    a stack finds the same end: the matching ``}`` when it lies within :data:`MAX_JSON_LENGTH`, else the
    end of the text or of the window, closed with as many ``}`` as are still open there."""
    n = len(text)
    opens = [0]  # opens[k]: '{' among the first k braces; positions[k]: where the k-th brace is
    positions: list[int] = []
    matched: dict[int, int] = {}
    stack: list[int] = []
    for found in _BRACES.finditer(text):
        at = found.start()
        positions.append(at)
        if text[at] == "{":
            opens.append(opens[-1] + 1)
            stack.append(at)
        else:
            opens.append(opens[-1])
            if stack:
                matched[stack.pop()] = at

    def balance(begin: int, stop: int) -> int:  # '{' minus '}' in text[begin:stop]
        lo, hi = bisect.bisect_left(positions, begin), bisect.bisect_left(positions, stop)
        return 2 * (opens[hi] - opens[lo]) - (hi - lo)

    for start in positions:
        if text[start] != "{":
            continue
        close = matched.get(start)
        if close is not None and close - start < MAX_JSON_LENGTH:
            yield start, close + 1, 0
        elif start + 1 < n:  # promptfoo reads at least one character past the '{'
            stop = min(start + MAX_JSON_LENGTH, n)
            yield start, stop, balance(start, stop)


#: The YAML reader's (libyaml's) deepest flow nesting: a candidate that goes deeper is refused by it.
YAML_MAX_DEPTH = 1000
_LEXEMES = re.compile(r"[{}\[\]\"'#!&*]")
_DOUBLE_QUOTED = re.compile(r'(?:[^"\\]|\\.)*"', re.DOTALL)
_SINGLE_QUOTED = re.compile(r"(?:[^']|'')*'")


class _Depths:
    """Which candidates the YAML reader is certain to refuse for their nesting, found without reading them.

    One pass over the answer reads it as the reader reads a flow collection: a quote right after
    ``{``, ``[``, ``,`` or ``:`` opens a quoted scalar (its brackets are text), any other bracket is a
    flow indicator (plain scalars end at them in flow context); a quote anywhere else, ``#``, ``!``,
    ``&`` or ``*`` is a place this reading may not hold (a comment, a tag...), where it answers
    nothing. A candidate whose count of flow brackets reaches :data:`YAML_MAX_DEPTH` + 1 before its
    first ``{`` closes and before such a place is refused by the reader ("exceeded maximum nesting
    depth"), or by an error earlier on: refused all the same. The 3,000 nested objects of the issue
    were read to depth 1,000 once for each of their 2,000 deepest candidates."""

    def __init__(self, text: str):
        self.text = text
        self.at_level: dict[int, list[int]] = {}  # level -> positions of the brackets that leave it there
        self.level_before: dict[int, int] = {}  # position of a '{' outside quotes -> the level before it
        self.unsure: list[int] = []  # where this reading may not be the reader's
        level, pos, quoted_end = 0, 0, -1
        while True:
            found = _LEXEMES.search(text, pos)
            if found is None:
                break
            at, char = found.start(), found.group()
            pos = at + 1
            if char in "\"'":
                back = at - 1
                while back >= 0 and text[back] in " \t\r\n":
                    back -= 1
                before = text[back] if back >= 0 else ""
                # after ':' only when that ':' is a value indicator: followed by a space, or right after
                # a quoted key (JSON's "k":"v"); 'a:"b"' is one plain scalar to the reader
                indicator = before in "{[," or (before == ":" and (back < at - 1 or back == quoted_end))
                closing = (_DOUBLE_QUOTED if char == '"' else _SINGLE_QUOTED).match(text, at + 1)
                if before and indicator and closing is not None:
                    pos = quoted_end = closing.end()
                    continue
                self.unsure.append(at)
            elif char in "#!&*":
                self.unsure.append(at)
            elif char in "{[":
                if char == "{":
                    self.level_before[at] = level
                level += 1
                self.at_level.setdefault(level, []).append(at)
            else:
                level -= 1
                self.at_level.setdefault(level, []).append(at)

    def refused(self, start: int, stop: int) -> bool:
        base = self.level_before.get(start)
        if base is None:  # a '{' inside a quoted scalar of this reading: no answer
            return False
        deep = self._next(base + YAML_MAX_DEPTH + 1, start)
        if deep is None or deep >= stop:
            return False
        closed = self._next(base, start)
        unsure = bisect.bisect_right(self.unsure, start)
        clear = unsure == len(self.unsure) or self.unsure[unsure] > deep
        return clear and (closed is None or closed > deep)

    def _next(self, level: int, after: int) -> int | None:
        positions = self.at_level.get(level)
        if not positions:
            return None
        index = bisect.bisect_right(positions, after)
        return positions[index] if index < len(positions) else None


def extract_json_objects(text: str) -> list[Any]:
    """src/util/json.ts ``extractJsonObjects``: each ``{`` starts a candidate, read up to its balanced ``}``
    (braces still open at the end of the text are closed), parsed as YAML in JSON mode; after an object
    is found, the search resumes past it.

    Same candidates, same order, same parser as promptfoo's, found in one pass (:func:`_candidates`); a
    candidate whose first entry is itself a ``{…}`` or ``[…]`` is a mapping keyed by a collection, which
    the YAML reader always refuses (an unhashable key), so it is refused without being read — the
    ``{{{{…`` answers that took minutes. What stays superlinear (each of thousands of nested candidates
    read up to the reader's nesting limit) is cut by the pair's deadline, checked between candidates."""
    found: list[Any] = []
    resume = 0
    depths: _Depths | None = None
    for index, (start, stop, missing) in enumerate(_candidates(text)):
        if start < resume:
            continue
        if not index % 64:
            grading_deadline.checkpoint("contains-json")
        if _COLLECTION_KEY.match(text, start, stop):
            continue
        candidate = text[start:stop] + "}" * missing
        if "//" in candidate:
            candidate = _slash_comments_to_hash(candidate)
        elif index >= 16:  # many candidates: the answers the nesting check is for
            depths = depths or _Depths(text)
            if depths.refused(start, stop):
                continue
        try:
            parsed = yaml12.load(candidate)
        except (yaml.YAMLError, ValueError, RecursionError):
            continue
        if isinstance(parsed, (dict, list)):
            found.append(parsed)
            resume = stop
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


def _code_units(text: str) -> list[int]:
    """The UTF-16 code units of ``text``: what JavaScript's ``charCodeAt`` walks."""
    data = text.encode("utf-16-le" if sys.byteorder == "little" else "utf-16-be")
    return memoryview(data).cast("H").tolist()


def levenshtein_distance(a: str, b: str, bound: int | None = None) -> int:
    """Edit distance over UTF-16 code units, as ``fastest-levenshtein``'s ``distance`` counts them.

    With ``bound``, a distance over it is only known to be over it: the value returned is then some
    number above ``bound`` (the verdict ``distance <= threshold`` needs no more). That is what makes it
    linear in the answer for the thresholds tests use: the common prefix and suffix never change the
    distance; a length difference over the bound decides alone; otherwise only the diagonal band of
    the bound's width can hold a path within it (Ukkonen), ``O(n·bound)``. Without a bound, or with one
    as wide as the strings, Myers' bit-parallel algorithm (the one fastest-levenshtein runs) on Python
    integers, ``O(n·m/64)`` word operations. Either checks the pair's deadline as it goes."""
    x, y = _code_units(a), _code_units(b)
    start, shortest = 0, min(len(x), len(y))
    while start < shortest and x[start] == y[start]:
        start += 1
    end = 0
    while end < shortest - start and x[len(x) - 1 - end] == y[len(y) - 1 - end]:
        end += 1
    x, y = x[start:len(x) - end], y[start:len(y) - end]
    if len(x) < len(y):
        x, y = y, x
    if not y or (bound is not None and len(x) - len(y) > bound):
        return len(x) if not y else len(x) - len(y)
    if bound is not None and (2 * bound + 1) * 1400 < len(y) + 2000:  # the band is the cheaper of the two
        return _banded_distance(x, y, bound)
    return _myers_distance(x, y)


def _banded_distance(x: list[int], y: list[int], bound: int) -> int:
    """Ukkonen's band: cells more than ``bound`` off the diagonal cannot be on a path within ``bound``;
    returns the distance, or ``bound + 1`` once every cell of a row is over it."""
    over = bound + 1
    m = len(y)
    previous = [j if j <= bound else over for j in range(m + 1)]
    current = [over] * (m + 1)
    for i, cx in enumerate(x, 1):
        if not i % grading_deadline.EVERY:
            grading_deadline.checkpoint("levenshtein")
        lo, hi = max(1, i - bound), min(m, i + bound)
        left = (i if i <= bound else over) if lo == 1 else over
        current[lo - 1] = left
        best = left
        for j in range(lo, hi + 1):
            cell = previous[j - 1] + (cx != y[j - 1])
            up = previous[j] + 1
            if up < cell:
                cell = up
            if left + 1 < cell:
                cell = left + 1
            current[j] = left = cell
            if cell < best:
                best = cell
        if best > bound:
            return over
        previous, current = current, previous
        if hi < m:
            previous[hi + 1] = over  # beyond this row's band: never read as a real cell
    return min(previous[m], over)


def _myers_distance(x: list[int], y: list[int]) -> int:
    """Myers/Hyyrö bit-parallel edit distance: ``y`` is the bit vector (one bit a code unit), ``x`` is
    walked one code unit a step."""
    m = len(y)
    positions: dict[int, list[int]] = {}
    for j, unit in enumerate(y):
        positions.setdefault(unit, []).append(j)
    wanted = set(x)
    peq: dict[int, int] = {}
    for step, (unit, where) in enumerate(positions.items()):
        if not step % grading_deadline.EVERY:
            grading_deadline.checkpoint("levenshtein")
        if unit in wanted:
            bits = bytearray(where[-1] // 8 + 1)
            for j in where:
                bits[j >> 3] |= 1 << (j & 7)
            peq[unit] = int.from_bytes(bits, "little")
    full, last = (1 << m) - 1, 1 << (m - 1)
    pv, mv, score = full, 0, m
    for i, unit in enumerate(x):
        if not i % grading_deadline.EVERY:
            grading_deadline.checkpoint("levenshtein")
        eq = peq.get(unit, 0)
        xv = eq | mv
        xh = (((eq & pv) + pv) ^ pv) | eq
        ph = mv | (~(xh | pv) & full)
        mh = pv & xh
        if ph & last:
            score += 1
        elif mh & last:
            score -= 1
        ph = ((ph << 1) | 1) & full
        mh = (mh << 1) & full
        pv = mh | (~(xv | ph) & full)
        mv = ph & xv
    return score


def levenshtein(text: str, value: str, threshold: float | None, negate: bool) -> Verdict:
    """src/assertions/levenshtein.ts: passes when the distance is at most ``threshold`` (default 5)."""
    limit = 5 if threshold is None else threshold
    bound = math.floor(limit) if math.isfinite(limit) and limit >= 0 else None
    distance = levenshtein_distance(text, value, bound)
    passed = (distance <= limit) != negate
    shown = f"over {limit:g}" if bound is not None and distance > bound else str(distance)
    return passed, 1.0 if passed else 0.0, ("Assertion passed" if passed else
                                           f"Levenshtein distance {shown} vs threshold {limit:g}")


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
    parts: list[str] = []
    before = ""  # the last character written so far (joining the parts for it at each quote was quadratic)
    for index, quote in enumerate(re.split(r'(``|\'\'|")', text)):
        if index % 2 == 0:
            parts.append(quote)
            before = quote[-1:] or before
            continue
        inside = quote == "``" or (not inside and (not before or before in " ([{<"))
        parts.append(" `` " if inside else " '' ")
        before = " "
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
