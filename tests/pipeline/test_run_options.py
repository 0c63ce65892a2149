"""A per-run option is declared once (``evaljobs.config.RUN_OPTIONS``) and everything that spelled it out
reads the declaration: ``Settings`` (variable, default, bounds), the limits a run stores and reads back
(``RunSettings.limits_of`` / ``from_options``), the retry policy a pair runs under (the run's value over the
process's: Dramatiq's ``message.options.get(name, actor.options.get(name, default))``), Dramatiq's actor
options, and ``evaljobs run``'s flag. Before, each of those listed the five limits by hand.
"""
from __future__ import annotations

import dataclasses

import pytest

from evaljobs import config
from evaljobs.cli import main
from evaljobs.errors import ConfigurationError
from evaljobs.evaluation.retry import RetryPolicy
from evaljobs.pipeline import runtime
from evaljobs.pipeline.actors import actor_options


def _other(option: config.RunOption):
    """A valid value that is not the default (an unset default: 3)."""
    return option.kind(option.default * 2 + 1) if option.default is not None else option.kind(3)


@pytest.mark.parametrize("option", config.RUN_LIMITS, ids=lambda o: o.name)
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
                                             ((o, stored[o.name]) for o in config.RUN_LIMITS)})
    assert getattr(applied, option.name) == value
    previous = config.configured()
    config.configure(config.Settings())
    try:
        assert runtime.policy(run) == applied
    finally:
        config.restore(previous)
    assert config.resolve(option.name, {}, submitter) == value  # nothing stored: the process's own
    assert config.resolve(option.name, {option.name: option.default}, submitter) == option.default


@pytest.mark.parametrize("option", config.RUN_LIMITS, ids=lambda o: o.name)
def test_a_run_option_out_of_bounds_is_refused_in_one_line_naming_its_variable(option):
    with pytest.raises(ConfigurationError) as info:
        config.Settings.from_env({option.env: str(option.high * 2)})
    assert str(info.value).startswith(f"{option.env}=") and "\n" not in str(info.value)


def test_the_typed_faces_have_a_field_for_every_run_option():
    limits = {o.name for o in config.RUN_LIMITS}
    assert limits <= {f.name for f in dataclasses.fields(RetryPolicy)}
    # RunSettings is the stored options, in the table's order, and nothing else
    assert [o.name for o in config.RUN_OPTIONS if o.stored] == [
        f.name for f in dataclasses.fields(runtime.RunSettings)]
    # Settings has a field, with the table's default, for every option a variable sets
    with_variable = [o for o in config.RUN_OPTIONS if o.env]
    assert limits <= {o.name for o in with_variable}
    assert all(getattr(config.Settings(), o.name) == o.default for o in with_variable)
    assert all(getattr(config.Settings.from_env({o.env: str(_other(o))}), o.name) == _other(o)
               for o in with_variable)
    defaults = RetryPolicy()
    assert all(getattr(defaults, o.name) == o.default for o in config.RUN_LIMITS)


def test_dramatiqs_actor_options_come_from_the_table():
    policy = RetryPolicy.from_settings(config.Settings(max_retries=7, min_backoff=1.5, max_backoff=20.0))
    assert actor_options(policy) == {"max_retries": 7, "min_backoff": 1500, "max_backoff": 20000}


def test_the_run_flag_is_the_tables(cli):
    option = config.run_option("time_limit")
    help_text = cli("run", "--help").output
    assert f"{option.flag} FLOAT RANGE" in help_text and option.help in help_text
    refused = cli("run", "x.yaml", "-m", "sim/fast", option.flag, "0.01")
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
    # every option but the selection (six flags: --filter, --tag …) is the table's, with the table's type
    flagged = [o for o in config.RUN_OPTIONS if o.flag]
    assert set(keywords) == {o.name for o in flagged} | {"selection"}
    for option in flagged:
        expected = bool if option.switch or option.kind is bool else option.kind | None
        assert declared[option.name] == expected, option.name


