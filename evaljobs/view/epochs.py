"""A grid cell of a run with epochs: the N rows of one (scenario, model) read as one cell.

With ``--epochs N`` a run has N rows per scenario and model. The run page keys its
cells by (scenario, model), so without this it showed whichever epoch came last. An
:class:`EpochCell` has the attributes the grid, its filters and its sorts read of a
single :class:`~evaljobs.store.pages.Cell` (status, fault, score, cost, duration,
preview), derived from its epochs, plus how many epochs passed and whether they
disagree (flaky: at least one passed and one failed, as in the report's statistics,
:mod:`evaljobs.reports.variance`; an errored epoch is a fault, not a verdict).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from evaljobs.store import Cell


@dataclass(frozen=True)
class EpochCell:
    scenario_key: str
    model: str
    epochs: tuple[Cell, ...]  # the recorded epochs, by epoch
    total: int  # the run's epochs per pair

    @property
    def recorded(self) -> int:
        return len(self.epochs)

    @property
    def passed(self) -> int:
        return sum(1 for c in self.epochs if c.status == "passed")

    @property
    def failed(self) -> int:
        return sum(1 for c in self.epochs if c.status == "failed")

    @property
    def errored(self) -> int:
        return sum(1 for c in self.epochs if c.status == "errored")

    @property
    def flaky(self) -> bool:
        return self.passed > 0 and self.failed > 0

    @property
    def status(self) -> str:
        """failed if an epoch failed, else errored if one errored, else pending until every epoch
        is in, else passed: what the status filter and the model-column sort read."""
        if self.failed:
            return "failed"
        if self.errored:
            return "errored"
        return "passed" if self.recorded >= self.total else "pending"

    @property
    def fault(self) -> str | None:
        """The first epoch's fault (the fault filter matches any epoch's, see :meth:`has_fault`)."""
        return next((c.fault for c in self.epochs if c.fault), None)

    def has_fault(self, fault: str) -> bool:
        return any(c.fault == fault for c in self.epochs)

    @property
    def score(self) -> float:
        return sum(c.score for c in self.epochs) / len(self.epochs) if self.epochs else 0.0

    @property
    def cost(self) -> float | None:
        known = [c.cost for c in self.epochs if c.cost is not None]
        return sum(known) if known else None

    @property
    def duration_ms(self) -> int:
        """The slowest epoch (the grid's "Slowest" column)."""
        return max((c.duration_ms for c in self.epochs), default=0)

    def _shown(self) -> Cell | None:
        """The epoch whose answer the cell previews: the first that did not pass, else the first."""
        return next((c for c in self.epochs if c.status != "passed"), self.epochs[0] if self.epochs else None)

    @property
    def preview(self) -> str:
        shown = self._shown()
        return shown.preview if shown else ""

    @property
    def error(self) -> str | None:
        shown = self._shown()
        return shown.error if shown else None

    @property
    def marks(self) -> str:
        """One letter per epoch in epoch order (P, F, E; ``·`` for one not recorded yet)."""
        by_epoch = {c.epoch: c.status[0].upper() for c in self.epochs}
        return "".join(by_epoch.get(i, "·") for i in range(self.total))


def epoch_cells(cells: Iterable[Cell], total: int) -> dict[tuple[str, str], EpochCell]:
    """(scenario, model) → its epochs as one cell."""
    grouped: dict[tuple[str, str], list[Cell]] = {}
    for cell in cells:
        grouped.setdefault((cell.scenario_key, cell.model), []).append(cell)
    return {pair: EpochCell(pair[0], pair[1], tuple(sorted(rows, key=lambda c: c.epoch)), total)
            for pair, rows in grouped.items()}


__all__ = ["EpochCell", "epoch_cells"]
