"""Statistics over epochs: how sure a pass rate is, and which scenarios are flaky.

LLM answers vary from call to call, so with ``--epochs N`` each scenario × model
is sampled N times. This module turns those samples into numbers (pure functions,
exact arithmetic with :func:`math.comb`; no SciPy):

* per scenario × model: the pass rate over epochs, the mean score and its standard
  error (sample standard deviation / √n), ``pass@k`` (the chance that at least one
  of k epochs drawn from the n passes, the unbiased estimator of Chen et al. 2021,
  ``1 - C(n-c, k) / C(n, k)``) and ``pass^k`` (the chance that all k pass,
  ``C(c, k) / C(n, k)``, as in τ-bench);
* per model: the pass rate over every (scenario, epoch) with a 95 % Wilson score
  interval (it stays inside [0, 1] and behaves at 0 % and 100 %, unlike the normal
  approximation). The epochs of one scenario are not independent draws of the
  catalog, so the interval is about "this catalog, sampled again", not the model at large;
* flaky: a scenario × model whose graded epochs disagree (at least one passed and at
  least one failed; an errored epoch is an infrastructure fault, not a verdict);
* Fisher's exact test, **two-sided**, on a 2×2 table (passes/fails before and after):
  the p-value is the sum of the probabilities of every table with the same margins that
  is no more likely than the observed one. ``compare`` calls a flaky scenario's flip a
  regression only when this p-value is under :data:`SIGNIFICANCE`.
"""
from __future__ import annotations

import math
from functools import lru_cache
from itertools import groupby
from operator import attrgetter
from typing import Any, Callable, Iterable

#: The z of a two-sided 95 % interval.
Z95 = 1.959963984540054
#: The p-value under which a change in pass rate between two runs counts as real.
SIGNIFICANCE = 0.05
PASSED, FAILED, ERRORED = "passed", "failed", "errored"
_PAIR = attrgetter("scenario_key", "model")
_PAIR_EPOCH = attrgetter("scenario_key", "model", "epoch")


