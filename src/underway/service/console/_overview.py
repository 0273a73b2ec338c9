"""The run page's overview, drawn by the server: a Gantt chart of the run's step attempts
(each with its worker, its duration, its calls and the wait it ended in, its events one
click away) and the graph of its steps with the transitions it took
(:mod:`underway.ops.overview` reads them from the journal).

Bars are SVG rectangles placed in a view box 1000 units wide that spans the run, from its
first event to its last (or to now while it moves); the graph is SVG too. Both carry
classes that ``static/run.css`` colours and ``<title>`` tooltips, and no script or inline
style, so the console's Content-Security-Policy holds. Every text is escaped here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from html import escape

from markupsafe import Markup

from ...ops.overview import Attempt, Graph, Overview, short_worker
from ...ops.timeline import duration, format_time

SPAN = 1000.0
"""The width of a bar's view box: the run's whole span."""
MIN_W = 3.0
"""The narrowest bar drawn, so an instant still shows."""
ROWS = 100
"""Attempts the chart draws at most: the newest (the event log holds the rest)."""


@dataclass(frozen=True, slots=True)
class Bar:
    """One bar: where it starts and how wide it is (view-box units), its class and
    tooltip."""

    x: float
    w: float
    cls: str
    title: str


@dataclass(frozen=True, slots=True)
class Line:
    """A call or a wait under an attempt's row: its text, how long it took and its bar."""

    text: str
    took: str
    bar: Bar
    seq: int


@dataclass(frozen=True, slots=True)
class Row:
    """One attempt as the chart shows it."""

    seqs: tuple[int, int]
    title: str
    outcome: str
    worker: str
    worker_id: str
    started: str
    took: str
    bars: tuple[Bar, ...]
    lines: tuple[Line, ...]
    notes: tuple[tuple[int, str], ...]
    family: str


@dataclass(frozen=True, slots=True)
class Chart:
    """The Gantt chart: its rows, its axis labels and how many attempts it leaves out."""

    rows: tuple[Row, ...]
    axis: tuple[str, ...]
    left_out: int
    workers: tuple[tuple[str, str, int], ...]
    """(short name, owner id, attempts) of each worker that ran an attempt."""


def chart(seen: Overview) -> Chart:
    """The Gantt chart of a run's overview."""
    attempts = seen.attempts[-ROWS:]
    span = max(seen.end - seen.start, 1e-6)

    def bar(start: float, end: float | None, cls: str, title: str) -> Bar:
        x = (start - seen.start) / span * SPAN
        w = ((end if end is not None else seen.end) - start) / span * SPAN
        x = min(max(x, 0.0), SPAN - MIN_W)
        return Bar(round(x, 2), round(min(max(w, MIN_W), SPAN - x), 2), cls, title)

    rows = tuple(_row(a, seen.end, bar) for a in attempts)
    axis = tuple(("+" + duration(span * i / 4)) if i else format_time(seen.start)[11:19]
                 for i in range(5))
    workers = tuple((short_worker(w), w, n) for w, n in seen.workers.items())
    return Chart(rows, axis, len(seen.attempts) - len(attempts), workers)


_BarFn = Callable[[float, float | None, str, str], Bar]
"""Places a bar: (start, end, class, title)."""


def _took(start: float, end: float | None) -> str:
    return "running" if end is None else duration(max(0.0, end - start))


def _row(a: Attempt, now: float, bar: _BarFn) -> Row:
    # Drawn in this order, so the step's bar shows over its wait's and calls over both.
    bars = []
    lines = [Line(f"{c.label} {c.outcome}", _took(c.start, c.end),
                  bar(c.start, c.end if c.end is not None else now, f"g-{c.kind}",
                      f"{c.label}: {_took(c.start, c.end)}"), c.seq)
             for c in a.calls]
    if a.wait is not None:
        w = a.wait
        took = _took(w.start, w.end) if w.end is not None else "still waiting"
        wait_bar = bar(w.start, w.end, "g-wait", f"waiting for {w.what}: {took}")
        bars.append(wait_bar)
        then = f", then {w.outcome}" if w.outcome else ""
        lines.append(Line(f"waiting for {w.what}{then}", took, wait_bar, a.last_seq))
    if a.step:
        bars.append(bar(a.start, a.end, "g-step", f"{a.title}: {_took(a.start, a.end)}"))
    bars += [c.bar for c in lines if c.bar.cls != "g-wait"]
    called = {c.seq for c in a.calls}
    family = "run" if not a.step else "dead" if a.outcome in ("dead", "failed") else "step"
    return Row((a.first_seq, a.last_seq), a.title, a.outcome, short_worker(a.worker),
               a.worker or "", format_time(a.start), _took(a.start, a.end) if a.step else "",
               tuple(bars), tuple(lines),
               tuple((n.seq, n.summary) for n in a.notes if n.seq not in called), family)


