"""How far an LLM judge agrees with the reviewers it stands in for (``evaljobs judge-agreement``).

Per judge model and rubric: the confusion matrix of the judge's pass/fail against the human label, Cohen's
kappa with a 95 % confidence interval (the large-sample standard error of Cohen 1960:
``sqrt(po (1 - po) / (n (1 - pe)^2))``), and the threshold on the judge's score that would have agreed
with the reviewers most often. A judge that decides a gate on a rubric whose kappa is under ``min_kappa``
is a warning: its verdicts fail runs that people would not.

Pure: the judged, labelled results come in as :class:`Judged` items.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any, Iterable

#: Cohen's kappa under which a gating judge is reported (0.6: "substantial" on Landis & Koch's scale).
MIN_KAPPA = 0.6
Z95 = 1.959964


@dataclass(frozen=True)
class Judged:
    """One result a judge scored and a reviewer labelled."""

    judge_model: str
    rubric: str
    score: float | None
    threshold: float | None
    judge_passed: bool
    human_passed: bool
    gate: bool = True


@dataclass
class Agreement:
    """Agreement of one judge model on one rubric with the reviewers."""

    judge_model: str
    rubric: str
    #: [[judge pass & human pass, judge pass & human fail],
    #:  [judge fail & human pass, judge fail & human fail]]
    matrix: list[list[int]]
    kappa: float | None
    interval: tuple[float, float] | None
    threshold: float | None
    best_threshold: float | None
    best_agreement: float | None
    gate: bool
    warnings: list[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        return sum(sum(row) for row in self.matrix)

    @property
    def observed(self) -> float:
        return (self.matrix[0][0] + self.matrix[1][1]) / self.n if self.n else 0.0

    @property
    def rubric_id(self) -> str:
        return "sha256:" + hashlib.sha256(self.rubric.encode("utf-8")).hexdigest()[:12]

    def to_dict(self) -> dict[str, Any]:
        return {"judge_model": self.judge_model, "rubric": self.rubric, "rubric_id": self.rubric_id,
                "n": self.n, "matrix": self.matrix, "observed_agreement": self.observed, "kappa": self.kappa,
                "kappa_ci95": list(self.interval) if self.interval else None, "threshold": self.threshold,
                "best_threshold": self.best_threshold, "best_agreement": self.best_agreement,
                "gate": self.gate, "warnings": self.warnings}


def cohen_kappa(matrix: list[list[int]]) -> tuple[float | None, tuple[float, float] | None]:
    """Cohen's kappa of a 2×2 matrix and its 95 % interval (None when chance agreement is total)."""
    n = sum(sum(row) for row in matrix)
    if n == 0:
        return None, None
    po = (matrix[0][0] + matrix[1][1]) / n
    judge_pass, human_pass = (matrix[0][0] + matrix[0][1]) / n, (matrix[0][0] + matrix[1][0]) / n
    pe = judge_pass * human_pass + (1 - judge_pass) * (1 - human_pass)
    if pe >= 1.0:
        return None, None
    kappa = (po - pe) / (1 - pe)
    se = math.sqrt(po * (1 - po) / (n * (1 - pe) ** 2))
    return kappa, (max(-1.0, kappa - Z95 * se), min(1.0, kappa + Z95 * se))


def best_threshold(items: list[Judged], current: float | None) -> tuple[float | None, float | None]:
    """The score threshold (judge passes at or above it) that agrees with the reviewers most often, and
    that agreement; midpoints between the scores seen, ties going to the one nearest ``current``."""
    scored = [(i.score, i.human_passed) for i in items if i.score is not None]
    if not scored:
        return None, None
    values = sorted({s for s, _ in scored})
    candidates = ([values[0]] + [round((a + b) / 2, 6) for a, b in zip(values, values[1:])]
                  + [values[-1] + 1e-6])
    near = current if current is not None else 0.5

    def agreement(t: float) -> int:
        return sum((s >= t) == human for s, human in scored)

    best = max(candidates, key=lambda t: (agreement(t), -abs(t - near)))
    return best, agreement(best) / len(scored)


def agreements(items: Iterable[Judged], *, min_kappa: float = MIN_KAPPA) -> list[Agreement]:
    """One :class:`Agreement` per (judge model, rubric), most items first."""
    groups: dict[tuple[str, str], list[Judged]] = {}
    for item in items:
        groups.setdefault((item.judge_model, item.rubric), []).append(item)
    out = []
    for (model, rubric), group in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        matrix = [[0, 0], [0, 0]]
        for i in group:
            matrix[0 if i.judge_passed else 1][0 if i.human_passed else 1] += 1
        kappa, interval = cohen_kappa(matrix)
        thresholds = [i.threshold for i in group if i.threshold is not None]
        current = max(set(thresholds), key=thresholds.count) if thresholds else None
        best, best_agreement = best_threshold(group, current)
        gate = any(i.gate for i in group)
        found = Agreement(model, rubric, matrix, kappa, interval, current, best, best_agreement, gate)
        if gate and (kappa is None or kappa < min_kappa):
            shown = "undefined" if kappa is None else f"{kappa:.2f}"
            found.warnings.append(f"warning: judge {model} decides a gate on rubric {found.rubric_id} "
                                  f"({_short(rubric)}) but agrees with the reviewers at kappa {shown}, under "
                                  f"{min_kappa:.2f} ({found.n} labelled results)")
        out.append(found)
    return out


def _short(text: str, width: int = 50) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[:width - 1] + "…"


def render_agreements(found: list[Agreement]) -> str:
    """The agreements as text (a terminal, or a Markdown report: the tables are Markdown)."""
    if not found:
        return "no judged result has a reviewer's label yet: label pairs in `evaljobs view` (review page)\n"
    lines = ["| judge | rubric | n | judge+ human+ | judge+ human- | judge- human+ | judge- human- "
             "| agreement | kappa (95% CI) | threshold | best threshold |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for a in found:
        kappa = "–" if a.kappa is None else f"{a.kappa:.3f}"
        if a.interval:
            kappa += f" ({a.interval[0]:.3f}–{a.interval[1]:.3f})"
        best = "–" if a.best_threshold is None else f"{a.best_threshold:.3f} ({a.best_agreement:.1%})"
        current = "–" if a.threshold is None else f"{a.threshold:.3f}"
        counts = [str(v) for row in a.matrix for v in row]
        cells = [a.judge_model, f"{a.rubric_id} {_short(a.rubric, 40)}", str(a.n), *counts,
                 f"{a.observed:.1%}", kappa, current, best]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"  # the warnings are the caller's to show (on stderr: see cli/labels.py)


__all__ = ["MIN_KAPPA", "Judged", "Agreement", "cohen_kappa", "best_threshold", "agreements",
           "render_agreements"]
