"""Compare two runs pair by pair: what flipped, how scores and costs moved, what only one run has.

Domain code: no Dramatiq, peewee or httpx. Either side may be a stored report
(its compact ``results`` rows), a list of :class:`Result`, or a list of result
dicts, so a baseline can be compared from its report alone and an unfinished
run from its rows. Side A is the baseline (before), side B the candidate (after).

With epochs a pair's outcome is over its epochs: passed when every epoch passed,
errored when every epoch errored, failed otherwise; its score is the mean and its
cost the sum. A flip of a *flaky* pair (one side's epochs disagree) is a regression
or a fix only when the change in its pass rate is significant — two-sided Fisher's
exact test, p < :data:`~evaljobs.reports.variance.SIGNIFICANCE` (0.05); otherwise
its kind is ``flaky`` and it is not counted as a regression.

A pair whose scenario changed between the two runs — its conversation, expectations, judge rubric or
graders, or the judge model its run judges it with: each row carries the digest of what decides its
verdict (:func:`evaljobs.catalog.digest.scenario_verdict_digest`) — is ``changed``: the
catalog was edited, so its verdicts do not compare, and it is never counted as a regression or a fix
(nor in the per-model pass rates, which compare like with like). A side whose rows carry no digest (stored
before they were kept) can be given its run's digests by scenario key.

Pairs are listed as the catalog lists its scenarios (``order``, else as a report lists its rows, which is
the catalog's order), bare rows by scenario key.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence, Union

from evaljobs.evaluation.result import ERRORED, FAILED, PASSED, Result
from evaljobs.reports._format import known_sum
from evaljobs.reports.caching import side_cache
from evaljobs.reports.versions import comparison_notes, version_changes
from evaljobs.reports._format import signed_money as _signed_money
from evaljobs.reports.gate import Verdict
from evaljobs.reports.rows import short_digest
from evaljobs.reports.variance import SIGNIFICANCE, fisher_exact, pass_rate, scenario_passes

#: Kinds of change for a pair present in both runs.
REGRESSED = "regressed"  # passed → failed or errored
FIXED = "fixed"          # failed or errored → passed
FAILED_ERRORED = "failed_errored"  # failed ↔ errored: still not passing, but for another kind of reason
#: The scenario itself changed between the runs (its digest differs): neither a regression nor a fix.
CHANGED = "changed"
SAME = "same"
#: A flaky pair whose status changed but whose pass rate did not change significantly (Fisher, p >= 0.05).
FLAKY = "flaky"
#: Kinds for a pair present in one run only.
ONLY_A = "only_a"
ONLY_B = "only_b"
FLIPS = (REGRESSED, FIXED, FAILED_ERRORED)

Side = Union[Mapping[str, Any], Sequence[Result], Sequence[Mapping[str, Any]]]
#: Scenario key → its digest in a run's snapshot (None: unknown), for rows that carry none.
Digests = Callable[[str], Union[str, None]]


@dataclass(frozen=True)
class Outcome:
    """One run's verdict on one pair (what the comparison needs of a result)."""

    status: str
    score: float
    #: None when the price of the model was unknown.
    cost: float | None
    fault: str | None = None
    #: Over epochs: how many epochs passed, failed and were run (1/0/1 or 0/1/1 without epochs).
    passes: int = 0
    trials: int = 1
    failures: int = 0
    #: The short digest of the scenario the pair was graded against (None: not known).
    digest: str | None = None
    #: The model version(s) the provider said answered (None: not recorded).
    answered_by: str | None = None

    @property
    def flaky(self) -> bool:
        """Its epochs disagree: at least one passed and at least one failed."""
        return self.passes > 0 and self.failures > 0


