"""Server-side SVG charts for the dashboard: bar and line charts of per-minute series, and a
load bar, as standalone ``<svg>`` markup with no script, stylesheet or font to fetch."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

Point = tuple[datetime, float]

SVG_NS = "http://www.w3.org/2000/svg"
# Room for the title above the plot, the y labels on its left and the x labels below it.
MARGIN_TOP = 22
MARGIN_RIGHT = 20
MARGIN_BOTTOM = 20
MARGIN_LEFT = 40
MAX_X_LABELS = 7


def nice_ceiling(value: float) -> float:
    """Return the smallest 1, 2 or 5 times a power of ten that is at least ``value`` (1 for
    values of zero or less), so the y axis ends on a round number."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * power >= value:
            return float(step * power)
    return 10 * power  # pragma: no cover - the loop always returns


def format_number(value: float) -> str:
    """Format an axis or tooltip value: whole numbers without decimals, others with up to two."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.2f}".rstrip("0").rstrip(".")


def format_minute(moment: datetime) -> str:
    """Format a minute as ``HH:MM`` in the current time zone."""
    if timezone.is_aware(moment):
        moment = timezone.localtime(moment)
    return moment.strftime("%H:%M")


def x_label_indexes(count: int, max_labels: int = MAX_X_LABELS) -> list[int]:
    """Indexes of the points labelled on the x axis: evenly spaced, ending with the last one."""
    if count <= 0:
        return []
    step = max(1, math.ceil(count / max_labels))
    return list(range((count - 1) % step, count, step))


@dataclass(frozen=True)
class _Frame:
    """The plot area of a chart and the value at its top."""

    width: int
    height: int
    top_value: float

    @property
    def plot_width(self) -> float:
        return self.width - MARGIN_LEFT - MARGIN_RIGHT

    @property
    def plot_height(self) -> float:
        return self.height - MARGIN_TOP - MARGIN_BOTTOM

    @property
    def bottom(self) -> float:
        return self.height - MARGIN_BOTTOM

    def y(self, value: float) -> float:
        return round(self.bottom - max(0.0, value) / self.top_value * self.plot_height, 1)


def _svg(
    frame: _Frame, title: str, css_class: str, body: list[SafeString], points: Sequence[Point]
) -> SafeString:
    """Wrap ``body`` with the title, the axes, the y ticks and the x labels."""
    parts = [
        format_html(
            '<text class="iq-chart-title" x="{}" y="14" font-size="12" fill="#333">{}</text>',
            MARGIN_LEFT,
            title,
        )
    ]
    # A middle tick only where it is a whole number: "2.5 jobs" would read oddly.
    middle = frame.top_value / 2
    ticks = (0.0, middle, frame.top_value) if middle.is_integer() else (0.0, frame.top_value)
    for value in ticks:
        y = frame.y(value)
        parts.append(
            format_html(
                '<line class="iq-grid" x1="{}" y1="{}" x2="{}" y2="{}" stroke="#ddd"/>'
                '<text class="iq-axis-label" x="{}" y="{}" font-size="10" fill="#666" '
                'text-anchor="end">{}</text>',
                MARGIN_LEFT,
                y,
                frame.width - MARGIN_RIGHT,
                y,
                MARGIN_LEFT - 4,
                round(y + 3, 1),
                format_number(value),
            )
        )
    parts.append(
        format_html(
            '<line class="iq-axis" x1="{0}" y1="{1}" x2="{0}" y2="{2}" stroke="#999"/>'
            '<line class="iq-axis" x1="{0}" y1="{2}" x2="{3}" y2="{2}" stroke="#999"/>',
            MARGIN_LEFT,
            MARGIN_TOP,
            frame.bottom,
            frame.width - MARGIN_RIGHT,
        )
    )
    slot = frame.plot_width / len(points) if points else 0
    for index in x_label_indexes(len(points)):
        parts.append(
            format_html(
                '<text class="iq-axis-label" x="{}" y="{}" font-size="10" fill="#666" '
                'text-anchor="middle">{}</text>',
                round(MARGIN_LEFT + slot * (index + 0.5), 1),
                frame.height - 6,
                format_minute(points[index][0]),
            )
        )
    if not points:
        parts.append(
            format_html(
                '<text class="iq-axis-label" x="{}" y="{}" font-size="11" fill="#666" '
                'text-anchor="middle">no data</text>',
                round(MARGIN_LEFT + frame.plot_width / 2, 1),
                round(MARGIN_TOP + frame.plot_height / 2, 1),
            )
        )
    return format_html(
        '<svg xmlns="{}" class="iq-chart {}" width="{}" height="{}" viewBox="0 0 {} {}" '
        'role="img" aria-label="{}"><title>{}</title>{}{}</svg>',
        SVG_NS,
        css_class,
        frame.width,
        frame.height,
        frame.width,
        frame.height,
        title,
        title,
        _join(parts),
        _join(body),
    )


def _join(parts: list[SafeString]) -> SafeString:
    return format_html_join("", "{}", ((part,) for part in parts))


def _frame(points: Sequence[Point], width: int, height: int) -> _Frame:
    top = max((value for _, value in points), default=0.0)
    return _Frame(width=width, height=height, top_value=nice_ceiling(top))


def bar_chart(
    points: Sequence[Point], *, title: str, width: int = 640, height: int = 170
) -> SafeString:
    """Return an SVG bar chart of ``points`` ((minute, value), oldest first), one bar a point.

    The y axis runs from 0 to a round value at or above the largest point; the x axis labels
    up to seven minutes. Each bar carries a tooltip (``<title>``) with its minute and value.
    """
    frame = _frame(points, width, height)
    slot = frame.plot_width / len(points) if points else 0
    gap = min(1.0, slot / 4)
    bars = []
    for index, (minute, value) in enumerate(points):
        y = frame.y(value)
        bars.append(
            format_html(
                '<rect class="iq-bar" x="{}" y="{}" width="{}" height="{}" fill="#417690">'
                "<title>{}: {}</title></rect>",
                round(MARGIN_LEFT + slot * index + gap / 2, 1),
                y,
                round(max(slot - gap, 0.5), 1),
                round(frame.bottom - y, 1),
                format_minute(minute),
                format_number(value),
            )
        )
    return _svg(frame, title, "iq-bar-chart", bars, points)


def line_chart(
    points: Sequence[Point], *, title: str, width: int = 640, height: int = 170
) -> SafeString:
    """Return an SVG line chart of ``points`` ((minute, value), oldest first), with the same
    axes as ``bar_chart`` and a marker with a tooltip on each non-zero point."""
    frame = _frame(points, width, height)
    slot = frame.plot_width / len(points) if points else 0
    coords = [
        (round(MARGIN_LEFT + slot * (index + 0.5), 1), frame.y(value))
        for index, (_, value) in enumerate(points)
    ]
    body = []
    if coords:
        body.append(
            format_html(
                '<polyline class="iq-line" points="{}" fill="none" stroke="#ba2121" '
                'stroke-width="1.5"/>',
                " ".join(f"{x},{y}" for x, y in coords),
            )
        )
    for (x, y), (minute, value) in zip(coords, points, strict=True):
        if value:
            body.append(
                format_html(
                    '<circle class="iq-point" cx="{}" cy="{}" r="2.5" fill="#ba2121">'
                    "<title>{}: {}</title></circle>",
                    x,
                    y,
                    format_minute(minute),
                    format_number(value),
                )
            )
    return _svg(frame, title, "iq-line-chart", body, points)


def load_bar(
    fraction: float | None, *, label: str, width: int = 80, height: int = 10
) -> SafeString:
    """Return a small SVG bar filled to ``fraction`` (0 to 1, clamped), or an empty outline
    when ``fraction`` is None (no processing threads to be busy)."""
    filled = 0.0 if fraction is None else min(1.0, max(0.0, fraction))
    return format_html(
        '<svg xmlns="{}" class="iq-load" width="{}" height="{}" viewBox="0 0 {} {}" role="img" '
        'aria-label="{}"><title>{}</title>'
        '<rect class="iq-load-track" x="0.5" y="0.5" width="{}" height="{}" fill="none" '
        'stroke="#999"/>'
        '<rect class="iq-load-fill" x="0.5" y="0.5" width="{}" height="{}" fill="#417690"/></svg>',
        SVG_NS,
        width,
        height,
        width,
        height,
        label,
        label,
        width - 1,
        height - 1,
        round((width - 1) * filled, 1),
        height - 1,
    )


# (minute, value or None for a minute with nothing to show)
GapPoint = tuple[datetime, float | None]
# Colours of the series of a multi-line chart, in order; the CSS class iq-series-<n> overrides.
SERIES_COLOURS = ("#417690", "#ba2121", "#79aec8")


def lines_chart(
    series: Sequence[tuple[str, Sequence[GapPoint]]],
    *,
    title: str,
    unit: str = "",
    width: int = 640,
    height: int = 170,
) -> SafeString:
    """Return an SVG chart of several ``(label, points)`` series over the same minutes, each a
    line broken where a point is None (a minute without data), with a legend in the title and
    a tooltip on each point. ``unit`` follows the values in the tooltips."""
    minutes = list(series[0][1]) if series else []
    values = [value for _, points in series for _, value in points if value is not None]
    axis: list[Point] = [(minute, 0.0) for minute, _ in minutes]
    frame = _Frame(width=width, height=height, top_value=nice_ceiling(max(values, default=0.0)))
    slot = frame.plot_width / len(minutes) if minutes else 0
    body: list[SafeString] = []
    legend = []
    for number, (label, points) in enumerate(series):
        colour = SERIES_COLOURS[number % len(SERIES_COLOURS)]
        legend.append(label)
        runs: list[list[tuple[float, float]]] = [[]]
        for index, (minute, value) in enumerate(points):
            if value is None:
                runs.append([])
                continue
            x, y = round(MARGIN_LEFT + slot * (index + 0.5), 1), frame.y(value)
            runs[-1].append((x, y))
            body.append(
                format_html(
                    '<circle class="iq-series-{}" cx="{}" cy="{}" r="2" fill="{}">'
                    "<title>{} {}: {}{}</title></circle>",
                    number,
                    x,
                    y,
                    colour,
                    label,
                    format_minute(minute),
                    format_number(round(value, 3)),
                    unit,
                )
            )
        for run in runs:
            if len(run) > 1:
                body.append(
                    format_html(
                        '<polyline class="iq-series-{}" points="{}" fill="none" stroke="{}" '
                        'stroke-width="1.5"/>',
                        number,
                        " ".join(f"{x},{y}" for x, y in run),
                        colour,
                    )
                )
    if legend:
        body.append(
            format_html(
                '<text class="iq-legend" x="{}" y="14" font-size="11" text-anchor="end">{}</text>',
                width - MARGIN_RIGHT,
                format_html_join(
                    " ",
                    '<tspan class="iq-series-{}" fill="{}">\u25cf {}</tspan>',
                    (
                        (n, SERIES_COLOURS[n % len(SERIES_COLOURS)], label)
                        for n, label in enumerate(legend)
                    ),
                ),
            )
        )
    return _svg(frame, title, "iq-lines-chart", body, axis)