def test_a_misspelled_run_option_is_a_type_error_before_the_catalog_is_read(tmp_path):
    from evaljobs.api import Session

    with Session(db=f"sqlite:///{tmp_path}/e.db", broker="memory") as session:
        with pytest.raises(TypeError) as info:
            session.run(str(tmp_path / "absent.yaml"), ["sim/a"], strategy="sequential",
                        time_limt=3)  # type: ignore[call-arg]
    assert str(info.value).startswith("Session.run() got an unexpected option 'time_limt' "
                                      "(did you mean 'time_limit'?)")
    assert "\n" not in str(info.value)


def _run_row(options: dict) -> "object":
    from datetime import datetime, timezone

    from evaljobs.store import RunInfo

    return RunInfo(id="r1", digest="d", catalog_name="c", models=["sim/a"], strategy="fanout",
                   status="running", expected=1, persisted=0, context=None, options=options,
                   created_at=datetime.now(timezone.utc), started_at=None, finished_at=None, report=None,
                   note=None)


def test_a_pair_messages_dramatiq_options_come_from_the_table():
    """``pair_options``: each option with a ``message_option`` (the time limit), the run's value in Dramatiq's
    unit with its backstop, per pair the message carries; the actors' own from the same declaration."""
    from evaljobs.pipeline.pairs import BACKSTOP, pair_options

    option = config.run_option("time_limit")
    assert option.message_option == "time_limit" and BACKSTOP == option.backstop == 30.0
    assert pair_options("r1", 1, run=_run_row({"time_limit": 5.0})) == {"time_limit": 35_000}
    assert pair_options("r1", 3, run=_run_row({"time_limit": 5.0})) == {"time_limit": 105_000}
    assert option.dramatiq_value(180.0) == 210_000


def test_run_settings_read_every_stored_option_back():
    """``RunSettings.from_options`` reads each stored option of the table (a switch off and an empty list
    are unset); ``to_options`` writes them back."""
    values = {"adapter": "pkg:make", "judge_model": "sim/judge", "judge_cap": 4, "time_limit": 9.0,
              "cache": True, "cache_across_epochs": True, "pairs_per_message": 4, "batch": ["openai"],
              "batch_judge": ["anthropic"], "providers": {"source": "p.yaml", "definition": {}},
              "max_retries": 2, "min_backoff": 0.1, "max_backoff": 2.0, "max_rate_limit_waits": 9}
    assert set(values) == {o.name for o in config.RUN_OPTIONS if o.stored}
    settings = runtime.RunSettings.from_options(values)
    assert settings.batch == ("openai",) and settings.batch_judge == ("anthropic",)
    assert runtime.RunSettings.from_options(settings.to_options()) == settings
    assert runtime.RunSettings.from_options({"cache": False, "batch": []}) == runtime.RunSettings()


def test_a_stored_number_out_of_its_bounds_is_refused_naming_its_flag():
    with pytest.raises(ConfigurationError) as info:
        runtime.RunSettings(judge_cap=-1)
    assert str(info.value) == "--judge-cap=-1 must be a whole number at least 0 and at most 1e+09"
    with pytest.raises(ConfigurationError, match="^--time-limit=0 must be"):
        runtime.RunSettings(time_limit=0)


def test_evaljobs_runs_flags_are_the_tables():
    """Every option of the table with a flag is a parameter of ``evaljobs run`` built from its declaration
    (``run_option_flag``) and passed on by name (``run_flags``); ``--reuse`` compares the identity options."""
    import click

    from evaljobs.cli._options import run_flags, run_option_flag
    from evaljobs.pipeline.reuse import IDENTITY_OPTIONS

    command = main.get_command(click.Context(main), "run")
    params = {p.name: p for p in command.params}
    flagged = [o for o in config.RUN_OPTIONS if o.flag]
    assert len(flagged) >= 11
    for option in flagged:
        built = run_option_flag(option.name)(click.command()(lambda **kw: None)).params[0]
        param = params[option.name]
        assert (param.opts, param.is_flag, param.help, type(param.type)) == (
            built.opts, built.is_flag, built.help, type(built.type)), option.name
    given = {p: object() for p in params}
    assert run_flags(given) == {o.name: given[o.name] for o in flagged}
    assert IDENTITY_OPTIONS == ("adapter", "judge_model", "adapter_version")
