"""The pass/fail gate: does a run's report meet ``--fail-under``, and what to say either way.

One decision for every command and host: ``run``, ``rerun``, ``report`` and a host's own
code call :meth:`evaljobs.store.RunInfo.gate`, which comes here; the CLI only prints the
lines and exits with the code (``cli/_options.py`` ``conclude``).

``point`` holds the pass rate itself to the threshold; ``ci`` holds the lower bound of each
model's 95 % Wilson interval (per model over every scenario and epoch; the worst model
decides): "pass rate 92 %, but it may be 84 %" fails a 90 % gate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evaljobs.reports.variance import model_interval

#: ``--gate``: what ``--fail-under`` judges.
GATES = ("point", "ci")
#: The exit code of a run that fails its gate (or that nothing could be evaluated in).
EXIT_FAILED = 1


@dataclass(frozen=True)
class Verdict:
    """What the gate decided: ``passed``, the lines to tell the user (stderr), and the exit code."""

    passed: bool
    lines: tuple[str, ...] = ()
    exit_code: int = 0

    @classmethod
    def failed(cls, line: str) -> "Verdict":
        return cls(False, (line,), EXIT_FAILED)


def hold(report: dict[str, Any], threshold: float, mode: str = "point") -> Verdict:
    """Hold a finished run's ``report`` to ``threshold`` (a pass rate in 0..1) in ``mode`` (``GATES``)."""
    if mode not in GATES:
        raise ValueError(f"unknown gate {mode!r}: use one of {', '.join(GATES)}")
    if mode == "ci":
        bounds = [(model_interval(report, m["model"]), m["model"]) for m in report["models"]]
        (rate, low, high), model = min(((b, m) for b, m in bounds if b is not None), key=lambda bm: bm[0][1])
        what = f"{model}: 95% CI lower bound {low:.1%} (pass rate {rate:.1%}, CI {low:.1%}–{high:.1%})"
        if low < threshold:
            return Verdict.failed(f"FAIL: {what} is under --fail-under {threshold:.1%} (--gate ci)")
        return Verdict(True, (f"OK: {what} meets --fail-under {threshold:.1%} (--gate ci)",))
    rate = report["summary"]["pass_rate"]
    if rate < threshold:
        return Verdict.failed(f"FAIL: pass rate {rate:.1%} is under --fail-under {threshold:.1%}")
    return Verdict(True, (f"OK: pass rate {rate:.1%} meets --fail-under {threshold:.1%}",))


__all__ = ["GATES", "EXIT_FAILED", "Verdict", "hold"]
