"""The persisted verdict for one (run, scenario, model, epoch) pair."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# Stored outputs are capped so that a runaway answer cannot bloat the database or a report; the cap is
# defined with the tool-call record, a layer below, because live tools cut their answers to it too.
from evaljobs.providers import OUTPUT_CAP

PASSED = "passed"
FAILED = "failed"
ERRORED = "errored"
STATUSES = (PASSED, FAILED, ERRORED)


@dataclass
class Result:
    scenario_key: str
    model: str
    status: str
    score: float = 0.0
    scores: dict[str, float] = field(default_factory=dict)
    fault: str | None = None
    output: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    duration_ms: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    #: USD; None when a model's price is unknown (an unknown cost is never shown as $0).
    cost: float | None = 0.0
    attempts: int = 1
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    cached: bool = False
    #: Time to the first token of the first provider call (streamed calls only), ms.
    ttft_ms: float | None = None
    #: Sum of the provider call latencies, ms.
    latency_ms: float | None = None
    #: Which repetition of the pair this is (``--epochs N``: 0 … N-1); part of the pair's identity.
    epoch: int = 0
    #: ``--reuse``: the run whose evaluation this row is a copy of (None: evaluated in this run).
    reused_from: str | None = None
    #: What decides this pair's verdict (``catalog.digest.scenario_verdict_digest``): the digest of the
    #: scenario it was graded against (its conversation, expectations, judge rubric and graders) with, for a
    #: judged scenario, the judge model its run judges it with; the store fills it in. None: a row stored
    #: before it was kept (its run's snapshot and options still tell it). ``compare`` reads it: a pair whose
    #: scenario or judge changed between two runs is "changed", never a regression or a fix.
    scenario_digest: str | None = None
    #: Parts of ``input_tokens`` read from / written to the provider's prompt cache (priced apart).
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    #: Part of ``output_tokens`` spent reasoning, where the provider reported it (None: not reported).
    reasoning_tokens: int | None = None
    #: USD prompt caching saved (its cost without caching minus ``cost``); None when a price is unknown.
    cache_saving: float | None = 0.0
    #: The model version(s) the provider said answered (``model`` in the response, OpenAI's
    #: ``system_fingerprint`` in parentheses), comma-separated; None when it did not say.
    answered_by: str | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"result status must be one of {STATUSES}, not {self.status!r}")
        if self.output and len(self.output) > OUTPUT_CAP:
            self.output = self.output[:OUTPUT_CAP] + "…[truncated]"

    @property
    def pair(self) -> tuple[str, str]:
        """(scenario, model): what the epochs of one pair share (reports group by it)."""
        return (self.scenario_key, self.model)

    @property
    def ident(self) -> tuple[str, str, int]:
        """(scenario, model, epoch): the identity of one row (the unique key within a run)."""
        return (self.scenario_key, self.model, self.epoch)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def errored(cls, scenario_key: str, model: str, reason: str, *, attempts: int = 1,
                duration_ms: int = 0, epoch: int = 0) -> "Result":
        """A pair that could not be evaluated still gets a row, so the barrier completes."""
        return cls(scenario_key=scenario_key, model=model, status=ERRORED, score=0.0,
                   fault="run_error", error=reason[:2000], attempts=attempts, duration_ms=duration_ms,
                   epoch=epoch)
