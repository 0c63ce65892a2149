"""The benchmark's outputs: the terminal table, Markdown, CSV, the plot, and bench.json back in."""
from __future__ import annotations

import csv
import io
import json
from dataclasses import fields
from pathlib import Path

from evaljobs.bench.model import (STRATEGIES, BenchResult, BenchSpec, Cell, Knee, Measurement, Recommendation,
                                  broker_label)


_TABLE = (("strategy", 10, "{}"), ("width", 5, "{}"), ("wall s", 8, "{:.2f}"), ("pairs/s", 8, "{:.1f}"),
          ("ideal s", 7, "{:.2f}"), ("x ideal", 7, "{:.2f}"), ("requests", 8, "{:.0f}"),
          ("err %", 6, "{:.1f}"), ("429s", 5, "{:.0f}"), ("retries", 7, "{:.0f}"),
          ("cost $", 8, "{:.4f}"), ("CPU s", 6, "{:.2f}"),
          ("host%", 5, "{:.0f}"), ("peak MB", 7, "{:.0f}"), ("lag ms", 6, "{:.0f}"))


def render_table(result: BenchResult) -> str:
    """The terminal table, then the recommendation and the knee of each strategy."""
    lines = ["  ".join(f"{name:>{width}}" if i else f"{name:<{width}}" for i, (name, width, _) in
                       enumerate(_TABLE))]
    for c in result.cells:
        values = (c.strategy, c.width, c.wall_s, c.throughput, c.ideal_s, c.overhead, c.requests,
                  c.error_rate * 100,
                  c.rate_limited, c.retries, c.cost, c.cpu_s,
                  c.host_busy * 100 if c.host_busy is not None else None, c.peak_rss_mb, c.report_lag_ms)
        row = []
        for i, ((_, width, fmt), value) in enumerate(zip(_TABLE, values)):
            text = ("unknown" if _TABLE[i][0] == "cost $" else "-") if value is None else fmt.format(value)
            row.append(f"{text:<{width}}" if i == 0 else f"{text:>{width}}")
        lines.append("  ".join(row) + ("" if c.complete else "  (incomplete)"))
    rec = result.recommendation
    lines.append("")
    env = result.environment
    if env:
        load = env.get("load_average_at_start"), env.get("load_average_at_end")
        busy = (f", load average {load[0][0]:.1f} -> {load[1][0]:.1f}" if load[0] and load[1] else "")
        lines.append(f"host: {env.get('cores')} cores{busy}; broker {env.get('broker')}, db {env.get('db')}, "
                     f"governor {env.get('governor', 'on')}; medians of {result.spec.repeat} run(s) per cell")
        if env.get("provider"):
            lines.append(f"provider: {env['provider']}; requests, 429s and errors are every request the "
                         f"provider client sent, as the provider answered it")
    if rec.width is not None:
        lines.append(f"recommended default: --strategy {rec.strategy} --width {rec.width}  ({rec.reason})")
    else:
        lines.append(f"recommended default: none ({rec.reason})")
    for knee in rec.knees:
        where = f"width {knee.width}" if knee.width is not None else "not reached"
        lines.append(f"knee {knee.strategy}: {where}, {knee.bound}: {knee.reason}")
    return "\n".join(lines)


def render_markdown(result: BenchResult) -> str:
    """The cells as a Markdown table (for BENCHMARKS.md and pull requests), then the verdict lines."""
    head = ("strategy", "width", "wall s (min-max)", "pairs/s", "ideal s", "× ideal", "requests", "errors",
            "429s",
            "retries", "CPU s", "host CPU", "peak MB", "report lag ms")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in result.cells:
        def fmt(value, spec):
            return "-" if value is None else format(value, spec)
        lines.append("| " + " | ".join([
            c.strategy, str(c.width), f"{c.wall_s:.2f} ({c.wall_min_s:.2f}-{c.wall_max_s:.2f})",
            f"{c.throughput:.1f}", fmt(c.ideal_s, ".2f"), fmt(c.overhead, ".2f"), fmt(c.requests, ".0f"),
            f"{c.error_rate:.1%}",
            fmt(c.rate_limited, ".0f"), f"{c.retries:.0f}", fmt(c.cpu_s, ".2f"), fmt(c.host_busy, ".0%"),
            fmt(c.peak_rss_mb, ".0f"),
            fmt(c.report_lag_ms, ".0f")]) + " |")
    rec = result.recommendation
    lines.append("")
    provider = (result.environment or {}).get("provider")
    if provider:
        lines.append(f"Measured against: {provider} (requests, 429s and errors: every request the provider "
                     f"client sent).")
    if rec.width is not None:
        lines.append(f"Recommended: `--strategy {rec.strategy} --width {rec.width}` ({rec.reason}).")
    else:
        lines.append(f"Recommended: none ({rec.reason}).")
    for knee in rec.knees:
        if knee.bound != "one width only":
            where = f"width {knee.width}" if knee.width is not None else "not reached"
            lines.append(f"Knee, {knee.strategy}: {where} — {knee.bound}: {knee.reason}.")
    return "\n".join(lines) + "\n"


CSV_FIELDS = (
    "strategy",
    "width",
    "repeats",
    "pairs",
    "wall_s",
    "wall_min_s",
    "wall_max_s",
    "throughput",
    "ideal_s",
    "overhead",
    "requests",
    "error_rate",
    "rate_limited",
    "errors",
    "retries",
    "errored_pairs",
    "cost",
    "cpu_s",
    "cores_busy",
    "cores",
    "host_busy",
    "peak_rss_mb",
    "first_result_s",
    "report_lag_ms",
    "complete",
)


