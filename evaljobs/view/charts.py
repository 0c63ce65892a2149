"""Charts as inline SVG geometry: numbers in, coordinates out, drawn by a template.

No chart library and no script: an SVG of rectangles, circles and text is
rendered by the browser (and by the CSP, which allows no inline script or style,
only presentation attributes), so a chart cannot run model-controlled code.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from evaljobs.reports.build import percentile
from evaljobs.view.queries import ModelRow

WIDTH = 560
LABEL = 170
ROW = 22


@dataclass(frozen=True)
class Bar:
    label: str
    y: int
    width: float
    value: str


@dataclass(frozen=True)
class Point:
    label: str
    x: float
    y: float
    value: str


@dataclass(frozen=True)
class Box:
    label: str
    y: int
    low: float
    q1: float
    median: float
    q3: float
    high: float
    value: str


@dataclass(frozen=True)
class Chart:
    height: int
    bars: tuple[Bar, ...] = ()
    points: tuple[Point, ...] = ()
    boxes: tuple[Box, ...] = ()
    axis: str = ""


def pass_rates(models: Sequence[ModelRow]) -> Chart:
    span = WIDTH - LABEL - 60
    bars = tuple(Bar(m.model, 6 + i * ROW, round(span * m.pass_rate, 1), f"{m.pass_rate * 100:.1f}%")
                 for i, m in enumerate(models))
    return Chart(height=12 + ROW * max(1, len(models)), bars=bars)


def cost_vs_pass_rate(models: Sequence[ModelRow]) -> Chart:
    """Pass rate (up) against cost (right); the best models sit top-left."""
    top = max((m.cost for m in models), default=0.0) or 1.0
    plot_w, plot_h = WIDTH - 80, 180
    points = tuple(Point(m.model, round(50 + plot_w * (m.cost / top), 1), round(10 + plot_h * (1 - m.pass_rate), 1),
                         f"${m.cost:.4f} · {m.pass_rate * 100:.1f}%") for m in models)
    return Chart(height=plot_h + 40, points=points, axis=f"${top:.4f}")


def latency(models: Sequence[ModelRow]) -> Chart:
    """Per model: p5–p95 whisker, p25–p75 box, median line, on one linear scale."""
    top = max((m.durations[-1] for m in models if m.durations), default=0) or 1
    span = 230  # leaves room on the right for the p50/p95 label

    def x(value: float | None) -> float:
        return round(span * (value or 0) / top, 1)

    boxes = []
    for i, m in enumerate(models):
        d = m.durations
        if not d:
            continue
        boxes.append(Box(m.model, 6 + i * ROW, x(percentile(d, 5)), x(percentile(d, 25)), x(percentile(d, 50)),
                         x(percentile(d, 75)), x(percentile(d, 95)),
                         f"p50 {percentile(d, 50)} ms · p95 {percentile(d, 95)} ms"))
    return Chart(height=12 + ROW * max(1, len(models)), boxes=tuple(boxes), axis=f"{top} ms")
