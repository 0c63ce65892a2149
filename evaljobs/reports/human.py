"""Reviewers' labels in a report: how many pairs a human reviewed, where they disagree with the machine, and
the pass rate with the human's verdict preferred where there is one (``evaljobs report --prefer-human``).

Pure: the results and their labels come in (labels as plain dicts by (scenario, model, epoch), as
``store.labels_for_run`` gives them once turned into dicts); the machine's verdict is never changed, the
preferred pass rate is a second figure beside it.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from evaljobs.evaluation.result import PASSED, Result
from evaljobs.reports.gate import Verdict

#: The most disagreements a report lists (the JSON and the export have every label).
SHOWN = 20


def human_review(results: Iterable[Result], labels: Mapping[tuple[str, str, int], Mapping[str, Any]],
                 run_id: str = "") -> dict[str, Any]:
    """The report's ``human`` block: counts, per model, and the pairs where reviewer and machine differ."""
    rows = list(results)
    models: dict[str, dict[str, Any]] = {}
    disagreements = []
    labelled = carried = 0
    for r in rows:
        label = labels.get((r.scenario_key, r.model, r.epoch))
        machine = r.status == PASSED
        m = models.setdefault(r.model, {"model": r.model, "results": 0, "labelled": 0, "disagree": 0,
                                        "machine_passed": 0, "preferred_passed": 0})
        m["results"] += 1
        m["machine_passed"] += machine
        preferred = machine
        if label is not None:
            labelled += 1
            carried += bool(run_id) and label.get("run_id") != run_id
            m["labelled"] += 1
            preferred = label.get("verdict") == "pass"
            if preferred != machine:
                m["disagree"] += 1
                disagreements.append({"scenario_key": r.scenario_key, "model": r.model, "epoch": r.epoch,
                                      "machine": r.status, "human": label.get("verdict"),
                                      "reviewer": label.get("reviewer"), "reviewed_in": label.get("run_id"),
                                      "comment": label.get("comment")})
        m["preferred_passed"] += preferred
    for m in models.values():
        m["machine_pass_rate"] = m["machine_passed"] / m["results"] if m["results"] else 0.0
        m["preferred_pass_rate"] = m["preferred_passed"] / m["results"] if m["results"] else 0.0
    total = len(rows)
    preferred_passed = sum(m["preferred_passed"] for m in models.values())
    machine_passed = sum(m["machine_passed"] for m in models.values())
    return {"results": total, "labelled": labelled, "carried": carried, "disagree": len(disagreements),
            "machine_pass_rate": machine_passed / total if total else 0.0,
            "preferred_pass_rate": preferred_passed / total if total else 0.0,
            "models": list(models.values()), "disagreements": disagreements}


def human_markdown(human: Mapping[str, Any]) -> str:
    """The report's "Human review" section (Markdown, also read as plain text)."""
    if not human.get("labelled"):
        return ""
    lines = ["", "## Human review", "",
             f"{human['labelled']} of {human['results']} results reviewed"
             + (f" ({human['carried']} carried from earlier runs)" if human.get("carried") else "")
             + f"; the reviewer disagrees with the machine on {human['disagree']}. Pass rate "
             f"{human['machine_pass_rate']:.1%} by the machine, {human['preferred_pass_rate']:.1%} with the "
             "reviewers' verdicts preferred (`--prefer-human`).", ""]
    if human["disagreements"]:
        lines += ["| scenario | model | epoch | machine | human | reviewer | reviewed in |",
                  "|---|---|---|---|---|---|---|"]
        for d in human["disagreements"][:SHOWN]:
            cells = [d["scenario_key"], d["model"], str(d["epoch"]), d["machine"], str(d["human"]),
                     str(d["reviewer"]), str(d["reviewed_in"])]
            lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
        if len(human["disagreements"]) > SHOWN:
            lines.append(f"\n… and {len(human['disagreements']) - SHOWN} more (the JSON report lists all).")
    return "\n".join(lines) + "\n"


def hold_preferring_human(human: Mapping[str, Any], threshold: float) -> Verdict:
    """``--fail-under`` with ``--prefer-human``: the pass rate with each reviewed result's human verdict."""
    rate = human["preferred_pass_rate"]
    what = (f"pass rate {rate:.1%} with {human['labelled']} reviewed results' human verdicts "
            f"(machine: {human['machine_pass_rate']:.1%})")
    if rate < threshold:
        return Verdict.failed(f"FAIL: {what} is under --fail-under {threshold:.1%} (--prefer-human)")
    return Verdict(True, (f"OK: {what} meets --fail-under {threshold:.1%} (--prefer-human)",))


__all__ = ["human_review", "human_markdown", "hold_preferring_human"]
