"""acme-host's own tests of its evaljobs plug-ins, written as a host writes them.

No conftest: the fixtures come from the ``evaljobs.testing`` pytest plugin that installing
evaljobs registers. Each run is the whole pipeline on a Dramatiq StubBroker with a real worker.
"""
from acme_host import publishing_domain

CATALOG = {"name": "acme-smoke", "scenarios": [
    {"key": "publish", "prompt": "publish the spring issue", "expect": {"contains": ["published for"]}},
    {"key": "reprint", "prompt": "reprint the winter issue", "expect": {"contains": ["published for"]}},
]}


def test_the_adapter_answers_for_the_domain_the_run_was_started_in(evaljobs_run):
    finished = evaljobs_run(CATALOG, ["sim/fast"], adapter="acme", context=publishing_domain("acme"))

    assert finished.status == "complete", finished.report
    for result in finished.results:
        assert result.status == "passed", result.error
        assert "published for acme" in result.output
        assert result.details["meta"]["publishing_domain"] == "acme"


def test_the_context_provider_carries_the_domain_and_a_missing_one_fails_each_pair(evaljobs_run):
    carried = evaljobs_run(CATALOG, ["sim/fast"], adapter="acme", context=publishing_domain("beta"))
    assert carried.context == {"publishing_domain": "beta"}
    assert {r.details["meta"]["publishing_domain"] for r in carried.results} == {"beta"}

    missing = evaljobs_run(CATALOG, ["sim/fast"], adapter="acme")  # no domain on the submitting thread
    assert missing.context is None
    assert {r.status for r in missing.results} == {"errored"}
    assert all("needs a publishing domain" in r.error for r in missing.results)
