"""PsutilReader samples at most once per window, so CPU readings do not flap between passes."""

from __future__ import annotations

import pytest

from django_iq import governor
from django_iq.governor import PsutilReader


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_readings_are_reused_within_the_sample_window(monkeypatch: pytest.MonkeyPatch) -> None:
    readings = iter([0.0, 37.0, 99.0])
    calls: list[float] = []

    def cpu_percent(interval: object = None) -> float:
        value = next(readings)
        calls.append(value)
        return value

    monkeypatch.setattr(governor.psutil, "cpu_percent", cpu_percent)
    clock = FakeClock()
    reader = PsutilReader(sample_seconds=1.0, clock=clock)

    assert reader.cpu_percent() == 0.0, "no window has passed yet: nothing measured"
    clock.now += 0.3
    assert reader.cpu_percent() == 0.0
    clock.now += 0.8
    assert reader.cpu_percent() == 37.0
    clock.now += 0.5
    assert reader.cpu_percent() == 37.0
    assert calls == [0.0, 37.0], "psutil is asked once to start, then once per elapsed window"
