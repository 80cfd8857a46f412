"""governor.py: throttle above the thresholds, stay throttled until both readings resume."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest

from django_iq.governor import ResourceGovernor
from tests.conftest import iq_settings_with


@dataclass
class StubReader:
    """Readings set by the test instead of measured by psutil."""

    cpu: float = 10.0
    memory: float = 10.0

    def cpu_percent(self) -> float:
        return self.cpu

    def memory_percent(self) -> float:
        return self.memory


def governor(reader: StubReader) -> ResourceGovernor:
    return ResourceGovernor(
        reader,
        cpu_throttle_percent=90,
        cpu_resume_percent=70,
        memory_throttle_percent=80,
        memory_resume_percent=60,
    )


def test_below_the_thresholds_every_idle_thread_is_a_slot() -> None:
    decision = governor(StubReader(cpu=50, memory=50)).decide(idle_threads=3)

    assert (decision.slots, decision.is_throttled, decision.reason) == (3, False, "ok")
    assert (decision.cpu_percent, decision.memory_percent) == (50, 50)


def test_no_idle_thread_means_no_slot_and_says_why() -> None:
    decision = governor(StubReader()).decide(idle_threads=0)

    assert (decision.slots, decision.is_throttled) == (0, False)
    assert decision.reason == "no idle processing thread"


def test_a_negative_idle_count_gives_no_slot() -> None:
    assert governor(StubReader()).decide(idle_threads=-2).slots == 0


@pytest.mark.parametrize(("cpu", "memory"), [(90, 10), (99, 10), (10, 80), (10, 95), (95, 95)])
def test_cpu_or_memory_at_or_above_its_throttle_level_stops_claiming(
    cpu: float, memory: float
) -> None:
    decision = governor(StubReader(cpu=cpu, memory=memory)).decide(idle_threads=4)

    assert (decision.slots, decision.is_throttled) == (0, True)
    assert decision.reason == f"throttled cpu={cpu:.0f}% memory={memory:.0f}%"


def test_throttling_holds_while_a_reading_is_between_resume_and_throttle() -> None:
    reader = StubReader(cpu=95)
    gov = governor(reader)
    assert gov.decide(4).is_throttled

    reader.cpu = 75  # below the throttle level (90) but above the resume level (70)
    decision = gov.decide(4)

    assert (decision.slots, decision.is_throttled) == (0, True)


def test_throttling_holds_until_both_readings_are_below_their_resume_levels() -> None:
    reader = StubReader(cpu=95, memory=10)
    gov = governor(reader)
    gov.decide(4)

    reader.cpu, reader.memory = 10, 70  # cpu resumed, memory between 60 and 80
    assert gov.decide(4).is_throttled

    reader.memory = 59
    decision = gov.decide(4)
    assert (decision.slots, decision.is_throttled) == (4, False)


def test_without_throttling_first_a_reading_between_the_levels_takes_work() -> None:
    decision = governor(StubReader(cpu=75, memory=70)).decide(idle_threads=2)

    assert (decision.slots, decision.is_throttled) == (2, False)


def test_the_last_decision_is_kept_for_heartbeats() -> None:
    gov = governor(StubReader(cpu=20, memory=30))
    assert gov.last.reason == "not asked yet"

    decision = gov.decide(1)

    assert gov.last is decision


def test_throttle_and_resume_are_logged_once_each(caplog: pytest.LogCaptureFixture) -> None:
    reader = StubReader(cpu=95)
    gov = governor(reader)
    with caplog.at_level(logging.INFO, logger="django_iq.governor"):
        gov.decide(1)
        gov.decide(1)
        reader.cpu = 10
        gov.decide(1)
        gov.decide(1)

    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.WARNING,
            "throttled: not claiming until cpu < 70% and memory < 60% "
            "cpu=95 memory=10 cpu_limit=90 memory_limit=80",
        ),
        (logging.WARNING, "resumed claiming cpu=10 memory=10"),
    ]


def test_by_default_cpu_use_never_throttles_but_memory_does(caplog) -> None:
    reader = StubReader(cpu=100, memory=10)
    with iq_settings_with(MEMORY_THROTTLE_PERCENT=90, MEMORY_RESUME_PERCENT=80):
        gov = ResourceGovernor(reader)  # the test settings raise the memory levels
    assert gov.cpu_throttle is None

    with caplog.at_level(logging.WARNING, logger="django_iq.governor"):
        assert gov.decide(2).slots == 2, "a busy CPU alone does not stop claiming"
        reader.memory = 95
        assert gov.decide(2).is_throttled
        reader.memory = 50
        assert gov.decide(2).slots == 2

    assert [r.getMessage() for r in caplog.records] == [
        "throttled: not claiming until memory < 80% "
        "cpu=100 memory=95 cpu_limit=off memory_limit=90",
        "resumed claiming cpu=100 memory=50",
    ]


def test_cpu_throttling_is_switched_on_by_a_level() -> None:
    with iq_settings_with(CPU_THROTTLE_PERCENT=95):
        gov = ResourceGovernor(StubReader(cpu=97, memory=10))

    assert gov.decide(1).is_throttled


def test_levels_default_to_the_settings() -> None:
    with iq_settings_with(
        CPU_THROTTLE_PERCENT=50,
        CPU_RESUME_PERCENT=40,
        MEMORY_THROTTLE_PERCENT=60,
        MEMORY_RESUME_PERCENT=30,
    ):
        gov = ResourceGovernor(StubReader(cpu=55, memory=10))

    assert (gov.cpu_throttle, gov.cpu_resume, gov.memory_throttle, gov.memory_resume) == (
        50,
        40,
        60,
        30,
    )
    assert gov.decide(3).is_throttled
