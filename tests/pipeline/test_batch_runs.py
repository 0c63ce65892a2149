"""Batch runs (``--batch``) end to end: real worker threads, the simulated provider's
batch APIs over loopback HTTP; each test on SQLite and on a real PostgreSQL (``db_url``).

What is checked: every pair once and one report; the provider was sent each request exactly once;
a pool of one worker thread finishes a batch run (nothing holds the thread while a batch is open);
a tool conversation goes in rounds, one batch request per turn; the batch price is half the listed
one and the report says what the run saved; expired and failed requests end their pairs errored
with the reason, and ``rerun --errored`` takes them again; cancelling a run cancels its batches.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaljobs import store
from evaljobs.api import Session
from evaljobs.errors import UsageError
from evaljobs.pipeline.batching import cancel_run
from evaljobs.store import batches as stored

#: tests/data/fan.yaml's three scenarios, and one whose calls the provider refuses (400).
CATALOG = (Path(__file__).parents[1] / "data" / "fan.yaml").read_text(encoding="utf-8").replace(
    "name: fan\n", "name: batched\n", 1
) + """\
  - key: d
    prompt: "[sim: status 400 refused here]"
    expect: {contains: [x]}
"""


@pytest.fixture()
def catalog(tmp_path):
    path = tmp_path / "batched.yaml"
    path.write_text(CATALOG, encoding="utf-8")
    return path


@pytest.fixture()
def providers_file(tmp_path):
    def make(sim):
        path = tmp_path / "providers.yaml"
        path.write_text(f"providers:\n  ant:\n    api: anthropic\n    base_url: {sim.url}\n"
                        f"    prices: {{'*': [3.0, 15.0]}}\n", encoding="utf-8")
        return str(path)
    return make


@pytest.fixture()
def quick(monkeypatch):
    """A batch goes after 0.05 s of waiting for more requests; open batches are looked at every 0.05 s."""
    monkeypatch.setenv("EVALJOBS_BATCH_WAIT", "0.05")
    monkeypatch.setenv("EVALJOBS_BATCH_POLL", "0.05")


def _submitted_once(sim) -> dict[str, int]:
    submitted = sim.stats()["batches"]["submitted"]
    assert submitted and set(submitted.values()) == {1}, submitted
    return submitted


def test_a_batch_run_on_one_worker_thread_records_every_pair_once_at_half_price(
        simulated_provider, db_url, catalog, quick):
    sim = simulated_provider(batch_delay=0.2)
    with Session(db=db_url, broker="memory", width=1) as session:
        plain = session.wait(session.submit(catalog, ["sim/m1", "sim/m2"]).id, timeout=120).id
        interactive_calls = sim.stats()["requests"]
        info = session.submit(catalog, ["sim/m1", "sim/m2"], batch=True)
        done = session.wait(info.id, timeout=120)
        results = session.results(info.id)
        report = json.loads(session.report(info.id, "json"))
        interactive = {(r.scenario_key, r.model): r for r in session.results(plain)}
    assert done.status == "partial" and done.persisted == done.expected == 8
    assert sorted((r.scenario_key, r.model) for r in results) == sorted(interactive)
    # The same verdicts as the interactive run, at half its cost.
    assert {(r.scenario_key, r.model): r.status for r in results} == {
        k: r.status for k, r in interactive.items()
    }
    for result in results:
        twin = interactive[(result.scenario_key, result.model)]
        if result.status != "errored":
            assert result.cost == pytest.approx(twin.cost / 2)
            assert result.details["meta"]["batch"]["interactive_cost"] == pytest.approx(twin.cost)
    errored = {r.scenario_key: r.error for r in results if r.status == "errored"}
    assert set(errored) == {"d"} and "refused here" in errored["d"]
    # Each pair-turn went to the provider once: one request per single-turn pair, two for the tool pair.
    submitted = _submitted_once(sim)
    assert len(submitted) == 2 * (3 + 2)
    assert sim.stats()["requests"] - interactive_calls == len(submitted)  # no interactive call was made
    assert sim.stats()["batches"]["batches_created"] >= 2  # the tool pair's second turn is a later round
    batch = report["summary"]["batch"]
    assert batch["pairs"] == 6 and batch["cost"] == pytest.approx(report["summary"]["cost"])
    assert batch["saved"] == pytest.approx(batch["interactive_cost"] / 2)


def test_anthropic_batches_and_a_batch_size_cap(simulated_provider, db_url, catalog, quick, providers_file,
                                                monkeypatch):
    sim = simulated_provider(batch_delay=0)
    monkeypatch.setenv("EVALJOBS_BATCH_SIZE", "2")
    with Session(db=db_url, broker="memory", width=2, providers=providers_file(sim)) as session:
        info = session.submit(catalog, ["ant/claude"], batch=True)
        done = session.wait(info.id, timeout=120)
        batches = stored.run_batches(info.id)
    assert done.persisted == 4
    assert all(b.size <= 2 and b.state == stored.ENDED for b in batches) and len(batches) >= 3
    assert len(_submitted_once(sim)) == 5


def test_expired_requests_end_their_pairs_errored_and_rerun_takes_them_again(
        simulated_provider, db_url, catalog, quick):
    sim = simulated_provider(batch_delay=3600, batch_window=0.1)  # every batch expires unanswered
    with Session(db=db_url, broker="memory", width=1) as session:
        info = session.submit(catalog, ["sim/m1"], batch=True)
        done = session.wait(info.id, timeout=120)
        results = session.results(info.id)
        assert done.status == "failed"
        assert {r.error.split(":")[0] for r in results} == {"batch_expired"}
        sim.batches.window = None
        sim.batches.delay = 0
        again = session.rerun(info.id, ["errored"])
        second = session.wait(again.id, timeout=120)
    assert second.persisted == second.expected == 4
    assert (second.options or {}).get("batch") == ["sim"]  # a rerun is a batch run too


def test_batch_needs_a_batch_api_and_the_fanout_strategy(simulated_provider, db_url, catalog, tmp_path):
    simulated_provider()
    other = tmp_path / "p.yaml"
    other.write_text(
        "providers:\n  gem:\n    api: gemini\n    base_url: http://127.0.0.1:9/v1\n", encoding="utf-8"
    )
    with Session(db=db_url, broker="memory", width=1) as session:
        with pytest.raises(UsageError, match="needs --strategy fanout"):
            session.submit(catalog, ["sim/m1"], batch=True, strategy="sequential")
        assert store.list_runs() == []


def test_cancel_cancels_the_open_batches(cli, simulated_provider, db_url, catalog, quick, monkeypatch):
    sim = simulated_provider(batch_delay=3600)
    monkeypatch.setenv("EVALJOBS_BATCH_SIZE", "4")  # the four first turns go as one batch, at once
    monkeypatch.setenv("EVALJOBS_BATCH_WAIT", "3600")
    with Session(db=db_url, broker="memory", width=1) as session:
        info = session.submit(catalog, ["sim/m1"], batch=True)
        from helpers import wait_until

        assert wait_until(
            lambda: any(b.state == stored.OPEN for b in stored.run_batches(info.id)), timeout=60
        )
        cancelled, asked = cancel_run(info.id)
        # Either cancel_run asks, or the batch's poller (every 0.05 s here) saw the run cancelled first
        # and asked (stored.cancel_asked lets one of them): the batch is counted either way.
        assert cancelled.status == "cancelled" and asked == 1
        assert wait_until(lambda: not stored.open_batches(info.id), timeout=60)
    # (its poller, had it just seen the batch open in a cancelled run, may ask once more: harmless)
    assert sim.stats()["batches"]["cancel_requests"] >= 1
    assert sim.stats()["batches"]["open"] == 0
    # The command: one line; a second cancel finds nothing left to cancel; an unknown run is one error line.


    again = cli("cancel", info.id, "--db", db_url)
    assert (again.exit_code, again.output.strip()) == (0, f"run {info.id}: cancelled")
    unknown = cli("cancel", "r_nope", "--db", db_url)
    assert unknown.exit_code == 2 and "r_nope" in unknown.output and "Traceback" not in unknown.output


def test_the_pair_time_limit_does_not_run_while_parked_and_the_batch_deadline_does(
        simulated_provider, db_url, catalog, quick, monkeypatch):
    sim = simulated_provider(batch_delay=0.5)
    with Session(db=db_url, broker="memory", width=1) as session:
        # Each pair waits in a batch longer than its own time limit: the limit counts evaluating, not waiting.
        info = session.submit(catalog, ["sim/m1"], batch=True, time_limit=0.3)
        done = session.wait(info.id, timeout=120)
        assert done.persisted == 4 and not [
            r for r in session.results(info.id) if "timed out" in (r.error or "")
        ]
        sim.batches.delay = 3600
        monkeypatch.setenv("EVALJOBS_BATCH_DEADLINE", "0.2")  # the run's batches may stay open 0.2 s
        late = session.wait(session.submit(catalog, ["sim/m2"], batch=True).id, timeout=120)
        reasons = {r.error for r in session.results(late.id)}
    assert late.status == "failed"
    assert reasons == {"batch_expired: not answered within the batch deadline (0.2 s)"}
    assert sim.stats()["batches"]["cancel_requests"] >= 1 and sim.stats()["batches"]["open"] == 0


def test_status_and_the_fleet_page_list_the_open_batches(simulated_provider, db_url, catalog, quick, tmp_path,
                                                         monkeypatch):
    import httpx
    from helpers import Viewer, wait_until

    from evaljobs.workers.status import collect, render

    sim = simulated_provider(batch_delay=3600)
    monkeypatch.setenv("EVALJOBS_BATCH_SIZE", "4")  # the four first turns go as one batch, at once
    monkeypatch.setenv("EVALJOBS_BATCH_WAIT", "3600")
    with Session(db=db_url, broker="memory", width=1) as session:
        info = session.submit(catalog, ["sim/m1"], batch=True)
        assert wait_until(
            lambda: any(b.state == stored.OPEN for b in stored.run_batches(info.id)), timeout=60
        )
        status = collect(None)
        viewer = Viewer(db_url, "memory", tmp_path / "view.log")
        try:
            fleet = httpx.get(f"{viewer.url}/fleet", timeout=30).text
        finally:
            viewer.close()
        monkeypatch.setenv("EVALJOBS_BATCH_WAIT", "0.05")  # the tool pair's second round goes at once
        sim.batches.delay = 0  # and ends at once
        sim.batches.end_batches()
        assert session.wait(info.id, timeout=120).persisted == 4
    assert [(b["run"], b["provider"], b["model"], b["state"]) for b in status.batches] == [
        (info.id, "sim", "m1", stored.OPEN)]
    text = render(status)
    assert "batches: RUN" in text and info.id[:16] in text
    table = fleet.split('id="batches"', 1)[1].split("</table>", 1)[0]
    assert f'<a href="/runs/{info.id}">' in table and "<td data-label=\"Status\">in_progress</td>" in table


def test_a_provider_without_a_batch_api_ends_the_pairs_errored(simulated_provider, db_url, catalog, quick,
                                                               tmp_path):
    """The batch endpoints answer 404: the run ends (every pair errored with the refusal), nothing waits."""
    sim = simulated_provider()
    providers = tmp_path / "nobatch.yaml"
    providers.write_text(
        f"providers:\n  nobatch:\n    api: openai\n    base_url: {sim.url[:-3]}/nowhere/v1\n",
        encoding="utf-8",
    )
    with Session(db=db_url, broker="memory", width=1, providers=str(providers)) as session:
        done = session.wait(session.submit(catalog, ["nobatch/m"], batch=True).id, timeout=120)
        reasons = {r.error for r in session.results(done.id)}
    assert done.status == "failed" and done.persisted == 4
    assert len(reasons) == 1 and reasons.pop().startswith("batch refused by provider nobatch: HTTP 404")


@pytest.mark.postgres
def test_a_request_parked_while_its_group_is_claimed_is_never_left_unclaimed(
    simulated_provider, pg_url, catalog, monkeypatch
):
    """PostgreSQL, the interleaving that lost a request until ``recover``: a collector claims the group's
    first request; a second is parked while that claim is not committed yet, and commits only after
    the collector's last look. Driven step by step (events the test sets; the collector waits until
    the parker has counted or waits on a lock). Then every collector the protocol sent runs: no
    request of the group may be left unclaimed."""
    import threading

    from helpers import wait_until

    from evaljobs import catalog as catalogs
    from evaljobs.pipeline import batch_choice, batching
    from evaljobs.providers.batched import BatchRequest, custom_id, for_pair

    simulated_provider(batch_delay=3600)
    monkeypatch.setenv("EVALJOBS_BATCH_WAIT", "0")  # a collector claims what it finds at once
    store.connect(pg_url)
    run = store.create_run(
        catalogs.load_catalog(catalog), ["sim/m1"], strategy="fanout", options={"batch": ["sim"]}
    )
    stored._ensure()

    class Recorder:
        def __init__(self):
            self.collects: list[tuple[str, str, str]] = []

        def collect(self, run_id, provider, model, delay):
            self.collects.append((run_id, provider, model))

        def poll(self, key, delay):
            pass

        def evaluate(self, run_id, pairs):
            pass

    recorder = Recorder()
    monkeypatch.setattr(batch_choice, "_sender", recorder)
    lane = batching.StoreLane()

    def park(scenario):
        with for_pair(run.id, scenario, "sim/m1", 0):
            cid = custom_id(run.id, scenario, "sim/m1", 0, 0)
            lane.park(cid, "sim", BatchRequest(cid, "m1", [{"role": "user", "content": "[sim: say hi]"}]))

    park("a")
    assert recorder.collects == [(run.id, "sim", "m1")]
    recorder.collects.clear()

    claiming, parker_counted, collector_done = threading.Event(), threading.Event(), threading.Event()
    original = stored._transaction

    import psycopg2

    watcher = psycopg2.connect(pg_url)  # its own connection: pg_stat_activity is read once per transaction
    watcher.autocommit = True

    def parker_waits_on_a_lock():
        with watcher.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                           "AND wait_event_type = 'Lock'")
            return cursor.fetchone()[0] > 0

    from contextlib import contextmanager

    @contextmanager
    def stepped():
        with original() as db:
            yield db
            name = threading.current_thread().name
            if name == "collector":  # the claim is made, not committed
                claiming.set()
                assert wait_until(lambda: parker_counted.is_set() or parker_waits_on_a_lock(), timeout=60)
            elif name == "parker":  # the count is made, not committed
                parker_counted.set()
                assert collector_done.wait(60)

    monkeypatch.setattr(stored, "_transaction", stepped)
    failures: list[BaseException] = []

    def collector():
        try:
            batching.collect(run.id, "sim", "m1")
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failures.append(exc)
        finally:
            collector_done.set()

    def parker():
        try:
            park("c")
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failures.append(exc)

    threads = [threading.Thread(target=collector, name="collector")]
    threads[0].start()
    assert claiming.wait(60)
    threads.append(threading.Thread(target=parker, name="parker"))
    threads[1].start()
    for thread in threads:
        thread.join(120)
    watcher.close()
    assert not failures, failures
    monkeypatch.setattr(stored, "_transaction", original)
    # The messages the protocol sent run now (a queue delivers them): nothing may stay unclaimed.
    while recorder.collects:
        batching.collect(*recorder.collects.pop())
    assert stored.unclaimed(run.id, "sim", "m1")[0] == 0
    assert sorted(b.size for b in stored.run_batches(run.id)) == [1, 1]


JUDGED = """
name: judged-batch
defaults:
  judge_model: sim/judge