def render_csv(result: BenchResult) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for cell in result.cells:
        data = cell.to_dict()
        writer.writerow({name: data.get(name) for name in CSV_FIELDS})
    return buffer.getvalue()


def plot(result: BenchResult, path: Path, *, title: str | None = None) -> bool:
    """Wall clock and error rate against width, one line per strategy; False if matplotlib is missing."""
    try:  # the optional extra `evaljobs[plot]`: without it, no plot and the rest of the outputs
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    widths = sorted({w for w in result.spec.widths} | {c.width for c in result.cells})
    fig, (ax_wall, ax_err) = plt.subplots(1, 2, figsize=(11, 4.2))
    colors = {"sequential": "#7f7f7f", "threads": "#1f77b4", "fanout": "#d62728", "per-model": "#2ca02c"}
    for strategy in STRATEGIES:
        cells = sorted((c for c in result.cells if c.strategy == strategy), key=lambda c: c.width)
        if not cells:
            continue
        xs, walls, errs = (
            [c.width for c in cells],
            [c.wall_s for c in cells],
            [c.error_rate * 100 for c in cells],
        )
        color = colors.get(strategy)
        ax_wall.plot(xs, walls, marker="o", color=color, label=strategy)
        ax_err.plot(xs, errs, marker="o", color=color, label=strategy)
        flat = [w for w in widths if w > xs[-1]]
        if flat:  # fixed-concurrency strategies: the same wall clock at any wider setting
            ax_wall.plot(
                [xs[-1], *flat], [walls[-1]] * (len(flat) + 1), linestyle="--", color=color, alpha=0.6
            )
            ax_err.plot([xs[-1], *flat], [errs[-1]] * (len(flat) + 1), linestyle="--", color=color, alpha=0.6)
    ideal = {}
    for cell in result.cells:
        if cell.ideal_s and cell.strategy in ("threads", "fanout"):
            ideal[cell.width] = cell.ideal_s
    if ideal:
        xs = sorted(ideal)
        ax_wall.plot(xs, [ideal[x] for x in xs], linestyle=":", color="black", label="ideal ceil(pairs/W)×L")
    rec = result.recommendation
    if rec.width is not None:
        ax_wall.axvline(rec.width, color="#9467bd", alpha=0.5, linestyle="-.",
                        label=f"recommended W={rec.width}")
    if rec.knee is not None and rec.knee.width is not None:
        ax_wall.axvline(rec.knee.width, color="#ff7f0e", alpha=0.5, linestyle=":",
                        label=f"knee W={rec.knee.width} ({rec.knee.bound})")
    for ax in (ax_wall, ax_err):
        ax.set_xscale("log", base=2)
        ax.set_xticks(widths)
        ax.set_xticklabels([str(w) for w in widths])
        ax.set_xlabel("width (worker threads)")
        ax.grid(True, alpha=0.3)
    ax_wall.set_ylabel("wall clock, s (median)")
    ax_wall.set_ylim(bottom=0)
    ax_err.set_ylabel("provider error rate, % (429s and others)")
    ax_err.set_ylim(bottom=0, top=max(5.0, max((c.error_rate * 100 for c in result.cells), default=0) * 1.15))
    ax_wall.legend(fontsize=8)
    ax_err.legend(fontsize=8)
    fig.suptitle(title or _plot_title(result), fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _plot_title(result: BenchResult) -> str:
    spec = result.spec
    sim = ""
    if spec.simulate:
        sim = " · simulated " + ",".join(f"{k}={v}" for k, v in spec.simulate.items() if v is not None)
    return (f"{Path(spec.catalog).name} × {', '.join(spec.models)} · broker {broker_label(spec.broker)}"
            f"{sim} · median of {spec.repeat}")


def write_outputs(result: BenchResult, out: Path) -> dict[str, Path | None]:
    """bench.json, bench.csv, bench.md and bench.png (None when matplotlib is missing) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    json_path, csv_path, md_path, png_path = (out / "bench.json", out / "bench.csv", out / "bench.md",
                                              out / "bench.png")
    paths: dict[str, Path | None] = {"json": json_path, "csv": csv_path, "md": md_path, "png": png_path}
    json_path.write_text(json.dumps(result.to_dict(), indent=2, default=str) + "\n", encoding="utf-8")
    csv_path.write_text(render_csv(result), encoding="utf-8")
    md_path.write_text(render_markdown(result), encoding="utf-8")
    if not plot(result, png_path):
        paths["png"] = None
    return paths


def load_result(path: Path) -> BenchResult:
    """A ``bench.json`` back as a :class:`BenchResult` (to re-plot or compare)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    spec_data = dict(data["spec"])
    spec_data["strategies"] = tuple(spec_data["strategies"])
    spec_data["widths"] = tuple(spec_data["widths"])
    spec = BenchSpec(**spec_data)
    names = {f.name for f in fields(Measurement)}
    measurements = [Measurement(**{k: v for k, v in m.items() if k in names}) for m in data["measurements"]]
    cell_names = {f.name for f in fields(Cell)}
    cells = [Cell(**{k: v for k, v in c.items() if k in cell_names}) for c in data["cells"]]
    rec = data["recommendation"]
    knee = Knee(**rec["knee"]) if rec.get("knee") else None
    recommendation = Recommendation(rec["strategy"], rec["width"], rec["wall_s"], rec["reason"], knee,
                                    [Knee(**k) for k in rec.get("knees", [])])
    return BenchResult(spec, data["environment"], measurements, cells, recommendation)