@dataclass(frozen=True)
class PairChange:
    scenario_key: str
    model: str
    before: Outcome | None
    after: Outcome | None

    @property
    def pair(self) -> tuple[str, str]:
        return (self.scenario_key, self.model)

    @property
    def kind(self) -> str:
        if self.after is None:
            return ONLY_A
        if self.before is None:
            return ONLY_B
        if self.scenario_changed:
            return CHANGED
        was, now = self.before.status, self.after.status
        if was == now:
            return SAME
        if PASSED in (was, now) and (self.before.flaky or self.after.flaky) and not self.significant:
            return FLAKY
        if was == PASSED:
            return REGRESSED
        if now == PASSED:
            return FIXED
        return FAILED_ERRORED

    @property
    def scenario_changed(self) -> bool:
        """Both runs have the pair and graded it against different versions of its scenario."""
        if self.before is None or self.after is None:
            return False
        was, now = self.before.digest, self.after.digest
        return was is not None and now is not None and was != now

    @property
    def flipped(self) -> bool:
        return self.kind in FLIPS

    @property
    def p_value(self) -> float | None:
        """Two-sided Fisher's exact test of passes vs. the rest, before against after (None: one side
        only)."""
        if self.before is None or self.after is None:
            return None
        a, b = self.before, self.after
        return fisher_exact(a.passes, a.trials - a.passes, b.passes, b.trials - b.passes)

    @property
    def significant(self) -> bool:
        p = self.p_value
        return p is not None and p < SIGNIFICANCE

    @property
    def score_delta(self) -> float | None:
        if self.before is None or self.after is None:
            return None
        return round(self.after.score - self.before.score, 4)

    @property
    def cost_delta(self) -> float | None:
        if self.before is None or self.after is None or self.before.cost is None or self.after.cost is None:
            return None
        return round(self.after.cost - self.before.cost, 6)

    @property
    def transition(self) -> str:
        """``passed → failed``; a missing side reads ``-``."""
        return f"{self.before.status if self.before else '-'} → {self.after.status if self.after else '-'}"

    def to_dict(self) -> dict[str, Any]:
        def side(o: Outcome | None) -> dict[str, Any] | None:
            if o is None:
                return None
            found = {"status": o.status, "score": o.score, "cost": o.cost, "fault": o.fault}
            if o.trials > 1:
                found.update(passed=o.passes, epochs=o.trials, flaky=o.flaky)
            return found

        out = {"scenario_key": self.scenario_key, "model": self.model, "kind": self.kind,
               "before": side(self.before), "after": side(self.after),
               "score_delta": self.score_delta, "cost_delta": self.cost_delta}
        if (self.before and self.before.trials > 1) or (self.after and self.after.trials > 1):
            out["p_value"] = None if self.p_value is None else round(self.p_value, 6)
        return out


@dataclass(frozen=True)
class ModelDelta:
    """One model over the pairs both runs have (so the rates compare like with like)."""

    model: str
    #: Common scenario × model pairs; ``passed_*`` / ``trials_*`` count their rows (each epoch one row), so
    #: ``pass_rate_*`` is the pass rate every other view shows (:func:`~evaljobs.reports.variance.pass_rate`).
    pairs: int
    passed_a: int
    passed_b: int
    mean_score_a: float
    mean_score_b: float
    #: The known costs of the common pairs (None: none known) and how many were unknown on each side.
    cost_a: float | None
    cost_b: float | None
    regressed: int
    fixed: int
    failed_errored: int
    cost_unknown_a: int = 0
    cost_unknown_b: int = 0
    trials_a: int = 0
    trials_b: int = 0
    #: Over epochs: the common pairs whose epoch pass rate reaches the scenario's threshold ("scenarios
    #: passed").
    scenarios_passed_a: int = 0
    scenarios_passed_b: int = 0
    #: The model's pairs whose scenario changed between the runs: left out of everything above.
    changed: int = 0

    @property
    def cost_delta(self) -> float | None:
        """B minus A, when both sides' costs are fully known; unknown is never counted as 0."""
        if self.cost_a is None or self.cost_b is None or self.cost_unknown_a or self.cost_unknown_b:
            return None
        return round(self.cost_b - self.cost_a, 6)

    @property
    def pass_rate_a(self) -> float:
        return pass_rate(self.passed_a, self.trials_a or self.pairs)

    @property
    def pass_rate_b(self) -> float:
        return pass_rate(self.passed_b, self.trials_b or self.pairs)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "pairs": self.pairs,
                "passed_a": self.passed_a, "passed_b": self.passed_b,
                "pass_rate_a": self.pass_rate_a, "pass_rate_b": self.pass_rate_b,
                "pass_rate_delta": round(self.pass_rate_b - self.pass_rate_a, 4),
                "mean_score_a": self.mean_score_a, "mean_score_b": self.mean_score_b,
                "mean_score_delta": round(self.mean_score_b - self.mean_score_a, 4),
                "cost_a": self.cost_a, "cost_b": self.cost_b, "cost_delta": self.cost_delta,
                "cost_unknown_a": self.cost_unknown_a, "cost_unknown_b": self.cost_unknown_b,
                "regressed": self.regressed, "fixed": self.fixed, "failed_errored": self.failed_errored,
                "changed": self.changed,
                "trials_a": self.trials_a or self.pairs, "trials_b": self.trials_b or self.pairs,
                "scenarios_passed_a": self.scenarios_passed_a, "scenarios_passed_b": self.scenarios_passed_b}


