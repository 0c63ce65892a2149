"""Charts as inline SVG geometry: numbers in, coordinates out, drawn by a template.

No chart library and no script: an SVG of rectangles, circles and text is
rendered by the browser (and by the CSP, which allows no inline script or style,
only presentation attributes), so a chart cannot run model-controlled code.

Legible at a phone's width: the drawing is :data:`WIDTH` units wide (about a phone's column, so
a unit is about a pixel there and text stays at its size), a model's name sits on its own line
above its bar (no left gutter squeezing long names), names are cut to the room they have (the
full name is the element's tooltip), and the scatter plot labels each dot with its number only
where the number overlaps nothing (the legend under the chart names every model).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from evaljobs.reports.build import percentile
from evaljobs.view.queries import ModelRow

WIDTH = 360
#: Text size in drawing units, and the width a character takes at most (a conservative average).
FONT = 12
CHAR = 7.0
#: A model's block in the bar and box charts: its label line, then its bar.
ROW = 36
BAR = 14
#: Room on the right of the scatter plot's frame for a label, and its plot area.
PLOT_LEFT, PLOT_TOP, PLOT_W, PLOT_H = 44, 10, WIDTH - 60, 170


@dataclass(frozen=True)
class Bar:
    label: str
    full: str
    y: int
    width: float
    value: str


@dataclass(frozen=True)
class Point:
    number: int
    label: str
    #: None when the model's cost is unknown: it has no place on a cost axis (the legend still names it).
    x: float | None
    y: float
    value: str
    #: Where the dot's number goes, or None when every place would overlap something.
    tx: float | None = None
    ty: float | None = None
    anchor: str = "start"


@dataclass(frozen=True)
class Box:
    label: str
    full: str
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
    width: int = WIDTH
    bars: tuple[Bar, ...] = ()
    points: tuple[Point, ...] = ()
    boxes: tuple[Box, ...] = ()
    axis: str = ""


def fit(text: str, room: float) -> str:
    """``text`` cut with an ellipsis to what fits in ``room`` drawing units."""
    most = max(1, int(room // CHAR))
    return text if len(text) <= most else text[: most - 1] + "…"


def pass_rates(models: Sequence[ModelRow]) -> Chart:
    bars = []
    for i, m in enumerate(models):
        value = f"{m.pass_rate * 100:.1f}%"
        bars.append(Bar(fit(m.model, WIDTH - CHAR * (len(value) + 2)), m.model, 4 + i * ROW,
                        round(WIDTH * m.pass_rate, 1), value))
    return Chart(height=8 + ROW * max(1, len(models)), bars=tuple(bars))


def _all_unknown(m: ModelRow) -> bool:
    return bool(m.cost_unknown) and m.cost_unknown >= m.results


def _cost_label(m: ModelRow) -> str:
    """Unknown prices are not $0: ``cost unknown``, or the known part as a lower bound."""
    if _all_unknown(m):
        return "cost unknown"
    return f"{'≥ ' if m.cost_unknown else ''}${m.cost:.4f}"


def cost_vs_pass_rate(models: Sequence[ModelRow]) -> Chart:
    """Pass rate (up) against cost (right); the best models sit top-left. Dots are numbered as the legend.

    A model whose every cost is unknown gets no dot (at $0 it would claim to be free); a partly known cost
    is drawn at its known part, the lower bound its legend shows with "≥"."""
    known = [m.cost for m in models if not _all_unknown(m)]
    top = max(known, default=0.0) or 1.0
    taken: list[tuple[float, float, float, float]] = [  # the axis labels' boxes
        (0, PLOT_TOP, PLOT_LEFT - 4, PLOT_TOP + FONT),
        (0, PLOT_TOP + PLOT_H - FONT, PLOT_LEFT - 4, PLOT_TOP + PLOT_H),
    ]
    dots = [(None if _all_unknown(m) else round(PLOT_LEFT + PLOT_W * (m.cost / top), 1),
             round(PLOT_TOP + PLOT_H * (1 - m.pass_rate), 1)) for m in models]
    taken += [(x - 5, y - 5, x + 5, y + 5) for x, y in dots if x is not None]
    points = []
    for number, (m, (x, y)) in enumerate(zip(models, dots), start=1):
        if x is None:
            points.append(Point(number, m.model, None, y, f"{_cost_label(m)} · {m.pass_rate * 100:.1f}%"))
            continue
        text = str(number)
        w = CHAR * len(text)
        spot = None
        for tx, ty, anchor in ((x + 8, y + 4, "start"), (x - 8, y + 4, "end"), (x - w / 2, y - 9, "start"),
                               (x - w / 2, y + 17, "start")):
            left = tx - w if anchor == "end" else tx
            box = (left, ty - FONT + 2, left + w, ty + 2)
            inside = (
                PLOT_LEFT <= box[0] and box[2] <= WIDTH and 0 <= box[1] and box[3] <= PLOT_TOP + PLOT_H + 4
            )
            if inside and not any(_overlap(box, other) for other in taken):
                spot = (tx, ty, anchor)
                taken.append(box)
                break
        value = f"{_cost_label(m)} · {m.pass_rate * 100:.1f}%"
        points.append(Point(number, m.model, x, y, value, *(spot or (None, None, "start"))))
    return Chart(height=PLOT_TOP + PLOT_H + 24, points=tuple(points),
                 axis=f"${top:.4f}" if known else "cost unknown")


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def latency(models: Sequence[ModelRow]) -> Chart:
    """Per model: p5–p95 whisker, p25–p75 box, median line, on one linear scale."""
    top = max((m.durations[-1] for m in models if m.durations), default=0) or 1

    def x(value: float | None) -> float:
        return round((WIDTH - 2) * (value or 0) / top, 1)

    boxes = []
    for i, m in enumerate(models):
        d = m.durations
        if not d:
            continue
        value = f"p50 {percentile(d, 50)} ms · p95 {percentile(d, 95)} ms"
        boxes.append(
            Box(
                fit(m.model, WIDTH - CHAR * (len(value) + 2)),
                m.model,
                4 + i * ROW,
                x(percentile(d, 5)),
                x(percentile(d, 25)),
                x(percentile(d, 50)),
                x(percentile(d, 75)),
                x(percentile(d, 95)),
                value,
            )
        )
    return Chart(height=8 + ROW * max(1, len(models)) + FONT + 4, boxes=tuple(boxes), axis=f"{top} ms")


__all__ = ["Bar", "Box", "Chart", "Point", "cost_vs_pass_rate", "fit", "latency", "pass_rates"]
