"""The store against real databases: SQLite and PostgreSQL (via the ``db_url`` fixture)."""
from __future__ import annotations

from dataclasses import replace
import multiprocessing
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

import peewee
import pytest

from evaljobs import catalog as catalog_module
from evaljobs import store
from evaljobs.store import results as store_results  # white-box: the SQL plans of its hot queries
from evaljobs.catalog import Catalog, parse_catalog
from evaljobs.evaluation.result import Result
from evaljobs.reports.build import build_report
from helpers import free_port
from helpers.paths import CHILD_PYTHONPATH


def make_catalog(keys: list[str], name: str = "demo") -> Catalog:
    body = {"name": name, "scenarios": [{"key": k, "messages": [{"role": "user", "content": f"ask {k}"}]}
                                        for k in keys]}
    return parse_catalog(body, source=f"{name}.yaml")


def passed(key: str, model: str, **fields) -> Result:
    return Result(scenario_key=key, model=model, status="passed", score=1.0, **fields)


@pytest.fixture
def url(db_url: str) -> str:
    store.connect(db_url)
    return db_url


@pytest.fixture
def run(url: str) -> store.RunInfo:
    """3 scenarios × 2 models."""
    return store.create_run(make_catalog(["s1", "s2", "s3"]), ["m1", "m2"], strategy="fanout")


def all_pairs(run: store.RunInfo) -> list[tuple[str, str]]:
    return [(k, m) for k in store.load_snapshot(run.digest).keys for m in run.models]


# -- connecting -------------------------------------------------------------------------------


def test_connect_same_url_is_a_noop_and_another_url_rebinds(url: str, tmp_path) -> None:
    db = store.connect(url)
    assert store.connect(url) is db
    other = store.connect(f"sqlite:///{tmp_path}/other/evaljobs.db")
    assert other is not db and store.database.obj is other
    assert (tmp_path / "other" / "evaljobs.db").exists()
    assert store.list_runs() == []