@dataclass
class Comparison:
    run_a: str | None
    run_b: str | None
    changes: list[PairChange] = field(default_factory=list)  # every pair of either run, sorted
    models: list[ModelDelta] = field(default_factory=list)
    #: Each run's prompt-cache figures (:func:`~evaljobs.reports.caching.cache_block`; None: no caching).
    cache_a: dict[str, Any] | None = None
    cache_b: dict[str, Any] | None = None

    @property
    def version_changes(self) -> list[tuple[str, list[str], list[str]]]:
        """(model, versions in A, versions in B) for each model whose answering version changed
        (:func:`evaljobs.reports.versions.version_changes`)."""
        return version_changes(self.changes)

    def of_kind(self, kind: str) -> list[PairChange]:
        return [c for c in self.changes if c.kind == kind]

    @property
    def regressed(self) -> list[PairChange]:
        return self.of_kind(REGRESSED)

    @property
    def fixed(self) -> list[PairChange]:
        return self.of_kind(FIXED)

    def render(self) -> str:
        """The comparison as text (``evaljobs compare``): :func:`render_comparison`."""
        return render_comparison(self)

    def verdict(self, fail_on_regression: bool = False) -> Verdict:
        """``compare --fail-on-regression``: fails when a pair passed in ``run_a`` and not in ``run_b``."""
        if fail_on_regression and self.regressed:
            return Verdict.failed(f"FAIL: {len(self.regressed)} pairs regressed from {self.run_a} "
                                  f"to {self.run_b}")
        return Verdict(True)

    @property
    def changed(self) -> list[PairChange]:
        """Pairs whose scenario changed between the runs (never regressions or fixes)."""
        return self.of_kind(CHANGED)

    @property
    def failed_errored(self) -> list[PairChange]:
        return self.of_kind(FAILED_ERRORED)

    @property
    def flipped(self) -> list[PairChange]:
        """Pairs whose status differs, regressions first, then fixes, then failed ↔ errored (each in the
        catalog's order)."""
        order = {REGRESSED: 0, FIXED: 1, FAILED_ERRORED: 2}
        ranked = sorted(((order[c.kind], i, c) for i, c in enumerate(self.changes) if c.flipped),
                        key=lambda t: t[:2])
        return [c for _, _, c in ranked]

    @property
    def flaky(self) -> list[PairChange]:
        """Flaky pairs whose status changed without a significant change in pass rate (not regressions)."""
        return self.of_kind(FLAKY)

    @property
    def only_a(self) -> list[PairChange]:
        return self.of_kind(ONLY_A)

    @property
    def only_b(self) -> list[PairChange]:
        return self.of_kind(ONLY_B)

    @property
    def common(self) -> list[PairChange]:
        return [c for c in self.changes if c.before is not None and c.after is not None]

    @property
    def cost_delta(self) -> float | None:
        """Cost of B minus cost of A over the common pairs whose costs are known on both sides (None:
        none is); :attr:`cost_unknown` says how many were left out."""
        deltas = [c.cost_delta for c in self.common]
        return known_sum(deltas)[0] if deltas else 0.0

    @property
    def cost_unknown(self) -> int:
        """Common pairs whose cost difference is unknown (a price unknown on either side)."""
        return sum(1 for c in self.common if c.cost_delta is None)

    @property
    def comparable(self) -> list[PairChange]:
        """The common pairs whose scenario did not change: what scores and pass rates are compared over."""
        return [c for c in self.common if c.kind != CHANGED]

    @property
    def mean_score_delta(self) -> float:
        common = self.comparable
        return round(sum(c.score_delta or 0.0 for c in common) / len(common), 4) if common else 0.0

    def headline(self) -> str:
        only = ""
        if self.only_a or self.only_b:
            only = (f"; {len(self.only_a)} only in {self.run_a or 'A'}, "
                    f"{len(self.only_b)} only in {self.run_b or 'B'}")
        flaky = f", {len(self.flaky)} flaky (not significant)" if self.flaky else ""
        changed = (f", {len(self.changed)} changed (scenario or judge changed, not counted)"
                   if self.changed else "")
        return (f"{len(self.common)} common pairs: {len(self.regressed)} regressed, {len(self.fixed)} fixed, "
                f"{len(self.failed_errored)} failed↔errored{changed}{flaky}{only}")

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "run_a": self.run_a,
            "run_b": self.run_b,
            "summary": {"common": len(self.common), "regressed": len(self.regressed),
                        "fixed": len(self.fixed), "failed_errored": len(self.failed_errored),
                        "changed": len(self.changed), "only_a": len(self.only_a), "only_b": len(self.only_b),
                        "mean_score_delta": self.mean_score_delta, "cost_delta": self.cost_delta,
                        "cost_unknown": self.cost_unknown},
            "models": [m.to_dict() for m in self.models],
            "flipped": [c.to_dict() for c in self.flipped],
            "changed": [c.to_dict() for c in self.changed],
            "only_a": [list(c.pair) for c in self.only_a],
            "only_b": [list(c.pair) for c in self.only_b],
        }
        if self.cache_a or self.cache_b:  # only then: comparisons without prompt caching keep their shape
            data["summary"]["cache_a"], data["summary"]["cache_b"] = self.cache_a, self.cache_b
        versions = self.version_changes
        if versions:
            data["model_versions"] = [{"model": m, "a": a, "b": b} for m, a, b in versions]
        if self.flaky:  # only then: comparisons without epochs keep their shape
            data["summary"]["flaky"] = len(self.flaky)
            data["flaky"] = [c.to_dict() for c in self.flaky]
        return data


