"""The catalog's data model: what a validated catalog is made of (frozen dataclasses).

Everything here is plain data with no I/O, so every layer can hold and pass
scenarios. Reading and validating a catalog file is :mod:`evaljobs.catalog.load`
and :mod:`evaljobs.catalog.validate`; the canonical digest is
:mod:`evaljobs.catalog.digest`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from evaljobs.catalog.patterns import problem as pattern_problem
from evaljobs.errors import UsageError

DEFAULT_MAX_TURNS = 6
DEFAULT_PASS_THRESHOLD = 0.7

#: How ``expect.ideal`` answers are compared: OpenAI evals' Match / Includes / FuzzyMatch, and Inspect's
#: includes() / match() / exact() / pattern(REGEX) / answer(letter|word|line) (evaljobs.evaluation.reference).
IDEAL_GRADERS = (
    "match",
    "includes",
    "includes_ignore_case",
    "fuzzy_match",
    "inspect_includes",
    "inspect_match",
    "inspect_exact",
    "inspect_pattern",
    "inspect_answer",
)
#: Graders written ``name:argument``: the regular expression of ``inspect_pattern``, the answer type of
#: ``inspect_answer``.
IDEAL_GRADER_ARGUMENTS = {"inspect_pattern": "a regular expression", "inspect_answer": "letter, word or line"}


def ideal_grader_problem(grader: object) -> str | None:
    """Why ``grader`` is not a usable ``ideal_grader`` (``None`` when it is): one line for an error
    message."""
    if not isinstance(grader, str):
        return f"must be one of {', '.join(IDEAL_GRADERS)}, not {grader!r}"
    name, colon, argument = grader.partition(":")
    if name not in IDEAL_GRADERS:
        return f"must be one of {', '.join(IDEAL_GRADERS)}, not {grader!r}"
    if name not in IDEAL_GRADER_ARGUMENTS:
        return f"{name} takes no argument (write {name!r})" if colon else None
    if not argument:
        example = "inspect_answer:letter" if name == "inspect_answer" else "inspect_pattern:ANSWER: (\\w+)"
        return f"{name} needs {IDEAL_GRADER_ARGUMENTS[name]} after a colon, e.g. {example!r}"
    if name == "inspect_answer" and argument not in ("letter", "word", "line"):
        return f"inspect_answer takes letter, word or line, not {argument!r}"
    if name == "inspect_pattern":
        trouble = pattern_problem(argument)
        if trouble:
            return f"inspect_pattern's regular expression {argument!r} {trouble}"
    return None
#: ``expect.assertions`` kinds: ``builtin`` (native checks, on the transformed output if it has
#: ``transforms``), ``javascript`` (run in Node), ``python`` (run in a subprocess), ``json_schema``
#: (validated with jsonschema), ``refused`` (skipped at import under --lenient, with its reason: a
#: scenario left with nothing else to grade is reported as not gradable), and, in a ``weighted`` list
#: only, ``judge`` (one LLM-judge rubric), ``latency`` (``max_ms``) and ``set`` (a nested list with its
#: own ``threshold``: promptfoo's assert-set); ``cost`` (``max_usd``, ``negate``: the model's calls at the
#: providers file's prices, promptfoo's cost assertion) in either.
#: ``expect.diagnose``: ActiveAgent's readings of the answer's text that fail it besides its expectations
#: (:mod:`evaljobs.evaluation.diagnosis`).
DIAGNOSES = ("missing_capability", "ungrounded_answer")
ASSERTION_KINDS = (
    "builtin",
    "promptfoo",
    "javascript",
    "python",
    "json_schema",
    "refused",
    "judge",
    "latency",
    "set",
    "cost",
)


#: The key of a ``set`` assertion entry that holds its own entries (promptfoo's assert-set).
SET_ENTRIES = "assertions"

ROLES = ("system", "user", "assistant", "tool")


class CatalogError(UsageError):
    """A catalog that cannot be used. ``problems`` holds one line per problem."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True)