# -- the graph ------------------------------------------------------------------------------
_X, _W, _H, _GAP, _TOP = 24, 220, 36, 26, 28
"""A node's left edge, width and height, the gap between nodes, the space above the first."""


def graph_svg(g: Graph) -> Markup:
    """The graph of a run's steps as SVG: a node per step top to bottom (in the order
    declared, else first run), an arrow per transition taken with how often and what the
    run waited on, the step it is at, and its end."""
    names = [*g.steps, "end"]
    at = {name: i for i, name in enumerate(names)}
    y = [_TOP + i * (_H + _GAP) for i in range(len(names))]
    parts: list[str] = []
    reach = 0
    for n, e in enumerate(sorted(g.edges, key=lambda e: (at[e.source], at[e.target]))):
        a, b = at[e.source], at[e.target]
        label = f"{e.count}x" + (f" · {', '.join(e.waits)}" if e.waits else "")
        title = f"{e.source} → {e.target}: taken {e.count} time{'s' if e.count != 1 else ''}"
        if b == a + 1:
            x = _X + _W / 2
            path = f"M{x},{y[a] + _H} L{x},{y[b] - 2}"
            tx, ty = x + 8, (y[a] + _H + y[b]) / 2 + 4
        else:
            bend = 40 + 18 * abs(b - a) + 6 * (n % 3)
            reach = max(reach, bend)
            x0 = _X + _W
            y0, y1 = y[a] + _H / 2 - 5, y[b] + _H / 2 + 5
            path = f"M{x0},{y0} C{x0 + bend},{y0} {x0 + bend},{y1} {x0 + 2},{y1}"
            tx, ty = x0 + bend * 0.75 + 6, (y0 + y1) / 2 + 4
        parts.append(f'<g class="edge"><title>{escape(title)}</title>'
                     f'<path d="{path}" marker-end="url(#arrow)"/>'
                     f'<text x="{tx:.1f}" y="{ty:.1f}">{escape(label)}</text></g>')
    for i, name in enumerate(names):
        cls = ["node"]
        if name == "end":
            cls.append("end")
            if g.ended:
                cls.append(f"ended-{g.ended}")
            text = f"end · {g.ended}" if g.ended else "end"
        else:
            cls.append("taken" if name in g.visited else "untaken")
            if name == g.current:
                cls.append("current")
            text = name
        about = g.about.get(name, "")
        title = f"{text}: {about}" if about else text
        line = (f'<text class="about" x="{_X + _W / 2}" y="{y[i] + _H - 5}">'
                f'{escape(_fit(about, 34))}</text>' if about else "")
        parts.append(f'<g class="{" ".join(cls)}"><title>{escape(title)}</title>'
                     f'<rect x="{_X}" y="{y[i]}" width="{_W}" height="{_H}" rx="6"/>'
                     f'<text x="{_X + _W / 2}" y="{y[i] + (15 if about else _H / 2 + 4)}">'
                     f'{escape(_fit(text))}</text>{line}</g>')
    start = f'<path class="start" d="M{_X + _W / 2},4 L{_X + _W / 2},{_TOP - 2}" ' \
            'marker-end="url(#arrow)"/>'
    width = _X + _W + reach + 220
    height = y[-1] + _H + 12
    return Markup(
        f'<svg class="graph" viewBox="0 0 {width:.0f} {height}" width="{width:.0f}" '
        f'height="{height}" role="img" aria-label="the graph of the run\'s steps">'
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"/>'
        f'</marker></defs>{start}{"".join(parts)}</svg>')


def _fit(text: str, most: int = 26) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"