scenarios:
  - key: kind
    prompt: "My parcel is late. [sim: say I'm sorry the parcel is late; I will help and track it now.]"
    expect:
      judge: "The answer says sorry, offers help and tracks the parcel."
  - key: curt
    prompt: "My parcel is late. [sim: say Wait.]"
    expect:
      judge: "The answer says sorry, offers help and tracks the parcel."
  - key: refusing-judge
    prompt: "Hello [sim: say Hello there]"
    expect:
      contains: [hello]
      judge: "Friendly. [sim@judge: say I would rather not grade this.]"
  - key: broken-judge
    prompt: "Hello [sim: say Hello again]"
    expect:
      judge: "Friendly. [sim@judge: status 400 judge model is gone]"
"""


def test_batch_judge_parks_the_judge_calls_too_same_verdicts_at_the_batch_price(simulated_provider, db_url,
                                                                                tmp_path, quick):
    sim = simulated_provider(batch_delay=0.1)
    path = tmp_path / "judged.yaml"
    path.write_text(JUDGED, encoding="utf-8")
    with Session(db=db_url, broker="memory", width=1) as session:
        plain = session.wait(session.submit(path, ["sim/fast"]).id, timeout=120)
        interactive = {r.scenario_key: r for r in session.results(plain.id)}
        calls = sim.stats()["requests"]
        with pytest.raises(UsageError, match="--batch-judge needs every model's calls batched too"):
            session.submit(path, ["sim/fast"], batch_judge=True)  # the model's turns would be paid twice
        info = session.submit(path, ["sim/fast"], batch=True, batch_judge=True)
        assert (info.options or {}).get("batch_judge") == ["sim"]
        done = session.wait(info.id, timeout=120)
        batched = {r.scenario_key: r for r in session.results(info.id)}
    assert done.persisted == done.expected == 4
    # The judge's verdicts are the interactive run's, word for word.
    for key, twin in interactive.items():
        mine = batched[key]
        assert (mine.status, mine.fault, mine.scores, mine.error) == (
            twin.status,
            twin.fault,
            twin.scores,
            twin.error,
        )
        assert {k: v for k, v in mine.details["judge"].items() if k != "cost"} == \
            {k: v for k, v in twin.details["judge"].items() if k != "cost"}
    # The judge's calls went through batches, each once: a turn per pair, one judge call per readable
    # verdict, two (its retry) where the judge could not be read or reached — as the interactive run asked.
    submitted = _submitted_once(sim)
    assert len(submitted) == 4 + 1 + 1 + 2 + 2
    assert sim.stats()["requests"] - calls == len(submitted)  # not one interactive call
    # A judge call costs the batch price too: each pair (its turn and its judge) at half the interactive cost.
    for key, twin in interactive.items():
        model_only = batched[key].details["meta"]["batch"]["interactive_cost"]
        if key != "broken-judge":  # (a judge that could not be reached costs nothing)
            assert twin.cost > model_only  # the interactive judge was paid for
        assert batched[key].cost == pytest.approx(twin.cost / 2)


def test_a_rerun_chooses_its_mode_no_batch_and_batch(cli, simulated_provider, db_url, catalog, quick):
    """``rerun --errored --no-batch`` takes expired batch pairs again one call at a time; ``rerun --batch``
    makes a rerun of an interactive run a batch run."""


    sim = simulated_provider(batch_delay=3600, batch_window=0.1)  # every batch expires unanswered
    with Session(db=db_url, broker="memory", width=1) as session:
        expired = session.wait(session.submit(catalog, ["sim/m1"], batch=True).id, timeout=120)
        assert {r.error.split(":")[0] for r in session.results(expired.id)} == {"batch_expired"}
        submitted, calls = len(sim.stats()["batches"]["submitted"]), sim.stats()["requests"]
        again = session.start(session.create_rerun(expired.id, ["errored"], batch=False))
        assert again.options.get("rerun_of") == expired.id and "batch" not in again.options
        again = session.wait(again.id, timeout=120)
        assert again.persisted == 4
        assert {r.scenario_key for r in session.results(again.id) if r.status == "errored"} == {"d"}
    assert len(sim.stats()["batches"]["submitted"]) == submitted  # nothing went through a batch
    assert sim.stats()["requests"] - calls == 5  # one call a turn: three pairs of one, the tool pair's two
    sim.batches.window = None
    sim.batches.delay = 0
    out = cli("rerun", again.id, "--errored", "--batch", "--db", db_url, "--json")
    assert out.exit_code == 1, out.output  # its one pair errored again (refused by the provider), in a batch
    batched = store.list_runs()[0]
    assert batched.options.get("rerun_of") == again.id and batched.options.get("batch") == ["sim"]
    assert batched.persisted == batched.expected == 1
    assert len(sim.stats()["batches"]["submitted"]) == submitted + 1  # d's one turn, through a batch


CAPPED = """
name: capped-batch
defaults:
  judge_model: sim/judge
