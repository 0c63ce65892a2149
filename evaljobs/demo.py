"""``evaljobs demo``: the bundled support catalog, run against two simulated models and reported.

A fan-out run on the session's broker (the CLI's is the in-process one, so that session's workers
evaluate it), followed to its report, written as HTML beside the text. It is a session's run like any
other: :meth:`evaljobs.api.Session.demo` hands itself in; this module knows only what the demo runs
and what it prints.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from evaljobs.catalog import Catalog
from evaljobs.outcomes import DemoRun
from evaljobs.pipeline.progress import Progress
from evaljobs.resources import demo_catalog
from evaljobs.store import RunInfo

#: The simulated models ``evaljobs demo`` runs the bundled catalog against.
DEMO_MODELS = ("sim/fast", "sim/smart")


class DemoSession(Protocol):
    """What the demo uses of :class:`evaljobs.api.Session`."""

    width: int

    def load(self, catalog: str | Path | Catalog) -> Catalog: ...

    def run(self, catalog: str | Path | Catalog, models: Sequence[str], *, strategy: str = "fanout",
            on_event: Callable[[dict[str, Any]], None] | None = None,
            on_submit: Callable[[RunInfo], None] | None = None) -> RunInfo: ...

    def report(self, run_id: str, format: str = "md") -> str: ...


def run_demo(session: DemoSession, *, format: str = "table", html: str | Path | None = None,
             progress: bool = False, on_note: Callable[[str], None] | None = None) -> DemoRun:
    """Run the demo on ``session``; see :meth:`evaljobs.api.Session.demo`."""
    models = list(DEMO_MODELS)
    cat = session.load(demo_catalog())  # package data: works from a wheel with no source tree around
    bar = Progress(len(cat.scenarios) * len(models)) if progress else None

    def submitted(info: RunInfo) -> None:
        if on_note is not None:
            on_note(f"run {info.id}: {len(cat.scenarios)} scenarios × {len(models)} simulated models, "
                    f"fan-out over {session.width} in-process workers")

    info = session.run(cat, models, strategy="fanout", on_event=bar, on_submit=submitted)
    text = session.report(info.id, format)
    html_file = Path(html) if html else Path(".evaljobs") / f"{info.id}.html"
    html_file.parent.mkdir(parents=True, exist_ok=True)
    html_file.write_text(session.report(info.id, "html"), encoding="utf-8")
    return DemoRun(run=info, text=text, html_path=html_file.resolve())


__all__ = ["DEMO_MODELS", "DemoSession", "run_demo"]
