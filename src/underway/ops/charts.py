"""Charts as geometry — bars placed in an SVG box, axis ticks and a legend — and
:func:`svg`, which draws one as SVG markup: no script and no inline style (each shape
carries a class that a stylesheet colours, and a ``<title>`` as its tooltip).

Shared by the console's metrics page (``static/metrics.css`` colours it) and the
self-contained report of ``underway eval --html`` (which carries its own stylesheet), so
neither needs a charting library or a script to show its figures, and the numbers a test
reads are the ones drawn. Nothing here imports the service."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

__all__ = ["Bar", "Chart", "Series", "Tick", "columns", "rows", "svg"]

WIDTH, HEIGHT = 720, 200
"""The SVG's view box; the stylesheet scales it to the page's width."""
LEFT, RIGHT, TOP, BOTTOM = 64, 32, 10, 24
"""Margins around the plot: the y axis's labels on the left, the x axis's below (and
half of the last one on the right)."""
BAR_HEIGHT = 22
"""The height of one bar of a horizontal bar chart."""

Format = Callable[[float], str]


@dataclass(frozen=True, slots=True)
class Bar:
    """A rectangle of the plot (SVG user units), its series' class and its tooltip."""

    x: float
    y: float
    w: float
    h: float
    cls: str
    title: str
    text: str = ""
    """A label drawn past the bar's end (horizontal bars: the value)."""


@dataclass(frozen=True, slots=True)
class Tick:
    """An axis label at ``pos`` (y for the value axis, x for the category axis)."""

    pos: float
    label: str


@dataclass(frozen=True, slots=True)
class Series:
    """One series of a chart: its class (its colour), its name and a value per category."""

    cls: str
    label: str
    values: Sequence[float]


@dataclass(frozen=True, slots=True)
class Chart:
    """A chart ready to draw; ``empty`` when it has nothing but zeros to show."""

    width: int
    height: int
    bars: list[Bar]
    y_ticks: list[Tick]
    x_ticks: list[Tick]
    legend: list[Series]
    empty: bool
    label: str
    """What the chart shows, for screen readers (``aria-label``)."""
    horizontal: bool = False
    baseline: float = HEIGHT - BOTTOM
    left: float = LEFT
    """Where the plot begins (the y axis)."""
    right: float = WIDTH - RIGHT
    """Where the plot ends."""


def count(value: float) -> str:
    """A count: 12, 1.5k, 2.3M."""
    for size, unit in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.3g}" if value != int(value) else str(int(value))


def usd(value: float) -> str:
    """An amount in US dollars: $0.25, $1,234."""
    if value == 0:
        return "$0"
    if abs(value) < 0.01:
        return f"${value:.4f}"
    return f"${value:,.2f}" if abs(value) < 1000 else f"${value:,.0f}"


def duration(seconds: float) -> str:
    """A duration: 45s, 12m, 3.5h, 2d."""
    for size, unit in ((86_400, "d"), (3_600, "h"), (60, "m")):
        if seconds >= size:
            return f"{seconds / size:.2g}{unit}"
    return f"{seconds:.2g}s" if seconds else "0s"


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 4, 6 or 8 times a power of ten at or above ``value``: an
    axis's top whose half is round too."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for step in (1.0, 2.0, 4.0, 6.0, 8.0):
        if value <= step * power * (1 + 1e-9):
            return step * power
    return 10.0 * power


def count_ceiling(value: float) -> float:
    """An axis's top for whole numbers: at least 2, so that its half is whole."""
    return max(2.0, nice_ceiling(value))


_DURATION_STEPS = (
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1_800, 3_600, 7_200, 14_400, 21_600,
    43_200, 86_400, 172_800, 345_600, 604_800,
)


def duration_ceiling(seconds: float) -> float:
    """The smallest round duration at or above ``seconds`` (a minute, five, an hour, a
    day...), so that the axis's half is round too."""
    for step in _DURATION_STEPS:
        if seconds <= step:
            return float(step)
    return nice_ceiling(seconds / 86_400) * 86_400


