"""Adapters: how a scenario is run against a model.

The default adapter drives an OpenAI-compatible chat conversation and answers
the model's tool calls from the scenario's canned tools. Hosts can plug in
their own agent with ``--adapter module:callable`` or the entry-point group
``evaljobs.adapters``; the callable takes ``(scenario, model)`` and returns a
:class:`~evaljobs.evaluation.replay.Replay`.
"""
from __future__ import annotations

import inspect
import json
import pkgutil
import time
import types
from collections.abc import Callable
from typing import Any, Protocol

from evaljobs import config as settings_module
from evaljobs import entry_points, telemetry
from evaljobs.catalog import Scenario
from evaljobs.catalog.modelspec import ModelSpec, ProvidersConfig
from evaljobs.catalog.pricing import Usage
from evaljobs.errors import UsageError
from evaljobs.evaluation.adapter_version import BUILT_IN_ADAPTER_VERSION
from evaljobs.evaluation.replay import Replay, ToolCall
from evaljobs.evaluation.transcript import turn_entry
from evaljobs.providers import ProviderCalls, TransientError, wire_format
from evaljobs.tools import check_tools, live_tool_runner

ADAPTER_GROUP = "evaljobs.adapters"


class AdapterError(UsageError):
    """An adapter reference that cannot be loaded (one line, names the reference)."""


class Adapter(Protocol):
    """What evaljobs calls once per (scenario, model) pair: ``adapter(scenario, model, deadline=...)``.

    ``deadline`` is a ``time.monotonic()`` instant (``None``: no ``--time-limit``) by which the
    adapter should give up (raise :class:`DeadlineExceeded`) between turns. It is optional: an
    adapter whose signature has no ``deadline`` parameter (nor ``**kwargs``) is called as
    ``adapter(scenario, model)`` (see :func:`call_adapter`), so both spellings work.
    """

    def __call__(self, scenario: Scenario, model: ModelSpec, *,
                 deadline: float | None = None) -> Replay: ...


#: ``accepts_deadline`` per adapter class (instances) or function: ``inspect.signature`` costs a
#: zero-latency pair ~0.1 ms, and an adapter's signature does not change between its pairs.
_ACCEPTS: dict[Any, bool] = {}
_ACCEPTS_MAX = 256


def _signature_owner(adapter: Callable[..., Any]) -> Any:
    """What ``adapter``'s signature is a function of (None: do not cache it)."""
    if isinstance(adapter, types.FunctionType):
        return adapter
    if isinstance(adapter, types.MethodType):
        return None  # bound to an instance: keying on it would keep the instance alive
    cls = type(adapter)
    if cls.__call__ is type.__call__ or "__signature__" in getattr(adapter, "__dict__", ()):
        return None  # a class, or an instance with a signature of its own
    if cls.__module__ in ("builtins", "functools"):  # partials, builtins: their arguments decide
        return None
    return cls


def accepts_deadline(adapter: Callable[..., Any]) -> bool:
    """Whether ``adapter`` can be called with ``deadline=`` (a parameter of that name, or ``**kwargs``)."""
    owner = _signature_owner(adapter)
    if owner is not None:
        known = _ACCEPTS.get(owner)
        if known is None:
            known = _accepts_deadline(adapter)
            if len(_ACCEPTS) >= _ACCEPTS_MAX:
                _ACCEPTS.clear()
            _ACCEPTS[owner] = known
        return known
    return _accepts_deadline(adapter)