def test_connect_reads_the_environment_then_the_default(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EVALJOBS_DATABASE_URL", f"sqlite:///{tmp_path}/env.db")
    store.connect()
    assert (tmp_path / "env.db").exists()
    monkeypatch.delenv("EVALJOBS_DATABASE_URL")
    monkeypatch.chdir(tmp_path)
    store.connect()
    assert (tmp_path / ".evaljobs" / "evaljobs.db").exists()


def test_sqlite_connections_are_wal_with_foreign_keys(sqlite_url: str) -> None:
    db = store.connect(sqlite_url)
    with store.connection():
        assert db.execute_sql("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute_sql("PRAGMA foreign_keys").fetchone()[0] == 1
        assert db.execute_sql("PRAGMA busy_timeout").fetchone()[0] == store.SQLITE_BUSY_SECONDS * 1000
    assert db.is_closed(), "a public call must hand its connection back"


def test_unreachable_database_is_a_one_line_error_without_the_password() -> None:
    url = f"postgresql://evaljobs:s3cret@127.0.0.1:{free_port()}/nothing"
    with pytest.raises(store.StoreError) as caught:
        store.connect(url)
    message = str(caught.value)
    assert "\n" not in message and "s3cret" not in message
    assert "postgresql://evaljobs:***@127.0.0.1:" in message


def test_unsupported_url_is_a_one_line_error() -> None:
    with pytest.raises(store.StoreError, match="unsupported database URL mysql://x/y"):
        store.connect("mysql://x/y")


def test_upgrade_reports_the_schema_it_created_once(db_url: str, tmp_path) -> None:
    store.connect(db_url)
    assert store.upgrade() == ["created table schema_version", "created table snapshot", "created table run",
                               "created table result", "created table label",
                               f"recorded schema version {store.SCHEMA_VERSION}"]
    assert store.upgrade() == []
    db = store.database.obj
    assert {"schema_version", "snapshot", "run", "result"} <= set(db.get_tables())
    with store.connection():
        assert store.SchemaVersion.select(store.SchemaVersion.version).scalar() == store.SCHEMA_VERSION
        db.drop_tables([store.ResultRow])
    assert store.upgrade() == ["created table result"]
    store.connect(f"sqlite:///{tmp_path}/elsewhere.db")
    assert store.connect(db_url) is not db
    assert store.upgrade() == [], "an existing schema is left alone"


def test_sqlite_url_must_name_a_file(tmp_path) -> None:
    with pytest.raises(store.StoreError, match="in-memory SQLite"):
        store.connect("sqlite:///:memory:")
    (tmp_path / "taken").write_text("")
    with pytest.raises(store.StoreError, match="cannot create the folder for sqlite:///.*taken/sub/x.db"):
        store.connect(f"sqlite:///{tmp_path}/taken/sub/x.db")


# -- snapshots and runs -----------------------------------------------------------------------


def test_create_get_and_list_runs(url: str) -> None:
    cat = make_catalog(["a", "b"])
    first = store.create_run(cat, ["m1"], strategy="sequential", context={"tenant": "acme"}, options={"x": 1})
    second = store.create_run(cat, ["m1", "m2"], strategy="fanout")
    assert first.id.startswith("r_") and len(first.id) == 14 and first.id != second.id
    assert (first.expected, second.expected) == (2, 4)
    got = store.get_run(first.id)
    assert got == first
    assert (got.status, got.persisted, got.report) == ("pending", 0, None)
    assert (got.catalog_name, got.digest) == ("demo", cat.digest)
    assert (got.context, got.options, got.models, got.strategy) == ({"tenant": "acme"}, {"x": 1}, ["m1"],
                                                                    "sequential")
    assert second.context is None and second.options == {}
    assert got.created_at.tzinfo == timezone.utc
    assert [r.id for r in store.list_runs()] == [second.id, first.id]
    assert [r.id for r in store.list_runs(limit=1)] == [second.id]
    store.mark_running(first.id)
    assert [r.id for r in store.list_runs(statuses=["running"])] == [first.id]


@pytest.mark.parametrize("models,match", [([], "at least one model"),
                                          (["m1", "m2", "m1"], "'m1' is given more")])
def test_create_run_needs_distinct_models(url: str, models: list[str], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        store.create_run(make_catalog(["a"]), models, strategy="fanout")


def test_unknown_run_is_a_one_line_error(url: str) -> None:
    with pytest.raises(store.UnknownRun, match=r"^unknown run 'r_nope'[^\n]*$"):
        store.get_run("r_nope")
    for call in (store.mark_running, store.cancel, store.missing_pairs, store.progress,
                 lambda run_id: store.finalize(run_id, build_report)):
        with pytest.raises(store.UnknownRun):
            call("r_nope")
    with pytest.raises(store.UnknownRun):
        store.record_result("r_nope", passed("a", "m1"))


def test_snapshot_round_trip_is_parsed_once_per_process(url: str, monkeypatch) -> None:
    cat = make_catalog(["b", "a"], name="snap")
    store.forget_snapshots()
    store.save_snapshot(cat)
    store.save_snapshot(cat)  # insert if absent: no error
    assert store.load_snapshot(cat.digest) is cat, "the saving process reuses the catalog it has"
    store.forget_snapshots()
    parsed = []
    real = catalog_module.catalog_from_body

    def spy(body, source="<snapshot>"):
        parsed.append(source)
        return real(body, source=source)

    monkeypatch.setattr(store.snapshots, "catalog_from_body", spy)  # the name the store calls
    loaded = store.load_snapshot(cat.digest)
    assert loaded == cat and loaded.digest == cat.digest and loaded.body == cat.body
    assert store.load_snapshot(cat.digest) is loaded
    assert len(parsed) == 1 and parsed[0].startswith("<snapshot ")


def test_unknown_snapshot(url: str) -> None:
    with pytest.raises(store.UnknownSnapshot, match="unknown catalog snapshot 'deadbeef'"):
        store.load_snapshot("deadbeef")


def test_status_transitions(run: store.RunInfo) -> None:
    assert store.mark_running(run.id) is True
    assert store.mark_running(run.id) is False
    info = store.get_run(run.id)
    assert info.status == "running" and info.started_at is not None and info.finished_at is None
    store.set_status(run.id, "running", note="resumed")
    assert store.get_run(run.id).note == "resumed"
    assert store.cancel(run.id) is True
    assert store.cancel(run.id) is False
    info = store.get_run(run.id)
    assert info.status == "cancelled" and info.finished_at is not None and info.finished
    store.set_status(run.id, "failed", note="gave up")
    again = store.get_run(run.id)
    assert (again.status, again.note, again.finished_at) == ("failed", "gave up", info.finished_at)
    with pytest.raises(ValueError, match="unknown run status 'done'"):
        store.set_status(run.id, "done")


def test_set_status_stamps_start_and_finish_once(run: store.RunInfo) -> None:
    store.set_status(run.id, "running")
    started = store.get_run(run.id).started_at
    assert started is not None and started.tzinfo == timezone.utc
    store.set_status(run.id, "running")
    store.set_status(run.id, "partial")
    info = store.get_run(run.id)
    assert info.started_at == started and info.finished_at is not None and info.finished_at >= started


def test_judge_calls_are_capped_per_run(run: store.RunInfo) -> None:
    assert [store.take_judge_call(run.id, 2) for _ in range(4)] == [True, True, False, False]


# -- the barrier ------------------------------------------------------------------------------


def test_record_result_round_trips_every_field(run: store.RunInfo) -> None:
    result = Result(scenario_key="s2", model="m1", status="failed", score=0.25, scores={"contains": 0.5},
                    fault="wrong_tool", output="héllo",
                    tool_calls=[{"name": "lookup", "arguments": {"id": 1}}],
                    duration_ms=1234, input_tokens=11, output_tokens=7, cost=0.00123, attempts=2,
                    error="bad tool", details={"judge": {"why": "nope"}}, cached=True)
    assert store.record_result(run.id, result).inserted
    [stored] = store.list_results(run.id)
    # stamped with the digest of the scenario it was graded against (what compare tells an edit by)
    assert stored.scenario_digest == store.verdict_digest_in(run.digest, "s2")
    assert stored.scenario_digest is not None and stored.scenario_digest.startswith("sha256:")
    assert replace(stored, scenario_digest=None) == result
    assert store.is_recorded(run.id, "s2", "m1") and not store.is_recorded(run.id, "s2", "m2")


def test_record_result_is_idempotent(run: store.RunInfo) -> None:
    first = store.record_result(run.id, passed("s1", "m1"))
    again = store.record_result(run.id, Result("s1", "m1", "failed", score=0.0))
    assert first == store.Recorded(inserted=True, completed=False, persisted=1, expected=6)
    assert again == store.Recorded(inserted=False, completed=False, persisted=1, expected=6)
    assert [r.status for r in store.list_results(run.id)] == ["passed"], "the first result stays"
    assert store.get_run(run.id).persisted == 1


@pytest.mark.parametrize("key,model,why", [("s9", "m1", "scenario 's9' is not in catalog 'demo'"),
                                           ("s1", "gpt-x", "model 'gpt-x' is not one of the run's models")])
def test_unexpected_pair_is_rejected_and_not_stored(run: store.RunInfo, key: str, model: str,
                                                    why: str) -> None:
    with pytest.raises(store.UnexpectedPair) as caught:
        store.record_result(run.id, passed(key, model))
    message = str(caught.value)
    assert "\n" not in message and run.id in message and why in message
    assert f"scenario {key!r} × model {model!r}" in message
    assert store.list_results(run.id) == [] and store.get_run(run.id).persisted == 0


def test_only_the_last_insert_completes(run: store.RunInfo) -> None:
    outcomes = [store.record_result(run.id, passed(k, m)) for k, m in all_pairs(run)]
    assert [o.completed for o in outcomes] == [False] * 5 + [True]
    assert [o.persisted for o in outcomes] == [1, 2, 3, 4, 5, 6]
    assert store.record_result(run.id, passed("s3", "m2")).completed is False
    assert store.missing_pairs(run.id) == []


def test_missing_pair_blocks_completion_and_finalize(run: store.RunInfo) -> None:
    pairs = all_pairs(run)
    outcomes = [store.record_result(run.id, passed(k, m)) for k, m in pairs if (k, m) != ("s2", "m1")]
    assert not any(o.completed for o in outcomes)
    assert store.missing_pairs(run.id) == [("s2", "m1", 0)]
    with pytest.raises(store.Incomplete, match=rf"^run {run.id} has 5 of 6 pairs; missing: s2 × m1$"):
        store.finalize(run.id, build_report)
    assert store.get_run(run.id).report is None


def test_missing_pairs_in_catalog_order(run: store.RunInfo) -> None:
    store.record_result(run.id, passed("s1", "m2"))
    store.record_result(run.id, passed("s3", "m1"))
    assert store.missing_pairs(run.id) == [("s1", "m1", 0), ("s2", "m1", 0), ("s2", "m2", 0), ("s3", "m2", 0)]


def test_list_results_and_progress(url: str) -> None:
    run = store.create_run(make_catalog(["b", "a", "c"]), ["z", "y"], strategy="fanout")
    store.record_result(run.id, passed("c", "y"))
    store.record_result(run.id, Result("a", "z", "failed", score=0.2))
    store.record_result(run.id, Result.errored("b", "y", "quota"))
    store.record_result(run.id, passed("a", "y"))
    assert [r.pair for r in store.list_results(run.id)] == [("a", "y"), ("a", "z"), ("b", "y"), ("c", "y")]
    assert store.progress(run.id) == {"expected": 6, "persisted": 4, "passed": 2, "failed": 1, "errored": 1}


def test_finalize_once_then_returns_the_same_report(run: store.RunInfo) -> None:
    for i, (k, m) in enumerate(all_pairs(run)):
        store.record_result(run.id, passed(k, m, duration_ms=100 * (i + 1)) if i else
                            Result.errored(k, m, "provider down"))
    first = store.finalize(run.id, build_report)
    second = store.finalize(run.id, build_report)
    assert (first.created, second.created) == (True, False)
    assert second.report == first.report
    info = store.get_run(run.id)
    assert info.report == first.report and info.status == "partial" and info.finished_at is not None
    assert first.report["run"]["id"] == run.id and first.report["summary"]["errored"] == 1
    assert first.report["run"]["finished_at"] == info.finished_at.isoformat()


@pytest.mark.parametrize("statuses,final", [(["passed", "failed"], "complete"),
                                            (["errored", "errored"], "failed")])
def test_finalize_status(url: str, statuses: list[str], final: str) -> None:
    run = store.create_run(make_catalog(["s1", "s2"]), ["m"], strategy="sequential")
    for key, status in zip(["s1", "s2"], statuses):
        store.record_result(run.id, Result(key, "m", status))
    store.finalize(run.id, build_report)
    assert store.get_run(run.id).status == final


# -- concurrency ------------------------------------------------------------------------------


def _record_all(run_id: str, pairs: list[tuple[str, str]], seed: int, start: threading.Barrier | None = None):
    order = pairs[:]
    random.Random(seed).shuffle(order)
    if start is not None:
        start.wait()
    return [store.record_result(run_id, passed(k, m)) for k, m in order]


def test_concurrent_record_result_completes_exactly_once(url: str) -> None:
    """16 threads each deliver every pair (as redeliveries would): one row per pair, one completion."""
    run = store.create_run(make_catalog([f"s{i}" for i in range(4)]), ["m1", "m2", "m3", "m4"],
                           strategy="fanout")
    pairs = all_pairs(run)
    start = threading.Barrier(16)
    with ThreadPoolExecutor(16) as pool:
        outcomes = [o for f in [pool.submit(_record_all, run.id, pairs, seed, start) for seed in range(16)]
                    for o in f.result()]
    assert sum(o.inserted for o in outcomes) == len(pairs) == 16
    assert sum(o.completed for o in outcomes) == 1
    assert store.get_run(run.id).persisted == 16 == len(store.list_results(run.id))


def test_racing_last_inserts_complete_exactly_once(url: str) -> None:
    """The row lock's reason to exist: two last pairs committed at the same time must not both count N-1."""
    cat = make_catalog(["only"])
    runs = [store.create_run(cat, ["m1", "m2"], strategy="fanout") for _ in range(30)]
    start = threading.Barrier(2)

    def record(run_id: str, model: str) -> bool:
        start.wait()
        return store.record_result(run_id, passed("only", model)).completed

    with ThreadPoolExecutor(2) as pool:
        for run in runs:
            completions = list(pool.map(lambda model: record(run.id, model), ["m1", "m2"]))
            assert sorted(completions) == [False, True], run.id


def _child(url: str, run_id: str, pairs: list[tuple[str, str]], seed: int, queue) -> None:
    store.connect(url)
    with ThreadPoolExecutor(4) as pool:
        outcomes = [o for f in [pool.submit(_record_all, run_id, pairs, seed * 10 + i) for i in range(4)]
                    for o in f.result()]
    queue.put([(o.inserted, o.completed) for o in outcomes])


def test_concurrent_processes_complete_exactly_once_on_sqlite(sqlite_url: str) -> None:
    store.connect(sqlite_url)
    run = store.create_run(make_catalog([f"s{i}" for i in range(6)]), ["m1", "m2", "m3"], strategy="fanout")
    pairs = all_pairs(run)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    children = [ctx.Process(target=_child, args=(sqlite_url, run.id, pairs, seed, queue)) for seed in (1, 2)]
    for child in children:
        child.start()
    for child in children:
        child.join(timeout=60)
        assert child.exitcode == 0
    outcomes = [o for _ in children for o in queue.get(timeout=5)]
    assert sum(inserted for inserted, _ in outcomes) == len(pairs) == 18
    assert sum(completed for _, completed in outcomes) == 1
    assert store.progress(run.id)["persisted"] == 18


def test_concurrent_finalize_creates_one_report(run: store.RunInfo) -> None:
    for k, m in all_pairs(run):
        store.record_result(run.id, passed(k, m))
    start = threading.Barrier(8)

    def finalize():
        start.wait()
        return store.finalize(run.id, build_report)

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(lambda _: finalize(), range(8)))
    assert sum(o.created for o in outcomes) == 1
    assert all(o.report == outcomes[0].report for o in outcomes)
    assert store.get_run(run.id).report == outcomes[0].report


# -- indexed, never scanned -------------------------------------------------------------------


def test_per_run_queries_use_the_index_on_sqlite(sqlite_url: str) -> None:
    db = store.connect(sqlite_url)
    queries = [query.sql() for query in (store_results._results_query("r_x"),
                                          store_results._progress_query("r_x"),
                                          store_results._pairs_query("r_x"))]
    values = {"run_id": "r_x", "scenario_key": "k", "model": "m", "epoch": 0}
    for build in (store_results._pair_state_query, store_results._run_facts_query,
                  store_results._persisted_query):
        compiled = store_results._compiled(db, build)
        queries.append((compiled.sql, [values[p.name] if isinstance(p, store_results._Slot) else p
                                       for p in compiled.params]))
    for sql, params in queries:
        with store.connection():
            plan = " | ".join(row[-1] for row in db.execute_sql("EXPLAIN QUERY PLAN " + sql, params))
        assert "SCAN" not in plan and "USING" in plan and "INDEX" in plan, plan


def test_result_table_has_the_unique_pair_index(db_url: str) -> None:
    db = store.connect(db_url)
    with store.connection():
        indexes = db.get_indexes("result")
    assert any(ix.unique and ix.columns == ["run_id", "scenario_key", "model", "epoch"] for ix in indexes), (
        indexes
    )
    run = store.create_run(make_catalog(["a"]), ["m"], strategy="fanout")
    with store.connection(), pytest.raises(peewee.IntegrityError):
        row = dict(run=run.id, scenario_key="a", model="m", status="passed", score=1.0, scores="{}",
                   output="", tool_calls="[]", duration_ms=0, input_tokens=0, output_tokens=0, cost=0.0,
                   attempts=1, details="{}", cached=False,
                   created_at=datetime.now(timezone.utc).replace(tzinfo=None))
        store.ResultRow.insert(**row).execute()
        store.ResultRow.insert(**row).execute()


def _connect_at_once(url: str, barrier, answers) -> None:
    try:
        barrier.wait(30)
        store.connect(url)
        answers.put("ok")
    except BaseException as exc:  # noqa: BLE001 - told to the test, whatever it is
        answers.put(f"{type(exc).__name__}: {exc}")


def test_processes_starting_together_on_a_new_sqlite_database_all_connect(tmp_path, monkeypatch):
    """Each process's first connection switches the file to WAL; SQLite refuses that at once ("database
    is locked", no busy handler) while another process does the same. Worker processes starting
    together on a new database failed about one connect in 25; they wait it out now.

    The processes come from a fork server (a fresh single-threaded interpreter with this module
    loaded), as worker processes start fresh: forked from the pytest worker they would also inherit
    whatever threads earlier tests of that worker left running."""
    # The fork server finds this module by PYTHONPATH: Python 3.11's ignores the sys.path it is handed
    # and drops a preload it cannot import without a word, and then each of the 60 processes imported
    # this module (evaljobs' store and catalog) itself before the barrier: ~0.4 s of CPU apiece.
    monkeypatch.setenv("PYTHONPATH", CHILD_PYTHONPATH)
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    answers = context.Queue()
    for trial in range(15):
        url = f"sqlite:///{tmp_path}/new{trial}.db"
        barrier = context.Barrier(4)
        processes = [context.Process(target=_connect_at_once, args=(url, barrier, answers)) for _ in range(4)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(60)
        exits = [process.exitcode for process in processes]
        told = [answers.get(timeout=10) for _ in processes]
        assert told == ["ok"] * 4, f"trial {trial}, exit codes {exits}"


def _connect_and_tell(url: str, answers) -> None:
    try:
        store.connect(url)
        answers.put("ok")
    except BaseException as exc:  # noqa: BLE001 - told to the test, whatever it is
        answers.put(f"{type(exc).__name__}: {exc}")


def test_a_child_forked_while_another_thread_holds_the_stores_lock_still_connects(tmp_path):
    """A thread of the parent inside the store's binding lock at the fork (a lease renewal retrying
    through a lost database) left the child's lock held for ever: its first connect hung."""
    from evaljobs.store import connections

    context = multiprocessing.get_context("fork")
    answers = context.Queue()
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with connections._bind_lock:
            inside.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert inside.wait(10)
        child = context.Process(target=_connect_and_tell, args=(f"sqlite:///{tmp_path}/forked.db", answers))
        child.start()
        child.join(30)
        assert answers.get(timeout=5) == "ok"
    finally:
        release.set()
        holder.join()


def test_a_snapshot_read_back_stamps_the_verdict_digest_computed_apart(url: str) -> None:
    from evaljobs.catalog import loads_catalog
    from evaljobs.catalog.digest import scenario_verdict_digest

    cat = loads_catalog("name: v\nscenarios:\n  - {key: j, prompt: hi, expect: {judge: kind?}}\n"
                        "  - {key: p, prompt: hi, expect: {contains: [hi]}}\n")
    store.save_snapshot(cat)
    store.forget_snapshots()  # read back from the database, as a worker does
    assert store.load_snapshot(cat.digest).scenario_digests is not None
    for judges in ((None, None), ("sim/judge", None), (None, "sim/default-judge")):
        for scenario in cat.scenarios:
            assert store.verdict_digest_in(cat.digest, scenario.key, judges) \
                == scenario_verdict_digest(scenario, *judges)
