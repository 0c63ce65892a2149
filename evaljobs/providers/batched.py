"""A pair's provider calls through a batch API: park the request, answer the turn once the batch has.

Kept apart from :mod:`evaljobs.providers.batches` (the HTTP client of the batch APIs) so the
evaluation layer can know :class:`InBatch` without importing httpx (start-up time).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from evaljobs.providers.cache import _decode, _encode
from evaljobs.providers.completion import Completion
from evaljobs.network.errors import PermanentError


class BatchRequest(NamedTuple):
    """One chat request of a batch: the same inputs as :meth:`ChatClient.complete`, and its custom id."""

    custom_id: str
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    extra: dict[str, Any] | None = None



# -- a pair's calls through a batch ------------------------------------------------------------------


class InBatch(Exception):
    """The call's request waits in a provider batch: the pair stops here and is evaluated again (from
    the start, earlier turns answered from the store) once the batch has answered it."""

    def __init__(self, custom_id: str):
        super().__init__(f"request {custom_id} waits in a provider batch")
        self.custom_id = custom_id


@dataclass
class BatchedCompletion(Completion):
    """A completion that a provider batch answered (billed at the batch price)."""

    batched: bool = True


class BatchLane(Protocol):
    """Where a batched pair's requests and answers live (the pipeline binds one backed by the store).

    ``answer`` is the stored outcome of a request: None (not answered yet), ``("ok", encoded)``
    or ``("error", reason)``. ``parked`` says whether a request was parked at all (answered or not).
    ``park`` records a request to be batched (once per custom id: a second park of the same id
    changes nothing) and arranges for it to be submitted.
    """

    def answer(self, custom_id: str) -> tuple[str, str] | None: ...

    def parked(self, custom_id: str) -> bool: ...

    def park(self, custom_id: str, provider: str, request: BatchRequest) -> None: ...


#: The pair whose calls are being made in this thread/task: (run id, scenario key, model spec, epoch).
_pair: ContextVar[tuple[str, str, str, int] | None] = ContextVar("evaljobs_batch_pair", default=None)


@contextmanager
def for_pair(run_id: str, scenario_key: str, model: str, epoch: int) -> Iterator[None]:
    """Name the pair whose calls are made inside this block (the custom ids of its batched turns)."""
    token = _pair.set((run_id, scenario_key, model, int(epoch)))
    try:
        yield
    finally:
        _pair.reset(token)


def current_pair() -> tuple[str, str, str, int] | None:
    """(run id, scenario key, model spec, epoch) of the pair whose calls this thread/task makes, if any."""
    return _pair.get()


def custom_id(run_id: str, scenario_key: str, model: str, epoch: int, turn: int, kind: str = "") -> str:
    """The custom id of one pair-turn: the same on every evaluation of the pair (deterministic), so a
    request parked twice, or after a crash, is one request (``^[A-Za-z0-9_-]{1,64}$``). ``kind``
    (``judge``) keeps the judge's calls of a pair apart from its model's turns."""
    digest = hashlib.sha256(json.dumps([run_id, scenario_key, model, epoch, *([kind] if kind else [])],
                                       ensure_ascii=False).encode())
    return f"ej-{digest.hexdigest()[:40]}-t{turn}"


class BatchingClient:
    """A chat client for one model whose calls go through its provider's batch API.

    ``complete`` answers a turn from the lane when the batch answered it, and otherwise parks the
    request and raises :class:`InBatch`. The turn is the number of assistant messages so far, so
    each turn of a conversation is its own request, and a replay of the conversation meets the
    turns already answered first.
    """

    def __init__(self, lane: BatchLane, provider: str, kind: str = ""):
        self.lane = lane
        self.provider = provider
        #: ``judge``: a judge's calls, numbered by the order this client makes them (a judge asks again
        #: with the same messages when it cannot read an answer), apart from the model's turns, and
        #: told apart by their messages (two rubrics of one pair are two judgements, two requests).
        self.kind = kind
        self.calls = 0

    def _custom_id(self, messages: list[dict[str, Any]]) -> str:
        pair = _pair.get()
        if pair is None:
            raise RuntimeError("a batched call outside evaljobs.providers.batches.for_pair")
        if not self.kind:
            return custom_id(*pair, sum(1 for m in messages if m.get("role") == "assistant"))
        asked = hashlib.sha256(json.dumps(messages, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
        return custom_id(*pair, self.calls, f"{self.kind}-{asked[:16]}")

    def requested(self, messages: list[dict[str, Any]]) -> bool:
        """Whether the call :meth:`complete` would make next with ``messages`` was parked before, by an
        earlier evaluation of the pair: it was paid for (and counted against a judge cap) then."""
        return self.lane.parked(self._custom_id(messages))

    def complete(
        self,
        model: str,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        extra: dict[str, Any] | None = None,
        **_: Any,
    ) -> Completion:
        request_id = self._custom_id(messages)
        self.calls += 1
        found = self.lane.answer(request_id)
        if found is None:
            self.lane.park(
                request_id,
                self.provider,
                BatchRequest(request_id, model, messages, tools, temperature, max_tokens, extra),
            )
            raise InBatch(request_id)
        kind, value = found
        if kind != "ok":
            raise PermanentError(value)
        completion = _decode(value, 0.0)
        return BatchedCompletion(**{f: getattr(completion, f) for f in Completion.__dataclass_fields__})


def encode(completion: Completion) -> str:
    """A completion as the lane stores it (the response cache's encoding)."""
    return _encode(completion)


def request_json(request: BatchRequest) -> str:
    return json.dumps({"model": request.model, "messages": request.messages, "tools": request.tools,
                       "temperature": request.temperature, "max_tokens": request.max_tokens,
                       "extra": request.extra}, ensure_ascii=False, separators=(",", ":"))


def request_from_json(custom: str, text: str) -> BatchRequest:
    data = json.loads(text)
    return BatchRequest(custom, data["model"], data["messages"], data.get("tools"), data.get("temperature"),
                        data.get("max_tokens"), data.get("extra"))


__all__ = [
    "BatchLane",
    "BatchRequest",
    "BatchedCompletion",
    "BatchingClient",
    "InBatch",
    "current_pair",
    "custom_id",
    "encode",
    "for_pair",
    "request_from_json",
    "request_json",
]
