"""A per-run option is declared once (``evaljobs.config.RUN_OPTIONS``) and everything that spelled it out
reads the declaration: ``Settings`` (variable, default, bounds), the limits a run stores and reads back
(``RunSettings.limits_of`` / ``from_options``), the retry policy a pair runs under (the run's value over the
process's: Dramatiq's ``message.options.get(name, actor.options.get(name, default))``), Dramatiq's actor
options, and ``evaljobs run``'s flag. Before, each of those listed the five limits by hand.
"""
from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner

from evaljobs import config
from evaljobs.cli import main
from evaljobs.errors import ConfigurationError
from evaljobs.evaluation.retry import RetryPolicy
from evaljobs.pipeline import runtime
from evaljobs.pipeline.actors import actor_options


def _other(option: config.RunOption):
    """A valid value that is not the default."""
    return option.kind(option.default * 2 + 1)


@pytest.mark.parametrize("option", config.RUN_OPTIONS, ids=lambda o: o.name)
def test_a_run_option_travels_from_the_environment_to_the_pairs_policy(option):
    value = _other(option)
    submitter = config.Settings.from_env({option.env: str(value)})
    assert getattr(submitter, option.name) == value
    stored = runtime.RunSettings.limits_of(submitter)
    assert stored[option.name] == value and option.stored
    # A worker whose own settings are the defaults applies the run's value, and only that one differs.
    run = runtime.RunSettings.from_options(stored)
    worker = RetryPolicy.from_settings(config.Settings())
    applied = dataclasses.replace(worker, **{o.name: o.kind(v) for o, v in
                                             ((o, stored[o.name]) for o in config.RUN_OPTIONS)})
    assert getattr(applied, option.name) == value
    previous = config.configured()
    config.configure(config.Settings())
    try:
        assert runtime.policy(run) == applied
    finally:
        config.restore(previous)
    assert config.resolve(option.name, {}, submitter) == value  # nothing stored: the process's own
    assert config.resolve(option.name, {option.name: option.default}, submitter) == option.default


@pytest.mark.parametrize("option", config.RUN_OPTIONS, ids=lambda o: o.name)
def test_a_run_option_out_of_bounds_is_refused_in_one_line_naming_its_variable(option):
    with pytest.raises(ConfigurationError) as info:
        config.Settings.from_env({option.env: str(option.high * 2)})
    assert str(info.value).startswith(f"{option.env}=") and "\n" not in str(info.value)


def test_the_typed_faces_have_a_field_for_every_run_option():
    names = {o.name for o in config.RUN_OPTIONS}
    assert names <= {f.name for f in dataclasses.fields(config.Settings)}
    assert names <= {f.name for f in dataclasses.fields(RetryPolicy)}
    assert {o.name for o in config.RUN_OPTIONS if o.stored} <= {
        f.name for f in dataclasses.fields(runtime.RunSettings)}
    defaults = RetryPolicy()
    assert all(getattr(defaults, o.name) == getattr(config.Settings(), o.name) == o.default
               for o in config.RUN_OPTIONS)


def test_dramatiqs_actor_options_come_from_the_table():
    policy = RetryPolicy.from_settings(config.Settings(max_retries=7, min_backoff=1.5, max_backoff=20.0))
    assert actor_options(policy) == {"max_retries": 7, "min_backoff": 1500, "max_backoff": 20000}


def test_the_run_flag_is_the_tables():
    option = config.run_option("time_limit")
    help_text = CliRunner().invoke(main, ["run", "--help"]).output
    assert f"{option.flag} FLOAT RANGE" in help_text and option.help in help_text
    refused = CliRunner().invoke(main, ["run", "x.yaml", "-m", "sim/fast", option.flag, "0.01"])
    assert refused.exit_code == 2 and "0.01 is not in the range x>=0.1" in refused.output


def test_submit_options_are_submits_keyword_options():
    """``Session.run(**options: Unpack[SubmitOptions])``: the TypedDict names exactly ``submit``'s keyword
    options, with the same types, so what mypy accepts for ``run`` is what ``submit`` takes."""
    import inspect
    import typing

    from evaljobs.api import Session

    signature = inspect.signature(Session.submit)
    keywords = {name: p for name, p in signature.parameters.items()
                if p.kind is p.KEYWORD_ONLY and name != "strategy"}
    hints = typing.get_type_hints(Session.submit)
    declared = typing.get_type_hints(runtime.SubmitOptions)
    assert list(runtime.SubmitOptions.__annotations__) == list(keywords)
    assert declared == {name: hints[name] for name in keywords}
    flagged = {o.name for o in config.RUN_OPTIONS if o.flag}
    assert flagged <= set(keywords)


def test_a_misspelled_run_option_is_a_type_error_before_the_catalog_is_read(tmp_path):
    from evaljobs.api import Session

    with Session(db=f"sqlite:///{tmp_path}/e.db", broker="memory") as session:
        with pytest.raises(TypeError) as info:
            session.run(str(tmp_path / "absent.yaml"), ["sim/a"], strategy="sequential",
                        time_limt=3)  # type: ignore[call-arg]
    assert str(info.value).startswith("Session.run() got an unexpected option 'time_limt' "
                                      "(did you mean 'time_limit'?)")
    assert "\n" not in str(info.value)