def compare(a: Side, b: Side, *, run_a: str | None = None, run_b: str | None = None,
            thresholds: Mapping[str, float] | None = None,
            digests_a: Digests | None = None, digests_b: Digests | None = None,
            order: Sequence[str] | None = None) -> Comparison:
    """Compare baseline ``a`` with candidate ``b`` pair by pair.

    Run ids default to the reports' ``run.id`` when a side is a report. Over epochs a pair passes when
    its epoch pass rate reaches its scenario's threshold: a report side carries its own (its ``epochs``
    block); ``thresholds`` (scenario key → threshold) serves a side of bare rows; without either, every
    epoch must pass. ``digests_a``/``digests_b`` (scenario key → its digest in that run's snapshot, or
    None) serve rows that carry no digest of their own. ``order``: the scenario keys as the catalog
    lists them.
    """
    rows_a, rows_b = _outcomes(a, thresholds, digests_a), _outcomes(b, thresholds, digests_b)
    run_a = run_a or _run_id(a)
    run_b = run_b or _run_id(b)
    keys = sorted({key for key, _ in [*rows_a, *rows_b]})
    listed = [*(order or ()), *_report_order(b), *_report_order(a), *keys]
    rank = {key: i for i, key in enumerate(dict.fromkeys(listed))}
    changes = [PairChange(key, model, rows_a.get((key, model)), rows_b.get((key, model)))
               for key, model in sorted(set(rows_a) | set(rows_b), key=lambda p: (rank[p[0]], p[1]))]
    return Comparison(run_a=run_a, run_b=run_b, changes=changes, models=_model_deltas(changes, a, b),
                      cache_a=side_cache(a), cache_b=side_cache(b))


def _report_order(side: Side) -> list[str]:
    """The scenario keys as a report lists its rows when it lists them as the catalog does (its
    ``run.order``); a report from before schema 5 and bare rows tell no order (they are sorted by key)."""
    if not isinstance(side, Mapping) or (side.get("run") or {}).get("order") != "catalog":
        return []
    return [row["scenario_key"] for row in side["results"]]


def _run_id(side: Side) -> str | None:
    if isinstance(side, Mapping):
        run = side.get("run") or {}
        return run.get("id")
    return None


def _rows(side: Side) -> Iterable[Any]:
    if isinstance(side, Mapping):
        if "results" not in side:
            raise ValueError("a report to compare must have 'results' rows (build it with build_report)")
        return side["results"]
    return side


def _cost(value: float | None) -> float | None:
    return None if value is None else round(float(value), 6)


def _outcomes(side: Side, thresholds: Mapping[str, float] | None = None,
              digests: Digests | None = None) -> dict[tuple[str, str], Outcome]:
    """Each pair's outcome, in the order of its rows; a pair with several epochs gets one outcome over them
    (see the module docstring)."""
    epochs: dict[tuple[str, str], list[Outcome]] = {}
    for pair, outcome in _epoch_outcomes(side, digests):
        epochs.setdefault(pair, []).append(outcome)
    own = _side_thresholds(side)
    limits = {**(thresholds or {}), **own}
    return {pair: found[0] if len(found) == 1 else _over_epochs(found, limits.get(pair[0]))
            for pair, found in epochs.items()}


