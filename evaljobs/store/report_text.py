"""The stored text of a report: exactly what ``store.schema._dumps(report)`` writes, in less time.

A 4,000-pair report is mostly its ``results``: 4,000 entries with the same keys, and encoding them
was most of the time the JSON took (a third of the finalize). An entry's first part (scenario key,
model, epoch) is different in every entry, but its rest (status, score, fault, error, duration,
cost, cached) takes a handful of distinct values in a run, so that rest is encoded once per
distinct value by the standard encoder and reused; the first part is two escaped strings and an
int. Only an entry of exactly the shape ``build_report`` makes, with values of exactly the types
it puts there, takes this path; anything else (the other sections, a reused or judged entry, a
value of another type) goes through the standard encoder, so the text is the same in every case.
``tests/store/test_finalize_fast.py`` compares the two on crafted entries.
"""
from __future__ import annotations

import json
import math
from json.encoder import encode_basestring
from typing import Any

#: ``store.schema._dumps`` (compact separators, UTF-8 kept) without the cycle check: a report is
#: built from plain values and cannot hold a cycle, and the check costs an ``id()`` in a dict per container.
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False).encode
_REST = ("status", "score", "fault", "error", "duration_ms", "cost", "cached")
_WITH_EPOCH = ("scenario_key", "model", "epoch", *_REST)
_WITHOUT_EPOCH = ("scenario_key", "model", *_REST)
_STR_OR_NONE = (str, type(None))
_FLOAT_OR_NONE = (float, type(None))


def report_text(report: Any) -> str:
    """``json.dumps(report, ensure_ascii=False, separators=(",", ":"))``, the same text."""
    if type(report) is not dict or not all(type(key) is str for key in report):
        return _ENCODE(report)
    parts = []
    for key, value in report.items():
        text = _results(value) if key == "results" and type(value) is list else _ENCODE(value)
        parts.append(f"{encode_basestring(key)}:{text}")
    return "{" + ",".join(parts) + "}"


def _results(entries: list[Any]) -> str:
    strings: dict[str, str] = {}
    rests: dict[tuple, str] = {}
    out: list[str] = []
    add = out.append
    for entry in entries:
        if type(entry) is not dict:
            add(_ENCODE(entry))
            continue
        keys = tuple(entry)
        if keys == _WITH_EPOCH:
            epoch = entry["epoch"]
            if type(epoch) is not int:
                add(_ENCODE(entry))
                continue
            head = f',"epoch":{epoch},'
        elif keys == _WITHOUT_EPOCH:
            head = ","
        else:
            add(_ENCODE(entry))
            continue
        key, model = entry["scenario_key"], entry["model"]
        status, score, fault, error = entry["status"], entry["score"], entry["fault"], entry["error"]
        duration, cost, cached = entry["duration_ms"], entry["cost"], entry["cached"]
        # exact types only: equal values of these types have the same JSON, except 0.0 and -0.0,
        # told apart by their sign below (1 == 1.0 == True across types cannot meet here)
        if not (type(key) is str and type(model) is str and type(status) is str and type(score) is float
                and type(duration) is int and type(cached) is bool and type(fault) in _STR_OR_NONE
                and type(error) in _STR_OR_NONE and type(cost) in _FLOAT_OR_NONE):
            add(_ENCODE(entry))
            continue
        memo = (
            status,
            score,
            fault,
            error,
            duration,
            cost,
            cached,
            not score and math.copysign(1.0, score) < 0,
            not cost and cost is not None and math.copysign(1.0, cost) < 0,
        )
        rest = rests.get(memo)
        if rest is None:
            rest = rests[memo] = _ENCODE({"status": status, "score": score, "fault": fault, "error": error,
                                          "duration_ms": duration, "cost": cost, "cached": cached})[1:]
        key_text = strings.get(key)
        if key_text is None:
            key_text = strings[key] = encode_basestring(key)
        model_text = strings.get(model)
        if model_text is None:
            model_text = strings[model] = encode_basestring(model)
        add(f'{{"scenario_key":{key_text},"model":{model_text}{head}{rest}')
    return "[" + ",".join(out) + "]"


__all__ = ["report_text"]
