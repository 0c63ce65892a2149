"""The public surface, pinned (httpx's tests/system/test_exported_members.py is the model).

A name added to or taken from ``evaljobs``, ``evaljobs.api`` or :class:`evaljobs.api.Session` is a change
hosts see: this test makes it a deliberate one (and docs/api.md, CHANGELOG.md say so). Every exported name
resolves (the lazy tables name real objects), and ``Session`` stays small: what needs no session is a
function of the module that owns it, re-exported by ``evaljobs.api``.
"""
from __future__ import annotations

import evaljobs
from evaljobs import api

PACKAGE = ["Adapter", "Catalog", "CatalogError", "EvaljobsError", "ModelSpec", "Replay", "Result", "Scenario",
           "Session", "Settings", "SimulatedProvider", "Tool", "ToolCall", "UsageError", "load_catalog",
           "parse_model_spec", "__version__"]

API = ["Session", "Selection", "Recovery", "RunDetail", "Cancellation", "RenderedReport", "DemoRun",
       "Verdict", "UsageError", "CatalogError", "capture_context", "rerun_selection", "render_run",
       "REPORT_FORMATS", "DEMO_MODELS", "benchmark",
       # needing no session, each from the module that owns it (loaded on first use)
       "run_pool", "work", "serve_pool", "serve_simulated_provider", "governor_budgets", "upgrade_schema",
       "start_project", "serve_viewer", "export_run", "check_catalog", "convert_catalog", "catalog_schema",
       "list_providers", "check_providers_live", "CatalogCheck", "ProviderCheck", "ProviderList",
       "ConvertedCatalog", "export_labels", "import_labels", "judge_agreement", "human_review",
       "JudgeAgreement"]

SESSION = ["binding", "cancel", "clear_cache", "close", "compare", "create_rerun", "demo", "follows",
           "get", "load", "pool", "recover", "render_report", "report", "rerun", "resolve", "results", "run",
           "runs", "show", "start", "status", "submit", "wait", "watch"]


def test_the_package_exports_exactly_its_public_names():
    assert sorted(evaljobs.__all__) == sorted(PACKAGE)
    for name in evaljobs.__all__:
        assert getattr(evaljobs, name) is not None, name


def test_the_api_exports_exactly_its_public_names():
    assert sorted(api.__all__) == sorted(API)
    for name in api.__all__:
        assert getattr(api, name) is not None, name


def test_the_session_keeps_to_its_public_names():
    public = sorted(name for name in vars(api.Session) if not name.startswith("_"))
    assert public == sorted(SESSION)
    assert len(public) <= 25


def test_what_needs_no_session_is_not_a_method_of_it():
    for name in ("work", "serve_viewer", "start_project", "benchmark", "check_catalog", "export_labels"):
        assert not hasattr(api.Session, name), name