def wilson(passes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of ``passes`` out of ``n`` (``(0, 1)`` when n is 0)."""
    if n <= 0:
        return (0.0, 1.0)
    p = passes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that at least one of ``k`` of the ``n`` epochs (``c`` passed) passes."""
    if not 0 < k <= n:
        raise ValueError(f"k must be 1..{n}, not {k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """``pass^k``: the chance that all ``k`` of ``k`` epochs drawn from the ``n`` (``c`` passed) pass."""
    if not 0 < k <= n:
        raise ValueError(f"k must be 1..{n}, not {k}")
    return math.comb(c, k) / math.comb(n, k)


def mean_and_stderr(values: list[float]) -> tuple[float, float]:
    """The mean and its standard error (sample standard deviation / √n; 0 for one value)."""
    n = len(values)
    if n == 0:
        return (0.0, 0.0)
    mean = sum(values) / n
    if n == 1:
        return (mean, 0.0)
    variance = sum((v - mean) ** 2 for v in values) / (n - 1)
    return (mean, math.sqrt(variance / n))


def fisher_exact(a: int, b: int, c: int, d: int) -> float:
    """Two-sided Fisher's exact test p-value of the table [[a, b], [c, d]].

    Rows are the two runs, columns pass/fail. Every table with the same margins has the
    hypergeometric probability C(a+b, x) C(c+d, a+c-x) / C(n, a+c); the p-value sums those
    no more probable than the observed table (with a relative tolerance, as R and SciPy do).
    """
    if min(a, b, c, d) < 0:
        raise ValueError("a 2x2 table holds counts of 0 or more")
    row1, row2, col1 = a + b, c + d, a + c
    n = row1 + row2
    total = math.comb(n, col1)

    def weight(x: int) -> int:
        return math.comb(row1, x) * math.comb(row2, col1 - x)

    observed = weight(a)
    low, high = max(0, col1 - row2), min(row1, col1)
    # Exact integers: a table counts when its weight is at most the observed one (1e-7 relative slack).
    tail = sum(w for w in (weight(x) for x in range(low, high + 1)) if w <= observed * (1 + 1e-7))
    return min(1.0, tail / total)


def _r(value: float) -> float:
    return round(value, 4)


def pass_rate(passed: int, trials: int) -> float:
    """THE pass rate, for every view (table, Markdown, HTML, JUnit, JSON, ``compare``, the viewer): the
    share of passed rows among the rows, each (scenario, model, epoch) one row, errored rows included;
    0.0 with no row. Over epochs a scenario is judged separately ("scenarios passed": its epoch pass rate
    reaches its threshold, :func:`scenario_passes`); the two are never shown under one name."""
    return round(passed / trials, 4) if trials else 0.0


def scenario_passes(passed: int, trials: int, threshold: float | None) -> bool:
    """A scenario × model over its epochs passes when its epoch pass rate reaches the scenario's
    threshold (its ``pass_threshold``); with no threshold known, when every epoch passed."""
    if trials <= 0:
        return False
    return passed / trials >= (1.0 if threshold is None else threshold) - 1e-9


def _float_rounding() -> Callable[[float], float]:
    """``_r`` for floats, each distinct value rounded once (``round`` with digits goes through a
    decimal string; a run's thousands of scenario × model pairs share a few dozen rates, means and
    errors). Only for floats: an int equal to a cached float would get the float back. Zeros are not
    looked up (0.0 and -0.0 are equal but each rounds to itself, sign kept)."""
    memo: dict[float, float] = {}

    def rounded(value: float) -> float:
        if not value:
            return value
        found = memo.get(value)
        if found is None:
            found = memo[value] = round(value, 4)
        return found

    return rounded


@lru_cache(maxsize=4096)
def _curves(n: int, c: int) -> tuple[tuple[tuple[str, float], ...], tuple[tuple[str, float], ...]]:
    """pass@k and pass^k for k = 1..n, once per (n, c): a run has few distinct pairs of them, and
    computing them for each of thousands of scenario × model pairs was most of the finalize time."""
    return (tuple((str(k), _r(pass_at_k(n, c, k))) for k in range(1, n + 1)),
            tuple((str(k), _r(pass_hat_k(n, c, k))) for k in range(1, n + 1)))


def pair_stats(results: Iterable[Any], thresholds: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """One entry per scenario × model over its epochs (``results`` are ``Result`` rows).

    ``thresholds`` (scenario key → pass threshold) decides ``passed``: the epoch pass rate
    must reach the scenario's threshold (what JUnit and ``--fail-under`` per scenario use).
    """
    # one sort by (scenario, model, epoch), stable, then each scenario × model's epochs are adjacent:
    # the same groups, in the same order, as grouping first and sorting each group by epoch
    # (the report passes its rows already in that order, so the sort only checks it)
    out = []
    thresholds = thresholds or {}
    r4 = _float_rounding()
    for (key, model), group in groupby(sorted(results, key=_PAIR_EPOCH), key=_PAIR):
        rows = list(group)
        statuses = [r.status for r in rows]
        n = len(rows)
        c = statuses.count(PASSED)
        failed = statuses.count(FAILED)
        mean, stderr = mean_and_stderr([float(r.score) for r in rows])
        threshold = thresholds.get(key)
        at_k, hat_k = _curves(n, c)
        entry = {
            "scenario_key": key, "model": model, "epochs": n, "passed": c, "failed": failed,
            "errored": n - c - failed, "pass_rate": r4(c / n), "mean_score": r4(mean), "stderr": r4(stderr),
            "pass_at_k": dict(at_k), "pass_hat_k": dict(hat_k),
            "flaky": c > 0 and failed > 0,
            "statuses": statuses,
        }
        if threshold is not None:
            entry["threshold"] = threshold
            entry["ok"] = scenario_passes(c, n, threshold)
        out.append(entry)
    return out


def model_stats(pairs: list[dict[str, Any]], models: list[str]) -> list[dict[str, Any]]:
    """Per model: the pass rate over every (scenario, epoch) with its 95 % Wilson interval, and flaky
    count."""
    out = []
    for model in models:
        mine = [p for p in pairs if p["model"] == model]
        n = sum(p["epochs"] for p in mine)
        c = sum(p["passed"] for p in mine)
        low, high = wilson(c, n)
        out.append({"model": model, "trials": n, "passed": c, "pass_rate": pass_rate(c, n),
                    "ci_low": _r(low), "ci_high": _r(high),
                    "flaky": [p["scenario_key"] for p in mine if p["flaky"]],
                    # per scenario over epochs (its epoch pass rate reaches its threshold): a second number,
                    # under its own name, never "pass rate"
                    "scenarios": len(mine),
                    "scenarios_passed": sum(1 for p in mine if p.get("ok", p["passed"] == p["epochs"]))})
    return out


def epochs_block(results: list[Any], models: list[str], epochs: int,
                 thresholds: dict[str, float] | None = None) -> dict[str, Any]:
    """The report's ``epochs`` section: the statistics above for a run of ``epochs`` epochs."""
    pairs = pair_stats(results, thresholds)
    return {"epochs": epochs, "confidence": 0.95, "interval": "wilson", "pairs": pairs,
            "models": model_stats(pairs, models)}


def flaky_pairs(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The flaky scenario × model entries of a report (none for a single-epoch report)."""
    block = report.get("epochs") or {}
    return [p for p in block.get("pairs", []) if p.get("flaky")]


def model_interval(report: dict[str, Any], model: str) -> tuple[float, float, float] | None:
    """(pass rate, Wilson low, Wilson high) of ``model`` in ``report``, for a report of any epochs."""
    block = report.get("epochs") or {}
    for m in block.get("models", []):
        if m["model"] == model:
            return (m["pass_rate"], m["ci_low"], m["ci_high"])
    for m in report.get("models", []):
        if m["model"] == model:
            low, high = wilson(int(m["passed"]), int(m["scenarios"]))
            return (m["pass_rate"], _r(low), _r(high))
    return None


__all__ = [
    "wilson",
    "pass_at_k",
    "pass_hat_k",
    "mean_and_stderr",
    "fisher_exact",
    "pair_stats",
    "model_stats",
    "epochs_block",
    "flaky_pairs",
    "model_interval",
    "pass_rate",
    "scenario_passes",
    "SIGNIFICANCE",
    "Z95",
]


# -- renderings (plain text and Markdown; the HTML and JUnit renderers read the same block) -----------


def _pct(value: float) -> str:
    return f"{value * 100:.1f}%"


def _k_of(pair: dict[str, Any]) -> str:
    return str(pair["epochs"])


def pair_line(pair: dict[str, Any]) -> str:
    """``3/5 passed (60.0%) · mean 0.720 ± 0.110 · pass@5 100.0% · pass^5 0.0%``."""
    k = _k_of(pair)
    return (
        f"{pair['passed']}/{pair['epochs']} passed ({_pct(pair['pass_rate'])}) · mean "
        f"{pair['mean_score']:.3f} ± {pair['stderr']:.3f} · pass@{k} {_pct(pair['pass_at_k'][k])} · pass^{k} "
        f"{_pct(pair['pass_hat_k'][k])}"
    )


def model_line(m: dict[str, Any]) -> str:
    scenarios = (f" · scenarios passed {m['scenarios_passed']}/{m['scenarios']}" if "scenarios" in m else "")
    return (f"{m['passed']}/{m['trials']} passed {_pct(m['pass_rate'])} "
            f"(95% CI {_pct(m['ci_low'])}–{_pct(m['ci_high'])}){scenarios} · {len(m['flaky'])} flaky")


def table_lines(report: dict[str, Any]) -> list[str]:
    """The terminal table's epochs section (nothing for a single-epoch report)."""
    block = report.get("epochs")
    if not block:
        return []
    out = ["", f"epochs: {block['epochs']} per pair · pass rate with 95% Wilson interval:"]
    width = max(len(m["model"]) for m in block["models"]) if block["models"] else 0
    out += [f"  {m['model'].ljust(width)}  {model_line(m)}" for m in block["models"]]
    flaky = [p for p in block["pairs"] if p["flaky"]]
    out += ["", f"flaky ({len(flaky)}):" if flaky else "flaky: none (every scenario's epochs agree)"]
    out += [
        f"  {p['scenario_key']} × {p['model']}  {pair_line(p)}  "
        f"[{' '.join(s[0].upper() for s in p['statuses'])}]"
        for p in flaky
    ]
    return out


def markdown_lines(report: dict[str, Any], code, limit: int = 25) -> list[str]:
    """The Markdown epochs section; ``code`` formats a name as a code span."""
    block = report.get("epochs")
    if not block:
        return []
    k = str(block["epochs"])
    lines = [
        "",
        f"**Epochs: {k} per pair** — pass rate with a 95 % Wilson interval",
        "",
        "| Model | Passed | Pass rate | 95 % CI | Scenarios passed | Flaky |",
        "|---|---:|---:|---|---:|---:|",
    ]
    for m in block["models"]:
        scenarios = f"{m['scenarios_passed']}/{m['scenarios']}" if "scenarios" in m else "-"
        lines.append(f"| {code(m['model'])} | {m['passed']}/{m['trials']} | {_pct(m['pass_rate'])} | "
                     f"{_pct(m['ci_low'])}–{_pct(m['ci_high'])} | {scenarios} | {len(m['flaky'])} |")
    flaky = [p for p in block["pairs"] if p["flaky"]]
    if flaky:
        lines += [
            "",
            f"**Flaky scenarios ({len(flaky)})** — epochs disagree",
            "",
            f"| Scenario | Model | Passed | Mean ± SE | pass@{k} | pass^{k} |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for p in flaky[:limit]:
            lines.append(f"| {code(p['scenario_key'])} | {code(p['model'])} | {p['passed']}/{p['epochs']} | "
                         f"{p['mean_score']:.3f} ± {p['stderr']:.3f} | {_pct(p['pass_at_k'][k])} | "
                         f"{_pct(p['pass_hat_k'][k])} |")
        if len(flaky) > limit:
            lines.append(f"\n…and {len(flaky) - limit} more (see `evaljobs report --flaky`).")
    else:
        lines += ["", "No flaky scenario: every scenario's epochs agree."]
    return lines


def flaky_text(report: dict[str, Any]) -> str:
    """What ``evaljobs report RUN --flaky`` prints: the flaky scenarios, per model."""
    run = report.get("run") or {}
    block = report.get("epochs")
    if not block:
        return (f"run {run.get('id')}: 1 epoch per pair, so no scenario can be flaky "
                f"(run with --epochs N to find out)\n")
    flaky = flaky_pairs(report)
    out = [f"run {run.get('id')}: {len(flaky)} flaky of {len(block['pairs'])} scenario × model pairs "
           f"({block['epochs']} epochs each)"]
    for m in block["models"]:
        mine = [p for p in flaky if p["model"] == m["model"]]
        out += ["", f"{m['model']}: {model_line(m)}"]
        out += [f"  {p['scenario_key']}  {pair_line(p)}  [{' '.join(s[0].upper() for s in p['statuses'])}]"
                for p in mine]
    return "\n".join(out) + "\n"