scenarios:
""" + "".join(f"""  - key: s{i}
    prompt: "My parcel is late. [sim: say I'm sorry the parcel is late; I will help and track it now.]"
    expect:
      judge: "The answer says sorry, offers help and tracks the parcel."
""" for i in range(4))


def test_the_judge_cap_counts_a_batched_judge_call_once(simulated_provider, db_url, tmp_path, quick):
    """``--judge-cap 2`` with ``--batch-judge``: a judged pair is evaluated twice (before and after its
    judge's batch), its judge call is reserved once — two pairs judged, as the interactive run judges."""
    sim = simulated_provider(batch_delay=0.1)
    path = tmp_path / "capped.yaml"
    path.write_text(CAPPED, encoding="utf-8")
    with Session(db=db_url, broker="memory", width=1) as session:
        plain = session.wait(session.submit(path, ["sim/fast"], judge_cap=2).id, timeout=120)
        info = session.submit(path, ["sim/fast"], batch=True, batch_judge=True, judge_cap=2)
        done = session.wait(info.id, timeout=120)
        interactive, batched = session.results(plain.id), session.results(info.id)
    assert done.persisted == done.expected == 4

    def judged(results):
        return sorted(r.scenario_key for r in results if "score" in (r.details.get("judge") or {}))

    assert len(judged(interactive)) == 2
    assert len(judged(batched)) == 2, [r.details.get("judge") for r in batched]
    assert len(_submitted_once(sim)) == 4 + 2  # each pair's turn, and the cap's two judge calls


WEIGHED = """
name: weighed-batch
defaults:
  judge_model: sim/judge
scenarios:
  - key: two-rubrics
    prompt: "My parcel is late. [sim: say I'm sorry the parcel is late; I will help and track it now.]"
    expect:
      weighted: true
      assertions:
        - {kind: judge, rubric: "The answer says sorry, offers help and tracks the parcel."}
        - {kind: judge, rubric: "Quotes the invoice number, refund amount and bank details.", threshold: 0.5}
"""


def test_two_judge_rubrics_of_one_pair_are_two_batch_requests(simulated_provider, db_url, tmp_path, quick):
    """A weighted list with two judge entries: each rubric its own batched request and its own verdict
    (the interactive run's), never the first rubric's answer read back for the second."""
    sim = simulated_provider(batch_delay=0.1)
    path = tmp_path / "weighed.yaml"
    path.write_text(WEIGHED, encoding="utf-8")
    with Session(db=db_url, broker="memory", width=1) as session:
        plain = session.wait(session.submit(path, ["sim/fast"]).id, timeout=120)
        info = session.submit(path, ["sim/fast"], batch=True, batch_judge=True)
        session.wait(info.id, timeout=120)
        (twin,), (mine,) = session.results(plain.id), session.results(info.id)
    assert twin.status == "failed"  # the second rubric does not hold: the interactive verdict
    assert (mine.status, mine.score, mine.scores) == (twin.status, twin.score, twin.scores)
    assert len(_submitted_once(sim)) == 1 + 2  # the turn, and one request per rubric