class Tool:
    """A tool offered to the model. Answered from ``returns`` / ``returns_by``."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    returns: Any = None
    #: {argument name: {argument value (as a string): result}}; first match wins, else ``returns``.
    returns_by: dict[str, dict[str, Any]] | None = None
    #: Live endpoints (set by later features); ``None`` for canned tools.
    http: dict[str, Any] | None = None
    mcp: dict[str, Any] | None = None

    def answer(self, arguments: dict[str, Any]) -> Any:
        """The canned answer for these arguments."""
        if self.returns_by:
            for arg, table in self.returns_by.items():
                if arg in arguments:
                    value = arguments[arg]
                    key = value if isinstance(value, str) else scalar_key(value)
                    if key in table:
                        return table[key]
        return self.returns

    def schema(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry for this tool."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}


def scalar_key(value: Any) -> str:
    """An argument value as the text key of a ``returns_by`` table."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class ExpectedTool:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Expect:
    contains: tuple[str, ...] = ()
    not_contains: tuple[str, ...] = ()
    regex: tuple[str, ...] = ()
    tools: tuple[ExpectedTool, ...] = ()
    #: The LLM judge's rubric. Its criterion (``llm_judge``) passes when the judge's score reaches
    #: ``judge_threshold`` (None: the scenario's ``pass_threshold``) and the judge did not answer
    #: ``pass: false``; it is a gate (a failed judgement fails the scenario whatever the mean) unless
    #: ``judge_gate`` is False (``judge: {gate: false}`` or ``expect.gate: false``).
    judge: str | None = None
    judge_threshold: float | None = None
    judge_gate: bool = True
    #: ActiveAgent-style patterns: a case-insensitive substring, or else a case-insensitive regex.
    #: Graded under ``contains`` / ``not_contains`` (faults ``missing_content`` / ``forbidden_content``).
    patterns: tuple[str, ...] = ()
    forbidden_patterns: tuple[str, ...] = ()
    #: ``all``: every expected tool must be called; ``any``: one of them is enough (ActiveAgent).
    tools_match: str = "all"
    #: Criteria that fail the scenario on their own, whatever the mean score.
    gates: tuple[str, ...] = ()
    #: Reference answers and how they are compared (``IDEAL_GRADERS``).
    ideal: tuple[str, ...] = ()
    ideal_grader: str = "includes"
    #: The reference answer the LLM judge compares against (``model_graded_fact``-style).
    reference: str | None = None
    #: Assertions run by an external runtime or a transform chain (promptfoo imports): plain JSON data.
    assertions: tuple[dict[str, Any], ...] = ()
    #: The scenario is graded by its ``assertions`` alone, combined as promptfoo combines a test's
    #: assertions: the score is their mean weighted by each one's ``weight`` (default 1); the scenario
    #: passes when every assertion of non-zero weight passes or, if ``threshold`` is set, when the
    #: score reaches it. See :mod:`evaljobs.evaluation.weighted`.
    weighted: bool = False
    threshold: float | None = None
    #: ActiveAgent's diagnosis heuristics this scenario applies (``DIAGNOSES``), each a fault of its own.
    diagnose: tuple[str, ...] = ()
    #: The values of the keys criteria declare whole (:mod:`evaljobs.catalog.criteria`, e.g. a token
    #: budget), by key; a key that is not set is absent.
    values: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # "Not set" has one spelling, so two equal expectations compare equal.
        if any(v is None for v in self.values.values()):
            object.__setattr__(self, "values", {k: v for k, v in self.values.items() if v is not None})

    def value(self, key: str) -> Any:
        """The value of a key a criterion declares (``None``: not set)."""
        return self.values.get(key)


