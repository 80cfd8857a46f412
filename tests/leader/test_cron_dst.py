"""Cron expressions in a time zone with daylight saving, across the 2026 changes in
Europe/Paris: a wall-clock time the fall-back day repeats fires once (its first occurrence), a
time the spring-forward day skips fires once at the first instant after the gap, and a schedule
whose hour field is a wildcard keeps its pace by the clock through both changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_iq.models import Entry
from django_iq.schedule import next_fire_time
from tests.leader.test_cron_schedules import pass_at, run_due
from tests.leader.test_leader import cron_leader, settings_with

NOOP = "tests.testapp.jobs.noop"
PARIS = "Europe/Paris"
# Europe/Paris in 2026: winter time (UTC+1) until 2026-03-29 01:00 UTC, when 02:00 becomes
# 03:00; summer time (UTC+2) until 2026-10-25 01:00 UTC, when 03:00 becomes 02:00 again.
SPRING_EVE = datetime(2026, 3, 28, 12, 0, tzinfo=UTC)
FALL_EVE = datetime(2026, 10, 24, 12, 0, tzinfo=UTC)


def fires(schedule: str, after: datetime, until: datetime) -> list[datetime]:
    """The fire times of ``schedule`` in Paris after ``after`` up to ``until``, in UTC."""
    found = []
    fire = next_fire_time(schedule, PARIS, after)
    while fire <= until:
        found.append(fire)
        fire = next_fire_time(schedule, PARIS, fire)
    return found


def utc(month: int, day: int, hour: int, minute: int) -> datetime:
    return datetime(2026, month, day, hour, minute, tzinfo=UTC)


def test_a_time_the_fall_back_day_repeats_fires_once_at_its_first_occurrence() -> None:
    got = fires("30 2 * * *", FALL_EVE, FALL_EVE + timedelta(days=3))

    # 02:30 summer time (00:30 UTC) on the 25th; 02:30 winter time (01:30 UTC) is skipped.
    assert got == [utc(10, 25, 0, 30), utc(10, 26, 1, 30), utc(10, 27, 1, 30)]


def test_every_minute_of_a_named_hour_runs_through_the_first_pass_of_that_hour_only() -> None:
    got = fires("*/20 2 * * *", FALL_EVE, utc(10, 25, 23, 0))

    assert got == [utc(10, 25, 0, 0), utc(10, 25, 0, 20), utc(10, 25, 0, 40)]
    assert fires("30 1-3 * * *", FALL_EVE, utc(10, 25, 23, 0)) == [
        utc(10, 24, 23, 30),  # 01:30 summer time
        utc(10, 25, 0, 30),  # 02:30 summer time; its winter-time repeat is skipped
        utc(10, 25, 2, 30),  # 03:30 winter time
    ]


def test_a_wildcard_hour_keeps_its_pace_by_the_clock_through_the_repeated_hour() -> None:
    got = fires("*/30 * * * *", utc(10, 24, 23, 45), utc(10, 25, 2, 15))

    assert got == [utc(10, 25, 0, 0) + timedelta(minutes=30 * n) for n in range(5)], (
        "every 30 minutes of real time, both passes of 02:00-03:00 included"
    )


def test_a_time_the_spring_forward_day_skips_fires_once_at_the_end_of_the_gap() -> None:
    got = fires("30 2 * * *", SPRING_EVE, SPRING_EVE + timedelta(days=3))

    # 02:30 does not exist on the 29th: it fires at 03:00 summer time (01:00 UTC), once.
    assert got == [utc(3, 29, 1, 0), utc(3, 30, 0, 30), utc(3, 31, 0, 30)]
    assert fires("*/20 2 * * *", utc(3, 28, 23, 0), utc(3, 29, 23, 0)) == [utc(3, 29, 1, 0)]
    assert fires("30 * * * *", utc(3, 28, 23, 45), utc(3, 29, 2, 45)) == [
        utc(3, 29, 0, 30),  # 01:30 winter time
        utc(3, 29, 1, 30),  # 03:30 summer time: one hour later, no extra fire at 03:00
        utc(3, 29, 2, 30),
    ]


def leader_fires(start: datetime, until: datetime) -> list[datetime]:
    """Drive one leader from ``start``, a pass at each fire time, running what is due; return
    the fire times run up to ``until``."""
    leader = cron_leader("a")
    pass_at([leader], start)
    fired: list[datetime] = []
    while True:
        (entry,) = Entry.objects.filter(cron_job__name="nightly")
        if entry.run_at > until:
            return fired
        pass_at([leader], entry.run_at)
        fired += run_due(entry.run_at)


NIGHTLY = {"nightly": {"job": NOOP, "schedule": "30 2 * * *", "timezone": PARIS}}


@pytest.mark.django_db(transaction=True)
@settings_with(CRON=NIGHTLY)
def test_the_leader_runs_a_nightly_job_once_on_the_fall_back_day() -> None:
    fired = leader_fires(FALL_EVE, FALL_EVE + timedelta(days=3))

    assert fired == [utc(10, 25, 0, 30), utc(10, 26, 1, 30), utc(10, 27, 1, 30)]


@pytest.mark.django_db(transaction=True)
@settings_with(CRON=NIGHTLY)
def test_the_leader_runs_a_nightly_job_at_the_end_of_the_gap_on_the_spring_forward_day() -> None:
    fired = leader_fires(SPRING_EVE, SPRING_EVE + timedelta(days=3))

    assert fired == [utc(3, 29, 1, 0), utc(3, 30, 0, 30), utc(3, 31, 0, 30)]