def _side_thresholds(side: Side) -> dict[str, float]:
    """The scenario thresholds a report keeps in its epochs block (nothing for bare rows)."""
    if not isinstance(side, Mapping):
        return {}
    pairs = (side.get("epochs") or {}).get("pairs") or []
    return {p["scenario_key"]: p["threshold"] for p in pairs if p.get("threshold") is not None}


def _over_epochs(found: list[Outcome], threshold: float | None = None) -> Outcome:
    passes = sum(1 for o in found if o.status == PASSED)
    failures = sum(1 for o in found if o.status == FAILED)
    status = (ERRORED if passes + failures == 0
              else PASSED if scenario_passes(passes, len(found), threshold) else FAILED)
    costs = [o.cost for o in found]
    faults = [o.fault for o in found if o.fault]
    versions = ", ".join(dict.fromkeys(v for o in found if o.answered_by for v in o.answered_by.split(", ")))
    return Outcome(status, round(sum(o.score for o in found) / len(found), 4),
                   None if None in costs else round(sum(costs), 6), faults[0] if faults else None,  # type: ignore[arg-type]
                   passes=passes, trials=len(found), failures=failures, digest=found[0].digest,
                   answered_by=versions or None)


def _digest(own: str | None, key: str, digests: Digests | None) -> str | None:
    """The row's verdict digest, else (a row stored before it was kept) what its run tells of the scenario."""
    found = own or (digests(key) if digests is not None else None)
    return short_digest(found) if found else None


def _epoch_outcomes(side: Side, digests: Digests | None) -> Iterable[tuple[tuple[str, str], Outcome]]:
    for row in _rows(side):
        if isinstance(row, Result):
            key, model = row.scenario_key, row.model
            outcome = Outcome(row.status, round(float(row.score), 4), _cost(row.cost), row.fault,
                              passes=int(row.status == PASSED), failures=int(row.status == FAILED),
                              digest=_digest(row.scenario_digest, key, digests),
                              answered_by=row.answered_by)
        else:
            key, model = row["scenario_key"], row["model"]
            outcome = Outcome(
                row["status"],
                round(float(row.get("score") or 0.0), 4),
                _cost(row.get("cost", 0.0)),
                row.get("fault"),
                passes=int(row["status"] == PASSED),
                failures=int(row["status"] == FAILED),
                digest=_digest(row.get("scenario_digest"), key, digests),
                answered_by=row.get("answered_by"),
            )
        if outcome.status not in (PASSED, FAILED, ERRORED):
            raise ValueError(f"result {key} × {model} has unknown status {outcome.status!r}")
        yield (key, model), outcome


def _model_order(changes: list[PairChange], a: Side, b: Side) -> list[str]:
    order: list[str] = []
    for side in (a, b):
        if isinstance(side, Mapping):
            order += [m for m in (side.get("run") or {}).get("models") or [] if m not in order]
    order += sorted({c.model for c in changes} - set(order))
    return order


def _both(change: PairChange) -> tuple[Outcome, Outcome]:
    """The two outcomes of a pair both runs have (a common, flipped or flaky pair)."""
    assert change.before is not None and change.after is not None, change.pair
    return change.before, change.after


def _model_deltas(changes: list[PairChange], a: Side, b: Side) -> list[ModelDelta]:
    deltas = []
    for model in _model_order(changes, a, b):
        both = [c for c in changes if c.model == model and c.before is not None and c.after is not None]
        common = [c for c in both if c.kind != CHANGED]  # like with like: an edited scenario is left out
        if not common:
            continue
        n = len(common)
        sides = [_both(c) for c in common]
        deltas.append(ModelDelta(
            model=model, pairs=n,
            passed_a=sum(a.passes for a, _ in sides), passed_b=sum(b.passes for _, b in sides),
            trials_a=sum(a.trials for a, _ in sides), trials_b=sum(b.trials for _, b in sides),
            scenarios_passed_a=sum(1 for a, _ in sides if a.status == PASSED),
            scenarios_passed_b=sum(1 for _, b in sides if b.status == PASSED),
            mean_score_a=round(sum(a.score for a, _ in sides) / n, 4),
            mean_score_b=round(sum(b.score for _, b in sides) / n, 4),
            cost_a=known_sum([a.cost for a, _ in sides])[0],
            cost_b=known_sum([b.cost for _, b in sides])[0],
            cost_unknown_a=known_sum([a.cost for a, _ in sides])[1],
            cost_unknown_b=known_sum([b.cost for _, b in sides])[1],
            regressed=sum(1 for c in common if c.kind == REGRESSED),
            fixed=sum(1 for c in common if c.kind == FIXED),
            failed_errored=sum(1 for c in common if c.kind == FAILED_ERRORED),
            changed=len(both) - len(common)))
    return deltas