def columns(
    labels: Sequence[str], series: Sequence[Series], *, fmt: Format = count,
    stacked: bool = False, label: str = "", every: int | None = None,
    ceiling: Callable[[float], float] = nice_ceiling,
) -> Chart:
    """Vertical bars, one slot per label: the series side by side, or ``stacked``.

    Args:
        labels: The slots' names.
        series: The series.
        fmt: Writes a value.
        stacked: Stack the series in each slot.
        label: What the chart shows, for screen readers.
        every: The x axis names every ``every``-th slot; by default, about eight names.
        ceiling: The value axis goes up to ``ceiling`` of the highest slot.
    """
    n = max(1, len(labels))
    totals = [
        (sum if stacked else max)([s.values[i] for s in series] or [0.0])
        for i in range(len(labels))
    ]
    top = ceiling(max(totals, default=0.0)) or 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / n
    gap = min(4.0, slot * 0.2)
    bars: list[Bar] = []
    for i, name in enumerate(labels):
        x0 = LEFT + i * slot + gap / 2
        inner = slot - gap
        base = 0.0
        width = inner if stacked else inner / max(1, len(series))
        for k, s in enumerate(series):
            value = s.values[i]
            if value <= 0:
                continue
            h = value / top * plot_h
            x = x0 if stacked else x0 + k * width
            y = TOP + plot_h - (base if stacked else 0.0) - h
            bars.append(Bar(round(x, 2), round(y, 2), round(width, 2), round(h, 2), s.cls,
                            f"{name} · {s.label}: {fmt(value)}"))
            if stacked:
                base += h
    step = every or max(1, math.ceil(n / 8))
    x_ticks = [Tick(round(LEFT + (i + 0.5) * slot, 2), name)
               for i, name in enumerate(labels) if i % step == 0 or i == n - 1]
    if len(x_ticks) > 1 and x_ticks[-1].pos - x_ticks[-2].pos < slot * step * 0.6:
        x_ticks.pop(-2)  # the last slot's name would sit on the one before
    y_ticks = [Tick(round(TOP + plot_h * (1 - f), 2), fmt(top * f)) for f in (0.0, 0.5, 1.0)]
    return Chart(WIDTH, HEIGHT, bars, y_ticks, x_ticks, list(series),
                 empty=not any(v > 0 for s in series for v in s.values), label=label)


def rows(items: Sequence[tuple[str, float]], *, cls: str, fmt: Format = count,
         label: str = "") -> Chart:
    """Horizontal bars, one per (name, value), longest first, the longest across the plot.

    The name is the y tick. The value is written past the bar's end.

    Args:
        items: The (name, value) pairs.
        cls: The bars' CSS class.
        fmt: Writes a value.
        label: What the chart shows, for screen readers.
    """
    ordered = sorted(items, key=lambda kv: (-kv[1], kv[0]))
    top = max((v for _, v in ordered), default=0.0) or 1.0
    plot_w = WIDTH - 2 * LEFT - RIGHT - 40  # names are wider than numbers; room for values
    height = TOP + BOTTOM + BAR_HEIGHT * max(1, len(ordered))
    bars, names = [], []
    for i, (name, value) in enumerate(ordered):
        y = TOP + i * BAR_HEIGHT
        w = value / top * plot_w
        bars.append(Bar(2 * LEFT, y + 3, round(w, 2), BAR_HEIGHT - 6, cls,
                        f"{name}: {fmt(value)}", fmt(value)))
        names.append(Tick(y + BAR_HEIGHT / 2, name))
    return Chart(WIDTH, height, bars, names, [], [],
                 empty=not any(v > 0 for _, v in ordered), label=label, horizontal=True,
                 baseline=height - BOTTOM)


def svg(chart: Chart) -> str:
    """``chart`` as SVG markup (with its legend as a list when it has several series), or a
    note that the window has no data when it is empty."""
    if chart.empty:
        return '<p class="empty">No data in this window.</p>'
    kind = "chart horizontal" if chart.horizontal else "chart"
    out = [f'<svg class="{kind}" viewBox="0 0 {chart.width} {chart.height}" role="img" '
           f'aria-label="{escape(chart.label)}">']
    for t in chart.y_ticks:
        if chart.horizontal:
            out.append(f'<text class="tick name" x="{_n(chart.bars[0].x - 8)}" '
                       f'y="{_n(t.pos)}">{escape(t.label)}</text>')
        else:
            out.append(f'<line class="grid" x1="{_n(chart.left)}" x2="{_n(chart.right)}" '
                       f'y1="{_n(t.pos)}" y2="{_n(t.pos)}"></line>')
            out.append(f'<text class="tick y" x="{_n(chart.left - 6)}" '
                       f'y="{_n(t.pos)}">{escape(t.label)}</text>')
    for b in chart.bars:
        out.append(f'<rect class="bar {escape(b.cls)}" x="{_n(b.x)}" y="{_n(b.y)}" '
                   f'width="{_n(b.w)}" height="{_n(b.h)}"><title>{escape(b.title)}</title>'
                   '</rect>')
        if b.text:
            out.append(f'<text class="value" x="{_n(b.x + b.w + 6)}" '
                       f'y="{_n(b.y + b.h / 2)}">{escape(b.text)}</text>')
    for t in chart.x_ticks:
        out.append(f'<text class="tick x" x="{_n(t.pos)}" y="{chart.height - 6}">'
                   f'{escape(t.label)}</text>')
    if not chart.horizontal:
        out.append(f'<line class="axis" x1="{_n(chart.left)}" x2="{_n(chart.right)}" '
                   f'y1="{_n(chart.baseline)}" y2="{_n(chart.baseline)}"></line>')
    out.append("</svg>")
    if len(chart.legend) > 1:
        out.append('<ul class="legend">')
        out += [f'<li><svg class="swatch" viewBox="0 0 10 10" aria-hidden="true"><rect '
                f'class="bar {escape(s.cls)}" width="10" height="10"></rect></svg>'
                f'{escape(s.label)}</li>' for s in chart.legend]
        out.append("</ul>")
    return "\n".join(out)


def _n(value: float) -> str:
    """A coordinate as SVG writes it: no trailing zeros."""
    return f"{value:.2f}".rstrip("0").rstrip(".") if value != int(value) else str(int(value))
