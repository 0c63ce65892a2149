"""The adapter contract hosts write against: `evaljobs.Adapter`, as the docs (docs/hosts.md) show it.

The docs' example adapter is taken from docs/hosts.md itself (so the documentation cannot
drift from what runs) and run through the whole pipeline with the evaljobs.testing plugin.
"""
from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest

import evaljobs
from evaljobs.evaluation.adapters import ConversationAdapter, accepts_deadline, call_adapter
from evaljobs.evaluation.replay import Replay

README = Path(__file__).resolve().parents[2] / "docs" / "hosts.md"  # moved from the README
CATALOG = {
    "name": "protocol",
    "scenarios": [{"key": "hello", "prompt": "say hello", "expect": {"contains": ["HELLO"]}}],
}


def readme_adapter_example() -> str:
    section = README.read_text().split("## Writing a host adapter", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2, "the adapter section shows the protocol, then one example"
    assert "class Adapter(Protocol)" in blocks[0]
    return blocks[1]


def test_adapter_is_an_exported_protocol_with_the_signature_the_readme_shows():
    assert evaljobs.Adapter is evaluation_adapter_protocol()
    assert typing.Protocol in evaljobs.Adapter.__mro__
    signature = str(__import__("inspect").signature(evaljobs.Adapter.__call__))
    assert signature == (
        "(self, scenario: 'Scenario', model: 'ModelSpec', *, deadline: 'float | None' = None) -> 'Replay'"
    )
    block = README.read_text().split("## Writing a host adapter", 1)[1]
    assert (
        "def __call__(self, scenario: Scenario, model: ModelSpec, *,\n                 deadline: float | "
        "None = None) -> Replay: ..."
    ) in block


def evaluation_adapter_protocol():
    from evaljobs.evaluation.adapters import Adapter

    return Adapter


def test_the_readme_adapter_runs_through_the_whole_pipeline(tmp_path, monkeypatch, evaljobs_run):
    (tmp_path / "readme_adapter.py").write_text(readme_adapter_example())
    monkeypatch.syspath_prepend(str(tmp_path))

    finished = evaljobs_run(CATALOG, ["sim/fast", "sim/smart"], adapter="readme_adapter:EchoAdapter")

    assert finished.status == "complete", finished.report
    assert {(r.model, r.status, r.output) for r in finished.results} == {
        ("sim/fast", "passed", "SAY HELLO"), ("sim/smart", "passed", "SAY HELLO")}
    assert finished.result("hello", "sim/smart").details["meta"] == {"stood_in_for": "sim/smart"}


class TwoArgumentConversation(ConversationAdapter):
    """The signature the README used to show, on a ConversationAdapter subclass (it failed every pair)."""

    def __call__(self, scenario, model):  # noqa: D102 - no deadline parameter, on purpose
        replay = super().__call__(scenario, model)
        replay.meta["two_arguments"] = True
        return replay


def test_an_adapter_without_deadline_is_called_without_it(evaljobs_run):
    finished = evaljobs_run(
        {
            "name": "two",
            "scenarios": [
                {"key": "hi", "prompt": "[sim: say hello there]", "expect": {"contains": ["hello there"]}}
            ],
        },
        adapter=f"{__name__}:TwoArgumentConversation",
        time_limit=30,
    )
    (result,) = finished.results
    assert result.status == "passed", result.error
    assert result.details["meta"] == {"two_arguments": True}


def test_deadline_is_passed_to_adapters_that_take_it_and_a_typeerror_inside_is_not_a_mismatch():
    seen = []

    def takes_deadline(scenario, model, *, deadline=None):
        seen.append(deadline)
        return Replay(answer="ok")

    def takes_kwargs(scenario, model, **options):
        seen.append(options)
        return Replay(answer="ok")

    def broken(scenario, model):
        seen.append("broken")
        raise TypeError("the adapter's own bug")

    spec = None  # the adapters above never look at it
    call_adapter(takes_deadline, None, spec, 12.5)
    call_adapter(takes_kwargs, None, spec, 7.0)
    with pytest.raises(TypeError, match="own bug"):
        call_adapter(broken, None, spec, 1.0)
    assert seen == [12.5, {"deadline": 7.0}, "broken"]  # called once: not retried without deadline
    assert accepts_deadline(ConversationAdapter.__call__) and not accepts_deadline(len)


def test_the_signature_answer_is_kept_per_adapter_class_and_never_mixed_up():
    """accepts_deadline is cached per class (a pair's ~0.1 ms of inspect.signature); instances of two
    classes, one taking ``deadline`` and one not, are each called their own way, every time."""
    seen = []

    class WithDeadline:
        def __call__(self, scenario, model, *, deadline=None):
            seen.append(("with", deadline))

    class Without:
        def __call__(self, scenario, model):
            seen.append(("without",))

    for _ in range(2):
        call_adapter(WithDeadline(), None, None, 3.0)
        call_adapter(Without(), None, None, 3.0)
    assert seen == [("with", 3.0), ("without",)] * 2
    assert accepts_deadline(WithDeadline()) and not accepts_deadline(Without())


@pytest.mark.parametrize("reference, message", [
    ("nowhere_at_all:Adapter",
     "cannot load adapter 'nowhere_at_all:Adapter': No module named 'nowhere_at_all'"),
    ("os.path:no_such_thing", "cannot load adapter 'os.path:no_such_thing': module "),
    ("os.path:", "adapter 'os.path:' names no callable: use module:callable"),
    ("not-a-module:x", "cannot load adapter 'not-a-module:x': invalid format"),
])
def test_a_module_reference_that_names_no_adapter_is_one_line(reference, message):
    from evaljobs.catalog.modelspec import load_providers
    from evaljobs.evaluation.adapters import AdapterError, load_adapter

    with pytest.raises(AdapterError) as raised:
        load_adapter(reference, load_providers())
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)


def test_a_module_reference_loads_the_named_attribute_path():
    from evaljobs.catalog.modelspec import load_providers
    from evaljobs.evaluation.adapters import load_adapter

    adapter = load_adapter(f"{__name__}:_EchoNamespace.echo", load_providers())
    assert adapter is _EchoNamespace.echo


class _EchoNamespace:
    @staticmethod
    def echo(scenario, model, *, deadline=None):  # a callable is the adapter itself; only loaded here
        raise NotImplementedError