def _accepts_deadline(adapter: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(adapter).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable without a signature: call it plainly
        return False
    return any(
        p.kind is p.VAR_KEYWORD
        or (p.name == "deadline" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
        for p in parameters
    )


def call_adapter(adapter: Callable[..., Any], scenario: Scenario, model: ModelSpec,
                 deadline: float | None = None) -> Any:
    """Call ``adapter`` for one pair with the :class:`Adapter` signature it declares.

    Why look at the signature rather than try and catch ``TypeError``: a ``TypeError`` raised
    inside the adapter would be mistaken for a signature mismatch and the pair run twice.
    """
    if accepts_deadline(adapter):
        return adapter(scenario, model, deadline=deadline)
    return adapter(scenario, model)


class DeadlineExceeded(Exception):
    """The per-pair time limit ran out between turns."""


def _tool_content(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class ConversationAdapter:
    """Run the scenario as a chat: model turn → tool calls answered → next turn.

    Provider errors propagate (typed, see ``evaljobs.network.errors``) so the
    caller can decide between retrying and recording an ``errored`` result.
    """

    version = BUILT_IN_ADAPTER_VERSION  # stored with every run; --reuse compares it

    def __init__(self, providers: ProvidersConfig, *, tool_runner: Callable | None = None,
                 calls: ProviderCalls | None = None):
        self.providers = providers
        #: The governance and response cache the pipeline bound (``evaljobs.providers.calls``);
        #: the default calls the provider directly.
        self.calls = calls or ProviderCalls()
        self._live = tool_runner is None
        self.tool_runner = tool_runner or live_tool_runner(run_canned_tool)

    def __call__(self, scenario: Scenario, model: ModelSpec, *, deadline: float | None = None) -> Replay:
        if self._live:  # a live tool the operator does not allow errors the pair before any request
            check_tools(scenario.tools)
        client = self.calls.client(self.providers, model, self.version)
        config = self.providers.get(model.provider)
        messages: list[dict[str, Any]] = []
        if scenario.system:
            messages.append({"role": "system", "content": scenario.system})
        messages.extend(dict(m) for m in scenario.messages)
        tools = [t.schema() for t in scenario.tools] or None
        replay = Replay(messages=messages)
        extra = None
        if scenario.seed is not None:
            unsupported = wire_format(config.api).seed_unsupported  # an unknown field is a 400: noted
            if unsupported:
                replay.meta["seed"] = {"value": scenario.seed, "sent": False, "reason": unsupported}
            else:
                extra = {"seed": scenario.seed}
        started = time.perf_counter()
        cached_turns = 0
        paid, batched = Usage(), Usage()  # what the provider billed, one by one and through its batch API
        keep_content = settings_module.settings().store_transcripts
        secrets = [config.api_key, *config.headers.values()] if keep_content else []
        for turn in range(scenario.max_turns):
            sent = time.perf_counter()
            remaining = None
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise DeadlineExceeded(f"ran out of time after {turn} turns")
            try:
                completion = client.complete(model.model, messages, first=turn == 0, tools=tools,
                                             temperature=scenario.temperature, timeout=remaining,
                                             **({"extra": extra} if extra else {}))
            except TransientError:
                if deadline is not None and time.monotonic() >= deadline - 0.01:
                    raise DeadlineExceeded(f"a provider call was still running at turn {turn + 1}") from None
                raise
            replay.turns += 1
            entry = turn_entry(turn + 1, (sent - started) * 1000.0, completion, keep_content=keep_content,
                               secrets=secrets)
            replay.timeline.append(entry)
            replay.add_usage(completion.usage)
            replay.note_answered_by(completion.model, getattr(completion, "system_fingerprint", None))
            if getattr(completion, "cached", False):
                cached_turns += 1
            elif getattr(completion, "batched", False):  # a provider batch answered it: the batch price
                batched += completion.usage
            else:
                paid += completion.usage
                replay.latency_ms = (replay.latency_ms or 0.0) + completion.latency_ms
                if replay.ttft_ms is None and turn == 0:
                    replay.ttft_ms = completion.ttft_ms
            messages.append(completion.raw_message)
            if not completion.tool_calls:
                replay.answer = completion.content or ""
                break
            for requested in completion.tool_calls:
                with telemetry.span(
                    f"execute_tool {requested.name}",
                    {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": requested.name},
                ) as span:
                    call = self.tool_runner(scenario, requested.name, requested.arguments)
                    if call.error:
                        span.set_attribute("error.type", "tool_error")
                replay.tool_calls.append(call)
                entry["tools"].append({"name": call.name, "ms": round(float(call.duration_ms or 0.0), 1),
                                       "error": bool(call.error)})
                content = _tool_content({"error": call.error} if call.error else call.result)
                messages.append({"role": "tool", "tool_call_id": requested.id, "content": content})
        else:
            replay.error = f"conversation did not finish within max_turns={scenario.max_turns}"
        replay.duration_ms = (time.perf_counter() - started) * 1000.0
        replay.cached = replay.turns > 0 and cached_turns == replay.turns
        # Only the turns a provider answered cost money; answers from the cache are free. Each kind of
        # token at its own price (prompt-cache reads and writes too); None (unknown) when a price it
        # needs is not in the provider's table.
        replay.cost = config.cost(model.model, paid)
        replay.cache_saving = config.cache_saving(model.model, paid)
        if batched.any:
            batch_cost = config.cost(model.model, batched, batch=True)
            replay.cost = None if replay.cost is None or batch_cost is None else replay.cost + batch_cost
            saving = config.cache_saving(model.model, batched, batch=True)
            replay.cache_saving = None if replay.cache_saving is None or saving is None \
                else replay.cache_saving + saving
            # What the same turns cost one by one: reports show the saving against it.
            replay.meta["batch"] = {"interactive_cost": config.cost(model.model, paid + batched)}
        return replay


def run_canned_tool(scenario: Scenario, name: str, arguments: dict[str, Any]) -> ToolCall:
    """Answer a tool call from the scenario's canned ``returns``/``returns_by``."""
    started = time.perf_counter()
    tool = scenario.tool(name)
    if tool is None:
        known = ", ".join(t.name for t in scenario.tools) or "none"
        return ToolCall(
            name=name, arguments=arguments, error=f"unknown tool '{name}' (scenario tools: {known})"
        )
    if "_raw" in arguments and len(arguments) == 1:
        return ToolCall(name=name, arguments=arguments, error="arguments are not valid JSON")
    result = tool.answer(arguments)
    return ToolCall(name=name, arguments=arguments, result=result,
                    duration_ms=(time.perf_counter() - started) * 1000.0)


def load_adapter(reference: str | None, providers: ProvidersConfig, *,
                 calls: ProviderCalls | None = None) -> Adapter:
    """Resolve ``None`` (the default), ``module:callable`` or an entry-point name to an adapter.

    A class or factory that accepts ``providers=`` is called with it; any other
    callable is used as the adapter itself. ``calls`` carries the governance and,
    for ``--cache``, the response cache; the cache is only supported by
    :class:`ConversationAdapter` (and subclasses), which get ``calls`` too.
    """
    calls = calls or ProviderCalls()
    if not reference:
        return ConversationAdapter(providers, calls=calls)
    target: Any
    if ":" in reference:
        if reference.endswith(":"):  # resolve_name would give the module itself
            raise AdapterError(f"adapter '{reference}' names no callable: use module:callable")
        try:
            target = pkgutil.resolve_name(reference)
        except (ImportError, AttributeError, ValueError) as exc:  # ValueError: not module:name
            raise AdapterError(f"cannot load adapter '{reference}': {exc}") from None
    else:
        registered = entry_points.installed(ADAPTER_GROUP)
        found = [ep for ep in registered if ep.name == reference]
        if not found:
            names = sorted(ep.name for ep in registered)
            raise AdapterError(f"unknown adapter '{reference}': use module:callable or one of the "
                               f"'{ADAPTER_GROUP}' entry points ({', '.join(names) or 'none installed'})")
        try:
            target = found[0].load()
        except Exception as exc:  # noqa: BLE001 - report any import failure in one line
            raise AdapterError(f"cannot load adapter entry point '{reference}': {exc}") from None
    if isinstance(target, type) and issubclass(target, ConversationAdapter):
        adapter = target(providers=providers)
        adapter.calls = calls  # bound after construction: a subclass's __init__ need not know about it
        return adapter
    if calls.cache is not None:
        raise AdapterError(f"--cache needs the built-in conversation adapter (or a subclass); adapter "
                           f"'{reference}' makes its own provider calls")
    if isinstance(target, type) or getattr(target, "wants_providers", False):
        try:
            return target(providers=providers)
        except TypeError:
            return target()
    if not callable(target):
        raise AdapterError(f"adapter '{reference}' is not callable")
    return target
