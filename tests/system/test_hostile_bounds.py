"""Hostile inputs, second round (issue 29): numbers, nesting, widths and links end in one line.

Each test here is a row of RELIABILITY.md's "Hostile inputs, second round" table: the input that
used to print a traceback (or was accepted and ran nonsense) now stops the command with one
``error:`` line naming the value, before anything is stored.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

from evaljobs import config
from evaljobs.capacity import check_width, thread_limit
from evaljobs.catalog import CatalogError
from evaljobs.errors import ConfigurationError, UsageError

CATALOG = """\
name: bounds
scenarios:
  - key: hello
    prompt: "[sim: say hi]"
    expect: {contains: [hi]}
"""


def evaljobs(*args: str, env: dict[str, str] | None = None, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m evaljobs ARGS`` in a real process, with ``env`` as its only EVALJOBS_ settings."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("EVALJOBS_")}
    full.update(PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, "-m", "evaljobs", *args], env=full, cwd=cwd, capture_output=True,
                          text=True, timeout=120, check=False)


def one_error_line(result: subprocess.CompletedProcess, *fragments: str) -> str:
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


# --------------------------------------------------------------------------- numbers: finite, in range

@pytest.mark.parametrize("name, value", [
    ("EVALJOBS_TIME_LIMIT", "nan"), ("EVALJOBS_TIME_LIMIT", "inf"), ("EVALJOBS_TIME_LIMIT", "-3"),
    ("EVALJOBS_TIME_LIMIT", "0"), ("EVALJOBS_TIME_LIMIT", "1e400"), ("EVALJOBS_MIN_BACKOFF", "nan"),
    ("EVALJOBS_MAX_BACKOFF", "-inf"), ("EVALJOBS_PERMIT_WAIT", "nan"), ("EVALJOBS_MAX_RETRIES", "-1"),
    ("EVALJOBS_MAX_RATE_LIMIT_WAITS", "-5"), ("EVALJOBS_HEARTBEAT_TIMEOUT_MS", "0"),
    ("EVALJOBS_MAINTENANCE_CHANCE", "2000000"), ("EVALJOBS_RECOVER_EVERY", "nan"),
    ("EVALJOBS_DB_RECONNECT_SECONDS", "inf"), ("EVALJOBS_SIM_LATENCY", "-1"),
])
def test_every_number_from_the_environment_is_finite_and_in_range(name, value):
    with pytest.raises(ConfigurationError) as caught:
        config.Settings.from_env({name: value})
    message = str(caught.value)
    assert message.startswith(f"{name}=") and "must be" in message and "\n" not in message


def test_numbers_in_range_are_taken_as_given():
    settings = config.Settings.from_env({"EVALJOBS_TIME_LIMIT": "0.5", "EVALJOBS_MAX_RETRIES": "0",
                                         "EVALJOBS_MIN_BACKOFF": "0"})
    assert (settings.time_limit, settings.max_retries, settings.min_backoff) == (0.5, 0, 0.0)


@pytest.mark.parametrize("env, args, fragment", [
    ({"EVALJOBS_TIME_LIMIT": "nan"}, [], "EVALJOBS_TIME_LIMIT=nan"),
    ({"EVALJOBS_TIME_LIMIT": "inf"}, [], "EVALJOBS_TIME_LIMIT=inf"),
    ({"EVALJOBS_TIME_LIMIT": "-3"}, [], "EVALJOBS_TIME_LIMIT=-3"),
    ({"EVALJOBS_MIN_BACKOFF": "nan"}, [], "EVALJOBS_MIN_BACKOFF=nan"),
    ({"EVALJOBS_MAX_RETRIES": "-1"}, [], "EVALJOBS_MAX_RETRIES=-1"),
    ({}, ["--time-limit", "nan"], "--time-limit=nan"),
    ({}, ["--time-limit", "inf"], "--time-limit=inf"),
])
def test_run_refuses_a_bad_number_in_one_line_and_stores_nothing(env, args, fragment, tmp_path):
    (tmp_path / "c.yaml").write_text(CATALOG, encoding="utf-8")
    db = tmp_path / "runs.db"
    result = evaljobs("run", "c.yaml", "-m", "sim/a", "--db", f"sqlite:///{db}", *args, env=env, cwd=tmp_path)
    one_error_line(result, fragment, "must be")
    if db.exists():  # the database may have been opened; no run was created in it
        import sqlite3

        with sqlite3.connect(db) as conn:
            tables = {row[0] for row in conn.execute("select name from sqlite_master where type='table'")}
            runs = conn.execute("select count(*) from run").fetchone()[0] if "run" in tables else 0
        assert runs == 0


def test_the_api_refuses_a_non_finite_time_limit_too(tmp_path):
    from evaljobs.api import Session
    from evaljobs.catalog import loads_catalog

    with Session(db=f"sqlite:///{tmp_path}/runs.db", broker="memory") as session, \
            pytest.raises(ConfigurationError, match=r"--time-limit=nan must be a finite number"):
        session.submit(loads_catalog(CATALOG, source="c.yaml"), ["sim/a"], strategy="sequential",
                       time_limit=float("nan"))


# --------------------------------------------------------------------------- --width: what the machine can
# start

def test_a_width_beyond_what_the_machine_can_start_is_one_line_not_an_abort(tmp_path):
    (tmp_path / "c.yaml").write_text(CATALOG, encoding="utf-8")
    width = 100_000
    assert width > thread_limit()  # this machine's kernel limits (the figure is beyond them)
    result = evaljobs(
        "run",
        "c.yaml",
        "-m",
        "sim/a",
        "--db",
        f"sqlite:///{tmp_path}/r.db",
        "--width",
        str(width),
        cwd=tmp_path,
    )
    one_error_line(result, "--width 100000", f"at most {thread_limit()}")


def test_the_widest_width_allowed_is_read_from_the_machine():
    limit = thread_limit()
    assert limit >= 1
    check_width(min(limit, 64))  # an ordinary width passes
    with pytest.raises(UsageError, match=rf"--width {limit + 1} is more threads"):
        check_width(limit + 1)
    with pytest.raises(UsageError, match="at least 1"):
        check_width(0)


def test_a_thread_the_kernel_refuses_mid_start_is_one_line(monkeypatch, tmp_path):
    """Other processes may take what was left: the in-process worker's start fails as one line."""
    import threading

    from evaljobs.api import Session

    real_start = threading.Thread.start
    started = []

    def start(self):
        if self.name.startswith("Thread-") and len(started) >= 3:
            raise RuntimeError("can't start new thread")
        started.append(self)
        real_start(self)

    with Session(db=f"sqlite:///{tmp_path}/runs.db", broker="memory", width=8) as session:
        monkeypatch.setattr(threading.Thread, "start", start)
        with pytest.raises(UsageError, match=r"--width 8: the machine refused to start another thread"):
            session._ensure_local_worker()
        monkeypatch.undo()


