"""Human review labels (issue 43): kept beside the machine's verdict, carried forward to the same answer in
later runs, exported and imported as JSONL, and written through the viewer only by a session that holds the
token, with its CSRF token and from its own origin (``--read-only``: never).

The viewer runs as its own process on a free loopback port; every request is real HTTP.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
from helpers import Viewer

from evaljobs import store
from evaljobs.catalog import loads_catalog
from evaljobs.evaluation.result import Result
from evaljobs.reports.build import build_report

MARKUP = '<script>document.title="pwned"</script><img src=x onerror="document.body.dataset.pwned=1">'
CATALOG = """\
name: labelled
scenarios:
  - {key: greet, prompt: "Say hello.", expect: {contains: [hello]}}
  - {key: bye, prompt: "Say goodbye.", expect: {contains: [goodbye]}}
"""


def _run(answers: dict[tuple[str, str], str], status: str = "passed") -> str:
    catalog = loads_catalog(CATALOG, source="labelled.yaml")
    run = store.create_run(catalog, sorted({m for _, m in answers}), strategy="sequential")
    store.mark_running(run.id)
    for (key, model), answer in answers.items():
        store.record_result(run.id, Result(key, model, status, 1.0 if status == "passed" else 0.0,
                                           output=answer))
    store.finalize(run.id, build_report)
    return run.id


ANSWERS = {("greet", "m1"): "hello there", ("bye", "m1"): "goodbye!", ("greet", "m2"): "hi",
           ("bye", "m2"): "see you"}


def test_a_label_sits_beside_the_verdict_and_carries_forward_to_the_same_answer(db_url):
    store.connect(db_url)
    first = _run(ANSWERS)
    kept = store.record_label(first, "greet", "m2", 0, verdict="fail", score=0.25, comment=MARKUP,
                              reviewer="ana")
    assert (kept.verdict, kept.score, kept.reviewer, kept.run_id) == ("fail", 0.25, "ana", first)
    machine = {r.ident: r.status for r in store.list_results(first)}
    assert machine[("greet", "m2", 0)] == "passed", "the machine's verdict is never overwritten"
    store.record_label(first, "bye", "m1", 0, verdict="pass", reviewer="bo")
    # the next run: greet×m2 answers the same (but for whitespace), bye×m1 answers differently
    second = _run({**ANSWERS, ("greet", "m2"): "  hi\n", ("bye", "m1"): "goodbye, friend"})
    carried = store.labels_for_run(second)
    assert set(carried) == {("greet", "m2", 0)}
    assert carried[("greet", "m2", 0)].run_id == first and carried[("greet", "m2", 0)].comment == MARKUP
    # a label given in the second run wins over the carried one, for that run only
    store.record_label(second, "greet", "m2", 0, verdict="pass", reviewer="cy")
    assert store.labels_for_run(second)[("greet", "m2", 0)].run_id == second
    assert store.labels_for_run(first)[("greet", "m2", 0)].verdict == "fail"


def test_a_bad_label_is_one_line(tmp_path):
    store.connect(f"sqlite:///{tmp_path}/l.db")
    run = _run(ANSWERS)
    for kwargs, words in [(dict(verdict="maybe"), "verdict 'maybe'"), (dict(verdict="pass", score=2),
                          "outside 0..1"), (dict(verdict="pass", reviewer=" "), "reviewer")]:
        with pytest.raises(store.BadLabel, match=words) as caught:
            store.record_label(run, "greet", "m1", 0, **{"reviewer": "ana", **kwargs})
        assert "\n" not in str(caught.value)
    with pytest.raises(store.UnexpectedPair, match="no result for nope"):
        store.record_label(run, "nope", "m1", 0, verdict="pass", reviewer="ana")


def test_a_schema_5_database_gains_the_label_table(tmp_path):
    url = f"sqlite:///{tmp_path}/old.db"
    db = store.connect(url)
    with db.connection_context():
        db.drop_tables([store.Label])
        store.SchemaVersion.delete().execute()
        store.SchemaVersion.create(version=5, applied_at=store.schema._now(), description="schema 5")
    store.connect(f"sqlite:///{tmp_path}/other.db")  # forget the open database, as a new process would
    store.connect(url)
    assert store.upgrade() == ["created table label", f"recorded schema version {store.LABELS_SCHEMA}"]


def test_labels_export_and_import_as_jsonl_through_the_cli(cli, tmp_path):
    source = f"sqlite:///{tmp_path}/a.db"
    store.connect(source)
    run = _run(ANSWERS)
    store.record_label(run, "greet", "m1", 0, verdict="pass", comment="fine\nreally", reviewer="ana")
    store.record_label(run, "bye", "m2", 0, verdict="fail", score=0.1, reviewer="bo")
    out = tmp_path / "labels.jsonl"
    done = cli("labels", "export", "--db", source, "-o", str(out))
    assert done.exit_code == 0, done.output
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [(x["scenario_key"], x["model"], x["verdict"], x["reviewer"]) for x in lines] == [
        ("greet", "m1", "pass", "ana"), ("bye", "m2", "fail", "bo")]
    # another database runs the same catalog and gives the same answers: the imported labels apply
    target = f"sqlite:///{tmp_path}/b.db"
    store.connect(target)
    again = _run(ANSWERS)
    done = cli("labels", "import", "--db", target, str(out))
    assert done.exit_code == 0 and "imported 2 labels" in done.output, done.output
    store.connect(target)
    found = store.labels_for_run(again)
    assert {k: (v.verdict, v.run_id) for k, v in found.items()} == {("greet", "m1", 0): ("pass", run),
                                                                    ("bye", "m2", 0): ("fail", run)}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(out.read_text(encoding="utf-8") + '{"run_id": "r_x", "verdict": "meh"}\n',
                   encoding="utf-8")
    done = cli("labels", "import", "--db", target, str(bad))
    assert done.exit_code == 2 and len(done.output.strip().splitlines()) == 1, done.output
    assert "bad.jsonl:3" in done.output and "missing scenario_key" in done.output


# -- writes through the viewer ----------------------------------------------------------------------------


@pytest.fixture
def labelled_db(tmp_path):
    url = f"sqlite:///{tmp_path}/evaljobs.db"
    store.connect(url)
    return url, _run(ANSWERS, status="failed")


def _token_file(viewer: Viewer) -> Path:
    found = re.search(r"token in (\S+\.token) ", viewer.log.read_text())
    assert found, viewer.log.read_text()
    return Path(found.group(1))


def _logged_in(viewer: Viewer, token: str) -> httpx.Client:
    client = httpx.Client(base_url=viewer.url, timeout=10, follow_redirects=True)
    assert client.get(f"/?token={token}").status_code == 200  # the 303 is followed, with the cookie set
    return client


def _csrf(client: httpx.Client, run: str) -> str:
    page = client.get(f"/runs/{run}/review")
    assert page.status_code == 200
    found = re.search(r'<meta name="csrf" content="([0-9a-f]+)">', page.text)
    assert found, "a session holding the token gets a CSRF token"
    return found.group(1)


LABEL = {"scenario_key": "greet", "model": "m1", "epoch": 0, "verdict": "pass", "comment": MARKUP}


def test_a_loopback_viewer_takes_a_label_only_with_its_token_csrf_and_origin(labelled_db, tmp_path):
    url, run = labelled_db
    viewer = Viewer(url, "memory", tmp_path / "view.log")
    try:
        token_file = _token_file(viewer)
        token = token_file.read_text().strip()
        assert token not in viewer.log.read_text(), "the write token is never printed"
        assert token_file.stat().st_mode & 0o077 == 0, "only its owner may read the token file"
        anonymous = httpx.Client(base_url=viewer.url, timeout=10)
        assert anonymous.get(f"/runs/{run}/review").status_code == 200  # loopback reads stay open
        assert 'name="csrf"' not in anonymous.get(f"/runs/{run}/review").text
        refused = anonymous.post(f"/runs/{run}/labels", json=LABEL)
        assert refused.status_code == 403 and "needs the token" in refused.text
        assert anonymous.get(f"/?token={token}x").status_code == 200  # a wrong token logs nobody in
        assert anonymous.post(f"/runs/{run}/labels", json=LABEL).status_code == 403

        client = _logged_in(viewer, token)
        csrf = _csrf(client, run)
        assert client.post(f"/runs/{run}/labels", json=LABEL).status_code == 403  # no CSRF token
        wrong = client.post(f"/runs/{run}/labels", json=LABEL, headers={"x-csrf-token": "0" * 64})
        assert wrong.status_code == 403 and "CSRF" in wrong.text
        foreign = client.post(f"/runs/{run}/labels", json=LABEL,
                              headers={"x-csrf-token": csrf, "origin": "http://evil.example"})
        assert foreign.status_code == 403 and "another origin" in foreign.text
        cross = client.post(f"/runs/{run}/labels", json=LABEL,
                            headers={"x-csrf-token": csrf, "sec-fetch-site": "cross-site"})
        assert cross.status_code == 403
        elsewhere = client.post(f"/runs/{run}", json=LABEL, headers={"x-csrf-token": csrf})
        assert elsewhere.status_code == 405, "labels are the only write"
        as_form = client.post(f"/runs/{run}/labels", data={"verdict": "pass"}, headers={"x-csrf-token": csrf})
        assert as_form.status_code == 415
        kept = client.post(f"/runs/{run}/labels", json=LABEL,
                           headers={"x-csrf-token": csrf, "origin": viewer.url})
        assert kept.status_code == 200, kept.text
        assert kept.json()["verdict"] == "pass" and kept.json()["reviewer"] == "viewer"
        bad = client.post(f"/runs/{run}/labels", json={**LABEL, "verdict": "<b>"},
                          headers={"x-csrf-token": csrf})
        assert bad.status_code == 400 and "verdict" in bad.json()["error"]
        # the comment full of markup comes back escaped, under the same CSP
        page = client.get(f"/runs/{run}/review")
        assert MARKUP not in page.text and "&lt;script&gt;" in page.text
        assert "unsafe-inline" not in page.headers["content-security-policy"]
        assert "script-src 'self'" in page.headers["content-security-policy"]
        exported = client.get(f"/runs/{run}/results.jsonl").text.splitlines()
        human = {(x["scenario_key"], x["model"]): x["human"] for x in map(json.loads, exported)}
        assert human[("greet", "m1")]["verdict"] == "pass" and human[("bye", "m1")] is None
        csv = client.get(f"/runs/{run}/results.csv").text
        assert "human_verdict" in csv.splitlines()[0] and ",pass," in csv
    finally:
        viewer.close()
    assert not token_file.exists(), "the token file goes with the viewer"


def test_a_token_viewer_writes_for_its_session_and_read_only_refuses_every_write(labelled_db, tmp_path):
    url, run = labelled_db
    viewer = Viewer(url, "memory", tmp_path / "view.log",
                    extra=["--token", "s3cret tok", "--reviewer", "lead"])
    try:
        assert httpx.post(f"{viewer.url}/runs/{run}/labels", json=LABEL, timeout=10).status_code == 401
        client = _logged_in(viewer, "s3cret%20tok")
        kept = client.post(f"/runs/{run}/labels", json=LABEL, headers={"x-csrf-token": _csrf(client, run)})
        assert kept.status_code == 200 and kept.json()["reviewer"] == "lead"
        script = httpx.post(f"{viewer.url}/runs/{run}/labels", json={**LABEL, "reviewer": "ci"}, timeout=10,
                            headers={"authorization": "Bearer s3cret tok"})
        assert script.status_code == 200 and script.json()["reviewer"] == "ci"  # a bearer needs no CSRF
    finally:
        viewer.close()
    viewer = Viewer(url, "memory", tmp_path / "ro.log", extra=["--token", "s3cret", "--read-only"])
    try:
        assert "token in" not in viewer.log.read_text()
        client = _logged_in(viewer, "s3cret")
        page = client.get(f"/runs/{run}/review")
        assert 'name="csrf"' not in page.text and "read-only" in page.text
        assert "human: pass" in page.text, "labels are shown"
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            answer = client.request(method, f"/runs/{run}/labels", json=LABEL,
                                    headers={"authorization": "Bearer s3cret"})
            assert answer.status_code == 405 and "--read-only" in answer.text, method
    finally:
        viewer.close()


def test_the_report_shows_both_verdicts_and_the_gate_prefers_the_human_only_when_asked(cli, labelled_db):
    url, run = labelled_db  # every result failed by the machine
    for key, model in [("greet", "m1"), ("bye", "m1"), ("greet", "m2")]:
        store.record_label(run, key, model, 0, verdict="pass", comment="a | pipe", reviewer="ana")
    md = cli("report", run, "--db", url)
    assert md.exit_code == 0 and "## Human review" in md.output, md.output
    assert "3 of 4 results reviewed" in md.output and "disagrees with the machine on 3" in md.output
    assert "| greet | m1 | 0 | failed | pass | ana |" in md.output
    as_json = json.loads(cli("report", run, "--db", url, "--format", "json").output)
    assert as_json["summary"]["pass_rate"] == 0.0, "the machine's figure is left as it was"
    assert (as_json["human"]["labelled"], as_json["human"]["preferred_pass_rate"]) == (3, 0.75)
    machine = cli("report", run, "--db", url, "--fail-under", "0.7")
    assert machine.exit_code == 1 and "FAIL: pass rate 0.0%" in machine.output
    human = cli("report", run, "--db", url, "--fail-under", "0.7", "--prefer-human")
    assert human.exit_code == 0
    assert "OK: pass rate 75.0% with 3 reviewed results' human verdicts" in human.output
    stricter = cli("report", run, "--db", url, "--fail-under", "0.8", "--prefer-human")
    assert stricter.exit_code == 1 and "(--prefer-human)" in stricter.output


def test_label_reads_use_indexes_only(db_url):
    from helpers import full_scans, sql_log

    db = store.connect(db_url)
    first = _run(ANSWERS)
    store.record_label(first, "greet", "m2", 0, verdict="fail", reviewer="ana")
    second = _run(ANSWERS)
    for name, call in {"labels of a run": lambda: store.labels_for_run(second),
                       "labels of some runs": lambda: store.export_labels([first])}.items():
        with sql_log() as statements:
            call()
        selects = [(sql, params) for sql, params in statements
                   if sql.lstrip().upper().startswith("SELECT") and '"label"' in sql]
        assert selects, name
        with db.connection_context():
            for sql, params in selects:
                plan = full_scans(db, sql, params)
                assert [line for line in plan if "label" in line] == [], f"{name} scans labels: {sql}"
