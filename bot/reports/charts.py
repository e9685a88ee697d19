"""Report stage: static SVG charts, drawn from figures alone.

A line per series over a run of days, and horizontal bars: plain SVG (no script, no
outside reference, no colour of its own: each series carries a class the page's style
colours, light or dark), named for assistive technology by its ``<title>`` and a
``<desc>`` that says the totals.  Pure functions: never reads the store, never writes
a file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from html import escape

# The drawing's own units; the page scales it to its width, and sets its text larger on a
# phone's screen (up to 24 units): the margins leave room for that.
WIDTH = 640
PLOT_TOP, PLOT_BOTTOM, PLOT_LEFT, PLOT_RIGHT = 14, 34, 64, 14
LINE_HEIGHT = 250
BAR_ROW = 38
BAR_LABEL = 180
# Day labels stand at least this share of the width apart.
LABEL_GAP = 0.12
SERIES_CLASSES = 6  # s1 .. s6 in the page's style


@dataclass(frozen=True, slots=True)
class Series:
    """One line: its name, a figure for each day, and its colour (1 to ``SERIES_CLASSES``;
    0: its place among the chart's lines)."""

    name: str
    values: tuple[int, ...]
    colour: int = 0


def nice_top(largest: int) -> int:
    """The y axis' top: the smallest of 2, 4, 6, 8 times a power of ten (or 10) that is
    at least *largest*, so that its half is a whole figure too."""
    power = 1
    while True:
        for step in (2, 4, 6, 8, 10):
            if step * power >= largest:
                return step * power
        power *= 10


def day_labels(days: Sequence[date]) -> list[tuple[int, str]]:
    """Where the x axis names a day (index, "1 Oct"): the first days of months, as many as
    stand ``LABEL_GAP`` apart, and the first day when no month begins early enough."""
    gap = len(days) * LABEL_GAP
    firsts = [i for i, d in enumerate(days) if d.day == 1]
    if days and (not firsts or firsts[0] > gap):
        firsts.insert(0, 0)
    kept: list[int] = []
    for i in firsts:
        if not kept or i - kept[-1] >= gap:
            kept.append(i)
    return [(i, f"{days[i].day} {days[i]:%b}") for i in kept]


def short_figure(value: int) -> str:
    """An axis figure in at most five characters: 950, 2.5k, 40k, 1.2M (up to trillions)."""
    for limit, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "k")):
        if value >= limit:
            return f"{value / limit:.3g}{suffix}"
    return str(value)


@dataclass(frozen=True, slots=True)
class _Plot:
    """Where a day and a figure stand in the drawing."""

    days: int
    top: int

    def x(self, i: int) -> float:
        return PLOT_LEFT + i * (WIDTH - PLOT_LEFT - PLOT_RIGHT) / max(self.days - 1, 1)

    def y(self, value: float) -> float:
        return PLOT_TOP + (LINE_HEIGHT - PLOT_TOP - PLOT_BOTTOM) * (1 - value / self.top)


def line_chart(chart_id: str, title: str, days: Sequence[date], series: Sequence[Series]) -> str:
    """A line per series (at most ``SERIES_CLASSES``) over *days*, zero at the bottom."""
    if len(series) > SERIES_CLASSES:
        raise ValueError(f"at most {SERIES_CLASSES} series, not {len(series)}")
    if any(len(s.values) != len(days) for s in series):
        raise ValueError("each series needs a figure for each day")
    plot = _Plot(len(days), nice_top(max((v for s in series for v in s.values), default=0)))
    parts = [_grid(plot.top, plot.y)]
    for i, label in day_labels(days):
        at = plot.x(i)
        anchor = "start" if at - PLOT_LEFT < 40 else "end" if WIDTH - PLOT_RIGHT - at < 40 else "middle"
        parts.append(f'<text class="tick" x="{at:.1f}" y="{LINE_HEIGHT - 6}" text-anchor="{anchor}">{label}</text>')
    parts += [_line(plot, one, one.colour or place) for place, one in enumerate(series, start=1) if one.values]
    period = f"{days[0]:%d %B %Y} to {days[-1]:%d %B %Y}" if days else "no days"
    # Each name isolated (FSI … PDI): a right-to-left override in a feed's URL turns no figure.
    said = "; ".join(
        f"\u2068{s.name}\u2069: {sum(s.values):,} in all, at most {max(s.values, default=0):,} a day" for s in series
    )
    return _svg(chart_id, title, f"{period}. {said or 'nothing to draw'}.", LINE_HEIGHT, "".join(parts))


def _line(plot: _Plot, series: Series, colour: int) -> str:
    if len(series.values) == 1:  # a line of one point is invisible: a dot instead
        return f'<circle class="s{colour}" cx="{plot.x(0):.1f}" cy="{plot.y(series.values[0]):.1f}" r="3"/>'
    points = " ".join(f"{plot.x(i):.1f},{plot.y(v):.1f}" for i, v in enumerate(series.values))
    return f'<polyline class="line s{colour}" points="{points}"/>'


def bar_chart(chart_id: str, title: str, bars: Sequence[tuple[str, int, int]]) -> str:
    """A horizontal bar per (label, figure, colour 1 to ``SERIES_CLASSES``), labelled
    with its label and figure."""
    top = max((v for _, v, _ in bars), default=0) or 1
    height = max(len(bars), 1) * BAR_ROW + 8
    room = WIDTH - BAR_LABEL - 100
    parts = []
    for n, (label, value, colour) in enumerate(bars):
        row = 4 + n * BAR_ROW
        width = max(room * value / top, 1)
        parts.append(
            f'<text class="label" x="{BAR_LABEL - 10}" y="{row + 24}" text-anchor="end">{escape(label)}</text>'
            f'<rect class="bar s{(colour - 1) % SERIES_CLASSES + 1}" x="{BAR_LABEL}" y="{row + 6}" '
            f'width="{width:.1f}" height="{BAR_ROW - 12}"/>'
            f'<text class="label" x="{BAR_LABEL + width + 8:.1f}" y="{row + 24}">{value:,}</text>'
        )
    said = "; ".join(f"{label}: {value:,}" for label, value, _ in bars) or "none"
    return _svg(chart_id, title, f"{said}.", height, "".join(parts))


def _grid(top: int, y: Callable[[float], float]) -> str:
    lines = []
    for value in (0, top // 2, top):
        at = y(value)
        lines.append(
            f'<line class="grid" x1="{PLOT_LEFT}" x2="{WIDTH - PLOT_RIGHT}" y1="{at:.1f}" y2="{at:.1f}"/>'
            f'<text class="tick" x="{PLOT_LEFT - 8}" y="{at + 5:.1f}" text-anchor="end">{short_figure(value)}</text>'
        )
    return "".join(lines)


def _svg(chart_id: str, title: str, description: str, height: int, body: str) -> str:
    name, said = escape(chart_id, quote=True), escape(description)
    return (
        f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-labelledby="{name}-title {name}-desc" xmlns="http://www.w3.org/2000/svg">'
        f'<title id="{name}-title">{escape(title)}</title><desc id="{name}-desc">{said}</desc>{body}</svg>'
    )