# --------------------------------------------------------------------------- catalogs: depth and integer size

def test_a_json_catalog_nested_100000_deep_is_one_line(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    one_error_line(evaljobs("catalog", "check", str(path), cwd=tmp_path), "deep.json", "nested too deeply")
    nested = (
        '{"name": "x", "scenarios": [{"key": "a", "prompt": "hi", "tags": ' + "[" * 100_000 + "]" * 100_000
    )
    path.write_text(nested + "}]}", encoding="utf-8")
    one_error_line(evaljobs("catalog", "check", str(path), cwd=tmp_path), "deep.json", "nested too deeply")


def test_a_yaml_integer_of_5000_digits_is_one_line_naming_its_line(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text(CATALOG + "    max_turns: " + "9" * 5000 + "\n", encoding="utf-8")
    one_error_line(evaljobs("catalog", "check", str(path), cwd=tmp_path), "big.yaml:6", "5000 digits")
    one_error_line(
        evaljobs("run", str(path), "-m", "sim/a", "--db", f"sqlite:///{tmp_path}/r.db", cwd=tmp_path),
        "big.yaml:6",
        "5000 digits",
    )


def test_a_json_integer_of_5000_digits_is_one_line(tmp_path):
    from evaljobs.catalog.importers import load_any

    path = tmp_path / "big.json"
    path.write_text('{"name": "x", "scenarios": [{"key": "a", "prompt": "hi", "max_turns": '
                    + "9" * 5000 + "}]}", encoding="utf-8")
    with pytest.raises(CatalogError) as caught:
        load_any(str(path))
    assert "5000 digits" in str(caught.value) and "\n" not in str(caught.value)


# --------------------------------------------------------------------------- init: regular files inside its
# folder

def test_init_refuses_a_dangling_catalog_symlink_and_writes_nothing_outside(cli, tmp_path):
    project, outside = tmp_path / "project", tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    (project / "catalog.yaml").symlink_to(outside / "victim.yaml")
    result = cli("init", str(project))
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "catalog.yaml: is a symbolic link" in lines[0], result.output
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("force", [False, True])
def test_init_never_writes_through_a_linked_folder(cli, force, tmp_path):
    project, outside = tmp_path / "project", tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    (project / ".github").symlink_to(outside, target_is_directory=True)
    result = cli("init", str(project), *(["--force"] if force else []))
    assert result.exit_code == 2 and "links out of" in result.output, result.output
    assert list(outside.iterdir()) == []


def test_init_with_force_replaces_a_link_to_a_file_by_refusing_it(cli, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    target = tmp_path / "shared.yaml"
    target.write_text("mine\n", encoding="utf-8")
    (project / "catalog.yaml").symlink_to(target)
    kept = cli("init", str(project))  # exists (through the link): kept, not written
    assert kept.exit_code == 0 and "kept" in kept.output
    forced = cli("init", str(project), "--force")
    assert forced.exit_code == 2 and "is a symbolic link" in forced.output
    assert target.read_text(encoding="utf-8") == "mine\n"


# --------------------------------------------------------------------------- worker: --processes, --threads,
# --recover-every

# Checked before the broker is asked: this port answers nothing, so a check that is missing shows as
# "cannot reach the broker" instead of the line the test expects (and no process is ever forked).
NO_BROKER = "redis://127.0.0.1:1/0"


@pytest.mark.parametrize("args, fragments", [
    (["--processes", "100000"], ["--processes 100000 × --threads 8 is more threads", "use fewer"]),
    (["--threads", "100000"], ["--threads 100000 is more threads"]),
    (["--recover-every", "nan"], ["--recover-every=nan must be a finite number"]),
    (["--recover-every", "inf"], ["--recover-every=inf must be a finite number"]),
])
def test_worker_refuses_what_it_cannot_start_in_one_line_before_forking(args, fragments, tmp_path):
    result = evaljobs("worker", "--broker", NO_BROKER, *args, cwd=tmp_path)
    one_error_line(result, *fragments)


@pytest.mark.parametrize("command", [["worker"], ["pool"]])
def test_a_pool_wider_than_the_machine_can_start_is_one_line(command, tmp_path):
    """--min/--max 100000 on a real broker started about 2,000 member threads and hung there."""
    result = evaljobs(*command, "--broker", NO_BROKER, "--min", "1", "--max", "100000", cwd=tmp_path)
    one_error_line(result, "--max 100000 is more threads", f"at most {thread_limit()}")


def test_pool_refuses_a_non_finite_recover_every_in_one_line(tmp_path):
    result = evaljobs("worker", "--broker", NO_BROKER, "--min", "1", "--max", "2", "--recover-every", "nan",
                      cwd=tmp_path)
    one_error_line(result, "--recover-every=nan must be a finite number")
