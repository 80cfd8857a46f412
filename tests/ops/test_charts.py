"""charts.py: well-formed SVG with axes, labels and one mark per point, scaled to a round top."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings

from django_iq.dashboard import charts

NS = {"svg": charts.SVG_NS}
START = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def series(values: list[float]) -> list[charts.Point]:
    return [(START + timedelta(minutes=i), value) for i, value in enumerate(values)]


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # noqa: S314 - markup built by the test itself


def texts(root: ET.Element, css_class: str) -> list[str]:
    return [
        el.text or ""
        for el in root.iter(f"{{{charts.SVG_NS}}}text")
        if el.get("class") == css_class
    ]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, 1),
        (-3, 1),
        (0.3, 0.5),
        (1, 1),
        (1.5, 2),
        (3, 5),
        (7, 10),
        (10, 10),
        (11, 20),
        (420, 500),
    ],
)
def test_nice_ceiling_rounds_up_to_one_two_or_five_times_a_power_of_ten(
    value: float, expected: float
) -> None:
    assert charts.nice_ceiling(value) == pytest.approx(expected)


@pytest.mark.parametrize(("value", "text"), [(3, "3"), (2.0, "2"), (2.5, "2.5"), (1 / 3, "0.33")])
def test_format_number_drops_useless_decimals(value: float, text: str) -> None:
    assert charts.format_number(value) == text


@pytest.mark.parametrize(
    ("count", "indexes"),
    [(0, []), (1, [0]), (5, [0, 1, 2, 3, 4]), (60, [5, 14, 23, 32, 41, 50, 59])],
)
def test_x_labels_are_evenly_spaced_and_end_with_the_last_point(
    count: int, indexes: list[int]
) -> None:
    assert charts.x_label_indexes(count) == indexes


def test_bar_chart_is_well_formed_svg_with_one_bar_per_point() -> None:
    root = parse(charts.bar_chart(series([0, 3, 1, 4]), title="Jobs done per minute"))

    assert root.tag == f"{{{charts.SVG_NS}}}svg"
    assert root.get("role") == "img"
    assert root.findtext("svg:title", namespaces=NS) == "Jobs done per minute"
    bars = root.findall("svg:rect", NS)
    assert len(bars) == 4
    assert [bar.findtext("svg:title", namespaces=NS) for bar in bars] == [
        "12:00: 0",
        "12:01: 3",
        "12:02: 1",
        "12:03: 4",
    ]


def test_bar_heights_are_proportional_to_values_under_a_round_top() -> None:
    root = parse(charts.bar_chart(series([1, 2, 4]), title="t", height=170))
    heights = [float(bar.get("height", "")) for bar in root.findall("svg:rect", NS)]
    plot_height = 170 - charts.MARGIN_TOP - charts.MARGIN_BOTTOM

    # The largest value, 4, sits under a top of 5.
    assert heights == pytest.approx([plot_height / 5, 2 * plot_height / 5, 4 * plot_height / 5])
    assert texts(root, "iq-axis-label")[:2] == ["0", "5"]


def test_y_axis_has_a_middle_tick_when_it_is_a_whole_number() -> None:
    root = parse(charts.bar_chart(series([3, 7]), title="t"))

    assert texts(root, "iq-axis-label")[:3] == ["0", "5", "10"]


def test_chart_has_two_axes_and_minute_labels() -> None:
    root = parse(charts.bar_chart(series([1] * 60), title="t"))

    axes = [el for el in root.findall("svg:line", NS) if el.get("class") == "iq-axis"]
    assert len(axes) == 2
    # The top is 1: the y axis has the ticks 0 and 1 only.
    assert texts(root, "iq-axis-label")[2:] == [
        "12:05",
        "12:14",
        "12:23",
        "12:32",
        "12:41",
        "12:50",
        "12:59",
    ]


@override_settings(TIME_ZONE="Europe/Paris")
def test_minute_labels_are_in_the_current_time_zone() -> None:
    root = parse(charts.bar_chart(series([1]), title="t"))

    assert texts(root, "iq-axis-label")[-1] == "13:00"


def test_line_chart_draws_a_polyline_through_every_point_and_marks_non_zero_ones() -> None:
    root = parse(charts.line_chart(series([0, 2, 0, 1]), title="Failures per minute"))

    (line,) = root.findall("svg:polyline", NS)
    assert len(line.get("points", "").split()) == 4
    marks = root.findall("svg:circle", NS)
    assert [mark.findtext("svg:title", namespaces=NS) for mark in marks] == ["12:01: 2", "12:03: 1"]


def test_empty_series_draws_the_axes_and_says_no_data() -> None:
    for chart in (charts.bar_chart, charts.line_chart):
        root = parse(chart([], title="t"))
        assert texts(root, "iq-axis-label")[-1] == "no data"
        assert not root.findall("svg:rect", NS)
        assert not root.findall("svg:polyline", NS)


def test_title_is_escaped() -> None:
    svg = charts.bar_chart(series([1]), title='<script>alert("x")</script> & more')
    root = parse(svg)

    assert "<script>" not in svg
    assert root.findtext("svg:title", namespaces=NS) == '<script>alert("x")</script> & more'


@pytest.mark.parametrize(
    ("fraction", "width"), [(0.5, 39.5), (2.0, 79.0), (-1.0, 0.0), (None, 0.0)]
)
def test_load_bar_fills_its_clamped_fraction(fraction: float | None, width: float) -> None:
    root = parse(charts.load_bar(fraction, label="busy"))

    track, fill = root.findall("svg:rect", NS)
    assert float(track.get("width", "")) == 79
    assert float(fill.get("width", "")) == width
    assert root.findtext("svg:title", namespaces=NS) == "busy"


def test_lines_chart_draws_each_series_broken_where_a_minute_has_no_value() -> None:
    start = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)
    minutes = [start + timedelta(minutes=i) for i in range(5)]
    p50 = list(zip(minutes, [1.0, 2.0, None, 3.0, 4.0], strict=True))
    p95 = list(zip(minutes, [5.0, None, None, None, 8.0], strict=True))

    root = parse(charts.lines_chart([("p50", p50), ("p95", p95)], title="Latency", unit=" s"))

    lines = root.findall("svg:polyline", NS)
    # p50: two runs of two points around the gap; p95: two lone points, no line.
    assert [line.get("class") for line in lines] == ["iq-series-0", "iq-series-0"]
    points = root.findall("svg:circle", NS)
    tips = [point.findtext("svg:title", namespaces=NS) for point in points]
    assert tips == [
        "p50 10:00: 1 s",
        "p50 10:01: 2 s",
        "p50 10:03: 3 s",
        "p50 10:04: 4 s",
        "p95 10:00: 5 s",
        "p95 10:04: 8 s",
    ]
    assert (
        "".join(root.find("svg:text[@class='iq-legend']", NS).itertext()) == "\u25cf p50 \u25cf p95"
    )
