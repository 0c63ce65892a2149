"""One pair's transcript, and two models' answers side by side: what the transcript and diff pages show.

The transcript lays the stored conversation out as it happened: each message in order; each model turn
with its provider call's timing (started at, took, first token, tokens, why it stopped) and, when the run
kept them (``store_transcripts``), the raw request and response of that call; each tool result with the
time the tool took; then the judge's prompt and answer. The n-th assistant message is the n-th provider
call of the stored timeline (both are kept from their ends when a long conversation was cut).
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from evaljobs import store
from evaljobs.store import pages as store_pages
from evaljobs.store import RunRow
from evaljobs.view.queries import NotFound, catalog_of


@dataclass
class Step:
    """One message of the conversation, with the provider call that produced it (model turns) or the tool's
    timing (tool results)."""

    role: str
    content: Any
    tool_calls: list[tuple[str, Any]] = field(default_factory=list)
    call: dict[str, Any] | None = None
    tool: dict[str, Any] | None = None


@dataclass
class TranscriptPage:
    run: RunRow
    key: str
    model: str
    epoch: int
    result: Any  # Result
    scenario: Any  # catalog Scenario | None
    steps: list[Step]
    #: Every epoch recorded for this pair (links between them).
    epochs: list[int]
    #: Provider calls of the timeline that kept their raw bodies.
    raw_calls: int


def _result_of(run_id: str, key: str, model: str) -> tuple[RunRow, list[Any]]:
    try:
        run = store_pages.run(run_id)
    except store.UnknownRun as exc:
        raise NotFound(str(exc)) from None
    mine = [r for r in store_pages.scenario_results(run_id, key) if r.model == model]
    if not mine:
        raise NotFound(f"run {run_id} has no result for {key!r} × {model}")
    return run, mine


def steps_of(details: dict[str, Any]) -> list[Step]:
    """The conversation as steps, each model turn paired with its timeline entry, each tool result with its
    tool."""
    messages = [m for m in details.get("messages") or [] if isinstance(m, dict)]
    timeline = [t for t in details.get("timeline") or [] if isinstance(t, dict)]
    assistants = sum(1 for m in messages if m.get("role") == "assistant")
    index = len(timeline) - assistants  # both lists keep their ends when a conversation was cut
    steps: list[Step] = []
    tools: list[dict[str, Any]] = []
    for message in messages:
        role = str(message.get("role") or "?")
        calls = []
        for call in message.get("tool_calls") or []:
            function = (call.get("function") or call) if isinstance(call, dict) else {}
            calls.append((str(function.get("name") or "?"), function.get("arguments")))
        step = Step(role=role, content=message.get("content"), tool_calls=calls)
        if role == "assistant":
            step.call = timeline[index] if 0 <= index < len(timeline) else None
            tools = list((step.call or {}).get("tools") or [])
            index += 1
        elif role == "tool" and tools:
            step.tool = tools.pop(0)
        steps.append(step)
    return steps


def transcript_page(run_id: str, key: str, model: str, epoch: int | None = None) -> TranscriptPage:
    run, mine = _result_of(run_id, key, model)
    chosen = next((r for r in mine if r.epoch == epoch), None) if epoch is not None else mine[0]
    if chosen is None:
        raise NotFound(f"run {run_id} has no epoch {epoch} of {key!r} × {model}")
    catalog = catalog_of(run.digest)
    scenario = catalog.scenario(key) if catalog is not None and key in catalog else None
    details = chosen.details if isinstance(chosen.details, dict) else {}
    steps = steps_of(details)
    raw = sum(1 for t in details.get("timeline") or [] if isinstance(t, dict) and t.get("request"))
    return TranscriptPage(run=run, key=key, model=model, epoch=chosen.epoch, result=chosen, scenario=scenario,
                          steps=steps, epochs=[r.epoch for r in mine], raw_calls=raw)


@dataclass
class DiffLine:
    """One row of a side-by-side diff: the left and right text (None: nothing on that side) and how they
    differ."""

    kind: str  # same | changed | only-left | only-right
    left: str | None
    right: str | None


@dataclass
class DiffPage:
    run: RunRow
    key: str
    left: Any  # Result
    right: Any  # Result
    lines: list[DiffLine]
    models: list[str]


def diff_lines(left: str, right: str) -> list[DiffLine]:
    """Line by line, aligned: equal lines side by side, changed blocks row by row."""
    a, b = left.splitlines(), right.splitlines()
    out: list[DiffLine] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            out += [DiffLine("same", x, y) for x, y in zip(a[i1:i2], b[j1:j2])]
            continue
        for k in range(max(i2 - i1, j2 - j1)):
            x = a[i1 + k] if i1 + k < i2 else None
            y = b[j1 + k] if j1 + k < j2 else None
            kind = (
                "changed"
                if x is not None and y is not None
                else "only-left"
                if x is not None
                else "only-right"
            )
            out.append(DiffLine(kind, x, y))
    return out


def diff_page(run_id: str, key: str, left: str, right: str, epoch: int = 0) -> DiffPage:
    run, lefts = _result_of(run_id, key, left)
    _, rights = _result_of(run_id, key, right)
    a = next((r for r in lefts if r.epoch == epoch), lefts[0])
    b = next((r for r in rights if r.epoch == epoch), rights[0])
    return DiffPage(run=run, key=key, left=a, right=b, lines=diff_lines(a.output or a.error or "",
                                                                       b.output or b.error or ""),
                    models=list(run.models))


__all__ = ["DiffLine", "DiffPage", "Step", "TranscriptPage", "diff_lines", "diff_page", "steps_of",
           "transcript_page"]