# -- terminal rendering ---------------------------------------------------------------------------


def _signed(value: float, digits: int = 3) -> str:
    return f"{value:+.{digits}f}"




def _pp(value: float) -> str:
    return f"{value * 100:+.1f}pp"


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]], left: int = 1) -> list[str]:
    """Fixed-width columns; the first ``left`` columns are left-aligned, the rest right-aligned."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: tuple[str, ...]) -> str:
        parts = [c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))]
        return "  ".join(parts).rstrip()

    return [line(header), *(line(r) for r in rows)]


def render_comparison(comparison: Comparison) -> str:
    """The ``evaljobs compare`` table: per-model deltas, then every flipped pair, then one-sided pairs."""
    c = comparison
    out = [f"compare {c.run_a or 'A'} → {c.run_b or 'B'}: {c.headline()}",
           (f"mean score {_signed(c.mean_score_delta)}, cost {_signed_money(c.cost_delta, c.cost_unknown)} "
            f"(common pairs)")]
    out += [*comparison_notes(c.run_a or "A", c.run_b or "B", c.cache_a, c.cache_b, c.version_changes), ""]
    if c.models:
        # PASS is the pass rate of every other view (rows, each epoch one); over epochs SCEN says how many
        # scenarios reached their threshold, the second number, under its own name.
        epochs = any((m.trials_a or m.pairs) > m.pairs or (m.trials_b or m.pairs) > m.pairs for m in c.models)
        head: tuple[str, ...] = ("MODEL", "PAIRS", "PASS A", "PASS B", "Δ PASS", "Δ SCORE", "Δ COST", "REGR",
                                 "FIXED")
        rows: list[tuple[str, ...]] = [
            (m.model, str(m.pairs), f"{m.pass_rate_a * 100:.1f}%", f"{m.pass_rate_b * 100:.1f}%",
             _pp(m.pass_rate_b - m.pass_rate_a), _signed(m.mean_score_b - m.mean_score_a),
             _signed_money(m.cost_delta), str(m.regressed), str(m.fixed)) for m in c.models]
        if epochs:
            head += ("SCEN A", "SCEN B")
            rows = [(*row, f"{m.scenarios_passed_a}/{m.pairs}", f"{m.scenarios_passed_b}/{m.pairs}")
                    for row, m in zip(rows, c.models)]
        out += _table(head, rows)
    flipped = c.flipped
    if flipped:
        out += ["", f"flipped ({len(flipped)}):"]
        out += ["  " + line for line in _table(
            ("KIND", "SCENARIO", "MODEL", "STATUS", "Δ SCORE", "Δ COST", "FAULT NOW"),
            [(f.kind, f.scenario_key, f.model, f.transition, _signed(f.score_delta or 0.0),
              _signed_money(f.cost_delta), (f.after.fault if f.after else None) or "")
             for f in flipped],
            left=4)]
    else:
        out += ["", "no pair flipped"]
    if c.changed:
        out += ["", "changed: the scenario or its judge changed between the runs, not counted as regressions "
                    f"or fixes ({len(c.changed)}):"]
        out += ["  " + line for line in _table(
            ("SCENARIO", "MODEL", "STATUS", "Δ SCORE"),
            [(f.scenario_key, f.model, f.transition, _signed(f.score_delta or 0.0)) for f in c.changed],
            left=3)]
    if c.flaky:
        out += ["", f"flaky, not counted as regressions ({len(c.flaky)}; two-sided Fisher's exact test, "
                    f"p >= {SIGNIFICANCE:g}):"]
        for f in c.flaky:
            before, after = _both(f)
            out.append(f"  {f.scenario_key} × {f.model}  {before.passes}/{before.trials} → "
                       f"{after.passes}/{after.trials} passed  p={f.p_value:.3f}")
    for label, pairs, run in (("only in", c.only_a, c.run_a or "A"), ("only in", c.only_b, c.run_b or "B")):
        if pairs:
            out += ["", f"{label} {run} ({len(pairs)}):"]
            out += [f"  {p.scenario_key} × {p.model}" for p in pairs]
    return "\n".join(out) + "\n"