@dataclass(frozen=True, slots=True)
class Scenario:
    key: str
    #: The conversation to send, without the system prompt (that is ``system``).
    messages: tuple[dict[str, Any], ...]
    system: str | None = None
    tools: tuple[Tool, ...] = ()
    expect: Expect = field(default_factory=Expect)
    tags: tuple[str, ...] = ()
    notes: str = ""
    group: str | None = None
    temperature: float | None = None
    max_turns: int = DEFAULT_MAX_TURNS
    #: Criteria names to apply; ``None`` means every criterion the scenario's expectations enable.
    criteria: tuple[str, ...] | None = None
    pass_threshold: float = DEFAULT_PASS_THRESHOLD
    #: ``((criterion, weight), ...)``: the score is the weighted mean (criteria not listed weigh 1).
    weights: tuple[tuple[str, float], ...] = ()
    #: The provider's sampling ``seed`` (OpenAI-compatible APIs take one; Anthropic's has none, so it is
    #: not sent there); None: none sent.
    seed: int | None = None
    #: Where the scenario starts in its file; not part of its meaning (excluded from equality).
    line: int | None = field(default=None, compare=False)
    #: Canonical model spec for ``llm_judge``; ``None`` means "judge with the model under test".
    judge_model: str | None = None

    @property
    def prompt(self) -> str:
        """The last user message, for display."""
        for message in reversed(self.messages):
            if message.get("role") == "user":
                content = message.get("content")
                return content if isinstance(content, str) else str(content)
        return ""

    def tool(self, name: str) -> Tool | None:
        for tool in self.tools:
            if tool.name == name:
                return tool
        return None


@dataclass(frozen=True)
class Catalog:
    """A validated catalog. Scenarios are kept sorted by key: a catalog is a *set* of
    scenarios, so reordering them in the file changes neither the digest nor what a run means.
    The order they were written in is kept apart (:attr:`order`): reports list them that way."""

    name: str
    scenarios: tuple[Scenario, ...]
    digest: str
    #: Builds :attr:`body` when it is first asked for (:func:`evaljobs.catalog.digest.build_catalog`
    #: gives it): checking a catalog needs only its digest, and the body of 100,000 scenarios took more
    #: memory than the scenarios themselves. The body follows from the fields, so it takes no part in
    #: equality.
    make_body: Callable[[], dict[str, Any]] = field(compare=False, repr=False)
    source: str = field(default="<catalog>", compare=False)
    description: str = ""
    #: ``defaults: epochs:``: how many times a run evaluates each pair unless ``--epochs`` says otherwise.
    epochs: int = 1
    #: The scenario keys in the order the catalog's author wrote them (empty: key order, as a snapshot
    #: read back has); not part of the digest nor of equality. A run stores it (``run.scenario_order``).
    written: tuple[str, ...] = field(default=(), compare=False)
    #: key -> :func:`evaljobs.catalog.digest.scenario_digest`, when the catalog was built keeping them (a
    #: snapshot read back: ``build_catalog(scenario_digests=True)``); None otherwise. Not part of equality.
    scenario_digests: dict[str, str] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        # Workers look up one scenario per message in catalogs of 10,000: index once.
        object.__setattr__(self, "_index", {s.key: s for s in self.scenarios})

    @property
    def body(self) -> dict[str, Any]:
        """The canonical, normalized catalog body: what is snapshotted and what the digest covers
        (built on first use, then kept)."""
        body: dict[str, Any] | None = self.__dict__.get("_body")
        if body is None:
            body = self.make_body()
            object.__setattr__(self, "_body", body)
        return body

    @property
    def order(self) -> tuple[str, ...]:
        """The scenario keys as the catalog lists them: as written, else (a snapshot) by key."""
        return self.written or self.keys

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(s.key for s in self.scenarios)

    def scenario(self, key: str) -> Scenario:
        """The scenario with this key (O(1)); ``KeyError`` if there is none."""
        return self._index[key]  # type: ignore[attr-defined]

    def __contains__(self, key: object) -> bool:
        try:
            return key in self._index  # type: ignore[attr-defined]
        except TypeError:
            return False


__all__ = [
    "ASSERTION_KINDS",
    "DEFAULT_MAX_TURNS",
    "DEFAULT_PASS_THRESHOLD",
    "DIAGNOSES",
    "IDEAL_GRADERS",
    "IDEAL_GRADER_ARGUMENTS",
    "ROLES",
    "Catalog",
    "CatalogError",
    "Expect",
    "ExpectedTool",
    "Scenario",
    "Tool",
    "ideal_grader_problem",
    "scalar_key",
]
